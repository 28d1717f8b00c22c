"""cdc-producer's one function: wire the leader, the topic and the publisher, then stream."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pymysql

from cdc_producer.assemble import RereadTransaction
from cdc_producer.binlog import (
    LeaderInfo,
    current_position,
    dispatch,
    has_data,
    leader_info,
    open_binlog,
    preflight,
    purged_problem,
    stream_error,
)
from cdc_producer.progress import copies_path, describe_copies
from cdc_producer.publish import Publisher
from cdc_producer.resume import ResumePoint, ResumeState, Tail, check_same_server, read_tail
from cdc_producer.signals import Signals, hold_lock, reader_filters, requests_dir
from cdc_producer.telemetry import ProducerTelemetry
from cdc_stream import collector
from cdc_stream.console import TableProgress, err
from cdc_stream.errors import ConfigError, DataError, SetupError, TopicUnavailable, is_retriable, mysql_message
from cdc_stream.filters import TableFilter
from cdc_stream.layout import Layout
from cdc_stream.mysql import connect
from cdc_stream.positions import Position
from cdc_stream.profile import ProducerProfile
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import Stream, TopicError, TopicNotFound, open_stream

if TYPE_CHECKING:
    from cdc_producer.chunks import LiveCopy

STATUS_INTERVAL = 10.0
MAX_BACKOFF = 10.0


def check(profile: ProducerProfile) -> list[str]:
    """Preflight only: the problems found on the leader ([] when ready), including a purged resume point."""
    conn = connect(profile.database, "leader")
    try:
        info = leader_info(conn)
        problems = preflight(conn, info, profile.database.server_id)
        resume = _resume_point(profile)
        if resume is not None and (purged := purged_problem(conn, info, resume.read_from())):
            problems.append(purged + _held_xa_note(resume))
        return problems
    finally:
        conn.close()


def _resume_point(profile: ProducerProfile) -> ResumePoint | None:
    """Where a start would resume, from the topic's tail (None for a first start)."""
    layout = Layout.of(profile.stream)
    try:
        with open_stream(profile.stream, create=False) as stream:
            if not stream.exists(layout.log_topic):
                return None
            tail, state = _tail(profile, layout, stream)
            return state.load(tail) or tail.resume_point()
    except TopicNotFound:
        return None


def _held_xa_note(resume: ResumePoint) -> str:
    if not resume.xa_pending:
        return ""
    return (f"; it is where the producer must read again the XA PREPARE of {len(resume.xa_pending)} XA "
            f"transaction(s) the leader has not committed yet (first: {resume.xa_pending[0].xid})")


def _tail(profile: ProducerProfile, layout: Layout, stream: Stream) -> tuple[Tail, ResumeState]:
    return read_tail(layout, stream, profile.data.base_path)


def run(profile: ProducerProfile, stop: StopSignal, snapshot_tables: list[str] | None = None,
        telemetry: ProducerTelemetry | None = None) -> None:
    """Follow the leader's binlog and publish until stopped; reconnect when the leader goes away.

    `snapshot_tables`: copy these tables ("db.table"; [] = every filtered table)
    before streaming, as `cdc-producer PROFILE --snapshot [db.table ...]` asks.
    `telemetry`: where health, lag and counts are kept for the metrics endpoint.
    """
    telemetry = telemetry or ProducerTelemetry()
    layout = Layout.of(profile.stream)
    lock = hold_lock(profile.data.base_path, layout.log_topic)  # one producer per topic; --snapshot finds it
    failures = 0
    try:
        while True:
            attempt = _Attempt(again=failures > 0)
            try:
                _run(profile, stop, snapshot_tables, telemetry, layout, attempt)
                return
            except Exception as e:
                # The leader going away is handled in _follow. What else errors.is_retriable calls
                # retriable (the stream went away: TopicUnavailable) starts the producer again in
                # place once it has streamed: the topic's tail says where, as after a restart, so
                # nothing queued and unacknowledged is lost or published twice.
                if not (attempt.streamed or attempt.again) or not is_retriable(e):
                    raise
                failures = 1 if attempt.streamed else failures + 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                lost = f"the stream ({e})" if isinstance(e, TopicError) else f"the leader ({mysql_message(e)})"
                err.warning("lost {lost}; reconnecting in {delay:g}s (attempt {attempt}), will resume from the "
                            "topic's tail", lost=lost, delay=delay, attempt=failures)
                telemetry.lost(f"lost {lost}; reconnecting (attempt {failures})")
            try:
                with stop.interruptible():
                    time.sleep(delay)
            except Shutdown:
                return
            if stop.requested:
                return
            # Continuing, not starting: the copy `--snapshot` or `mode = "always"` asked for was made
            # (or its progress is on the topic, which resumes it).
            snapshot_tables = None
            if profile.snapshot.mode == "always":
                profile = msgspec.structs.replace(profile, snapshot=msgspec.structs.replace(profile.snapshot,
                                                                                           mode="initial"))
    finally:
        lock.close()


