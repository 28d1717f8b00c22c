"""Live copies: tables copied chunk by chunk while the binlog streams on (DBLog watermarks).

The producer follows the binlog from the start; a copy reads one chunk of a table at a time
(`SELECT ... WHERE key > after ORDER BY key LIMIT n`), and the chunk joins the stream at its *high
watermark*. On MariaDB the chunk is read in a consistent snapshot of its own (START TRANSACTION WITH
CONSISTENT SNAPSHOT, READ ONLY; rolled back after the chunk: no leader transaction outlives it), and its
high watermark is that snapshot's binlog file:pos (Binlog_snapshot_file/position, which the leader
takes under the same lock as its engine commits): the rows are exactly those of the transactions logged
before it. A plain read followed by the leader's position is not exact there: MariaDB sends a transaction
to binlog readers before its engine commit makes it visible, so the reader could take (and drop, as above
the cursor) a change that the chunk read next does not see yet. Hence the low-watermark rule: when the
reader has already read a transaction past the snapshot's place (Assembler.read_to), the chunk is read
again (a heartbeat past it is no such transaction: Assembler.idle_at only lets the chunk be published). On MySQL
(no such status) the high watermark is the position read right after the SELECT (`gtid_executed`, or SHOW
MASTER STATUS), and that race remains (README). Nothing is written on the leader. Exactness rests on
three rules:

- A table's binlog changes to keys above the copy's cursor (`after`: every key up to it is on the
  topic) are dropped: a later chunk reads those rows, with the changes in them.
- From the moment a chunk is read (the low watermark: the reader is at or before its snapshot) until
  the binlog reader reaches its high watermark, the newest binlog image of each key above the cursor
  is kept (`_Chunk.overrides`: the after-image, or None for a delete). The leader logs whole rows, so
  that image is the row as it stands at the watermark, whatever the SELECT saw; the chunk is emitted
  with those images in place of its rows.
- The chunk is published when the reader's position reaches the high watermark, between two
  transactions; the cursor then moves to the chunk's last key, and later changes to keys up to it
  stream as usual.

A change that moves a key across the cursor becomes a Delete (of the old key, on the topic) or an
Add (of the new key, not on the topic yet). Keys compare as integers, so chunked copies need a primary key
of integer columns; other tables (no primary key, or one with strings) are read whole in one
START TRANSACTION WITH CONSISTENT SNAPSHOT, whose binlog position is exact (MariaDB's
Binlog_snapshot_*; read again, like a chunk, when the reader is past it): that read is as long as the
table is (the documented limit).

With `[snapshot] parallel = N`, N chunks are read at once, by key range (their bounds from one index
scan), each on a connection of its own (in a snapshot of its own), and published in key order once the
reader is past the latest of their snapshots (read again when it was past the earliest).

A copy with a condition (a signal's `where`) reads only the matching rows; the binlog images cannot be
matched against SQL, so none of the table's changes is dropped meanwhile, and a chunk whose key range
changed between its read and its high watermark is read again instead of merged. The rows of an XA
transaction reach `rows` at its XA COMMIT (assemble.py), where the leader makes them visible.

Every chunk's rows *replace* the table's rows with a key in (after, upto] (positions.SnapshotChunk):
a consumer deletes that range and inserts the rows, so a re-copy of a live, damaged table ends equal
to the leader. The cursors ride on every transaction's last record (`copying`), so a producer killed
mid-copy continues after the last chunk on the topic.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pymysql

from cdc_producer.binlog import LeaderInfo, current_position
from cdc_producer.progress import CopyProgress, save
from cdc_producer.snapshot import Snapshot, TableInfo, describe_table, for_format, trigger_events
from cdc_stream import values
from cdc_stream.events import ChangeEvent, make_uri
from cdc_stream.mysql import connect, qualified, quote_ident
from cdc_stream.positions import BinlogFile, CopyCursor, Copying, Position, SnapshotChunk, SnapshotTag
from cdc_stream.profile import LeaderDatabase

_NO_TABLE = 1146


def int_key(image: list[Any], idx: list[int]) -> tuple[int, ...]:
    """A row's integer primary key, from its tagged values."""
    return tuple(next(iter(image[i].values())) for i in idx)


