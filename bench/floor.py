"""The lag floor of the pipeline's shape: a skeleton producer and consumer beside native replication.

    .venv/bin/python bench/floor.py [--rate 5000] [--seconds 10] [--rounds 3]

The skeleton keeps every hop and every write of cdc-producer -> embedded topic -> cdc-consumer and drops
all the rest. Its producer follows the leader's binlog as a replica (python-mysql-replication, with the
library patches cdc-producer uses) and never decodes a row: at each XID it appends one record holding the
transaction's raw binlog events (format description, table map, rows event: a record per rows event, as
cdc-producer's change events) to an embedded topic in one append, committed (the readers' bell rings)
and synced in a thread, as cdc-producer's (cdc_producer/background.py). Its consumer waits on
the topic's bell and sends the follower the events as BINLOG statements (each rows event ending its
statement, up to QUIET_MAX_BINLOG characters each, in a session that logs no annotations), then, once the
records are durable (Topic.durable), the checkpoint and COMMIT behind the chain's guard, through
cdc-consumer's own writer (writer.execute), as its BINLOG path does. No JSON, no change events, no
checks, no metrics: what is left is the cost of the shape (two more processes, the topic's SQLite commit
and fsync, one more round trip into a server after idle).

Each round runs, in turn, the skeleton and native replication under bench/load.py's lag load (50
transactions a second, the follower polled every 0.5 ms), and then cdc-producer and cdc-consumer when
--ours is given; it prints each side's p50 / p99 per round and pooled. If the skeleton's p99 is already
over twice native's, no implementation of this shape reaches the issue's target on this machine.
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import rig
from load import SCHEMA, LagResult, measure_lag

TOPIC = "floor"


def skeleton_producer(port: int, stream_dir: str, gtid: str) -> None:
    """Follow the leader from `gtid`; one record of raw binlog events per transaction."""
    from functools import partial

    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import FormatDescriptionEvent, MariadbGtidEvent, XidEvent
    from pymysqlreplication.row_event import WriteRowsEvent

    from cdc_producer import library_patches
    from cdc_producer.background import BackgroundAppends
    from cdc_stream.topics.embedded import EmbeddedStream

    stream = EmbeddedStream(stream_dir)
    stream.create(TOPIC)
    topic = stream.topic(TOPIC)
    appends = BackgroundAppends(idle=topic.idle)
    binlog = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "password": ""},
        server_id=rig.PRODUCER_SERVER_ID + 1, blocking=True, is_mariadb=True, auto_position=gtid, freeze_schema=True,
        only_events=[FormatDescriptionEvent, MariadbGtidEvent, WriteRowsEvent, XidEvent],
        pymysql_wrapper=library_patches.BinlogStreamConnection)
    print("following", flush=True)
    fde, parts = b"", []
    while True:
        ev = binlog.fetchone()
        if isinstance(ev, FormatDescriptionEvent):
            fde = library_patches.event_bytes(ev)
        elif isinstance(ev, MariadbGtidEvent):
            parts = []
        elif isinstance(ev, WriteRowsEvent):  # (its rows are never read: the library decodes them on demand)
            parts.append(library_patches.table_map_bytes(ev) + library_patches.event_bytes(ev))
        elif isinstance(ev, XidEvent) and parts:  # a record per rows event, as cdc-producer's events
            records = [(b"last" if k == len(parts) - 1 else None, base64.b64encode(fde + part))
                       for k, part in enumerate(parts)]
            appends.submit(partial(topic.stage, records))


def skeleton_consumer(port: int, stream_dir: str) -> None:
    """Apply each record as BINLOG statements, the checkpoint and COMMIT in one round trip."""
    import pymysql
    from pymysql.constants import CLIENT

    from cdc_consumer import checkpoint, writer
    from cdc_consumer.batch import QUIET_MAX_BINLOG, Origin
    from cdc_consumer.binlog_replay import ending_statement, split_format
    from cdc_consumer.follower import QUIET_ANNOTATIONS_SQL, SESSION_SQL
    from cdc_stream.topics.embedded import EmbeddedStream

    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=False,
                           client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.FOUND_ROWS, charset="utf8mb4")
    with conn.cursor() as cur:
        for sql in [*SESSION_SQL, QUIET_ANNOTATIONS_SQL]:
            cur.execute(sql)
    checkpoint.ensure_schema(conn)
    max_packet = writer.max_allowed_packet(conn)
    stream = EmbeddedStream(stream_dir)
    stream.create(TOPIC)
    topic = stream.topic(TOPIC)
    offset, session_format, statements, chunks, size = topic.end_offset(), None, [], [], 0
    format_sql = ""  # the statement giving the session the leader's format (not a row statement)
    print("applying", flush=True)
    while True:
        for rec in topic.read(offset, wait=0.5):
            leader, events = split_format(rec.value.decode())
            assert leader is not None
            if leader != session_format:
                format_sql = leader.statement()
                statements.append(format_sql)
                session_format = leader
            # (the rows events of a transaction in BINLOG statements of up to QUIET_MAX_BINLOG characters)
            events = ending_statement(events, leader)
            if chunks and size + len(events) > QUIET_MAX_BINLOG:
                statements.append("BINLOG '" + "\n".join(chunks) + "'")
                chunks, size = [], 0
            chunks.append(events)
            size += len(events) + 1
            offset = rec.offset + 1
            if rec.key == b"last":
                statements.append("BINLOG '" + "\n".join(chunks) + "'")
                # (as cdc-consumer: the rows go while the topic's fsync runs, the checkpoint and COMMIT after it)
                origins = [Origin(rec.offset, "t", None, overlap=sql is not format_sql) for sql in statements]
                statements += [checkpoint.save_sql(checkpoint.Checkpoint(TOPIC, "floor", offset)), "COMMIT"]
                origins += [Origin(rec.offset, "t", None)] * 2
                writer.execute(conn, statements, origins, max_packet, partial(topic.durable, offset))
                statements, chunks, size = [], [], 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=5000, help="rows/s (50 transactions a second)")
    parser.add_argument("--seconds", type=float, default=10.0, help="of load per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ours", action="store_true", help="also cdc-producer and cdc-consumer, each round")
    parser.add_argument("--role", choices=["producer", "consumer"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stream", help=argparse.SUPPRESS)
    parser.add_argument("--gtid", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "producer":
        return skeleton_producer(args.port, args.stream, args.gtid)
    if args.role == "consumer":
        return skeleton_consumer(args.port, args.stream)

    base = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    leader, follower, replica = rig.start_servers(base, ["leader", "follower", "replica"])
    procs: list[subprocess.Popen] = []
    try:
        start = leader.gtid()
        run = rig.Run(base / "pipeline", leader, follower) if args.ours else None
        if run is None:
            leader.execute(*SCHEMA)
            follower.execute(*SCHEMA)
        else:  # (a first start follows from the leader's current position: the schema comes after it)
            _ours(run, leader, None, lambda: leader.execute(*SCHEMA))
        rig.start_native(replica, leader, start)
        rig.wait_native(replica, leader.gtid(), 60)
        replica.execute("STOP SLAVE")
        print(rig.durability([follower, replica]))
        sides: dict[str, list[LagResult]] = {"skeleton": [], "native": [], "ours": []}
        next_id = 1

        def measure(port: int) -> LagResult:
            nonlocal next_id
            first, next_id = next_id, next_id + int(args.rate * args.seconds) + 10_000
            return measure_lag(leader.port, port, args.rate, args.seconds, first)

        for _ in range(args.rounds):
            # the skeleton: both relays from the leader's current position, on a topic of their own
            stream_dir = base / "skeleton-stream"
            common = [sys.executable, __file__, "--stream", str(stream_dir)]
            env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
            producer = subprocess.Popen([*common, "--role", "producer", "--port", str(leader.port), "--gtid",
                                         leader.gtid()], stdout=subprocess.PIPE, env=env)
            consumer = subprocess.Popen([*common, "--role", "consumer", "--port", str(follower.port)],
                                        stdout=subprocess.PIPE, env=env)
            procs[:] = [producer, consumer]
            for p, word in ((producer, b"following"), (consumer, b"applying")):
                assert p.stdout is not None and word in p.stdout.readline(), "a skeleton relay did not start"
            sides["skeleton"].append(measure(follower.port))
            for p in procs:
                p.kill()
                p.wait()
            # the skeleton's follower skipped the rows it was not running for: bring it level for the next round
            follower.execute("DELETE FROM bench.lag")
            replica.execute("START SLAVE")
            rig.wait_native(replica, leader.gtid(), 60)
            sides["native"].append(measure(replica.port))
            replica.execute("STOP SLAVE")
            if run is not None:
                follower.execute("DELETE FROM bench.lag")
                sides["ours"].append(_ours(run, leader, measure))
        print(f"{args.rate:,} rows/s ({args.rate // 50} rows a transaction, 50 a second), {args.seconds:g} s a round "
              f"and side; load average {rig.load_average()}")
        for name, results in sides.items():
            if not results:
                continue
            rounds = ", ".join(f"{1000 * r.percentile(50):.2f} / {1000 * r.percentile(99):.2f}" for r in results)
            pooled = LagResult.pooled(results)
            print(f"  {name:9s} p50 / p99 ms per round: {rounds}; pooled {1000 * pooled.percentile(50):.2f} / "
                  f"{1000 * pooled.percentile(99):.2f}")
    finally:
        for p in procs:
            p.kill()
        rig.stop_servers([leader, follower, replica])


def _ours(run: rig.Run, leader: rig.Server, measure, first=None) -> LagResult:
    """cdc-producer and cdc-consumer caught up (from where they stopped), then the lag (measure(port)) unless None;
    first(), if given, once the producer streams."""
    producer, consumer = run.producer(), run.consumer()
    try:
        producer.wait_line("streaming from")
        if first is not None:
            first()
        consumer.wait_line("applying topic")
        run.wait_applied(leader.gtid(), 120, producer, consumer)
        return measure(run.follower.port) if measure is not None else LagResult(None, 0.0)
    finally:
        rig.stop_cli(producer)
        rig.stop_cli(consumer)


if __name__ == "__main__":
    main()