@dataclass
class _Attempt:
    """One start of the producer: `again` after a lost stream, `streamed` once it followed the binlog."""

    again: bool = False
    streamed: bool = False


def _open_stream(profile: ProducerProfile, attempt: _Attempt) -> Stream:
    """The profile's stream; one that does not answer yet, after a lost one, is worth waiting for."""
    try:
        return open_stream(profile.stream)
    except TopicError as e:  # (as the consumer's _Topics.reopen; TopicNotFound is no TopicError: it stops)
        if attempt.again and not isinstance(e, TopicUnavailable):
            raise TopicUnavailable(str(e)) from e
        raise


def _run(profile: ProducerProfile, stop: StopSignal, snapshot_tables: list[str] | None,
         telemetry: ProducerTelemetry, layout: Layout, attempt: _Attempt) -> None:
    conn = connect(profile.database, "leader", autocommit=True)
    try:
        info = leader_info(conn)
        problems = preflight(conn, info, profile.database.server_id)
        if problems:
            raise SetupError("the leader is not ready for CDC:\n  - " + "\n  - ".join(problems))
        stream = _open_stream(profile, attempt)
        writer = layout.writer(stream)
        tail, state = _tail(profile, layout, stream)
        resume = state.load(tail) or tail.resume_point()
        first_start = resume is None
        start = resume.read_from() if resume is not None else current_position(conn, info)
        check_same_server(start, info)
        if resume is not None and (purged := purged_problem(conn, info, start)):
            raise SetupError(purged + _held_xa_note(resume))
    finally:
        conn.close()
    if info.flavor == "mariadb" and start.gtid_set is None:
        raise SetupError(f"the topic's resume point {start} is a file position, but MariaDB is followed by GTID only")
    publisher = Publisher(writer, profile.mysql_resource_name, TableFilter.from_profile(profile.filters), info,
                          tail.next_sequence, start, state, tail.windows,
                          replay_until=resume.replay_until() if resume is not None else None,
                          binlog=profile.events.binlog)
    collector.streaming()
    try:
        mode = profile.snapshot.mode
        if profile.snapshot.method == "watermark" and tail.snapshot is None:
            with stop.interruptible():
                _live_copy(profile, info, publisher, tail, first_start, snapshot_tables)
            publisher.assembler.signals = Signals(_signal_table(profile), requests_dir(profile.data.base_path,
                                                                                        layout.log_topic))
        elif (tail.snapshot is not None or snapshot_tables is not None or mode == "always"
                or (mode == "initial" and first_start)):
            with stop.interruptible():
                # the Assembler owns the position: after the copy, the binlog follows from where it says
                publisher.assembler.position = _snapshot(profile, info, publisher, tail, start, first_start,
                                                         snapshot_tables, telemetry)
        attempt.streamed = True
        _follow(profile, info, publisher, stop, f"to topic '{layout.log_topic}' ({stream.describe()})", telemetry)
        publisher.flush()
    except Shutdown:
        publisher.flush()
    finally:
        if publisher.copy is not None:
            publisher.copy.close()
        publisher.settle()
        publisher.flush_state(force=True)
        publisher.close()
        stream.close()
    s = publisher.stats
    telemetry.health.stopped("shutting down")
    held = publisher.assembler.prepared.pending()
    line = "stopped: published {transactions} transactions ({events} events); resume at {position}"
    extra: dict[str, object] = {}
    if held:  # a restart reads the binlog again from the oldest held XA PREPARE
        line += " (reading again from {xa_read_from} for {xa_held} prepared XA transaction(s))"
        extra = {"xa_read_from": held[0].resume_from, "xa_held": len(held)}
    err.info(line, transactions=s.transactions, events=s.events, rows=s.rows, position=publisher.position, **extra)