def split_rows(operation: str, rows: list[Any], idx: list[int], after: tuple[int, ...] | None
               ) -> list[tuple[str, list[Any]]]:
    """The part of a row event the topic takes while the copy's cursor is at `after` (None: no key yet).

    Changes to keys up to the cursor stay; changes above it are dropped (a chunk reads them later);
    an update that moves a key across the cursor becomes a Delete of the old key or an Add of the
    new one. Consecutive rows of one kind stay in one event, in order."""

    def copied(image: list[Any]) -> bool:
        return after is not None and int_key(image, idx) <= after

    out: list[tuple[str, list[Any]]] = []

    def put(op: str, row: Any) -> None:
        if out and out[-1][0] == op:
            out[-1][1].append(row)
        else:
            out.append((op, [row]))

    for row in rows:
        if operation == "Update":
            before, after_image = row
            b, a = copied(before), copied(after_image)
            if b and a:
                put("Update", row)
            elif b:
                put("Delete", before)
            elif a:
                put("Add", after_image)
        elif copied(row):
            put(operation, row)
    return out


def record_overrides(operation: str, rows: list[Any], idx: list[int], after: tuple[int, ...] | None,
                     overrides: dict[tuple[int, ...], list[Any] | None]) -> None:
    """Keep the newest image of each key above the cursor (None: the row is gone), in binlog order."""
    for row in rows:
        if operation == "Update":
            before, image = row
            kb, ka = int_key(before, idx), int_key(image, idx)
            if kb != ka and (after is None or kb > after):
                overrides[kb] = None
            if after is None or ka > after:
                overrides[ka] = image
        else:
            k = int_key(row, idx)
            if after is None or k > after:
                overrides[k] = row if operation == "Add" else None


def merge_chunk(rows: list[list[Any]], idx: list[int], after: tuple[int, ...] | None, upto: tuple[int, ...] | None,
                overrides: dict[tuple[int, ...], list[Any] | None]) -> list[list[Any]]:
    """The chunk's rows as they stand at its high watermark: the rows read, with the newest binlog image
    of each key in (after, upto] in their place (or without them, when deleted), in key order."""
    merged = {int_key(r, idx): r for r in rows}
    for k, image in overrides.items():
        if (after is not None and k <= after) or (upto is not None and k > upto):
            continue
        if image is None:
            merged.pop(k, None)
        else:
            merged[k] = image
    return [merged[k] for k in sorted(merged)]


def _ident(name: str) -> str:
    return for_format(quote_ident(name))


def _table(t: TableInfo) -> str:
    return for_format(qualified(t.db, t.name))


def _at_or_after(place: BinlogFile, than: BinlogFile) -> bool:
    """Whether the binlog file:pos `place` is at or after `than`."""
    return than.key() <= place.key()


def foreign_keys(conn: pymysql.Connection) -> list[tuple[str, str]]:
    """(child, parent) of every foreign key on the leader ("db.table" each; a table referencing itself too)."""
    with conn.cursor() as cur:
        cur.execute("SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME "
                    "FROM information_schema.KEY_COLUMN_USAGE WHERE REFERENCED_TABLE_NAME IS NOT NULL "
                    "ORDER BY 1, 2, 3, 4")
        return [(f"{a}.{b}", f"{c}.{d}") for a, b, c, d in cur.fetchall()]


def foreign_key_problem(links: list[tuple[str, str]], copied: list[str], streamed: Callable[[str], bool]
                        ) -> str | None:
    """Why tables joined by foreign keys cannot be copied live (None: none is), or the foreign keys named.

    A live copy cannot keep a foreign key whose two ends both reach the follower when one end is copied:
    a streamed row can name a row of the other table that no chunk has copied yet (the follower's check
    fails; a re-copy's stale rows can block a streamed delete the leader allowed), and the leader does
    not log what ON DELETE/UPDATE CASCADE or SET NULL change, so a chunk read before such a change
    carries rows the leader no longer has. `streamed`: whether a table reaches the follower ([filters])."""
    wanted = set(copied)
    joined = [(child, parent) for child, parent in links
              if (child in wanted or parent in wanted) and streamed(child) and streamed(parent)]
    if not joined:
        return None
    return ", ".join(f"{child} -> {parent}" for child, parent in joined)


class CopyError(Exception):
    """Reading a chunk of `table` failed with the server error `error`."""

    def __init__(self, table: str, error: pymysql.err.MySQLError):
        super().__init__(f"copying {table}: {error}")
        self.table, self.error = table, error


