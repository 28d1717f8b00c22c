"""What the benchmarks write on the leader: the standard workload and a constant-rate load with lag probes."""

from __future__ import annotations

import bisect
import json
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pymysql

DB = "bench"
TABLE = "t"  # the standard workload's table
LAG_TABLE = "lag"  # the constant-rate load's table (same columns)
TXN_ROWS = 1000

_COLUMNS = """(
    id BIGINT NOT NULL PRIMARY KEY,
    n INT NOT NULL,
    name VARCHAR(64) NOT NULL,
    code CHAR(8) NOT NULL,
    amount DECIMAL(12,2) NOT NULL,
    created DATETIME(6) NOT NULL,
    doc JSON
)"""
SCHEMA = [
    f"CREATE DATABASE {DB}",
    f"CREATE TABLE {DB}.{TABLE} {_COLUMNS}",
    f"CREATE TABLE {DB}.{LAG_TABLE} {_COLUMNS}",
]
INSERT = "INSERT INTO {db}.{table} VALUES (%s, %s, %s, %s, %s, %s, %s)"  # a row of either table, executemany form
_EPOCH = datetime(2024, 1, 1)


def connect(port: int, autocommit: bool = False) -> pymysql.Connection:
    """A root connection to a local server."""
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=autocommit,
                           charset="utf8mb4")


def make_row(i: int, rng: random.Random) -> tuple:
    """One row of the standard table: every column type the workload covers, realistic sizes."""
    name = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=rng.randint(12, 40)))
    doc = json.dumps({"id": i, "tags": ["alpha", "beta"][: rng.randint(0, 2)], "score": rng.random(), "ok": True})
    return (i, rng.randint(-2**31, 2**31 - 1), name, f"C{i % 10**7:07d}", f"{rng.randint(0, 10**10) / 100:.2f}",
            _EPOCH + timedelta(microseconds=rng.randint(0, 10**13)), doc)


@dataclass
class Counts:
    """Row changes the standard workload made, by kind, and the leader's GTID after each kind."""

    inserts: int
    updates: int
    deletes: int
    marks: dict[str, str] = field(default_factory=dict)  # kind -> gtid_binlog_pos once its changes committed

    @property
    def total(self) -> int:
        return self.inserts + self.updates + self.deletes


def standard_workload(port: int, rows: int, seed: int = 1) -> Counts:
    """`rows` inserts, then rows/10 updates and rows/10 deletes, all in transactions of TXN_ROWS rows."""
    rng = random.Random(seed)
    conn = connect(port)
    changes = rows // 10
    marks: dict[str, str] = {}

    def mark(kind: str) -> None:
        cur.execute("SELECT @@global.gtid_binlog_pos")
        marks[kind] = cur.fetchone()[0]
        conn.commit()

    try:
        with conn.cursor() as cur:
            sql = INSERT.format(db=DB, table=TABLE)
            for start in range(1, rows + 1, TXN_ROWS):
                cur.executemany(sql, [make_row(i, rng) for i in range(start, min(start + TXN_ROWS, rows + 1))])
                conn.commit()
            mark("inserts")
            # Updates hit the first `changes` ids, deletes the last `changes`: no overlap.
            for start in range(1, changes + 1, TXN_ROWS):
                stop = min(start + TXN_ROWS, changes + 1) - 1
                cur.execute(f"UPDATE {DB}.{TABLE} SET n = n + 1, amount = amount + 1.25, name = CONCAT('u-', name), "
                            f"created = created + INTERVAL 1 SECOND WHERE id BETWEEN %s AND %s", (start, stop))
                conn.commit()
            mark("updates")
            for start in range(rows - changes + 1, rows + 1, TXN_ROWS):
                cur.execute(f"DELETE FROM {DB}.{TABLE} WHERE id BETWEEN %s AND %s",
                            (start, min(start + TXN_ROWS, rows + 1) - 1))
                conn.commit()
            mark("deletes")
    finally:
        conn.close()
    return Counts(rows, changes, changes, marks)


def gtid_seq(gtid: str) -> int:
    """The sequence number of a single-domain MariaDB GTID position ('0-1-42' -> 42)."""
    return int(gtid.rsplit("-", 1)[1])


def phase_seconds(trace: list[tuple[float, str]], start: str, marks: dict[str, str]) -> dict[str, float]:
    """How long each kind of the workload took to replicate, from a (time, position) trace
    of a follower's progress: kind -> seconds from the previous mark (or `start`)."""
    def reached(gtid: str) -> float:
        want = gtid_seq(gtid)
        return next(t for t, position in trace if position and gtid_seq(position) >= want)

    out, previous = {}, reached(start)
    for kind, gtid in marks.items():
        now = reached(gtid)
        out[kind], previous = now - previous, now
    return out


@dataclass
class LagResult:
    """Replication lag of a constant-rate insert load, per transaction, in seconds."""

    rate: float | None  # rows/s asked for (None: as fast as the writer goes)
    achieved: float  # rows/s the writer committed
    lags: list[float] = field(default_factory=list)
    commits: list[float] = field(default_factory=list)  # when each transaction's COMMIT returned (monotonic)
    polls: int = 0  # follower polls made
    poll_seconds: float = 0.0  # over this long: their mean interval is the lag's resolution

    def percentile(self, p: float) -> float:
        """The p-th percentile (0..100) of the lags, nearest rank."""
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    @property
    def poll_interval(self) -> float:
        """The mean interval between two polls of the follower, seconds."""
        return self.poll_seconds / max(1, self.polls)

    @classmethod
    def pooled(cls, runs: list[LagResult]) -> LagResult:
        """Several runs at the same rate as one: every transaction's lag, the writer's mean rate."""
        return cls(runs[0].rate, sum(r.achieved for r in runs) / len(runs), [x for r in runs for x in r.lags],
                   [t for r in runs for t in r.commits], sum(r.polls for r in runs), sum(r.poll_seconds for r in runs))