def _follow(profile: ProducerProfile, info: LeaderInfo, publisher: Publisher, stop: StopSignal, to: str,
            telemetry: ProducerTelemetry) -> None:
    """Read the binlog into the publisher until stopped, reconnecting from the last published transaction."""
    where = f"{profile.database.ip_or_host}:{profile.database.port}"
    failures = 0
    next_report = 0.0
    reported = True  # the progress file may say copies run: write it once at least
    report_path = copies_path(profile.data.base_path, Layout.of(profile.stream).log_topic)
    next_status = time.monotonic() + STATUS_INTERVAL
    while not stop.requested:
        position = publisher.position
        binlog = open_binlog(profile.database, info, position,
                             filters=reader_filters(publisher.assembler.filters, profile.snapshot.signal_table))
        announced = False
        try:
            while not stop.requested:
                copy = publisher.copy
                signals = publisher.assembler.signals
                if copy is not None and not publisher.assembler.in_transaction:
                    # (per binlog event: nothing but these two tests while no copy runs and no request came)
                    if signals is not None and signals.due():
                        _requests(profile, publisher, copy)
                    if copy or reported:
                        _copy_chunks(copy, publisher, stop)
                        if time.monotonic() >= next_report:
                            copy.save_report(report_path)  # (once more after the last copy: none left)
                            next_report, reported = time.monotonic() + 1.0, bool(copy)
                if publisher.queued and not has_data(binlog):
                    # Caught up: append what was queued before waiting (unless the previous append was
                    # moments ago and more comes meanwhile: outbox.MIN_APPEND_INTERVAL). It becomes
                    # durable while the binlog is waited on; the next flush reports a failure.
                    linger = publisher.outbox.linger()
                    if linger <= 0 or not has_data(binlog, linger):
                        publisher.flush(wait=False)
                with stop.interruptible():
                    ev = binlog.fetchone()
                if not announced:
                    verb = "streaming from" if failures == 0 else "reconnected: streaming from"
                    err.info("{verb} {position} of {flavor} {version} at {leader} {to}, next sequence {next_sequence}",
                             verb=verb, position=position, flavor=info.flavor, version=info.version, leader=where,
                             to=to, next_sequence=publisher.next_sequence, reconnected=failures > 0)
                    telemetry.following(publisher, f"following the binlog of the leader at {where}")
                    announced, failures = True, 0
                if ev is None:
                    continue
                dispatch(ev, publisher.assembler)
                telemetry.binlog_event(ev.timestamp)
                publisher.flush_state()
                if time.monotonic() >= next_status:
                    s = publisher.stats
                    held = publisher.assembler.prepared
                    line = "published {transactions} transactions ({events} events, {rows} rows), skipped {skipped}; " \
                           "at {position}"
                    extra: dict[str, object] = {}
                    if held:
                        line += "; holding {xa_held} prepared XA transaction(s) ({xa_rows} rows)"
                        extra = {"xa_held": len(held), "xa_rows": held.rows()}
                    if copy:
                        line += "; copying {copies}"
                        extra["copies"] = describe_copies(copy.report())
                    err.info(line, transactions=s.transactions, events=s.events, rows=s.rows,
                             skipped=s.skipped_transactions, position=publisher.position,
                             lag=telemetry.lag.seconds(), **extra)
                    next_status = time.monotonic() + STATUS_INTERVAL
        except RereadTransaction as e:
            # A ROLLBACK TO SAVEPOINT undid rows of a chunk already handed on: the transaction is
            # read again from its start (its partial copy was abandoned), without those rows.
            publisher.flush()
            err.info("{reason}: reading the transaction again from {position} without them", reason=str(e),
                     position=publisher.position)
        except (pymysql.err.MySQLError, OSError) as e:
            if not is_retriable(e):
                if isinstance(e, pymysql.err.MySQLError):
                    raise stream_error(e, position) from None
                raise
            publisher.discard_partial()
            publisher.flush()  # `position` is past the queued transactions: they must be on the topic
            failures += 1
            delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
            reason = mysql_message(e)
            err.warning("lost the leader at {leader} ({reason}); reconnecting in {delay:g}s "
                        "(attempt {attempt}), will resume at {position}", leader=where, reason=reason, delay=delay,
                        attempt=failures, position=publisher.position)
            telemetry.lost(f"lost the leader at {where} ({reason}); reconnecting (attempt {failures})")
            with stop.interruptible():
                time.sleep(delay)
        finally:
            binlog.close()



