"""spark/lake.py on real servers: the real producer, the job as users run it (spark-submit / python)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import ROOT, Cli, wait_for
from lake_check import assert_lake_equals_leader, changelog, no_duplicates
from lake_crash import CRASH_ENV
from test_tutorial import STATEMENTS as TUTORIAL

from cdc_stream.profile import DEFAULT_TOPIC
from cdc_stream.topics.embedded import EmbeddedStream

JOB = ROOT / "spark" / "lake.py"
CRASHING_JOB = ROOT / "tests" / "lake_crash.py"  # JOB, killed where $CDC_LAKE_CRASH says
VENV_BIN = Path(sys.executable).parent
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # test-only: halves Spark's start on tiny data
TYPED = [
    """CREATE TABLE flvDb.typed (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(65,30), m DECIMAL(12,4), f FLOAT,
       day DATE, at DATETIME(6), ts TIMESTAMP(6) NULL, t TIME(6), b BINARY(4), s SET('b','a','c'), j JSON,
       note VARCHAR(20), `load` INT)""",
    "SET time_zone = '+00:00'",
    "SET sql_mode = ''",  # zero dates
    """INSERT INTO flvDb.typed VALUES
       (18446744073709551615, 99999999999999999999999999999999999.999999999999999999999999999999, -12345678.9012,
        0.1, '0000-00-00', '0000-00-00 00:00:00.000000', '0000-00-00 00:00:00', '-838:59:59.000000', 0x61, 'a,b',
        '{"k": [1, 2.50]}', 'max', 1),
       (0, -0.000000000000000000000000000001, 0, -3.4e38, '2020-00-00', '9999-12-31 23:59:59.999999',
        '2038-01-19 03:14:07.999999', '838:59:59.999999', 0x00ff, '', NULL, NULL, NULL),
       (7, 1.5, 2.25, NULL, '2024-02-29', '2024-02-29 12:00:00.5', '1970-01-01 00:00:01', '-00:00:00.000001', '',
        'c', '[]', 'seven', 7)""",
    "UPDATE flvDb.typed SET note = 'changed', d = d - 1 WHERE id = 7",
    "UPDATE flvDb.typed SET id = 8 WHERE id = 7",  # a key change
    "DELETE FROM flvDb.typed WHERE id = 0",
    "CREATE TABLE flvDb.nokey (a INT, b VARCHAR(10))",
    "INSERT INTO flvDb.nokey VALUES (1, 'x'), (1, 'x'), (1, 'x'), (2, NULL), (3, 'y')",
    "DELETE FROM flvDb.nokey WHERE a = 1 LIMIT 1",
    "UPDATE flvDb.nokey SET b = 'z' WHERE a = 3",
    "INSERT INTO flvDb.nokey VALUES (2, NULL)",
    "ALTER TABLE flvDb.typed ADD COLUMN qty INT NOT NULL DEFAULT 5",
    "INSERT INTO flvDb.typed (id, qty) VALUES (9, 6)",
]


def lake_job(pipeline, lake: Path, *extra: str, submit: bool = False, env: dict | None = None,
             profile: Path | None = None, job: Path = JOB) -> subprocess.CompletedProcess:
    """Run the lake job to completion, as `spark-submit spark/lake.py` or `python spark/lake.py`."""
    args = ["--profile", str(profile or pipeline.producer_profile()), "--lake", str(lake), *extra]
    if submit:
        cmd = [str(VENV_BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--driver-java-options", FAST_JVM, str(job), *args]
    else:
        cmd = [sys.executable, str(job), "--master", "local[2]", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, start_new_session=True,
                          env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "JDK_JAVA_OPTIONS": FAST_JVM,
                               **(env or {})})


def run_sql(leader, statements: list[str]) -> None:
    conn = leader.connect()
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
    conn.close()


def test_tutorial_and_types_into_the_lake(pipeline, tmp_path):
    producer = pipeline.start_producer()
    run_sql(pipeline.leader, TUTORIAL + TYPED)
    pipeline.wait_published(timeout=60)
    lake = tmp_path / "lake"
    done = lake_job(pipeline, lake, "--once", submit=True)
    assert done.returncode == 0, "\n".join(x for x in (done.stdout + done.stderr).splitlines() if " INFO " not in x)
    out = done.stdout + done.stderr  # spark-submit merges the job's stderr into its stdout
    # every change once: the tutorial's 9 (3 DDL), typed's 9 (2 DDL), nokey's 9 (1 DDL)
    assert f"lake up to date: 3 tables, 27 changes this run, last offset {pipeline.end_offset() - 1}" in \
        out.splitlines() and "Traceback" not in out, out[-3000:]
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "pet") == 2
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "typed") == 3
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "nokey") == 5
    log = changelog(lake, "flvDb", "pet")
    no_duplicates(log)
    assert [r["op"] for r in log] == ["ddl", "insert", "insert", "update", "ddl", "delete", "insert", "update"]
    assert log[-1]["after"]["color"] == "White" and log[-1]["before"]["color"] is None

    # More changes, and a second run: it continues where the first stopped.
    run_sql(pipeline.leader, ["INSERT INTO flvDb.pet VALUES ('Chirpy', 'Gwen', 'bird', 'f', '1998-09-11', NULL)",
                              "DELETE FROM flvDb.nokey WHERE a = 2 LIMIT 1"])
    pipeline.wait_published(timeout=60)
    again = lake_job(pipeline, lake, "--once")
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines()[-1] == (
        f"lake up to date: 3 tables, 2 changes this run, last offset {pipeline.end_offset() - 1}")
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "pet") == 3
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "nokey") == 4
    no_duplicates(changelog(lake, "flvDb", "nokey"))
    assert producer.stop() == 0


def test_kill_9_in_both_crash_windows_loses_and_repeats_nothing(pipeline, tmp_path):
    producer = pipeline.start_producer()
    run_sql(pipeline.leader, TUTORIAL + TYPED)
    pipeline.wait_published(timeout=60)
    lake = tmp_path / "lake"
    for window in ("plan", "merge"):
        killed = lake_job(pipeline, lake, "--once", "--max-records-per-batch", "7", env={CRASH_ENV: window},
                          job=CRASHING_JOB)
        assert killed.returncode == -signal.SIGKILL, (window, killed.stderr)
        run_sql(pipeline.leader, [f"INSERT INTO flvDb.nokey VALUES (10, '{window}')"])
        pipeline.wait_published(timeout=60)
    done = lake_job(pipeline, lake, "--once", "--max-records-per-batch", "7")
    assert done.returncode == 0, done.stderr
    for table, rows in (("pet", 2), ("typed", 3), ("nokey", 7)):
        assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", table) == rows
        no_duplicates(changelog(lake, "flvDb", table))
    changes = [r["op"] for r in changelog(lake, "flvDb", "nokey") if r["op"] != "ddl"]
    # 5 inserts, a delete, an update, an insert, 2 inserts between the crashes: each once
    assert changes == ["insert"] * 5 + ["delete", "update", "insert", "insert", "insert"]
    assert producer.stop() == 0


def test_per_table_topics_into_the_lake(pipeline, tmp_path):
    """One topic per table and the transaction topic: the lake follows the transactions in source order."""
    from test_per_table import STATEMENTS as PER_TABLE

    per_table = 'topic = "{database}_{table}"'
    profile = pipeline.producer_profile(extra=per_table)
    producer = pipeline.start_producer(profile)
    run_sql(pipeline.leader, PER_TABLE)
    pipeline.wait_published(timeout=60, topic="mysql-cdc-transactions")
    lake = tmp_path / "lake"
    done = lake_job(pipeline, lake, "--once", profile=profile)
    assert done.returncode == 0, done.stderr
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "orders") == 1
    assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "lines") == 2  # qty filled by ADD COLUMN
    lines = changelog(lake, "flvDb", "lines")
    no_duplicates(lines)
    assert [(r["offset"], r["op"]) for r in lines] == [(2, "ddl"), (3, "insert"), (3, "insert"), (3, "delete"),
                                                       (4, "ddl"), (5, "insert")]
    assert producer.stop() == 0


def test_a_consumer_profile_or_a_file_as_directory_is_one_error_before_spark_starts(pipeline, tmp_path):
    """A consumer profile used to run against the follower and stop on "not on the leader any more"; a file as
    --lake failed inside Spark as "Py4JJavaError: An error occurred while calling o51.start", and a file at the
    lake's _spill in every read task."""
    consumer = pipeline.consumer_profile()
    afile = tmp_path / "afile"
    afile.write_text("")
    cases = [
        ((tmp_path / "lake", consumer), [], f"error: {consumer}: a cdc-consumer profile; pass the cdc-producer profile "
                                            "with --profile (the lake takes column types from its [database], the leader)"),
        ((afile, None), ["--once"], f"error: --lake {afile} is a file, not a directory; choose another --lake"),
        ((tmp_path / "lake2", None), ["--once", "--checkpoint", str(afile)],
         f"error: --checkpoint {afile} is a file, not a directory; choose another --checkpoint"),
        ((afile / "sub", None), ["--once"],
         f"error: --lake {afile / 'sub'}: cannot create the directory (Not a directory); choose another --lake"),
        ((tmp_path / "lake3", None), ["--once"],  # where the read tasks keep a batch's rows
         f"error: --lake {tmp_path / 'lake3' / '_spill'} is a file, not a directory; choose another --lake"),
    ]
    (tmp_path / "lake3").mkdir()
    (tmp_path / "lake3" / "_spill").write_text("")
    for (lake, profile), extra, message in cases:
        done = lake_job(pipeline, lake, *extra, profile=profile)
        assert (done.returncode, done.stderr) == (2, message + "\n")
    assert not (tmp_path / "lake").exists() and not (tmp_path / "lake2").exists()  # nothing created
    assert [p.name for p in (tmp_path / "lake3").iterdir()] == ["_spill"]


