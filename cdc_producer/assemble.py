"""Binlog events -> the change events of whole source transactions, and the position after each.

The `Assembler` is the producer's `BinlogHandler` (cdc_producer/binlog.py dispatches to it):
a pure state machine that knows where a transaction begins (BEGIN, or MariaDB's GTID event)
and ends (XID, COMMIT, or a DDL outside a transaction), which events the filters and the
snapshot windows keep, and the leader's position after each commit. It hands what it keeps
to a `TransactionSink` (cdc_producer/publish.py): whole transactions, or a large one in
chunks of about `chunk_bytes` of binlog rows, so it is never held whole.

Beside the rows and statements it keeps what a native replica would apply them with: each row
batch's checks (`RowChecks`, from the rows event's flags) and the leader's own binlog events
(`binlog`: the table map and rows event, after the format description on a transaction's first
such event), and each statement's session (with the INSERT_ID, RAND() seeds and user variables logged
before it: context.py), error code and exact bytes. It also resolves what
the binlog logs but a transaction's rows must not show: rows a `ROLLBACK TO SAVEPOINT` undid
(savepoints.py), a transaction that ends in `ROLLBACK`, and XA transactions, held from their
XA PREPARE until their XA COMMIT (published then, as that commit's transaction) or XA ROLLBACK
(xa.py). After a restart it may read again transactions the topic already has (to find the XA
PREPARE groups it held): those up to `replay_until` are not published again.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from cdc_producer.binlog import BinlogQuery, LeaderInfo, RowChange, XaGtid
from cdc_producer.context import StatementContext, unreadable, with_context
from cdc_producer.old_temporals import PRECISIONS
from cdc_producer.savepoints import Savepoint, Savepoints, SkipRanges
from cdc_producer.windows import SnapshotWindows, rows_up_to
from cdc_producer.xa import HeldGroup, PreparedGroups, readable
from cdc_stream import classify
from cdc_stream.classify import Statement, XaStatement
from cdc_stream.errors import CrossesFilters, DataError
from cdc_stream.events import ChangeEvent, RowChecks, make_uri
from cdc_stream.filters import TableFilter
from cdc_stream.positions import BinlogFile, Position

if TYPE_CHECKING:
    from cdc_producer.chunks import LiveCopy
    from cdc_producer.signals import Signals

# A transaction's events go to the sink once they hold this many bytes of binlog row
# images (decoded, ~20-30 times that in Python objects).
CHUNK_BYTES = 1 << 20

# Rows-event flags (sql/log_event.h) -> the checks the leader's session had off.
_NO_FOREIGN_KEY_CHECKS, _RELAXED_UNIQUE_CHECKS, _NO_CHECK_CONSTRAINT_CHECKS = 0x02, 0x04, 0x80
_CHECK_FLAGS = _NO_FOREIGN_KEY_CHECKS | _RELAXED_UNIQUE_CHECKS | _NO_CHECK_CONSTRAINT_CHECKS


def row_checks(flags: int) -> RowChecks | None:
    """The checks a rows event's flags say were off (None when all were on)."""
    if not flags & _CHECK_FLAGS:
        return None
    return _CHECKS[flags & _CHECK_FLAGS]


_CHECKS = {f: RowChecks(foreign_keys=not f & _NO_FOREIGN_KEY_CHECKS, unique=not f & _RELAXED_UNIQUE_CHECKS,
                        check_constraints=not f & _NO_CHECK_CONSTRAINT_CHECKS) for f in range(_CHECK_FLAGS + 1)}


class TransactionSink(Protocol):
    """Where the assembler hands what it keeps."""

    def add(self, events: list[ChangeEvent], txn_id: str, complete: bool) -> None:
        """Events of one source transaction, in order: all that is left of it (`complete`:
        its last event carries the position after it), or a chunk that more will follow."""

    def skipped(self) -> None:
        """A transaction ended with nothing to publish now (the filters dropped it all, it rolled
        back, or it is an XA PREPARE whose events are held)."""

    def abandon(self) -> None:
        """The open transaction will not complete here: it will be read again from its start."""

    def idle(self) -> None:
        """The leader has nothing more for now."""