def _live_copy(profile: ProducerProfile, info: LeaderInfo, publisher: Publisher, tail: Tail, first_start: bool,
               only: list[str] | None) -> None:
    """Set up the live (watermark) copies: those the topic says are in progress, and the tables a first
    start or `--snapshot` asks for; their DDL goes on the topic now, their rows while streaming."""
    from cdc_producer.chunks import LiveCopy  # only when copying: spares every start its import

    snap = profile.snapshot
    filters = TableFilter.from_profile(profile.filters)
    dropped = [t for t in tail.copying if not filters.allows_table(*t.split(".", 1))]
    if dropped:
        err.warning("dropping the copy of {tables}: [filters] exclude them now", tables=", ".join(dropped))
    copying = {t: c for t, c in tail.copying.items() if t not in dropped}
    live = LiveCopy(profile.database, info, profile.mysql_resource_name, snap.chunk_size, copying,
                    snap.rate_limit, snap.parallel)
    publisher.attach_copy(live)
    for table, cursor in copying.items():
        if cursor.after is None:  # nothing of it on the topic yet: its DDL again, as of now
            _publish_schema(publisher, live, table, cursor.recopy, cursor.copy)
    if copying:
        err.info("resuming the copy of {tables}", tables=", ".join(copying))
    newly = _newly_matched(profile, first_start)
    if newly and only is None:
        _refuse_foreign_keys(profile, newly)
        ids = live.request(newly, recopy=True)
        for table, copy_id in zip(newly, ids):
            _publish_schema(publisher, live, table, True, copy_id)
        err.info("copying {tables} in chunks while streaming ([filters] match them now)", tables=", ".join(newly))
    if only is None and not (snap.mode == "always" or (snap.mode == "initial" and first_start)):
        return
    conn = connect(profile.database, "leader", autocommit=True)
    try:
        names = _copyable(conn, profile, only or None)
    finally:
        conn.close()
    if only:
        missing = sorted(set(only) - set(names))
        if missing:
            raise ConfigError(f"--snapshot: no such table (or excluded by [filters]): {', '.join(missing)}")
    _refuse_foreign_keys(profile, names)
    recopy = not first_start
    ids = live.request(names, recopy)
    for table, copy_id in zip(names, ids):
        _publish_schema(publisher, live, table, recopy, copy_id)
    # (the line of the consistent method, which README and docs show: the copy starts at this position)
    err.info("snapshot of {tables} tables at {position}; the binlog follows from {stream_from}", tables=len(names),
             position=publisher.position, stream_from=publisher.position)
    if names:
        err.info("copying {tables} in chunks while streaming ({how})", tables=", ".join(names),
                 how="re-copy of live tables" if recopy else "initial copy")


