"""Replaying change events on the follower: one source transaction at a time, checkpoint included.

The `Replayer` is the consumer's state machine. It turns row events into BINLOG statements
(binlog_replay.py: the follower's own row applier, as a native replica) or SQL (apply.py), merges
SQL into few statements (batch.py), runs DDL under the leader's session (session.py), and commits
after whole source transactions only, with the checkpoint in the same follower transaction
(checkpoint.py). It talks to the follower through the small `Follower` interface (follower.py), so
it is tested without a server.

Grouping: several whole source transactions share one follower commit. A transaction joins the
open group only once its last event has been read (its events wait in `_buffer`), so the group
never holds part of one and needs no savepoint (which Aria and MyISAM refuse). A transaction too
large to wait for (READ_AHEAD_EVENTS events or GROUP_ROWS rows), one with DDL, and one touching a
non-transactional follower table (catalog.py: MyISAM, Aria...) are applied alone: the group is
committed first, the transaction's own commit follows its last event.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from cdc_consumer import checkpoint, definitions, statements, versioning
from cdc_consumer.apply import Piece, Single, event_sql
from cdc_consumer.batch import Origin, SqlBatch, StatementFailed
from cdc_consumer.binlog_replay import (
    LeaderFormat,
    RowPolicy,
    ending_statement,
    rows_statement,
    split_format,
)
from cdc_consumer.catalog import TableInfo
from cdc_consumer.checkpoint import Checkpoint
from cdc_consumer.follower import SESSION_SQL, Follower
from cdc_consumer.literals import literal
from cdc_consumer.session import Collation, ansi_quotes, client_charset, collation_ids, leader_session
from cdc_consumer.telemetry import Tally
from cdc_consumer.writer import MISSING_ROW, PACKET_TOO_LARGE
from cdc_stream.classify import AccountStatement, statement_of
from cdc_stream.consumer_offsets import already_applied, position_after
from cdc_stream.errors import DataError, LostConnection, is_retriable, mysql_code, mysql_message
from cdc_stream.events import REMOVED_PASSWORD, ChangeEvent, MalformedEvent
from cdc_stream.filters import CrossesFilters, TableFilter
from cdc_stream.mysql import quote_ident
from cdc_stream.positions import Position
from cdc_stream.values import BadValue

# A group of source transactions is committed once it holds this many rows (or
# when the reader has nothing more at hand); SQL is sent once this much is queued.
GROUP_ROWS = 20_000
FLUSH_CHARS = 256 << 10
# A transaction waits to be whole before it joins a group for up to this many events (the
# consumer's read batch); a longer one is applied alone, as it arrives.
READ_AHEAD_EVENTS = 500
CANNOT_USER = 1396  # ER_CANNOT_USER: CREATE USER of an existing account, DROP USER of a missing one
UNKNOWN_TIME_ZONE = 1298  # ER_UNKNOWN_TIME_ZONE: a named zone without the server's time zone tables
ACCESS_DENIED = 1227  # ER_SPECIFIC_ACCESS_DENIED_ERROR: a DEFINER naming another account without SET USER
NEED_SUPER = 1419  # ER_BINLOG_CREATE_ROUTINE_NEED_SUPER: a trigger or routine, binary log on, no SUPER
_SHOWN_KEYS = 5

@dataclass
class ReplayOptions:
    """How rows and account statements are applied ([replay] of the profile, against the follower)."""

    rows: RowPolicy  # which path each row event takes, from the follower probed (run.replay_options)
    accounts: str = "skip"  # "skip" | "apply"
    guard_triggers: bool = False  # CREATE TRIGGER gets definitions.guard_trigger's guard
    definer: str = "leader"  # "consumer": views, triggers, events and routines get DEFINER=CURRENT_USER


def _quiet(_: str) -> None:
    pass


@dataclass
class Replayer:
    """Applies events in order and commits, with the checkpoint, after whole source transactions.

    Several source transactions can share one follower commit (a *group*): the
    checkpoint written with it names the last of them, so a crash loses the whole
    group and replays it, never part of one. A group is committed when the reader
    has nothing more at hand, when it reaches GROUP_ROWS rows, and around
    transactions applied alone. Statements wait in `batch` until FLUSH_CHARS of
    SQL are pending or a commit.
    """

    follower: Follower
    topic: str
    stream_id: str
    filters: TableFilter
    saved: Checkpoint | None  # the last committed checkpoint
    options: ReplayOptions
    say: Callable[[str], None] = _quiet  # status lines (skipped account statements...)
    applied_transactions: int = 0
    applied_rows: int = 0
    skipped_transactions: int = 0
    skipped_records: int = 0
    skipped_accounts: int = 0
    batch: SqlBatch = field(default_factory=SqlBatch)
    tally: Tally = field(default_factory=Tally)  # what was committed, for the metrics (outlives a Replayer)
    _done: Checkpoint | None = None  # after the group's last whole transaction, not yet committed
    _group_rows: int = 0
    _open_txn: str | None = None
    _open_first: int = 0  # the offset of the open transaction's first event
    _skipping: bool = False
    _buffer: list[tuple[int, ChangeEvent]] = field(default_factory=list)  # the open transaction, not applied yet
    _buffer_rows: int = 0
    _alone_txn: str | None = None  # the transaction applied alone (the group was committed before it), until committed
    _nontransactional: list[str] = field(default_factory=list)  # such tables the open one wrote
    _tables: dict[tuple[str, str], TableInfo] = field(default_factory=dict)  # forgotten at every DDL
    _leader_format: LeaderFormat | None = None  # the open transaction's FORMAT_DESCRIPTION
    _session_format: LeaderFormat | None = None  # the one this follower session was given
    _current: tuple[int, ChangeEvent] | None = None  # the event being applied (for errors)
    _history: versioning.History = field(default_factory=versioning.History)  # of the transaction being applied
    _versioning: str | None = None  # why the follower cannot write the leader's history ('' if it can; None: not asked)

    @property
    def _alone(self) -> bool:
        return self._alone_txn is not None

    @property
    def last(self) -> Checkpoint | None:
        """The checkpoint after the last whole transaction applied (committed or not)."""
        return self._done or self.saved

    def apply(self, offset: int, ev: ChangeEvent) -> None:
        """Take one event; a transaction's last event completes it (its group commits later)."""
        txn_id = ev.txn.id if ev.txn else f"offset {offset}"
        position = self.last.position if self.last else None
        if ev.txn is None or ev.txn.index == 0:
            if self._open_txn is not None:
                # The previous transaction never got its last event (a producer crashed
                # mid-publish and republished it whole): drop its partial copy.
                try:
                    self._discard_open_txn()
                except DataError:
                    self._abandon()
                    raise
            self._open_txn, self._open_first = txn_id, offset
            self._skipping = already_applied(ev, position)
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
        last = ev.txn is None or ev.txn.last
        if self._skipping:  # a copy of a transaction applied before: only move the checkpoint past it
            if last:
                self._complete(offset, ev, txn_id, position=position)
                self.skipped_transactions += 1
            return
        if not self._alone:
            self._buffer.append((offset, ev))
            self._buffer_rows += len(ev.rows)
            if last:
                self._apply_whole()
            elif len(self._buffer) >= READ_AHEAD_EVENTS or self._buffer_rows >= GROUP_ROWS:
                self._start_alone()
            return
        self._guarded(self._apply_events, [(offset, ev)])
        if last:
            self._complete(offset, ev, txn_id)
            self._end_alone()

    # -- whole transactions and transactions applied alone

    def _apply_whole(self) -> None:
        """The open transaction's last event arrived: apply it in the group, or alone."""
        events = self._buffer
        alone = self._guarded(self._needs_alone, events)
        if alone:
            self.commit()
            self._alone_txn = self._open_txn
        self._buffer, self._buffer_rows = [], 0
        self._guarded(self._apply_events, events)
        offset, ev = events[-1]
        self._complete(offset, ev, self._open_txn or f"offset {offset}")
        if alone:
            self._end_alone()

    def _end_alone(self) -> None:
        """The transaction applied alone is complete: its own commit. After non-transactional
        writes, wait for it: a failure must still be reported as that transaction's."""
        self.commit()
        if self._nontransactional:
            self._settle()
        self._nontransactional, self._alone_txn = [], None

    def _start_alone(self) -> None:
        """A transaction too large to wait for: commit the group, apply what arrived of it."""
        events = self._buffer
        self.commit()
        self._alone_txn = self._open_txn
        self._buffer, self._buffer_rows = [], 0
        self._guarded(self._apply_events, events)

    def _needs_alone(self, events: list[tuple[int, ChangeEvent]]) -> bool:
        """DDL commits by itself; a non-transactional table cannot be rolled back with a group."""
        found = False
        for _, ev in events:
            if ev.operation == "Query":
                found = True
            elif self._writes(ev) and not self._table(ev).transactional:
                found = True
                self._note_nontransactional(ev)
        return found

    def _note_nontransactional(self, ev: ChangeEvent) -> None:
        name = f"{ev.schema}.{ev.table} ({self._table(ev).engine})"
        if name not in self._nontransactional:
            self._nontransactional.append(name)

    def _guarded(self, step: Callable[[list[tuple[int, ChangeEvent]]], bool | None],
                 events: list[tuple[int, ChangeEvent]]) -> bool:
        """Run one step of the open transaction; a failure leaves the follower consistent, then raises."""
        self._current = events[0]
        try:
            return bool(step(events))
        except _EventProblem as e:
            tail = self._nothing_applied()
            self._session_format = None  # its BINLOG statement may not be queued
            self.salvage()
            fix = f"; fix: {e.fix}" if e.fix else ""
            raise DataError(f"offset {e.offset} (transaction {self._txn_of(e.event, e.offset)}) {e.detail}; "
                            f"{tail}{fix}") from None
        except DataError:
            self._abandon()
            raise
        except pymysql.err.MySQLError as e:
            tail = self._nothing_applied()
            self._abandon()
            offset, ev = self._current
            raise _apply_error(e, Origin(offset, self._txn_of(ev, offset), ev), tail) from None

    @staticmethod
    def _txn_of(ev: ChangeEvent, offset: int) -> str:
        return ev.txn.id if ev.txn else f"offset {offset}"

    def _nothing_applied(self) -> str:
        if self._alone and self._nontransactional:
            return (f"its changes to non-transactional tables ({', '.join(self._nontransactional)}) may have been "
                    "applied (they cannot be rolled back; a native replica has the same limit), the rest was not")
        return "nothing of the transaction was applied"

    # -- events

    def _apply_events(self, events: list[tuple[int, ChangeEvent]]) -> None:
        """Turn row events into statements (all before any is queued: a bad value leaves nothing
        half-queued) and run DDL in its place."""
        ready: list[tuple[Origin, list[Piece], int]] = []
        for offset, ev in events:
            self._current = (offset, ev)
            if ev.txn is None or ev.txn.index == 0:
                self._history.clear()  # history rows are paired within one source transaction
            if ev.operation == "Query":
                self._queue(ready)
                ready = []
                self._query(offset, ev)
                continue
            try:
                pieces = self._row_pieces(offset, ev)
            except BadValue as e:
                raise _EventProblem(offset, ev, f"holds a bad value: {e}") from None
            if pieces:
                ready.append((Origin(offset, self._txn_of(ev, offset), ev), pieces, len(ev.rows)))
        self._queue(ready)

    def _queue(self, ready: list[tuple[Origin, list[Piece], int]]) -> None:
        for origin, pieces, rows in ready:
            self.batch.add(pieces, origin)
            self._group_rows += rows
            if origin.event is not None:
                self.tally.rows(origin.event.operation, rows)
            if self.batch.size >= FLUSH_CHARS:
                self._send()

    def _writes(self, ev: ChangeEvent) -> bool:
        return self.filters.allows_table(ev.schema, ev.table or "")

    def _table(self, ev: ChangeEvent) -> TableInfo:
        key = (ev.schema or "", ev.table or "")
        info = self._tables.get(key)
        if info is None:
            self._settle()  # the follower session must be idle to answer
            info = self._tables[key] = self.follower.describe(*key)
        return info

    def _row_pieces(self, offset: int, ev: ChangeEvent) -> list[Piece]:
        events = None
        try:
            if ev.binlog is not None:
                leader, events = split_format(ev.binlog)
                if leader is not None:
                    self._leader_format = leader
            if not self._writes(ev):
                return []
            policy = self.options.rows
            path, why = policy.path(events is not None, self._leader_format, snapshot=ev.snapshot is not None)
        except DataError as e:
            raise _EventProblem(offset, ev, f"cannot be applied: {e}") from None
        if self._alone and not self._table(ev).transactional:
            self._note_nontransactional(ev)
        if path != "binlog":
            try:
                ev.load_rows()  # (left as JSON by the reader while the event might take the BINLOG path)
            except MalformedEvent as e:
                raise _EventProblem(offset, ev, f"is not a valid change event: {e}") from None
        if path == "binlog" and events is not None and self._leader_format is not None:
            try:  # a BINLOG statement never leaves the leader's statement open: binlog_replay.py
                rows = rows_statement(ending_statement(events, self._leader_format))
            except DataError as e:
                raise _EventProblem(offset, ev, f"cannot be applied: {e}") from None
            pieces: list[Piece] = []
            if self._session_format != self._leader_format:
                pieces.append(self._leader_format.statement())
                self._session_format = self._leader_format
            pieces.append(rows)
            return pieces
        table = self._table(ev)
        refusal = _sql_refusal(table)
        if not refusal and table.versioned:
            try:
                self._versioning_possible()
                return versioning.event_sql(ev, table, self._history)
            except versioning.Refused as e:
                refusal = str(e)
        if refusal:
            raise _EventProblem(offset, ev, f"cannot be applied: {ev.operation} on {ev.schema}.{ev.table}: the "
                                f"follower's table {refusal}; its rows go through SQL because {why}",
                                _refusal_fix(table, policy.sql_fix(why)))
        return event_sql(ev, table)

    def _versioning_possible(self) -> None:
        """Whether the follower session may write the leader's history (asked once); raises versioning.Refused."""
        if self._versioning is None:
            if not self.options.rows.follower.mariadb:
                self._versioning = "the follower is MySQL"
            else:
                self._settle()
                try:
                    self.follower.execute(versioning.PROBE_SQL)
                    self._versioning = ""
                except pymysql.err.MySQLError as e:
                    if is_retriable(e):
                        raise
                    self._versioning = f"the follower refuses it: {mysql_message(e)} (MySQL error {mysql_code(e)})"
        if self._versioning:
            raise versioning.Refused(f"is system-versioned: SQL would stamp its history with the follower's clock "
                                     f"instead of the leader's row_start/row_end ({versioning.WHAT_IT_NEEDS}; "
                                     f"{self._versioning})")

    def _query(self, offset: int, ev: ChangeEvent) -> None:
        try:
            if not self.filters.allows_statement(statement_of(ev)):
                return
        except CrossesFilters as e:
            raise _EventProblem(offset, ev, f"cannot be applied: {e.detail}", e.fix) from None
        self._tables.clear()  # the DDL may change any table the cache describes
        text = ev.query or ""
        account = statement_of(ev).account
        if account is not None and self.options.accounts == "skip":
            self.skipped_accounts += 1
            self.say(f"skipped account statement at offset {offset}: {account.describe()} "
                     '([replay] accounts = "skip")')
            return
        if account is not None and REMOVED_PASSWORD.decode("ascii") in text:
            raise _EventProblem(
                offset, ev, f"cannot be applied: {account.describe()} had its password removed by cdc-producer (its "
                "authentication plugin stores what only the leader can compute from the clear text)",
                'create the account on the follower yourself, and restart with [replay] accounts = "skip" to move '
                "past the statement")
        self._ddl(offset, ev, account)

    def skip_record(self, offset: int) -> None:
        """Move past a record that is not a valid event (--skip-bad-records parked it elsewhere)."""
        self.skipped_records += 1
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
        """Whether anything read, applied or queued is not committed yet (the reader then reads on
        without waiting: a transaction still being read must not stall on a commit)."""
        return self._done is not None or bool(self.batch) or self._open_txn is not None

    def idle(self, wait: bool = True) -> None:
        """Nothing more to read for now: commit the whole transactions, send the open one's SQL.

        A transaction still waiting to be whole (its producer is slow, or died mid-publish)
        keeps waiting in memory; the whole ones before it commit. wait=False: without waiting
        for the follower, which commits while the reader waits for more (the next call that
        sends or waits raises a failure; the commits stay in order, each with its checkpoint)."""
        if self._open_txn is not None and self._alone:
            self._send()  # the group was committed when it began
            return
        if wait:
            self.finish()
        else:
            self.commit()

    def commit(self) -> None:
        """Commit the group of whole transactions applied so far, with its checkpoint."""
        if self._done is None:
            return
        cp = self._done
        origin = Origin(cp.next_offset - 1, cp.txn_id or "", None)
        self.batch.statement(checkpoint.save_sql(cp), origin)
        self.batch.statement("COMMIT", origin)
        self._send()
        self.saved, self._done = cp, None
        self.applied_rows += self._group_rows
        self.tally.committed(cp.next_offset)
        self._group_rows = 0

    def finish(self) -> None:
        """Commit the whole transactions and wait until the follower has them."""
        self.commit()
        self._settle()

    def close(self) -> None:
        """Roll back whatever is not committed and stop the follower's writer; never raises."""
        self._abandon()
        self.follower.close()

    def rollback(self) -> None:
        """Abandon everything not committed (its records will be read again on restart)."""
        self._forget()
        self._settle()
        self.follower.rollback()

    def _forget(self) -> None:
        self.batch.clear()
        self.tally.forget()
        self._open_txn, self._done = None, None
        self._group_rows = 0
        self._buffer, self._buffer_rows = [], 0
        self._nontransactional, self._alone_txn = [], None
        self._session_format = None  # its BINLOG statement may never have been sent: send it again

    def _abandon(self) -> None:
        """rollback() after a failure: the connection may be gone (then the server rolled back)."""
        self._forget()
        try:
            self.follower.wait()
        except Exception:  # the failure being handled, or one after it: the rollback covers both
            pass
        try:
            self.follower.rollback()
        except pymysql.err.MySQLError:
            pass

    def salvage(self) -> None:
        """After a failure inside the open transaction: drop it, commit the whole ones before it.

        A transaction joining a group is queued only once whole and converted, so nothing of it is in
        the follower transaction yet; one applied alone has the follower transaction to itself and is
        rolled back. Never raises: if the follower cannot take the commit, everything is rolled back
        and replayed on restart."""
        try:
            if self._open_txn is not None:
                if self._alone:  # the follower transaction holds it alone: roll it back
                    self._abandon()
                    return
                self._buffer, self._buffer_rows = [], 0
                self._open_txn, self._skipping = None, False
            self.finish()
        except Exception:  # the follower is in no state to commit: keep nothing
            self._abandon()

    def _send(self) -> None:
        try:
            self.follower.submit(*self.batch.take())
        except StatementFailed as e:
            self._failed(e)

    def _settle(self) -> None:
        """Send what is queued and wait for the follower: afterwards its session is ours."""
        self._send()
        try:
            self.follower.wait()
        except StatementFailed as e:
            self._failed(e)

    def _failed(self, e: StatementFailed) -> None:
        # Whatever failed, the follower transaction holds nothing worth keeping alone: a
        # group's transactions are queued whole, and one applied alone has the transaction
        # to itself. Roll back; the restart replays from the stored checkpoint.
        tail = "nothing of the transaction was applied"
        if self._alone and e.origin.txn_id == self._alone_txn:
            tail = self._nothing_applied()
        self._abandon()
        raise _apply_error(e.error, e.origin, tail) from None

    def _discard_open_txn(self) -> None:
        if self._skipping or not self._alone:  # nothing of it was applied
            self._open_txn, self._skipping = None, False
            self._buffer, self._buffer_rows = [], 0
            return
        if self._nontransactional:
            raise DataError(
                f"transaction {self._open_txn} (from offset {self._open_first}) was published again from its start "
                f"(its producer restarted mid-publish) after part of it was applied to non-transactional tables "
                f"({', '.join(self._nontransactional)}), which cannot be rolled back: applying it again would "
                "duplicate those changes; compare those tables with the leader, then restart the consumer")
        self.rollback()  # the follower transaction holds its partial copy alone

    def _complete(self, offset: int, ev: ChangeEvent, txn_id: str, position: Position | None = None) -> None:
        self.tally.transaction_done(repeated=self._skipping)
        self._done = Checkpoint(self.topic, self.stream_id, offset + 1, ev.sequence, txn_id,
                                position or position_after(ev) or (self.last.position if self.last else None))
        self._open_txn, self._skipping = None, False
        self.applied_transactions += 1
        if self._group_rows >= GROUP_ROWS:
            self.commit()

    # -- DDL and other statements

    def _ddl(self, offset: int, ev: ChangeEvent, account: AccountStatement | None) -> None:
        # DDL commits implicitly: commit the group first, then record "DDL at `offset`
        # may have run" in a commit of its own. A checkpoint already holding that mark
        # means we crashed around this DDL last time.
        self.commit()
        self._settle()
        maybe_ran = self.saved is not None and self.saved.ddl_offset == offset
        mark = Checkpoint(self.topic, self.stream_id, self.saved.next_offset if self.saved else 0,
                          ev.sequence, ev.txn.id if ev.txn else f"offset {offset}",
                          self.saved.position if self.saved else None, offset)
        self.follower.execute(checkpoint.save_sql(mark))
        self.follower.execute("COMMIT")
        self.saved = mark
        if ev.database:
            try:
                self.follower.use(ev.database)
            except pymysql.err.OperationalError as e:
                if mysql_code(e) != 1049 or not statement_of(ev).qualified_only:
                    raise
                # The default schema is not on the follower but the statement does not use it: CREATE DATABASE x
                # logged with x as its default, or `USE x; CREATE TABLE y.t ...` with x excluded. Run it elsewhere.
                self.follower.use(checkpoint.SCHEMA)
        collations = self._collations(offset, ev)
        raw = self._statement_bytes(ev, collations)
        text = raw.decode("latin1")  # one character per byte: what is rewritten keeps the other bytes
        expected = ev.error_code or 0
        event_ddl = statement_of(ev).event_definition  # CREATE/ALTER EVENT
        if event_ddl and (disabled := statements.disabled_on_slave(text, ansi_quotes(ev.session))) is not None:
            raw = disabled.encode("latin1")  # a native replica's copy of an event is SLAVESIDE_DISABLED
        raw = self._stored_object(raw, ansi_quotes(ev.session))
        mariadb = self.options.rows.follower.mariadb
        change = leader_session(ev.session, mariadb, statement_of(ev).drop_table and not expected, SESSION_SQL,
                                collations)
        try:
            for sql in change.enter:
                self._enter(offset, ev, sql)
            # Unmarked: a DML statement the leader logged as such (its rows are not in the binlog, e.g. on a
            # table versioned by transaction id) fires the follower's triggers, as on a native replica.
            self.follower.execute(definitions.SESSION_UNMARK)
            self._run_statement(offset, ev, raw, expected, maybe_ran, account)
        except BaseException:
            for sql in change.leave:  # best effort: the consumer stops, or reconnects with a fresh session
                try:
                    self.follower.execute(sql)
                except Exception:  # the connection is gone: nothing to restore
                    break
            raise
        for sql in change.leave:
            self.follower.execute(sql)

    def _collations(self, offset: int, ev: ChangeEvent) -> dict[int, Collation]:
        """The follower's collations of the ids the statement's session logged: one it lacks stops here."""
        found = {}
        for name, collation_id in collation_ids(ev.session).items():
            collation = self.follower.collation(collation_id)
            if collation is None:
                raise _EventProblem(
                    offset, ev, f"cannot be applied: the follower knows no collation {collation_id} (the leader "
                    f"session's {name}; a native replica stops here too)",
                    "use a follower server that has that collation (MySQL 8's ids from 255 up, utf8mb4_0900_ai_ci "
                    "and the other _0900_ collations, are unknown to MariaDB), or send the statement with another")
            found[collation_id] = collation
        return found

    def _enter(self, offset: int, ev: ChangeEvent, sql: str) -> None:
        """Run a SET of the leader's session; a named time zone the follower lacks is a clear stop."""
        try:
            self.follower.execute(sql)
        except pymysql.err.MySQLError as e:
            zone = ev.session.time_zone if ev.session is not None else None
            if mysql_code(e) != UNKNOWN_TIME_ZONE or zone is None:
                raise
            raise _EventProblem(
                offset, ev, f"cannot be applied: the follower has no time zone {zone!r}, which the leader's session "
                f"used ({mysql_message(e)}, MySQL error {UNKNOWN_TIME_ZONE}; a native replica stops here too)",
                "load the follower's time zone tables (mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb -u root "
                "mysql) and restart cdc-consumer") from None

    def _stored_object(self, raw: bytes, ansi: bool) -> bytes:
        """A trigger's guard and the consumer's definer ([replay] triggers, definer), when asked for."""
        if not self.options.guard_triggers and self.options.definer != "consumer":
            return raw
        text = raw.decode("latin1")
        if self.options.definer == "consumer":
            text = definitions.with_definer(text, ansi_quotes=ansi)
        if self.options.guard_triggers:
            text = definitions.guard_trigger(text, ansi) or text
        return text.encode("latin1")

    def _run_statement(self, offset: int, ev: ChangeEvent, raw: bytes, expected: int, maybe_ran: bool,
                       account: AccountStatement | None) -> None:
        """Run the leader's statement. An error the leader had too is success."""
        try:
            self.follower.execute(raw)
        except pymysql.err.MySQLError as e:
            code = mysql_code(e)
            if expected and code == expected:
                return  # it did what it did on the leader
            if maybe_ran and code in checkpoint.ALREADY_APPLIED_DDL_ERRORS:
                return
            if account is not None and code == CANNOT_USER:
                self.say(f"account statement at offset {offset}: {account.describe()} failed on the follower "
                         f"({mysql_message(e)}, MySQL error {code}): the follower already has, or lacks, the "
                         "account; going on")
                return
            if account is not None:  # a server message may quote the statement: never its secrets
                raise type(e)(code, statements.redact(mysql_message(e))) from None
            if code in (ACCESS_DENIED, NEED_SUPER):
                problem = _privilege_problem(raw.decode("latin1"), code, ansi_quotes(ev.session), self.options)
                if problem is not None:
                    raise _EventProblem(offset, ev, f"DDL failed on the follower: {mysql_message(e)} (MySQL error "
                                        f"{code})", problem) from None
            raise
        if expected:
            raise DataError(
                f"DDL at offset {offset}, transaction {self._txn_of(ev, offset)} succeeded on the follower, but the "
                f"leader's ended with error {expected} (it executed in part there): the follower now differs from "
                "the leader (a native replica stops here too); compare the objects it names")

    def _statement_bytes(self, ev: ChangeEvent, collations: dict[int, Collation]) -> bytes:
        """The statement exactly as the leader received it: `query_b64`, or the text in its client charset
        (in utf8mb4 for a charset no server reads statements in: session.client_charset)."""
        offset = self._current[0] if self._current else 0
        client = ev.session.character_set_client if ev.session is not None else None
        collation = collations[client] if client is not None else None
        readable = collation is None or client_charset(collation) == collation.charset
        if ev.query_b64 is not None:
            if collation is not None and not readable:
                raise _EventProblem(offset, ev, "cannot be applied: its exact bytes are in the leader's "
                                    f"character_set_client {collation.charset}, which no server reads statements in")
            try:
                return base64.b64decode(ev.query_b64, validate=True)
            except binascii.Error:
                raise _EventProblem(offset, ev, "cannot be applied: its 'query_b64' field is not base64") from None
        text = ev.query or ""
        if text.isascii():
            return text.encode("ascii")
        if client is None or not readable:
            return text.encode("utf-8", "surrogateescape")  # the consumer's session is utf8mb4
        try:
            return self.follower.encode(text, client)
        except DataError as e:
            raise _EventProblem(offset, ev, f"cannot be applied: {e}") from None


