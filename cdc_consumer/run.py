"""cdc-consumer's one function: replay the topic onto the follower, one source transaction at a time.

This module wires the follower connection, the stream (read through the topic layout) and the
Replayer, reconnects when the follower or the stream goes away, and parks bad records on the
dead-letter topic when asked to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import pymysql

from cdc_consumer import checkpoint, privileges
from cdc_consumer.apply import BULK_MIN_ROWS
from cdc_consumer.binlog_replay import RowPolicy
from cdc_consumer.follower import MySqlFollower, connect_follower, probe
from cdc_consumer.parallel import ParallelFollower
from cdc_consumer.replayer import Replayer, ReplayOptions
from cdc_consumer.schedule import KeyCollector
from cdc_consumer.telemetry import ConsumerTelemetry
from cdc_stream import collector
from cdc_stream.console import err
from cdc_stream.errors import (
    ConfigError,
    DataError,
    SetupError,
    TopicError,
    TopicNotFound,
    TopicUnavailable,
    is_retriable,
)
from cdc_stream.events import MalformedEvent
from cdc_stream.filters import TableFilter
from cdc_stream.layout import Layout, LogReader
from cdc_stream.mysql import quote_ident
from cdc_stream.profile import ConsumerProfile
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import Stream, Topic, open_stream

READ_BATCH = 500
# The first read of a backlog is this many records, each next one twice the last up to READ_BATCH: 500 records
# of the bench's standard workload are 15 MB, 36 ms of SQLite reads before the follower gets its first statement.
FIRST_READ = 16
READ_WAIT = 0.5
MAX_BACKOFF = 10.0
WAITING_EVERY = 5.0  # seconds between "waiting for the topic" status lines


def check(profile: ConsumerProfile) -> tuple[list[str], list[str]]:
    """Preflight of the follower: reachable, checkpoint schema usable, the row path possible, topic present.

    Returns (problems, facts): what must be fixed, and what the consumer will do (which row path, why),
    then what the follower user lacks for some kinds of statements (privileges.needs: warnings, since
    the leader may never send them)."""
    log_topic = Layout.of(profile.stream).log_topic
    conn = connect_follower(profile.database)
    problems, facts = [], []
    try:
        checkpoint.ensure_schema(conn)
        checkpoint.load(conn, log_topic)
    except pymysql.err.MySQLError as e:
        problems.append(
            f"cannot use the checkpoint table {checkpoint.SCHEMA}.{checkpoint.TABLE}: {e.args[-1]}; "
            f"GRANT ALL ON {quote_ident(checkpoint.SCHEMA)}.* TO the consumer's user"
        )
    try:
        facts.append(RowPolicy.of(profile.replay.rows, probe(conn, profile.replay.bulk)).describe())
        facts += privileges.needs(privileges.user_grants(conn), profile.replay.definer)
    except SetupError as e:
        problems.append(str(e))
    finally:
        conn.close()
    try:
        with open_stream(profile.stream, create=False) as stream:
            if not stream.exists(log_topic):
                problems.append(f"topic '{log_topic}' does not exist in {stream.describe()}: start cdc-producer first")
    except TopicNotFound as e:  # no stream at all: one more problem, not the end of the check (the others are shown)
        problems.append(str(e))
    return problems, facts


def replay_options(profile: ConsumerProfile, policy: RowPolicy) -> ReplayOptions:
    """[replay] against the follower: `triggers = "auto"` guards them when rows take SQL."""
    r = profile.replay
    sql_rows = policy.mode == "sql" or not policy.follower.may_binlog
    guard = r.triggers == "guarded" or (r.triggers == "auto" and sql_rows)
    return ReplayOptions(policy, r.accounts, guard_triggers=guard, definer=r.definer)


def run(profile: ConsumerProfile, stop: StopSignal, skip_bad_records: bool = False,
        telemetry: ConsumerTelemetry | None = None) -> None:
    """Replay the topic onto the follower until stopped; reconnect when the follower or Fluvio goes away.

    `telemetry`: where health, lag and counts are kept for the metrics endpoint; a record that cannot
    be applied marks it stopped before the DataError is raised."""
    telemetry = telemetry or ConsumerTelemetry()
    layout = Layout.of(profile.stream)
    name = layout.log_topic
    where = f"{profile.database.ip_or_host}:{profile.database.port}"
    first = connect_follower(profile.database)  # unreachable at startup: an error
    conn: pymysql.Connection | None = first
    policy = RowPolicy.of(profile.replay.rows, probe(first, profile.replay.bulk))  # "binlog" that cannot be: an error
    collector.streaming()  # (before a wait for the topic, whose retries make garbage)
    replayer: Replayer | None = None
    topics: _Topics | None = None
    failures = 0
    try:
        topics = _wait_for_topic(profile, layout, skip_bad_records, stop, policy)  # an unreachable stream: an error
        while not stop.requested:
            try:
                if conn is None:
                    conn = connect_follower(profile.database)
                    policy = RowPolicy.of(profile.replay.rows, probe(conn, profile.replay.bulk))
                if topics is None:
                    topics = _Topics.reopen(profile, layout, skip_bad_records, policy)
                options = replay_options(profile, policy)
                replayer = _start_replay(conn, profile, name, topics.stream, options, telemetry)
                offset = replayer.saved.next_offset if replayer.saved else 0
                verb = "applying" if failures == 0 else "reconnected: applying"
                workers = profile.replay.workers
                err.info("{verb} topic '{topic}' ({stream}) from offset {offset} to the follower at {follower}; "
                         "{row_path}" + ("; {workers} workers, commits in the leader's order" if workers > 1 else ""),
                         verb=verb, topic=name, stream=topics.stream.describe(), offset=offset,
                         follower=where, row_path=policy.describe(), reconnected=failures > 0, workers=workers)
                telemetry.applying(offset, topics.reader.end_offset(), f"applying topic '{name}' to the follower "
                                   f"at {where}")
                failures = 0
                _follow(topics, replayer, offset, stop, telemetry)
            except Exception as e:
                if not is_retriable(e):
                    if isinstance(e, DataError):
                        telemetry.stopped(str(e))
                    raise
                failures += 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                lost = f"the stream ({e})" if isinstance(e, TopicUnavailable) else f"the follower at {where} ({e})"
                err.warning("lost {lost}; reconnecting in {delay:g}s (attempt {attempt})", lost=lost, delay=delay,
                            attempt=failures)
                telemetry.lost(f"lost {lost}; reconnecting (attempt {failures})")
                if replayer is not None:
                    replayer.close()  # rolls back what was not committed: it is read again
                    replayer = None
                if isinstance(e, TopicUnavailable):
                    if topics is not None:
                        topics.close()
                    topics = None  # a fresh client: the old one may still wait on the dead connection
                else:
                    _close(conn)
                    conn = None
                with stop.interruptible():
                    time.sleep(delay)
    except Shutdown:
        pass
    finally:
        if replayer is not None:
            replayer.close()
        _close(conn)
        if topics is not None:
            topics.close()
    if telemetry.health.state.ok:
        telemetry.health.stopped("shutting down")
    if replayer is None:
        err.info("stopped before applying anything" if topics is None else "stopped before reaching the follower")
        return
    line = "stopped: applied {transactions} transactions ({rows} rows), skipped {skipped} repeated"
    extra: dict[str, object] = {}
    if replayer.skipped_accounts:
        line += ", {accounts_skipped} account statements skipped"
        extra = {"accounts_skipped": replayer.skipped_accounts}
    err.info(line + "; next offset {offset}", transactions=replayer.applied_transactions, rows=replayer.applied_rows,
             skipped=replayer.skipped_transactions, offset=replayer.saved.next_offset if replayer.saved else 0,
             **extra)


def _wait_for_topic(profile: ConsumerProfile, layout: Layout, skip_bad_records: bool, stop: StopSignal,
                    policy: RowPolicy) -> _Topics:
    """Open the stream and the topic, waiting while either does not exist yet (the producer creates
    them): a status line every WAITING_EVERY seconds. Raises Shutdown when stopped meanwhile."""
    said = 0.0
    while True:
        try:
            return _Topics.open(profile, layout, skip_bad_records, policy)
        except TopicNotFound as e:
            now = time.monotonic()
            if now - said >= WAITING_EVERY:
                err.info("waiting for topic '{topic}': {reason}", topic=layout.log_topic, reason=str(e))
                said = now
        with stop.interruptible():
            time.sleep(READ_WAIT)
        if stop.requested:
            raise Shutdown()


@dataclass
class _Topics:
    """The stream, the log the consumer follows (through the layout), and the dead-letter topic it may write."""

    stream: Stream
    reader: LogReader
    dead_letter: Topic | None

    @classmethod
    def open(cls, profile: ConsumerProfile, layout: Layout, skip_bad_records: bool, policy: RowPolicy) -> _Topics:
        stream = open_stream(profile.stream, create=False)
        try:
            dead = _dead_letter_topic(stream, layout.log_topic) if skip_bad_records else None
            # Rows that take the BINLOG path are never decoded (the Replayer loads them for the SQL path); where
            # no row can take it, decoding them with the record costs a fifth less than decoding them later,
            # and inserts sent in bulk decode as typed rows (cdc_stream.typed_rows).
            typed = BULK_MIN_ROWS if policy.follower.bulk and not policy.binlog_possible else 0
            return cls(stream, layout.reader(stream, lazy_rows=policy.binlog_possible, typed_inserts=typed), dead)
        except BaseException:
            stream.close()
            raise

    @classmethod
    def reopen(cls, profile: ConsumerProfile, layout: Layout, skip_bad_records: bool, policy: RowPolicy) -> _Topics:
        """open() after the stream went away: still away (refused, no answer) means keep trying."""
        try:
            return cls.open(profile, layout, skip_bad_records, policy)
        except (TopicNotFound, TopicUnavailable):
            raise
        except TopicError as e:
            raise TopicUnavailable(str(e)) from e

    def park(self, log_topic: str, offset: int, value: bytes) -> str:
        """Copy a bad record to the dead-letter topic; returns that topic's name."""
        assert self.dead_letter is not None
        self.dead_letter.append([(f"{log_topic}@{offset}".encode(), value)])
        return self.dead_letter.name

    def close(self) -> None:
        """Close everything; never raises (the connection may be gone)."""
        for closing in (self.dead_letter, self.reader, self.stream):
            try:
                if closing is not None:
                    closing.close()
            except Exception:  # a dead connection: nothing left to release
                pass