class RereadTransaction(Exception):
    """The open transaction must be read again from its start (Assembler.position): a ROLLBACK TO
    SAVEPOINT undid rows already handed on in a chunk. The chunks were abandoned; the second read
    skips the rows rolled back."""


@dataclass(slots=True)
class _Pending:
    """An event of the open transaction not handed on yet, with its leader binlog events (the
    table map and rows event, base64-encoded only when handed on, after the format description
    if it is the transaction's first) and the size the chunking counts."""

    event: ChangeEvent
    binlog: bytes | None
    size: int


def _unreadable_context(query: BinlogQuery, why: list[str], binlog_file: str | None, gtid: str | None
                        ) -> DataError:
    """The error for a statement logged with context events cdc-producer cannot read (context.Unreadable)."""
    where = f"{binlog_file}:{query.start}" + (f" (GTID {gtid})" if gtid else "")
    shown = query.sql if len(query.sql) <= 100 else query.sql[:100] + "..."
    return DataError(
        f"the statement at {where} ({shown!r}) was logged with {' and '.join(why)}: cdc-consumer could not "
        "run it as the leader did, so it is not published. Make the leader's sessions log in ROW format "
        "(SET GLOBAL binlog_format='ROW'; clients that set their own), then snapshot the tables it names "
        "(cdc-producer PROFILE --snapshot db.table ...): the stream then goes on past it")


