"""Many small transactions: sysbench oltp_write_only through each program, beside native replication.

    python bench/oltp.py [--events N] [--rounds R] [--before DIR] [--phases cpu,catchup] [--live RATE]
                         [--workers N] [--parallel N] [--profile]

Starts its own leader and two followers (local MariaDB, temp dirs, free ports, the same durability
settings, printed). On the leader, sysbench `oltp_write_only` writes N transactions of 4 row changes
each (UPDATE of the indexed k, UPDATE of c, DELETE and INSERT of one row) with 4 threads; the binlog
they leave is the backlog. Then, rounds rotating which side goes first:

- cpu: the producer over the backlog, from a topic that holds everything before it, beside
  python-mysql-replication's decode loop over the same binlog range; the consumer from that topic
  onto a reset follower, on both row paths, beside a native replica (single-threaded). The figures
  are CPU seconds per 1,000 source transactions (user + system of the process, from /proc, from its
  startup line to the end): on these shared 2-core machines wall time is noise. Wall figures are
  printed beside them (and the follower's/replica's mariadbd CPU).
- catchup: wall time to apply the backlog: the consumer on the recorded topic, producer and consumer
  launched together (end to end), a native replica single-threaded and with slave_parallel_threads =
  --parallel in both parallel modes (optimistic, conservative).
- live (--live RATE): sysbench at --rate=RATE for --live-seconds against the leader alone, with the
  pipeline following it, with a native replica following it: the leader's achieved rate in each case,
  and how far behind each follower was when the load ended.
- with --before DIR, the programs also run from the cdc_* packages in DIR
  (git archive REV cdc_stream cdc_producer cdc_consumer | tar -x -C DIR).

Peak RSS of both programs over all runs, the load average and the correctness checks close the table.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rig
from load import DB, connect

from cdc_stream.topics.embedded import EmbeddedStream

TABLES, TABLE_SIZE, THREADS = 4, 10_000, 4
DEFAULT_EVENTS = 20_000
DEFAULT_ROUNDS = 2
PATHS = ("binlog", "sql")


def log(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Sample:
    """One timed run: CPU seconds of the program after its startup, wall seconds, and the server's CPU."""

    cpu: float
    wall: float
    server_cpu: float = 0.0


@dataclass
class Side:
    """The rounds of one variant of one figure."""

    name: str
    samples: list[Sample] = field(default_factory=list)

    def best(self) -> Sample:
        """The round with the least CPU (noise on a shared machine only adds)."""
        return min(self.samples, key=lambda s: s.cpu)


@dataclass
class LiveRow:
    """One fixed-rate run: the leader's achieved rate, and how far behind its follower was at the end."""

    round: int
    variant: str
    rate: int  # sysbench --rate
    txns: int
    per_second: float  # the leader's achieved rate (sysbench's transactions per second)
    p95_ms: float  # sysbench's 95th percentile latency (with --rate: including the wait in its queue)
    leader_cpu: float  # the leader's mariadbd CPU ms per 1,000 transactions
    behind: dict[str, float]  # who -> seconds after the load ended until it held the last transaction
    cpu: list[float]  # producer, consumer: CPU ms per 1,000 transactions (load + catch-up)
    load: str  # load average at the end

    def describe(self, seconds: float) -> str:
        """One line for the log and the table."""
        return (f"live, round {self.round + 1}, {self.variant}: --rate={self.rate} for {seconds:g} s: the leader ran "
                f"{self.txns:,} transactions ({self.per_second:,.1f}/s, p95 {self.p95_ms:.2f} ms, its CPU "
                f"{self.leader_cpu:,.0f} ms / 1k txn)"
                + ("; behind when the load ended: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.behind.items())
                   if self.behind else "")
                + (f"; CPU per 1,000 transactions: producer {self.cpu[0]:,.0f} ms, consumer {self.cpu[1]:,.0f} ms"
                   if self.cpu else "")
                + f"; load average {self.load}")