def _start_replay(conn: pymysql.Connection, profile: ConsumerProfile, name: str, stream: Stream,
                  options: ReplayOptions, telemetry: ConsumerTelemetry) -> Replayer:
    checkpoint.ensure_schema(conn)
    saved = checkpoint.load(conn, name)
    if saved and stream.identity and saved.stream_id and saved.stream_id != stream.identity:
        raise ConfigError(
            f"the follower's checkpoint for topic '{name}' belongs to another stream (the topic was recreated?); "
            f"to replay the new topic from its start, first reset the follower, then "
            f"DELETE FROM {checkpoint.SCHEMA}.{checkpoint.TABLE} WHERE topic='{name}'"
        )
    workers = profile.replay.workers
    if workers == 1:
        return Replayer(MySqlFollower(conn), name, stream.identity, TableFilter.from_profile(profile.filters), saved,
                        options, err.print, tally=telemetry.tally)
    # Parallel apply: `conn` is the first worker; the others get the same session setup (connect_follower).
    conns = [conn]
    try:
        while len(conns) < workers + 1:  # (the last one reads table keys: ParallelFollower.lookup)
            conns.append(connect_follower(profile.database))
        follower = ParallelFollower(conns[:-1], conns[-1], lambda line: err.warning("{line}", line=line))
    except BaseException:
        for extra in conns[1:]:
            _close(extra)
        raise
    return Replayer(follower, name, stream.identity, TableFilter.from_profile(profile.filters), saved,
                    options, err.print, tally=telemetry.tally, conflicts=KeyCollector(follower.table_keys))


