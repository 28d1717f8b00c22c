"""Statements -> the follower, many per round trip, from a thread of its own.

The connection has CLIENT.MULTI_STATEMENTS: the server runs the statements of one round
trip in order and stops at the first error, which `execute` pins on the event that
statement came from (batch.Origin). It also has CLIENT.FOUND_ROWS, so each statement's
count is the rows it matched: a statement whose Origin expects a count and gets another
fails as MISSING_ROW (the error a native replica stops with). A `Bulk` statement (rows as parameters,
MariaDB's bulk execution) is a round trip of its own: its prepared statement is kept per connection and
SQL text (`_statement_id`), so a table's INSERT is prepared once. Row statements of a transactional table
(`Origin.overlap`) are sent while earlier answers are on their way (`PIPELINE`). The reader decodes and
builds the next batch while the follower works on the previous one (a thread blocked on its socket
releases the GIL). A batch that finds the writer thread idle has its first round trips sent by the reader
itself (`Execution.send_ahead`), so that the thread's wake-up overlaps the follower's work.

A statement that may make something last on the follower (any without `Origin.overlap`: the checkpoint and
COMMIT, DDL, rows of a table that ignores rollbacks) is sent only once the topic records it came from are
durable (`submit`'s `durable`, Topic.durable); the row statements before it need not wait, since a crash
before the COMMIT rolls them back. So the follower applies a transaction's rows while the reader waits for
the topic's fsync, and the checkpoint and COMMIT follow in a round trip of their own, sent before the rows'
answers came: each round trip of rows before it ends by moving a session variable along a chain
(`@cdc_chain`), which a statement that failed stops (the server runs nothing after it in its round trip),
and the COMMIT's round trip starts with a guard that fails unless the chain reached its end, so nothing
after a failure commits (`_chained`).
"""

from __future__ import annotations

import itertools
import queue
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import cast

import pymysql

from cdc_consumer.batch import Bulk, Origin, Statement, StatementFailed
from cdc_stream.mysql import close_statement, more_results, one_row, prepare, read_result, send_bulk, send_query

# Characters per round trip (servers accept max_allowed_packet: 16 MiB on MariaDB 10.11,
# 64 MiB on MySQL 8, 4 MiB on MySQL 5.7; 1 MiB leaves room for multi-byte text, whose bytes
# outnumber its characters).
MAX_ROUND_TRIP = 1 << 20
# MariaDB 10.11 answers a BINLOG statement that applies rows without SERVER_MORE_RESULTS_EXISTS, even
# when more statements follow in the round trip. It runs them all the same (its multi-statement loop
# stops at an error, not at the flag) and sends their answers, so after a BINLOG statement the rest of the
# round trip is read by count (`_answers_left`): a client that trusts the flag stops there and the next
# command meets the leftover answers ("Packet sequence number wrong").
_BINLOG = "BINLOG "
PACKET_TOO_LARGE = 1153  # ER_NET_PACKET_TOO_LARGE
MISSING_ROW = 1032  # ER_KEY_NOT_FOUND: "Can't find record"
# Round trips of row statements in flight at once (execute): the server finds the next one waiting while an
# answer travels and the writer thread waits for the GIL (bench/README.md, issue 26: pipelined round trips).
PIPELINE = 4
# Characters of round trips a batch submitted to an idle writer sends from the caller's thread (Writer.submit):
# what a socket takes without blocking, so the reader never waits there for the follower to read.
DIRECT_CHARS = 64 << 10
# Prepared statements kept per connection (one per table and statement form); the least recently used
# is closed past this (the server's max_prepared_stmt_count is 16,382 by default, for all sessions).
PREPARED_KEPT = 256
# The chain's values (`_chained`): unique in the process, so a session's @cdc_chain never holds the value an
# Execution expects unless that Execution's own round trips set it.
_links = itertools.count(1)
# Characters a round trip leaves for the chain's statement (`_round_trips`).
CHAIN_ROOM = 256
_prepared: weakref.WeakKeyDictionary[pymysql.Connection, OrderedDict[str, int]] = weakref.WeakKeyDictionary()


def execute(conn: pymysql.Connection, statements: list[Statement], origins: list[Origin], max_packet: int,
            durable: Callable[[], None] | None = None) -> None:
    """Run the statements in order, many per round trip; a failure raises StatementFailed.

    A round trip whose statements all have `Origin.overlap` (row changes of a follower transaction
    that a failure before them rolls back with it) is sent while up to PIPELINE - 1 earlier ones still
    wait for their answers; any other round trip waits for every answer before it and its own.
    After a failure the answers still on their way are read off (their statements ran: the caller
    rolls the transaction back), then the failure is raised.

    `max_packet` is the follower's max_allowed_packet: a statement over it is refused
    here, with its size, because the server would drop the connection instead of
    answering (and a reconnect would only meet the same statement again).

    `durable`, if given, is called before the first statement without `Origin.overlap` is sent (the
    module's docstring)."""
    Execution(conn, statements, origins, max_packet, durable).finish()


