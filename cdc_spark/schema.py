"""Source tables' columns, and the Spark / Arrow type each MySQL column type becomes.

The declared types come from the leader's information_schema (a producer profile's
[database]; a consumer profile's follower holds the same tables), read through the table every
program shares (cdc_stream/column_types.py): the topic carries each
value's tag (docs/events.md) but not DECIMAL(p,s), an integer's width or a text column's
charset. Where a Spark type cannot hold a value MySQL stores (a zero date, bytes a text
charset does not define), the typed column is NULL and the value's tag goes to the row's
`_cdc_raw` column (see convert.py), so nothing is lost.

| MySQL | Spark |
|---|---|
| TINYINT, SMALLINT, MEDIUMINT, INT, BIGINT | byte, short, int, int, long |
| ... UNSIGNED | short, int, int, long, decimal(20,0) |
| DECIMAL(p,s), p <= 38 | decimal(p,s) |
| DECIMAL(p,s), p > 38 | string: all digits, exactly s decimals (Spark and Delta stop at 38 digits) |
| FLOAT, DOUBLE | float, double |
| BIT(n) | long (n < 64), decimal(20,0) (n = 64) |
| YEAR | short |
| DATE | date |
| DATETIME | timestamp_ntz |
| TIMESTAMP | timestamp (the instant; UTC) |
| TIME | interval hour to second; in the lake long microseconds (Delta has no interval type) |
| CHAR, VARCHAR, TEXT, ENUM, JSON | string |
| text in a charset without an exact Unicode mapping | binary (the column's bytes) |
| SET | array<string> (members in definition order) |
| BINARY, VARBINARY, BLOB, GEOMETRY... | binary (GEOMETRY: MySQL's internal form, SRID + WKB) |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_stream.column_types import BINARY_TYPES, EXACT_CHARSETS, INT_BITS, KIND_OF, TEXT_TYPES
from cdc_stream.errors import UnsupportedColumn

if TYPE_CHECKING:
    import pymysql

RAW_COLUMN = "_cdc_raw"  # JSON object: column -> tagged value, for values the typed column cannot hold

# Integers by width in bits (cdc_stream.column_types.INT_BITS): signed, and unsigned.
SIGNED_INTS = {8: pa.int8(), 16: pa.int16(), 24: pa.int32(), 32: pa.int32(), 64: pa.int64()}
UNSIGNED_INTS = {8: pa.int16(), 16: pa.int32(), 24: pa.int32(), 32: pa.int64(), 64: pa.decimal128(20, 0)}
MAX_SPARK_PRECISION = 38


@dataclass(frozen=True)
class ColumnType:
    """One column as information_schema.COLUMNS describes it."""

    name: str
    data_type: str  # DATA_TYPE, lower case: "int", "decimal", "varchar", ...
    unsigned: bool = False
    precision: int | None = None  # DECIMAL's p, BIT's n
    scale: int | None = None  # DECIMAL's s
    charset: str | None = None  # text columns
    nullable: bool = True
    default: str | None = None  # COLUMN_DEFAULT as information_schema prints it

    def arrow(self, lake: bool = False) -> pa.DataType:
        """The Arrow type of this column's values (Spark's types, through Arrow); `lake`: Delta's."""
        t = self.data_type
        kind = KIND_OF.get(t)
        if kind == "signed":
            return (UNSIGNED_INTS if self.unsigned else SIGNED_INTS)[INT_BITS[t]]
        if kind == "decimal":
            p, s = self.precision or 10, self.scale or 0
            return pa.decimal128(p, s) if p <= MAX_SPARK_PRECISION else pa.string()
        if kind == "float":
            return pa.float32()
        if kind == "double":
            return pa.float64()
        if kind == "bit":
            return pa.int64() if (self.precision or 1) < 64 else pa.decimal128(20, 0)
        if kind == "year":
            return pa.int16()
        if kind == "date":
            return pa.date32()
        if kind == "datetime":
            return pa.timestamp("us")
        if kind == "timestamp":
            return pa.timestamp("us", tz="UTC")
        if kind == "time":
            return pa.int64() if lake else pa.duration("us")
        if kind == "set":
            return pa.list_(pa.string())
        if t in TEXT_TYPES:
            return pa.string() if self.text_is_exact else pa.binary()
        if t in BINARY_TYPES:
            return pa.binary()
        raise UnsupportedColumn(f"column {self.name!r} has type {t!r}, which has no Spark type here")

    @property
    def text_is_exact(self) -> bool:
        """Whether this text column's values arrive as Unicode strings (else as bytes)."""
        return self.data_type in ("enum", "json") or (self.charset or "utf8mb4").lower() in EXACT_CHARSETS


@dataclass(frozen=True)
class TableSchema:
    """A source table's columns, in table order."""

    database: str
    table: str
    columns: tuple[ColumnType, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> ColumnType | None:
        """The column of that name, or None."""
        return next((c for c in self.columns if c.name == name), None)

    def arrow_struct(self, lake: bool = False) -> pa.StructType:
        """The row image's struct: the columns, then `_cdc_raw` (string)."""
        return pa.struct([pa.field(c.name, c.arrow(lake)) for c in self.columns] + [pa.field(RAW_COLUMN, pa.string())])

    def arrow_schema(self, lake: bool = False) -> pa.Schema:
        """The row image as a table schema (the lake's state tables)."""
        return pa.schema(list(self.arrow_struct(lake)))


def read_tables(conn: pymysql.Connection, tables: list[tuple[str, str]]) -> dict[tuple[str, str], TableSchema]:
    """The columns of these (database, table)s from information_schema; absent tables are left out."""
    if not tables:
        return {}
    where = " OR ".join(["(TABLE_SCHEMA = %s AND TABLE_NAME = %s)"] * len(tables))
    params: list[Any] = [p for t in tables for p in t]
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, "
                    "NUMERIC_SCALE, CHARACTER_SET_NAME, IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS "
                    f"WHERE {where} ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION", params)
        rows = cur.fetchall()
    found: dict[tuple[str, str], list[ColumnType]] = {}
    for db, table, name, dtype, ctype, precision, scale, charset, nullable, default in rows:
        dtype, ctype = _text(dtype).lower(), _text(ctype).lower()
        if dtype == "bit":
            precision = int(ctype[4:-1]) if ctype.startswith("bit(") else 1
        found.setdefault((_text(db), _text(table)), []).append(ColumnType(
            _text(name), dtype, "unsigned" in ctype, int(precision) if precision is not None else None,
            int(scale) if scale is not None else None, _text(charset) if charset else None, nullable == "YES",
            _text(default) if default is not None else None))
    return {k: TableSchema(k[0], k[1], tuple(cols)) for k, cols in found.items()}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