def _sysbench_rate(out: str) -> tuple[int, float, float]:
    """sysbench run's output -> (transactions, per second, 95th percentile latency ms)."""
    txns = per_second = p95 = None
    for line in out.splitlines():
        words = line.split()
        if line.strip().startswith("transactions:"):
            txns, per_second = int(words[1]), float(words[2].lstrip("("))
        elif line.strip().startswith("95th percentile:"):
            p95 = float(words[2])
    if txns is None or per_second is None or p95 is None:
        raise RuntimeError(f"no transactions / 95th percentile in sysbench's output: {out[-500:]}")
    return txns, per_second, p95


class Oltp:
    """Servers, the backlog, and the producer's and consumer's runs over it."""

    def __init__(self, base: Path, events: int, rounds: int, before: Path | None, native: bool,
                 workers: tuple[int, ...] = (1,), parallel: int = 4):
        self.base, self.events, self.rounds, self.before, self.native = base, events, rounds, before, native
        # the consumer's [replay] workers: the catch-up runs each; the other runs take the last
        self.workers_list, self.workers = workers, workers[-1]
        self.parallel = parallel  # the native replica's slave_parallel_threads in the catch-up's parallel runs
        self.timeout = max(600.0, events / 20)
        self.sides: dict[str, Side] = {}
        self.catch_up: dict[str, list[float]] = {}  # side -> wall seconds of each round
        self.live_rows: list[LiveRow] = []
        self.peaks: dict[str, float] = {}  # program -> the highest peak RSS (MB) of its runs
        self.notes: list[str] = []
        self.replica_live = False  # the replica follows the leader from where a live run stopped it
        self.live_owner: tuple[bool, rig.Run] | None = None  # (before, run) the follower holds the state of
        self.checks: dict[str, bool] = {}
        self.serial = 0
        self.profiles: dict[str, tuple[float, int, list[dict]]] = {}  # name -> (CPU ms / 1k txn, samples, top)
        self.live_seconds = 20.0

    def side(self, name: str) -> Side:
        return self.sides.setdefault(name, Side(name))

    def setup(self) -> None:
        """Servers; sysbench prepare published to a seed topic; then the backlog of `events` transactions."""
        log("starting leader and two followers (local MariaDB)")
        self.leader, self.follower, self.replica = rig.start_servers(self.base, ["leader", "follower", "replica"])
        self.notes.append(rig.durability([self.follower, self.replica]))
        seed = rig.Run(self.base / "seed", self.leader, self.follower)
        producer = seed.producer()
        producer.wait_line("streaming from")
        self.gtid_schema = self.leader.gtid()
        self.leader.execute(f"CREATE DATABASE {DB}")
        self.sysbench("prepare")
        self.gtid_start = self.leader.gtid()
        seed.wait_published(self.gtid_start, 120, producer)
        self._stop("cdc-producer", producer)
        self.seed = seed.stream
        log(f"sysbench oltp_write_only: {self.events:,} transactions, {THREADS} threads")
        t0 = time.monotonic()
        out = self.sysbench("run", f"--events={self.events}", "--time=0")
        self.load_seconds = time.monotonic() - t0
        self.txns = int(next(line.split()[1] for line in out.splitlines() if line.strip().startswith("transactions:")))
        self.gtid_end = self.leader.gtid()
        log(f"backlog written in {self.load_seconds:.1f}s ({self.txns:,} transactions); "
            f"{self.gtid_start} .. {self.gtid_end}")

    def sysbench(self, command: str, *more: str) -> str:
        args = ["sysbench", "oltp_write_only", "--mysql-host=127.0.0.1", f"--mysql-port={self.leader.port}",
                "--mysql-user=root", f"--mysql-db={DB}", f"--tables={TABLES}", f"--table-size={TABLE_SIZE}",
                f"--threads={THREADS}", "--rand-seed=1", *more, command]
        done = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=self.timeout)
        if done.returncode != 0:
            raise RuntimeError(f"sysbench {command} exited {done.returncode}: {(done.stderr or done.stdout)[-500:]}")
        return done.stdout

    def _env(self, before: bool) -> dict[str, str] | None:
        return {"PYTHONPATH": str(self.before)} if before and self.before else None

    def _dir(self, name: str) -> Path:
        self.serial += 1
        return self.base / f"{name}-{self.serial}"

    # -- producer ----------------------------------------------------------

    def producer_once(self, before: bool) -> Sample:
        run = rig.Run(self._dir("producer"), self.leader, self.follower, seed=self.seed)
        proc = run.producer(env=self._env(before))
        proc.wait_line("streaming from")
        t0, cpu0 = time.monotonic(), rig.cpu_seconds(proc.proc.pid)
        t1 = run.wait_published(self.gtid_end, self.timeout, proc)
        cpu = rig.cpu_seconds(proc.proc.pid) - cpu0
        self._stop("cdc-producer", proc)
        if not before:
            self.topic = run.stream
        return Sample(cpu, t1 - t0)

    def decode_loop_once(self) -> Sample:
        proc = subprocess.Popen([sys.executable, str(HERE / "decode_loop.py"), str(self.leader.port),
                                 self.gtid_start, self.gtid_end], stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=self.timeout)
        result = json.loads(out)
        self.checks["decode loop saw every row change"] = result["rows"] >= 4 * self.txns
        return Sample(result["cpu_seconds"], result["seconds"])  # from its first row event

    # -- consumer ----------------------------------------------------------

    def profile(self, out_dir: Path) -> None:
        """Both programs once more under py-spy (on-CPU samples, from their startup line); top own functions."""
        out_dir.mkdir(exist_ok=True)
        run = rig.Run(self._dir("profile-producer"), self.leader, self.follower, seed=self.seed)
        proc = run.producer()
        self._profile("producer", proc, "streaming from", out_dir,
                      lambda: run.wait_published(self.gtid_end, self.timeout, proc))
        for path in PATHS:
            rig.reset_follower(self.follower)
            run_c = rig.Run(self._dir(f"profile-{path}"), self.leader, self.follower, seed=self.topic, rows=path)
            proc_c = run_c.consumer()
            proc_c.wait_line("applying topic")
            run_c.wait_applied(self.gtid_start, self.timeout, proc_c)
            self._profile(f"consumer-{path}", proc_c, "applying topic", out_dir,
                          lambda r=run_c, p=proc_c: r.wait_applied(self.gtid_end, self.timeout, p))  # type: ignore[misc]

    def _profile(self, name: str, proc: rig.TimedCli, started: str, out_dir: Path, wait: Callable[[], object]) -> None:
        proc.wait_line(started)
        path = out_dir / f"oltp-{name}.txt"
        spy, cpu0 = rig.pyspy_attach(proc.proc.pid, path), rig.cpu_seconds(proc.proc.pid)
        wait()
        cpu = rig.cpu_seconds(proc.proc.pid) - cpu0
        rig.stop_cli(proc)
        top, samples = rig.pyspy_top(path, spy, n=25)
        self.profiles[name] = (1000 * self._per_k(cpu), samples, top)

    def consumer_once(self, path: str, before: bool, workers: int | None = None) -> Sample:
        rig.reset_follower(self.follower)
        self.live_owner = None
        run = rig.Run(self._dir(f"consumer-{path}"), self.leader, self.follower, seed=self.topic, rows=path,
                      workers=self.workers if workers is None else workers)
        proc = run.consumer(env=self._env(before))
        proc.wait_line("applying topic")
        # the prepare's rows come first: wait for them, then time the backlog alone
        run.wait_applied(self.gtid_start, self.timeout, proc)
        t0, cpu0, server0 = time.monotonic(), rig.cpu_seconds(proc.proc.pid), rig.server_cpu(self.follower)
        t1 = run.wait_applied(self.gtid_end, self.timeout, proc)
        sample = Sample(rig.cpu_seconds(proc.proc.pid) - cpu0, t1 - t0, rig.server_cpu(self.follower) - server0)
        self._stop("cdc-consumer", proc)
        self.checks[f"consumer ({path}{', before' if before else ''}): follower holds the leader's rows"] = \
            self.same(self.follower)
        return sample

    def native_once(self, threads: int = 0, mode: str = "optimistic") -> Sample:
        """A native replica's catch-up on the backlog: it first replicates the prepare exactly up to the
        backlog (START SLAVE UNTIL), then it is timed from START SLAVE to the backlog's last transaction;
        `threads`: slave_parallel_threads (0: single-threaded), `mode`: slave_parallel_mode."""
        rig.reset_follower(self.replica)
        self.replica_live = False
        rig.native_threads(self.replica, threads, mode)
        self.replica.execute(
            "RESET MASTER", f"SET GLOBAL gtid_slave_pos = '{self.gtid_schema}'",
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.leader.port}, MASTER_USER='root', "
            "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
            f"START SLAVE UNTIL master_gtid_pos = '{self.gtid_start}'")
        rig.wait_native(self.replica, self.gtid_start, self.timeout)
        self.replica.execute("STOP SLAVE", "START SLAVE")
        t0, server0 = time.monotonic(), rig.server_cpu(self.replica)
        t1 = rig.wait_native(self.replica, self.gtid_end, self.timeout)
        sample = Sample(float("nan"), t1 - t0, rig.server_cpu(self.replica) - server0)
        self.replica.execute("STOP SLAVE")
        rig.native_threads(self.replica, 0)
        self.checks["native replica holds the leader's rows"] = self.same(self.replica)
        return sample

    def end_to_end_once(self, workers: int) -> Sample:
        """Producer and consumer launched together on the backlog (the follower already holds the prepare,
        as the native replica does): wall seconds from their launch until the follower's checkpoint holds
        the backlog's last transaction."""
        rig.reset_follower(self.follower)
        self.live_owner = None
        run = rig.Run(self._dir("end-to-end"), self.leader, self.follower, seed=self.seed, workers=workers)
        consumer = run.consumer()
        run.wait_applied(self.gtid_start, self.timeout, consumer)  # the prepare, from the seed topic
        self._stop("cdc-consumer", consumer)
        t0 = time.monotonic()
        producer, consumer = run.producer(), run.consumer()
        t1 = run.wait_applied(self.gtid_end, self.timeout, producer, consumer)
        self._stop("cdc-producer", producer)
        self._stop("cdc-consumer", consumer)
        self.checks["end to end: follower holds the leader's rows"] = self.same(self.follower)
        return Sample(float("nan"), t1 - t0)

    def catch_up_rounds(self) -> None:
        """The recorded backlog's catch-up, wall time, rounds rotating which side goes first: the consumer
        on the topic (BINLOG path), producer and consumer launched together, and a native replica
        single-threaded and with slave_parallel_threads = N in both parallel modes."""
        n = self.parallel
        sides: list[tuple[str, Callable[[], Sample]]] = []
        for w in self.workers_list:
            sides += [(f"ours: consumer on the recorded topic (workers={w})",
                       lambda w=w: self.consumer_once("binlog", False, w)),  # type: ignore[misc]
                      (f"ours: end to end, producer + consumer (workers={w})",
                       lambda w=w: self.end_to_end_once(w))]  # type: ignore[misc]
        sides += [
            ("native replica, single-threaded", self.native_once),
            (f"native replica, slave_parallel_threads={n}, optimistic", lambda: self.native_once(n, "optimistic")),
            (f"native replica, slave_parallel_threads={n}, conservative", lambda: self.native_once(n, "conservative")),
        ]
        for round_ in range(self.rounds):
            k = round_ % len(sides)
            for name, once in sides[k:] + sides[:k]:
                wall = once().wall
                self.catch_up.setdefault(name, []).append(wall)
                log(f"catch-up, {name}: {wall:.2f} s (load average {rig.load_average()})")

    # -- live: the leader under a fixed-rate load, alone or followed ------------------------------

    def _stop(self, program: str, proc: rig.TimedCli) -> None:
        """Stop a CLI, keeping the highest peak RSS of each program."""
        peak = rig.stop_cli(proc)
        if not math.isnan(peak):
            self.peaks[program] = max(self.peaks.get(program, 0.0), peak)

    def _pipeline(self, before: bool) -> rig.Run:
        """The live runs' pipeline for this code: the same one again while the follower is its own (it
        resumes), else a fresh follower and a run from the backlog's topic."""
        if self.live_owner is not None and self.live_owner[0] == before:
            return self.live_owner[1]
        rig.reset_follower(self.follower)
        run = rig.Run(self._dir("live"), self.leader, self.follower, seed=self.topic, workers=self.workers)
        self.live_owner = (before, run)
        return run

    def _native_follow(self) -> None:
        """The replica following the leader single-threaded, from where it stopped if it followed before."""
        if not self.replica_live:
            rig.reset_follower(self.replica)
            rig.native_threads(self.replica, 0)
            rig.start_native(self.replica, self.leader, self.gtid_schema)
            self.replica_live = True
        else:
            self.replica.execute("START SLAVE")

    def live_once(self, rate: int, seconds: float, variant: str, round_: int, before: bool = False,
                  profile: Path | None = None) -> None:
        """sysbench at --rate=`rate` for `seconds` against the leader, `variant`: "leader alone", "pipeline"
        (producer and consumer following, each caught up first) or "native replica" (single-threaded,
        caught up first). The leader's achieved rate; for a follower, how far behind it was when the load
        ended (until it held the leader's last transaction); the programs' CPU per 1,000 transactions over
        the load and the catch-up after it. `profile`: the producer under py-spy meanwhile, into that file."""
        procs: tuple[rig.TimedCli, ...] = ()
        run: rig.Run | None = None
        start = self.leader.gtid()
        if variant == "pipeline":
            run = self._pipeline(before)
            consumer = run.consumer(env=self._env(before))
            producer = run.producer(env=self._env(before))
            procs = (producer, consumer)
        elif variant == "native replica":
            self._native_follow()
        spy = None
        try:
            if run is not None:
                run.wait_published(start, self.timeout, *procs)
                run.wait_applied(start, self.timeout, *procs)
            elif variant == "native replica":
                rig.wait_native(self.replica, start, self.timeout)
            if profile is not None:
                spy = rig.pyspy_attach(procs[0].proc.pid, profile)
            cpu0 = [rig.cpu_seconds(p.proc.pid) for p in procs]
            leader_cpu0 = rig.server_cpu(self.leader)
            out = self.sysbench("run", "--events=0", f"--time={seconds:g}", f"--rate={rate}")
            t1 = time.monotonic()
            leader_cpu = rig.server_cpu(self.leader) - leader_cpu0
            end = self.leader.gtid()
            txns, per_second, p95 = _sysbench_rate(out)
            behind = self._behind(run, variant, end, t1, procs)
            cpu = [rig.cpu_seconds(p.proc.pid) - c for p, c in zip(procs, cpu0)]
        finally:
            for proc, name in zip(procs, ("cdc-producer", "cdc-consumer")):
                self._stop(name, proc)
            if variant == "native replica":
                self.replica.execute("STOP SLAVE")
        if spy is not None and profile is not None:
            top, samples = rig.pyspy_top(profile, spy, n=25)
            self.profiles["producer, live" + (", --before" if before else "")] = (1e6 * cpu[0] / txns, samples, top)
        row = LiveRow(round_, variant + (", --before" if before else ""), rate, txns, per_second, p95,
                      1e6 * leader_cpu / txns, behind, [1e6 * c / txns for c in cpu], rig.load_average())
        self.live_rows.append(row)
        log(row.describe(seconds))
        if variant == "pipeline":
            self.checks[f"live{', before' if before else ''}: follower holds the leader's rows"] = \
                self.same(self.follower)
        elif variant == "native replica":
            self.checks["live: native replica holds the leader's rows"] = self.same(self.replica)

    def _behind(self, run: rig.Run | None, variant: str, end: str, t1: float, procs: tuple[rig.TimedCli, ...]
                ) -> dict[str, float]:
        """Seconds after t1 until the topic and the follower (pipeline), or the native replica, each hold
        `end` (polled together, every rig.POLL s)."""
        if variant == "leader alone":
            return {}
        closing: list[Callable[[], object]] = []

        def one(port: int, sql: str) -> Callable[[], str | None]:
            conn = connect(port, autocommit=True)
            closing.append(conn.close)

            def query() -> str | None:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    row = cur.fetchone()
                return row[0] if row else None
            return query

        probes: dict[str, Callable[[], bool]] = {}
        if run is None:
            replica = one(self.replica.port, "SELECT @@global.gtid_slave_pos")
            probes["native replica"] = lambda: replica() == end
        else:
            stream = EmbeddedStream(run.stream, create=False)
            topic = stream.topic(rig.TOPIC)
            closing += [topic.close, stream.close]
            follower = one(self.follower.port,
                           f"SELECT position FROM mysql_cdc.consumer_offsets WHERE topic = '{rig.TOPIC}'")
            probes["producer (topic)"] = lambda: (last := topic.last_record()) is not None \
                and json.loads(last.value).get("gtid_set") == end
            probes["consumer (follower)"] = lambda: follower() == end
        seen: dict[str, float] = {}

        def done() -> bool:
            for proc in procs:
                if proc.proc.poll() is not None:
                    raise rig.Fatal(f"{proc.args[0]} exited {proc.proc.returncode}: {proc.stderr}")
            for name, probe in probes.items():
                if name not in seen and probe():
                    seen[name] = time.monotonic() - t1
            return len(seen) == len(probes)

        try:
            rig.wait_until(done, self.timeout, f"everyone to reach {end}")
        finally:
            for close in reversed(closing):
                close()
        return {name: seen[name] for name in probes}

    def same(self, server: rig.Server) -> bool:
        return all(rig.checksum(server, f"sbtest{i}") == rig.checksum(self.leader, f"sbtest{i}")
                   for i in range(1, TABLES + 1))

    # -- rounds ------------------------------------------------------------

    def cpu_rounds(self) -> None:
        """CPU per 1,000 transactions of the backlog: producer beside the decode loop, consumer's row paths
        beside a native replica (rounds rotating which side goes first)."""
        producer: list[tuple[str, Callable[[], Sample]]] = [("producer", lambda: self.producer_once(False)),
                                                            ("decode loop", self.decode_loop_once)]
        if self.before:
            producer.append(("producer, --before", lambda: self.producer_once(True)))
        self._rounds(producer)
        consumer: list[tuple[str, Callable[[], Sample]]] = []
        for path in PATHS:
            consumer.append((f"consumer {path}", lambda p=path: self.consumer_once(p, False)))  # type: ignore[misc]
            if self.before:
                consumer.append((f"consumer {path}, --before",
                                 lambda p=path: self.consumer_once(p, True)))  # type: ignore[misc]
        if self.native:
            consumer.append(("native replica", self.native_once))
        self._rounds(consumer)

    def live_rounds(self, rate: int, seconds: float) -> None:
        """The fixed-rate load `rounds` times for each variant, rotating which goes first."""
        variants: list[tuple[str, bool]] = [("leader alone", False), ("pipeline", False), ("native replica", False)]
        if self.before:
            variants.append(("pipeline", True))
        for round_ in range(self.rounds):
            k = round_ % len(variants)
            for variant, before in variants[k:] + variants[:k]:
                self.live_once(rate, seconds, variant, round_, before)

    def _rounds(self, sides: list[tuple[str, Callable[[], Sample]]]) -> None:
        for round_ in range(self.rounds):
            k = round_ % len(sides)  # each round starts with a different side
            for name, once in sides[k:] + sides[:k]:
                sample = once()
                self.side(name).samples.append(sample)
                log(f"{name}: {self._per_k(sample.cpu):.3f} CPU s / 1,000 txns, wall {sample.wall:.2f} s, "
                    f"server CPU {sample.server_cpu:.2f} s")

    def _per_k(self, seconds: float) -> float:
        return 1000 * seconds / self.txns

    def table(self) -> str:
        """Every figure of the run as text: the CPU table, catch-up, live runs, peak RSS, checks, profiles."""
        lines = [f"backlog: {self.txns:,} sysbench oltp_write_only transactions (4 row changes each, {THREADS} "
                 f"threads, written in {self.load_seconds:.1f} s = {self.txns / self.load_seconds:,.0f} txn/s); "
                 f"{self.rounds} rounds; consumer [replay] workers = {self.workers} (catch-up: "
                 f"{', '.join(map(str, self.workers_list))})", *self.notes]
        if self.sides:
            lines += ["", "CPU per 1,000 transactions (best round by CPU):",
                      f"{'side':<28} {'CPU ms/1k txn':>14} {'µs/row':>8} {'wall s':>8} {'txn/s (wall)':>13} "
                      f"{'server CPU ms/1k':>17}  rounds (CPU s)"]
            for side in self.sides.values():
                b = side.best()
                per_k = 1000 * self._per_k(b.cpu)
                lines.append(f"{side.name:<28} {_num(per_k, 14)} {_num(per_k / 4, 8)} {b.wall:>8.2f} "
                             f"{self.txns / b.wall:>13,.0f} {1000 * self._per_k(b.server_cpu):>17,.0f}  "
                             + ("-" if math.isnan(b.cpu) else ", ".join(f"{s.cpu:.2f}" for s in side.samples)))
            lines.append("µs/row = CPU per 1,000 transactions / 4,000 rows; server CPU: the follower's (or "
                         "replica's) mariadbd over the same interval")
        if self.catch_up:
            native = min(self.catch_up.get("native replica, single-threaded", [float("nan")]))
            lines += ["", "catch-up of the recorded backlog (wall seconds, best round; ratio = native single-threaded "
                          "/ this side's time: >= 1.0 is as fast or faster):",
                      f"{'side':<62} {'best s':>7} {'txn/s':>8} {'ratio':>6}  rounds (s)"]
            for name, walls in self.catch_up.items():
                best = min(walls)
                lines.append(f"{name:<62} {best:>7.2f} {self.txns / best:>8,.0f} {native / best:>6.2f}  "
                             + ", ".join(f"{w:.2f}" for w in walls))
        if self.live_rows:
            lines += ["", "fixed-rate load (sysbench --rate): the leader's achieved rate, and how far behind each "
                          "follower was when the load ended:"]
            lines += [row.describe(self.live_seconds) for row in self.live_rows]
            lines += self._live_summary()
        if self.peaks:
            lines += ["", "peak RSS (VmHWM, the highest of the runs above): "
                      + ", ".join(f"{k} {v:.1f} MB" for k, v in sorted(self.peaks.items()))]
        lines.append(f"load average at the end: {rig.load_average()}")
        for name, ok in self.checks.items():
            lines.append(f"check: {name}: {'yes' if ok else 'NO'}")
        for name, (per_k, samples, top) in self.profiles.items():
            lines += ["", f"profile of {name}: {per_k:,.0f} ms CPU / 1,000 transactions (under py-spy; live: the "
                          f"load's and its catch-up's); top functions by own samples ({samples:,} samples; py-spy "
                          "counts the idle append thread's Condition.wait):"]
            lines += [f"  {t['percent']:5.1f}%  {t['function']}" for t in top]
        return "\n".join(lines)

    def _live_summary(self) -> list[str]:
        """Per variant: the leader's achieved rate and the time behind, median of the rounds; the target."""
        by: dict[str, list[LiveRow]] = {}
        for row in self.live_rows:
            by.setdefault(row.variant, []).append(row)
        out = []
        for variant, rows in by.items():
            behind = {k: statistics.median(r.behind[k] for r in rows) for k in rows[0].behind}
            out.append(f"  {variant}: leader {statistics.median(r.per_second for r in rows):,.1f} txn/s (median of "
                       f"{len(rows)}), p95 {statistics.median(r.p95_ms for r in rows):.2f} ms"
                       + "".join(f"; {k} behind {v:.2f} s" for k, v in behind.items()))
        ours = [r.behind["consumer (follower)"] for r in by.get("pipeline", [])]
        native = [r.behind["native replica"] for r in by.get("native replica", [])]
        if ours and native:
            limit = max(2 * statistics.median(native), 1.0)
            out.append(f"  target: the pipeline behind at most max(2 x native, 1 s) = {limit:.2f} s: median "
                       f"{statistics.median(ours):.2f} s, worst {max(ours):.2f} s -> "
                       + ("met" if max(ours) <= limit else "NOT met"))
        return out


