"""Where a transaction's lag goes: the time of each step between the leader's COMMIT and the follower's row.

    .venv/bin/python bench/steps.py [--rate 5000] [--seconds 10] [--rounds 2] [--rows binlog|sql]
                                   [--before DIR] [--keep]

Starts a leader and a follower (bench/rig.py), cdc-producer and cdc-consumer with bench/steps_site on their
PYTHONPATH (probes that note when each process got each binlog event, staged and committed each topic
append, read records, sent statements to the follower and read the answers), and runs the lag load of
bench/run.py's lag phase (bench/load.py: 50 transactions a second on a fixed schedule, the follower polled
every 0.5 ms). For each transaction it takes, in order: the leader's COMMIT returned, the producer's GTID
event of it, its XID event, its topic append staged, that COMMIT begun and returned, the consumer's read
that returned it, its statements handed to the writer thread, sent to the follower and answered, the
first poll that saw its last row; and prints each step's p50 / p90 / p99 per round, and its mean over the
slowest 5% of the transactions (by lag): where the tail's time goes. A step can hold a wait for the CPU
that is not on the lag's path: "topic COMMIT, to the bell rung" reads ~1 ms in a quarter of the transactions
because the woken consumer ran before the producer's ring returned, and read the records first
(bench/README.md, issue 26, seventeenth part). The clocks are
CLOCK_MONOTONIC, shared by the processes. The probes cost ~2 µs each, a few per transaction. `--before DIR`
runs the programs from the cdc_* packages in DIR instead (git archive REV cdc_stream cdc_producer
cdc_consumer | tar -x -C DIR).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import rig
from load import SCHEMA, measure_lag

STEPS = ["leader COMMIT -> producer has the GTID event", "GTID -> XID event (the rows decoded)",
         "XID -> topic append staged", "staged -> topic COMMIT begun", "topic COMMIT, to the bell rung",
         "rung -> the consumer's read returned it", "read -> statements queued (decode, SQL)",
         "queued -> the writer thread sent them",
         "follower: sent -> answered (rows, checkpoint, COMMIT)", "answered -> the bench's poll saw the row"]


def read_log(path: Path) -> dict[str, list[float]]:
    """Each step's times, in order."""
    out: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        step, t = line.split(" ")
        out.setdefault(step, []).append(float(t))
    return out


def steps_of(commits: list[float], lags: list[float], producer: dict[str, list[float]],
             consumer: dict[str, list[float]], interval: float) -> list[list[float]]:
    """Per transaction, each step's seconds (STEPS), then the whole lag. The k-th GTID event from the load's
    start is the k-th transaction's (the load is the leader's only writer); each later step is the first of
    its kind after the one before."""
    def after(step: list[float], t: float) -> float:
        i = bisect.bisect_right(step, t)
        if i == len(step):
            raise SystemExit("a transaction's step is missing from the probes' logs: did a probe fail to load "
                             "(the programs' stderr says 'Error in sitecustomize'; an older --before tree?)")
        return step[i]

    gtids = producer["event:MariadbGtidEvent"]
    first = bisect.bisect_right(gtids, commits[0] - interval / 2)
    out = []
    for k, (commit, lag) in enumerate(zip(commits, lags)):
        gtid = gtids[first + k]
        xid = after(producer["event:XidEvent"], gtid)
        stage = after(producer["stage"], xid)
        begun = after(producer["commit"], stage)
        rung = after(producer["rung"], begun)
        read = after(consumer["read"], begun)  # (readers see it once COMMIT made it visible, maybe before the ring)
        queued = after(consumer["queue"], read)
        sent = after(consumer["send"], queued)
        answered = after(consumer["answered"], sent)
        points = [commit, gtid, xid, stage, begun, rung, read, queued, sent, answered, commit + lag]
        out.append([b - a for a, b in itertools.pairwise(points)] + [lag])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=5000, help="rows/s (50 transactions a second)")
    parser.add_argument("--seconds", type=float, default=10.0, help="of load per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", choices=["binlog", "sql"], default="binlog", help="the consumer's [replay] rows")
    parser.add_argument("--before", type=Path, help="run the cdc_* packages in this directory")
    parser.add_argument("--keep", action="store_true", help="keep the servers', topic's and probes' temp dir")
    parser.add_argument("--profile", action="store_true",
                        help="both programs under py-spy during the rounds (which it slows): their top functions")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-steps-"))
    leader, follower = rig.start_servers(base, ["leader", "follower"])
    producer = consumer = None
    try:
        run = rig.Run(base / "pipeline", leader, follower, rows=args.rows)
        path = [str(args.before)] if args.before else []
        env = {"PYTHONPATH": os.pathsep.join(path + [str(HERE / "steps_site")]), "STEPS_LOG": str(base)}
        producer, consumer = run.producer(env=env), run.consumer(env=env)
        producer.wait_line("streaming from")
        leader.execute(*SCHEMA)
        consumer.wait_line("applying topic")
        run.wait_applied(leader.gtid(), 60, producer, consumer)
        spies = [(name, base / f"{name}.spy", rig.pyspy_attach(cli.proc.pid, base / f"{name}.spy"))
                 for name, cli in (("cdc-producer", producer), ("cdc-consumer", consumer))] if args.profile else []
        results = [measure_lag(leader.port, follower.port, args.rate, args.seconds, 1 + r * 10 * args.rate *
                               int(args.seconds + 1)) for r in range(args.rounds)]
        rig.stop_cli(producer)
        rig.stop_cli(consumer)
        producer = consumer = None
        for name, out, spy in spies:
            top, samples = rig.pyspy_top(out, spy, n=15)
            print(f"{name}: top functions by own samples, of {samples:,} (py-spy, during the rounds)")
            for f in top:
                print(f"  {f['percent']:5.1f}%  {f['function']}")
        p_log, c_log = read_log(base / "cdc-producer.log"), read_log(base / "cdc-consumer.log")
        print(f"{args.rate:,} rows/s ({args.rate // 50} rows a transaction, 50 a second), {args.seconds:g} s a round, "
              f"[replay] rows = {args.rows}" + (f", the code in {args.before}" if args.before else "")
              + f"; load average {rig.load_average()}")
        for n, result in enumerate(results, 1):
            rows = steps_of(result.commits, result.lags, p_log, c_log, 1 / 50)[5:]  # (the first ones warm up)
            slow = sorted(rows, key=lambda row: row[-1])[int(0.95 * len(rows)):]  # the slowest 5% by lag
            print(f"\nround {n}: {len(rows)} transactions, ms    p50     p90     p99  slowest 5%")
            for k, name in enumerate([*STEPS, "lag"]):
                column = sorted(1000 * row[k] for row in rows)
                print(f"  {name:56s} {column[len(column) // 2]:6.2f}  {column[int(0.9 * len(column))]:6.2f}  "
                      f"{column[int(0.99 * len(column))]:6.2f}  {1000 * sum(row[k] for row in slow) / len(slow):6.2f}")
    finally:
        for cli in (producer, consumer):
            if cli is not None:
                cli.kill()
        rig.stop_servers([leader, follower])
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