class _EventProblem(Exception):
    """An event that cannot be applied as it is (a bad value, a refusal): the Replayer's DataError says
    `offset N (transaction T) <detail>; <what was applied>[; fix: <fix>]`."""

    def __init__(self, offset: int, event: ChangeEvent, detail: str, fix: str = ""):
        super().__init__(detail)
        self.offset, self.event, self.detail, self.fix = offset, event, detail, fix


def _privilege_problem(text: str, code: int, ansi: bool, options: ReplayOptions) -> str | None:
    """The fix for a stored object's DDL the follower user may not run (None: not such a statement)."""
    obj = definitions.stored_object(text, ansi)
    if obj is None:
        return None
    if code == NEED_SUPER:
        return ("the follower has binary logging on and its user lacks SUPER: SET GLOBAL "
                "log_bin_trust_function_creators = ON on the follower (and in its my.cnf or parameter group), then "
                "restart the consumer")
    if obj.definer is not None and options.definer == "leader":
        return (f"its {obj.definer_text(text)} names another account, which needs SET USER (or SUPER) on the "
                'follower: set [replay] definer = "consumer" to create it with the consumer\'s user as definer, or '
                "GRANT SET USER ON *.* TO the consumer's user; then restart the consumer")
    return None


def _refusal_fix(table: TableInfo, binlog_fix: str) -> str:
    """How to get a refused SQL-path event applied: guard the triggers, or replay it by BINLOG."""
    if table.triggers:
        names = ", ".join(table.triggers)
        return f"{definitions.guard_fix(names)}; or {binlog_fix}"
    return binlog_fix


