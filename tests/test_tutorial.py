"""The Fluvio MySQL CDC tutorial, end to end on real servers with the real CLIs."""

from __future__ import annotations

from pathlib import Path

from harness import run_cli

TUTORIAL = (Path(__file__).parent / "sql/tutorial.sql").read_text().split(";\n")
STATEMENTS = [s.strip() for s in TUTORIAL if s.strip()]


def s(v):
    return {"String": v}


def d(y, m, day):
    return {"Date": {"year": y, "month": m, "day": day}}


PUFFBALL = [s("Puffball"), s("Diane"), s("hamster"), s("f"), d(1999, 3, 30)]
JACK = [s("Jack"), s("Peter"), s("dog"), s("m"), d(1999, 3, 30)]
JACK_AFTER = [s("Jack"), s("Peter"), s("dog"), s("m"), d(1989, 8, 31)]
SPOT = [s("Spot"), s("Jane"), s("dog"), s("m"), d(2010, 11, 2), "Null"]
SPOT_AFTER = [s("Spot"), s("Jane"), s("dog"), s("m"), d(2010, 11, 2), s("White")]
COLS5 = ["name", "owner", "species", "sex", "birth"]
COLS6 = COLS5 + ["color"]

EXPECTED_OPERATIONS = [
    {"Query": "CREATE DATABASE flvDb"},
    {"Query": "CREATE TABLE pet (name VARCHAR(20), owner VARCHAR(20), species VARCHAR(20), sex CHAR(1), birth DATE)"},
    {"Add": {"rows": [{"cols": PUFFBALL}]}},
    {"Add": {"rows": [{"cols": JACK}]}},
    {"Update": {"rows": [{"before_cols": JACK, "after_cols": JACK_AFTER}]}},
    {"Query": "ALTER TABLE pet ADD COLUMN color VARCHAR(20)"},
    {"Delete": {"rows": [{"cols": PUFFBALL + ["Null"]}]}},
    {"Add": {"rows": [{"cols": SPOT}]}},
    {"Update": {"rows": [{"before_cols": SPOT, "after_cols": SPOT_AFTER}]}},
]
EXPECTED_PET = [
    ("Jack", "Peter", "dog", "m", __import__("datetime").date(1989, 8, 31), None),
    ("Spot", "Jane", "dog", "m", __import__("datetime").date(2010, 11, 2), "White"),
]


def run_sql(leader, statements):
    conn = leader.connect()
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
    conn.close()


def test_tutorial_scenario(pipeline):
    producer = pipeline.start_producer()
    consumer = pipeline.start_consumer()
    run_sql(pipeline.leader, STATEMENTS)
    pipeline.wait_synced()

    events = pipeline.events()
    assert [e["operation"] for e in events] == EXPECTED_OPERATIONS
    assert [e["sequence"] for e in events] == list(range(9))
    assert [e["uri"] for e in events] == ["flv://mysql-srv1/flvDb"] * 2 + ["flv://mysql-srv1/flvDb/pet"] * 3 + [
        "flv://mysql-srv1/flvDb"] + ["flv://mysql-srv1/flvDb/pet"] * 3
    assert [e.get("columns") for e in events] == [None, None, COLS5, COLS5, COLS5, None, COLS6, COLS6, COLS6]
    assert all(e["txn"] == {"id": e["gtid"], "index": 0, "last": True} for e in events)
    assert [e.get("database") for e in events if "Query" in e["operation"]] == ["flvDb"] * 3
    assert all(e["bn_file"]["fileName"].startswith("binlog.") for e in events)
    offsets = [e["bn_file"]["offset"] for e in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == 9
    assert events[-1]["gtid_set"] == pipeline.leader.gtid()

    assert pipeline.follower.rows("flvDb", "pet") == EXPECTED_PET
    assert pipeline.leader.rows("flvDb", "pet") == EXPECTED_PET
    assert pipeline.checkpoint() == 9

    assert producer.stop() == 0
    assert consumer.stop() == 0
    assert "Traceback" not in producer.stderr + consumer.stderr


def test_restart_with_ddl_while_stopped(pipeline):
    """Stop both halfway, change the leader (DDL included) while they are down: no loss, no duplicate."""
    producer = pipeline.start_producer()
    consumer = pipeline.start_consumer()
    run_sql(pipeline.leader, STATEMENTS[:5])  # up to the two inserts
    pipeline.wait_synced()
    assert producer.stop() == 0
    assert consumer.stop() == 0

    run_sql(pipeline.leader, ["USE flvDb"] + STATEMENTS[5:7])  # UPDATE and ALTER while both are down

    producer = pipeline.start_producer()
    assert "next sequence 4" in producer.wait_line("streaming from")
    consumer = pipeline.start_consumer()
    assert "from offset 4" in consumer.wait_line("applying topic")
    run_sql(pipeline.leader, ["USE flvDb"] + STATEMENTS[7:])
    pipeline.wait_synced()

    events = pipeline.events()
    assert [e["operation"] for e in events] == EXPECTED_OPERATIONS
    assert [e["sequence"] for e in events] == list(range(9))
    assert len({e["gtid"] for e in events}) == 9
    assert pipeline.follower.rows("flvDb", "pet") == EXPECTED_PET
    assert producer.stop() == 0 and consumer.stop() == 0


def test_cdc_topic_consume_prints_the_events(pipeline):
    producer = pipeline.start_producer()
    run_sql(pipeline.leader, STATEMENTS)
    pipeline.wait_published()
    producer.stop()

    out = run_cli("cdc-topic", "consume", "rust-mysql-cdc", "-B", "-d", "--path", str(pipeline.stream_path))
    assert out.returncode == 0
    lines = out.stdout.decode().splitlines()
    assert [__import__("json").loads(l)["operation"] for l in lines] == EXPECTED_OPERATIONS
    assert out.stderr.decode().strip() == "Consuming records from 'rust-mysql-cdc' starting from the beginning of log"

    tail = run_cli("cdc-topic", "consume", "rust-mysql-cdc", "-T", "2", "-d", "-k", "--path", str(pipeline.stream_path))
    tail_lines = tail.stdout.decode().splitlines()
    assert len(tail_lines) == 2
    gtids = [__import__("json").loads(l)["gtid"] for l in lines[-2:]]
    assert tail_lines == [f"[{g}] {l}" for g, l in zip(gtids, lines[-2:])]

    listing = run_cli("cdc-topic", "list", "--path", str(pipeline.stream_path))
    assert listing.returncode == 0
    assert listing.stdout.decode().split() == ["NAME", "RECORDS", "rust-mysql-cdc", "9"]
