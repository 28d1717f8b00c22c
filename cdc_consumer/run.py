"""cdc-consumer's one function: replay the topic onto the follower, one source transaction at a time."""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Iterator

import pymysql
from pymysql.constants import CLIENT

from cdc_consumer import checkpoint
from cdc_consumer.apply import event_sql, quote_ident
from cdc_consumer.batch import PACKET_TOO_LARGE, Origin, SqlBatch, StatementFailed, Writer
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
from cdc_stream.topics.base import TopicError, TopicNotFound, TopicUnavailable
from cdc_stream.values import BadValue

READ_BATCH = 500
# A group of source transactions is committed once it holds this many rows (or
# when the reader has nothing more at hand); SQL is sent once this much is queued.
GROUP_ROWS = 20_000
FLUSH_CHARS = 256 << 10
_SAVEPOINT = "cdc_txn"
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
    # Many statements per round trip (cdc_consumer.batch); every value in them is an escaped literal.
    conn = connect(profile.database, "follower", autocommit=False, client_flag=CLIENT.MULTI_STATEMENTS)
    with conn.cursor() as cur:
        for sql in SESSION_SQL:
            cur.execute(sql)
    return conn


@dataclass
class Replayer:
    """Applies events in order and commits, with the checkpoint, after whole source transactions.

    Several source transactions can share one follower commit (a *group*): the
    checkpoint written with it names the last of them, so a crash loses the whole
    group and replays it, never part of one. A group is committed when the reader
    has nothing more at hand, when it reaches GROUP_ROWS rows, and around DDL.
    Statements wait in `batch` until FLUSH_CHARS of SQL are pending or a commit.
    """

    conn: pymysql.Connection
    topic: str
    stream_id: str
    filters: TableFilter
    saved: Checkpoint | None  # the last committed checkpoint
    dead_letter: Topic | None = None
    applied_transactions: int = 0
    applied_rows: int = 0
    skipped_transactions: int = 0
    skipped_records: int = 0
    batch: SqlBatch = field(default_factory=SqlBatch)
    writer: Writer = field(init=False)
    _done: Checkpoint | None = None  # after the group's last whole transaction, not yet committed
    _group_rows: int = 0
    _done_rows: int = 0  # the group's rows in whole transactions
    _open_txn: str | None = None
    _open_first: int = 0  # the offset of the open transaction's first event
    _skipping: bool = False

    def __post_init__(self) -> None:
        self.writer = Writer(self.conn)

    @property
    def last(self) -> Checkpoint | None:
        """The checkpoint after the last whole transaction applied (committed or not)."""
        return self._done or self.saved

    def apply(self, offset: int, ev: ChangeEvent) -> None:
        """Apply one event; a transaction's last event completes it (the group commits later)."""
        txn_id = ev.txn.id if ev.txn else f"offset {offset}"
        origin = Origin(offset, txn_id, ev)
        position = self.last.position if self.last else None
        if ev.txn is None or ev.txn.index == 0:
            if self._open_txn is not None:
                # The previous transaction never got its last event (a producer crashed
                # mid-publish and republished it whole): drop its partial copy.
                self._discard_open_txn()
            self._open_txn, self._open_first = txn_id, offset
            self._skipping = already_applied(ev, position)
            if self._done is not None and not self._skipping:
                self.batch.statement(f"SAVEPOINT {_SAVEPOINT}", origin)  # to drop this one alone if partial
        elif self._open_txn != txn_id:
            if self._open_txn is None and already_applied(ev, position):
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
                self._complete(offset, ev, txn_id, position=position)
                self.skipped_transactions += 1
            return
        try:
            if ev.operation == "Query":
                if self.filters.allows_query(ev.query or "", ev.database):
                    self._ddl(offset, ev)
            elif self.filters.allows_table(ev.schema, ev.table or ""):
                self.batch.add(event_sql(ev), origin)
                self._group_rows += len(ev.rows)
                if self.batch.size >= FLUSH_CHARS:
                    self._send()
        except BadValue as e:
            self.salvage(unsent_is_open_txn=False)
            raise DataError(
                f"offset {offset} (transaction {txn_id}) holds a bad value: {e}; nothing of the transaction was applied"
            ) from None
        except pymysql.err.MySQLError as e:
            self._abandon()
            raise _apply_error(e, origin) from None
        if ev.txn is None or ev.txn.last:
            self._complete(offset, ev, txn_id)
            if ev.operation == "Query":
                self.commit()  # keep the window in which a DDL may run twice to this one event

    def skip_bad_record(self, offset: int, value: bytes, reason: str) -> None:
        """--skip-bad-records: park the record on the dead-letter topic and move past it."""
        self.dead_letter.append([(f"{self.topic}@{offset}".encode(), value)])
        self.skipped_records += 1
        err.print(f"skipped bad record at offset {offset} ({reason}); copied to '{self.dead_letter.name}'", markup=False)
        if self._open_txn is None:  # outside a transaction: record the skip now
            self._done = self._checkpoint(offset + 1)
            self.commit()

    def _checkpoint(self, next_offset: int) -> Checkpoint:
        prev = self.last
        return Checkpoint(self.topic, self.stream_id, next_offset, prev.sequence if prev else None,
                          prev.txn_id if prev else None, prev.position if prev else None)

    @property
    def in_transaction(self) -> bool:
        """Whether a source transaction is open (stopping now would roll it back)."""
        return self._open_txn is not None

    @property
    def pending(self) -> bool:
        """Whether anything applied or queued is not committed yet."""
        return self._done is not None or bool(self.batch)

    def summary(self) -> str:
        """The closing status line."""
        return (
            f"stopped: applied {self.applied_transactions} transactions ({self.applied_rows} rows), "
            f"skipped {self.skipped_transactions} repeated; next offset {self.saved.next_offset if self.saved else 0}"
        )

    def idle(self) -> int | None:
        """Nothing more to read for now: commit the whole transactions, send the open one's SQL.

        If whole transactions wait behind an open one (its producer is slow, or died
        mid-publish), the open one is rolled back to let them commit, and the offset
        to read it again from is returned."""
        if self._open_txn is None:
            self.finish()
            return None
        if self._done is not None and not self._skipping:
            first = self._open_first
            self.salvage(unsent_is_open_txn=False)
            return first
        if self.batch:
            self._send()
        return None

    def commit(self) -> None:
        """Commit the group of whole transactions applied so far, with its checkpoint."""
        if self._done is None:
            return
        cp = self._done
        origin = Origin(cp.next_offset - 1, cp.txn_id or "", None)
        self.batch.statement(checkpoint.save_sql(self.conn, cp), origin)
        self.batch.statement("COMMIT", origin)
        self._send()
        self.saved, self._done = cp, None
        self.applied_rows += self._group_rows
        self._group_rows = self._done_rows = 0

    def finish(self) -> None:
        """Commit the whole transactions and wait until the follower has them."""
        self.commit()
        self._settle()

    def close(self) -> None:
        """Stop the writer thread and roll back whatever is not committed; never raises."""
        self._abandon()
        self.writer.close()

    def rollback(self) -> None:
        """Abandon everything not committed (its records will be read again on restart)."""
        self._forget()
        self._settle()
        self.conn.rollback()

    def _forget(self) -> None:
        self.batch.clear()
        self._open_txn, self._done = None, None
        self._group_rows = self._done_rows = 0

    def _abandon(self) -> None:
        """rollback() after a failure: the connection may be gone (then the server rolled back)."""
        self._forget()
        try:
            self.writer.wait()
        except Exception:  # the failure being handled, or one after it: the rollback covers both
            pass
        try:
            self.conn.rollback()
        except pymysql.err.MySQLError:
            pass

    def salvage(self, unsent_is_open_txn: bool) -> None:
        """After a failure inside the open transaction: drop it, commit the whole ones before it.

        `unsent_is_open_txn`: the SQL not sent yet belongs to the open transaction
        (a statement of it failed). Never raises: if the follower cannot take the
        commit, everything is rolled back and replayed on restart."""
        try:
            if self._open_txn is not None:
                if unsent_is_open_txn:
                    self.batch.clear()
                self._discard_open_txn()
            self.finish()
        except Exception:  # the follower is in no state to commit: keep nothing
            self._abandon()

    def _send(self) -> None:
        try:
            self.writer.submit(*self.batch.take())
        except StatementFailed as e:
            self._failed(e)

    def _settle(self) -> None:
        """Send what is queued and wait for the writer: afterwards the connection is ours."""
        self._send()
        try:
            self.writer.wait()
        except StatementFailed as e:
            self._failed(e)

    def _failed(self, e: StatementFailed) -> None:
        if e.origin.event is not None and e.origin.txn_id == self._open_txn:
            self.salvage(unsent_is_open_txn=True)
        else:
            self._abandon()
        raise _apply_error(e.error, e.origin) from None

    def _discard_open_txn(self) -> None:
        if self._skipping:  # nothing of it was applied
            self._open_txn = None
            return
        if self._done is None:  # the partial transaction is all the follower transaction holds
            self.rollback()
            return
        # It started with SAVEPOINT (apply): keep the group's whole transactions.
        self.batch.statement(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}", Origin(self._open_first, self._open_txn, None))
        self._open_txn = None
        self._group_rows = self._done_rows

    def _complete(self, offset: int, ev: ChangeEvent, txn_id: str, position: str | None = None) -> None:
        self._done = Checkpoint(self.topic, self.stream_id, offset + 1, ev.sequence, txn_id,
                                position or source_position(ev) or (self.last.position if self.last else None))
        self._open_txn, self._skipping = None, False
        self._done_rows = self._group_rows
        self.applied_transactions += 1
        if self._group_rows >= GROUP_ROWS:
            self.commit()

    def _ddl(self, offset: int, ev: ChangeEvent) -> None:
        # DDL commits implicitly: commit the group first, then record "DDL at `offset`
        # may have run" in a commit of its own. A checkpoint already holding that mark
        # means we crashed around this DDL last time.
        self.commit()
        self._settle()
        maybe_ran = self.saved is not None and self.saved.ddl_offset == offset
        mark = Checkpoint(self.topic, self.stream_id, self.saved.next_offset if self.saved else 0,
                          ev.sequence, ev.txn.id if ev.txn else f"offset {offset}",
                          self.saved.position if self.saved else None, offset)
        with self.conn.cursor() as cur:
            checkpoint.save(cur, mark)
        self.conn.commit()
        self.saved = mark
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