class Assembler:
    """Follows the binlog (BinlogHandler) and assembles source transactions for a TransactionSink."""

    def __init__(self, sink: TransactionSink, resource: str, filters: TableFilter, info: LeaderInfo,
                 position: Position, windows: SnapshotWindows | None = None, chunk_bytes: int = CHUNK_BYTES,
                 replay_until: Position | None = None, binlog: bool = True):
        self.sink, self.resource, self.filters, self.info = sink, resource, filters, info
        self.position = position  # after the last transaction read (committed, prepared or dropped)
        self.start = position  # where reading began: an XA PREPARE before it was not read
        self.windows = windows if windows is not None else SnapshotWindows()
        self.chunk_bytes = chunk_bytes
        self.replay_until = replay_until  # transactions up to here are on the topic already
        self.carry_binlog = binlog  # row events carry the leader's binlog events ([events] binlog)
        self.binlog_file: str | None = None
        # Live copies compare these with their chunks' snapshots (chunks.py): the binlog file:pos after the last
        # group read, and where the leader's last heartbeat since said its binlog ends (nothing more to read)
        self.read_to: BinlogFile | None = None
        self.idle_at: BinlogFile | None = None
        self.prepared = PreparedGroups()
        self._format: bytes | None = None  # the binlog's format description event, raw
        self._pending: list[_Pending] = []  # the open transaction's events not handed on yet
        self._pending_bytes = 0
        self._handed = 0  # events of the open transaction handed on in chunks
        self._format_due = True  # the open transaction's first binlog-carrying event is still to come
        self._gtid: str | None = None
        self._txn_start: str | None = None  # file:pos of its BEGIN (its id when GTIDs are off)
        self._in_txn = False
        self._replayed = False  # the open transaction is on the topic already (replay_until covers it)
        self._xa_prepare: str | None = None  # the open group is the XA PREPARE group of this xid
        self._xa_completes: str | None = None  # the open group completes this xid (MariaDB's GTID says)
        self._savepoints = Savepoints()
        self._skip = SkipRanges()  # rows rolled back to a savepoint, when the transaction is read again
        self._uris: dict[tuple[str | None, str | None], str] = {}
        self._context: list[StatementContext] = []  # the INTVAR/RAND/USER_VAR events before the next statement
        self.copy: LiveCopy | None = None  # live copies: their tables' changes go through it
        self.signals: Signals | None = None  # the signal table's rows are requests, never published

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (its commit not seen yet)."""
        return self._in_txn or bool(self._pending)

    @property
    def replaying(self) -> bool:
        """Whether the binlog is being read again up to transactions the topic already has."""
        return self.replay_until is not None

    # -- BinlogHandler --------------------------------------------------------------------

    def on_rotate(self, file: str) -> None:
        self.binlog_file = file

    def on_format(self, event: bytes) -> None:
        self._format = event

    def on_gtid(self, gtid: str, opens_group: bool, start: int, xa: XaGtid | None = None) -> None:
        self.discard_partial()  # a new transaction starts: nothing can be pending
        self._gtid = gtid
        self._replayed = self._covered(gtid, start)
        if xa is not None:
            if xa.prepared:
                self._xa_prepare = xa.xid
            else:
                self._xa_completes = xa.xid
        if opens_group:
            self._in_txn = True
            self._txn_start = f"{self.binlog_file}:{start}"

    def on_statement_context(self, context: StatementContext) -> None:
        self._context.append(context)

    def on_query(self, query: BinlogQuery) -> None:
        context, self._context = self._context, []
        stmt = classify.read(query.sql.strip(), query.database, query.session.sql_mode if query.session else None)
        if stmt.kind == classify.BEGIN:
            self._begin(query.start)
            return
        if stmt.kind == classify.COMMIT:
            self._commit(query.end)
            return
        if stmt.kind == classify.ROLLBACK:  # the whole group is undone (its non-transactional rows are logged apart)
            self._drop_transaction(query.end)
            return
        if stmt.xa is not None:
            self._xa_statement(stmt.xa, query)
            return
        if stmt.savepoint is not None:
            self._savepoint(stmt.savepoint.verb, stmt.savepoint.name, query)
            return
        if self._txn_start is None:
            self._txn_start = f"{self.binlog_file}:{query.start}"
            self._replayed = self._replayed or self._covered(None, query.start)
        db = query.database
        PRECISIONS.saw(stmt)  # the definitions rows after it were written with (old-format temporal columns)
        if self.copy:
            for d, t in stmt.targets:
                if d is not None and t is not None:
                    self.copy.schema_changed(f"{d}.{t}")
        if (not self._skipping() and self._flows(query, stmt) and not self._signal_ddl(stmt)
                and not self.windows.holds_ddl(stmt, self._gtid, self.binlog_file)):
            if why := unreadable(context):
                raise _unreadable_context(query, why, self.binlog_file, self._gtid)
            event = ChangeEvent(uri=self._uri(db, None), sequence=0, operation="Query", query=query.sql, database=db,
                                session=with_context(query.session, context), error_code=query.error_code or None,
                                query_b64=query.query_b64, statement=stmt, schema=db)
            self._add(event, query.end, query.size, query.timestamp, None)
        if not self._in_txn:  # DDL is its own transaction
            self._commit(query.end)

    def _flows(self, query: BinlogQuery, stmt: Statement) -> bool:
        """Whether [filters] let the statement through; one changing objects on both sides stops here."""
        try:
            return self.filters.allows_statement(stmt)
        except CrossesFilters as e:
            where = f"GTID {self._gtid}" if self._gtid else f"{self.binlog_file}:{query.start}"
            raise DataError(f"at {where}, {e.detail}; nothing of it was published; fix: {e.fix}") from None

    def on_rows(self, rows: RowChange) -> None:
        if self.signals is not None and self.signals.is_signal(rows.schema, rows.table):
            if not self._skipping():
                self.signals.on_rows(rows.operation, *rows.decode(False))
            return
        if self._skipping() or not self.filters.allows_table(rows.schema, rows.table):
            return
        if self._skip and self._skip.holds(self.binlog_file, rows.end):
            return  # rolled back to a savepoint (found on the first read of this transaction)
        if self.copy and self._xa_prepare is None and self.copy.holds(name := f"{rows.schema}.{rows.table}"):
            self._copied_rows(name, rows)
            return
        window = None
        if self.windows:
            window = self.windows.holding(f"{rows.schema}.{rows.table}", self._gtid, self.binlog_file)
            if window is not None and window.key_after is None:
                return  # the snapshot read this table after this change
        # Rows go straight to JSON, except where the snapshot window needs their keys, and in an XA PREPARE
        # group (a live copy may split them against its cursor at the XA COMMIT: _committed).
        as_json = window is None and self._xa_prepare is None
        columns, data = rows.decode(as_json)
        pk = rows.primary_key()
        exact = True  # the leader's rows event still says exactly what this event holds
        if window is not None and window.key_after is not None:
            kept = rows_up_to(columns, pk, data, window.key_after)
            exact = len(kept) == len(data)
            data = kept
        if data:
            event = ChangeEvent(uri=self._uri(rows.schema, rows.table), sequence=0, operation=rows.operation,
                                rows=data, columns=columns, pk=pk, rows_json=as_json,
                                checks=row_checks(rows.flags), schema=rows.schema, table=rows.table)
            binlog = rows.binlog() if self.carry_binlog and exact and rows.binlog is not None else None
            self._add(event, rows.end, rows.size, rows.timestamp, binlog)

    def _signal_ddl(self, stmt: Statement) -> bool:
        """Whether a statement is DDL of the signal table only (never published)."""
        signal = self.signals.table if self.signals is not None else None
        if signal is None or signal[1] not in stmt.text:
            return False
        targets = stmt.targets
        return bool(targets) and all(t == signal for t in targets)

    def _copied_rows(self, name: str, rows: RowChange) -> None:
        """A row event of a table being copied: the part the copy does not read later (LiveCopy.rows)."""
        assert self.copy is not None
        columns, data = rows.decode(False)
        pk = rows.primary_key()
        parts = self.copy.rows(name, rows.operation, columns, pk, data)
        exact = len(parts) == 1 and parts[0][0] == rows.operation and len(parts[0][1]) == len(data)
        for op, part in parts:
            event = ChangeEvent(uri=self._uri(rows.schema, rows.table), sequence=0, operation=op,  # type: ignore[arg-type]
                                rows=part, columns=columns, pk=pk, checks=row_checks(rows.flags), schema=rows.schema,
                                table=rows.table)
            binlog = rows.binlog() if self.carry_binlog and exact and rows.binlog is not None else None
            self._add(event, rows.end, rows.size, rows.timestamp, binlog)

    def on_xid(self, end: int) -> None:
        self._commit(end)

    def on_xa_prepare(self, xid: str, one_phase: bool, end: int) -> None:
        if one_phase:  # MySQL's XA COMMIT ... ONE PHASE: an ordinary commit (its rows were held unsplit till here)
            if self.copy:
                events, raws = self._split_for_copy([p.event for p in self._pending], [p.binlog for p in self._pending])
                self._pending = [_Pending(e, r, 0) for e, r in zip(events, raws)]
            self._commit(end)
            return
        # Held as read: the binlog fields are made at the XA COMMIT (_committed), where a live copy may split rows.
        group = HeldGroup(xid, self._gtid, self.position, [p.event for p in self._pending],
                          [p.binlog for p in self._pending], self._format)
        self._advance(end)
        self._reset()
        self.prepared.hold(group)
        self.sink.skipped()

    def on_heartbeat(self, at: BinlogFile | None = None) -> None:
        if at is not None and not self.in_transaction:
            self.idle_at = at
        self.sink.idle()

    # -- the open transaction ---------------------------------------------------------------

    def discard_partial(self) -> None:
        """Forget a transaction whose commit was not seen (the connection dropped mid-way).

        Reading resumes from `position`, the last committed transaction, so it comes again whole.
        Chunks of it already handed on stay: the consumer drops that partial copy when the
        transaction's first event comes again."""
        self.sink.abandon()
        self._reset()

    def _begin(self, start: int) -> None:
        self._in_txn = True
        self._txn_start = f"{self.binlog_file}:{start}"
        self._replayed = self._replayed or self._covered(None, start)

    def _covered(self, gtid: str | None, start: int) -> bool:
        """Whether the transaction starting here is on the topic already (read again after a restart)."""
        if self.replay_until is None:
            return False
        binlog = BinlogFile(self.binlog_file, start) if self.binlog_file and gtid is None else None
        return self.replay_until.covers(gtid, binlog)

    def _skipping(self) -> bool:
        """Whether the open transaction's events are not wanted: it is on the topic already (an XA
        PREPARE group is wanted still: its events are held again)."""
        return self._replayed and self._xa_prepare is None

    def _uri(self, schema: str | None, table: str | None) -> str:
        key = (schema, table)
        uri = self._uris.get(key)
        if uri is None:
            if len(self._uris) > 10_000:
                self._uris.clear()
            uri = self._uris[key] = make_uri(self.resource, schema, table)
        return uri

    def _txn_id(self) -> str | None:
        """The open transaction's id, once known (its GTID, or where its BEGIN is)."""
        return self._gtid or self._txn_start

    def _add(self, event: ChangeEvent, end: int, size: int, timestamp: int, binlog: bytes | None) -> None:
        event.bn_file = BinlogFile(self.binlog_file or "", end)
        event.gtid = self._gtid
        event.ts = timestamp * 1000
        self._pending.append(_Pending(event, binlog, size))
        self._pending_bytes += size
        txn_id = self._txn_id()
        if (self._pending_bytes >= self.chunk_bytes and len(self._pending) > 1 and txn_id is not None
                and self._xa_prepare is None):  # a prepared XA group is held whole until its outcome
            # Hand on all but the last event: the commit always has an event to mark `last`.
            chunk, self._pending = self._pending[:-1], self._pending[-1:]
            self._pending_bytes = size
            self._handed += len(chunk)
            self.sink.add(self._finish(chunk), txn_id, complete=False)

    def _finish(self, pending: list[_Pending]) -> list[ChangeEvent]:
        """The events, with their `binlog` field: the transaction's first binlog-carrying event gets
        the format description first (a follower's BINLOG statement needs it once per session)."""
        events = []
        for p in pending:
            if p.binlog is not None and self._format is not None:
                data = p.binlog
                if self._format_due:
                    data = self._format + data
                    self._format_due = False
                p.event.binlog = base64.b64encode(data).decode("ascii")
            events.append(p.event)
        return events

    def _advance(self, end: int) -> None:
        """The position after the group that ends at `end`."""
        if self._gtid is not None:
            self.position = self.position.after(self.info.flavor, self._gtid)
        else:
            self.position = Position(binlog=BinlogFile(self.binlog_file or "", end), server_uuid=self.info.server_uuid)
        self.read_to, self.idle_at = BinlogFile(self.binlog_file or "", end), None
        if self.replay_until is not None and self.position.passed(self.replay_until):
            self.replay_until = None
        self._skip.clear()  # the group ended: its offsets do not come again

    def _commit(self, end: int) -> None:
        replayed = self._replayed
        txn_id = self._txn_id() or f"{self.binlog_file}:{end}"
        pending = self._pending
        self._advance(end)
        if replayed:  # on the topic already (read again to find a held XA PREPARE)
            self._reset()
            return
        events = self._finish(pending)
        self._reset()
        self._publish(events, txn_id, end)

    def _publish(self, events: list[ChangeEvent], txn_id: str, end: int) -> None:
        """Hand on what is left of a transaction that committed at `end` (the position is after it)."""
        if not events:
            self.sink.skipped()
            return
        self.windows.expire(self.position)
        last = events[-1]
        last.bn_file = BinlogFile(self.binlog_file or "", end)  # the commit's place (the position's, GTIDs off)
        last.end_at(self.position)
        last.xa_pending = self.prepared.pending() or None
        self.sink.add(events, txn_id, complete=True)

    def _drop_transaction(self, end: int) -> None:
        """The group ends in ROLLBACK: none of its rows happened (chunks handed on are abandoned:
        the consumer drops their partial copy when the next transaction starts)."""
        if self._handed:
            self.sink.abandon()
        self._pending = []
        self._advance(end)
        self._reset()
        self.sink.skipped()

    def _xa_statement(self, statement: XaStatement, query: BinlogQuery) -> None:
        if statement.verb == "START":  # MySQL: the XA PREPARE group opens with it
            self._begin(query.start)
            self._xa_prepare = statement.xid
        elif statement.verb in ("COMMIT", "ROLLBACK"):
            if self._gtid is None:  # (with GTIDs, on_gtid knew)
                self._replayed = self._replayed or self._covered(None, query.start)
            self._xa_outcome(statement.verb, self._xa_completes or statement.xid, query.end)
        # XA END (and anything else) changes nothing

    def _xa_outcome(self, verb: str, xid: str | None, end: int) -> None:
        """XA COMMIT: the held group becomes this transaction; XA ROLLBACK: it is dropped."""
        held = self.prepared.take(xid) if xid is not None else None
        gtid, txn_id, replayed = self._gtid, self._txn_id() or f"{self.binlog_file}:{end}", self._replayed
        if (verb == "COMMIT" and held is None and not replayed and not self.windows.cover(gtid, self.binlog_file)
                and not (self.copy is not None and self.copy.starting())):
            # (a snapshot window covering the commit: the snapshot read its tables after it; a live copy
            # with no chunk yet: its chunks read its tables after it)
            raise DataError(
                f"XA COMMIT of {readable(xid or '?')} (GTID {gtid or txn_id}) commits a transaction prepared before "
                f"the position this producer started reading at ({self.start}): its rows are not in the binlog "
                "it reads, so they would be lost to the follower. Re-snapshot the tables that transaction wrote "
                "(cdc-producer PROFILE --snapshot db.table ...): the stream then goes on past this XA COMMIT"
            )
        self._advance(end)
        self._reset()
        if verb == "ROLLBACK" or replayed or held is None:
            self.sink.skipped()
            return
        events = self._committed(held)
        for event in events:
            event.gtid = gtid
        self._publish(events, txn_id, end)

    def _committed(self, held: HeldGroup) -> list[ChangeEvent]:
        """A held group's events as its XA COMMIT publishes them. The rows of a table a live copy is reading
        go through LiveCopy.rows now, not at the XA PREPARE: the leader makes them visible to a chunk's read
        only after the XA COMMIT's place in the binlog (xa.py), so that is where the copy's cursor splits
        them and a chunk in flight takes their images (an XA ROLLBACK leaves no trace). Then the leader's
        binlog events: the format description before the first, none on an event a split changed."""
        events, raws = self._split_for_copy(held.events, held.binlog or [None] * len(held.events))
        format_due = True
        for event, raw in zip(events, raws):
            if raw is not None and self.carry_binlog and held.format is not None:
                event.binlog = base64.b64encode(held.format + raw if format_due else raw).decode("ascii")
                format_due = False
        return events

    def _split_for_copy(self, held: list[ChangeEvent], binlog: list[bytes | None]
                        ) -> tuple[list[ChangeEvent], list[bytes | None]]:
        """An XA transaction's events at its commit: those of tables a live copy is reading through
        LiveCopy.rows (an event a split changes keeps no binlog events)."""
        events: list[ChangeEvent] = []
        raws: list[bytes | None] = []
        for event, raw in zip(held, binlog):
            name = f"{event.schema}.{event.table}"
            if event.operation == "Query" or not self.copy or not self.copy.holds(name):
                events.append(event)
                raws.append(raw)
                continue
            parts = self.copy.rows(name, event.operation, event.columns or [], event.pk or [], event.rows)
            exact = len(parts) == 1 and parts[0][0] == event.operation and len(parts[0][1]) == len(event.rows)
            for op, part in parts:
                events.append(replace(event, operation=op, rows=part))  # type: ignore[arg-type]
                raws.append(raw if exact else None)
        return events, raws

    def _savepoint(self, verb: str, name: str, query: BinlogQuery) -> None:
        if verb == "SAVEPOINT":
            self._savepoints.take(Savepoint(name, self._handed + len(self._pending), self.binlog_file or "",
                                            query.end))
        elif verb == "RELEASE":
            self._savepoints.release(name)
        elif (savepoint := self._savepoints.rollback_to(name)) is not None:
            keep = savepoint.events_before - self._handed
            if keep > 0 or (keep == 0 and not self._handed):
                del self._pending[keep:]
                self._pending_bytes = sum(p.size for p in self._pending)
                return
            # Rows after the savepoint were handed on already: read the transaction again
            # without them (the consumer drops the partial copy when it starts again).
            self._skip.add(savepoint.file, savepoint.after, query.end)
            self.discard_partial()
            raise RereadTransaction(f"ROLLBACK TO {name} undid rows already handed on")

    def _reset(self) -> None:
        self._pending, self._pending_bytes, self._handed = [], 0, 0
        self._in_txn, self._gtid, self._txn_start, self._replayed = False, None, None, False
        self._xa_prepare = self._xa_completes = None
        self._format_due = True
        self._context = []
        self._savepoints.clear()
