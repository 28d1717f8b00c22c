"""Snapshot benchmark: the live (watermark) copy beside the consistent one and `mariadb-dump | mariadb`.

    .venv/bin/python bench/snapshot.py [--rows 100000] [--rate 200] [--baseline-seconds 20]

One leader and one follower (tests/harness.Server). Table `bench.snap` (the standard row of load.py)
holds --rows rows; a writer updates random rows of it at --rate transactions per second (one row
each, autocommit) during every phase, so InnoDB has undo to purge all the time. In each phase
`SHOW ENGINE INNODB STATUS`'s "History list length" is sampled every 0.2 s:

- baseline: the writer alone for --baseline-seconds;
- watermark: `cdc-producer` (default method) copies the table onto a new topic while `cdc-consumer`
  applies it; copy time = launch until the copy's last chunk is on the topic; end to end = launch
  until the follower's checkpoint reaches the topic's end once the copy is done;
- consistent: the same with `[snapshot] method = "consistent"`;
- dump: `mariadb-dump --single-transaction bench snap | mariadb` into the follower (the writer on).

Results go to stdout as a table and to bench/snapshot_results.json.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT), str(ROOT / "tests")]

from harness import BIN, Cli, Server
from load import connect, make_row
from rig import start_servers, stop_servers, wait_until

from cdc_stream.topics.embedded import EmbeddedStream

TOPIC = "rust-mysql-cdc"
HISTORY = re.compile(r"History list length (\d+)")


def history_length(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW ENGINE INNODB STATUS")
        text = cur.fetchone()[2]
    m = HISTORY.search(text)
    return int(m.group(1)) if m else -1


class Sampler:
    """Samples the leader's history list length in a thread."""

    def __init__(self, port: int):
        self.conn = connect(port, autocommit=True)
        self.values: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.conn.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.values.append(history_length(self.conn))
            time.sleep(0.2)

    def summary(self) -> dict[str, int]:
        v = sorted(x for x in self.values if x >= 0) or [0]
        return {"history_max": v[-1], "history_p50": v[len(v) // 2], "samples": len(v)}


class Writer:
    """Updates random rows of bench.snap at a steady rate."""

    def __init__(self, port: int, rows: int, rate: float):
        self.conn = connect(port, autocommit=True)
        self.rows, self.rate = rows, rate
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.conn.close()

    def _loop(self) -> None:
        rng = random.Random(3)
        start = time.monotonic()
        with self.conn.cursor() as cur:
            while not self._stop.is_set():
                cur.execute("UPDATE bench.snap SET n = n + 1 WHERE id = %s", (rng.randint(1, self.rows),))
                self.done += 1
                wait = start + self.done / self.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)


def fill(leader: Server, rows: int) -> None:
    conn = connect(leader.port)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute("CREATE TABLE bench.snap (id BIGINT PRIMARY KEY, n INT, name VARCHAR(64), code CHAR(8), "
                    "amount DECIMAL(12,2), created DATETIME(6), doc JSON)")
        rng = random.Random(1)
        for lo in range(1, rows + 1, 2000):
            cur.executemany("INSERT INTO bench.snap VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            [make_row(i, rng) for i in range(lo, min(lo + 2000, rows + 1))])
            conn.commit()
    conn.close()


def profiles(work: Path, leader: Server, follower: Server, method: str) -> tuple[Path, Path]:
    stream = work / "stream"
    producer = work / "producer.toml"
    producer.write_text(f"""mysql_resource_name = "bench"
[database]
ip_or_host = "127.0.0.1"
port = {leader.port}
user = "root"
password = ""
server_id = 5401
[data]
base_path = "{work}/producer"
[filters]
include_dbs = ["bench"]
[stream]
path = "{stream}"
[snapshot]
method = "{method}"
chunk_size = 1000
""")
    consumer = work / "consumer.toml"
    consumer.write_text(f"""[database]
ip_or_host = "127.0.0.1"
port = {follower.port}
user = "root"
password = ""
[data]
base_path = "{work}/consumer"
[stream]
path = "{stream}"
""")
    return producer, consumer


def topic_events(stream: Path) -> list[dict]:
    with EmbeddedStream(stream) as s:
        if not s.exists(TOPIC):
            return []
        t = s.topic(TOPIC)
        records = t.read(0, max_records=10_000_000)
        t.close()
    return [json.loads(r.value) for r in records]


def copy_done(stream: Path, method: str) -> bool:
    with EmbeddedStream(stream) as s:
        if not s.exists(TOPIC):
            return False
        t = s.topic(TOPIC)
        last = t.last_record()
        t.close()
    if last is None:
        return False
    if method == "consistent":  # done when the last snapshot marker says complete, or the stream went past it
        return any(e.get("snapshot", {}).get("complete") for e in topic_events(stream)[-5:]) or \
            "snapshot" not in json.loads(last.value)
    return "copying" not in json.loads(last.value) and any(
        e.get("snapshot", {}).get("done") for e in topic_events(stream)[-50:])


def checkpoint(follower: Server) -> int | None:
    rows = follower.query("SELECT next_offset FROM mysql_cdc.consumer_offsets WHERE topic=%s", (TOPIC,))
    return rows[0][0] if rows else None


def end_offset(stream: Path) -> int:
    with EmbeddedStream(stream) as s:
        t = s.topic(TOPIC)
        end = t.end_offset()
        t.close()
        return end


def reset_follower(follower: Server) -> None:
    follower.execute("DROP DATABASE IF EXISTS bench", "DROP DATABASE IF EXISTS mysql_cdc")


def run_ours(base: Path, leader: Server, follower: Server, method: str, rows: int, rate: float) -> dict:
    work = base / method
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    reset_follower(follower)
    producer_profile, consumer_profile = profiles(work, leader, follower, method)
    with Writer(leader.port, rows, rate), Sampler(leader.port) as sampler:
        t0 = time.monotonic()
        producer = Cli([str(BIN / "cdc-producer"), str(producer_profile)])
        consumer = Cli([str(BIN / "cdc-consumer"), str(consumer_profile)])
        try:
            wait_until(lambda: copy_done(work / "stream", method), 1800, f"the {method} copy", interval=0.2)
            copied = time.monotonic() - t0
            wait_until(lambda: checkpoint(follower) is not None and checkpoint(follower) >= end_offset(work / "stream"),
                       1800, "the consumer", interval=0.2)
            applied = time.monotonic() - t0
        finally:
            producer.stop()
            consumer.stop()
    return {"copy_seconds": round(copied, 2), "copy_rows_per_s": round(rows / copied),
            "end_to_end_seconds": round(applied, 2), "end_to_end_rows_per_s": round(rows / applied),
            **sampler.summary()}


def run_dump(leader: Server, follower: Server, rows: int, rate: float) -> dict:
    reset_follower(follower)
    follower.execute("CREATE DATABASE bench")
    with Writer(leader.port, rows, rate), Sampler(leader.port) as sampler:
        t0 = time.monotonic()
        dump = subprocess.Popen(["mariadb-dump", "-h127.0.0.1", f"-P{leader.port}", "-uroot", "--single-transaction",
                                 "bench", "snap"], stdout=subprocess.PIPE)
        load = subprocess.run(["mariadb", "-h127.0.0.1", f"-P{follower.port}", "-uroot", "bench"], stdin=dump.stdout,
                              check=True)
        dump.wait()
        took = time.monotonic() - t0
    assert load.returncode == 0 and dump.returncode == 0
    return {"end_to_end_seconds": round(took, 2), "end_to_end_rows_per_s": round(rows / took), **sampler.summary()}


def run_baseline(leader: Server, rows: int, rate: float, seconds: float) -> dict:
    with Writer(leader.port, rows, rate), Sampler(leader.port) as sampler:
        time.sleep(seconds)  # the baseline is a fixed span of the writer alone
    return sampler.summary()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=200.0, help="writer transactions per second")
    ap.add_argument("--baseline-seconds", type=float, default=20.0)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    servers = start_servers(base, ["leader", "follower"])
    leader, follower = servers
    results: dict[str, dict] = {}
    try:
        print(f"filling bench.snap with {args.rows} rows", file=sys.stderr)
        fill(leader, args.rows)
        for name, run in (("baseline (writer only)", lambda: run_baseline(leader, args.rows, args.rate,
                                                                             args.baseline_seconds)),
                          ("watermark (live copy)", lambda: run_ours(base, leader, follower, "watermark", args.rows,
                                                                     args.rate)),
                          ("consistent (one snapshot)", lambda: run_ours(base, leader, follower, "consistent",
                                                                         args.rows, args.rate)),
                          ("mariadb-dump into mariadb", lambda: run_dump(leader, follower, args.rows, args.rate))):
            print(f"{name} ...", file=sys.stderr)
            results[name] = run()
    finally:
        stop_servers(servers)
        shutil.rmtree(base, ignore_errors=True)
    cols = ["copy_seconds", "copy_rows_per_s", "end_to_end_seconds", "end_to_end_rows_per_s", "history_p50",
            "history_max"]
    print(f"rows {args.rows}, writer {args.rate:g} updates/s\n")
    print("| run | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")
    (ROOT / "bench" / "snapshot_results.json").write_text(json.dumps(
        {"rows": args.rows, "rate": args.rate, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