def _where_problem(profile: ProducerProfile, tables: list[str], where: str) -> str | None:
    """Why the leader refuses a copy's condition on one of `tables` (each read with it, LIMIT 0), or why a
    table cannot be copied with one (no integer primary key: it is read whole); None: all accept it."""
    from cdc_producer.snapshot import describe_table
    from cdc_stream.mysql import qualified

    conn = connect(profile.database, "leader", autocommit=True)
    try:
        for table in tables:
            db, name = table.split(".", 1)
            if not describe_table(conn, db, name).int_pk:
                return f"cannot apply to {table}: a copy with a condition needs an integer primary key"
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT 1 FROM {qualified(db, name)} WHERE ({where}) LIMIT 0")
            except pymysql.err.MySQLError as e:
                if is_retriable(e):
                    raise
                return f"is refused by the leader on {table}: {mysql_message(e)}"
    finally:
        conn.close()
    return None


def _fk_problem(profile: ProducerProfile, tables: list[str]) -> str | None:
    """The foreign keys that keep `tables` from being copied live (chunks.foreign_key_problem), or None."""
    from cdc_producer.chunks import foreign_key_problem, foreign_keys

    if not tables:
        return None
    filters = TableFilter.from_profile(profile.filters)
    conn = connect(profile.database, "leader", autocommit=True)
    try:
        links = foreign_keys(conn)
    finally:
        conn.close()
    return foreign_key_problem(links, tables, lambda t: filters.allows_table(*t.split(".", 1)))


_FK_WHY = ("a live copy cannot keep them (a streamed row can name a row no chunk has copied yet, and the cascades "
           "the leader does not log can change rows a chunk has read)")


def _refuse_foreign_keys(profile: ProducerProfile, tables: list[str]) -> None:
    """Stop a start whose live copy would take tables joined by foreign keys, naming them and the fix."""
    problem = _fk_problem(profile, tables)
    if problem is not None:
        raise ConfigError(f"[snapshot] method = \"watermark\" cannot copy {', '.join(tables)} while streaming: "
                          f"foreign keys join them to tables the follower gets ({problem}); {_FK_WHY}; nothing was "
                          "published; fix: set [snapshot] method = \"consistent\" in the profile (every table read in "
                          "one consistent snapshot, then the binlog) and start again")


def _newly_matched(profile: ProducerProfile, first_start: bool) -> list[str]:
    """Tables the profile's [filters] pass now and did not at the last start (a profile change), which a
    live copy must bring in; the filters are remembered in [data] base_path (filters-<topic>.json)."""
    import msgspec

    from cdc_stream.profile import Filters

    topic = Layout.of(profile.stream).log_topic
    path = Path(profile.data.base_path) / ("filters-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in topic)
                                           + ".json")
    try:
        before: Filters | None = msgspec.json.decode(path.read_bytes(), type=Filters)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        before = None  # unknown (an older version ran): nothing to compare with
    newly: list[str] = []
    if before is not None and before != profile.filters and not first_start:
        old = TableFilter.from_profile(before)
        conn = connect(profile.database, "leader", autocommit=True)
        try:
            newly = [t for t in _copyable(conn, profile, None) if not old.allows_table(*t.split(".", 1))]
        finally:
            conn.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(profile.filters))
    tmp.replace(path)
    return newly


def _publish_schema(publisher: Publisher, copy: LiveCopy, table: str, recopy: bool, copy_id: str) -> None:
    """The DDL before a copy, on the topic now (nothing when the table is gone: its copy is dropped)."""
    events = copy.schema_events(table, recopy)
    if events:
        publisher.publish_here(events, f"copy:{copy_id}:schema")


def _copy_chunks(copy: LiveCopy, publisher: Publisher, stop: StopSignal) -> None:
    """Publish the chunks that are ready and read the next ones; a server error reading a chunk stops
    the producer naming the table, unless it is one a retry cures (then the loop reconnects)."""
    from cdc_producer.chunks import CopyError

    try:
        while not stop.requested and copy.step(publisher.position, publisher.publish_here,
                                               publisher.assembler.read_to, publisher.assembler.idle_at):
            pass
    except CopyError as e:
        if is_retriable(e.error):
            raise e.error from None
        raise DataError(f"copying {e.table} failed: {mysql_message(e.error)}; fix it on the leader (or exclude the "
                        "table with [filters]: its copy is then dropped) and start the producer again") from None


