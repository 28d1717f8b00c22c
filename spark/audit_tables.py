"""What the replica audit compares: each table's columns, rendered as canonical strings by the server.

Every value is compared as a *canonical string* rendered by the server itself
(CAST ... AS CHAR, HEX for bytes, DATETIME(6) in a +00:00 session), so one stored
value gives one string on both sides whatever JDBC or Spark would make of it.
Spark only moves and joins those strings (no Python UDFs: executors need nothing
but the JDBC jar). Topic values (cdc_stream.values.to_param) and server strings
are matched through Column.norm, which maps both to the same Python value. Column
types are read through cdc_stream/column_types.py.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pymysql

from cdc_stream.column_types import BINARY_TYPES, types_of
from cdc_stream.consumer_offsets import SCHEMA as CDC_SCHEMA
from cdc_stream.errors import AuditError
from cdc_stream.filters import TableFilter
from cdc_stream.mysql import quote_ident

SYSTEM_SCHEMAS = {"information_schema", "mysql", "performance_schema", "sys", CDC_SCHEMA}
INT_TYPES = types_of("signed", "year", "bit")  # rendered, matched and reported as integers
FLOAT_TYPES = types_of("float", "double")
Key = tuple  # canonical strings (None for NULL): the PK columns, or the whole row without a PK


@dataclass(frozen=True)
class Column:
    """One column: how the server renders it canonically, and how to match and report it."""

    name: str
    data_type: str
    octets: int | None = None  # BINARY(n): the binlog drops trailing zero bytes, the table keeps them

    def sql(self) -> str:
        """The server-side canonical string of this column (exact for every type)."""
        c, t = quote_ident(self.name), self.data_type
        if t == "bit":
            return f"CAST({c} + 0 AS CHAR)"
        if t in FLOAT_TYPES:  # via DOUBLE: FLOAT AS CHAR keeps only 6 digits, DOUBLE prints round-trip digits
            return f"CAST(CAST({c} AS DOUBLE) AS CHAR)"
        if t in ("datetime", "timestamp"):  # always 6 digits; TIMESTAMP in the session's +00:00
            return f"CAST(CAST({c} AS DATETIME(6)) AS CHAR)"
        if t == "time":
            return f"CAST(CAST({c} AS TIME(6)) AS CHAR)"
        if t in BINARY_TYPES:
            return f"HEX({c})"
        return f"CAST({c} AS CHAR)" if t in INT_TYPES | {"decimal", "date", "json"} else c

    def norm(self, v: Any, from_server: bool = True) -> Hashable:
        """A canonical string (from_server) or a to_param value from the topic -> one comparable value."""
        t = self.data_type
        if v is None:
            return None
        if t in INT_TYPES:
            return int(v)
        if t in FLOAT_TYPES:
            return float(v)
        if t == "decimal":
            return Decimal(v)  # equal decimals are equal whatever their trailing zeros or exponent
        if t in BINARY_TYPES:
            if from_server:
                return bytes.fromhex(v)
            b = bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode()
            return b.ljust(self.octets, b"\0") if t == "binary" and self.octets else b
        s = str(v)
        if t in ("datetime", "timestamp") and len(s) == 19:
            return s + ".000000"  # to_param gives the zero TIMESTAMP without fraction
        if t == "set":  # labels: definition order on the server, sorted on the topic
            return ",".join(sorted(x for x in s.split(",") if x))
        return json.dumps(json.loads(s), sort_keys=True) if t == "json" else s

    def report(self, s: str | None) -> int | str | None:
        """JSON-friendly: integers as numbers, everything else as its canonical string."""
        return int(s) if s is not None and self.data_type in INT_TYPES else s


@dataclass
class Table:
    """A table's columns (in table order) and primary key (in key order, [] for none)."""

    database: str
    name: str
    columns: list[Column]
    pk: list[str]
    rows_estimate: int = 0

    @property
    def key_columns(self) -> list[Column]:
        """What identifies a row: the PK columns, or every column when there is no PK."""
        by_name = {c.name: c for c in self.columns}
        return [by_name[n] for n in self.pk] if self.pk else list(self.columns)

    @property
    def key_index(self) -> list[int]:
        """Positions of the key columns in the canonical row."""
        return [self.columns.index(c) for c in self.key_columns]

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(self.name)}"

    @property
    def range_column(self) -> Column | None:
        """The column reads are split on: the (first) PK column, when it is an integer."""
        first = self.key_columns[0] if self.pk else None
        return first if first is not None and first.data_type in INT_TYPES - {"bit"} else None

    def norm(self, key: Key) -> Key:
        """A key of canonical strings, comparable with keys read from the topic."""
        return tuple(c.norm(v) for c, v in zip(self.key_columns, key))

    def report(self, key: Key) -> list:
        """A key as the JSON report shows it."""
        return [c.report(v) for c, v in zip(self.key_columns, key)]


def select_exprs(leader: Table, side: Table) -> list[str]:
    """Canonical expressions of the leader's columns, rendered from `side` (leader or follower).

    A column the follower lacks becomes NULL plus one marker column, so that every
    follower row then differs from its leader row instead of silently matching.
    """
    have = {c.name: c for c in side.columns}
    exprs = [have[c.name].sql() if c.name in have else "NULL" for c in leader.columns]
    return [*exprs, "'(columns differ)'"] if len(exprs) > sum(c.name in have for c in leader.columns) else exprs


def discover(conn: pymysql.Connection, filt: TableFilter, only: Sequence[str] | None) -> list[Table]:
    """Base tables of a server: the `only` db.table names, or all that `filt` lets through."""
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
        found = {(db, t): rows or 0 for db, t, rows in cur.fetchall() if db not in SYSTEM_SCHEMAS}
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH "
                    "FROM information_schema.COLUMNS ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION")
        columns: dict[tuple, list[Column]] = {}
        for db, t, name, dtype, octets in cur.fetchall():
            columns.setdefault((db, t), []).append(Column(name, dtype.lower(), octets))
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
                    "WHERE CONSTRAINT_NAME = 'PRIMARY' ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION")
        pks: dict[tuple, list[str]] = {}
        for db, t, name in cur.fetchall():
            pks.setdefault((db, t), []).append(name)
    wanted = [tuple(n.split(".", 1)) for n in only] if only is not None else [k for k in found if filt.allows_table(*k)]
    for db_t in wanted:
        if db_t not in found:
            raise AuditError(f"--tables: {'.'.join(db_t)} is not a table on the leader; name tables as db.table")
    return [Table(db, t, columns.get((db, t), []), pks.get((db, t), []), found[(db, t)]) for db, t in wanted]



__all__ = ["AuditError", "Column", "Key", "Table", "discover", "select_exprs"]