def _follow(topics: _Topics, replayer: Replayer, offset: int, stop: StopSignal, telemetry: ConsumerTelemetry) -> None:
    """Read and apply until stopped (between transactions)."""
    reader = topics.reader
    batch = FIRST_READ
    while not stop.requested:
        records = reader.read(offset, wait=0, max_records=batch) if replayer.pending else []
        if not records:
            # Nothing more at hand: commit what is whole before waiting. The follower commits while the
            # reader waits: transactions arriving one by one need not wait for each other's round trip.
            replayer.idle(wait=False)
            with stop.interruptible():
                records = reader.read(offset, wait=READ_WAIT, max_records=batch)
            if not records:
                replayer.idle()  # nothing came meanwhile: the follower has it all (or says what failed)
                if not replayer.pending and not replayer.in_transaction:
                    telemetry.caught_up(offset)
        batch = min(2 * batch, READ_BATCH)
        if records:  # called before the first statement that may last is sent: its fsync may find the producer's done
            replayer.durable = partial(reader.durable, records[-1].offset + 1)
        if records and telemetry.end_offset_due():
            telemetry.read_end_offset(reader.end_offset())
        ts = None
        for rec in records:
            try:
                for ev in rec.events():
                    replayer.apply(rec.offset, ev)
                    ts = ev.ts
            except MalformedEvent as e:
                if topics.dead_letter is None:
                    replayer.salvage()
                    raise DataError(
                        f"record at offset {rec.offset} of topic '{reader.log.name}' is not a valid change event: {e}; "
                        "nothing of it was applied and the checkpoint stays before it "
                        "(--skip-bad-records moves such records to a dead-letter topic)"
                    ) from None
                parked = topics.park(reader.log.name, rec.offset, rec.value)
                telemetry.dead_letters += 1
                err.warning("skipped bad record at offset {offset} ({reason}); copied to '{topic}'",
                            offset=rec.offset, reason=e, topic=parked)
                replayer.skip_record(rec.offset)
            offset = rec.offset + 1
            if stop.requested and not replayer.in_transaction:
                replayer.finish()
                return
        telemetry.applied(ts)


def _dead_letter_topic(stream: Stream, name: str) -> Topic:
    dead = f"{name}-dead-letter"
    stream.create(dead)
    return stream.topic(dead)


def _close(conn: pymysql.Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # already broken: nothing left to release
            pass
