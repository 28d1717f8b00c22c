"""One topic per table, ordered by a transaction topic, on both backends."""

from __future__ import annotations

import json

from harness import run_cli, wait_for

from cdc_stream.topics.fluvio import FluvioStream

STATEMENTS = [
    "CREATE DATABASE flvDb",
    "CREATE TABLE flvDb.orders (id INT PRIMARY KEY, total INT)",
    "CREATE TABLE flvDb.lines (order_id INT, n INT, sku VARCHAR(8), PRIMARY KEY (order_id, n))",
    # One source transaction across both tables, interleaved: the follower must see it whole and in order.
    "BEGIN",
    "INSERT INTO flvDb.orders VALUES (1, 0)",
    "INSERT INTO flvDb.lines VALUES (1, 1, 'a'), (1, 2, 'b')",
    "UPDATE flvDb.orders SET total = 2 WHERE id = 1",
    "DELETE FROM flvDb.lines WHERE order_id = 1 AND n = 1",
    "UPDATE flvDb.orders SET total = 1 WHERE id = 1",
    "COMMIT",
    "ALTER TABLE flvDb.lines ADD COLUMN qty INT DEFAULT 1",
    "INSERT INTO flvDb.lines VALUES (1, 3, 'c', 5)",
]


def run(pipeline, backend_extra: str):
    extra = '[stream]\ntopic = "{database}_{table}"\n' + backend_extra
    producer = pipeline.start_producer(_profile(pipeline, "producer", extra))
    consumer = pipeline.start_consumer(_profile(pipeline, "consumer", extra))
    conn = pipeline.leader.connect()
    with conn.cursor() as cur:
        for sql in STATEMENTS:
            cur.execute(sql)
    conn.close()
    return producer, consumer


def _profile(pipeline, kind: str, stream_section: str):
    """The pipeline's profile with its [stream] section replaced."""
    path = pipeline.producer_profile() if kind == "producer" else pipeline.consumer_profile()
    text = path.read_text()
    head = text[: text.index("[stream]")]
    path.write_text(head + stream_section)
    return path


def wait_applied_txns(pipeline, n: int):
    wait_for(lambda: pipeline.checkpoint("mysql-cdc-transactions") == n, 30, f"{n} transactions applied")


def test_per_table_topics_embedded(pipeline):
    producer, consumer = run(pipeline, f'path = "{pipeline.stream_path}"\n')
    wait_applied_txns(pipeline, 6)
    assert pipeline.follower.rows("flvDb", "orders") == [(1, 1)]
    assert pipeline.follower.rows("flvDb", "lines") == [(1, 2, "b", 1), (1, 3, "c", 5)]

    listing = run_cli("cdc-topic", "list", "--path", str(pipeline.stream_path)).stdout.decode().split()
    assert listing == ["NAME", "RECORDS", "flvDb", "1", "flvDb_lines", "5", "flvDb_orders", "4",
                       "mysql-cdc-transactions", "6"]
    txns = [json.loads(l) for l in run_cli("cdc-topic", "consume", "mysql-cdc-transactions", "-B", "-d", "--path",
                                            str(pipeline.stream_path)).stdout.decode().splitlines()]
    assert [t["topics"] for t in txns] == [
        {"flvDb": [0, 1]}, {"flvDb_orders": [0, 1]}, {"flvDb_lines": [0, 1]},
        {"flvDb_orders": [1, 3], "flvDb_lines": [1, 2]},  # the multi-table transaction: 5 events, 2 topics
        {"flvDb_lines": [3, 1]}, {"flvDb_lines": [4, 1]},
    ]
    assert [t["sequence"] for t in txns] == [[0, 0], [1, 1], [2, 2], [3, 7], [8, 8], [9, 9]]
    # cdc-topic with a profile and no topic: the change events, in source order, through the layout.
    shown = run_cli("cdc-topic", "consume", "-B", "-d", "-k", "--profile", str(pipeline.tmp / "producer.toml"))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.decode().splitlines()
    events = [json.loads(line.split("] ", 1)[1]) for line in lines]
    assert [e["sequence"] for e in events] == list(range(10))
    assert [next(iter(e["operation"])) for e in events] == [
        "Query", "Query", "Query", "Add", "Add", "Update", "Delete", "Update", "Query", "Add"]
    assert {line.split("] ", 1)[0] for line in lines[3:8]} == {f"[{events[3]['txn']['id']}"}
    assert txns[-1]["gtid_set"] == pipeline.leader.gtid()
    assert producer.stop() == 0

    # A restart resumes from the transaction topic's tail: no gap, no repeat.
    producer = pipeline.start_producer(_profile(pipeline, "producer", '[stream]\ntopic = "{database}_{table}"\n'
                                                f'path = "{pipeline.stream_path}"\n'))
    assert "next sequence 10" in producer.wait_line("streaming from")
    pipeline.leader.execute("INSERT INTO flvDb.orders VALUES (2, 9)")
    wait_applied_txns(pipeline, 7)
    assert pipeline.follower.rows("flvDb", "orders") == [(1, 1), (2, 9)]
    assert producer.stop() == 0 and consumer.stop() == 0


def test_per_table_topics_fluvio(pipeline, fluvio_endpoint):
    producer, consumer = run(pipeline, f'fluvio_endpoint = "{fluvio_endpoint}"\ntransaction_topic = "txn-{id(pipeline)}"\n')
    txn_topic = f"txn-{id(pipeline)}"
    wait_for(lambda: pipeline.checkpoint(txn_topic) == 6, 60, "6 transactions applied through Fluvio")
    assert pipeline.follower.rows("flvDb", "orders") == [(1, 1)]
    assert pipeline.follower.rows("flvDb", "lines") == [(1, 2, "b", 1), (1, 3, "c", 5)]
    with FluvioStream(endpoint=fluvio_endpoint) as stream:
        names = dict(stream.list_topics())
    # Fluvio topic names are lowercase letters, digits and '-'.
    assert (names["flvdb"], names["flvdb-orders"], names["flvdb-lines"], names[txn_topic]) == (1, 4, 5, 6)
    assert producer.stop() == 0 and consumer.stop() == 0