MAX_RATE_ROWS = 400  # rows per transaction of the unpaced writer (as 20,000 rows/s at 50 transactions/s)
POLL = 0.0005  # the follower poller's interval (well under the lags measured: a few ms)


def lag_rows(conn: pymysql.Connection, pool: list[tuple]) -> list[str]:
    """The lag rows' values as SQL, each without its id (the columns after it, as executemany writes them)."""
    values = INSERT.split(" VALUES ", 1)[1]  # "(%s, %s, ...)": the id's %s first
    with conn.cursor() as cur:
        return [cur.mogrify(values, (0, *row))[len("(0, "):-1] for row in pool]


_LAG_HEAD = INSERT.format(db=DB, table=LAG_TABLE).split(" VALUES ", 1)[0] + " VALUES "


def lag_statement(rows: list[str], first_id: int) -> str:
    """One lag transaction's INSERT: each row of `lag_rows` with its id in front, ids from `first_id` (the
    statement pymysql's executemany sends for the same rows, byte for byte)."""
    return _LAG_HEAD + ",".join([f"({first_id + j}, {values})" for j, values in enumerate(rows)])


def measure_lag(leader_port: int, follower_port: int, rate: float | None, seconds: float, first_id: int,
                txns_per_second: int = 50, poll: float = POLL, catch_up: float = 120.0) -> LagResult:
    """Insert `rate` rows/s into the lag table for `seconds` while polling the follower for them.

    The writer commits `txns_per_second` transactions a second on a fixed schedule and
    notes when each COMMIT returned (rate None: transactions of MAX_RATE_ROWS rows back to back,
    as fast as the leader takes them); a poller reads MAX(id) on the follower every
    `poll` seconds (or as often as its round trip allows). A transaction's lag is the first poll that
    saw its last row minus its commit time (the poll interval bounds the error). Ids start at `first_id`.
    """
    per_txn = MAX_RATE_ROWS if rate is None else max(1, round(rate / txns_per_second))
    commits: list[tuple[int, float]] = []  # (last id, commit time), in id order
    seen: list[tuple[int, float]] = []  # (follower's max id, first time seen), increasing
    polled = [0, 0.0]  # polls, seconds polled
    writing = threading.Event()
    writing.set()
    errors: list[BaseException] = []

    def poller() -> None:
        conn = connect(follower_port, autocommit=True)
        sql = f"SELECT COALESCE(MAX(id), 0) FROM {DB}.{LAG_TABLE}"
        deadline = None
        began = time.monotonic()
        try:
            with conn.cursor() as cur:
                while True:
                    cur.execute(sql)
                    now, top = time.monotonic(), cur.fetchone()[0]
                    polled[0] += 1
                    if not seen or top > seen[-1][0]:
                        seen.append((top, now))
                    if not writing.is_set():
                        if commits and top >= commits[-1][0]:
                            return
                        deadline = deadline or now + catch_up
                        if now > deadline:
                            raise TimeoutError(f"the follower did not catch up within {catch_up}s of the last write")
                    time.sleep(poll)
        except BaseException as e:  # surfaced below
            errors.append(e)
        finally:
            polled[1] = time.monotonic() - began
            conn.close()

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    rng = random.Random(int(rate or 0))
    # one transaction's rows made once, each transaction's copy with its own ids: the writer's own work per
    # row is a tuple, so the unpaced writer is held back by the leader, not by making rows
    pool = [make_row(i, rng)[1:] for i in range(per_txn)]
    conn = connect(leader_port)
    # Each row's values are escaped once; a transaction only puts its ids in front. Escaping 400 rows in each
    # transaction (executemany) took the writer 4-6 ms of Python, which held the GIL from the poller and so
    # delayed whichever lag ended in that window, the longer lags more often (bench/README.md, issue 26,
    # thirteenth part).
    rows = lag_rows(conn, pool)
    next_id, interval = first_id, 1.0 / txns_per_second
    start = time.monotonic()
    try:
        with conn.cursor() as cur:
            k = 0
            while (time.monotonic() - start < seconds) if rate is None else (k < int(seconds * txns_per_second)):
                wait = start + k * interval - time.monotonic()
                if wait > 0 and rate is not None:
                    time.sleep(wait)  # pacing to a fixed schedule, not waiting for a result
                cur.execute(lag_statement(rows, next_id))
                conn.commit()
                next_id += per_txn
                commits.append((next_id - 1, time.monotonic()))
                k += 1
    finally:
        elapsed = time.monotonic() - start
        writing.clear()
        conn.close()
    thread.join(catch_up + 10)
    if thread.is_alive():
        raise TimeoutError("the follower poller did not finish")
    if errors:
        raise errors[0]
    ids = [i for i, _ in seen]
    lags = [max(0.0, seen[bisect.bisect_left(ids, last)][1] - t) for last, t in commits]
    return LagResult(rate, (next_id - first_id) / elapsed, lags, [t for _, t in commits], polled[0], polled[1])
