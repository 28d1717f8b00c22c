"""cdc-consumer's one function: replay the topic onto the follower, one source transaction at a time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pymysql

from cdc_consumer import checkpoint
from cdc_consumer.apply import quote_ident, row_statements
from cdc_consumer.checkpoint import Checkpoint, already_applied, source_position
from cdc_stream.console import err
from cdc_stream.errors import ConfigError, DataError, UnreachableError
from cdc_stream.events import ChangeEvent, MalformedEvent, decode_event
from cdc_stream.filters import TableFilter, ddl_targets
from cdc_stream.mysql import connect
from cdc_stream.profile import ConsumerProfile, log_topic
from cdc_stream.routing import decode_txn, is_per_table
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import Stream, Topic, open_stream
from cdc_stream.values import BadValue

READ_BATCH = 500
READ_WAIT = 0.5
# The follower session: values arrive in UTC and exactly as on the leader, whatever
# the follower's defaults; strict mode turns a mismatched schema into an error
# instead of silently truncated data; NO_AUTO_VALUE_ON_ZERO keeps an id of 0 as 0;
# ALLOW_INVALID_DATES accepts the dates a leader in that mode stored ('2021-02-30');
# the mode leaves out NO_ZERO_DATE/NO_ZERO_IN_DATE (zero dates replicate) and
# NO_BACKSLASH_ESCAPES/ANSI_QUOTES/PAD_CHAR_TO_FULL_LENGTH/EMPTY_STRING_IS_NULL,
# whatever the follower's global mode says. apply.RELAXED_SQL_MODE is this mode
# without STRICT_ALL_TABLES.
SESSION_SQL = [
    "SET time_zone = '+00:00'",
    "SET NAMES utf8mb4",
    "SET sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES'",
]


MAX_BACKOFF = 10.0
# Follower errors a reconnect can cure: server gone, restarted, connection killed.
_LOST_CONNECTION = {2003, 2006, 2013, 2055, 1053, 1927, 4031}


class LostFollower(UnreachableError):
    """The follower connection dropped; the open transaction (if any) was rolled back by the server."""


def check(profile: ConsumerProfile) -> list[str]:
    """Preflight of the follower: reachable, checkpoint schema usable, topic present."""
    conn = _connect(profile)
    problems = []
    try:
        checkpoint.ensure_schema(conn)
        checkpoint.load(conn, log_topic(profile.stream))
    except pymysql.err.MySQLError as e:
        problems.append(
            f"cannot use the checkpoint table {checkpoint.SCHEMA}.{checkpoint.TABLE}: {e.args[-1]}; "
            f"GRANT ALL ON `{checkpoint.SCHEMA}`.* TO the consumer's user"
        )
    finally:
        conn.close()
    with open_stream(profile.stream, create=False) as stream:
        if not stream.exists(log_topic(profile.stream)):
            problems.append(f"topic '{log_topic(profile.stream)}' does not exist in {stream.describe()}: start cdc-producer first")
    return problems


def _connect(profile: ConsumerProfile) -> pymysql.Connection:
    conn = connect(profile.database, "follower", autocommit=False)
    with conn.cursor() as cur:
        for sql in SESSION_SQL:
            cur.execute(sql)
    return conn


@dataclass
class Replayer:
    """Applies events in order; commits (with the checkpoint) on each transaction's last event."""

    conn: pymysql.Connection
    topic: str
    stream_id: str
    filters: TableFilter
    saved: Checkpoint | None
    dead_letter: Topic | None = None
    applied_transactions: int = 0
    applied_rows: int = 0
    skipped_transactions: int = 0
    skipped_records: int = 0
    _open_txn: str | None = field(default=None)
    _skipping: bool = False

    def apply(self, offset: int, ev: ChangeEvent) -> None:
        """Apply one event; commit when it ends its source transaction."""
        txn_id = ev.txn.id if ev.txn else f"offset {offset}"
        if ev.txn is None or ev.txn.index == 0:
            if self._open_txn is not None:
                # The previous transaction never got its last event (a producer crashed
                # mid-publish and republished it whole): drop its partial copy.
                self.conn.rollback()
            self._open_txn = txn_id
            self._skipping = already_applied(ev, self.saved.position if self.saved else None)
        elif self._open_txn != txn_id:
            if self._open_txn is None and already_applied(ev, self.saved.position if self.saved else None):
                # Fluvio's client retried a request whose answer was lost: the end of a
                # committed transaction came again. Skip it; the last event moves the checkpoint.
                self._open_txn, self._skipping = txn_id, True
                return self.apply(offset, ev)
            raise DataError(
                f"offset {offset} continues transaction {txn_id} whose start was not seen; "
                "the topic is out of order (was it written by cdc-producer?)"
            )
        if self._skipping:  # a copy of a transaction applied before: only move the checkpoint past it
            if ev.txn.last:
                self._commit(offset, ev, txn_id, position=self.saved.position)
                self.skipped_transactions += 1
            return
        try:
            if ev.operation == "Query":
                if self.filters.allows_query(ev.query or "", ev.database):
                    self._ddl(offset, ev)
            elif self.filters.allows_table(ev.schema, ev.table or ""):
                sql, params = row_statements(ev)
                with self.conn.cursor() as cur:
                    if ev.operation == "Add":
                        cur.executemany(sql, params)
                    else:
                        for p in params:
                            cur.execute(sql, p)
                self.applied_rows += len(params)
        except BadValue as e:
            self.conn.rollback()
            self._open_txn = None
            raise DataError(
                f"offset {offset} (transaction {txn_id}) holds a bad value: {e}; nothing of the transaction was applied"
            ) from None
        except pymysql.err.MySQLError as e:
            self.conn.rollback()
            self._open_txn = None
            raise _apply_error(e, offset, txn_id, ev) from None
        if ev.txn is None or ev.txn.last:
            self._commit(offset, ev, txn_id)

    def skip_bad_record(self, offset: int, value: bytes, reason: str) -> None:
        """--skip-bad-records: park the record on the dead-letter topic and move past it."""
        self.dead_letter.append([(f"{self.topic}@{offset}".encode(), value)])
        self.skipped_records += 1
        err.print(f"skipped bad record at offset {offset} ({reason}); copied to '{self.dead_letter.name}'", markup=False)
        if self._open_txn is None:  # outside a transaction: record the skip now
            with self.conn.cursor() as cur:
                checkpoint.save(cur, self._checkpoint(offset + 1))
            self.conn.commit()
            self.saved = self._checkpoint(offset + 1)

    def _checkpoint(self, next_offset: int) -> Checkpoint:
        prev = self.saved
        return Checkpoint(self.topic, self.stream_id, next_offset, prev.sequence if prev else None,
                          prev.txn_id if prev else None, prev.position if prev else None)

    @property
    def in_transaction(self) -> bool:
        """Whether a source transaction is open (stopping now would roll it back)."""
        return self._open_txn is not None

    def summary(self) -> str:
        """The closing status line."""
        return (
            f"stopped: applied {self.applied_transactions} transactions ({self.applied_rows} rows), "
            f"skipped {self.skipped_transactions} repeated; next offset {self.saved.next_offset if self.saved else 0}"
        )

    def rollback(self) -> None:
        """Abandon an open transaction (its records will be read again on restart)."""
        if self._open_txn is not None:
            self.conn.rollback()
            self._open_txn = None

    def _commit(self, offset: int, ev: ChangeEvent, txn_id: str, ddl_offset: int | None = None,
                position: str | None = None) -> None:
        cp = Checkpoint(self.topic, self.stream_id, offset + 1, ev.sequence, txn_id,
                        position or source_position(ev) or (self.saved.position if self.saved else None), ddl_offset)
        if ddl_offset is not None:
            cp.next_offset = self.saved.next_offset if self.saved else 0
        with self.conn.cursor() as cur:
            checkpoint.save(cur, cp)
        self.conn.commit()
        self.saved = cp
        if ddl_offset is None:
            self._open_txn = None
            self._skipping = False
            self.applied_transactions += 1

    def _ddl(self, offset: int, ev: ChangeEvent) -> None:
        # A checkpoint already saying "DDL at `offset` may have run" means we crashed
        # around it last time. Then record that mark (DDL commits on its own).
        maybe_ran = self.saved is not None and self.saved.ddl_offset == offset
        self._commit(offset, ev, ev.txn.id if ev.txn else f"offset {offset}", ddl_offset=offset)
        with self.conn.cursor() as cur:
            if ev.database:
                try:
                    self.conn.select_db(ev.database)
                except pymysql.err.OperationalError as e:
                    if e.args[0] != 1049 or any(t is not None for _, t in ddl_targets(ev.query, ev.database)):
                        raise
                    # CREATE DATABASE x logged with x as its default schema: run it elsewhere.
                    self.conn.select_db(checkpoint.SCHEMA)
            try:
                cur.execute(ev.query)
            except pymysql.err.MySQLError as e:
                if not (maybe_ran and e.args[0] in checkpoint.ALREADY_APPLIED_DDL_ERRORS):
                    raise