def _num(x: float, width: int) -> str:
    return f"{'-' if math.isnan(x) else f'{x:,.0f}':>{width}}"


PHASES = ("cpu", "catchup", "live")


def main() -> int:
    """Set up, run the phases, print the table; 1 if a correctness check failed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="sysbench transactions in the backlog")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of each side (best by CPU counts)")
    ap.add_argument("--before", type=Path, metavar="DIR", help="also run the cdc_* packages in DIR")
    ap.add_argument("--no-native", action="store_true", help="skip the native replica in the CPU phase")
    ap.add_argument("--phases", default="cpu,catchup",
                    help="comma-separated subset of: cpu (CPU per 1,000 transactions), catchup (the backlog's "
                         "catch-up against native replicas), live (the fixed-rate load; also added by --live)")
    ap.add_argument("--live", type=int, metavar="RATE",
                    help="also run the fixed-rate load: sysbench at RATE transactions/s (--live-seconds), the "
                         "leader alone, with the pipeline, with a native replica")
    ap.add_argument("--live-seconds", type=float, default=20.0, help="seconds of live load (default 20)")
    ap.add_argument("--live-only", action="store_true", help="with --live: only the live phase")
    ap.add_argument("--workers", default="1",
                    help="the consumer's [replay] workers (written into its profile when not 1); a list (1,4): "
                         "the catch-up runs the consumer with each, the other phases with the last")
    ap.add_argument("--parallel", type=int, default=THREADS,
                    help=f"the native replica's slave_parallel_threads in the catch-up phase (default {THREADS})")
    ap.add_argument("--profile", action="store_true",
                    help="only profile both programs under py-spy on the backlog (no rounds); with --live, the "
                         "producer also during one fixed-rate run")
    ap.add_argument("--keep", action="store_true", help="keep the servers' and topics' temp dir")
    args = ap.parse_args()
    phases = set(args.phases.split(","))
    if unknown := phases - set(PHASES):
        raise SystemExit(f"unknown phase(s) {', '.join(sorted(unknown))}; choose from {', '.join(PHASES)}")
    if args.live_only:
        phases = {"live"}
    elif args.live:
        phases.add("live")
    if "live" in phases and not args.live:
        raise SystemExit("the live phase needs --live RATE (sysbench --rate: transactions per second)")
    base = Path(tempfile.mkdtemp(prefix="mysql-cdc-oltp-"))
    o = Oltp(base, args.events, args.rounds, args.before.resolve() if args.before else None, not args.no_native,
             workers=tuple(int(w) for w in args.workers.split(",")), parallel=args.parallel)
    o.live_seconds = args.live_seconds
    try:
        o.setup()
        if args.profile or "cpu" not in phases:
            o.producer_once(False)  # the topic of the consumer's runs (else the cpu phase's producer writes it)
        if args.profile:
            o.profile(HERE / "profiles")
            if args.live:
                o.live_once(args.live, args.live_seconds, "pipeline", 0, profile=HERE / "profiles" / "oltp-live.txt")
        else:
            if "cpu" in phases:
                o.cpu_rounds()
            if "catchup" in phases:
                o.catch_up_rounds()
            if "live" in phases:
                o.live_rounds(args.live, args.live_seconds)
    finally:
        rig.kill_started()
        rig.stop_servers([s for s in (getattr(o, n, None) for n in ("leader", "follower", "replica")) if s])
        if args.keep:
            log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    print(o.table())
    return 0 if all(o.checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
