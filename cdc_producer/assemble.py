"""Binlog events -> the change events of whole source transactions, and the position after each.

The `Assembler` is the producer's `BinlogHandler` (cdc_producer/binlog.py dispatches to it):
a pure state machine that knows where a transaction begins (BEGIN, or MariaDB's GTID event)
and ends (XID, COMMIT, or a DDL outside a transaction), which events the filters and the
snapshot windows keep, and the leader's position after each commit. It hands what it keeps
to a `TransactionSink` (cdc_producer/publish.py): whole transactions, or a large one in
chunks of about `chunk_bytes` of binlog rows, so it is never held whole.
"""

from __future__ import annotations

from typing import Protocol

from cdc_producer.binlog import BinlogQuery, LeaderInfo, RowChange
from cdc_producer.windows import SnapshotWindows, rows_up_to
from cdc_stream.events import ChangeEvent, make_uri
from cdc_stream.filters import TableFilter
from cdc_stream.positions import BinlogFile, Position, merge_gtid

# A transaction's events go to the sink once they hold this many bytes of binlog row
# images (decoded, ~20-30 times that in Python objects).
CHUNK_BYTES = 1 << 20
# Statements inside a transaction that change no data and are not DDL.
_IGNORED_STATEMENTS = ("SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA ")


class TransactionSink(Protocol):
    """Where the assembler hands what it keeps."""

    def add(self, events: list[ChangeEvent], txn_id: str, complete: bool) -> None:
        """Events of one source transaction, in order: all that is left of it (`complete`:
        its last event carries the position after it), or a chunk that more will follow."""

    def skipped(self) -> None:
        """A transaction committed with nothing to publish (the filters dropped it all)."""

    def abandon(self) -> None:
        """The open transaction will not complete here: it will be read again from its start."""

    def idle(self) -> None:
        """The leader has nothing more for now."""


class Assembler:
    """Follows the binlog (BinlogHandler) and assembles source transactions for a TransactionSink."""

    def __init__(self, sink: TransactionSink, resource: str, filters: TableFilter, info: LeaderInfo,
                 position: Position, windows: SnapshotWindows | None = None, chunk_bytes: int = CHUNK_BYTES):
        self.sink, self.resource, self.filters, self.info = sink, resource, filters, info
        self.position = position  # after the last committed transaction
        self.windows = windows if windows is not None else SnapshotWindows()
        self.chunk_bytes = chunk_bytes
        self.binlog_file: str | None = None
        self._pending: list[ChangeEvent] = []  # the open transaction's events not handed on yet
        self._pending_bytes = 0
        self._gtid: str | None = None
        self._txn_start: str | None = None  # file:pos of its BEGIN (its id when GTIDs are off)
        self._in_txn = False
        self._uris: dict[tuple[str | None, str | None], str] = {}

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (its commit not seen yet)."""
        return self._in_txn or bool(self._pending)

    # -- BinlogHandler --------------------------------------------------------------------

    def on_rotate(self, file: str) -> None:
        self.binlog_file = file

    def on_gtid(self, gtid: str, opens_group: bool, start: int) -> None:
        self.discard_partial()  # a new transaction starts: nothing can be pending
        self._gtid = gtid
        if opens_group:
            self._in_txn = True
            self._txn_start = f"{self.binlog_file}:{start}"

    def on_query(self, query: BinlogQuery) -> None:
        sql = query.sql.strip()
        head = sql[:20].upper()
        if head == "BEGIN":
            self._in_txn = True
            self._txn_start = f"{self.binlog_file}:{query.start}"
            return
        if head in ("COMMIT", "ROLLBACK"):
            self._commit(query.end)
            return
        if head.startswith(_IGNORED_STATEMENTS):
            return
        if self._txn_start is None:
            self._txn_start = f"{self.binlog_file}:{query.start}"
        db = query.database
        if self.filters.allows_query(sql, db) and not self.windows.holds_ddl(sql, db, self._gtid, self.binlog_file):
            event = ChangeEvent(uri=self._uri(db, None), sequence=0, operation="Query", query=sql, database=db)
            self._add(event, query.end, query.size, query.timestamp)
        if not self._in_txn:  # DDL is its own transaction
            self._commit(query.end)

    def on_rows(self, rows: RowChange) -> None:
        if not self.filters.allows_table(rows.schema, rows.table):
            return
        window = None
        if self.windows:
            window = self.windows.holding(f"{rows.schema}.{rows.table}", self._gtid, self.binlog_file)
            if window is not None and window.key_after is None:
                return  # the snapshot read this table after this change
        # Rows go straight to JSON, except where the snapshot window needs their keys.
        columns, data = rows.decode(window is None)
        pk = rows.primary_key()
        if window is not None and window.key_after is not None:
            data = rows_up_to(columns, pk, data, window.key_after)
        if data:
            event = ChangeEvent(uri=self._uri(rows.schema, rows.table), sequence=0, operation=rows.operation,
                                rows=data, columns=columns, pk=pk, rows_json=window is None)
            self._add(event, rows.end, rows.size, rows.timestamp)

    def on_xid(self, end: int) -> None:
        self._commit(end)

    def on_heartbeat(self) -> None:
        self.sink.idle()

    # -- the open transaction ---------------------------------------------------------------

    def discard_partial(self) -> None:
        """Forget a transaction whose commit was not seen (the connection dropped mid-way).

        Reading resumes from `position`, the last committed transaction, so it comes again whole.
        Chunks of it already handed on stay: the consumer drops that partial copy when the
        transaction's first event comes again."""
        self.sink.abandon()
        self._reset()

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

    def _add(self, event: ChangeEvent, end: int, size: int, timestamp: int) -> None:
        event.bn_file = BinlogFile(self.binlog_file or "", end)
        event.gtid = self._gtid
        event.ts = timestamp * 1000
        self._pending.append(event)
        self._pending_bytes += size
        txn_id = self._txn_id()
        if self._pending_bytes >= self.chunk_bytes and len(self._pending) > 1 and txn_id is not None:
            # Hand on all but the last event: the commit always has an event to mark `last`.
            chunk, self._pending = self._pending[:-1], self._pending[-1:]
            self._pending_bytes = size
            self.sink.add(chunk, txn_id, complete=False)

    def _commit(self, end: int) -> None:
        if self._gtid is not None:
            self.position = Position(gtid_set=merge_gtid(self.info.flavor, self.position.gtid_set or "", self._gtid))
        else:
            self.position = Position(file=self.binlog_file, pos=end, server_uuid=self.info.server_uuid)
        events = self._pending
        txn_id = self._txn_id() or f"{self.binlog_file}:{end}"
        self._reset()
        if not events:
            self.sink.skipped()
            return
        self.windows.expire(self.position)
        last = events[-1]
        last.bn_file = BinlogFile(self.binlog_file or "", end)
        last.gtid_set = self.position.gtid_set
        if last.gtid_set is None:
            last.server_uuid = self.info.server_uuid
        self.sink.add(events, txn_id, complete=True)

    def _reset(self) -> None:
        self._pending, self._pending_bytes = [], 0
        self._in_txn, self._gtid, self._txn_start = False, None, None