def test_a_recopy_removes_the_rows_the_leader_no_longer_has_from_the_lake(pipeline, tmp_path):
    """A live copy's chunks replace their key ranges in the lake as on the follower: rows the leader lost
    outside the binlog (sql_log_bin = 0) are in the lake until a re-copy, then gone."""
    leader = pipeline.leader
    leader.execute("DROP DATABASE IF EXISTS flvDb", "CREATE DATABASE flvDb",
                   "CREATE TABLE flvDb.acc (id INT PRIMARY KEY, v VARCHAR(10))",
                   "INSERT INTO flvDb.acc SELECT seq, CONCAT('v', seq) FROM flvDb.seq_1_to_50")
    profile = pipeline.producer_profile(extra='[snapshot]\nmethod = "watermark"\nchunk_size = 10\n')
    producer = pipeline.start_producer(profile)
    lake = tmp_path / "lake"

    def copies_done() -> int:
        return sum(1 for e in pipeline.events() if e.get("snapshot", {}).get("done"))

    wait_for(lambda: copies_done() == 1, 60, "the initial copy")
    pipeline.wait_published(timeout=60)
    first = lake_job(pipeline, lake, "--once", profile=profile)
    assert first.returncode == 0, first.stderr[-3000:]
    assert assert_lake_equals_leader(leader, lake, "flvDb", "acc") == 50
    run_sql(leader, ["SET sql_log_bin = 0", "DELETE FROM flvDb.acc WHERE id BETWEEN 5 AND 25 OR id > 45",
                     "UPDATE flvDb.acc SET v = 'quiet' WHERE id = 30", "SET sql_log_bin = 1",
                     "INSERT INTO flvDb.acc VALUES (60, 'streamed')"])
    asked = Cli(["cdc-producer", str(profile), "--snapshot", "flvDb.acc"])
    assert asked.proc.wait(60) == 0
    wait_for(lambda: copies_done() == 2, 60, "the re-copy")
    pipeline.wait_published(timeout=60)
    again = lake_job(pipeline, lake, "--once", profile=profile)
    assert again.returncode == 0, again.stderr[-3000:]
    assert assert_lake_equals_leader(leader, lake, "flvDb", "acc") == 50 - 21 - 5 + 1
    assert producer.stop() == 0


