"""Many small transactions: a recorded sysbench oltp_write_only backlog through each program, in CPU time.

    python bench/oltp.py [--events N] [--rounds R] [--before DIR] [--no-native] [--workers N]

Starts its own leader and two followers (local MariaDB, temp dirs, free ports). On the leader,
sysbench `oltp_write_only` writes N transactions of 4 row changes each (UPDATE of the indexed k,
UPDATE of c, DELETE and INSERT of one row) with 4 threads; the binlog they leave is the backlog.
Then, rounds alternating which goes first:

- the producer: the backlog from a topic that holds everything before it, to the topic;
  beside python-mysql-replication's decode loop over the same binlog range;
- the consumer: the topic produced above, onto a reset follower, on both row paths;
  beside a native replica (single-threaded) catching up on the same binlog range;
- with --workers N, the consumer also runs with `[replay] workers = N` (parallel apply), both row paths;
- with --before DIR, both programs also run from the cdc_* packages in DIR
  (git archive REV cdc_stream cdc_producer cdc_consumer | tar -x -C DIR).

The figures are CPU seconds per 1,000 source transactions (user + system of the process, from
/proc, from its startup line to the end): on these shared 2-core machines wall time is noise.
Wall figures are printed beside them for reference (and the follower's/replica's mariadbd CPU).
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


def server_cpu(server: rig.Server) -> float:
    """CPU seconds a local MariaDB server has used so far."""
    return rig.cpu_seconds(int((server.dir / "mysqld.pid").read_text().split()[0]))


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


class Oltp:
    """Servers, the backlog, and the producer's and consumer's runs over it."""

    def __init__(self, base: Path, events: int, rounds: int, before: Path | None, native: bool, workers: int = 1):
        self.base, self.events, self.rounds, self.before, self.native = base, events, rounds, before, native
        self.workers = workers
        self.timeout = max(600.0, events / 20)
        self.sides: dict[str, Side] = {}
        self.checks: dict[str, bool] = {}
        self.serial = 0
        self.profiles: dict[str, tuple[float, int, list[dict]]] = {}
        self.live: list[str] = []

    def side(self, name: str) -> Side:
        return self.sides.setdefault(name, Side(name))

    def setup(self) -> None:
        """Servers; sysbench prepare published to a seed topic; then the backlog of `events` transactions."""
        log("starting leader and two followers (local MariaDB)")
        self.leader, self.follower, self.replica = rig.start_servers(self.base, ["leader", "follower", "replica"])
        seed = rig.Run(self.base / "seed", self.leader, self.follower)
        producer = seed.producer()
        producer.wait_line("streaming from")
        self.gtid_schema = self.leader.gtid()
        self.leader.execute(f"CREATE DATABASE {DB}")
        self.sysbench("prepare")
        self.gtid_start = self.leader.gtid()
        seed.wait_published(self.gtid_start, 120, producer)
        rig.stop_cli(producer)
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
        rig.stop_cli(proc)
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
        self.profiles[name] = (cpu, samples, top)

    def consumer_once(self, path: str, before: bool, workers: int = 1) -> Sample:
        rig.reset_follower(self.follower)
        run = rig.Run(self._dir(f"consumer-{path}"), self.leader, self.follower, seed=self.topic, rows=path,
                      workers=workers)
        proc = run.consumer(env=self._env(before))
        proc.wait_line("applying topic")
        # the prepare's rows come first: wait for them, then time the backlog alone
        run.wait_applied(self.gtid_start, self.timeout, proc)
        t0, cpu0, server0 = time.monotonic(), rig.cpu_seconds(proc.proc.pid), server_cpu(self.follower)
        t1 = run.wait_applied(self.gtid_end, self.timeout, proc)
        sample = Sample(rig.cpu_seconds(proc.proc.pid) - cpu0, t1 - t0, server_cpu(self.follower) - server0)
        rig.stop_cli(proc)
        if workers > 1:  # groups rolled back to run again in order (parallel.py's warning line)
            log(f"consumer {path}, workers={workers}: {proc.stderr.count('run again one at a time')} retries")
        self.checks[f"consumer ({path}{', before' if before else ''}"
                    f"{f', workers={workers}' if workers > 1 else ''}): follower holds the leader's rows"] = \
            self.same(self.follower)
        return sample

    def native_once(self) -> Sample:
        rig.reset_follower(self.replica)
        # the prepare first, exactly up to the backlog (wait_native waits for an exact position)
        self.replica.execute(
            "RESET MASTER", f"SET GLOBAL gtid_slave_pos = '{self.gtid_schema}'",
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.leader.port}, MASTER_USER='root', "
            "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
            f"START SLAVE UNTIL master_gtid_pos = '{self.gtid_start}'")
        rig.wait_native(self.replica, self.gtid_start, self.timeout)
        self.replica.execute("STOP SLAVE", "START SLAVE")
        t0, server0 = time.monotonic(), server_cpu(self.replica)
        t1 = rig.wait_native(self.replica, self.gtid_end, self.timeout)
        sample = Sample(float("nan"), t1 - t0, server_cpu(self.replica) - server0)
        self.replica.execute("STOP SLAVE")
        self.checks["native replica holds the leader's rows"] = self.same(self.replica)
        return sample

    # -- live: the pipeline following the leader under load ------------------------------

    def live_once(self, rate: int, seconds: float, before: bool) -> None:
        """Producer, consumer and a native replica follow the leader (each caught up first) while sysbench
        runs at `rate` transactions/s for `seconds`; how far behind each is when the load ends (until it
        holds the leader's last transaction), and the CPU the programs used per 1,000 transactions."""
        tag = ", --before" if before else ""
        rig.reset_follower(self.follower)
        run = rig.Run(self._dir("live"), self.leader, self.follower, seed=self.topic)
        consumer = run.consumer(env=self._env(before))
        start = self.leader.gtid()
        rig.reset_follower(self.replica)
        rig.start_native(self.replica, self.leader, self.gtid_schema)
        producer = run.producer(env=self._env(before))
        try:
            run.wait_published(start, self.timeout, producer)
            run.wait_applied(start, self.timeout, producer, consumer)
            rig.wait_native(self.replica, start, self.timeout)
            cpu0 = rig.cpu_seconds(producer.proc.pid), rig.cpu_seconds(consumer.proc.pid)
            t0 = time.monotonic()
            out = self.sysbench("run", "--events=0", f"--time={seconds:g}", f"--rate={rate}")
            t1 = time.monotonic()
            end = self.leader.gtid()
            txns = int(next(line.split()[1] for line in out.splitlines() if line.strip().startswith("transactions:")))
            cpu = rig.cpu_seconds(producer.proc.pid) - cpu0[0], rig.cpu_seconds(consumer.proc.pid) - cpu0[1]
            behind = self._behind(run, end, t1, tag, (producer, consumer))
        finally:
            rig.stop_cli(producer)
            rig.stop_cli(consumer)
            self.replica.execute("STOP SLAVE")
        self.live.append(f"live at --rate={rate} for {seconds:g} s{tag}: the leader ran {txns:,} transactions "
                         f"({txns / (t1 - t0):,.0f}/s); behind when the load ended: "
                         + ", ".join(f"{name} {s:.2f} s" for name, s in behind.items())
                         + f"; CPU per 1,000 transactions: producer {1e6 * cpu[0] / txns:,.0f} ms, consumer "
                         f"{1e6 * cpu[1] / txns:,.0f} ms")
        log(self.live[-1])
        self.checks[f"live{tag}: follower holds the leader's rows"] = self.same(self.follower)

    def _behind(self, run: rig.Run, end: str, t1: float, tag: str, procs: tuple[rig.TimedCli, ...]
                ) -> dict[str, float]:
        """Seconds after t1 until the topic, the follower and the native replica each hold `end` (polled
        together, every rig.POLL s)."""
        stream = EmbeddedStream(run.stream, create=False)
        topic = stream.topic(rig.TOPIC)
        follower, replica = connect(self.follower.port, autocommit=True), connect(self.replica.port, autocommit=True)

        def one(conn: object, sql: str) -> str | None:
            with conn.cursor() as cur:  # type: ignore[attr-defined]
                cur.execute(sql)
                row = cur.fetchone()
            return row[0] if row else None

        probes = {
            "native replica": lambda: one(replica, "SELECT @@global.gtid_slave_pos") == end,
            f"producer (topic){tag}": lambda: (last := topic.last_record()) is not None
            and json.loads(last.value).get("gtid_set") == end,
            f"consumer (follower){tag}": lambda: one(
                follower, f"SELECT position FROM mysql_cdc.consumer_offsets WHERE topic = '{rig.TOPIC}'") == end,
        }
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
            topic.close()
            stream.close()
            follower.close()
            replica.close()
        return {name: seen[name] for name in probes}

    def same(self, server: rig.Server) -> bool:
        return all(rig.checksum(server, f"sbtest{i}") == rig.checksum(self.leader, f"sbtest{i}")
                   for i in range(1, TABLES + 1))

    # -- rounds ------------------------------------------------------------

    def run(self) -> None:
        producer: list[tuple[str, Callable[[], Sample]]] = [("producer", lambda: self.producer_once(False)),
                                                            ("decode loop", self.decode_loop_once)]
        if self.before:
            producer.append(("producer, --before", lambda: self.producer_once(True)))
        self._rounds(producer)
        consumer: list[tuple[str, Callable[[], Sample]]] = []
        for path in PATHS:
            consumer.append((f"consumer {path}", lambda p=path: self.consumer_once(p, False)))  # type: ignore[misc]
            if self.workers > 1:
                consumer.append((f"consumer {path}, workers={self.workers}",
                                 lambda p=path: self.consumer_once(p, False, self.workers)))  # type: ignore[misc]
            if self.before:
                consumer.append((f"consumer {path}, --before",
                                 lambda p=path: self.consumer_once(p, True)))  # type: ignore[misc]
        if self.native:
            consumer.append(("native replica", self.native_once))
        self._rounds(consumer)

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
        lines = [f"backlog: {self.txns:,} sysbench oltp_write_only transactions (4 row changes each, {THREADS} "
                 f"threads, written in {self.load_seconds:.1f} s = {self.txns / self.load_seconds:,.0f} txn/s); "
                 f"best of {self.rounds} rounds by CPU",
                 "",
                 f"{'side':<28} {'CPU ms/1k txn':>14} {'µs/row':>8} {'wall s':>8} {'txn/s (wall)':>13} "
                 f"{'server CPU ms/1k':>17}  rounds (CPU s)"]
        for side in self.sides.values():
            b = side.best()
            per_k = 1000 * self._per_k(b.cpu)
            lines.append(f"{side.name:<28} {_num(per_k, 14)} {_num(per_k / 4, 8)} {b.wall:>8.2f} "
                         f"{self.txns / b.wall:>13,.0f} {1000 * self._per_k(b.server_cpu):>17,.0f}  "
                         + ("-" if math.isnan(b.cpu) else ", ".join(f"{s.cpu:.2f}" for s in side.samples)))
        lines.append("µs/row = CPU per 1,000 transactions / 4,000 rows; server CPU: the follower's (or replica's) "
                     "mariadbd over the same interval")
        lines += self.live
        for name, ok in self.checks.items():
            lines.append(f"check: {name}: {'yes' if ok else 'NO'}")
        for name, (cpu, samples, top) in self.profiles.items():
            lines += ["", f"profile of {name}: {1000 * self._per_k(cpu):,.0f} ms CPU / 1,000 txns (under py-spy); "
                          f"top functions by own samples ({samples:,} samples):"]
            lines += [f"  {t['percent']:5.1f}%  {t['function']}" for t in top]
        return "\n".join(lines)


def _num(x: float, width: int) -> str:
    return f"{'-' if math.isnan(x) else f'{x:,.0f}':>{width}}"


def main() -> int:
    """Set up, run the rounds, print the table; 1 if a correctness check failed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="sysbench transactions in the backlog")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of each side (best by CPU counts)")
    ap.add_argument("--before", type=Path, metavar="DIR", help="also run the cdc_* packages in DIR")
    ap.add_argument("--no-native", action="store_true", help="skip the native replica")
    ap.add_argument("--live", type=int, metavar="RATE",
                    help="also follow the leader under sysbench at RATE transactions/s (--live-seconds)")
    ap.add_argument("--live-seconds", type=float, default=20.0, help="seconds of live load (default 20)")
    ap.add_argument("--live-only", action="store_true", help="with --live: skip the backlog's rounds")
    ap.add_argument("--profile", action="store_true", help="only profile both programs under py-spy (no rounds)")
    ap.add_argument("--workers", type=int, default=1, metavar="N",
                    help="also run the consumer with [replay] workers = N (parallel apply)")
    ap.add_argument("--keep", action="store_true", help="keep the servers' and topics' temp dir")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mysql-cdc-oltp-"))
    o = Oltp(base, args.events, args.rounds, args.before.resolve() if args.before else None, not args.no_native,
             args.workers)
    try:
        o.setup()
        if args.profile:
            o.producer_once(False)
            o.profile(HERE / "profiles")
        else:
            if args.live_only:
                o.producer_once(False)  # the topic the live runs' consumers start from
            else:
                o.run()
            for round_ in range(o.rounds if args.live else 0):
                for before in ([False, True] if o.before else [False])[::1 if round_ % 2 == 0 else -1]:
                    o.live_once(args.live, args.live_seconds, before)
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
