"""Row events -> column names, primary key and tagged values.

python-mysql-replication decodes the bytes; this module adds what its Python
values cannot say on their own (FLOAT vs DOUBLE, TIMESTAMP vs DATETIME, ENUM vs
VARCHAR, signedness) by looking at the table map's column types.
"""

from __future__ import annotations

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent

from cdc_stream import values

_INTS = {FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.LONG, FIELD_TYPE.INT24, FIELD_TYPE.LONGLONG}
_KIND_BY_TYPE = {
    FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double",
    FIELD_TYPE.NEWDECIMAL: "decimal",
    FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.YEAR: "year",
    FIELD_TYPE.ENUM: "enum",
    FIELD_TYPE.SET: "set",
    FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.JSON: "json",
    FIELD_TYPE.GEOMETRY: "geometry",
}


def column_kind(column) -> str:
    """The values.encode kind of one table-map column."""
    if column.type in _INTS:
        return "unsigned" if column.unsigned else "signed"
    return _KIND_BY_TYPE.get(column.type, "")


def primary_key(event: RowsEvent) -> list[str]:
    """Primary-key column names from the table map's metadata ([] when there is none)."""
    pk = event.primary_key
    if not pk:
        return []
    return [pk] if isinstance(pk, str) else list(pk)


def encode_rows(event: RowsEvent) -> tuple[list[str], list]:
    """(column names, rows as lists of tagged values) of a rows event.

    Update rows come as (before, after) pairs.
    """
    columns = event.columns
    names = [c.name for c in columns]
    kinds = [column_kind(c) for c in columns]
    enc = values.encode

    def tag(row: dict) -> list:
        return [enc(row[n], k) for n, k in zip(names, kinds)]

    if isinstance(event, UpdateRowsEvent):
        return names, [(tag(r["before_values"]), tag(r["after_values"])) for r in event.rows]
    return names, [tag(r["values"]) for r in event.rows]
