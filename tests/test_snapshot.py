"""Initial snapshot: existing tables reach the topic and the follower, then streaming goes on without a gap."""

from __future__ import annotations

import json
import signal

import pytest
from harness import ROOT, Cli, run_cli, wait_for
from jsonschema import Draft202012Validator
from test_faults import assert_exact
from workload import Workload

# The consistent method (one snapshot transaction, then the binlog); test_snapshot_live.py tests the default,
# the watermark method.
SNAPSHOT = "[snapshot]\nchunk_size = 200\nmethod = \"consistent\"\n"


def fill(leader, rows: int) -> None:
    """Tables that exist before the producer starts: an integer key, a composite key, no key with duplicates."""
    leader.execute(
        "CREATE DATABASE flvDb",
        "CREATE TABLE flvDb.accounts (id INT PRIMARY KEY, balance DECIMAL(12,2) NOT NULL, note VARCHAR(40))",
        "CREATE TABLE flvDb.items (a INT, b VARCHAR(8), qty INT, PRIMARY KEY (a, b))",
        "CREATE TABLE flvDb.log_nopk (k INT, v VARCHAR(10))",
        f"INSERT INTO flvDb.accounts SELECT seq, seq / 100, CONCAT('n', seq) FROM flvDb.seq_1_to_{rows}",
        "INSERT INTO flvDb.items SELECT seq % 50, CHAR(97 + seq % 3), seq FROM flvDb.seq_1_to_150",
        "INSERT INTO flvDb.log_nopk SELECT seq % 7, 'dup' FROM flvDb.seq_1_to_500",
    )


def snapshot_events(pipeline) -> list[dict]:
    return [e for e in pipeline.events() if "snapshot" in e]


def test_initial_snapshot_under_writes_killed_and_resumed(pipeline):
    leader = pipeline.leader
    fill(leader, 20_000)
    load = Workload(leader.port, seed=99)
    load.next_id = 30_000  # new accounts do not collide with the copied ones
    load.start()
    profile = pipeline.producer_profile(extra=SNAPSHOT)
    try:
        producer = Cli(["cdc-producer", str(profile)])
        # Kill it while it is copying accounts (100 chunks of 200 rows).
        wait_for(lambda: any(e["snapshot"].get("table") == "flvDb.accounts" and e["snapshot"].get("last_key")
                             for e in snapshot_events(pipeline) if "last_key" in e["snapshot"]), 60,
                 "the snapshot to be part-way through flvDb.accounts")
        producer.proc.send_signal(signal.SIGKILL)
        producer.proc.wait()
        copied = [e for e in snapshot_events(pipeline) if e["uri"].endswith("/accounts")]
        assert copied and not copied[-1]["snapshot"]["table_done"]  # really interrupted mid-table
        first_pass_last_key = copied[-1]["snapshot"]["last_key"]

        producer = Cli(["cdc-producer", str(profile)])
        pipeline.procs.append(producer)
        assert "resuming the snapshot interrupted at flvDb.accounts" in producer.wait_line("resuming the snapshot")
        producer.wait_line("streaming from", timeout=120)
        consumer = pipeline.start_consumer()
        load.pause()
        pipeline.wait_synced(timeout=120)
        assert_exact(pipeline)
        load.resume()
        wait_for(lambda: load.transactions > 50, 30, "more writes after the snapshot")
        load.pause()
        pipeline.wait_synced(timeout=60)
        assert_exact(pipeline)
    finally:
        load.stop()

    events = pipeline.events()
    accounts = [e for e in events if "snapshot" in e and e["uri"].endswith("/accounts")]
    keys = [e["snapshot"]["last_key"] for e in accounts if e["snapshot"].get("last_key")]
    # The second run continued after the last copied key instead of starting the table over.
    assert keys == sorted(keys) and first_pass_last_key in keys
    ids = [r["cols"][0]["SignedInteger"] for e in accounts if "Add" in e["operation"] for r in e["operation"]["Add"]["rows"]]
    assert len(ids) == len(set(ids))  # no row copied twice across the kill
    # Every pre-existing row still on the leader was copied (the load inserts only ids >= 30000).
    still_there = {i for (i, *_) in pipeline.leader.rows("flvDb", "accounts") if i <= 20_000}
    assert len(still_there) > 19_000 and still_there <= set(ids)
    # Rows the load inserted before the second pass were read by it; their binlog inserts were dropped.
    assert all(i >= 30_000 for i in ids if i > 20_000)
    assert [e["sequence"] for e in events] == list(range(len(events)))
    assert any("windows" in e for e in events)  # the resumed snapshot's windows were on the topic
    validator = Draft202012Validator(json.loads((ROOT / "cdc_stream/event.schema.json").read_text()))
    for e in events:
        validator.validate(e)
    assert producer.stop() == 0 and consumer.stop() == 0


