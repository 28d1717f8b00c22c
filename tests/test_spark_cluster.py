"""The Spark jobs on a real multi-executor Spark: local-cluster[2,1,1024] (a master, a worker, two executor JVMs
with one core each, started from the pyspark wheel's SPARK_HOME), as spark-submit runs them on a cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable
from harness import ROOT
from lake_check import assert_lake_equals_leader, changelog, no_duplicates
from lake_crash import CRASH_ENV
from test_spark_lake import TYPED, run_sql
from test_tutorial import STATEMENTS as TUTORIAL

from cdc_spark.lake import TAG_WRITERS

CLUSTER = "local-cluster[2,1,1024]"
VENV_BIN = Path(sys.executable).parent
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
BULK = [
    "CREATE TABLE flvDb.bulk (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
    "CREATE TABLE flvDb.bag (a INT, b VARCHAR(10))",  # no key
    *[f"INSERT INTO flvDb.bulk VALUES {', '.join(f'({k}, {chr(39)}v{k}{chr(39)}, {k % 7})' for k in range(s, s + 100))}"
      for s in range(0, 1000, 100)],
    *[f"INSERT INTO flvDb.bag VALUES {', '.join(f'({k % 13}, {chr(39)}b{k % 5}{chr(39)})' for k in range(s, s + 50))}"
      for s in range(0, 300, 50)],
    "UPDATE flvDb.bulk SET v = CONCAT(v, '!'), id = id + 5000 WHERE id % 10 = 3",  # key changes
    "DELETE FROM flvDb.bulk WHERE n = 2",
    "DELETE FROM flvDb.bag WHERE a = 3 LIMIT 4",
    "UPDATE flvDb.bag SET b = 'changed' WHERE a = 5",
    "ALTER TABLE flvDb.bulk ADD COLUMN extra INT NOT NULL DEFAULT 42",
    "ALTER TABLE flvDb.bag ADD COLUMN c VARCHAR(5) DEFAULT 'dflt'",
    "INSERT INTO flvDb.bulk (id, v, n) VALUES (20000, 'after', 1)",
    "DELETE FROM flvDb.bag WHERE a = 4 LIMIT 2",
    "UPDATE flvDb.bulk SET extra = 7 WHERE id < 100",
]


def submit(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`spark-submit --master local-cluster[2,1,1024] spark/<script> ...` in its own process group."""
    cmd = [str(VENV_BIN / "spark-submit"), "--master", CLUSTER, "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=4", "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
           # schedule only once both executors have registered (otherwise the first one may take every task)
           "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
           "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=120s", "--conf", "spark.locality.wait=0s",
           "--driver-java-options", FAST_JVM, str(ROOT / "spark" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, start_new_session=True,
                          env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable,
                               **(env or {})})


def output(done: subprocess.CompletedProcess) -> str:
    """The job's own lines (spark-submit merges its stderr into stdout; Spark's INFO lines left out)."""
    return "\n".join(x for x in (done.stdout + done.stderr).splitlines() if " INFO " not in x and " WARN " not in x)


def writers(path: Path) -> set[str]:
    """The executors that wrote a Delta table's files, as the job's commits record them."""
    return {w for c in DeltaTable(str(path)).history() for w in (c.get(TAG_WRITERS) or "").split(",") if w}


def topic_rows(pipeline) -> int:
    """The row changes (and statements) on the pipeline's topic, counted by cdc_stream's reader."""
    from cdc_stream.layout import Layout
    from cdc_stream.profile import load_producer_profile
    from cdc_stream.topics import open_stream

    stream = load_producer_profile(pipeline.producer_profile()).stream
    opened = open_stream(stream, create=False)
    reader = Layout.of(stream).reader(opened)
    rows, offset, end = 0, 0, reader.end_offset()
    while offset < end:
        for rec in reader.read(offset, max_records=500):
            rows += sum(1 if ev.operation == "Query" else len(ev.rows) for ev in rec.events())
            offset = rec.offset + 1
    reader.close()
    opened.close()
    return rows