class Execution:
    """One batch of statements on the follower (execute): its round trips sent in order, their answers read.

    `send_ahead` sends, from the calling thread, the first round trips that need no answer read before them;
    `finish` does the rest. The reader thread does the first when the writer thread is idle: the writer thread
    then wakes while the follower works, instead of before the statements leave (Writer.submit)."""

    def __init__(self, conn: pymysql.Connection, statements: list[Statement], origins: list[Origin],
                 max_packet: int, durable: Callable[[], None] | None = None):
        self.conn = conn
        cut = next((k for k, origin in enumerate(origins) if not origin.overlap), None) if durable else None
        self._guarded = -1  # the round trip (its first statement) that starts with the chain's guard
        if cut and _chainable(statements, origins, cut, max_packet):
            statements, origins, trips, self._guarded = _chained(statements, origins, max_packet, cut)
            self._trips: Iterator[tuple[int, int]] = iter(trips)
        else:
            self._trips = _round_trips(statements, origins, max_packet)
        self.statements, self.origins = statements, origins
        self._durable = durable  # called (once) before the first statement without Origin.overlap is sent
        self._next: _Trip | None = None  # the next round trip, not sent yet
        self._in_flight: deque[_Trip] = deque()
        self._failure: Exception | None = None  # met by send_ahead, raised by finish

    def send_ahead(self, budget: int) -> None:
        """Send round trips while none must wait for an answer and they hold up to `budget` characters
        (so that the socket takes them without blocking); a failure is kept for finish()."""
        try:
            self._send(budget)
        except Exception as e:  # (raised by finish, in the writer thread, as any failure of the batch)
            self._failure = e

    def finish(self) -> None:
        """Send the rest, reading answers where a round trip must wait for them, and read every answer."""
        try:
            if self._failure is not None:
                raise self._failure
            self._send(None)
            while self._in_flight:
                _read(self.conn, self._in_flight.popleft(), self.statements, self.origins)
        except StatementFailed:
            _read_off(self.conn, self._in_flight, self.statements)
            raise

    def _send(self, budget: int | None) -> None:
        """Send the round trips in order. budget None: read the answers a round trip must wait for; else stop
        at such a round trip, or at one that would take the characters sent past `budget`."""
        conn, statements, origins = self.conn, self.statements, self.origins
        while True:
            if self._next is None:
                span = next(self._trips, None)
                if span is None:
                    return
                i, j = span
                overlap = all(origins[k].overlap for k in range(i, j))
                self._next = _Trip(i, j, 0, overlap, overlap or i == self._guarded)
            trip = self._next
            first = statements[trip.first]
            unprepared = isinstance(first, Bulk) and not _is_prepared(conn, first.sql)
            if self._in_flight and (not trip.early or not self._in_flight[-1].overlap or unprepared
                                    or len(self._in_flight) >= PIPELINE):
                if budget is not None:
                    return
                # (a Bulk statement's prepare is a round trip of its own, its answer the next one read)
                _read(conn, self._in_flight.popleft(), statements, origins)
                continue
            if budget is not None:
                budget -= sum(len(statements[k]) for k in range(trip.first, trip.end))
                if unprepared or budget < 0:
                    return
            if self._durable is not None and not trip.overlap:
                self._make_durable()
            try:
                if isinstance(first, Bulk):
                    trip.seq = send_bulk(conn, _statement_id(conn, first.sql), first.types, first.rows)
                else:  # no parameters: the text as it is
                    trip.seq = send_query(conn, ";\n".join(cast(list[str], statements[trip.first:trip.end])))
            except pymysql.err.MySQLError as e:
                raise StatementFailed(e, origins[trip.first]) from None
            self._in_flight.append(trip)
            self._next = None

    def _make_durable(self) -> None:
        """The caller's `durable`, once; if it fails, the answers on their way are read off first (their
        statements ran: the caller rolls the transaction back)."""
        durable, self._durable = self._durable, None
        assert durable is not None
        try:
            durable()
        except BaseException:
            _read_off(self.conn, self._in_flight, self.statements)
            raise


@dataclass(slots=True)
class _Trip:
    """A round trip: statements [first, end), its answer's sequence number once sent; `overlap`: all its
    statements have Origin.overlap (later round trips may be sent while its answer travels); `early`: it may
    be sent while earlier answers travel (overlap, or it starts with the chain's guard)."""

    first: int
    end: int
    seq: int
    overlap: bool
    early: bool


