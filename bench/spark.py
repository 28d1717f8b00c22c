"""The lake job and the mysql_cdc source on a multi-executor Spark, beside plain Python and cdc-consumer.

    .venv/bin/python bench/spark.py [--small 250000] [--large 1000000] [--executors 1,2] [--partitions 4]

Real servers (a MariaDB leader and follower), the real cdc-producer publishing the standard
workload (bench/load.py: inserts, a tenth as many updates and deletes, transactions of 1,000
rows) to an embedded topic; Spark is local-cluster[N,1,1024]: N executor JVMs of one core each,
started from the pyspark wheel (what a standalone cluster runs, on one host).

Per backlog (`--small` and `--large` row changes, each on fresh servers):

- plain Python: the topic's LogReader, every event decoded, its rows counted (one process);
- the source: spark.read.format("mysql_cdc") into Spark's noop sink, `--partitions` partitions, per
  executor count: rows/s and rows/s per core (one session per executor count, best of 2);
- the lake: `spark-submit --master local-cluster[N,1,1024] spark/lake.py --once`, default micro-batch,
  `--partitions` partitions a batch: seconds from launch, seconds in micro-batches (what it logs), and the
  driver's peak memory: JVM heap used (its GC log: the most before a collection, the most live after one)
  plus the driver Python process's peak RSS (VmHWM);
- cdc-consumer applying the same topic to the follower, from launch.

Then a workload with a key-less table (inserts, DELETE ... LIMIT, UPDATE) and an ADD COLUMN with a
default, into the lake with the largest executor count.

`--variant NAME:KEY=VALUE[;KEY=VALUE...]` (repeated; `NAME:` alone for none) and `--rounds N`: only the
larger backlog's topic, then the lake job on the first executor count with each variant's settings added
as `--conf` (except `tree=DIR`: run DIR's spark/lake.py and its packages, on PYTHONPATH of the driver and
the executors, e.g. a `git worktree` of an older commit, to compare code versions), variants alternating
(in reverse order every other round), each into an empty lake: a table
of the job's CPU seconds from launch, wall times, the load average and the executor's GC pauses, e.g.

    bench/spark.py --large 100000 --small 0 --executors 1 --rounds 2 --variant default: \
        --variant 'parallel:spark.executor.extraJavaOptions=-XX:+UseParallelGC'
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

import rig
from load import SCHEMA, Counts, connect, standard_workload

from cdc_stream.layout import Layout
from cdc_stream.profile import Stream
from cdc_stream.topics.embedded import EmbeddedStream

VENV_BIN = Path(sys.executable).parent
KEYLESS = ["CREATE TABLE bench.k (a INT, b VARCHAR(32), c INT)"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cluster(executors: int) -> str:
    return f"local-cluster[{executors},1,1024]"


def plain_python(stream_path: Path, stop: int | None = None) -> tuple[int, float, int]:
    """(rows, seconds, records): every record of the topic (up to `stop`) decoded and its rows counted, one
    Python process."""
    t0 = time.monotonic()
    stream = EmbeddedStream(str(stream_path), create=False)
    reader = Layout.of(Stream(path=str(stream_path))).reader(stream)
    rows, offset, end = 0, 0, reader.end_offset() if stop is None else stop
    while offset < end:
        for rec in reader.read(offset, wait=0.0, max_records=500):
            for ev in rec.events():
                rows += len(ev.rows) if ev.operation != "Query" else 1
            offset = rec.offset + 1
    reader.close()
    stream.close()
    return rows, time.monotonic() - t0, end


def source(path: Path, executors: int, end: int, partitions: int) -> float:
    """Seconds of a batch read of offsets [0, end) in `partitions` partitions written to the noop sink, on
    `executors` executors (after a first read of a partition per executor: every executor's workers started)."""
    from cdc_spark import register
    from cdc_spark.session import builder, prepare_local

    prepare_local(cluster(executors))
    spark = builder("bench source", cluster(executors), {"spark.sql.shuffle.partitions": "4"}).getOrCreate()
    register(spark)
    per = math.ceil(end / partitions)
    reader = (spark.read.format("mysql_cdc").option("profile", str(path)).option("recordsPerPartition", per)
              .option("bytesPerPartition", str(1 << 40)))
    warm = min(end, 50 * executors)
    (reader.option("recordsPerPartition", str(max(1, warm // executors))).option("endingOffset", str(warm)).load()
     .write.format("noop").mode("overwrite").save())
    t0 = time.monotonic()
    reader.option("endingOffset", str(end)).load().write.format("noop").mode("overwrite").save()
    took = time.monotonic() - t0
    spark.stop()
    return took


@dataclass
class LakeRun:
    launch: float  # seconds from launch to exit
    batches: float  # seconds in micro-batches, as the job logs them
    count: int  # micro-batches
    heap_before: float  # MiB: the most heap used before a GC
    heap_live: float  # MiB: the most heap used after a GC
    python_rss: float  # MiB: the driver Python process's peak RSS
    executors: int  # distinct executors that wrote files
    cpu: float  # CPU seconds of the job's processes (JVMs, Python driver and workers), from launch
    split: tuple[float, float, float] = (0.0, 0.0, 0.0)  # reading and planning, executors' writes, driver's commits
    gc_pauses: int = 0  # the executors' GC pauses (their GC logs)
    gc_seconds: float = 0.0  # the seconds those pauses took
    gc_humongous: int = 0  # of those pauses, G1's for a humongous allocation
    gc_name: str = ""  # the executors' collector, as their GC logs name it
    cpu_by: dict[str, float] | None = None  # CPU seconds by kind of process (PROCESS_KINDS)
    each: tuple[float, ...] = ()  # seconds of each micro-batch


def _children(pid: int) -> list[int]:
    """Children of every thread of `pid` (the JVM starts the driver's Python from another thread)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _cpu_tree(root: int) -> dict[int, tuple[float, int]]:
    """CPU seconds (user + system) and parent of `root` (spark-submit's process: the driver's JVM) and of each
    process descending from it."""
    tick = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[tuple[int, float]]] = {}
    own: dict[int, tuple[float, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            used = (int(fields[11]) + int(fields[12])) / tick
            kids.setdefault(int(fields[1]), []).append((int(entry), used))
            own[int(entry)] = (used, int(fields[1]))
    found: dict[int, tuple[float, int]] = {root: own[root]} if root in own else {}
    todo = [root]
    while todo:
        parent = todo.pop()
        for child, cpu in kids.get(parent, []):
            found[child] = (cpu, parent)
            todo.append(child)
    return found


# The job's processes by their command line (local-cluster: the master and the worker are threads of the driver's
# JVM; each executor JVM starts its Python daemon, which forks the workers).
PROCESS_KINDS = (("executor JVM", "CoarseGrainedExecutorBackend"), ("driver JVM", "SparkSubmit"),
                 ("driver Python", "lake.py"), ("Python", "python"))


def _kind(pid: int, parent: str | None) -> str:
    """Which of the job's processes `pid` is (PROCESS_KINDS; a Python process by its parent: the executors' or the
    driver JVM's), from its command line and its parent's kind."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:  # gone (its kind stays as it was seen)
        return "other"
    kind = next((kind for kind, mark in PROCESS_KINDS if mark in cmdline), "other")
    if kind == "Python":
        return "executor Python" if parent in ("executor JVM", "executor Python") else "driver JVM's Python"
    return kind


def _hwm(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def executor_gc(logs: list[Path]) -> tuple[int, float, int, str]:
    """(pauses, seconds paused, pauses G1 started for a humongous allocation, the collectors) in the executors'
    `-Xlog:gc` files (`Using G1`, then G1's and Parallel's `GC(n) Pause ... 12.3ms` lines)."""
    pauses, ms, humongous, names = 0, 0.0, 0, set()
    for gc_log in logs:
        for line in gc_log.read_text().splitlines():
            if (m := re.search(r"\] Using (.+)$", line)) is not None:
                names.add(m.group(1))
            if (m := re.search(r"\] GC\(\d+\) Pause .* ([0-9.]+)ms$", line)) is not None:
                pauses, ms, humongous = pauses + 1, ms + float(m.group(1)), humongous + ("Humongous" in line)
    return pauses, ms / 1000, humongous, ",".join(sorted(names))


def lake(path: Path, out: Path, executors: int, per_partition: int, conf: tuple[str, ...] = (),
         batch_records: int | None = None) -> LakeRun:
    """`spark-submit --master local-cluster[N,1,1024] spark/lake.py --once` into an empty lake, `conf` (KEY=VALUE)
    added as --conf. The executors log their GC through spark.executor.defaultJavaOptions, which Spark puts
    before spark.executor.extraJavaOptions: the job's own default for the latter (cdc_spark/session.py) stands."""
    trees = [kv.split("=", 1)[1] for kv in conf if kv.startswith("tree=")]
    conf = tuple(kv for kv in conf if not kv.startswith("tree="))
    tree = Path(trees[-1]).resolve() if trees else HERE.parent  # the code to run: this checkout's, or another's
    python_path = {"PYTHONPATH": str(tree)} if trees else {}
    gc_log = out.parent / f"gc-{out.name}.log"
    for old in out.parent.glob(f"gcx-{out.name}-*.log"):
        old.unlink()
    cmd = [str(VENV_BIN / "spark-submit"), "--master", cluster(executors), "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=4", "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
           "--conf", f"spark.executor.defaultJavaOptions=-Xlog:gc:file={out.parent}/gcx-{out.name}-%p.log",
           *[a for kv in conf for a in ("--conf", kv)],
           *[a for kv in python_path.items() for a in ("--conf", f"spark.executorEnv.{kv[0]}={kv[1]}")],
           "--driver-java-options", f"-Xlog:gc:file={gc_log}", str(tree / "spark" / "lake.py"),
           "--profile", str(path), "--lake", str(out), "--once", "--records-per-partition", str(per_partition),
           *(["--max-records-per-batch", str(batch_records)] if batch_records else [])]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable, **python_path,
                                 "PATH": f"{VENV_BIN}:{os.environ['PATH']}"})
    peak = [0.0]
    seen: set[int] = set()
    kinds: dict[int, str] = {}
    # the most each process of the job (the driver's JVM too) was seen to have used (sampled: the machine's load
    # stretches wall time, not CPU time; what a process uses after its last sample is missed)
    cpu: dict[int, float] = {}

    def watch() -> None:  # the driver Python process: the JVM's child running lake.py
        while proc.poll() is None:
            tree = _cpu_tree(proc.pid)
            for pid, (used, parent) in tree.items():  # parents first (the tree's order): a child's kind needs theirs
                cpu[pid] = max(cpu.get(pid, 0.0), used)
                kind = _kind(pid, kinds.get(parent))  # again each time: spark-submit's shell execs the JVM
                if kind != "other" or pid not in kinds:
                    kinds[pid] = kind
            for child in _children(proc.pid):
                try:
                    cmdline = Path(f"/proc/{child}/cmdline").read_text()
                    if "lake.py" in cmdline and "python" in cmdline.split("\0")[0]:
                        seen.add(child)
                except OSError:
                    pass
            for pid in seen:
                peak[0] = max(peak[0], _hwm(pid))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output, _ = proc.communicate()
    total = time.monotonic() - t0
    watcher.join()
    (out.parent / f"{out.name}-{executors}.log").write_text(output)  # the job's lines, for the record
    if proc.returncode != 0:
        raise SystemExit(f"lake job failed: {output[-3000:]}")
    batches = [float(s) for s in re.findall(r"executors?, ([0-9.]+) s", output)]
    each = tuple(batches)
    split = []
    for part in ("reading and planning", "executors' writes", "driver's commits"):
        spent = sum(float(s) for s in re.findall(part + r" ([0-9.]+) s", output))
        split.append(spent)
        log(f"  {part}: {spent:.2f} s")
    writers = max((int(n) for n in re.findall(r"files written by (\d+) executor", output)), default=0)
    before = live = 0.0
    for a, b in re.findall(r"(\d+)M->(\d+)M", gc_log.read_text() if gc_log.exists() else ""):
        before, live = max(before, float(a)), max(live, float(b))
    pauses, paused, humongous, collector = executor_gc(sorted(out.parent.glob(f"gcx-{out.name}-*.log")))
    (out.parent / f"{out.name}-cpu.txt").write_text("".join(  # each process, for the record
        f"{pid} {kinds.get(pid, 'other')} {used:.2f}\n" for pid, used in cpu.items()))
    by: dict[str, float] = {}
    for pid, used in cpu.items():
        by[kinds.get(pid, "other")] = by.get(kinds.get(pid, "other"), 0.0) + used
    return LakeRun(total, sum(batches), len(batches), before, live, peak[0], writers, sum(cpu.values()),
                   (split[0], split[1], split[2]), pauses, paused, humongous, collector, by, each)


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME:KEY=VALUE[;KEY=VALUE...]` -> (NAME, (KEY=VALUE, ...)); `NAME:` has no settings."""
    name, sep, rest = text.partition(":")
    settings = tuple(kv.strip() for kv in rest.split(";") if kv.strip())
    if not sep or not name or any("=" not in kv for kv in settings):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:KEY=VALUE[;KEY=VALUE...] or NAME:")
    return name, settings


def variants(run: rig.Run, base: Path, executors: int, per_partition: int, rows: int, args: argparse.Namespace) -> None:
    """The lake job on the topic, once per variant per round, alternating, each into an empty lake."""
    print(f"\n{rows:,} row changes, lake --once on {cluster(executors)}, {args.rounds} rounds; variants: "
          + "; ".join(f"{name} = {' '.join(conf) or '(nothing added)'}" for name, conf in args.variant))
    print("| round | variant | load before/after | CPU s from launch | from launch | in the batch | reading and "
          "planning | executors' writes | executor GC: collector, pauses (humongous), paused | each batch (s) | "
          "CPU s by process |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    done: dict[str, list[LakeRun]] = {}
    for n in range(1, args.rounds + 1):
        order = args.variant if n % 2 else args.variant[::-1]
        for name, conf in order:
            out = base / f"lake-{name}-{n}"
            load = rig.load_average().split()[0]
            try:
                r = lake(run.producer_profile, out, executors, per_partition, conf, args.batch_records)
            except SystemExit as e:  # e.g. a Python worker that did not connect back in time on a loaded machine
                log(str(e))
                print(f"| {n} | {name} | {load}/{rig.load_average().split()[0]} | failed | | | | | | | |", flush=True)
                continue
            done.setdefault(name, []).append(r)
            print(f"| {n} | {name} | {load}/{rig.load_average().split()[0]} | {r.cpu:.1f} | {r.launch:.1f} s | "
                  f"{r.batches:.1f} s | {r.split[0]:.1f} s | {r.split[1]:.1f} s | {r.gc_name}, {r.gc_pauses} "
                  f"({r.gc_humongous}), {r.gc_seconds:.2f} s | {' + '.join(f'{x:.1f}' for x in r.each)} | "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted((r.cpu_by or {}).items(), key=lambda kv: -kv[1]))
                  + " |", flush=True)
    print("\nmeans: " + "; ".join(
        f"{name}: CPU {sum(r.cpu for r in rs) / len(rs):.1f} s, batch {sum(r.batches for r in rs) / len(rs):.1f} s"
        for name, rs in done.items()))


def consumer(run: rig.Run, gtid: str) -> float:
    """Seconds from cdc-consumer's launch until the follower's checkpoint is at `gtid`."""
    t0 = time.monotonic()
    cli = run.consumer()
    done = run.wait_applied(gtid, 1800, cli)
    rig.stop_cli(cli)
    return done - t0


def keyless_workload(port: int, rows: int) -> int:
    """Inserts into a key-less table, DELETE ... LIMIT, UPDATE, an ADD COLUMN with a default, more inserts:
    the row changes made."""
    conn = connect(port)
    changes = 0
    with conn.cursor() as cur:
        for start in range(0, rows, 1000):
            changes += cur.executemany("INSERT INTO bench.k VALUES (%s, %s, %s)",
                                       [(i % 5000, f"b{i % 97}", i) for i in range(start, min(start + 1000, rows))])
            conn.commit()
        for a in range(0, 500):
            changes += cur.execute(f"DELETE FROM bench.k WHERE a = {a} LIMIT 1")
        conn.commit()
        changes += cur.execute("UPDATE bench.k SET b = 'updated' WHERE a BETWEEN 1000 AND 1200")
        conn.commit()
        cur.execute("ALTER TABLE bench.k ADD COLUMN d INT NOT NULL DEFAULT 7")
        changes += cur.executemany("INSERT INTO bench.k VALUES (%s, %s, %s, %s)",
                                   [(i, "late", i, i) for i in range(1000)])
        conn.commit()
    conn.close()
    return changes


def reused(base: Path) -> tuple[Any, Any, rig.Run]:
    """The running servers and the topic an interrupted run left in `base` (--reuse)."""
    from harness import Server

    def port(profile: Path) -> int:
        return int(re.search(r"port = (\d+)", profile.read_text()).group(1))  # type: ignore[union-attr]

    leader = Server("leader", base / "leader", port(base / "run" / "producer.toml"))
    follower = Server("follower", base / "follower", port(base / "run" / "consumer.toml"))
    run = rig.Run.__new__(rig.Run)
    run.dir, run.leader, run.follower, run.stream = base / "run", leader, follower, base / "run" / "stream"
    run.producer_profile, run.consumer_profile = base / "run" / "producer.toml", base / "run" / "consumer.toml"
    return leader, follower, run


def backlog(base: Path, changes: int, args: argparse.Namespace, full: bool) -> None:
    """One backlog of `changes` row changes on fresh servers, measured."""
    inserts = round(changes / 1.2)
    if args.reuse and (base / "run" / "producer.toml").exists():  # servers and topic of an interrupted run
        leader, follower, run = reused(base)
        counts = Counts(inserts, inserts // 10, inserts // 10)
        gtid = leader.gtid()
    else:
        leader, follower = rig.start_servers(base, ["leader", "follower"])
    try:
        if not (args.reuse and (base / "run" / "producer.toml").exists()):
            run = rig.Run(base / "run", leader, follower)
            producer = run.producer()
            producer.wait_line("streaming from")
            leader.execute(*SCHEMA)
            log(f"{changes:,} changes: the standard workload, {inserts:,} inserts, {inserts // 10:,} updates and "
                "deletes")
            counts = standard_workload(leader.port, inserts)
            gtid = leader.gtid()
            run.wait_published(gtid, 3600, producer)
            rig.stop_cli(producer)
        rows, secs, records = plain_python(run.stream)
        batch_partitions = max(1, math.ceil(min(records, args.batch_records or 5000) / args.partitions))
        log(f"{records:,} log records, {rows:,} rows; plain Python {secs:.2f} s")
        if args.variant:
            variants(run, base, args.executors[0], batch_partitions, rows, args)
            return
        table = [("plain Python: LogReader + decode_event, 1 process", rows, secs, "")]
        executors = args.executors if full else [max(args.executors)]
        quarter = records // 4
        got = plain_python(run.stream, quarter)[0]
        for n in executors if full else []:
            s = source(run.producer_profile, n, quarter, args.partitions)
            table.append((f"source, batch, generic images, a quarter of the topic, {cluster(n)}, {args.partitions} "
                          "partitions", got, s, f"{got / s / n:,.0f} rows/s per core"))
        runs = {}
        for n in executors:
            r = lake(run.producer_profile, base / f"lake{n}", n, batch_partitions)
            runs[n] = r
            log(f"lake on {n} executor(s): {r}")
            table.append((f"lake --once on {cluster(n)}, from launch", rows, r.launch,
                          f"driver peak: JVM heap {r.heap_before:.0f} MiB used before GC, {r.heap_live:.0f} MiB "
                          f"live after GC; Python RSS {r.python_rss:.0f} MiB; {r.cpu:.1f} CPU seconds (all its "
                          f"processes): {rows / r.cpu:,.0f} rows per CPU second"))
            table.append((f"lake on {cluster(n)}, in its {r.count} micro-batches", rows, r.batches,
                          f"files written by {r.executors} executor(s)"))
        if full:
            s = consumer(run, gtid)
            table.append(("cdc-consumer to MariaDB, from launch", rows, s, ""))
        print(f"\n{changes:,} row changes ({counts.total:,} + {rows - counts.total} DDL rows), {records:,} log records")
        print("| what | seconds | rows/s | note |")
        print("|---|---:|---:|---|")
        for name, r_, s_, note in table:
            print(f"| {name} | {s_:.2f} | {r_ / s_:,.0f} | {note} |")
        if full:
            print("from launch, lake / cdc-consumer: " + ", ".join(
                f"{cluster(n)} {r.launch / s:.2f}x" for n, r in runs.items()))
        if full:
            leader.execute(*KEYLESS)
            made = keyless_workload(leader.port, args.keyless)
            producer = run.producer()
            run.wait_published(leader.gtid(), 3600, producer)
            rig.stop_cli(producer)
            n = max(args.executors)
            before = runs[n]
            r = lake(run.producer_profile, base / f"lake{n}", n, batch_partitions)  # continues the lake above
            print(f"\nkey-less table and ADD COLUMN: {made:,} row changes, lake on {cluster(n)}: {r.launch:.2f} s "
                  f"from launch, {r.batches:.2f} s in {r.count} micro-batches ({made / r.batches:,.0f} rows/s), "
                  f"driver peak JVM heap {r.heap_before:.0f} MiB before GC / {r.heap_live:.0f} MiB live, Python RSS "
                  f"{r.python_rss:.0f} MiB (state table of {before.count} batches before)")
    finally:
        rig.kill_started()
        rig.stop_servers([leader, follower])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=int, default=250_000, help="row changes of the smaller backlog (0: skip it)")
    p.add_argument("--large", type=int, default=1_000_000, help="row changes of the larger backlog")
    p.add_argument("--executors", default="1,2", help="executor counts to run the source and the lake on")
    p.add_argument("--partitions", type=int, default=4, help="Spark partitions of a read (and of a micro-batch)")
    p.add_argument("--keyless", type=int, default=50_000, help="inserts of the key-less workload")
    p.add_argument("--reuse", type=Path, help="a base directory an interrupted run left (servers still running)")
    p.add_argument("--variant", type=parse_variant, action="append", default=[],
                   help="NAME:KEY=VALUE[;KEY=VALUE...]: only the lake on the larger backlog, once per variant and "
                        "round with these --conf settings (NAME: for none)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the variants")
    p.add_argument("--batch-records", type=int, help="the lake job's --max-records-per-batch (default: the job's)")
    args = p.parse_args()
    args.executors = [int(n) for n in args.executors.split(",")]
    base = args.reuse or Path(tempfile.mkdtemp(prefix="bench-spark-"))
    backlog(base / "large", args.large, args, full=True)
    if args.small and not args.variant:
        backlog(base / "small", args.small, args, full=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
