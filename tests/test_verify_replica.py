"""spark/verify_replica.py on real servers: run as users run it (a subprocess, Spark local[2])."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install pyspark (the audit job needs it)")

from harness import ROOT

sys.path.insert(0, str(ROOT / "spark"))
import audit_compare
import audit_tables

from cdc_stream.filters import TableFilter
from cdc_stream.values import to_param

SCRIPT = ROOT / "spark" / "verify_replica.py"
# Test-only: C1-compiled JVM. Halves Spark's start and first query on tiny tables;
# real audits keep the default (C2 is faster on big tables).
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SCHEMA = [
    "CREATE DATABASE flvDb",
    """CREATE TABLE flvDb.items (id INT PRIMARY KEY, price DECIMAL(12,4), seen DATETIME(6), at TIMESTAMP(6) NULL,
        big BIGINT UNSIGNED, raw VARBINARY(8), note VARCHAR(20))""",
    "CREATE TABLE flvDb.pairs (k INT, name VARCHAR(10), qty INT, PRIMARY KEY (k, name))",
    "CREATE TABLE flvDb.log (a INT, b VARCHAR(10))",  # no primary key
]
ROWS = [
    "INSERT INTO flvDb.items VALUES (1, 12.5000, '2024-01-02 03:04:05.000001', '2024-06-01 12:00:00.5', "
    "18446744073709551615, 0x00ff, 'one'), (2, -0.0001, NULL, NULL, 0, '', NULL), "
    "(3, 99999999.9999, '1999-12-31 23:59:59.999999', '2038-01-19 03:14:07', 9007199254740993, 0x61, 'three'), "
    "(4, 0, '2000-01-01 00:00:00', NULL, 1, NULL, 'four'), (5, 1, NULL, NULL, NULL, NULL, 'five')",
    "INSERT INTO flvDb.pairs VALUES (1, 'a', 10), (1, 'b', 11), (2, 'a', 20), (3, 'z', 30)",
    "INSERT INTO flvDb.log VALUES (1, 'x'), (1, 'x'), (2, NULL)",
]
CLEAN = {"missing": [], "extra": [], "changed": [], "pending": []}


def table(name, leader_rows, follower_rows, **diffs):
    return {"database": "flvDb", "table": name, "leader_rows": leader_rows, "follower_rows": follower_rows,
            **CLEAN, **diffs}


def replicated(pipeline):
    """Producer and consumer running, the three tables created and filled on both sides."""
    pipeline.start_producer()
    consumer = pipeline.start_consumer()
    pipeline.leader.execute("SET time_zone = '+00:00'", *SCHEMA, *ROWS)
    pipeline.wait_synced(timeout=60)
    return consumer


def audit_run(pipeline, *extra: str, debug: bool = True, profiles: tuple | None = None) -> tuple[int, dict | None, str, str]:
    """Run the audit job to completion: (exit code, JSON report, stdout, stderr; tracebacks unless debug=False)."""
    report = pipeline.tmp / "report.json"
    report.unlink(missing_ok=True)
    producer, consumer = profiles or (pipeline.producer_profile(), pipeline.consumer_profile())
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--producer-profile", str(producer),
         "--consumer-profile", str(consumer), "--report", str(report),
         "--master", "local[2]", "--rows-per-partition", "2", "--recheck-after", "0.2", *extra, *(["--debug"] if debug else [])],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "COLUMNS": "200", "JDK_JAVA_OPTIONS": FAST_JVM},
    )
    doc = json.loads(report.read_text()) if report.exists() else None
    return proc.returncode, doc, proc.stdout, proc.stderr


def test_in_sync_reports_ok_with_the_cards_command(pipeline):
    """`spark-submit spark/verify_replica.py --producer-profile P --consumer-profile C --report R`, as on the card:
    no --jars (the job finds Debian's Connector/J and starts itself again with it), the venv's spark-submit."""
    replicated(pipeline)
    report = pipeline.tmp / "report.json"
    venv_bin = Path(sys.executable).parent
    proc = subprocess.run(
        [str(venv_bin / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(SCRIPT),
         "--producer-profile", str(pipeline.producer_profile()), "--consumer-profile", str(pipeline.consumer_profile()),
         "--report", str(report), "--rows-per-partition", "2"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", "JDK_JAVA_OPTIONS": FAST_JVM, "PATH": f"{venv_bin}:{os.environ['PATH']}"},
    )
    out = proc.stdout + proc.stderr  # spark-submit merges the job's stderr into its stdout
    assert proc.returncode == 0, out[-3000:]
    assert json.loads(report.read_text()) == {"status": "ok", "tables": [
        table("items", 5, 5), table("log", 3, 3), table("pairs", 4, 4)]}
    assert "replica audit: ok" in out and "flvDb.items" in out
    assert "comparing flvDb.items (3 partitions)" in out and "comparing flvDb.pairs (2 partitions)" in out
    assert "Traceback" not in out and "error:" not in out


def test_no_jdbc_jar_names_the_package(monkeypatch, tmp_path):
    from cdc_spark import jars

    monkeypatch.delenv("CDC_JDBC_JAR", raising=False)
    monkeypatch.setattr(jars, "DEBIAN_JAR", str(tmp_path / "absent.jar"))
    with pytest.raises(jars.JarNotFound, match="install it with `apt-get install libmariadb-java`"):
        jars.find_jdbc_jar(None)
    assert jars.relaunch_command(["--master", "local[2]", "job.py", "--x"], "/j.jar", "/spark") == [
        "/spark/bin/spark-submit", "--jars", "/j.jar", "--master", "local[2]", "job.py", "--x"]
    assert jars.relaunch_command(["--jars", "a.jar", "job.py"], "/j.jar", None) == [
        "spark-submit", "--jars", "a.jar,/j.jar", "job.py"]


def test_drift_is_reported_exactly(pipeline):
    """Drift on the follower in an INT-keyed and an (INT, VARCHAR)-keyed table, and a row
    duplicated on the leader only in a table without a primary key (one run: Spark starts once)."""
    replicated(pipeline)
    pipeline.follower.execute(
        "SET time_zone = '+00:00'",
        # a one-microsecond change, a one-digit DECIMAL change, a deleted row, a row the leader never had
        "UPDATE flvDb.items SET seen = '2024-01-02 03:04:05.000002' WHERE id = 1",
        "UPDATE flvDb.items SET price = 99999999.9998 WHERE id = 3",
        "DELETE FROM flvDb.items WHERE id = 4",
        "INSERT INTO flvDb.items (id, note) VALUES (7, 'seven')",
        "UPDATE flvDb.pairs SET qty = 12 WHERE k = 1 AND name = 'b'",
        "DELETE FROM flvDb.pairs WHERE k = 2 AND name = 'a'",
        "INSERT INTO flvDb.pairs VALUES (2, 'A', 20)",  # case differs from the deleted key: a different key
    )
    # Not binlogged: only the leader gets a third copy of (1, 'x') and a second (2, NULL).
    pipeline.leader.execute("SET SESSION sql_log_bin = 0", "INSERT INTO flvDb.log VALUES (1, 'x'), (2, NULL)")
    code, doc, out, err = audit_run(pipeline)
    assert (code, doc) == (1, {"status": "drift", "tables": [
        table("items", 5, 5, missing=[[4]], extra=[[7]], changed=[[1], [3]]),
        table("log", 5, 3, missing=[[1, "x"], [2, None]]),
        table("pairs", 4, 4, missing=[[2, "a"]], extra=[[2, "A"]], changed=[[1, "b"]]),
    ]}), err
    assert "replica audit: drift" in out and "Traceback" not in err
    assert 'changed [1], [3]' in out and 'missing [1, "x"], [2, null]' in out


PENDING_CHANGES = [
    "UPDATE flvDb.items SET price = price + 1 WHERE id = 2",
    "DELETE FROM flvDb.items WHERE id = 5",
    "INSERT INTO flvDb.items (id, note) VALUES (6, 'six')",
    "UPDATE flvDb.pairs SET name = 'c' WHERE k = 3",  # a key change: the old and the new key are pending
    "INSERT INTO flvDb.log VALUES (3, 'y')",
]
PENDING_REPORT = {"status": "ok", "tables": [
    table("items", 5, 5, pending=[[2], [5], [6]]),
    table("log", 4, 3, pending=[[3, "y"]]),
    table("pairs", 4, 4, pending=[[3, "c"], [3, "z"]]),
]}


def test_per_table_topics_pending_not_drift(pipeline):
    """One topic per table: the audit reads the transaction topic and the table topics it names."""
    txns = "mysql-cdc-transactions"
    per_table = 'topic = "{database}_{table}"'
    profiles = (pipeline.producer_profile(extra=per_table), pipeline.consumer_profile(extra=per_table))
    pipeline.start_producer(profiles[0])
    consumer = pipeline.start_consumer(profiles[1])
    pipeline.leader.execute("SET time_zone = '+00:00'", *SCHEMA, *ROWS)
    pipeline.wait_synced(timeout=60, topic=txns)
    assert consumer.stop() == 0
    pipeline.leader.execute(*PENDING_CHANGES)
    pipeline.wait_published(timeout=60, topic=txns)
    assert pipeline.checkpoint(txns) < pipeline.end_offset(txns)
    code, doc, out, err = audit_run(pipeline, profiles=profiles)
    assert (code, doc) == (0, PENDING_REPORT), err
    assert "replica audit: ok" in out


def test_changes_still_in_the_topic_are_pending_not_drift(pipeline):
    consumer = replicated(pipeline)
    assert consumer.stop() == 0
    pipeline.leader.execute(*PENDING_CHANGES)
    pipeline.wait_published(timeout=60)
    assert pipeline.checkpoint() < pipeline.end_offset()
    code, doc, out, err = audit_run(pipeline)
    assert (code, doc) == (0, PENDING_REPORT), err
    assert "replica audit: ok" in out


def test_could_not_audit_is_one_line_and_exit_2(pipeline, tmp_path):
    code, doc, _out, err = audit_run(pipeline, "--jars", str(tmp_path / "nope.jar"), debug=False)
    assert (code, doc) == (2, None)
    assert err.strip() == f"error: --jars: no such jar {tmp_path / 'nope.jar'}; pass the path of the MariaDB Connector/J jar"


def test_topic_values_normalize_exactly_like_the_server(pipeline):
    """Pending keys are matched through this: every type, as published, equals the server's canonical string."""
    pipeline.start_producer()
    pipeline.leader.execute(
        "SET time_zone = '+00:00'", "CREATE DATABASE flvDb",
        """CREATE TABLE flvDb.t (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(30,10), f FLOAT, g DOUBLE, dt DATETIME(6),
           ts TIMESTAMP(3) NULL, dd DATE, tm TIME(2), y YEAR, b BIT(9), bin BINARY(4), vb VARBINARY(4), s SET('z','a'),
           e ENUM('p','q'), j JSON, tx TEXT)""",
        """INSERT INTO flvDb.t VALUES (18446744073709551615, 0.0000000001, 0.1, 0.30000000000000004,
           '2024-02-29 23:59:59.999999', '2038-01-19 03:14:07.999', '1000-01-01', '-838:59:59.00', 2155, 257,
           0x61, 0x0000, 'a,z', 'q', '{"b": [1, 2.5], "a": null}', 'héllo 😀'),
           (0, -12345678901234567890.0123456789, -3.4e38, 1e300, '1000-01-01 00:00:00', NULL, NULL, '00:00:00.01',
           1901, 0, '', NULL, '', NULL, NULL, '')""",
    )
    pipeline.wait_published(timeout=60)
    with pipeline.leader.connect() as conn:
        (leader_table,) = audit_tables.discover(conn, TableFilter(), ["flvDb.t"])
    exprs = ", ".join(c.sql() for c in leader_table.columns)
    server = {row[0]: row for row in pipeline.leader.query(f"SELECT {exprs} FROM flvDb.t")}
    adds = [e for e in pipeline.events() if "Add" in e["operation"]]
    published = [r["cols"] for e in adds for r in e["operation"]["Add"]["rows"]]
    assert len(published) == 2
    for cols in published:
        from_topic = [c.norm(to_param(v), from_server=False) for c, v in zip(leader_table.columns, cols)]
        canonical = server[str(from_topic[0])]
        assert from_topic == [c.norm(v) for c, v in zip(leader_table.columns, canonical)]


def test_partition_plans():
    assert audit_compare.plan_partitions("__pk", None, None, 10, 2, True) is None
    assert audit_compare.plan_partitions("__pk", 1, 5, 5, 100, True) is None
    assert audit_compare.plan_partitions("__pk", 1, 5, 5, 2, True) == {
        "partitionColumn": "__pk", "lowerBound": "1", "upperBound": "6", "numPartitions": "3"}
    # Composite keys and BIGINT UNSIGNED beyond Spark's signed bounds: open-ended predicates.
    assert audit_compare.plan_partitions("__pk", 0, 2**64 - 1, 4, 2, True) == [
        "`__pk` < 9223372036854775808", "`__pk` >= 9223372036854775808"]
    assert audit_compare.plan_partitions("__pk", 1, 3, 3, 1, False) == ["`__pk` < 2", "`__pk` >= 2 AND `__pk` < 3", "`__pk` >= 3"]


def test_a_table_being_copied_live_is_pending_not_drift(pipeline):
    """A re-copy in progress (paused by a signal): the follower's damaged rows of the table it copies are
    pending (its chunks will replace them), not drift; another table's damage stays drift."""
    live = ('[snapshot]\nmethod = "watermark"\nsignal_table = "cdc_control.signals"\n')
    profiles = (pipeline.producer_profile(extra=live), pipeline.consumer_profile())
    pipeline.leader.execute("CREATE DATABASE cdc_control", "CREATE TABLE cdc_control.signals "
                            "(id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)")
    producer = pipeline.start_producer(profiles[0])
    consumer = pipeline.start_consumer(profiles[1])
    pipeline.leader.execute("SET time_zone = '+00:00'", *SCHEMA, *ROWS)
    pipeline.wait_synced(timeout=60)
    pipeline.follower.execute("DELETE FROM flvDb.items WHERE id = 4", "UPDATE flvDb.pairs SET qty = 0 WHERE k = 3")
    pipeline.leader.execute("INSERT INTO cdc_control.signals VALUES ('p', 'pause-snapshot', NULL)",
                            "INSERT INTO cdc_control.signals VALUES ('r', 'execute-snapshot', "
                            "'{\"tables\": [\"flvDb.items\"]}')")
    producer.wait_line("copying flvDb.items again while streaming, as signal 'r' asks")
    pipeline.wait_synced(timeout=60)
    assert "flvDb.items" in pipeline.last_event()["copying"]
    code, doc, out, err = audit_run(pipeline, profiles=profiles)
    assert (code, doc) == (1, {"status": "drift", "tables": [
        table("items", 5, 4, pending=[[4]]), table("log", 3, 3), table("pairs", 4, 4, changed=[[3, "z"]])]}), err
    assert "being copied by the producer (a live copy is in progress): differences are pending" in out
    assert producer.stop() == 0 and consumer.stop() == 0