def _apply_error(e: pymysql.err.MySQLError, origin: Origin) -> Exception:
    code = e.args[0] if e.args else 0
    where, ev = origin.where(), origin.event
    if ev is None:  # the checkpoint or COMMIT
        if code in _LOST_CONNECTION or isinstance(e, pymysql.err.InterfaceError):
            return LostFollower(f"lost the follower connection at {where}: {e.args[-1] if e.args else e}")
        return DataError(f"commit failed at {where}: {e.args[-1]} (MySQL error {code}); nothing of it was applied")
    if code == 1146 and ev.operation != "Query":
        return DataError(
            f"table {quote_ident(ev.schema or '')}.{quote_ident(ev.table or '')} does not exist on the follower ({where}); "
            "create it there or exclude it with [filters]; nothing of the transaction was applied"
        )
    if code in _LOST_CONNECTION or isinstance(e, pymysql.err.InterfaceError):
        return LostFollower(f"lost the follower connection at {where}: {e.args[-1] if e.args else e}")
    what = "DDL" if ev.operation == "Query" else f"{ev.operation} on {ev.schema}.{ev.table}"
    fix = ""
    if code == PACKET_TOO_LARGE:
        fix = "; raise max_allowed_packet on the follower (SET GLOBAL and its my.cnf) and restart"
    return DataError(f"{what} failed at {where}: {e.args[-1]} (MySQL error {code}){fix}; "
                     "nothing of the transaction was applied")


