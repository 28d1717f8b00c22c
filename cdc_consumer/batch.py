"""SQL of consecutive events -> few statements -> few round trips.

A round trip to the follower costs more than writing a row, so the consumer
(1) merges the multi-row pieces of consecutive events into one statement while
they have the same shape (same table, columns and kind; no key twice), and
(2) sends many statements per round trip (the connection has
CLIENT.MULTI_STATEMENTS). The server runs them in order and stops at the first
error, which `execute` pins on the event that statement came from.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import pymysql

from cdc_consumer.apply import Piece, RowsSql
from cdc_stream.events import ChangeEvent

# Characters per statement and per round trip (servers accept max_allowed_packet:
# 16 MiB on MariaDB 10.11, 64 MiB on MySQL 8, 4 MiB on MySQL 5.7; 1 MiB leaves room
# for multi-byte text, whose bytes outnumber its characters). 256 KiB (~2,000 rows of the bench
# table) amortises the round trip; smaller batches keep the follower and the
# reader busy at the same time sooner (bench: 57k rows/s vs 49k with 1-2 MiB).
MAX_STATEMENT = 256 << 10
MAX_ROUND_TRIP = 1 << 20
PACKET_TOO_LARGE = 1153  # ER_NET_PACKET_TOO_LARGE


@dataclass(slots=True)
class Origin:
    """Where a statement came from: the first and last (offset, event) whose SQL it holds."""

    offset: int
    txn_id: str
    event: ChangeEvent | None
    last_offset: int | None = None

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
    statements: list[str] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    size: int = 0  # characters, the open statement included
    _open: RowsSql | None = None  # the multi-row statement being filled
    _parts: list[str] = field(default_factory=list)
    _keys: set[str] = field(default_factory=set)
    _open_size: int = 0

    def add(self, pieces: list[Piece], origin: Origin) -> None:
        """Append one event's SQL; multi-row pieces join the open statement where they can."""
        for piece in pieces:
            if isinstance(piece, str):
                self._close()
                self.statements.append(piece)
                self.origins.append(origin)
                self.size += len(piece)
            else:
                self._add_rows(piece, origin)

    def statement(self, sql: str, origin: Origin) -> None:
        """Append one complete statement (SAVEPOINT, the checkpoint, COMMIT...)."""
        self.add([sql], origin)

    def take(self) -> tuple[list[str], list[Origin]]:
        """Everything pending, as complete statements; the batch is empty afterwards."""
        self._close()
        out = self.statements, self.origins
        self.statements, self.origins, self.size = [], [], 0
        return out

    def clear(self) -> None:
        """Drop everything pending."""
        self.take()

    def __bool__(self) -> bool:
        return bool(self.statements) or self._open is not None

    def _add_rows(self, piece: RowsSql, origin: Origin) -> None:
        if self._open is None or self._open.shape != piece.shape:
            self._start(piece, origin)
        for i, part in enumerate(piece.parts):
            key = piece.keys[i] if piece.keys is not None else None
            if (key is not None and key in self._keys) or self._open_size + len(part) > self.max_statement:
                self._start(piece, origin)
            self._parts.append(part)
            self._open_size += len(part) + 1
            self.size += len(part) + 1
            if key is not None:
                self._keys.add(key)
        self.origins[-1].last_offset = origin.offset

    def _start(self, piece: RowsSql, origin: Origin) -> None:
        self._close()
        self._open = piece
        self._parts, self._keys = [], set()
        self._open_size = len(piece.head) + len(piece.tail)
        self.size += self._open_size
        # The statement's Origin is completed (last_offset) as rows join it.
        self.statements.append("")
        self.origins.append(Origin(origin.offset, origin.txn_id, origin.event))

    def _close(self) -> None:
        if self._open is None:
            return
        if self._parts:
            self.statements[-1] = self._open.head + ",".join(self._parts) + self._open.tail
        else:  # opened, never filled
            self.statements.pop()
            self.origins.pop()
        self._open = None


def execute(conn: pymysql.Connection, statements: list[str], origins: list[Origin], max_packet: int) -> None:
    """Run the statements in order, many per round trip; a failure raises StatementFailed.

    `max_packet` is the follower's max_allowed_packet: a statement over it is refused
    here, with its size, because the server would drop the connection instead of
    answering (and a reconnect would only meet the same statement again)."""
    cap = min(MAX_ROUND_TRIP, max_packet // 4)  # characters: up to 4 bytes each in utf8mb4
    i = 0
    while i < len(statements):
        _check_size(statements[i], origins[i], max_packet)
        j, size = i + 1, len(statements[i])
        while j < len(statements) and size + len(statements[j]) < cap:
            size += len(statements[j]) + 2
            j += 1
        done = i
        try:
            with conn.cursor() as cur:
                cur.execute(";\n".join(statements[i:j]))  # no parameters: PyMySQL sends the text as it is
                done += 1
                while cur.nextset():
                    done += 1
        except pymysql.err.MySQLError as e:
            raise StatementFailed(e, origins[min(done, j - 1)]) from None
        i = j


def _check_size(statement: str, origin: Origin, max_packet: int) -> None:
    if 4 * len(statement) < max_packet:
        return  # small whatever its characters: skip encoding it
    size = len(statement.encode("utf-8", "surrogateescape"))
    if size + 1 > max_packet:  # the packet also holds the command byte
        raise StatementFailed(pymysql.err.OperationalError(
            PACKET_TOO_LARGE, f"a statement of {size:,} bytes is over the follower's max_allowed_packet "
                              f"({max_packet:,} bytes)"), origin)


def max_allowed_packet(conn: pymysql.Connection) -> int:
    """The follower's max_allowed_packet for this session, in bytes."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        return int(cur.fetchone()[0])


class Writer:
    """Runs batches of statements on the follower in a thread of its own, in order.

    The reader decodes and builds the next batch while the follower works on
    the previous one (a thread blocked on its socket releases the GIL). A
    failure stops the writer; the next submit() or wait() raises it.
    """

    def __init__(self, conn: pymysql.Connection, depth: int = 4):
        self.conn = conn
        self.max_packet = max_allowed_packet(conn)
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="follower-writer", daemon=True)
        self._thread.start()

    def submit(self, statements: list[str], origins: list[Origin]) -> None:
        """Queue a batch (blocks while `depth` batches wait); raises an earlier batch's failure."""
        self._raise_failure()
        if statements:
            self._queue.put((statements, origins))

    def wait(self) -> None:
        """Block until every queued batch ran; raises a failure. The caller may then use the connection."""
        self._queue.join()
        self._raise_failure()

    def close(self) -> None:
        """Stop the thread once the queued batches ran (or failed)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._failure is None:  # after a failure, later batches are dropped
                    execute(self.conn, *item, self.max_packet)
            except BaseException as e:  # handed to the reader thread, which reports it
                self._failure = e
            finally:
                self._queue.task_done()