@dataclass
class _Chunk:
    """Chunks read (`parts`: (after, upto, rows) in key order; several with [snapshot] parallel), waiting
    for the binlog reader to reach their high watermark; `after`/`upto` bound them all."""

    table: str
    after: tuple[int, ...] | None
    upto: tuple[int, ...] | None  # None: the table's end (the chunk came back short)
    high: Position
    # MariaDB: the binlog file:pos of the consistent snapshot the chunk was read in (the high watermark; the
    # reader's `read_to` is compared with it, file:pos being exact where GTID states are not ordered)
    at: BinlogFile | None = None
    low: BinlogFile | None = None  # the earliest of its reads' snapshots (several with [snapshot] parallel)
    parts: list[tuple[tuple[int, ...] | None, tuple[int, ...] | None, list[list[Any]]]] = field(default_factory=list)
    overrides: dict[tuple[int, ...], list[Any] | None] = field(default_factory=dict)
    whole: list[list[list[Any]]] | None = None  # a table read whole (no integer key): its chunks


@dataclass
class TableCopy:
    """Progress of one table's copy, for status and metrics."""

    rows: int = 0
    estimated: int = 0
    started: float = field(default_factory=time.monotonic)

    def eta(self) -> float | None:
        """Seconds left at the rate so far (None: not known yet)."""
        elapsed = time.monotonic() - self.started
        if self.rows == 0 or elapsed <= 0 or self.estimated <= self.rows:
            return None
        return (self.estimated - self.rows) / (self.rows / elapsed)