def _is_prepared(conn: pymysql.Connection, sql: str) -> bool:
    kept = _prepared.get(conn)
    return kept is not None and sql in kept


def _statement_id(conn: pymysql.Connection, sql: str) -> int:
    """The id of `sql` prepared on this connection, prepared now if it is not yet (a round trip: only
    while no answer is on its way)."""
    kept = _prepared.get(conn)
    if kept is None:
        kept = _prepared[conn] = OrderedDict()
    stmt_id = kept.get(sql)
    if stmt_id is not None:
        kept.move_to_end(sql)
        return stmt_id
    stmt_id, _ = prepare(conn, sql)
    kept[sql] = stmt_id
    if len(kept) > PREPARED_KEPT:
        close_statement(conn, kept.popitem(last=False)[1])
    return stmt_id


def _round_trips(statements: list[Statement], origins: list[Origin], max_packet: int,
                 room: int = 0, start: int = 0) -> Iterator[tuple[int, int]]:
    """[i, j) ranges of statements, one per round trip: up to MAX_ROUND_TRIP characters (less `room`), a
    Bulk statement alone. BINLOG statements share round trips with anything else: one transaction's row
    events, its checkpoint and its COMMIT travel together (the server stops at the first error, so the
    COMMIT never runs after a failed statement). The ranges count from `start`."""
    cap = min(MAX_ROUND_TRIP, max_packet // 4) - room  # characters: up to 4 bytes each in utf8mb4
    i = 0
    while i < len(statements):
        first = statements[i]
        _check_size(first, origins[i], max_packet)
        if isinstance(first, Bulk):
            yield start + i, start + i + 1
            i += 1
            continue
        j, size = i + 1, len(first)
        while j < len(statements) and size + len(statements[j]) < cap and isinstance(statements[j], str):
            size += len(statements[j]) + 2
            j += 1
        yield start + i, start + j
        i = j


def _chainable(statements: list[Statement], origins: list[Origin], cut: int, max_packet: int) -> bool:
    """Whether the statements before `cut` (all with Origin.overlap) can tell the server that they all ran:
    text (a Bulk round trip holds nothing else), and no count that only the client checks (`expect`: the
    guard would let a COMMIT through after a statement that matched too few rows). And the statement at
    `cut` is text, for the guard to share its round trip. Each leaves room for the chain's statements."""
    return all(isinstance(statements[k], str) and (k == cut or origins[k].expect is None)
               and 4 * (len(statements[k]) + CHAIN_ROOM) < max_packet for k in range(cut + 1))


def _chained(statements: list[Statement], origins: list[Origin], max_packet: int,
             cut: int) -> tuple[list[Statement], list[Origin], list[tuple[int, int]], int]:
    """The statements with the chain (the module's docstring): at the end of each round trip before `cut`, a
    `SET @cdc_chain` that moves the chain to its next value only from the value the round trip before it set;
    a guard starting the round trip of the statement at `cut`, which fails (error 1242) unless the chain holds
    its last value. Returns them, their origins, their round trips (the chain's statements must end theirs)
    and where the guard is."""
    out: list[Statement] = []
    out_origins: list[Origin] = []
    trips: list[tuple[int, int]] = []
    link: int | None = None
    for i, j in _round_trips(statements[:cut], origins[:cut], max_packet, CHAIN_ROOM):
        first = len(out)
        out += statements[i:j]
        out_origins += origins[i:j]
        step = next(_links)
        out.append(f"SET @cdc_chain = {step}" if link is None else
                   f"SET @cdc_chain = IF(@cdc_chain <=> {link}, {step}, NULL)")
        out_origins.append(origins[j - 1])
        trips.append((first, len(out)))
        link = step
    guarded = len(out)
    rest = [f"SET @cdc_guard = (SELECT 1 UNION ALL SELECT 2 FROM DUAL WHERE NOT (@cdc_chain <=> {link}))",
            *statements[cut:]]
    rest_origins = [replace(origins[cut], expect=None, keys=None), *origins[cut:]]
    trips += _round_trips(rest, rest_origins, max_packet, start=guarded)
    return out + rest, out_origins + rest_origins, trips, guarded


def _read(conn: pymysql.Connection, trip: _Trip, statements: list[Statement], origins: list[Origin]) -> None:
    """Read one round trip's answers, checking each statement's count."""
    done = trip.first
    try:
        found = read_result(conn, trip.seq)
        while True:
            origin = origins[done]
            if origin.expect is not None and found != origin.expect:
                _read_rest(conn, statements, done + 1, trip.end)  # they ran too; read off before the rollback
                raise pymysql.err.OperationalError(
                    MISSING_ROW, f"the statement's affected-row count on the follower is {found}, not {origin.expect}")
            done += 1
            if not _answers_left(conn, statements, done, trip.end):
                return
            found = read_result(conn)
    except pymysql.err.MySQLError as e:
        raise StatementFailed(e, origins[min(done, trip.end - 1)]) from None


def _answers_left(conn: pymysql.Connection, statements: list[Statement], done: int, end: int) -> bool:
    """Whether the round trip [.., end) has answers left to read, `done` statements of it answered: the
    server says so, or the last answer was a BINLOG statement's, whose flag MariaDB drops (_BINLOG)."""
    if more_results(conn):
        return True
    last = statements[done - 1]
    return done < end and isinstance(last, str) and last.startswith(_BINLOG)


def _read_rest(conn: pymysql.Connection, statements: list[Statement], done: int, end: int) -> None:
    """Read off a round trip's answers after the one just read; stop at an error (it ends the round trip)."""
    while _answers_left(conn, statements, done, end):
        try:
            read_result(conn)
        except pymysql.err.MySQLError:
            return
        done += 1


def _read_off(conn: pymysql.Connection, in_flight: deque[_Trip], statements: list[Statement]) -> None:
    """Read every answer still on its way after a failure, errors included (the failure's echo: an error
    ends its round trip), so the session's next command meets its own answer; unless the connection is
    gone. (Server errors such as 1032 or 1205 are OperationalErrors too: the class does not say which.)"""
    while in_flight and conn.open:
        trip = in_flight.popleft()
        try:
            read_result(conn, trip.seq)
        except pymysql.err.MySQLError:
            continue
        _read_rest(conn, statements, trip.first + 1, trip.end)


def _check_size(statement: Statement, origin: Origin, max_packet: int) -> None:
    if isinstance(statement, Bulk):
        size = len(statement)  # bytes
    elif 4 * len(statement) < max_packet:
        return  # small whatever its characters: skip encoding it
    else:
        size = len(statement.encode("utf-8", "surrogateescape"))
    if size + 1 > max_packet:  # the packet also holds the command byte
        raise StatementFailed(pymysql.err.OperationalError(
            PACKET_TOO_LARGE, f"a statement of {size:,} bytes is over the follower's max_allowed_packet "
                              f"({max_packet:,} bytes)"), origin)


def max_allowed_packet(conn: pymysql.Connection) -> int:
    """The follower's max_allowed_packet for this session, in bytes."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        return int(one_row(cur)[0])


class Writer:
    """Runs batches of statements on the follower in a thread of its own, in order.

    A failure stops the writer for good: no batch runs after it (the ones queued behind it are dropped), and
    every later submit() or wait() raises it. (Raising it only once let a batch queued before the reader saw
    the failure run after it: the follower committed the failed transaction's earlier statements with a later
    checkpoint, past the change that failed.)

    A batch submitted while the thread is idle has its first round trips sent by the caller (DIRECT_CHARS at
    most): the thread wakes while the follower works on them, not before they leave (0.11-0.17 ms p50 of the
    5k lag, bench/README.md, issue 26, twelfth part).
    """

    def __init__(self, conn: pymysql.Connection, depth: int = 4):
        self.conn = conn
        self.max_packet = max_allowed_packet(conn)
        self._queue: queue.Queue[Execution | None] = queue.Queue(maxsize=depth)
        self._busy = 0  # items queued or running; 0: the thread leaves the connection alone
        self._lock = threading.Lock()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="follower-writer", daemon=True)
        self._thread.start()

    def submit(self, statements: list[Statement], origins: list[Origin],
               durable: Callable[[], None] | None = None) -> None:
        """Queue a batch (blocks while `depth` batches wait); raises an earlier batch's failure. `durable` is
        called before the batch's first statement without Origin.overlap is sent (the module's docstring)."""
        self._raise_failure()
        if statements:
            run = Execution(self.conn, statements, origins, self.max_packet, durable)
            if not self._busy:  # (only this thread queues: the writer thread stays idle until the put below)
                run.send_ahead(DIRECT_CHARS)
            self._put(run)

    def wait(self) -> None:
        """Block until every queued batch ran; raises a failure. The caller may then use the connection."""
        self._queue.join()
        self._raise_failure()

    def close(self) -> None:
        """Stop the thread once the queued batches ran (or failed)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _put(self, item: Execution) -> None:
        with self._lock:
            self._busy += 1
        self._queue.put(item)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._failure is None:  # after a failure, later batches are dropped
                    item.finish()
            except BaseException as e:  # handed to the reader thread, which reports it
                self._failure = e
            finally:
                if item is not None:
                    with self._lock:
                        self._busy -= 1
                self._queue.task_done()
