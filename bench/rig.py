"""The benchmark rig: servers, the real CLIs on copies of a topic, native replication, profiles."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from decode_loop import peak_rss_mb
from harness import BIN, Cli, Server, free_port
from load import DB, connect

from cdc_stream.topics.embedded import EmbeddedStream

TOPIC = "rust-mysql-cdc"
POLL = 0.01  # how often completion conditions are checked
PRODUCER_SERVER_ID = 5401
PYSPY_RATE = 200  # samples/s
_started: list[subprocess.Popen] = []  # every process the rig started, for kill_started()


# Every server gets the same durability settings (docker/install.sh: binary log on, sync_binlog and
# innodb_flush_log_at_trx_commit at their defaults). A native replica writes what it replicates to its
# binary log only with log_slave_updates; the follower logs what cdc-consumer writes (a client's
# transactions), so the replica gets it too: both pay the same binlog + InnoDB commit per transaction.
SERVER_ARGS = "--log-slave-updates=ON"
DURABILITY = ("log_bin", "log_slave_updates", "sync_binlog", "innodb_flush_log_at_trx_commit", "binlog_format")


def start_servers(base: Path, names: list[str]) -> list[Server]:
    """Start local MariaDB servers (docker/install.sh --local) on free ports, one after the other
    (concurrent mariadb-install-db runs collide on their temp tables), all with SERVER_ARGS.
    On a failure, stops those started."""
    servers: list[Server] = []
    try:
        for name in names:
            servers.append(Server(name, base / name, args=SERVER_ARGS))
            servers[-1].start()
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def durability(servers: list[Server]) -> str:
    """The servers' durability settings, one line (printed with the results: they must be equal)."""
    names = ", ".join(f"@@global.{v}" for v in DURABILITY)
    parts = []
    for s in servers:
        values = s.query(f"SELECT {names}")[0]
        parts.append(f"{s.name}: " + " ".join(f"{k}={v}" for k, v in zip(DURABILITY, values)))
    return "durability: " + "; ".join(parts)


def load_average() -> str:
    """The 1/5/15-minute load average (the machine is shared: printed beside the figures)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def stop_servers(servers: list[Server]) -> None:
    """Stop servers, ignoring ones that are already gone."""
    for s in servers:
        try:
            s.stop()
        except subprocess.CalledProcessError:
            pass


class Fatal(Exception):
    """A condition that waiting cannot cure (a process died, replication stopped on an error)."""


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = POLL) -> None:
    """Poll until condition() is true; fail after `timeout` seconds, or at once on Fatal.

    Other errors (a server restarting, a table not yet created) are retried, as in harness.wait_for."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Fatal:
            raise
        except Exception as e:
            last_error = e
        time.sleep(interval)
    error = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{error}")