# The lake job's start (spark/lake.py, before its query): the session as builder(job_defaults=True) makes it, then
# warm_workers; printed: whether the driver's C2 is excluded, and whether a task's Python worker has the modules of
# the batches' tasks before any batch (the probe imports nothing of the project).
START_PROBE = """
import json, sys
from cdc_spark.session import builder, diagnostic_command, prepare_local
prepare_local("local[1]")
spark = builder("probe", "local[1]", job_defaults=True).getOrCreate()
if sys.argv[1] == "warm":
    from cdc_spark.lakespark import warm_workers
    warm_workers(spark).join(120)
def probe(batches):
    import sys
    import pyarrow as pa
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"ready": [all(m in sys.modules for m in
                                          ("cdc_spark.source", "cdc_spark.spill", "cdc_spark.lakefiles"))]})
ready = [r.ready for r in spark.range(1, numPartitions=1).mapInArrow(probe, "ready boolean").collect()]
print(json.dumps({"c2_excluded": "Exclude:true" in (diagnostic_command("compilerDirectivesPrint") or ""),
                  "ready": ready}))
spark.stop()
"""


def start_probe(tmp_path: Path, mode: str, *java_options: str, submit: bool = False) -> dict:
    """START_PROBE's answer, run by python (the JVM started by pyspark) or by spark-submit with `java_options`
    (none from the environment: the tests' JDK_JAVA_OPTIONS is dropped)."""
    script = tmp_path / "start_probe.py"
    script.write_text(START_PROBE)
    cmd = [str(VENV_BIN / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
           *[a for o in java_options for a in ("--driver-java-options", o)]] if submit else [sys.executable]
    env = {k: v for k, v in os.environ.items() if k not in ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")}
    done = subprocess.run([*cmd, str(script), mode], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**env, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.server
def test_the_jobs_driver_runs_c1_unless_the_user_chose_a_jit_and_its_workers_start_before_the_first_batch(tmp_path):
    """The driver's C2 is excluded when the JVM has no JIT option (python spark/lake.py, no options); a user's
    `-XX:TieredStopAtLevel=4` (spark-submit --driver-java-options) stands. warm_workers leaves a Python worker
    with the batches' modules imported, which the next task runs in; without it, a task's worker has none."""
    assert start_probe(tmp_path, "warm") == {"c2_excluded": True, "ready": [True]}
    assert start_probe(tmp_path, "cold", "-XX:TieredStopAtLevel=4", submit=True) == {"c2_excluded": False,
                                                                                     "ready": [False]}


def test_a_record_a_read_task_cannot_decode_stops_the_job_at_its_offset_in_one_line(pipeline, tmp_path):
    """A read task, in an executor's Python worker, meets an insert whose image has 2 values for 1 column: the job
    stops with MalformedEvent's own line naming the offset (exit 5), not Spark's "An exception was thrown from the
    Python worker" nor its stack traces; the batches before it are committed, and a second run stops at the same
    offset."""
    producer = pipeline.start_producer()
    run_sql(pipeline.leader, ["CREATE DATABASE flvDb", "CREATE TABLE flvDb.t (id INT PRIMARY KEY)",
                              "INSERT INTO flvDb.t VALUES (1)"])
    pipeline.wait_published(timeout=60)
    assert producer.stop() == 0
    insert = pipeline.last_event()
    domain, server, seq = insert["gtid"].split("-")
    gtid = f"{domain}-{server}-{int(seq) + 1}"
    bad = {**insert, "sequence": insert["sequence"] + 1, "gtid": gtid, "gtid_set": gtid,
           "txn": {"id": gtid, "index": 0, "last": True},
           "operation": {"Add": {"rows": [{"cols": [{"SignedInteger": 2}, {"SignedInteger": 3}]}]}}}
    with EmbeddedStream(pipeline.stream_path) as stream:
        topic = stream.topic(DEFAULT_TOPIC)
        offset = topic.append([(None, json.dumps(bad).encode())])[0]
        topic.close()
    lake = tmp_path / "lake"
    for _ in range(2):
        done = lake_job(pipeline, lake, "--once", "--max-records-per-batch", "1")
        assert done.returncode == 5, done.stderr[-3000:]
        assert done.stderr.splitlines()[-1] == f"error: offset {offset}: rows: an image of 2 values for 1 columns"
        assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr[-3000:]
        assert assert_lake_equals_leader(pipeline.leader, lake, "flvDb", "t") == 1
