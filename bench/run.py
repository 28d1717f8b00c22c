"""mysql-cdc benchmarks: every figure beside a baseline measured in the same run, back to back.

    python bench/run.py [--rows N] [--quick] [--lag-seconds S] [--no-profile] [--keep]

Starts its own leader and two followers (local MariaDB, temp dirs, free ports):
one for cdc-consumer, one for native replication. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rig
from load import (
    LAG_TABLE,
    MAX_RATE_ROWS,
    POLL,
    SCHEMA,
    TABLE,
    TXN_ROWS,
    Counts,
    LagResult,
    measure_lag,
    phase_seconds,
    standard_workload,
)

DEFAULT_ROWS = 100_000
PRODUCER_ROUNDS = 3  # best of 3: a round moves by up to a third on these shared 2-core machines
CONSUMER_ROUNDS = 2  # per row path, alternating which goes first
CONSUMER_PATHS = ("binlog", "sql")  # [replay] rows
CONSUMER_LABELS = {"binlog": "BINLOG replay", "sql": "SQL path"}
QUICK_ROWS = 20_000


@dataclass
class Figure:
    """One line of the table: ours beside its baseline; ratio = ours / baseline."""

    figure: str
    unit: str
    ours: float
    baseline: float | None
    baseline_is: str
    better: str  # "higher" or "lower"

    @property
    def ratio(self) -> float | None:
        """ours / baseline (None without a baseline)."""
        return self.ours / self.baseline if self.baseline else None


def log(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Bench:
    """The whole benchmark: servers, workload, the four benchmarks and the profiles."""

    def __init__(self, base: Path, rows: int, lag_seconds: float, rates: list[int | None], metrics: bool = False,
                 before: Path | None = None, rounds: int = PRODUCER_ROUNDS, workers: int = 1, lag_rounds: int = 1):
        self.base, self.rows, self.lag_seconds, self.rates = base, rows, lag_seconds, rates
        self.lag_rounds = lag_rounds  # runs of each side per lag rate, pooled
        self.workers = workers  # the consumer's [replay] workers
        self.rounds = rounds  # of each side of the producer figures (and of the consumer's variants)
        self.metrics = metrics  # also run the producer and the consumer with the metrics endpoint on
        self.before = before  # also run them from the modules in this directory (an earlier version)
        self.timeout = max(300.0, rows / 200)
        self.figures: list[Figure] = []
        self.checks: dict[str, bool] = {}
        self.notes: list[str] = []
        self.profiles: dict[str, dict] = {}
        self.counts = Counts(0, 0, 0)
        self.next_lag_id = 1
        self.producer_cpu: dict[str, list[float]] = {}  # "ours", "metrics", "before" -> CPU s of each round
        self.lag_peaks = [0.0, 0.0]  # the programs' (producer, consumer) peak RSS in the lag runs, MB

    def add(self, figure: str, unit: str, ours: float, baseline: float | None, baseline_is: str,
            better: str = "higher") -> None:
        """Record a figure (and log it right away)."""
        f = Figure(figure, unit, ours, baseline, baseline_is, better)
        self.figures.append(f)
        log(f"{figure}: ours {fmt(ours)} {unit}, baseline {fmt(baseline)} ({baseline_is})")

    # -- setup -------------------------------------------------------------

    def setup(self) -> None:
        """Servers, the seed topic (the schema's DDL, published by cdc-producer) and the standard workload."""
        log("starting leader and two followers (local MariaDB)")
        self.leader, self.follower, self.replica = rig.start_servers(self.base, ["leader", "follower", "replica"])
        self.notes.append(rig.durability([self.follower, self.replica]))
        # A producer started on an empty topic begins at the leader's current position:
        # let it publish the schema, so every later copy of this topic resumes right after it.
        seed = rig.Run(self.base / "seed", self.leader, self.follower)
        producer = seed.producer()
        producer.wait_line("streaming from")
        self.gtid_schema = self.leader.gtid()  # the native replicas start here (they replay the DDL too)
        self.leader.execute(*SCHEMA)
        self.gtid_start = self.leader.gtid()
        seed.wait_published(self.gtid_start, 60, producer)
        rig.stop_cli(producer)
        self.seed = seed.stream
        log(f"standard workload: {self.rows:,} inserts, then {self.rows // 10:,} updates and deletes")
        t0 = time.monotonic()
        self.counts = standard_workload(self.leader.port, self.rows)
        self.gtid_end = self.leader.gtid()
        log(f"workload written in {time.monotonic() - t0:.1f}s; binlog range {self.gtid_start} .. {self.gtid_end}")

    # -- 1. producer -------------------------------------------------------

    def producer(self) -> None:
        """cdc-producer over the workload's binlog range vs python-mysql-replication's decode loop.

        Each side runs `rounds` times (PRODUCER_ROUNDS by default), rotating which goes first (right after the
        workload the leader is still purging and flushing, which slows whoever runs first);
        each figure is the side's best round."""
        n = self.counts.total
        ours: list[tuple[float, float]] = []  # (from launch, after startup) seconds
        loop: list[tuple[float, float]] = []
        with_metrics: list[tuple[float, float]] = []
        before: list[tuple[float, float]] = []
        sides: list[tuple[Callable[[int], tuple[float, float]], list[tuple[float, float]]]] = [
            (self._producer_once, ours), (self._decode_loop_once, loop)]
        if self.metrics:
            sides.append((lambda r: self._producer_once(r, metrics=True), with_metrics))
        if self.before:
            sides.append((lambda r: self._producer_once(r, before=True), before))
        for round_ in range(self.rounds):
            # Each round starts with a different side: whoever runs first right after the workload is slowed.
            for side, times in sides[round_ % len(sides):] + sides[:round_ % len(sides)]:
                times.append(side(round_))
        self.notes.append("producer rounds (from launch, s): ours " + ", ".join(f"{o[0]:.2f}" for o in ours)
                          + "; decode loop " + ", ".join(f"{b[0]:.2f}" for b in loop)
                          + ("; ours with metrics on " + ", ".join(f"{m[0]:.2f}" for m in with_metrics)
                             if with_metrics else "")
                          + ("; --before code " + ", ".join(f"{b[0]:.2f}" for b in before) if before else ""))
        self.notes.append("producer CPU from launch (s): " + "; ".join(
            f"{side} " + ", ".join(f"{c:.2f}" for c in cpus) for side, cpus in self.producer_cpu.items()))
        if before:
            self.add("producer: CPU from launch, best round", "s", min(self.producer_cpu["ours"]),
                     min(self.producer_cpu["before"]), "the --before code (same run)", "lower")
        self.add("producer: binlog -> topic, from launch", "rows/s", n / min(o[0] for o in ours),
                 n / min(b[0] for b in loop), "python-mysql-replication decode loop, from launch")
        self.add("producer: binlog -> topic, after startup", "rows/s", n / min(o[1] for o in ours),
                 n / min(b[1] for b in loop), "decode loop, from its first row event")
        if with_metrics:
            self.add("producer: from launch, metrics on", "rows/s", n / min(m[0] for m in with_metrics),
                     n / min(o[0] for o in ours), "ours, metrics off (same run)")
            self.add("producer: after startup, metrics on", "rows/s", n / min(m[1] for m in with_metrics),
                     n / min(o[1] for o in ours), "ours, metrics off (same run)")
        if before:
            self.add("producer: from launch, metrics off", "rows/s", n / min(o[0] for o in ours),
                     n / min(b[0] for b in before), "the --before code (same run)")
            self.add("producer: after startup, metrics off", "rows/s", n / min(o[1] for o in ours),
                     n / min(b[1] for b in before), "the --before code (same run)")

    def _producer_once(self, round_: int, metrics: bool = False, before: bool = False) -> tuple[float, float]:
        name = f"producer-{round_}" + ("-metrics" if metrics else "") + ("-before" if before else "")
        run = rig.Run(self.base / name, self.leader, self.follower, seed=self.seed)
        with rig.Scraper() as scraper:
            t0 = time.monotonic()
            proc = run.producer(*(scraper.args if metrics else ()), env=self._code(before))
            t1 = run.wait_published(self.gtid_end, self.timeout, proc)
        streaming = proc.line_time("streaming from")
        cpu = rig.cpu_seconds(proc.proc.pid)  # from launch: the CPU is less noisy than the wall here
        self.producer_cpu.setdefault("before" if before else "metrics" if metrics else "ours", []).append(cpu)
        rig.stop_cli(proc)
        if not metrics and not before:
            self.topic = run.stream  # the pre-filled topic of the consumer benchmarks
        return t1 - t0, t1 - streaming

    def _decode_loop_once(self, round_: int) -> tuple[float, float]:
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, str(HERE / "decode_loop.py"), str(self.leader.port), self.gtid_start,
                              self.gtid_end], check=True, capture_output=True, text=True, timeout=self.timeout)
        wall = time.monotonic() - t0
        base = json.loads(out.stdout)
        self.checks["decode loop saw every row change"] = base["rows"] == self.counts.total
        self.decode_loop_peak = base["peak_rss_mb"]
        return wall, base["seconds"]

    # -- 2. consumer -------------------------------------------------------

    def consumer(self) -> None:
        """cdc-consumer from offset 0 of the pre-filled topic vs native replication of the same range.

        Both row paths ([replay] rows): BINLOG replay and SQL, CONSUMER_ROUNDS rounds alternating
        which goes first, each round beside a native run; each figure is that side's best round."""
        n = self.counts.total
        best: dict[str, tuple[float, list, float, list]] = {}  # path -> (ours s, trace, native s, trace)
        times: dict[str, list[float]] = {path: [] for path in CONSUMER_PATHS}
        for round_ in range(CONSUMER_ROUNDS):
            order = CONSUMER_PATHS if round_ % 2 == 0 else CONSUMER_PATHS[::-1]
            for path in order:
                rig.reset_follower(self.follower)
                run = rig.Run(self.base / f"consumer-{path}-{round_}", self.leader, self.follower, seed=self.topic,
                              rows=path, workers=self.workers)
                ours: list[tuple[float, str]] = []
                t0 = time.monotonic()
                proc = run.consumer()
                t1 = run.wait_applied(self.gtid_end, self.timeout, proc, trace=ours)
                rig.stop_cli(proc)
                native: list[tuple[float, str]] = []
                t2, t3 = self._native_catch_up(native)
                self._check_same(f"consumer ({path})")  # (after the replica's catch-up of this round)
                times[path].append(t1 - t0)
                if path not in best or t1 - t0 < best[path][0]:
                    best[path] = (t1 - t0, ours, t3 - t2, native)
        self.notes.append("consumer rounds (s): " + "; ".join(
            f"{CONSUMER_LABELS[p]} " + ", ".join(f"{t:.2f}" for t in ts) for p, ts in times.items()))
        for path in CONSUMER_PATHS:
            label = CONSUMER_LABELS[path]
            ours_t, ours, native_t, native = best[path]
            self.add(f"consumer ({label}): topic -> follower", "rows/s", n / ours_t, n / native_t, "native replication")
            # The same runs split by kind of change (from the progress traces, polled every 10 ms).
            ours_s = phase_seconds(ours, self.gtid_start, self.counts.marks)
            native_s = phase_seconds(native, self.gtid_start, self.counts.marks)
            for kind in ours_s:
                rows = getattr(self.counts, kind)
                if min(ours_s[kind], native_s[kind]) < 10 * rig.POLL:
                    self.notes.append(f"consumer ({label}): {kind} only: too fast to time at this scale "
                                      "(use more --rows)")
                    continue
                self.add(f"consumer ({label}): {kind} only", "rows/s", rows / ours_s[kind], rows / native_s[kind],
                         "native replication (same run)")
        if self.metrics or self.before:  # metrics on/off and the --before code, on the default (auto) path
            self._consumer_variants(best["binlog"][0])
        if self.before:
            self._sql_before()

    def _sql_before(self) -> None:
        """The SQL path against the --before code: `rounds` rounds of each, alternating which goes first, each
        on a reset follower; best of each, and the follower's mariadbd CPU and the consumer's CPU per round."""
        n = self.counts.total
        times: dict[str, list[tuple[float, float, float]]] = {"ours": [], "before": []}  # (wall, consumer, follower)
        for round_ in range(self.rounds):
            for side in ("ours", "before") if round_ % 2 == 0 else ("before", "ours"):
                rig.reset_follower(self.follower)
                run = rig.Run(self.base / f"consumer-sql-{side}-{round_}", self.leader, self.follower, seed=self.topic,
                              rows="sql", workers=self.workers)
                server0 = rig.server_cpu(self.follower)
                t0 = time.monotonic()
                proc = run.consumer(env=self._code(side == "before"))
                t1 = run.wait_applied(self.gtid_end, self.timeout, proc)
                cpu = rig.cpu_seconds(proc.proc.pid)
                rig.stop_cli(proc)
                times[side].append((t1 - t0, cpu, rig.server_cpu(self.follower) - server0))
        self.add("consumer (SQL path): topic -> follower, against --before", "rows/s",
                 n / min(t for t, _, _ in times["ours"]), n / min(t for t, _, _ in times["before"]),
                 "the --before code (same run)")
        self.notes.append("consumer (SQL path) rounds, wall / consumer CPU / follower mariadbd CPU (s): " + "; ".join(
            {"ours": "ours", "before": "--before code"}[side] + " " + ", ".join(
                f"{t:.2f}/{c:.2f}/{f:.2f}" for t, c, f in rounds) for side, rounds in times.items()))
        self._check_same("consumer (SQL path), against --before")

    def _code(self, before: bool) -> dict[str, str] | None:
        """The environment that runs the --before code instead of this checkout's."""
        return {"PYTHONPATH": str(self.before)} if before and self.before else None

    def _consumer_variants(self, first: float) -> None:
        """The consumer again, in turn with metrics on, off, and from the --before code (each on a reset
        follower), `rounds` times each with the first run; best of each."""
        n = self.counts.total
        variants = ["off"] + (["on"] if self.metrics else []) + (["before"] if self.before else [])
        times: dict[str, list[float]] = {v: [] for v in variants}
        times["off"].append(first)
        for round_ in range(len(variants) * self.rounds - 1):
            variant = variants[(round_ + 1) % len(variants)]
            rig.reset_follower(self.follower)
            run = rig.Run(self.base / f"consumer-{round_}", self.leader, self.follower, seed=self.topic,
                          workers=self.workers)
            with rig.Scraper() as scraper:
                t0 = time.monotonic()
                proc = run.consumer(*(scraper.args if variant == "on" else ()), env=self._code(variant == "before"))
                t1 = run.wait_applied(self.gtid_end, self.timeout, proc)
            rig.stop_cli(proc)
            times[variant].append(t1 - t0)
        self.notes.append("consumer rounds (s): " + "; ".join(
            {"off": "metrics off", "on": "metrics on", "before": "--before code"}[v] + " "
            + ", ".join(f"{t:.2f}" for t in ts) for v, ts in times.items()))
        if self.metrics:
            self.add("consumer: topic -> follower, metrics on", "rows/s", n / min(times["on"]), n / min(times["off"]),
                     "ours, metrics off (same run)")
        if self.before:
            self.add("consumer: topic -> follower, metrics off", "rows/s", n / min(times["off"]),
                     n / min(times["before"]), "the --before code (same run)")
        self._check_same("consumer, variants")

    def _native_catch_up(self, trace: list | None = None) -> tuple[float, float]:
        """Native replication of the schema and workload onto a fresh replica: (start, end) times."""
        rig.reset_follower(self.replica)
        t0 = rig.start_native(self.replica, self.leader, self.gtid_schema)
        t1 = rig.wait_native(self.replica, self.gtid_end, self.timeout, trace)
        self.replica.execute("STOP SLAVE")
        return t0, t1

    def _check_same(self, what: str) -> None:
        want = rig.checksum(self.leader, TABLE)
        key = f"{what}: follower and replica hold the leader's rows"  # every round's check must hold
        self.checks[key] = self.checks.get(key, True) and (
            rig.checksum(self.follower, TABLE) == want == rig.checksum(self.replica, TABLE))

    # -- 3. end to end -----------------------------------------------------

    def end_to_end(self) -> None:
        """Catch-up of the whole workload with producer and consumer started together, vs native catch-up.

        With --before, `rounds` rounds of ours and of the --before code, alternating which goes first
        (ours last: the lag phase resumes its pipeline), each beside a native run; best round of each."""
        n = self.counts.total
        sides = ["ours", "before"] if self.before else ["ours"]
        rounds = self.rounds if self.before else 1
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}  # (ours, native) s per round
        peaks = (0.0, 0.0)
        for round_ in range(rounds):
            for side in sides[::-1] if (rounds - 1 - round_) % 2 == 0 else sides:
                rig.reset_follower(self.follower)
                run = rig.Run(self.base / f"end-to-end-{side}-{round_}", self.leader, self.follower, seed=self.seed,
                              workers=self.workers)
                env = self._code(side == "before")
                t0 = time.monotonic()
                producer, consumer = run.producer(env=env), run.consumer(env=env)
                t1 = run.wait_applied(self.gtid_end, self.timeout, producer, consumer)
                peak = rig.stop_cli(producer), rig.stop_cli(consumer)
                t2, t3 = self._native_catch_up()
                times[side].append((t1 - t0, t3 - t2))
                self._check_same("end to end")
                if side == "ours":
                    self.pipeline = run
                    peaks = (max(peaks[0], peak[0]), max(peaks[1], peak[1]))
        ours, native = min(times["ours"])
        self.add("end to end: catch-up time", "s", ours, native, "native replication catch-up", "lower")
        self.add("end to end: catch-up rate", "rows/s", n / ours, n / native, "native replication catch-up")
        if self.before:
            self.add("end to end: catch-up time, best round", "s", ours, min(times["before"])[0],
                     "the --before code (same run)", "lower")
            self.notes.append("end-to-end rounds (s, ours / native in the round after it): " + "; ".join(
                f"{'--before code' if side == 'before' else side} "
                + ", ".join(f"{o:.2f} / {nat:.2f}" for o, nat in ts) for side, ts in times.items()))
        self.peaks = peaks

    # -- 4. lag and memory -------------------------------------------------

    def lag(self) -> None:
        """Lag p50/p99 at constant insert rates: the pipeline, native replication (and the pipeline from the
        --before code), one after the other per rate, `lag_rounds` times, the order rotating from one round
        and rate to the next; each side's figures over the transactions of all its rounds (a run of 1,000
        transactions has 10 above its p99: one run's p99 moves 2x from run to run here)."""
        for k, rate in enumerate(self.rates):
            sides: list[tuple[str, Callable[[], LagResult]]] = [
                ("ours", lambda r=rate: self._lag_pipeline(r)), ("native", lambda r=rate: self._lag_native(r))]
            if self.before:
                sides.append(("before", lambda r=rate: self._lag_pipeline(r, before=True)))
            runs: dict[str, list[LagResult]] = {side: [] for side, _ in sides}
            for round_ in range(self.lag_rounds):
                shift = (k + round_) % len(sides)
                for side, measure in sides[shift:] + sides[:shift]:
                    runs[side].append(measure())
            got = {side: LagResult.pooled(results) for side, results in runs.items()}
            ours, native = got["ours"], got["native"]
            name = rate_name(rate)
            if self.lag_rounds > 1:
                self.notes.append(f"lag at {name} rows/s, p50 / p99 of each round (ms): " + "; ".join(
                    f"{side} " + ", ".join(f"{1000 * r.percentile(50):.2f} / {1000 * r.percentile(99):.1f}"
                                           for r in results) for side, results in runs.items()))
            self.notes.append(f"lag at {name} rows/s: the writer achieved {ours.achieved:,.0f} rows/s for ours, "
                              f"{native.achieved:,.0f} for native"
                              + (f", {got['before'].achieved:,.0f} for the --before code" if self.before else "")
                              + f", in {len(ours.lags):,} and {len(native.lags):,} transactions; the follower polled "
                              f"every {1000 * ours.poll_interval:.2f} ms, the replica every "
                              f"{1000 * native.poll_interval:.2f} ms (mean); load average {rig.load_average()}")
            for p in (50, 99):
                self.add(f"lag p{p} at {name} rows/s", "ms", 1000 * ours.percentile(p),
                         1000 * native.percentile(p), "native replication", "lower")
                if self.before:
                    self.add(f"lag p{p} at {name} rows/s, --before code", "ms", 1000 * got["before"].percentile(p),
                             1000 * native.percentile(p), "native replication", "lower")
        self._lag_pipeline(None, measure=False)  # the follower also gets what was written while it was stopped
        self.replica.execute("START SLAVE")  # and the replica (the last rate's runs may have ended with ours)
        rig.wait_native(self.replica, self.leader.gtid(), self.timeout)
        self.replica.execute("STOP SLAVE")
        self.checks["lag runs: follower and replica hold the leader's rows"] = (
            rig.checksum(self.follower, LAG_TABLE) == rig.checksum(self.leader, LAG_TABLE)
            == rig.checksum(self.replica, LAG_TABLE))

    def _lag_native(self, rate: int | None) -> LagResult:
        """Native replication caught up, then the lag at `rate`."""
        self.replica.execute("START SLAVE")
        try:
            rig.wait_native(self.replica, self.leader.gtid(), self.timeout)
            return measure_lag(self.leader.port, self.replica.port, rate, self.lag_seconds, self._lag_ids(rate))
        finally:
            self.replica.execute("STOP SLAVE")

    def _lag_pipeline(self, rate: int | None, measure: bool = True, before: bool = False) -> LagResult:
        """Start the pipeline (from the --before code if `before`), let it catch up, measure the lag at `rate`
        (None: unpaced) unless not `measure`, stop it; keeps the programs' peak RSS."""
        run = self.pipeline  # resumes where the end-to-end run stopped
        env = self._code(before)
        producer, consumer = run.producer(env=env), run.consumer(env=env)
        try:
            producer.wait_line("streaming from")
            consumer.wait_line("applying topic")
            run.wait_applied(self.leader.gtid(), self.timeout, producer, consumer)  # caught up first
            if not measure:
                return LagResult(rate, 0.0)
            return measure_lag(self.leader.port, self.follower.port, rate, self.lag_seconds, self._lag_ids(rate))
        finally:
            peaks = rig.stop_cli(producer), rig.stop_cli(consumer)
            if not before:
                self.lag_peaks = [max(a, b) for a, b in zip(self.lag_peaks, peaks)]

    def _lag_ids(self, rate: int | None) -> int:
        first = self.next_lag_id
        self.next_lag_id += int((rate or 500_000) * self.lag_seconds) + 10_000  # (unpaced: above any rate here)
        return first

    def memory(self) -> None:
        """Peak RSS of the end-to-end run's processes; the decode loop's as the producer's baseline."""
        self.add("peak RSS cdc-producer (end-to-end run)", "MB", self.peaks[0], self.decode_loop_peak, "decode loop",
                 "lower")
        self.add("peak RSS cdc-consumer (end-to-end run)", "MB", self.peaks[1], None, "-", "lower")
        if self.lag_peaks[0]:
            self.add("peak RSS cdc-producer (lag runs)", "MB", self.lag_peaks[0], self.decode_loop_peak, "decode loop",
                     "lower")
            self.add("peak RSS cdc-consumer (lag runs)", "MB", self.lag_peaks[1], None, "-", "lower")

    # -- 5. profiles -------------------------------------------------------

    def profile(self, out_dir: Path) -> None:
        """The producer and consumer benchmarks again, under py-spy from the end of their startup
        ('streaming from' / 'applying topic'; startup is the gap between the two producer figures); with
        --before, the earlier code's producer too (bench/profiles/producer-before.txt)."""
        out_dir.mkdir(exist_ok=True)
        for before in (False, True) if self.before else (False,):  # with --before: its producer too, after ours
            name = "producer-before" if before else "producer"
            run = rig.Run(self.base / f"profile-{name}", self.leader, self.follower, seed=self.seed)
            self._profile(name, run.producer(env=self._code(before)), "streaming from", out_dir,
                          lambda proc, run=run: run.wait_published(self.gtid_end, self.timeout, proc))
        for path in CONSUMER_PATHS:  # consumer.txt (BINLOG replay), consumer-sql.txt
            name = "consumer" if path == "binlog" else f"consumer-{path}"
            rig.reset_follower(self.follower)
            run = rig.Run(self.base / f"profile-{name}", self.leader, self.follower, seed=self.topic, rows=path)
            self._profile(name, run.consumer(), "applying topic", out_dir,
                          lambda proc, run=run: run.wait_applied(self.gtid_end, self.timeout, proc))

    def _profile(self, name: str, proc: rig.TimedCli, started: str, out_dir: Path,
                 wait: Callable[[rig.TimedCli], object]) -> None:
        """Sample `proc` from its `started` line until `wait` returns; keep its top functions."""
        proc.wait_line(started)
        path = out_dir / f"{name}.txt"
        spy, t0, cpu0 = rig.pyspy_attach(proc.proc.pid, path), time.monotonic(), rig.cpu_seconds(proc.proc.pid)
        wait(proc)
        wall, cpu = time.monotonic() - t0, rig.cpu_seconds(proc.proc.pid) - cpu0
        rig.stop_cli(proc)  # py-spy stops when its target exits
        top, samples = rig.pyspy_top(path, spy)
        self.profiles[name] = {"wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "samples": samples,
                               "top": top}
        if name.startswith("producer"):
            self.profiles[name]["parts"] = rig.pyspy_shares(path, PRODUCER_PARTS)


