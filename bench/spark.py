"""Rows/s of the mysql_cdc Spark source and of the lake job, beside plain Python reading the same topic.

    .venv/bin/python bench/spark.py [--rows 100000] [--partitions-of 20000]

One local MariaDB leader, the real cdc-producer publishes the standard workload (bench/load.py:
`rows` inserts, rows/10 updates, rows/10 deletes, transactions of 1,000 rows) to an embedded
topic. Then, on that topic:

- baseline: plain Python, one process: the topic layout's LogReader, every event decoded
  (cdc_stream.events.decode_event), every row counted;
- the source, batch, generic images: spark.read.format("mysql_cdc") written to Spark's `noop`
  sink (every row materialised), Spark local[2]; best of 2 runs in one session (no JVM start);
- the source, batch, typed images (option table=bench.t): the same;
- the lake job: `python spark/lake.py --once` from launch (JVM start included) and its
  micro-batch time (what it logs), into an empty lake.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

import rig
from harness import Cli
from load import SCHEMA, standard_workload

from cdc_stream.layout import Layout
from cdc_stream.profile import Stream
from cdc_stream.topics.embedded import EmbeddedStream


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def profile(base: Path, port: int) -> Path:
    path = base / "producer.toml"
    path.write_text(f"""mysql_resource_name = "bench"
[database]
ip_or_host = "127.0.0.1"
port = {port}
user = "root"
[data]
base_path = "{base}/producer"
[filters]
include_dbs = ["bench"]
[stream]
path = "{base}/stream"
""")
    return path


def plain_python(stream_path: Path) -> tuple[int, float]:
    """(rows, seconds): every record of the topic decoded and its rows counted, one Python process."""
    t0 = time.monotonic()
    stream = EmbeddedStream(str(stream_path), create=False)
    reader = Layout.of(Stream(path=str(stream_path))).reader(stream)
    rows, offset, end = 0, 0, reader.end_offset()
    while offset < end:
        for rec in reader.read(offset, wait=0.0, max_records=500):
            for ev in rec.events():
                rows += len(ev.rows) if ev.operation != "Query" else 1
            offset = rec.offset + 1
    reader.close()
    stream.close()
    return rows, time.monotonic() - t0


def source(spark, path: Path, typed: bool, per_partition: int) -> tuple[int, float]:
    """(rows, best seconds of 2) of a batch read written to the noop sink."""
    reader = spark.read.format("mysql_cdc").option("profile", str(path)).option("recordsPerPartition", per_partition)
    if typed:
        reader = reader.option("table", "bench.t")
    best = float("inf")
    for _ in range(2):
        t0 = time.monotonic()
        reader.load().write.format("noop").mode("overwrite").save()
        best = min(best, time.monotonic() - t0)
    return reader.load().count(), best


def lake(path: Path, out: Path, per_partition: int) -> tuple[float, float]:
    """(seconds from launch, seconds in micro-batches) of `python spark/lake.py --once`."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(HERE.parent / "spark" / "lake.py"), "--profile", str(path), "--lake",
                           str(out), "--once", "--master", "local[2]", "--records-per-partition", str(per_partition)],
                          capture_output=True, text=True)
    total = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"lake job failed: {done.stderr[-2000:]}")
    batches = sum(float(s) for s in re.findall(r"Delta commits, ([0-9.]+) s", done.stderr))
    return total, batches


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--partitions-of", type=int, default=20_000, help="log records per Spark partition")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    (leader,) = rig.start_servers(base, ["leader"])
    try:
        path = profile(base, leader.port)
        producer = Cli(["cdc-producer", str(path)])
        producer.wait_line("streaming from")
        leader.execute(*SCHEMA)
        log(f"standard workload: {args.rows:,} inserts, {args.rows // 10:,} updates and deletes")
        counts = standard_workload(leader.port, args.rows)
        want = leader.gtid()
        stream = base / "stream"

        def published() -> bool:
            with EmbeddedStream(str(stream), create=False) as s:
                t = s.topic("rust-mysql-cdc")
                last = t.last_record()
                t.close()
            return last is not None and f'"gtid_set":"{want}"'.encode() in last.value

        rig.wait_until(published, 600, "the producer to publish the workload")
        producer.stop()
        rows, secs = plain_python(stream)
        log(f"plain Python: {rows:,} rows in {secs:.2f}s")
        from cdc_spark import register
        from cdc_spark.session import builder

        os.environ.setdefault("JDK_JAVA_OPTIONS", "")
        spark = builder("bench", "local[2]", {"spark.sql.shuffle.partitions": "2"}).getOrCreate()
        register(spark)
        generic = source(spark, path, False, args.partitions_of)
        typed = source(spark, path, True, args.partitions_of)
        spark.stop()
        lake_total, lake_batches = lake(path, base / "lake", args.partitions_of)
        n = counts.total
        print(f"| what ({n:,} row changes, {rows - n} DDL rows) | seconds | rows/s | vs plain Python |")
        print("|---|---:|---:|---:|")
        base_rate = rows / secs
        for name, r, s in (("plain Python: LogReader + decode_event, 1 process", rows, secs),
                           ("source, batch, generic images, local[2] (best of 2)", generic[0], generic[1]),
                           ("source, batch, typed images, local[2] (best of 2)", typed[0], typed[1]),
                           ("lake job --once, from launch (JVM start included)", rows, lake_total),
                           ("lake job, its micro-batch time", rows, lake_batches)):
            print(f"| {name} | {s:.2f} | {r / s:,.0f} | {r / s / base_rate:.2f}x |")
    finally:
        rig.kill_started()
        rig.stop_servers([leader])
    return 0


if __name__ == "__main__":
    sys.exit(main())