def _signal_table(profile: ProducerProfile) -> tuple[str, str] | None:
    name = profile.snapshot.signal_table
    if name is None:
        return None
    db, _, table = name.partition(".")
    return db, table


def _copyable(conn: pymysql.Connection, profile: ProducerProfile, only: list[str] | None) -> list[str]:
    """The tables a copy may take ("db.table"): those the filters pass, the signal table never."""
    from cdc_producer.snapshot import table_names

    filters = TableFilter.from_profile(profile.filters)
    return [f"{db}.{t}" for db, t in table_names(conn, filters, only) if f"{db}.{t}" != profile.snapshot.signal_table]


def _requests(profile: ProducerProfile, publisher: Publisher, copy: LiveCopy) -> None:
    """Act on the requests received (signal rows, request files), between two transactions."""
    signals = publisher.assembler.signals
    if signals is None:
        return
    signals.poll()
    requests, problems = signals.take()
    for problem in problems:
        err.warning("{problem}", problem=problem)
    for request in requests:
        wanted = list(request.tables) or None
        if request.kind == "execute-snapshot":
            conn = connect(profile.database, "leader", autocommit=True)
            try:
                names = _copyable(conn, profile, wanted)
            finally:
                conn.close()
            if wanted:
                missing = sorted(set(wanted) - set(names))
                if missing:
                    err.warning("{source}: no such table (or excluded by [filters]): {missing}", source=request.source,
                                missing=", ".join(missing))
            if request.where is not None and (bad := _where_problem(profile, names, request.where)) is not None:
                err.warning("{source} ignored: its where {where!r} {problem}", source=request.source,
                            where=request.where, problem=bad)
                continue
            if (fks := _fk_problem(profile, names)) is not None:
                err.warning("{source} ignored: foreign keys join {tables} to tables the follower gets ({problem}); "
                            "{why}; to re-copy them, set [snapshot] method = \"consistent\" in the profile, stop "
                            "the producer and run cdc-producer PROFILE --snapshot with them", source=request.source,
                            tables=", ".join(names),
                            problem=fks, why=_FK_WHY)
                continue
            ids = copy.request(names, recopy=True, where=request.where)
            for table, copy_id in zip(names, ids):
                _publish_schema(publisher, copy, table, True, copy_id)
            err.info("copying {tables} again while streaming{rows}, as {source} asks",
                     tables=", ".join(names) or "no table", source=request.source,
                     rows=f" (the rows where {request.where})" if request.where is not None else "")
        elif request.kind == "stop-snapshot":
            copy.stop(wanted)
            err.info("stopped the copy of {tables}, as {source} asks", tables=", ".join(wanted or ["every table"]),
                     source=request.source)
        else:
            copy.paused = request.kind == "pause-snapshot"
            err.info("{verb} the copies, as {source} asks", verb="paused" if copy.paused else "resumed",
                     source=request.source)


def _snapshot(profile: ProducerProfile, info: LeaderInfo, publisher: Publisher, tail: Tail, start: Position,
              first_start: bool, only: list[str] | None, telemetry: ProducerTelemetry) -> Position:
    """Copy the tables (or resume an interrupted copy); returns where streaming continues."""
    from cdc_producer.snapshot import Snapshot, copy_tables  # only when copying: spares every start its import

    resume = tail.snapshot
    if resume is not None:
        only = resume.tables or None
        err.info("resuming the snapshot interrupted at {table}", table=resume.table)
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
            stream_from = Position.parse(resume.stream_from)
        else:
            stream_from = snap.position if first_start else start
        err.info("snapshot of {tables} tables at {position}; the binlog follows from {stream_from}",
                 tables=len(tables), position=snap.position, stream_from=stream_from)
        copy_tables(publisher, snap, tables, stream_from, resume, profile.snapshot.chunk_size,
                    telemetry.snapshot(publisher, tables, progress), only=only or None)
        telemetry.snapshot_done()
    finally:
        progress.close()
        snap.close()
    return stream_from