def run(profile: ConsumerProfile, stop: StopSignal, skip_bad_records: bool = False) -> None:
    """Replay the topic onto the follower until stopped; reconnect when the follower or Fluvio goes away."""
    name = log_topic(profile.stream)
    where = f"{profile.database.ip_or_host}:{profile.database.port}"
    conn = _connect(profile)  # an unreachable follower at startup is an error, not a retry loop
    topics: _Topics | None = _Topics.open(profile, name, skip_bad_records)  # so is an unreachable stream
    failures, replayer = 0, None
    try:
        while not stop.requested:
            try:
                if conn is None:
                    conn = _connect(profile)
                if topics is None:
                    try:
                        topics = _Topics.open(profile, name, skip_bad_records)
                    except TopicNotFound:
                        raise
                    except TopicError as e:  # still away (refused, no answer): keep trying
                        raise TopicUnavailable(str(e)) from e
                stream = topics.stream
                replayer = _start_replay(conn, profile, stream, topics.dead_letter)
                offset = replayer.saved.next_offset if replayer.saved else 0
                verb = "applying" if failures == 0 else "reconnected: applying"
                err.print(f"{verb} topic '{name}' ({stream.describe()}) from offset {offset} to the follower at {where}",
                          markup=False)
                failures = 0
                _follow(topics.topic, replayer, offset, stop, topics.tables)
            except (LostFollower, pymysql.err.OperationalError, pymysql.err.InterfaceError, UnreachableError,
                    TopicUnavailable) as e:
                if isinstance(e, pymysql.err.OperationalError) and e.args and e.args[0] not in _LOST_CONNECTION:
                    raise
                failures += 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                lost = f"the stream ({e})" if isinstance(e, TopicUnavailable) else f"the follower at {where} ({e})"
                err.print(f"lost {lost}; reconnecting in {delay:g}s (attempt {failures})", markup=False)
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
    err.print(replayer.summary() if replayer else "stopped before reaching the follower", markup=False)


