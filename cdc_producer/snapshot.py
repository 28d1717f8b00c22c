"""Initial (or on-demand) consistent copy of existing tables onto the topic.

The snapshot and the binlog stream meet at one exact position: the rows are read
in a consistent-snapshot transaction whose binlog position is known (MariaDB:
START TRANSACTION WITH CONSISTENT SNAPSHOT + Binlog_snapshot_file/position, no
global lock; MySQL: FLUSH TABLES WITH READ LOCK held only while the position is
read). Each table becomes DROP TABLE IF EXISTS + its CREATE TABLE (so a re-run
replaces, never duplicates) and then chunks of rows in primary-key order, each
chunk one transaction on the topic whose last event records the progress. The last one
ends with the table's triggers (`trigger_events`: the DROP dropped the follower's), after
its rows, which they must not fire.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pymysql

from cdc_producer.binlog import LeaderInfo, current_position
from cdc_stream import values
from cdc_stream.column_types import INT_TYPES, column_kind
from cdc_stream.errors import DataError
from cdc_stream.events import ChangeEvent, QuerySession, make_uri
from cdc_stream.filters import TableFilter
from cdc_stream.mysql import connect, one_row, qualified, quote_ident
from cdc_stream.positions import BinlogFile, Position, SnapshotProgress, SnapshotTag
from cdc_stream.profile import LeaderDatabase

if TYPE_CHECKING:
    from cdc_producer.publish import Publisher

@dataclass
class TableInfo:
    """What a snapshot needs to know about one table."""

    db: str
    name: str
    columns: list[str]
    kinds: list[str]
    pk: list[str]
    int_pk: bool  # keyset order equals Python order: a chunk boundary can be resumed
    estimated_rows: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.db}.{self.name}"


def describe_table(conn: pymysql.Connection, db: str, table: str) -> TableInfo:
    """Columns, primary key and row estimate of a table (no columns: it does not exist)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        cols = cur.fetchall()
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (db, table),
        )
        pk = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, table))
        estimate = int((cur.fetchone() or [0])[0] or 0)
    types = {name: data_type.lower() for name, data_type, _, _ in cols}
    return TableInfo(
        db, table, [c[0] for c in cols], [column_kind(c[1], c[2]) for c in cols], pk,
        bool(pk) and all(types[k] in INT_TYPES for k in pk), estimate,
    )