class TimedCli(Cli):
    """A Cli that also notes when each stderr line arrived (monotonic clock)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.times: list[float] = []
        super().__init__(args, env=env)
        _started.append(self.proc)

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.times.append(time.monotonic())
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def line_time(self, text: str, timeout: float = 60.0) -> float:
        """When the first line containing `text` arrived (waits for it)."""
        self.wait_line(text, timeout)
        return next(t for t, line in zip(self.times, self.lines) if text in line)


# The producer profile's [events] binlog (run.py --no-binlog-events sets it off for a whole run).
EVENTS_BINLOG = True


class Run:
    """One producer/consumer setup: its own directory, profiles, topic (copied from a seed) and state."""

    def __init__(self, dir: Path, leader: Server, follower: Server, seed: Path | None = None, rows: str | None = None,
                 workers: int = 1):
        self.dir, self.leader, self.follower = dir, leader, follower
        self.stream = dir / "stream"
        dir.mkdir(parents=True)
        if seed is not None:
            shutil.copytree(seed, self.stream)
        common = f'[filters]\ninclude_dbs = ["{DB}"]\n[stream]\npath = "{self.stream}"\n'
        self.producer_profile = dir / "producer.toml"
        self.producer_profile.write_text(
            f'mysql_resource_name = "bench"\n[database]\nip_or_host = "127.0.0.1"\nport = {leader.port}\n'
            f'user = "root"\npassword = ""\nserver_id = {PRODUCER_SERVER_ID}\n[data]\nbase_path = "{dir}/producer"\n'
            f'{common}[snapshot]\nmode = "never"\n'
            + ("" if EVENTS_BINLOG else "[events]\nbinlog = false\n")
        )
        self.consumer_profile = dir / "consumer.toml"
        self.consumer_profile.write_text(
            f'[database]\nip_or_host = "127.0.0.1"\nport = {follower.port}\nuser = "root"\npassword = ""\n'
            f'[data]\nbase_path = "{dir}/consumer"\n{common}'
            + _replay(rows, workers)
        )

    def producer(self, *args: str, env: dict[str, str] | None = None) -> TimedCli:
        """Launch cdc-producer (it prints 'streaming from' once it reads the binlog)."""
        return TimedCli(["cdc-producer", str(self.producer_profile), *args], env=env)

    def consumer(self, *args: str, env: dict[str, str] | None = None) -> TimedCli:
        """Launch cdc-consumer (it prints 'applying topic' once it has its checkpoint)."""
        return TimedCli(["cdc-consumer", str(self.consumer_profile), *args], env=env)

    def wait_published(self, gtid: str, timeout: float, *procs: Cli) -> float:
        """Until the topic's last record carries `gtid`; returns the time it was seen (monotonic)."""
        with EmbeddedStream(self.stream, create=False) as stream:
            topic = stream.topic(TOPIC)
            end = [-1]

            def done() -> bool:
                _check_alive(procs)
                now = topic.end_offset()  # cheap; decode the last record only when it moved
                if now == end[0]:
                    return False
                end[0] = now
                last = topic.last_record()
                return last is not None and json.loads(last.value).get("gtid_set") == gtid

            try:
                wait_until(done, timeout, f"the producer to publish up to {gtid}")
            finally:
                topic.close()
        return time.monotonic()

    def wait_applied(self, gtid: str, timeout: float, *procs: Cli, trace: list | None = None) -> float:
        """Until the follower's checkpoint is at `gtid`; returns the time it was seen (monotonic).

        `trace` collects (time, position) at every change of the checkpoint seen."""
        conn = connect(self.follower.port, autocommit=True)
        sql = f"SELECT position FROM mysql_cdc.consumer_offsets WHERE topic = '{TOPIC}'"

        def done() -> bool:
            _check_alive(procs)
            with conn.cursor() as cur:
                cur.execute(sql)
                row = cur.fetchone()
            _note(trace, row[0] if row else None)
            return row is not None and row[0] == gtid

        try:
            wait_until(done, timeout, f"the consumer to apply up to {gtid}")
        finally:
            conn.close()
        return time.monotonic()


def _replay(rows: str | None, workers: int) -> str:
    """The consumer profile's [replay]: how it applies rows; `workers` only when not 1 (a consumer
    without parallel apply refuses the key)."""
    lines = ([f'rows = "{rows}"'] if rows else []) + ([f"workers = {workers}"] if workers != 1 else [])
    return "[replay]\n" + "\n".join(lines) + "\n" if lines else ""


class Scraper:
    """Serve metrics from a CLI (`args` for it) and GET /metrics every `interval` s while it runs,
    as Prometheus would (more often than its default 15 s, to make the cost visible)."""

    def __init__(self, interval: float = 1.0):
        self.port, self.interval = free_port(), interval
        self.args = ("--metrics-listen", f"127.0.0.1:{self.port}")
        self.scrapes = self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                    r.read()
                self.scrapes += 1
            except OSError:  # not listening yet, or already stopped
                self.failures += 1


def _note(trace: list | None, position: str | None) -> None:
    if trace is not None and (not trace or trace[-1][1] != position):
        trace.append((time.monotonic(), position))


def _check_alive(procs: tuple[Cli, ...]) -> None:
    for proc in procs:
        if proc.proc.poll() is not None:
            raise Fatal(f"{proc.args[0]} exited {proc.proc.returncode}: {proc.stderr}")


def reset_follower(server: Server) -> None:
    """Back to a fresh follower: no replicated database, no checkpoint, no replication."""
    server.execute("STOP SLAVE", "RESET SLAVE ALL", f"DROP DATABASE IF EXISTS {DB}",
                   "DROP DATABASE IF EXISTS mysql_cdc")


def stop_cli(cli: Cli) -> float:
    """SIGTERM a CLI and wait for it; returns its peak RSS in MB (read just before the signal)."""
    peak = peak_rss_mb(cli.proc.pid) if cli.proc.poll() is None else float("nan")
    code = cli.stop()
    if code != 0:
        raise RuntimeError(f"{cli.args[0]} exited {code}: {cli.stderr}")
    return peak


def kill_started() -> None:
    """Kill (by pid) the processes the rig started that still run: after a failure."""
    for proc in _started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------
# Native MariaDB replication, the baseline of the consumer, catch-up and lag