@dataclass
class _Topics:
    """The stream and the topics the consumer reads (and the dead-letter topic it may write)."""

    stream: Stream
    topic: Topic
    dead_letter: Topic | None
    tables: "TableTopics | None"

    @classmethod
    def open(cls, profile: ConsumerProfile, name: str, skip_bad_records: bool) -> "_Topics":
        stream = open_stream(profile.stream, create=False)
        try:
            return cls(stream, stream.topic(name), _dead_letter_topic(stream, name) if skip_bad_records else None,
                       TableTopics(stream) if is_per_table(profile.stream.topic) else None)
        except BaseException:
            stream.close()
            raise

    def close(self) -> None:
        """Close everything; never raises (the connection may be gone)."""
        for closing in (self.tables, self.topic, self.stream):
            try:
                if closing is not None:
                    closing.close()
            except Exception:  # a dead connection: nothing left to release
                pass


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
        records = topic.read(offset, wait=0, max_records=READ_BATCH) if replayer.pending else []
        if not records:
            rewind = replayer.idle()  # nothing more at hand: commit what is whole before waiting
            if rewind is not None:
                offset = rewind
                continue
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
                    replayer.salvage(unsent_is_open_txn=False)
                    raise DataError(
                        f"record at offset {rec.offset} of topic '{topic.name}' is not a valid change event: {e}; "
                        "nothing of it was applied and the checkpoint stays before it "
                        "(--skip-bad-records moves such records to a dead-letter topic)"
                    ) from None
                replayer.skip_bad_record(rec.offset, rec.value, str(e))
            offset = rec.offset + 1
            if stop.requested and not replayer.in_transaction:
                replayer.finish()
                return


class TableTopics:
    """The per-table topics a transaction topic points into, opened once each."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self._open: dict[str, Topic] = {}

    def events(self, rec) -> Iterator[ChangeEvent]:
        """The events a transaction record names, in source order.

        Each table topic holds its share of the transaction in sequence order, so a
        merge of the topics read READ_BATCH records at a time keeps memory bounded
        whatever the transaction's size."""
        try:
            record = decode_txn(rec.value)
        except ValueError as e:
            raise MalformedEvent(str(e)) from None
        readers = [self._read(name, first, count, record.txn) for name, (first, count) in record.topics.items()]
        return heapq.merge(*readers, key=lambda e: e.sequence)

    def _read(self, name: str, first: int, count: int, txn: str) -> Iterator[ChangeEvent]:
        if name not in self._open:
            self._open[name] = self.stream.topic(name)
        done = 0
        while done < count:
            batch = self._open[name].read(first + done, wait=READ_WAIT, max_records=min(READ_BATCH, count - done))
            if not batch:
                raise DataError(f"topic '{name}' lacks offsets {first}..{first + count - 1} named by transaction {txn}")
            done += len(batch)
            for r in batch:
                yield decode_event(r.value)

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