def test_lake_on_two_executors_through_kill_9_and_maintenance(pipeline, tmp_path):
    producer = pipeline.start_producer()
    run_sql(pipeline.leader, TUTORIAL + TYPED + BULK)
    pipeline.wait_published(timeout=120)
    lake = tmp_path / "lake"
    job = ["--profile", str(pipeline.producer_profile()), "--lake", str(lake), "--once"]
    killed = submit(str(ROOT / "tests" / "lake_crash.py"), *job, "--max-records-per-batch", "20",
                    env={CRASH_ENV: "merge"})  # (an absolute path: submit's spark/ / it is the path itself)
    assert killed.returncode == -signal.SIGKILL, output(killed)
    maintained = subprocess.run([sys.executable, str(ROOT / "spark" / "maintain.py"), "--lake", str(lake),
                                 "--retain-hours", "0"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert maintained.returncode == 0 and maintained.stderr == "", maintained.stderr
    assert [x.split(":")[0] for x in maintained.stdout.splitlines()] == [
        "state/flvDb/pet", "changelog/flvDb/pet"]  # the crash came after the first batch's first state commit
    half = submit("lake.py", *job, "--max-records-per-batch", "20")
    assert half.returncode == 0, output(half)
    run_sql(pipeline.leader, ["INSERT INTO flvDb.bulk (id, v, n) VALUES (30000, 'late', 3)",
                              "DELETE FROM flvDb.bulk WHERE id BETWEEN 10 AND 20"])
    pipeline.wait_published(timeout=60)
    again = subprocess.run([sys.executable, str(ROOT / "spark" / "maintain.py"), "--lake", str(lake)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    done = submit("lake.py", *job)  # the default micro-batch size
    out = output(done)
    assert done.returncode == 0, out
    # the two statements after the second run: an insert and 9 deletes (Spark's shutdown may log after this line)
    assert f"lake up to date: 5 tables, 10 changes this run, last offset {pipeline.end_offset() - 1}" in \
        out.splitlines(), out
    for table, rows in (("pet", 2), ("typed", 3), ("nokey", 5), ("bulk", 850), ("bag", 294)):
        assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", table) == rows
        no_duplicates(changelog(lake, "flvDb", table))
    # both executors wrote the lake's data files (not each table's: a table's few small tasks of a batch can all
    # end on one executor before the other is offered one, seen in ~1 run of 4 with the throughput collector)
    tables = [lake / kind / "flvDb" / t for kind in ("state", "changelog") for t in ("pet", "typed", "nokey", "bulk", "bag")]
    assert set().union(*(writers(t) for t in tables)) == {"executor 0", "executor 1"}
    assert all(writers(t) <= {"executor 0", "executor 1"} and writers(t) for t in tables)  # no file from the driver
    assert producer.stop() == 0


def test_source_and_audit_on_two_executors(pipeline, tmp_path):
    pipeline.start_producer()
    consumer = pipeline.start_consumer()
    run_sql(pipeline.leader, TUTORIAL + BULK[:18])
    pipeline.wait_synced(timeout=120)
    report = tmp_path / "report.json"
    audit = submit("verify_replica.py", "--producer-profile", str(pipeline.producer_profile()),
                   "--consumer-profile", str(pipeline.consumer_profile()), "--report", str(report),
                   "--rows-per-partition", "200")
    assert audit.returncode == 0, output(audit)
    doc = json.loads(report.read_text())
    assert doc["status"] == "ok" and [(t["table"], t["leader_rows"]) for t in doc["tables"]] == [
        ("bag", 300), ("bulk", 1000), ("pet", 2)]
    script = tmp_path / "read.py"
    script.write_text(f"""
import os, sys
from pyspark.sql import SparkSession, functions as F
import cdc_spark
spark = SparkSession.builder.getOrCreate()
cdc_spark.register(spark)
df = (spark.read.format("mysql_cdc").option("profile", {str(pipeline.producer_profile())!r})
      .option("recordsPerPartition", "3").load())
who = F.udf(lambda _: os.environ.get("SPARK_LOG_URL_STDERR", "").split("executorId=")[-1].split("&")[0])
rows = df.withColumn("executor", who(F.col("offset"))).groupBy("executor").count().collect()
print("partitions", df.rdd.getNumPartitions())
print("executors", sorted(r["executor"] for r in rows))
print("rows", sum(r["count"] for r in rows), df.select("offset", "row_index").distinct().count())
""")
    read = submit(str(script))
    lines = output(read).splitlines()
    assert read.returncode == 0, "\n".join(lines)
    records = pipeline.end_offset()
    assert f"partitions {-(-records // 3)}" in lines  # recordsPerPartition
    assert "executors ['0', '1']" in lines
    # every change once: the rows of every event on the topic (a statement counts as one), read in plain Python
    assert f"rows {topic_rows(pipeline)} {topic_rows(pipeline)}" in lines
    assert consumer.stop() == 0
