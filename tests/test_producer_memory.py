"""One very large source transaction: the producer publishes it in chunks and the consumer applies it, both with bounded memory;
a SIGKILL between chunks loses nothing, and the follower ends equal to the leader."""

from __future__ import annotations

import signal
import sys

from harness import wait_for

DB = "flvDb"
ROWS = 300_000
# The producer's peak resident memory must stay under this while it publishes the
# transaction; holding the transaction's decoded rows whole takes several times it
# (checked below from the rows as they are on the topic).
PEAK_RSS_BOUND_MB = 160

SCHEMA = [
    f"CREATE DATABASE {DB}",
    f"CREATE TABLE {DB}.big (id BIGINT PRIMARY KEY, n INT, name VARCHAR(64), amount DECIMAL(12,2), "
    "created DATETIME(6))",
]


def insert_sql(rows: int, first: int = 1) -> str:
    """One INSERT ... SELECT of `rows` rows (MariaDB's sequence engine): one source transaction."""
    return (
        f"INSERT INTO {DB}.big SELECT seq, seq * 7, CONCAT('name of row ', seq), seq / 100, "
        f"'2024-01-01' + INTERVAL seq SECOND + INTERVAL seq MOD 1000000 MICROSECOND "
        f"FROM seq_{first}_to_{first + rows - 1}"
    )


def peak_rss_mb(pid: int) -> float:
    """VmHWM (peak resident set) of a live process, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def deep_size(value) -> int:
    """Bytes of a decoded value and everything it holds (dicts, lists, strings, ints)."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(k) + deep_size(v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(deep_size(v) for v in value)
    return size


def txn_events(events: list[dict], txn: str) -> list[dict]:
    return [e for e in events if e["txn"]["id"] == txn]


def assert_one_whole_copy(events: list[dict], txn: str, rows: int, whole_topic: bool = True) -> list[dict]:
    """The transaction's events on the topic end with exactly one complete copy of all its rows,
    published in chunks (index 0..k, only the last with txn.last); returns that copy.
    `whole_topic`: the topic holds every event (not one of per-table topics), numbered without gaps."""
    mine = txn_events(events, txn)
    starts = [i for i, e in enumerate(mine) if e["txn"]["index"] == 0]
    copy = mine[starts[-1]:]
    assert [e["txn"]["index"] for e in copy] == list(range(len(copy)))
    assert [e["txn"]["last"] for e in copy] == [False] * (len(copy) - 1) + [True]
    assert sum(len(e["operation"]["Add"]["rows"]) for e in copy) == rows
    if whole_topic:
        assert [e["sequence"] for e in events] == list(range(len(events)))  # no gap, no repeat
    return copy


def test_large_transaction_is_published_with_bounded_memory(pipeline):
    leader = pipeline.leader
    producer, consumer = pipeline.start_producer(), pipeline.start_consumer()
    leader.execute(*SCHEMA)
    pipeline.wait_synced()
    leader.execute(insert_sql(ROWS), db="mysql")
    txn = leader.gtid()
    pipeline.wait_published(timeout=300)
    peak = peak_rss_mb(producer.proc.pid)
    pipeline.wait_applied(timeout=600)
    assert pipeline.follower.rows(DB, "big") == leader.rows(DB, "big")

    events = pipeline.events()
    copy = assert_one_whole_copy(events, txn, ROWS)
    assert len(copy) > 1 and len(txn_events(events, txn)) == len(copy)  # chunks, and no crash: one copy
    # What holding the transaction would take: its rows decoded as the producer holds them.
    sample = copy[0]["operation"]["Add"]["rows"][:1000]
    held_mb = ROWS * sum(deep_size(r["cols"]) for r in sample) / len(sample) / 2**20
    print(f"one transaction of {ROWS} rows in {len(copy)} events: producer peak RSS {peak:.0f} MB; "
          f"its rows decoded whole: {held_mb:.0f} MB")
    assert held_mb > 2 * PEAK_RSS_BOUND_MB, held_mb
    assert peak < PEAK_RSS_BOUND_MB, f"producer peak RSS {peak:.0f} MB for one transaction of {ROWS} rows"
    consumer_peak = peak_rss_mb(consumer.proc.pid)
    assert consumer_peak < PEAK_RSS_BOUND_MB, f"consumer peak RSS {consumer_peak:.0f} MB for {ROWS} rows"
    assert producer.stop() == 0 and consumer.stop() == 0


def test_sigkill_between_chunks_republishes_the_transaction_whole(pipeline):
    leader = pipeline.leader
    producer, consumer = pipeline.start_producer(), pipeline.start_consumer()
    leader.execute(*SCHEMA)
    leader.execute(insert_sql(1000), db="mysql")
    pipeline.wait_synced()
    leader.execute(insert_sql(ROWS, first=1001), db="mysql")
    txn = leader.gtid()

    def partial_tail() -> bool:
        last = pipeline.last_event()
        return last.get("txn", {}).get("id") == txn and not last["txn"]["last"] and last["txn"]["index"] >= 2

    wait_for(partial_tail, 120, f"a partial copy of transaction {txn} at the topic's tail", interval=0.005)
    producer.proc.send_signal(signal.SIGKILL)
    producer.proc.wait()
    tail = pipeline.last_event()
    assert tail["txn"]["id"] == txn and not tail["txn"]["last"]  # the kill hit between chunks

    producer = pipeline.start_producer()
    pipeline.wait_synced(timeout=600)
    assert pipeline.follower.rows(DB, "big") == leader.rows(DB, "big")
    events = pipeline.events()
    copy = assert_one_whole_copy(events, txn, ROWS)
    partial = txn_events(events, txn)[:-len(copy)]
    assert partial and not any(e["txn"]["last"] for e in partial)  # the partial copy stays, never completed
    assert copy[-1]["gtid_set"] == txn
    assert producer.stop() == 0 and consumer.stop() == 0


def test_large_transaction_with_per_table_topics(pipeline):
    """Per-table topics: chunks go to the table's topic as they come, the transaction record
    (written last) names all of them, and the consumer replays the transaction whole."""
    extra = 'topic = "{database}_{table}"'
    leader = pipeline.leader
    producer = pipeline.start_producer(pipeline.producer_profile(extra=extra))
    consumer = pipeline.start_consumer(pipeline.consumer_profile(extra=extra))
    leader.execute(*SCHEMA)
    rows = ROWS // 3
    leader.execute(insert_sql(rows), db="mysql")
    txn = leader.gtid()
    txn_topic = "mysql-cdc-transactions"
    pipeline.wait_published(timeout=300, topic=txn_topic)
    records = pipeline.events(txn_topic)
    wait_for(lambda: pipeline.checkpoint(txn_topic) == len(records), 300, "the consumer to apply every transaction")
    assert pipeline.follower.rows(DB, "big") == leader.rows(DB, "big")

    events = pipeline.events(f"{DB}_big")
    copy = assert_one_whole_copy(events, txn, rows, whole_topic=False)
    first = events.index(copy[0])  # the topic's offsets start at 0
    assert records[-1]["txn"] == txn and records[-1]["topics"] == {f"{DB}_big": [first, len(copy)]}
    assert len(copy) > 1
    # The consumer merges the table topics as it reads them: it never holds the transaction
    # (its decoded rows would take ~220 MB here, see the first test).
    consumer_peak = peak_rss_mb(consumer.proc.pid)
    assert consumer_peak < PEAK_RSS_BOUND_MB, f"consumer peak RSS {consumer_peak:.0f} MB for {rows} rows"
    assert producer.stop() == 0 and consumer.stop() == 0