def _apply_error(e: pymysql.err.MySQLError, offset: int, txn_id: str, ev: ChangeEvent) -> Exception:
    code = e.args[0] if e.args else 0
    where = f"offset {offset}, transaction {txn_id}"
    if code == 1146 and ev.operation != "Query":
        return DataError(
            f"table {quote_ident(ev.schema or '')}.{quote_ident(ev.table or '')} does not exist on the follower ({where}); "
            "create it there or exclude it with [filters]; nothing of the transaction was applied"
        )
    if code in _LOST_CONNECTION or isinstance(e, pymysql.err.InterfaceError):
        return LostFollower(f"lost the follower connection at {where}: {e.args[-1] if e.args else e}")
    what = "DDL" if ev.operation == "Query" else f"{ev.operation} on {ev.schema}.{ev.table}"
    return DataError(f"{what} failed at {where}: {e.args[-1]} (MySQL error {code}); nothing of the transaction was applied")


def run(profile: ConsumerProfile, stop: StopSignal, skip_bad_records: bool = False) -> None:
    """Replay the topic onto the follower until stopped; reconnect when the follower goes away."""
    name = log_topic(profile.stream)
    where = f"{profile.database.ip_or_host}:{profile.database.port}"
    conn = _connect(profile)  # an unreachable follower at startup is an error, not a retry loop
    stream = open_stream(profile.stream, create=False)
    topic: Topic = stream.topic(name)
    dead_letter = _dead_letter_topic(stream, name) if skip_bad_records else None
    tables = TableTopics(stream) if is_per_table(profile.stream.topic) else None
    failures, replayer = 0, None
    try:
        while not stop.requested:
            try:
                if conn is None:
                    conn = _connect(profile)
                replayer = _start_replay(conn, profile, stream, dead_letter)
                offset = replayer.saved.next_offset if replayer.saved else 0
                verb = "applying" if failures == 0 else "reconnected: applying"
                err.print(f"{verb} topic '{name}' ({stream.describe()}) from offset {offset} to the follower at {where}",
                          markup=False)
                failures = 0
                _follow(topic, replayer, offset, stop, tables)
            except (LostFollower, pymysql.err.OperationalError, pymysql.err.InterfaceError, UnreachableError) as e:
                if isinstance(e, pymysql.err.OperationalError) and e.args and e.args[0] not in _LOST_CONNECTION:
                    raise
                failures += 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                err.print(f"lost the follower at {where} ({e}); reconnecting in {delay:g}s (attempt {failures})",
                          markup=False)
                _close(conn)
                conn = None
                with stop.interruptible():
                    time.sleep(delay)
    except Shutdown:
        pass
    finally:
        if replayer is not None and conn is not None:
            try:
                replayer.rollback()
            except pymysql.err.MySQLError:
                pass
        _close(conn)
        if tables is not None:
            tables.close()
        topic.close()
        stream.close()
    err.print(replayer.summary() if replayer else "stopped before reaching the follower", markup=False)