def server_cpu(server: Server) -> float:
    """CPU seconds a local MariaDB server has used so far."""
    return cpu_seconds(int((server.dir / "mysqld.pid").read_text().split()[0]))


def start_native(replica: Server, leader: Server, start_gtid: str) -> float:
    """Make `replica` (already reset) replicate `leader` from `start_gtid`; returns when START SLAVE ran."""
    replica.execute(
        "RESET MASTER",  # its own GTIDs would conflict with the leader's in domain 0 (gtid strict mode)
        f"SET GLOBAL gtid_slave_pos = '{start_gtid}'",
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={leader.port}, MASTER_USER='root', "
        "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
    )
    started = time.monotonic()
    replica.execute("START SLAVE")
    return started


def native_threads(replica: Server, threads: int, mode: str = "optimistic") -> None:
    """slave_parallel_threads (0: single-threaded) and slave_parallel_mode of a stopped replica."""
    replica.execute(f"SET GLOBAL slave_parallel_threads = {threads}", f"SET GLOBAL slave_parallel_mode = '{mode}'")


def wait_native(replica: Server, gtid: str, timeout: float, trace: list | None = None) -> float:
    """Until the replica's gtid_slave_pos reaches `gtid`; fails on a replication error.

    `trace` collects (time, position) at every change of gtid_slave_pos seen."""
    conn = connect(replica.port, autocommit=True)
    checked = [time.monotonic()]

    def done() -> bool:
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.gtid_slave_pos")
            position = cur.fetchone()[0]
            _note(trace, position)
            if position == gtid:
                return True
            if time.monotonic() - checked[0] > 0.5:
                checked[0] = time.monotonic()
                cur.execute("SHOW SLAVE STATUS")
                status = dict(zip([d[0] for d in cur.description], cur.fetchone() or ()))
                for kind in ("IO", "SQL"):
                    if status.get(f"Last_{kind}_Errno"):
                        raise Fatal(f"native replication {kind} error: {status[f'Last_{kind}_Error']}")
            return False

    try:
        wait_until(done, timeout, f"native replication to reach {gtid}")
    finally:
        conn.close()
    return time.monotonic()


def checksum(server: Server, table: str) -> int:
    """CHECKSUM TABLE of a bench table (equal on two servers = same rows)."""
    return server.query(f"CHECKSUM TABLE {DB}.{table}")[0][1]


# ---------------------------------------------------------------------------
# Profiles (py-spy)


def pyspy_attach(pid: int, out: Path, rate: int = PYSPY_RATE) -> subprocess.Popen:
    """Sample a running process's on-CPU Python stacks until it exits (raw collapsed stacks, by function)."""
    proc = subprocess.Popen(
        [str(BIN / "py-spy"), "record", "--pid", str(pid), "--rate", str(rate), "--function", "--format", "raw",
         "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    _started.append(proc)
    return proc


def pyspy_top(out: Path, proc: subprocess.Popen, n: int = 10, timeout: float = 30.0) -> tuple[list[dict], int]:
    """Wait for py-spy to finish; the n functions with the most own (leaf) samples, and the sample total."""
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed ({proc.returncode}): {stderr.strip()}")
    own: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            own[_short(stack.split(";")[-1])] += int(count)
    total = sum(own.values())
    return [{"function": f, "samples": c, "percent": round(100 * c / total, 1)} for f, c in own.most_common(n)], total


def pyspy_shares(out: Path, parts: list[tuple[str, str]]) -> dict[str, float]:
    """Per cent of the samples of a raw py-spy profile in each part: a sample counts for the first part
    (label, function) whose function is on its stack, else for "other". Samples of a thread waiting on
    a condition variable (the producer's idle append thread, which py-spy takes for active) are left out."""
    counts: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame.split(" (")[0] for frame in stack.split(";")]
        if not stack or frames[-1] == "Condition.wait":
            continue
        label = next((label for label, function in parts if function in frames), "other")
        counts[label] += int(count)
    total = sum(counts.values()) or 1
    return {label: round(100 * counts[label] / total, 1) for label in [p[0] for p in parts] + ["other"]}


_PREFIXES = [re.compile(r"\(\S*?" + p) for p in ("site-packages/", r"/lib/python3\.\d+/", re.escape(f"{ROOT}/"))]


def _short(frame: str) -> str:
    """'func (/long/path/site-packages/pkg/mod.py:12)' -> 'func (pkg/mod.py:12)'."""
    for prefix in _PREFIXES:
        frame, n = prefix.subn("(", frame, count=1)
        if n:
            break
    return frame
