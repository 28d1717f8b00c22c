"""Comparing the lake's Delta tables with the leader, value for value (test helper)."""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from cdc_spark.schema import RAW_COLUMN
from cdc_stream.values import to_param

ZERO_TIMESTAMP = "0000-00-00 00:00:00"
# Per MySQL DATA_TYPE: leader value (PyMySQL, session time zone +00:00) -> the lake's form.
LEADER_FORM: dict[str, Callable[[Any], Any]] = {
    "float": lambda v: struct.unpack("<f", struct.pack("<f", v))[0],  # the server prints 6 digits
    "time": lambda v: (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds,
    "set": lambda v: sorted(v) if isinstance(v, set) else sorted(x for x in v.split(",") if x),
    "decimal": lambda v: v,
}


def table_columns(leader, db: str, table: str) -> list[tuple[str, str, int | None]]:
    return [(n, t.lower(), p) for n, t, p in leader.query(
        "SELECT COLUMN_NAME, DATA_TYPE, NUMERIC_PRECISION FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (db, table))]


def leader_rows(leader, db: str, table: str) -> list[tuple]:
    """The leader's rows in the lake's forms, sorted."""
    cols = table_columns(leader, db, table)
    out = []
    for row in leader.query(f"SELECT * FROM `{db}`.`{table}`"):
        values = []
        for (_, dtype, precision), v in zip(cols, row):
            if v is not None and dtype in LEADER_FORM:
                v = LEADER_FORM[dtype](v)
            if dtype == "decimal" and v is not None and precision > 38:
                v = format(v, "f")
            if dtype == "timestamp" and isinstance(v, dt.datetime):
                v = v.replace(tzinfo=dt.UTC)
            if dtype == "timestamp" and isinstance(v, str) and v.startswith(ZERO_TIMESTAMP):
                v = ZERO_TIMESTAMP  # to_param renders the zero TIMESTAMP without fraction
            values.append(v)
        out.append(tuple(values))
    return sorted(out, key=repr)


def lake_rows(lake: Path, db: str, table: str, columns: list[tuple[str, str, int | None]]) -> list[tuple]:
    """The state table's rows, values the Spark type cannot hold rendered back from _cdc_raw as MySQL text."""
    rows = DeltaTable(str(lake / "state" / db / table)).to_pyarrow_table().to_pylist()
    out = []
    for d in rows:
        raw = json.loads(d[RAW_COLUMN]) if d[RAW_COLUMN] else {}
        values = []
        for name, dtype, _ in columns:
            v = d[name]
            if name in raw:
                v = to_param(raw[name])  # the MySQL text PyMySQL also returns for zero dates
            if dtype == "set" and v is not None:
                v = sorted(v)
            if isinstance(v, Decimal) and dtype != "decimal":
                v = int(v)
            if isinstance(v, dt.datetime) and v.tzinfo is not None:
                v = v.astimezone(dt.UTC)
            values.append(v)
        out.append(tuple(values))
    return sorted(out, key=repr)


def assert_lake_equals_leader(leader, lake: Path, db: str, table: str) -> int:
    """State table == leader table (as multisets of rows); returns the row count."""
    columns = table_columns(leader, db, table)
    expected = leader_rows(leader, db, table)
    got = lake_rows(lake, db, table, columns)
    assert got == expected, f"{db}.{table}: lake {got} != leader {expected}"
    return len(got)


def changelog(lake: Path, db: str, table: str) -> list[dict]:
    """The change log's rows in (offset, row_index) order."""
    rows = DeltaTable(str(lake / "changelog" / db / table)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["offset"], r["row_index"]))


def no_duplicates(rows: list[dict]) -> None:
    keys = [(r["offset"], r["row_index"]) for r in rows]
    assert len(keys) == len(set(keys)), f"duplicate change-log rows: {[k for k in keys if keys.count(k) > 1][:5]}"


def decimal_text(v: Decimal) -> str:
    return format(v, "f")
