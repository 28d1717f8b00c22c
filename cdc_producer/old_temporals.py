"""The fractional-second precision of old-format TIME, DATETIME and TIMESTAMP columns, which table maps leave out.

A MariaDB table created with mysql56_temporal_format=OFF keeps MariaDB's pre-10.1 formats (binlog types 11
TIME, 12 DATETIME, 7 TIMESTAMP, without metadata; MySQL's pre-5.6 tables have these types too, never with
fractions): how many bytes a value takes, and what they mean, depend on the column's precision (0-6), which
only the table's definition says (a native replica reads its own copy of the table; unpack.py reads the
formats). `Precisions` learns it from the CREATE TABLE statements the binlog carries before the rows: the
definition the rows were written with, even when the table is dropped or replaced right after (as MariaDB's
own tests do). Any other DDL naming a table forgets what was learnt of it. A table it knows nothing of
(created before the producer started reading, by CREATE ... LIKE/SELECT, or ALTERed since) is read from the
leader's information_schema: its current definition, which must have the table map's columns. One changed
since its rows were logged to another precision of the same size would decode wrongly: docs/compatibility.md
says so.
"""

from __future__ import annotations

import re
from typing import Any

import pymysql
from pymysqlreplication.constants import FIELD_TYPE

from cdc_stream.classify import Statement
from cdc_stream.errors import DataError

OLD_TEMPORAL_TYPES = frozenset({FIELD_TYPE.TIME, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP})
UNREAD_LIMIT = 100  # statements kept unread at most: memory stays bounded on a DDL-heavy stream
_TEMPORAL_WORD = re.compile(r"\b(TIME|DATETIME|TIMESTAMP)\b", re.IGNORECASE)


class Precisions:
    """Old-format temporal columns' precisions, by table: learnt from the binlog's CREATE TABLE, else asked."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], dict[str, int]] = {}
        # DDL seen and not yet read, in binlog order. Reading one parses it (sqlglot: ~0.1-0.2 s to import on a
        # program's first DDL); only a table map with old-format columns needs what they say, which most streams
        # never carry, so they are read when one comes (or when many are waiting).
        self._unread: list[Statement] = []

    def saw(self, stmt: Statement) -> None:
        """A statement the binlog carries, in binlog order (every one, whether it flows or not)."""
        if stmt.is_ddl:
            self._unread.append(stmt)
            if len(self._unread) >= UNREAD_LIMIT:
                self._read()

    def _read(self) -> None:
        unread, self._unread = self._unread, []
        for stmt in unread:
            self._learn(stmt)

    def _learn(self, stmt: Statement) -> None:
        for db, table in stmt.targets:
            if db is not None and table is not None:
                self._known.pop((db, table), None)
        if not _TEMPORAL_WORD.search(stmt.text):
            return  # no temporal column to learn of: no parse
        for effect in stmt.table_effects:
            # CREATE TABLE IF NOT EXISTS of a table that exists leaves the existing one: nothing learnt.
            if (effect.kind == "create" and effect.fractions is not None and not effect.if_not_exists
                    and effect.database is not None and effect.table is not None):
                self._known[(effect.database, effect.table)] = {name.lower(): dec for name, dec in effect.fractions}

    def of(self, table: Any, conn: Any) -> list[int | None]:
        """Per column of a table map (a pymysqlreplication Table): the precision of each old-format temporal
        column, None for the others. `conn`: the leader (None: 0, the only precision MySQL has for them);
        DataError when neither the binlog nor the leader says."""
        self._read()
        old = [c.type in OLD_TEMPORAL_TYPES for c in table.columns]
        names = [(c.name or "").lower() for c in table.columns]
        known = self._known.get((table.schema, table.table))
        if known is not None and all(name in known for name, is_old in zip(names, old) if is_old):
            return [known[name] if is_old else None for name, is_old in zip(names, old)]
        if conn is None:
            return [0 if is_old else None for is_old in old]
        with conn.cursor(pymysql.cursors.Cursor) as cur:  # (rows as tuples, whatever the connection's default)
            cur.execute("SELECT COLUMN_NAME, DATETIME_PRECISION FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                        (table.schema, table.table))
            rows = cur.fetchall()
        found = [(str(name).lower(), precision) for name, precision in rows]
        if [name for name, _ in found] != names or any(is_old and precision is None
                                                       for (_, precision), is_old in zip(found, old)):
            now = "is gone" if not found else "has other columns now"
            raise DataError(
                f"{table.schema}.{table.table} has TIME/DATETIME/TIMESTAMP columns in MariaDB's pre-10.1 format "
                "(created with mysql56_temporal_format=OFF), whose precision the binlog does not give and only the "
                f"table's definition does; the table {now} on the leader, and the producer did not read the CREATE "
                "TABLE that made it; fix: on the leader, ALTER TABLE ... FORCE with mysql56_temporal_format=ON "
                "rewrites the columns in the current format, then copy the table again (cdc-producer --snapshot)")
        return [int(precision) if is_old else None for (_, precision), is_old in zip(found, old)]


PRECISIONS = Precisions()  # the producer's one: fed by the Assembler's Query events, read by decode.py


__all__ = ["OLD_TEMPORAL_TYPES", "PRECISIONS", "Precisions"]
