"""cdc-producer's one function: wire the leader, the topic and the publisher, then stream."""

from __future__ import annotations

import gc
import select
import socket
import time
from pathlib import Path

import pymysql
from pymysqlreplication import binlogstream

from cdc_producer.binlog import (
    Position, current_position, leader_info, open_binlog, parse_position, preflight, purged_problem, stream_error,
)
from cdc_producer.publish import Publisher, ResumeState, check_same_server, read_tail
from cdc_stream.mysql import connect
from cdc_stream.console import TableProgress, err
from cdc_stream.errors import ConfigError, SetupError
from cdc_stream.filters import TableFilter
from cdc_stream.profile import ProducerProfile, log_topic
from cdc_stream.routing import Router, is_per_table
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import TopicNotFound, open_stream

STATUS_INTERVAL = 10.0
MAX_BACKOFF = 10.0
# Errors of the binlog connection that a reconnect can cure (the leader restarted,
# a network cut, a half-open socket caught by the read timeout).
_TRANSIENT_CODES = {2003, 2006, 2013, 2055, 1053, 1927}
_TRANSIENT = (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError, socket.timeout, OSError)

# python-mysql-replication reconnects by itself on 2006/2013, but from the position
# it was created with (on MariaDB it never updates auto_position): that would
# publish old transactions again. We reconnect ourselves from the last published one.
binlogstream.MYSQL_EXPECTED_ERROR_CODES.clear()


def check(profile: ProducerProfile) -> list[str]:
    """Preflight only: the problems found on the leader ([] when ready), including a purged resume point."""
    conn = connect(profile.database, "leader")
    try:
        info = leader_info(conn)
        problems = preflight(conn, info, profile.database.server_id)
        start = _resume_point(profile)
        if start is not None and (purged := purged_problem(conn, info, start)):
            problems.append(purged)
        return problems
    finally:
        conn.close()


def _resume_point(profile: ProducerProfile) -> Position | None:
    """Where a start would resume, from the topic's tail (None for a first start)."""
    name = log_topic(profile.stream)
    try:
        with open_stream(profile.stream, create=False) as stream:
            if not stream.exists(name):
                return None
            topic = stream.topic(name)
            try:
                tail = read_tail(topic, "")
                state = ResumeState(Path(profile.data.base_path) / f"producer-{_safe(name)}.json", stream.identity, name)
                return state.load(tail) or tail.position
            finally:
                topic.close()
    except TopicNotFound:
        return None


