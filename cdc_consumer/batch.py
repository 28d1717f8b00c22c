"""SQL of consecutive events -> few statements, each remembering the events it came from.

A round trip to the follower costs more than writing a row, so the consumer merges the
multi-row pieces of consecutive events into one statement while they have the same shape
(same table, columns and kind; no key twice), and the binlog events of consecutive row events into
one BINLOG statement; cdc_consumer/writer.py then sends many statements per round trip. Rows whose
pieces carry parameters (apply.py, a follower with MariaDB's bulk execution) are merged the same way into
one `Bulk` statement instead of one text statement. A failing statement is pinned on its `Origin`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import cast

import pymysql

from cdc_consumer import parameters
from cdc_consumer.apply import Piece, RowsSql, Single
from cdc_consumer.binlog_replay import BinlogRows
from cdc_stream.events import ChangeEvent

# Characters per statement: 256 KiB (~2,000 rows of the bench table) amortises the round
# trip; smaller batches keep the follower and the reader busy at the same time sooner
# (bench/README.md has the figures).
MAX_STATEMENT = 256 << 10
# Characters of base64 per BINLOG statement holding several events' (each event's rows take one
# otherwise), in a session that annotates its rows (follower.py, QUIET_ANNOTATIONS_SQL: the user may not
# turn that off): the follower then logs the whole statement's text once per rows event in it, a cost that
# grows with the square of its size. On sysbench's 4-row transactions (bench/oltp.py, ~350 characters an
# event), per 1,000 transactions: 8 KiB took 120-130 ms of consumer CPU and 110-126 ms of the follower's,
# against 218-262 and 152-190 ms one event per statement (each its own round trip then), and 144 and 232
# ms at 32 KiB (256 KiB: 3,500 ms of the follower's). With round trips shared (writer.py), one event per
# statement: 102 against 86 ms of consumer CPU, 58 against 76 of the follower's (bench/README.md, issue 26,
# ninth part).
MAX_BINLOG = 8 << 10
# The same in a session that logs no annotations: the follower's time per event no longer grows with the
# statement (bench/README.md, issue 26, fifteenth part, has the sizes tried).
QUIET_MAX_BINLOG = 64 << 10


@dataclass(slots=True)
class Bulk:
    """A prepared statement run once per parameter row (MariaDB's COM_STMT_BULK_EXECUTE): its SQL with a
    `?` per parameter, the parameters' types and the rows (cdc_consumer/parameters.py)."""

    sql: str
    types: bytes
    rows: list[bytes]

    def __len__(self) -> int:
        return len(self.sql) + len(self.types) + sum(map(len, self.rows))


Statement = str | Bulk


@dataclass(slots=True)
class Origin:
    """Where a statement came from: the first and last (offset, event) whose SQL it holds; for a
    statement that must change a known number of rows, that number and the keys of its rows."""

    offset: int
    txn_id: str
    event: ChangeEvent | None
    last_offset: int | None = None
    expect: int | None = None  # rows the statement must affect (matched rows), None: not checked
    keys: list[str] | None = None
    events: list[ChangeEvent] | None = None  # a BINLOG statement of several events: all of them, in order
    # Rows of a transactional table, which a failure before them rolls back with the follower transaction
    # (Replayer._overlaps), in a row statement (BINLOG, or SQL: a multi-row statement, a bulk one or one
    # row's): writer.execute may then send it before the answer to the previous one.
    overlap: bool = False

    def where(self) -> str:
        """'offset N' or 'offsets N..M', and the transaction."""
        span = f"offset {self.offset}" if self.last_offset in (None, self.offset) else \
            f"offsets {self.offset}..{self.last_offset}"
        return f"{span}, transaction {self.txn_id}"


class StatementFailed(Exception):
    """A statement failed on the follower; `error` is the server's, `origin` the statement's source."""

    def __init__(self, error: pymysql.err.MySQLError, origin: Origin):
        super().__init__(str(error))
        self.error, self.origin = error, origin


@dataclass
class SqlBatch:
    """Statements waiting to be sent, in source order, each with its Origin."""

    max_statement: int = MAX_STATEMENT
    max_binlog: int = QUIET_MAX_BINLOG  # characters of base64 per BINLOG statement of several events'
    statements: list[Statement] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    size: int = 0  # characters, the open statement included
    _open: RowsSql | None = None  # the multi-row statement being filled
    _parts: list[str | bytes] = field(default_factory=list)  # literal rows (text) or parameter rows (Bulk)
    _types: list[bytes | None] | None = None  # the open statement's parameter types (a Bulk statement)
    _last_types: parameters.Types | None = None  # the last row's, which joined it
    _keys: set[str] = field(default_factory=set)
    _open_size: int = 0
    _chunks: list[str] | None = None  # the BINLOG statement being filled: base64 of each event's binlog events
    _chunks_size: int = 0

    def add(self, pieces: list[Piece], origin: Origin) -> None:
        """Append one event's SQL; multi-row pieces join the open statement where they can."""
        for piece in pieces:
            if isinstance(piece, str):
                self._append(piece, replace(origin, overlap=False) if origin.overlap else origin)
            elif isinstance(piece, BinlogRows):
                self._add_binlog(piece, origin)
            elif isinstance(piece, Single):
                self._append(piece.sql, Origin(origin.offset, origin.txn_id, origin.event, None, piece.expect,
                                               [piece.key], overlap=origin.overlap))
            else:
                self._add_rows(piece, origin)

    def _append(self, sql: str, origin: Origin) -> None:
        self._close()
        self.statements.append(sql)
        self.origins.append(origin)
        self.size += len(sql)

    def statement(self, sql: str, origin: Origin) -> None:
        """Append one complete statement (a BINLOG statement, the checkpoint, COMMIT...)."""
        self.add([sql], origin)

    def take(self) -> tuple[list[Statement], list[Origin]]:
        """Everything pending, as complete statements; the batch is empty afterwards."""
        self._close()
        out = self.statements, self.origins
        self.statements, self.origins, self.size = [], [], 0
        return out

    def clear(self) -> None:
        """Drop everything pending."""
        self.take()

    def __bool__(self) -> bool:
        return bool(self.statements) or self._open is not None or self._chunks is not None

    def _add_rows(self, piece: RowsSql, origin: Origin) -> None:
        if self._open is None or self._open.shape != piece.shape:
            self._start(piece, origin)
        if piece.keys is None and not piece.expect_each and self._fits_whole(piece):
            # (an insert's rows, all of one signature, into room enough: what the loop below does, at once)
            size = sum(map(len, piece.parts)) + len(piece.parts)
            self._parts.extend(piece.parts)
            self._open_size += size
            self.size += size
            if piece.types:
                self._last_types = piece.types[-1]
            self._joined(origin)
            return
        for i, part in enumerate(piece.parts):
            key = piece.keys[i] if piece.keys is not None else None
            # (Rows of one signature share one types tuple: checked once.)
            if ((key is not None and key in self._keys) or self._open_size + len(part) > self.max_statement
                    or (piece.types is not None and piece.types[i] is not self._last_types
                        and not parameters.compatible(self._types or [], piece.types[i]))):
                self._start(piece, origin)
                if piece.types is not None:
                    parameters.compatible(self._types or [], piece.types[i])
            if piece.types is not None:
                self._last_types = piece.types[i]
            self._parts.append(part)
            self._open_size += len(part) + 1
            self.size += len(part) + 1
            if key is not None:
                self._keys.add(key)
            if piece.expect_each:
                statement = self.origins[-1]
                statement.expect = (statement.expect or 0) + piece.expect_each
                if key is not None and statement.keys is not None:
                    statement.keys.append(key)
        self._joined(origin)

    def _joined(self, origin: Origin) -> None:
        """Rows of `origin` joined the open statement: it ends there, and overlaps only if all its rows may."""
        statement = self.origins[-1]
        statement.last_offset = origin.offset
        statement.overlap = statement.overlap and origin.overlap

    def _fits_whole(self, piece: RowsSql) -> bool:
        """Whether every row of `piece` joins the open statement: it has room for them all, and their types,
        one tuple for all, fit it (which they then give it, as the loop of _add_rows would)."""
        if self._open_size + sum(map(len, piece.parts)) + len(piece.parts) > self.max_statement:
            return False
        types = piece.types
        if types is None or not types:
            return True
        first = types[0]
        return types.count(first) == len(types) and (first is self._last_types
                                                     or parameters.compatible(self._types or [], first))

    def _add_binlog(self, piece: BinlogRows, origin: Origin) -> None:
        """One event's binlog events join the open BINLOG statement (as a chunk of its own), or open one."""
        size = len(piece.events) + 1
        if self._chunks is not None and self._chunks_size + size <= self.max_binlog:
            self._chunks.append(piece.events)
            self._chunks_size += size
            self.size += size
            statement = self.origins[-1]
            statement.last_offset = origin.offset
            statement.overlap = statement.overlap and origin.overlap
            if origin.event is not None and statement.events is not None:
                statement.events.append(origin.event)
            return
        self._close()
        self._chunks, self._chunks_size = [piece.events], len(piece.events) + 9
        self.size += self._chunks_size
        self.statements.append("")  # written by _close
        self.origins.append(Origin(origin.offset, origin.txn_id, origin.event,
                                   events=[origin.event] if origin.event is not None else None,
                                   overlap=origin.overlap))

    def _start(self, piece: RowsSql, origin: Origin) -> None:
        self._close()
        self._open = piece
        self._parts, self._keys = [], set()
        self._types = None if piece.types is None else [None] * len(piece.types[0]) if piece.types else []
        self._last_types = None
        self._open_size = len(piece.head) + len(piece.tail)
        self.size += self._open_size
        # The statement's Origin is completed (last_offset, expect, keys) as rows join it.
        self.statements.append("")
        self.origins.append(Origin(origin.offset, origin.txn_id, origin.event,
                                   keys=[] if piece.expect_each and piece.keys is not None else None,
                                   overlap=origin.overlap))

    def _close(self) -> None:
        if self._chunks is not None:
            self.statements[-1] = "BINLOG '" + "\n".join(self._chunks) + "'"
            self._chunks = None
        if self._open is None:
            return
        if self._parts and self._types is not None:
            rows = cast(list[bytes], self._parts)
            self.statements[-1] = Bulk(self._open.head, parameters.type_list(self._types), rows)
        elif self._parts:
            self.statements[-1] = self._open.head + ",".join(cast(list[str], self._parts)) + self._open.tail
        else:  # opened, never filled
            self.statements.pop()
            self.origins.pop()
        self._open = None