def test_snapshot_repairs_a_damaged_follower_table(pipeline):
    leader, follower = pipeline.leader, pipeline.follower
    fill(leader, 1000)
    producer = pipeline.start_producer(pipeline.producer_profile(extra=SNAPSHOT))
    consumer = pipeline.start_consumer()
    pipeline.wait_applied()
    assert_exact(pipeline)
    assert producer.stop() == 0

    follower.execute("DELETE FROM flvDb.accounts WHERE id <= 10", "UPDATE flvDb.accounts SET note = 'oops' WHERE id = 500",
                     "INSERT INTO flvDb.accounts VALUES (999999, 1, 'extra')")
    leader.execute("UPDATE flvDb.accounts SET note = 'while stopped' WHERE id = 20")
    assert follower.rows("flvDb", "accounts") != leader.rows("flvDb", "accounts")

    bad = run_cli("cdc-producer", str(pipeline.producer_profile(extra=SNAPSHOT)), "--snapshot", "flvDb.nope")
    assert bad.returncode == 2
    assert "--snapshot: no such table (or excluded by [filters]): flvDb.nope" in bad.stderr.decode()

    producer = Cli(["cdc-producer", str(pipeline.producer_profile(extra=SNAPSHOT)), "--snapshot", "flvDb.accounts"])
    pipeline.procs.append(producer)
    producer.wait_line("streaming from")
    assert "snapshot of 1 tables at gtid" in producer.stderr
    leader.execute("UPDATE flvDb.accounts SET note = 'after' WHERE id = 30", "INSERT INTO flvDb.items VALUES (99, 'z', 1)")
    pipeline.wait_synced()
    assert_exact(pipeline)
    assert producer.stop() == 0 and consumer.stop() == 0


def test_snapshot_mode_never_streams_only(pipeline):
    fill(pipeline.leader, 100)
    producer = pipeline.start_producer(pipeline.producer_profile(extra='[snapshot]\nmode = "never"\n'))
    pipeline.leader.execute("INSERT INTO flvDb.accounts VALUES (5000, 1, 'new')")
    pipeline.wait_published()
    events = pipeline.events()
    assert len(events) == 1 and "snapshot" not in events[0]
    assert events[0]["operation"]["Add"]["rows"][0]["cols"][0] == {"SignedInteger": 5000}
    assert producer.stop() == 0


def test_a_triggers_sql_mode_is_logged_as_the_leaders_query_event_logs_it():
    """snapshot.trigger_events: SHOW CREATE TRIGGER's sql_mode names -> the number the consumer sets (as a native
    replica has it from the CREATE TRIGGER's Query event); a name the table lacks stops the copy, naming it."""
    from cdc_producer.snapshot import sql_mode_bits
    from cdc_stream.errors import DataError

    # MariaDB 10.11's default, as the leader logs it (docs/events.md's example Query events: 1411383296)
    default = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"
    assert sql_mode_bits(default, "mariadb") == 1411383296
    assert sql_mode_bits("", "mariadb") == 0
    assert sql_mode_bits("ANSI_QUOTES,pipes_as_concat", "mariadb") == 4 | 2
    assert sql_mode_bits("EMPTY_STRING_IS_NULL,TIME_ROUND_FRACTIONAL", "mariadb") == 1 << 32 | 1 << 34
    assert sql_mode_bits("TIME_TRUNCATE_FRACTIONAL", "mysql") == 1 << 32
    with pytest.raises(DataError, match="the leader's sql_mode TIME_TRUNCATE_FRACTIONAL is unknown to cdc-producer"):
        sql_mode_bits("TIME_TRUNCATE_FRACTIONAL", "mariadb")