class LiveCopy:
    """The live copies in progress: what the Assembler asks of each row event of a copied table, and
    what the run loop drives (`step`)."""

    def __init__(self, db: LeaderDatabase, info: LeaderInfo, resource: str, chunk_size: int,
                 copying: Copying | None = None, rate_limit: float = 0.0, parallel: int = 1):
        self.db, self.info, self.resource, self.chunk_size = db, info, resource, chunk_size
        self.cursors: Copying = dict(copying or {})
        self.rate_limit = rate_limit  # rows per second; 0: as fast as the leader answers
        self.parallel = parallel  # chunks of one table read at once, each on a connection of its own
        self._workers: list[pymysql.Connection] = []
        self.progress: dict[str, TableCopy] = {}
        self.paused = False
        self._tables: dict[str, TableInfo] = {}
        self._chunk: _Chunk | None = None
        self._conn: pymysql.Connection | None = None
        self._next_read = 0.0
        self._where: str | None = None  # the condition of the copy a chunk is being read for
        self.copied_rows: dict[str, int] = {}  # table -> rows copied by this process, every copy (metrics)
        self.rereads = 0  # chunks of copies with a condition read again (their range changed in flight)
        self.behind = 0  # chunks read again because the reader was past their snapshot (see step)

    def __bool__(self) -> bool:
        return bool(self.cursors)

    # -- requests ------------------------------------------------------------------------------

    def request(self, tables: list[str], recopy: bool, where: str | None = None) -> list[str]:
        """Start copying `tables` ("db.table"; with `where`, only their rows matching that leader SQL
        condition); a copy in progress of one of them starts over. Returns the copies' ids."""
        ids = []
        for t in tables:
            if self._chunk is not None and self._chunk.table == t:
                self._chunk = None
            copy_id = uuid.uuid4().hex[:12]
            self.cursors[t] = CopyCursor(copy=copy_id, after=None, recopy=recopy, where=where)
            self.progress.pop(t, None)
            self._tables.pop(t, None)
            ids.append(copy_id)
        return ids

    def stop(self, tables: list[str] | None = None) -> None:
        """Abandon copies (all when `tables` is None); their tables stream every change again."""
        for t in list(self.cursors) if tables is None else tables:
            self.cursors.pop(t, None)
            if self._chunk is not None and self._chunk.table == t:
                self._chunk = None

    def report(self) -> list[CopyProgress]:
        """The copies in progress, with rows copied and ETA where known."""
        out = []
        for table, cursor in self.cursors.items():
            prog = self.progress.get(table)
            out.append(CopyProgress(table=table, copy=cursor.copy, after=cursor.after,
                                    rows=prog.rows if prog else None, estimated_rows=prog.estimated if prog else None,
                                    eta_seconds=prog.eta() if prog else None, paused=self.paused,
                                    recopy=cursor.recopy))
        return out

    def save_report(self, path: Path) -> None:
        """Write `report()` for `--status`."""
        save(path, self.report())

    def state(self) -> Copying:
        """The cursors, for a transaction's last record."""
        return {t: msgspec.structs.replace(c) for t, c in self.cursors.items()}

    # -- the Assembler's side ----------------------------------------------------------------

    def holds(self, table: str) -> bool:
        """Whether `table` is being copied (its row events go through `rows`)."""
        return table in self.cursors

    def rows(self, table: str, operation: str, columns: list[str], pk: list[str], rows: list[Any]
             ) -> list[tuple[str, list[Any]]]:
        """What the topic takes of a row event of a table being copied (split_rows), noting the
        newest images for the chunk in flight."""
        cursor = self.cursors[table]
        info = self._describe(table)
        if not info.int_pk or pk != info.pk:
            # Read whole: nothing of it is on the topic before its copy ends.
            return []
        idx = [columns.index(k) for k in pk]
        after = tuple(cursor.after) if cursor.after is not None else None
        chunk = self._chunk
        if chunk is not None and chunk.table == table and chunk.whole is None:
            record_overrides(operation, rows, idx, after, chunk.overrides)
        if cursor.where is not None:
            # A copy of the rows matching a condition: the binlog images cannot be matched against it (it is
            # SQL), so every change streams, and a chunk whose key range changed while it was in flight is
            # read again (_emit) rather than merged.
            return [(operation, rows)]
        return split_rows(operation, rows, idx, after)

    def starting(self) -> bool:
        """Whether a copy has no chunk on the topic yet (its chunks will read every row as of later)."""
        return any(c.after is None for c in self.cursors.values())

    def schema_changed(self, table: str) -> None:
        """DDL on a table being copied: a chunk read before it is read again, with the new columns."""
        if table in self.cursors:
            self._tables.pop(table, None)
            if self._chunk is not None and self._chunk.table == table:
                self._chunk = None

    # -- the run loop's side -----------------------------------------------------------------

    def step(self, position: Position, publish: Callable[[list[ChangeEvent], str], None],
             read_to: BinlogFile | None = None, idle_at: BinlogFile | None = None) -> bool:
        """Publish the chunk in flight once the reader is at its high watermark, and read the next one.
        Returns whether a chunk was published (call again: the next may be ready at once).

        `position`: the reader's position (after its last transaction); `read_to`: the binlog file:pos after
        the last transaction it read, `idle_at`: where the leader's heartbeat since said its binlog ends
        (Assembler; MariaDB's chunks compare them with their snapshot's).
        A failed read raises CopyError (the chunk is read again on the next call, on new connections)."""
        snapshots = self.info.flavor == "mariadb"
        if (self._chunk is None and self.cursors and not self.paused and time.monotonic() >= self._next_read
                and (read_to or idle_at or not snapshots)):  # (MariaDB: not before the reader's file:pos is known)
            table = next(iter(self.cursors))
            try:
                self._read(position)
            except pymysql.err.MySQLError as e:
                self._chunk = None
                self.close()
                raise CopyError(table, e) from None
            if self._chunk is not None and self._chunk.low is not None and read_to is not None \
                    and not _at_or_after(self._chunk.low, read_to):
                # The reader is past the snapshot: it read (and dropped, as above the cursor) a transaction
                # the leader had logged but not yet committed in its engine when the snapshot was taken.
                # The chunk lacks it and no binlog image would restore it: read the chunk again.
                self._chunk = None
                self.behind += 1
                return False
        chunk = self._chunk
        if chunk is None:
            return False
        if chunk.at is not None:
            if not any(p is not None and _at_or_after(p, chunk.at) for p in (read_to, idle_at)):
                return False
        elif not (position == chunk.high or position.passed(chunk.high)):
            return False
        self._chunk = None
        if self._changed_under(chunk):
            self.rereads += 1
            return True  # read again now, at a later high watermark
        self._emit(chunk, publish)
        return True

    def _changed_under(self, chunk: _Chunk) -> bool:
        """Whether a chunk of a copy with a condition saw a change to a key of its range between its read and
        its high watermark: the rows it read may no longer be the matching ones, so it is read again."""
        cursor = self.cursors.get(chunk.table)
        if cursor is None or cursor.where is None or chunk.whole is not None:
            return False
        return any((chunk.after is None or k > chunk.after) and (chunk.upto is None or k <= chunk.upto)
                   for k in chunk.overrides)

    def _describe(self, table: str) -> TableInfo:
        info = self._tables.get(table)
        if info is None:
            db, name = table.split(".", 1)
            info = self._tables[table] = describe_table(self._leader(), db, name)
        return info

    def _leader(self) -> pymysql.Connection:
        if self._conn is None or not self._conn.open:  # (PyMySQL closes it on a lost connection)
            self._conn = self._connect()
        return self._conn

    def _connect(self) -> pymysql.Connection:
        conn = connect(self.db, "leader", autocommit=True)
        with conn.cursor() as cur:
            # Values come out as the binlog gives them: UTC timestamps, zero dates kept.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION sql_mode = ''")
            # A chunk's snapshot holds for its whole read only under REPEATABLE READ (the server's default may differ).
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return conn

    def _read(self, position: Position) -> None:
        table = next(iter(self.cursors))
        cursor = self.cursors[table]
        conn = self._leader()
        try:
            info = self._describe(table)
            self.progress.setdefault(table, TableCopy(estimated=info.estimated_rows))
            if not info.columns:
                raise pymysql.err.ProgrammingError(_NO_TABLE, "no such table")
            self._where = cursor.where
            if not info.int_pk:
                self._chunk = self._read_whole(info, cursor)
                return
            after = tuple(cursor.after) if cursor.after is not None else None
            self._chunk = _Chunk(table, after, None, Position())
            if self.parallel > 1:
                self._chunk.parts, places = self._read_parallel(info, after)
                self._set_high(self._chunk, conn, places)
                self._chunk.upto = self._chunk.parts[-1][1]
                if self.rate_limit > 0:
                    rows_read = sum(len(p[2]) for p in self._chunk.parts)
                    self._next_read = time.monotonic() + rows_read / self.rate_limit
                return
            rows, place = self._select_at(conn, info, after)
            self._set_high(self._chunk, conn, [place])
        except pymysql.err.ProgrammingError as e:
            if e.args[0] != _NO_TABLE:
                raise
            self._chunk = None  # dropped meanwhile: nothing left to copy (its DROP is on the topic)
            self.cursors.pop(table, None)
            return
        idx = [info.columns.index(k) for k in info.pk]
        chunk = self._chunk
        chunk.upto = int_key(rows[-1], idx) if len(rows) >= self.chunk_size else None
        chunk.parts = [(after, chunk.upto, rows)]
        if self.rate_limit > 0:
            self._next_read = time.monotonic() + len(rows) / self.rate_limit

    def _set_high(self, chunk: _Chunk, conn: pymysql.Connection, places: list[BinlogFile | None]) -> None:
        """The chunk's high watermark: the latest of its reads' snapshots (MariaDB), else the leader's
        position now (after the reads)."""
        known = [p for p in places if p is not None]
        if known and len(known) == len(places):
            chunk.at = chunk.low = known[0]
            for p in known[1:]:
                chunk.at = p if _at_or_after(p, chunk.at) else chunk.at
                chunk.low = p if _at_or_after(chunk.low, p) else chunk.low
            chunk.high = Position(binlog=chunk.at)
            # (published once the reader is past every read's snapshot; each read's rows are exact at its own,
            # and the binlog images from the earliest on are applied to all: the newest image of a key wins)
        else:
            chunk.high = current_position(conn, self.info)

    def _read_parallel(self, t: TableInfo, after: tuple[int, ...] | None
                       ) -> tuple[list[tuple[tuple[int, ...] | None, tuple[int, ...] | None, list[list[Any]]]],
                                  list[BinlogFile | None]]:
        """`parallel` chunks above `after`, read at once by key range: the ranges' bounds come from one
        index scan (every chunk_size-th key), each range is read on a connection of its own (in a snapshot of
        its own on MariaDB: the places are theirs)."""
        from concurrent.futures import ThreadPoolExecutor

        order = ", ".join(_ident(k) for k in t.pk)
        conditions, args = self._conditions(order, after)
        inner = (f"SELECT {order}, ROW_NUMBER() OVER (ORDER BY {order}) AS cdc_rn FROM {_table(t)}"
                 + (" WHERE " + " AND ".join(conditions) if conditions else "")
                 + f" ORDER BY {order} LIMIT {int(self.chunk_size * self.parallel)}")
        with self._leader().cursor() as cur:
            cur.execute(f"SELECT * FROM ({inner}) AS b WHERE MOD(cdc_rn, {int(self.chunk_size)}) = 0 ORDER BY cdc_rn",
                        args)
            bounds: list[tuple[int, ...] | None] = [tuple(int(v) for v in row[:-1]) for row in cur.fetchall()]
        if len(bounds) < self.parallel:
            bounds.append(None)  # fewer keys left than the ranges take: the last range runs to the end
        ranges = list(zip([after] + bounds[:-1], bounds))
        while len(self._workers) < len(ranges):
            self._workers.append(self._connect())
        with ThreadPoolExecutor(max_workers=len(ranges)) as pool:
            reads = [pool.submit(self._select_at, self._workers[i], t, lo, hi)
                     for i, (lo, hi) in enumerate(ranges)]
            results = [f.result() for f in reads]
        parts = [(lo, hi, rows) for (lo, hi), (rows, _) in zip(ranges, results)]
        lo, hi, rows = parts[-1]
        if hi is None and len(rows) >= self.chunk_size:  # rows came since the bounds were read: more chunks follow
            parts[-1] = (lo, int_key(rows[-1], [t.columns.index(k) for k in t.pk]), rows)
        return parts, [place for _, place in results]

    def _conditions(self, order: str, after: tuple[int, ...] | None) -> tuple[list[str], list[Any]]:
        conditions = []
        args: list[Any] = []
        if self._where is not None:  # (checked: signals.where_problem, and a LIMIT 0 read on the leader)
            conditions.append(f"({for_format(self._where)})")
        if after is not None:
            conditions.append(f"({order}) > ({', '.join(['%s'] * len(after))})")
            args += list(after)
        return conditions, args

    def _select_at(self, conn: pymysql.Connection, t: TableInfo, after: tuple[int, ...] | None,
                   upto: tuple[int, ...] | None = None) -> tuple[list[list[Any]], BinlogFile | None]:
        """One chunk (`_select`) and, on MariaDB, the binlog file:pos it is exact at: it is read in a consistent
        snapshot (one chunk long), whose Binlog_snapshot_file/position the leader reports under the same
        lock as the engine commits, so the rows are those of exactly the transactions logged before it. (A
        plain read is not: MariaDB sends a transaction to binlog readers before its engine commit makes it
        visible, so a read could miss a change the binlog reader had already dropped.)"""
        if self.info.flavor != "mariadb":
            return self._select(conn, t, after, upto), None
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                rows = self._select(conn, t, after, upto)
            finally:
                if conn.open:
                    conn.rollback()  # (read only: nothing to commit)
        return rows, BinlogFile(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))

    def _select(self, conn: pymysql.Connection, t: TableInfo, after: tuple[int, ...] | None,
                upto: tuple[int, ...] | None = None) -> list[list[Any]]:
        """One chunk: the rows above `after` (up to `upto`, or chunk_size of them), in key order."""
        cols = ", ".join(_ident(c) for c in t.columns)
        order = ", ".join(_ident(k) for k in t.pk)
        conditions, args = self._conditions(order, after)
        if upto is not None:
            conditions.append(f"({order}) <= ({', '.join(['%s'] * len(upto))})")
            args += list(upto)
        sql = f"SELECT {cols} FROM {_table(t)}"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += f" ORDER BY {order}"
        if upto is None:
            sql += f" LIMIT {int(self.chunk_size)}"
        with conn.cursor() as cur:
            cur.execute(sql, args)  # (always formatted: the names' and the condition's % are doubled)
            raw = cur.fetchall()
        return [[values.encode(v, k) for v, k in zip(row, t.kinds)] for row in raw]

    def _read_whole(self, t: TableInfo, cursor: CopyCursor) -> _Chunk:
        """A table without an integer key: one consistent read, at its exact binlog position."""
        snap = Snapshot(self.db, self.info)
        try:
            parts = [rows for rows, _ in snap.chunks(t, self.chunk_size)]
            place = snap.place
        finally:
            snap.close()
        return _Chunk(t.full_name, None, None, snap.position, at=place, low=place, whole=parts or [[]])

    def _emit(self, chunk: _Chunk, publish: Callable[[list[ChangeEvent], str], None]) -> None:
        cursor = self.cursors[chunk.table]
        info = self._tables[chunk.table]
        prog = self.progress.setdefault(chunk.table, TableCopy(estimated=info.estimated_rows))
        if chunk.whole is not None:
            for i, rows in enumerate(chunk.whole):
                last = i == len(chunk.whole) - 1
                marker = SnapshotChunk(table=chunk.table, copy=cursor.copy, first=i == 0, done=last,
                                       recopy=cursor.recopy, append=i > 0)
                if last:
                    self.cursors.pop(chunk.table)
                publish([self._event(info, rows, marker), *self._triggers(cursor, info, last)],
                        f"copy:{cursor.copy}:{i}")
                prog.rows += len(rows)
            self.copied_rows[chunk.table] = self.copied_rows.get(chunk.table, 0) + sum(len(r) for r in chunk.whole)
            return
        idx = [info.columns.index(k) for k in info.pk]
        for after, upto, read in chunk.parts:
            rows = merge_chunk(read, idx, after, upto, chunk.overrides)
            done = upto is None
            marker = SnapshotChunk(table=chunk.table, copy=cursor.copy, after=list(after) if after else None,
                                   upto=list(upto) if upto else None, first=after is None, done=done,
                                   recopy=cursor.recopy, where=cursor.where)
            if done:
                self.cursors.pop(chunk.table)
            else:
                cursor.after = list(upto or ())
            publish([self._event(info, rows, marker), *self._triggers(cursor, info, done)],
                    f"copy:{cursor.copy}:{marker.after}")
            prog.rows += len(rows)
            self.copied_rows[chunk.table] = self.copied_rows.get(chunk.table, 0) + len(rows)

    def _event(self, t: TableInfo, rows: list[list[Any]], marker: SnapshotChunk) -> ChangeEvent:
        ev = ChangeEvent(uri=make_uri(self.resource, t.db, t.name), sequence=0, operation="Add", rows=rows,
                         columns=t.columns, pk=t.pk, ts=int(time.time() * 1000), schema=t.db, table=t.name)
        ev.snapshot = marker
        return ev

    def _triggers(self, cursor: CopyCursor, t: TableInfo, done: bool) -> list[ChangeEvent]:
        """After an initial copy's last rows, in its transaction: the table's triggers, which its DROP TABLE
        dropped on the follower (snapshot.trigger_events)."""
        if not done or cursor.recopy:
            return []
        return trigger_events(self._leader(), self.info.flavor, self.resource, t.db, t.name, t.full_name)

    def schema_events(self, table: str, recopy: bool) -> list[ChangeEvent]:
        """The DDL before a copy: CREATE DATABASE IF NOT EXISTS, then DROP TABLE + CREATE TABLE (an
        initial copy: its triggers come back with its last chunk, `_triggers`) or CREATE TABLE IF NOT EXISTS
        (a re-copy keeps the live table and its triggers)."""
        conn = self._leader()
        db, name = table.split(".", 1)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SHOW CREATE TABLE {qualified(db, name)}")
                row = cur.fetchone()
        except pymysql.err.ProgrammingError as e:
            if e.args[0] != _NO_TABLE:
                raise
            self.stop([table])  # dropped meanwhile: nothing to copy
            return []
        create = str(row[1]) if row else ""
        statements: list[tuple[str | None, str]] = [(None, f"CREATE DATABASE IF NOT EXISTS {quote_ident(db)}")]
        if recopy:
            statements.append((db, create.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)))
        else:
            statements += [(db, f"DROP TABLE IF EXISTS {qualified(db, name)}"), (db, create)]
        now = int(time.time() * 1000)
        events = [ChangeEvent(uri=make_uri(self.resource, d), sequence=0, operation="Query", query=sql, database=d,
                              ts=now, schema=d or None) for d, sql in statements]
        for ev in events:
            ev.snapshot = SnapshotTag(table)
        return events

    def close(self) -> None:
        for conn in self._workers:
            conn.close()
        self._workers = []
        if self._conn is not None:
            self._conn.close()
            self._conn = None