# Where the producer's samples go (rig.pyspy_shares: the first of these functions on a sample's stack).
PRODUCER_PARTS = [
    ("the topic's commit (append thread)", "BackgroundAppends._run"),
    ("rows -> JSON (rowcode's generated code)", "encode_rows"),
    ("staging a batch on the topic", "EmbeddedTopic._write"),
    ("events -> JSON (encode_event)", "encode_event"),
    ("binlog events -> base64", "Assembler._finish"),
    ("python-mysql-replication: reading events", "BinLogStreamReader.fetchone"),
    ("the rest of dispatch (assembler, outbox)", "dispatch"),
]
PHASES = ("producer", "consumer", "profile", "end-to-end", "lag")
# The consumer and profile phases read the topic the producer phase wrote; the lag
# phase resumes the end-to-end pipeline (and the end-to-end phase needs the producer's decode-loop peak).
_NEEDS = {"consumer": {"producer"}, "profile": {"producer"}, "lag": {"end-to-end"}, "end-to-end": {"producer"}}


def needed_phases(asked: list[str]) -> set[str]:
    """The asked phases plus what they depend on; unknown names are an error."""
    unknown = set(asked) - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phase(s) {', '.join(sorted(unknown))}; choose from {', '.join(PHASES)}")
    out = set(asked)
    while True:
        more = set().union(*(_NEEDS.get(p, set()) for p in out)) - out
        if not more:
            return out
        out |= more