def _start_replay(conn, profile: ConsumerProfile, stream: Stream, dead_letter: Topic | None) -> "Replayer":
    name = log_topic(profile.stream)
    checkpoint.ensure_schema(conn)
    saved = checkpoint.load(conn, name)
    if saved and stream.identity and saved.stream_id and saved.stream_id != stream.identity:
        raise ConfigError(
            f"the follower's checkpoint for topic '{name}' belongs to another stream (the topic was recreated?); "
            f"to replay the new topic from its start, first reset the follower, then "
            f"DELETE FROM {checkpoint.SCHEMA}.{checkpoint.TABLE} WHERE topic='{name}'"
        )
    return Replayer(conn, name, stream.identity, TableFilter.from_profile(profile.filters), saved, dead_letter)


def _follow(topic: Topic, replayer: "Replayer", offset: int, stop: StopSignal, tables: TableTopics | None = None) -> None:
    """Read and apply until stopped (between transactions).

    With per-table topics, `topic` is the transaction topic and `tables` the stream
    holding the table topics: each transaction record names the events to apply.
    """
    while not stop.requested:
        with stop.interruptible():
            records = topic.read(offset, wait=READ_WAIT, max_records=READ_BATCH)
        for rec in records:
            try:
                if tables is None:
                    replayer.apply(rec.offset, decode_event(rec.value))
                else:
                    for ev in tables.events(rec):
                        replayer.apply(rec.offset, ev)
            except MalformedEvent as e:
                if replayer.dead_letter is None:
                    replayer.rollback()
                    raise DataError(
                        f"record at offset {rec.offset} of topic '{topic.name}' is not a valid change event: {e}; "
                        "nothing of it was applied and the checkpoint stays before it "
                        "(--skip-bad-records moves such records to a dead-letter topic)"
                    ) from None
                replayer.skip_bad_record(rec.offset, rec.value, str(e))
            offset = rec.offset + 1
            if stop.requested and not replayer.in_transaction:
                return


class TableTopics:
    """The per-table topics a transaction topic points into, opened once each."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self._open: dict[str, Topic] = {}

    def events(self, rec) -> list[ChangeEvent]:
        """The events a transaction record names, in source order."""
        try:
            record = decode_txn(rec.value)
        except ValueError as e:
            raise MalformedEvent(str(e)) from None
        events = []
        for name, (first, count) in record.topics.items():
            if name not in self._open:
                self._open[name] = self.stream.topic(name)
            got = []
            while len(got) < count:
                batch = self._open[name].read(first + len(got), wait=READ_WAIT, max_records=count - len(got))
                if not batch:
                    raise DataError(
                        f"topic '{name}' lacks offsets {first}..{first + count - 1} named by transaction {record.txn}"
                    )
                got += batch
            events += [decode_event(r.value) for r in got]
        return sorted(events, key=lambda e: e.sequence)

    def close(self) -> None:
        for topic in self._open.values():
            topic.close()


def _dead_letter_topic(stream: Stream, name: str) -> Topic:
    dead = f"{name}-dead-letter"
    stream.create(dead)
    return stream.topic(dead)


def _close(conn) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # already broken: nothing left to release
            pass