def table_names(conn: pymysql.Connection, filters: TableFilter, only: list[str] | None = None
                ) -> list[tuple[str, str]]:
    """(database, table) of the base tables the filters pass (of `only`, when given), sorted."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            "AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys', 'mysql_cdc') "
            "ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        names = [(db, t) for db, t in cur.fetchall() if filters.allows_table(db, t)]
    if only is not None:
        names = [(db, t) for db, t in names if f"{db}.{t}" in only]
    return names


def for_format(sql: str) -> str:
    """SQL text for a statement PyMySQL formats with parameters (%s): its own % doubled (names may hold one)."""
    return sql.replace("%", "%%")


class Snapshot:
    """A consistent read view of the leader and the binlog position it corresponds to."""

    def __init__(self, db: LeaderDatabase, info: LeaderInfo):
        self.conn = connect(db, "leader", autocommit=False)
        self.flavor = info.flavor
        with self.conn.cursor() as cur:
            # Values come out as the binlog gives them: UTC timestamps, zero dates kept.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if info.flavor == "mariadb":
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {k.lower(): v for k, v in cur.fetchall()}
                # (the place is exact for file:pos comparisons, chunks.py; the GTID state for resuming)
                self.place: BinlogFile | None = BinlogFile(status["binlog_snapshot_file"],
                                                           int(status["binlog_snapshot_position"]))
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)",
                            (status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])))
                self.position = Position(gtid_set=one_row(cur)[0] or "")
            else:
                self.place = None
                cur.execute("FLUSH TABLES WITH READ LOCK")
                try:
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                    self.position = current_position(self.conn, info)
                finally:
                    cur.execute("UNLOCK TABLES")

    def tables(self, filters: TableFilter, only: list[str] | None = None) -> list[TableInfo]:
        """The base tables to copy, sorted by database and name."""
        return [describe_table(self.conn, db, t) for db, t in table_names(self.conn, filters, only)]

    def create_statement(self, t: TableInfo) -> str:
        """SHOW CREATE TABLE, as of now (DDL is not versioned by the snapshot)."""
        with self.conn.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE {qualified(t.db, t.name)}")
            return str(one_row(cur)[1])

    def chunks(self, t: TableInfo, size: int, after: list[Any] | None = None, where: str | None = None
               ) -> Iterator[tuple[list[Any], list[Any] | None]]:
        """(tagged rows, last primary key) per chunk, in primary-key order; memory stays one chunk.

        Tables without a primary key are read with LIMIT/OFFSET inside the same
        snapshot (consistent, but only resumable from their start).
        """
        cols = ", ".join(quote_ident(c) for c in t.columns)
        source = qualified(t.db, t.name)
        pk_idx = [t.columns.index(k) for k in t.pk]
        order = ", ".join(quote_ident(k) for k in t.pk)
        offset = 0
        condition = f" AND ({where})" if where else ""
        while True:
            with self.conn.cursor(pymysql.cursors.SSCursor) as cur:
                if t.pk:
                    bound = "TRUE"
                    if after is not None:
                        bound = f"({for_format(order)}) > ({', '.join(['%s'] * len(t.pk))})"
                    # (formatted with parameters: a % in the names or the condition doubled)
                    cur.execute(for_format(f"SELECT {cols} FROM {source} WHERE ") + bound
                                + for_format(f"{condition} ORDER BY {order} LIMIT {int(size)}"),
                                list(after) if after is not None else [])
                else:
                    cur.execute(f"SELECT {cols} FROM {source} WHERE TRUE{condition} LIMIT {int(size)} OFFSET {offset}")
                raw = cur.fetchall()
            if not raw:
                return
            offset += len(raw)
            after = [raw[-1][i] for i in pk_idx] if t.pk else None
            yield [[values.encode(v, k) for v, k in zip(row, t.kinds)] for row in raw], after
            if len(raw) < size:
                return

    def close(self) -> None:
        try:
            self.conn.rollback()
        finally:
            self.conn.close()


class Progress(Protocol):
    """Per-table progress display (console.TableProgress)."""

    def start(self, table: TableInfo) -> Any: ...
    def advance(self, task: Any, rows: int) -> None: ...
    def finish(self, task: Any) -> None: ...


def copy_tables(publisher: Publisher, snap: Snapshot, tables: list[TableInfo], stream_from: Position,
                resume: SnapshotProgress | None, chunk_size: int, progress: Progress,
                only: list[str] | None = None) -> None:
    """Publish the tables' schema and rows; afterwards `publisher` streams from `stream_from`.

    `resume` is the progress marker of a snapshot a crash interrupted: tables
    before its table are done; its table continues after its last key when that
    key is an integer (else it starts over); this new snapshot reads the rest at
    a later position, so the binlog changes in between are dropped for those
    tables (publisher.windows, kept on the topic until the stream passes them).
    """
    read_at = snap.position.text()
    start = tuple(resume.table.split(".", 1)) if resume else None
    todo = [t for t in tables if start is None or (t.db, t.name) >= start]
    created: set[str] = set()
    for n, t in enumerate(todo):
        after = None
        if resume and (t.db, t.name) == start:
            if resume.table_done:
                continue
            if t.int_pk and resume.last_key is not None:
                after = resume.last_key
        if read_at != stream_from.text() or after is not None:
            publisher.windows.open(t.full_name, snap.position, after)

        def marker(last_key: list[Any] | None, done: bool, t: TableInfo = t, n: int = n) -> SnapshotProgress:
            progress = SnapshotProgress(stream_from=stream_from.text(), read_at=read_at, table=t.full_name,
                                        last_key=last_key if t.int_pk else None, table_done=done,
                                        complete=done and n == len(todo) - 1)
            if only is not None:
                progress.tables = only
            return progress

        # Each batch is published when the next one exists, so the table's last one can say table_done.
        pending: tuple[list[ChangeEvent], str] | None = None
        if after is None:
            pending = (_schema_events(publisher.resource, snap, t, t.db not in created),
                       f"snapshot:{read_at}:{t.full_name}:schema")
            pending[0][-1].snapshot = marker(None, False)
            created.add(t.db)
        task = progress.start(t)
        last_key = after
        for i, (rows, last_key) in enumerate(snap.chunks(t, chunk_size, after)):
            if pending is not None:
                publisher.publish(*pending)
            ev = _rows_event(publisher.resource, t, rows)
            ev.snapshot = marker(last_key, False)
            pending = ([ev], f"snapshot:{read_at}:{t.full_name}:{last_key if t.int_pk else i}")
            progress.advance(task, len(rows))
        if pending is None:  # resumed after the last chunk: a row-less event carries the marker
            pending = ([_rows_event(publisher.resource, t, [])], f"snapshot:{read_at}:{t.full_name}:end")
        for e in pending[0]:
            e.snapshot = SnapshotTag(t.full_name)
        # The triggers come back in the table's last transaction, with the marker that says it is done.
        pending[0].extend(trigger_events(snap.conn, snap.flavor, publisher.resource, t.db, t.name, t.full_name))
        pending[0][-1].snapshot = marker(last_key, True)
        publisher.publish(*pending)
        progress.finish(task)


def _schema_events(resource: str, snap: Snapshot, t: TableInfo, create_db: bool) -> list[ChangeEvent]:
    now = int(time.time() * 1000)
    statements: list[tuple[str | None, str]] = []
    if create_db:
        statements.append((None, f"CREATE DATABASE IF NOT EXISTS {quote_ident(t.db)}"))
    statements += [(t.db, f"DROP TABLE IF EXISTS {qualified(t.db, t.name)}"), (t.db, snap.create_statement(t))]
    events = [ChangeEvent(uri=make_uri(resource, t.db), sequence=0, operation="Query", query=sql, database=db, ts=now,
                          schema=t.db or None)
              for db, sql in statements]
    for e in events:
        e.snapshot = SnapshotTag(t.full_name)
    return events


# sql_mode's names -> bits, as a Query event logs the mode (MariaDB's sql_mode_names; MySQL's bits are the same
# up to PAD_CHAR_TO_FULL_LENGTH, then its own TIME_TRUNCATE_FRACTIONAL).
_SQL_MODE_NAMES = (
    "REAL_AS_FLOAT", "PIPES_AS_CONCAT", "ANSI_QUOTES", "IGNORE_SPACE", "IGNORE_BAD_TABLE_OPTIONS",
    "ONLY_FULL_GROUP_BY", "NO_UNSIGNED_SUBTRACTION", "NO_DIR_IN_CREATE", "POSTGRESQL", "ORACLE", "MSSQL", "DB2",
    "MAXDB", "NO_KEY_OPTIONS", "NO_TABLE_OPTIONS", "NO_FIELD_OPTIONS", "MYSQL323", "MYSQL40", "ANSI",
    "NO_AUTO_VALUE_ON_ZERO", "NO_BACKSLASH_ESCAPES", "STRICT_TRANS_TABLES", "STRICT_ALL_TABLES", "NO_ZERO_IN_DATE",
    "NO_ZERO_DATE", "ALLOW_INVALID_DATES", "ERROR_FOR_DIVISION_BY_ZERO", "TRADITIONAL", "NO_AUTO_CREATE_USER",
    "HIGH_NOT_PRECEDENCE", "NO_ENGINE_SUBSTITUTION", "PAD_CHAR_TO_FULL_LENGTH",
)
_SQL_MODE_LATER = {"mariadb": ("EMPTY_STRING_IS_NULL", "SIMULTANEOUS_ASSIGNMENT", "TIME_ROUND_FRACTIONAL"),
                   "mysql": ("TIME_TRUNCATE_FRACTIONAL",)}


def sql_mode_bits(names: str, flavor: str) -> int:
    """The number a Query event logs for the sql_mode `names` ('A,B', as SHOW CREATE TRIGGER gives it) on a
    `flavor` ("mariadb", "mysql") server; DataError for a name this table lacks."""
    order = _SQL_MODE_NAMES + _SQL_MODE_LATER.get(flavor, ())
    bits = 0
    for name in filter(None, names.upper().split(",")):
        if name not in order:
            raise DataError(f"the leader's sql_mode {name} is unknown to cdc-producer, which cannot copy a trigger "
                            "created under it; recreate the trigger on the follower by hand, or report it")
        bits |= 1 << order.index(name)
    return bits


def trigger_events(conn: pymysql.Connection, flavor: str, resource: str, db: str, table: str,
                   copy: str) -> list[ChangeEvent]:
    """The CREATE TRIGGER of each trigger of db.table, in the order the server fires them, each with the session
    it was created in (sql_mode, charsets and the database's collation, as a native replica has them from the
    leader's Query event), tagged as `copy`'s: DROP TABLE on the follower drops its triggers, and a copy brings
    them back after its last rows (which SQL would otherwise fire them on). The consumer runs them as replicated
    DDL (its [replay] triggers guard, [replay] definer)."""
    with conn.cursor() as cur:
        cur.execute("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s AND "
                    "EVENT_OBJECT_TABLE = %s ORDER BY ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER", (db, table))
        names = [str(r[0]) for r in cur.fetchall()]
        created = []
        for name in names:
            cur.execute(f"SHOW CREATE TRIGGER {qualified(db, name)}")
            row = dict(zip([d[0].lower() for d in cur.description], one_row(cur)))
            by_name = "(SELECT ID FROM information_schema.COLLATIONS WHERE COLLATION_NAME = %s)"
            cur.execute("SELECT (SELECT ID FROM information_schema.COLLATIONS WHERE CHARACTER_SET_NAME = %s "
                        f"AND IS_DEFAULT = 'Yes'), {by_name}, {by_name}",
                        (row["character_set_client"], row["collation_connection"], row["database collation"]))
            client, connection, database = one_row(cur)
            session = QuerySession(sql_mode=sql_mode_bits(str(row["sql_mode"]), flavor),
                                   character_set_client=client, collation_connection=connection,
                                   collation_database=database)
            ev = ChangeEvent(uri=make_uri(resource, db), sequence=0, operation="Query",
                             query=str(row["sql original statement"]), database=db, ts=int(time.time() * 1000),
                             schema=db, session=session)
            ev.snapshot = SnapshotTag(copy)
            created.append(ev)
    return created


def _rows_event(resource: str, t: TableInfo, rows: list[Any]) -> ChangeEvent:
    return ChangeEvent(uri=make_uri(resource, t.db, t.name), sequence=0, operation="Add", rows=rows,
                       columns=t.columns, pk=t.pk, ts=int(time.time() * 1000), schema=t.db, table=t.name)