def _sql_refusal(table: TableInfo) -> str:
    """Why rows of this follower table cannot be applied as SQL exactly ('' if they can)."""
    if table.triggers:
        return (f"has triggers ({', '.join(table.triggers)}) without cdc-consumer's guard, which SQL would fire "
                "again on replicated rows (the leader's row events already hold what its triggers did; a native "
                "replica does not fire them)")
    return ""


def _event_keys(ev: ChangeEvent) -> list[str]:
    """The keys of a row event's rows (before-images), as literals, for messages."""
    try:
        ev.load_rows()
    except MalformedEvent:
        return []
    columns, pk = ev.columns or [], ev.pk or []
    idx = [columns.index(k) for k in pk] if pk else list(range(len(columns)))
    out = []
    for row in ev.rows[:_SHOWN_KEYS + 1]:
        image = row[0] if ev.operation == "Update" else row
        try:
            lits = [literal(image[i]) for i in idx]
        except BadValue:
            continue
        text = lits[0] if len(lits) == 1 else "(" + ",".join(lits) + ")"
        out.append(text if len(text) <= 200 else text[:200] + "...")
    return out


def _missing_row(origin: Origin, tail: str) -> DataError:
    ev = origin.event
    assert ev is not None
    keys = origin.keys if origin.keys else _event_keys(ev)
    if len(keys) == 1:
        which = f"key {keys[0]}"
    else:
        shown = ", ".join(keys[:_SHOWN_KEYS]) + (", ..." if len(keys) > _SHOWN_KEYS else "")
        which = f"one of the keys {shown}"
    return DataError(
        f"{ev.operation} on {ev.schema}.{ev.table} at {origin.where()} found no row for {which} on the follower "
        f"as the leader had it: the follower has drifted from the leader (a native replica stops here too, "
        f"error 1032); {tail}")


