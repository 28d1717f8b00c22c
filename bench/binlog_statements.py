"""The follower's cost of a transaction's BINLOG replay, by how its rows events are cut into statements.

    .venv/bin/python bench/binlog_statements.py [--txns 150] [--rows 400] [--rounds 2]

Starts a leader and a follower (local MariaDB, temp dirs, bench/rig.py's settings), writes --txns
transactions of --rows rows of the lag table (bench/load.py) on the leader, reads their events from the
leader's binary log file, and applies them on the follower, the table emptied before each shape, one
round trip per transaction (the statements, the COMMIT: cdc_consumer/writer.py, as cdc-consumer sends
them), in these shapes:

- per event: a BINLOG statement per rows event, its table map and the rows event ending its statement
  (what cdc-consumer sent before the fifteenth part, and still sends past MAX_BINLOG);
- chunks: the same events as chunks of one BINLOG statement (cdc-consumer's form up to its limit);
- leader's: the transaction's events as the leader logged them, one table map, only the last rows event
  ending the statement, in one BINLOG statement (what mariadb-binlog prints);

each with the session's binlog_annotate_row_events ON (the server's default) and OFF (cdc-consumer's
session where the user may). Per transaction: the round trip's p50 and p90, the follower's mariadbd CPU,
and the bytes its binary log grew; every figure beside the first shape's (per event, annotations on),
measured in the same run, the shapes' order rotating between rounds.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import rig
from load import DB, LAG_TABLE, SCHEMA, connect, lag_rows, lag_statement, make_row

from cdc_consumer import writer
from cdc_consumer.batch import Origin
from cdc_consumer.binlog_replay import LeaderFormat, ending_statement

TABLE_MAP, XID, FORMAT_DESCRIPTION = 19, 16, 15
ROWS = frozenset({23, 24, 25, 30, 31, 32})


def leader_events(binlog: Path) -> tuple[bytes, list[list[bytes]]]:
    """(the format description, each transaction's table map and rows events) of a binary log file."""
    data, at, events = binlog.read_bytes(), 4, []
    while at < len(data):
        size = int.from_bytes(data[at + 9:at + 13], "little")
        events.append(data[at:at + size])
        at += size
    fde = next(e for e in events if e[4] == FORMAT_DESCRIPTION)
    txns: list[list[bytes]] = []
    current: list[bytes] = []
    for e in events:
        if e[4] == TABLE_MAP or e[4] in ROWS:
            current.append(e)
        elif e[4] == XID and current:
            txns.append(current)
            current = []
    return fde, txns


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def per_event(txn: list[bytes], leader: LeaderFormat) -> list[str]:
    return [f"BINLOG '{ending_statement(_b64(txn[0] + e), leader)}'" for e in txn[1:]]


def chunks(txn: list[bytes], leader: LeaderFormat) -> list[str]:
    return ["BINLOG '" + "\n".join(ending_statement(_b64(txn[0] + e), leader) for e in txn[1:]) + "'"]


def leaders(txn: list[bytes], leader: LeaderFormat) -> list[str]:
    return [f"BINLOG '{_b64(b''.join(txn))}'"]


SHAPES: dict[str, Callable[[list[bytes], LeaderFormat], list[str]]] = {"per event": per_event, "chunks": chunks,
                                                          "leader's": leaders}


def apply(follower: rig.Server, fde: bytes, txns: list[list[bytes]], rows: int, shape: str,
          annotate: bool) -> list[float]:
    """Apply every transaction in `shape` on the emptied table, which must then hold `rows` rows:
    [p50 ms, p90 ms, server CPU ms, binlog KB] a transaction."""
    import pymysql
    from pymysql.constants import CLIENT

    conn = pymysql.connect(host="127.0.0.1", port=follower.port, user="root", password="", autocommit=False,
                           client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cur:
            cur.execute(f"TRUNCATE {DB}.{LAG_TABLE}")
            cur.execute(f"SET SESSION binlog_annotate_row_events = {'ON' if annotate else 'OFF'}")
            cur.execute(f"BINLOG '{_b64(fde)}'")
            cur.execute("SHOW MASTER STATUS")
            start = cur.fetchone()[1]
        max_packet = writer.max_allowed_packet(conn)
        leader, cpu, times = LeaderFormat(fde), rig.server_cpu(follower), []
        for txn in txns:
            statements = [*SHAPES[shape](txn, leader), "COMMIT"]
            t0 = time.perf_counter()
            writer.execute(conn, statements, [Origin(0, "t", None)] * len(statements), max_packet)
            times.append(time.perf_counter() - t0)
        cpu = rig.server_cpu(follower) - cpu
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            grown = cur.fetchone()[1] - start
            cur.execute(f"SELECT COUNT(*) FROM {DB}.{LAG_TABLE}")
            held = cur.fetchone()[0]
            assert held == rows, f"{shape}, annotations {annotate}: the follower holds {held} rows of {rows}"
        conn.commit()
    finally:
        conn.close()
    times.sort()
    n = len(txns)
    return [statistics.median(times) * 1e3, times[int(n * 0.9)] * 1e3, cpu / n * 1e3, grown / n / 1024]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--txns", type=int, default=150, help="transactions on the leader")
    parser.add_argument("--rows", type=int, default=400, help="rows per transaction (400: the lag load at 20k)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every shape, the order rotating")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="binlog-statements-"))
    leader, follower = rig.start_servers(base, ["leader", "follower"])
    try:
        for server in (leader, follower):
            server.execute(*SCHEMA)
        conn = connect(leader.port)
        rng = random.Random(1)
        pool = lag_rows(conn, [make_row(i, rng)[1:] for i in range(args.rows)])
        with conn.cursor() as cur:
            for t in range(args.txns):
                cur.execute(lag_statement(pool, 1 + t * args.rows))
                conn.commit()
        conn.close()
        fde, txns = leader_events(leader.dir / "data" / "binlog.000001")
        assert len(txns) == args.txns, f"{len(txns)} transactions in the leader's binary log, {args.txns} written"
        cases = [(shape, annotate) for annotate in (True, False) for shape in SHAPES]
        results: dict[tuple[str, bool], list[list[float]]] = {case: [] for case in cases}
        for r in range(args.rounds):
            for case in cases[r % len(cases):] + cases[:r % len(cases)]:
                results[case].append(apply(follower, fde, txns, args.txns * args.rows, *case))
        events = len(txns[0]) - 1
        print(f"{args.txns} transactions of {args.rows} rows ({events} rows events of ~8 KiB each), "
              f"{args.rounds} round(s) per shape; best round by server CPU; load average {rig.load_average()}")
        print(f"{'shape':<12} {'annotations':<12} {'p50 ms':>7} {'p90 ms':>7} {'server CPU ms':>14} "
              f"{'binlog KB':>10}  ratio of server CPU / binlog to the first line")
        first: list[float] | None = None
        for shape, annotate in cases:
            best = min(results[(shape, annotate)], key=lambda x: x[2])
            first = first or best
            print(f"{shape:<12} {'on' if annotate else 'off':<12} {best[0]:>7.2f} {best[1]:>7.2f} {best[2]:>14.2f} "
                  f"{best[3]:>10.1f}  {best[2] / first[2]:.2f} / {best[3] / first[3]:.2f}")
        print("check: every shape left the follower with every row: yes")
    finally:
        rig.stop_servers([leader, follower])


if __name__ == "__main__":
    main()