def run(profile: ProducerProfile, stop: StopSignal, snapshot_tables: list[str] | None = None) -> None:
    """Follow the leader's binlog and publish until stopped; reconnect when the leader goes away.

    `snapshot_tables`: copy these tables ("db.table"; [] = every filtered table)
    before streaming, as `cdc-producer PROFILE --snapshot [db.table ...]` asks.
    """
    conn = connect(profile.database, "leader", autocommit=True)
    try:
        info = leader_info(conn)
        problems = preflight(conn, info, profile.database.server_id)
        if problems:
            raise SetupError("the leader is not ready for CDC:\n  - " + "\n  - ".join(problems))
        stream = open_stream(profile.stream)
        name = log_topic(profile.stream)
        stream.create(name)
        topic = stream.topic(name)
        router = None
        if is_per_table(profile.stream.topic):
            router = Router(stream, profile.stream.topic, name, fluvio=profile.stream.backend == "fluvio")
        tail = read_tail(topic, info.flavor)
        state = ResumeState(Path(profile.data.base_path) / f"producer-{_safe(name)}.json", stream.identity, name)
        saved = state.load(tail)
        first_start = tail.position is None and saved is None
        start = saved or tail.position or current_position(conn, info)
        check_same_server(start, info)
        if not first_start and (purged := purged_problem(conn, info, start)):
            raise SetupError(purged)
    finally:
        conn.close()
    if info.flavor == "mariadb" and start.gtid_set is None:
        raise SetupError(f"the topic's resume point {start} is a file position, but MariaDB is followed by GTID only")
    publisher = Publisher(
        topic=topic, resource=profile.mysql_resource_name, filters=TableFilter.from_profile(profile.filters),
        info=info, next_sequence=tail.next_sequence, position=start, state=state, windows=tail.windows,
        router=router,
    )
    _tune_gc()
    mode = profile.snapshot.mode
    if tail.snapshot is not None or snapshot_tables is not None or mode == "always" or (mode == "initial" and first_start):
        with stop.interruptible():
            publisher.position = _snapshot(profile, info, publisher, tail, start, first_start, snapshot_tables)
    where = f"{profile.database.ip_or_host}:{profile.database.port}"
    failures = 0
    next_status = time.monotonic() + STATUS_INTERVAL
    try:
        while not stop.requested:
            position = publisher.position
            binlog = open_binlog(profile.database, info, position)
            announced = False
            try:
                while not stop.requested:
                    if publisher.queued and not _readable(binlog):
                        # Caught up: append what was queued before waiting. It becomes durable
                        # while the binlog is waited on; the next flush reports a failure.
                        publisher.flush(wait=False)
                    with stop.interruptible():
                        ev = binlog.fetchone()
                    if not announced:
                        verb = "streaming from" if failures == 0 else "reconnected: streaming from"
                        err.print(
                            f"{verb} {position} of {info.flavor} {info.version} at {where} to topic '{name}' "
                            f"({stream.describe()}), next sequence {publisher.next_sequence}",
                            markup=False,
                        )
                        announced, failures = True, 0
                    if ev is None:
                        continue
                    publisher.handle(ev)
                    publisher.flush_state()
                    if time.monotonic() >= next_status:
                        s = publisher.stats
                        err.print(
                            f"published {s.transactions} transactions ({s.events} events, {s.rows} rows), "
                            f"skipped {s.skipped_transactions}; at {publisher.position}",
                            markup=False,
                        )
                        next_status = time.monotonic() + STATUS_INTERVAL
            except _TRANSIENT as e:
                if isinstance(e, pymysql.err.MySQLError) and e.args and e.args[0] not in _TRANSIENT_CODES:
                    raise stream_error(e, position) from None
                publisher.discard_partial()
                publisher.flush()  # `position` is past the queued transactions: they must be on the topic
                failures += 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                reason = e.args[-1] if getattr(e, "args", None) else type(e).__name__
                err.print(
                    f"lost the leader at {where} ({reason}); reconnecting in {delay:g}s (attempt {failures}), "
                    f"will resume at {publisher.position}",
                    markup=False,
                )
                with stop.interruptible():
                    time.sleep(delay)
            except pymysql.err.MySQLError as e:
                raise stream_error(e, position) from None
            finally:
                binlog.close()
        publisher.flush()
    except Shutdown:
        publisher.flush()
    finally:
        publisher.settle()
        publisher.flush_state(force=True)
        if router is not None:
            router.close()
        topic.close()
        stream.close()
    s = publisher.stats
    err.print(f"stopped: published {s.transactions} transactions ({s.events} events); resume at {publisher.position}", markup=False)


def _readable(binlog) -> bool:
    """Whether the binlog connection has data to read now (so the next event will not wait)."""
    conn = getattr(binlog, "_stream_connection", None)
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False
    if getattr(sock, "pending", None) and sock.pending():  # TLS: decrypted bytes not read yet
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):  # closed: the next read reports it
        return False


def _tune_gc() -> None:
    """Fewer garbage collections while streaming.

    Decoding allocates millions of small dicts and lists that live until their
    transaction is appended; with the default thresholds the collector ran every
    700 of them, and its passes over the surviving rows and over the
    start-up objects took half of the producer's time (measured on the
    standard benchmark). The start-up objects are frozen out of collection;
    real garbage cycles are still collected, in larger steps.

    The CLI loads with the collector off (cdc_producer/cli.py), and the start-up
    objects are frozen without a collection first: that pass took 12-18 ms of
    every start to find ~500 unreachable objects (a few dozen KB, kept for good)."""
    gc.freeze()
    gc.set_threshold(10_000, 20, 100)
    gc.enable()


def _snapshot(profile, info, publisher, tail, start, first_start, only) -> "Position":
    """Copy the tables (or resume an interrupted copy); returns where streaming continues."""
    from cdc_producer.snapshot import Snapshot, copy_tables  # only when copying: spares every start its import

    resume = tail.snapshot
    if resume is not None:
        only = resume.get("tables")
        err.print(f"resuming the snapshot interrupted at {resume['table']}", markup=False)
    snap = Snapshot(profile.database, info)
    progress = TableProgress()
    try:
        filters = TableFilter.from_profile(profile.filters)
        tables = snap.tables(filters, only or None)
        if only:
            missing = sorted(set(only) - {t.full_name for t in tables})
            if missing:
                raise ConfigError(f"--snapshot: no such table (or excluded by [filters]): {', '.join(missing)}")
        if resume is not None:
            stream_from = parse_position(resume["stream_from"])
        else:
            stream_from = snap.position if first_start else start
        err.print(f"snapshot of {len(tables)} tables at {snap.position}; the binlog follows from {stream_from}",
                  markup=False)
        copy_tables(publisher, snap, tables, stream_from, resume, profile.snapshot.chunk_size, progress,
                    only=only or None)
    finally:
        progress.close()
        snap.close()
    return stream_from


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