def _merged_failure(origin: Origin, e: pymysql.err.MySQLError) -> Origin:
    """A BINLOG statement of several row events failed, and the server does not say at which event: the
    statement's range of offsets, and the events it can be (of the table its message names; for a
    missing row, the updates and deletes), their keys."""
    assert origin.events
    named = re.search(r"in '([^']*)'", mysql_message(e))
    events = [ev for ev in origin.events if named is None or ev.table == named.group(1)] or origin.events
    if mysql_code(e) == MISSING_ROW:
        events = [ev for ev in events if ev.operation in ("Update", "Delete")] or events
    keys = [key for ev in events for key in _event_keys(ev)]
    return Origin(origin.offset, origin.txn_id, events[0], origin.last_offset, keys=keys)


def _apply_error(e: pymysql.err.MySQLError, origin: Origin, tail: str = "nothing of the transaction was applied"
                 ) -> Exception:
    """The one-line error of a statement the follower refused (or of the connection it lost)."""
    code = mysql_code(e)
    if origin.events is not None and len(origin.events) > 1:
        origin = _merged_failure(origin, e)
    where, ev = origin.where(), origin.event
    if is_retriable(e):
        return LostConnection(f"lost the follower connection at {where}: {mysql_message(e)}")
    if ev is None:  # the checkpoint or COMMIT
        return DataError(f"commit failed at {where}: {mysql_message(e)} (MySQL error {code}); "
                         "nothing of it was applied")
    if code == 1146 and ev.operation != "Query":
        return DataError(
            f"table {quote_ident(ev.schema or '')}.{quote_ident(ev.table or '')} does not exist on the follower "
            f"({where}); create it there or exclude it with [filters]; {tail}"
        )
    if code == MISSING_ROW and ev.operation in ("Update", "Delete"):
        return _missing_row(origin, tail)
    what = "DDL" if ev.operation == "Query" else f"{ev.operation} on {ev.schema}.{ev.table}"
    fix = ""
    if code == PACKET_TOO_LARGE:
        fix = "; raise max_allowed_packet on the follower (SET GLOBAL and its my.cnf) and restart"
    if ev.operation == "Query" and ev.error_code:
        fix += f"; the leader's statement ended with error {ev.error_code} (the errors differ)"
    return DataError(f"{what} failed at {where}: {mysql_message(e)} (MySQL error {code}){fix}; {tail}")


__all__ = ["FLUSH_CHARS", "GROUP_ROWS", "READ_AHEAD_EVENTS", "ReplayOptions", "Replayer", "Single"]