def rate_name(rate: int | None) -> str:
    """A lag rate as the table names it: '5,000', or 'max' for the unpaced writer."""
    return "max" if rate is None else f"{rate:,}"


def fmt(x: float | None) -> str:
    """A figure for the table: 3 significant digits, thousands separated."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 1 else f"{x:.2g}"


def table(b: Bench) -> str:
    """The results as a fixed-width text table, with the scale and the checks."""
    c = b.counts
    lines = [
        f"scale: {c.inserts:,} inserts + {c.updates:,} updates + {c.deletes:,} deletes = {c.total:,} row changes "
        f"in transactions of {TXN_ROWS:,} rows (--rows {b.rows}); lag: {b.lag_seconds:g} s per rate and run, "
        f"{b.lag_rounds} run(s) of each side pooled, the follower "
        f"polled every {1000 * POLL:g} ms; consumer [replay] workers = {b.workers}; load average {rig.load_average()}",
        "",
        f"{'figure':<62} {'unit':>6} {'ours':>9} {'baseline':>9} {'ratio':>6}  baseline is",
    ]
    for f in b.figures:
        ratio = f"{f.ratio:.2f}" if f.ratio is not None else "-"
        lines.append(f"{f.figure:<62} {f.unit:>6} {fmt(f.ours):>9} {fmt(f.baseline):>9} {ratio:>6}  {f.baseline_is}")
    lines.append("ratio = ours / baseline (rows/s: higher is better; s, ms, MB: lower is better)")
    lines += b.notes
    for name, ok in b.checks.items():
        lines.append(f"check: {name}: {'yes' if ok else 'NO'}")
    for name, p in b.profiles.items():
        who = name.replace("-before", " (the --before code)")
        lines += ["", f"profile of cdc-{who}: {p['cpu_seconds']} s CPU in {p['wall_seconds']} s; top functions by "
                      f"own samples (py-spy, not idle; {p['samples']:,} samples):"]
        lines += [f"  {t['percent']:5.1f}%  {t['function']}" for t in p["top"]]
        if "parts" in p:
            lines += ["  where (a sample counts for the first part on its stack, idle waits left out):"]
            lines += [f"  {pct:5.1f}%  {label}" for label, pct in p["parts"].items()]
    return "\n".join(lines)


def main() -> int:
    """Run every phase, print the table, write results.json; 1 if a correctness check failed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, help=f"inserts of the standard workload (default {DEFAULT_ROWS:,})")
    ap.add_argument("--quick", action="store_true", help=f"~1 minute: --rows {QUICK_ROWS:,}, 5 s of lag per rate")
    ap.add_argument("--lag-seconds", type=float, help="seconds of constant-rate load per rate (default 20)")
    ap.add_argument("--rates", default="5000,20000,max",
                    help="constant insert rates for the lag figures, rows/s; 'max': transactions of "
                         f"{MAX_RATE_ROWS} rows back to back, as fast as the leader takes them")
    ap.add_argument("--workers", type=int, default=1,
                    help="the consumer's [replay] workers (written into its profile when not 1)")
    ap.add_argument("--no-profile", action="store_true", help="skip the py-spy runs")
    ap.add_argument("--no-binlog-events", action="store_true",
                    help="producer profiles with [events] binlog = false (row events without the leader's binlog "
                         "events; the consumer then applies rows as SQL)")
    ap.add_argument("--keep", action="store_true", help="keep the servers' and topics' temp dir")
    ap.add_argument("--metrics", action="store_true",
                    help="also run the producer and the consumer with the metrics endpoint on (scraped every "
                         "second), beside the same runs with it off")
    ap.add_argument("--rounds", type=int, default=PRODUCER_ROUNDS,
                    help=f"rounds of each side of the producer figures and of the consumer variants "
                         f"(default {PRODUCER_ROUNDS}; best of them counts)")
    ap.add_argument("--lag-rounds", type=int, default=1,
                    help="runs of each side per lag rate (default 1); the figures pool their transactions")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also run the producer and the consumer from the cdc_* packages in DIR (an earlier "
                         "version: git archive REV cdc_stream cdc_producer cdc_consumer | tar -x -C DIR)")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help="comma-separated subset of: " + ", ".join(PHASES) + " (each pulls in what it needs)")
    args = ap.parse_args()
    rig.EVENTS_BINLOG = not args.no_binlog_events
    phases = needed_phases(args.phases.split(","))
    rows = args.rows or (QUICK_ROWS if args.quick else DEFAULT_ROWS)
    lag_seconds = args.lag_seconds or (5.0 if args.quick else 20.0)
    sys.setswitchinterval(0.0005)  # the lag writer and poller threads: timestamps not held up by the GIL
    base = Path(tempfile.mkdtemp(prefix="mysql-cdc-bench-"))
    rates: list[int | None] = [None if r == "max" else int(r) for r in args.rates.split(",")]
    b = Bench(base, rows, lag_seconds, rates, metrics=args.metrics,
              before=args.before.resolve() if args.before else None, rounds=args.rounds, workers=args.workers,
              lag_rounds=args.lag_rounds)
    started = time.monotonic()
    try:
        b.setup()
        if "producer" in phases:
            b.producer()
        if "consumer" in phases:
            b.consumer()
        if "profile" in phases and not args.no_profile and shutil.which("py-spy", path=str(rig.BIN)):
            b.profile(HERE / "profiles")  # (before the lag runs: they add to the binlog)
        if "end-to-end" in phases:
            b.end_to_end()
        if "lag" in phases:
            b.lag()
        if "end-to-end" in phases:
            b.memory()
    finally:
        rig.kill_started()
        rig.stop_servers([s for s in (getattr(b, n, None) for n in ("leader", "follower", "replica")) if s])
        if args.keep:
            log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    text = table(b)
    print(text)
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    (HERE / "results.json").write_text(json.dumps({
        "scale": {"rows": rows, "inserts": b.counts.inserts, "updates": b.counts.updates,
                  "deletes": b.counts.deletes, "row_changes": b.counts.total, "txn_rows": TXN_ROWS,
                  "lag_seconds": lag_seconds, "lag_rounds": b.lag_rounds, "rates": b.rates},
        "figures": [{**f.__dict__, "ratio": f.ratio} for f in b.figures],
        "checks": b.checks, "notes": b.notes, "profiles": b.profiles,
    }, indent=2) + "\n")
    return 0 if all(b.checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
