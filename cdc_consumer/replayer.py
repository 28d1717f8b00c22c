"""Replaying change events on the follower: one source transaction at a time, checkpoint included.

The `Replayer` is the consumer's state machine. It turns row events into BINLOG statements
(binlog_replay.py: the follower's own row applier, as a native replica) or SQL (apply.py), merges
SQL into few statements (batch.py), runs DDL under the leader's session (ddl.py, with session.py), and
commits after whole source transactions only, with the checkpoint in the same follower transaction
(checkpoint.py). A failed statement becomes one error line naming its cause and fix (failures.py). It
talks to the follower through the small `Follower` interface (follower.py), so it is tested without a
server.

Grouping: several whole source transactions share one follower commit. A transaction joins the
open group only once its last event has been read (its events wait in `_buffer`), so the group
never holds part of one and needs no savepoint (which Aria and MyISAM refuse). A transaction too
large to wait for (READ_AHEAD_EVENTS events or GROUP_ROWS rows), one with DDL, and one touching a
non-transactional follower table (catalog.py: MyISAM, Aria...) are applied alone: the group is
committed first, the transaction's own commit follows its last event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import msgspec
import pymysql

from cdc_consumer import checkpoint, versioning
from cdc_consumer.apply import Piece, Single, event_sql
from cdc_consumer.batch import MAX_BINLOG, Origin, SqlBatch, StatementFailed
from cdc_consumer.binlog_replay import (
    BinlogRows,
    LeaderFormat,
    RowPolicy,
    ending_statement,
    rows_statement,
    split_format,
)
from cdc_consumer.catalog import TableInfo
from cdc_consumer.checkpoint import Checkpoint
from cdc_consumer.ddl import DdlExecution
from cdc_consumer.failures import EventProblem, apply_error, refusal_fix, sql_refusal
from cdc_consumer.follower import Follower
from cdc_consumer.schedule import KeyCollector
from cdc_consumer.telemetry import Tally
from cdc_stream.consumer_offsets import already_applied, position_after
from cdc_stream.errors import DataError, is_retriable, mysql_code, mysql_message
from cdc_stream.events import ChangeEvent, MalformedEvent
from cdc_stream.filters import TableFilter
from cdc_stream.positions import Position
from cdc_stream.values import BadValue

if TYPE_CHECKING:
    from cdc_consumer.parallel import ParallelFollower

# A group of source transactions is committed once it holds this many rows (or
# when the reader has nothing more at hand); SQL is sent once this much is queued.
GROUP_ROWS = 20_000
# With [replay] workers > 1 groups are cut smaller: a group runs once whole (parallel.py), so the
# next one is read while it runs, and small groups meet fewer others' keys (bench/README.md).
PARALLEL_GROUP_ROWS = 2_000
FLUSH_CHARS = 256 << 10
# A transaction waits to be whole before it joins a group for up to this many events (the
# consumer's read batch); a longer one is applied alone, as it arrives.
READ_AHEAD_EVENTS = 500


@dataclass
class ReplayOptions:
    """How rows and account statements are applied ([replay] of the profile, against the follower)."""

    rows: RowPolicy  # which path each row event takes, from the follower probed (run.replay_options)
    accounts: str = "skip"  # "skip" | "apply"
    guard_triggers: bool = False  # CREATE TRIGGER gets definitions.guard_trigger's guard
    definer: str = "leader"  # "consumer": views, triggers, events and routines get DEFINER=CURRENT_USER


def _durable() -> None:
    """Replayer.durable before the first read."""


def _quiet(_: str) -> None:
    pass


@dataclass
class Replayer(DdlExecution):
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
    # [replay] workers > 1: each group's keys, for parallel.ParallelFollower (the follower then is one)
    conflicts: KeyCollector | None = None
    # Waits until the records read so far survive a crash of the machine (Topic.durable); the reader sets it
    # after each read. Nothing derived from a record that may last on the follower (a COMMIT, DDL, rows of a
    # table that ignores rollbacks) is sent before it returned; rows of the open transaction may be (writer.py).
    durable: Callable[[], None] = _durable
    _done: Checkpoint | None = None  # after the group's last whole transaction, not yet committed
    _group_rows: int = 0
    _open_txn: str | None = None
    _open_first: int = 0  # the offset of the open transaction's first event
    _skipping: bool = False
    _buffer: list[tuple[int, ChangeEvent]] = field(default_factory=list)  # the open transaction, not applied yet
    _buffer_rows: int = 0
    _alone_txn: str | None = None  # the transaction applied alone (the group was committed before it), until committed
    _nontransactional: list[str] = field(default_factory=list)  # such tables the open one wrote
    _tables: dict[tuple[str, str], TableInfo] = field(default_factory=dict)  # forgotten by the DDL of their database
    _leader_format: LeaderFormat | None = None  # the open transaction's FORMAT_DESCRIPTION
    _session_format: LeaderFormat | None = None  # the one this follower session was given
    _current: tuple[int, ChangeEvent] | None = None  # the event being applied (for errors)
    _history: versioning.History = field(default_factory=versioning.History)  # of the transaction being applied
    _versioning: str | None = None  # why the follower cannot write the leader's history ('' if it can; None: not asked)

    def __post_init__(self) -> None:
        if self.options.rows.follower.annotates:
            self.batch.max_binlog = MAX_BINLOG

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
        except EventProblem as e:
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
            raise apply_error(e, Origin(offset, self._txn_of(ev, offset), ev), tail) from None

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
                if self.conflicts is not None:
                    self.conflicts.barrier()
                    self.conflicts.forget()  # the DDL may change any table's keys
                self._query(offset, ev)
                continue
            try:
                pieces = self._row_pieces(offset, ev)
            except BadValue as e:
                raise EventProblem(offset, ev, f"holds a bad value: {e}") from None
            if pieces and self.conflicts is not None:
                self._note_keys(offset, ev)
            if pieces:
                ready.append((Origin(offset, self._txn_of(ev, offset), ev, overlap=self._overlaps(ev, pieces)),
                              pieces, len(ev.rows)))
        self._queue(ready)

    def _overlaps(self, ev: ChangeEvent, pieces: list[Piece]) -> bool:
        """Whether the event's row statements may run while earlier statements' answers travel (writer.PIPELINE):
        a failure before them must leave nothing of them once the transaction rolls back, so not for a table
        that ignores rollbacks, nor where the follower's own triggers fire for them (they may write one).
        BINLOG rows fire them where the follower runs triggers for replicated rows. SQL rows reach no table
        with triggers that would fire (sql_refusal: a guarded trigger does nothing in the consumer's session);
        a system-versioned table's SQL follows the session timestamp set for it: not pipelined either."""
        table = self._table(ev)
        if not table.transactional:
            return False
        if any(isinstance(p, BinlogRows) for p in pieces):
            return not self.options.rows.follower.row_triggers
        return not table.versioned

    def _queue(self, ready: list[tuple[Origin, list[Piece], int]]) -> None:
        for origin, pieces, rows in ready:
            self.batch.add(pieces, origin)
            self._group_rows += rows
            if origin.event is not None:
                self.tally.rows(origin.event.operation, rows)
            if self.batch.size >= FLUSH_CHARS:
                self._send()

    def _note_keys(self, offset: int, ev: ChangeEvent) -> None:
        """The event's rows join its group's keys (parallel apply: schedule.py)."""
        assert self.conflicts is not None
        try:  # (a table not described yet is, on a follower session of its own: nothing waits for the workers)
            self.conflicts.add(ev)
        except msgspec.DecodeError as e:
            raise EventProblem(offset, ev, f"is not a valid change event: rows: {e}") from None

    def _writes(self, ev: ChangeEvent) -> bool:
        return self.filters.allows_table(ev.schema, ev.table or "")

    def _table(self, ev: ChangeEvent) -> TableInfo:
        key = (ev.schema or "", ev.table or "")
        info = self._tables.get(key)
        if info is None:
            if self.conflicts is None:  # (parallel.ParallelFollower describes on a session of its own)
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
            raise EventProblem(offset, ev, f"cannot be applied: {e}") from None
        if self._alone and not self._table(ev).transactional:
            self._note_nontransactional(ev)
        if path != "binlog" and ev.rows_json:
            try:
                ev.load_rows()  # (left as JSON by the reader while the event might take the BINLOG path)
            except MalformedEvent as e:
                raise EventProblem(offset, ev, f"is not a valid change event: {e}") from None
        if path == "binlog" and events is not None and self._leader_format is not None:
            try:  # a BINLOG statement never leaves the leader's statement open: binlog_replay.py
                rows = rows_statement(ending_statement(events, self._leader_format))
            except DataError as e:
                raise EventProblem(offset, ev, f"cannot be applied: {e}") from None
            pieces: list[Piece] = []
            if self._session_format != self._leader_format:
                pieces.append(self._leader_format.statement())
                self._session_format = self._leader_format
            pieces.append(rows)
            return pieces
        table = self._table(ev)
        refusal = sql_refusal(table)
        if not refusal and table.versioned:
            try:
                self._versioning_possible()
                ev.load_rows()  # (an insert's typed rows: apply.event_sql alone sends them as they are)
                return versioning.event_sql(ev, table, self._history)
            except versioning.Refused as e:
                refusal = str(e)
        if refusal:
            raise EventProblem(offset, ev, f"cannot be applied: {ev.operation} on {ev.schema}.{ev.table}: the "
                               f"follower's table {refusal}; its rows go through SQL because {why}",
                               refusal_fix(table, policy.sql_fix(why)))
        return event_sql(ev, table, policy.follower.bulk)

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
        if self.conflicts is not None:
            self._send_group(checkpoint.save_sql(cp), origin)
        else:
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
        if self.conflicts is not None:
            self.conflicts.take()

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
        statements, origins = self.batch.take()
        try:  # (the follower's writer waits for durable() before any statement that may last: writer.py)
            self.follower.submit(statements, origins, self.durable)
        except StatementFailed as e:
            self._failed(e)

    def _send_group(self, save: str, origin: Origin) -> None:
        """Parallel apply: the group, whole, to the workers; its checkpoint and COMMIT run at its turn."""
        assert self.conflicts is not None
        if self._alone:
            self.conflicts.barrier()  # (a transaction applied alone: DDL, non-transactional tables)
        follower = cast("ParallelFollower", self.follower)
        self.durable()
        try:
            follower.submit_group(*self.batch.take(), [save, "COMMIT"], [origin, origin], self.conflicts.take())
        except StatementFailed as e:
            self._failed(e)
        # The next group may run on another session: its BINLOG rows start with the leader's format again.
        self._session_format = None

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
        raise apply_error(e.error, e.origin, tail) from None

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
        if self._group_rows >= (GROUP_ROWS if self.conflicts is None else PARALLEL_GROUP_ROWS):
            self.commit()


__all__ = ["FLUSH_CHARS", "GROUP_ROWS", "PARALLEL_GROUP_ROWS", "READ_AHEAD_EVENTS", "ReplayOptions", "Replayer",
           "Single"]
