"""MariaDB log_bin_compress=ON through the real producer and consumer, against the real server.

The leader compresses every query and row event of 10 bytes or more (QUERY_COMPRESSED_EVENT,
WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT_V1) and encrypts its binlog files (encrypt_binlog=ON,
which the dump protocol hides: the leader decrypts what it sends). Before issue 14 the producer
skipped the compressed events silently ("published 1 transactions (1 events, 0 rows), skipped 3"
and no table on the follower). The follower must end up equal to the leader, row bytes and
table definitions.
"""

from __future__ import annotations

import os
import random

import pytest
from conftest import Pipeline, pipeline_on
from harness import Server, quote

DB = "flvDb"
LARGE = 700_000  # bytes of one BLOB value (several compressed row events' worth)


@pytest.fixture(scope="module")
def compressed_leader(tmp_path_factory):
    base = tmp_path_factory.mktemp("compressed-leader")
    keys = base / "keys.txt"
    keys.write_text("1;" + os.urandom(32).hex() + "\n")
    args = (
        "--log-bin-compress=ON --log-bin-compress-min-len=10 "
        f"--plugin-load-add=file_key_management --file-key-management-filename={keys} --encrypt-binlog=ON"
    )
    server = Server("compressed-leader", base / "server", args=args).start()  # docker/install.sh passes them on
    yield server
    server.stop()


@pytest.fixture
def compressed_pipeline(tmp_path, compressed_leader, follower):
    yield from pipeline_on(tmp_path, compressed_leader, follower)


def exact_rows(server: Server, table: str) -> list[tuple]:
    """Every column of every row as the bytes the server stores, in key order."""
    columns = [c for (c,) in server.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
        "ORDER BY ORDINAL_POSITION", (DB, table))]
    select = ", ".join(f"CAST({quote(c)} AS BINARY)" for c in columns)
    return sorted(server.query(f"SELECT {select} FROM {quote(DB)}.{quote(table)}"), key=repr)


def binlog_event_types(server: Server) -> set[str]:
    types: set[str] = set()
    for (name, *_rest) in server.query("SHOW BINARY LOGS"):
        types |= {row[2] for row in server.query(f"SHOW BINLOG EVENTS IN '{name}'")}
    return types


def workload(server: Server, seed: int) -> None:
    """DDL, 2,000 inserts in single- and multi-row statements, updates, deletes, a row of ~1 MB."""
    rng = random.Random(seed)
    conn = server.connect()
    conn.autocommit(False)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(DB)}")
            cur.execute(f"CREATE TABLE {quote(DB)}.items (id INT PRIMARY KEY, name VARCHAR(100), qty INT, "
                        "price DECIMAL(10,2), note MEDIUMTEXT, payload LONGBLOB, doc JSON, at DATETIME(6))")
            cur.execute(f"CREATE TABLE {quote(DB)}.nopk (k INT, v VARCHAR(20))")
            for start in range(0, 2000, 100):  # 20 transactions: 50 single-row inserts + one 50-row insert
                for i in range(start, start + 50):
                    cur.execute(f"INSERT INTO {quote(DB)}.items VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                                (i, f"item {i} é", rng.randint(0, 9), f"{rng.randint(0, 99999) / 100:.2f}",
                                 "n" * rng.randint(0, 300), os.urandom(rng.randint(0, 64)),
                                 f'{{"i": {i}, "tags": ["a", "b"]}}', f"2024-01-0{i % 9 + 1} 10:00:00.{i:06d}"))
                cur.executemany(f"INSERT INTO {quote(DB)}.items (id, name, qty) VALUES (%s, %s, %s)",
                                [(i, f"bulk {i}", i % 7) for i in range(start + 50, start + 100)])
                cur.execute(f"INSERT INTO {quote(DB)}.nopk VALUES (%s, 'same'), (%s, 'same')", (start, start))
                conn.commit()
            cur.execute(f"UPDATE {quote(DB)}.items SET qty = qty + 1, note = CONCAT('upd ', id) WHERE id % 3 = 0")
            conn.commit()
            cur.execute(f"DELETE FROM {quote(DB)}.items WHERE id % 5 = 1")
            cur.execute(f"DELETE FROM {quote(DB)}.nopk WHERE k < 500 LIMIT 3")
            conn.commit()
            cur.execute(f"ALTER TABLE {quote(DB)}.items ADD COLUMN extra VARCHAR(10) DEFAULT 'x'")
            big = os.urandom(LARGE)
            cur.execute(f"INSERT INTO {quote(DB)}.items (id, name, payload, note) VALUES (5000, 'large', %s, %s)",
                        (big, "t" * 300_000))
            conn.commit()
            cur.execute(f"UPDATE {quote(DB)}.items SET payload = REVERSE(payload), extra = 'y' WHERE id = 5000")
            conn.commit()
    finally:
        conn.close()


def assert_same(pipeline: Pipeline) -> None:
    for table in ("items", "nopk"):
        assert pipeline.follower.query(f"SHOW CREATE TABLE {quote(DB)}.{quote(table)}") == \
            pipeline.leader.query(f"SHOW CREATE TABLE {quote(DB)}.{quote(table)}")
        leader = exact_rows(pipeline.leader, table)
        assert exact_rows(pipeline.follower, table) == leader
    assert len(exact_rows(pipeline.leader, "items")) == 2000 - 400 + 1


def test_log_bin_compress_replicates_exactly(compressed_pipeline):
    p = compressed_pipeline
    producer = p.start_producer()
    consumer = p.start_consumer()
    workload(p.leader, seed=14)
    p.wait_synced(timeout=120)

    types = binlog_event_types(p.leader)
    assert {"Query_compressed", "Write_rows_compressed_v1", "Update_rows_compressed_v1",
            "Delete_rows_compressed_v1", "Start_encryption"} <= types, types
    assert_same(p)
    events = p.events()
    assert sum(len(e["operation"].get("Add", {}).get("rows", [])) for e in events if "Add" in e["operation"]) == 2041
    queries = [e["operation"]["Query"] for e in events if "Query" in e["operation"]]
    assert queries[0] == f"CREATE DATABASE IF NOT EXISTS {quote(DB)}"
    assert queries[-1] == f"ALTER TABLE {quote(DB)}.items ADD COLUMN extra VARCHAR(10) DEFAULT 'x'"
    assert producer.stop() == 0 and consumer.stop() == 0
    assert "Traceback" not in producer.stderr + consumer.stderr


def test_log_bin_compress_with_binlog_checksum_none(compressed_pipeline):
    """Without checksums the table maps' last metadata field (the primary key) used to be dropped."""
    p = compressed_pipeline
    p.leader.execute("SET GLOBAL binlog_checksum = 'NONE'")
    try:
        producer = p.start_producer()
        consumer = p.start_consumer()
        workload(p.leader, seed=15)
        p.wait_synced(timeout=120)
        assert_same(p)
        rows = [e for e in p.events() if "Add" in e["operation"]]
        assert {e["uri"].rsplit("/", 1)[1]: e["pk"] for e in rows} == {"items": ["id"], "nopk": []}
        assert producer.stop() == 0 and consumer.stop() == 0
    finally:
        p.leader.execute("SET GLOBAL binlog_checksum = 'CRC32'")
