"""cdc_spark's typing: tagged values -> Arrow values of the declared column types (pure, no Spark)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_spark.convert import ImageConverter, SchemaMismatch
from cdc_spark.schema import ColumnType, TableSchema

UTC = dt.UTC
COLUMNS = (
    ColumnType("id", "bigint", unsigned=True),
    ColumnType("d", "decimal", precision=65, scale=30),
    ColumnType("m", "decimal", precision=12, scale=4),
    ColumnType("f", "float"),
    ColumnType("day", "date"),
    ColumnType("at", "datetime"),
    ColumnType("ts", "timestamp"),
    ColumnType("t", "time"),
    ColumnType("b", "binary"),
    ColumnType("s", "set"),
    ColumnType("j", "longtext", charset="utf8mb4"),
    ColumnType("sj", "varchar", charset="sjis"),
    ColumnType("y", "year"),
    ColumnType("bit", "bit", precision=64),
    ColumnType("tiny", "tinyint", unsigned=True),
)
SCHEMA = TableSchema("db", "t", COLUMNS)
NAMES = [c.name for c in COLUMNS]
ROW = [
    {"UnsignedInteger": 18446744073709551615},
    {"Decimal": "-12345678901234567890123456789012345.123456789012345678901234567890"},
    {"Decimal": "-0.0001"},
    {"Float": 0.10000000149011612},
    {"Date": {"year": 2024, "month": 2, "day": 29}},
    {"DateTime": {"year": 9999, "month": 12, "day": 31, "hour": 23, "minute": 59, "second": 59, "subsecond": 999999}},
    {"Timestamp": {"unix_time": 2147483647, "subsecond": 990000}},
    {"Time": {"hours": 838, "minutes": 59, "seconds": 59, "subseconds": 0, "negative": True}},
    {"Blob": "YWIAAA=="},
    {"Set": ["b", "a"]},
    {"String": '{"k": [1, 2.50]}'},
    {"Blob": "k/qWe4zq"},
    {"Year": 0},
    {"Bit": 18446744073709551615},
    {"UnsignedInteger": 255},
]


def test_every_type_exactly():
    conv = ImageConverter(SCHEMA)
    values, raw = conv.values(NAMES, ROW)
    assert raw is None
    assert values == [
        Decimal(18446744073709551615), "-12345678901234567890123456789012345.123456789012345678901234567890",
        Decimal("-0.0001"), 0.10000000149011612, dt.date(2024, 2, 29), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2038, 1, 19, 3, 14, 7, 990000, tzinfo=UTC), -((838 * 60 + 59) * 60 + 59) * 1_000_000,
        b"ab\0\0", ["b", "a"], '{"k": [1, 2.50]}', bytes.fromhex("93fa967b8cea"), 0, Decimal(2**64 - 1), 255,
    ]
    arr = conv.to_arrow(NAMES, [ROW, None])
    assert arr.type == SCHEMA.arrow_struct()
    assert arr.type.field("d").type == pa.string() and arr.type.field("m").type == pa.decimal128(12, 4)
    assert arr.type.field("id").type == pa.decimal128(20, 0) and arr.type.field("t").type == pa.duration("us")
    assert arr.type.field("sj").type == pa.binary() and arr.type.field("tiny").type == pa.int16()
    first = arr.to_pylist()[0]
    assert first["f"] == pytest.approx(0.1, rel=1e-7) and first["at"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert arr.to_pylist()[1] is None
    assert ImageConverter(SCHEMA, lake=True).struct.field("t").type == pa.int64()


def test_values_a_spark_type_cannot_hold_keep_their_tag():
    conv = ImageConverter(SCHEMA)
    zero_date = {"Date": {"year": 0, "month": 0, "day": 0}}
    zero_ts = {"Timestamp": {"unix_time": 0, "subsecond": 0}}
    invalid = {"DateTime": {"year": 2021, "month": 2, "day": 30, "hour": 0, "minute": 0, "second": 0, "subsecond": 0}}
    values, raw = conv.values(["id", "day", "ts", "at", "j"], [{"UnsignedInteger": 1}, zero_date, zero_ts, invalid,
                                                             {"Blob": "/w=="}])
    assert values[:8] == [Decimal(1), None, None, None, None, None, None, None]
    assert json.loads(raw) == {"day": zero_date, "at": invalid, "ts": zero_ts, "j": {"Blob": "/w=="}}


def test_missing_columns_are_null_and_unknown_ones_refused():
    conv = ImageConverter(SCHEMA)
    values, raw = conv.values(["tiny", "id"], [{"UnsignedInteger": 7}, {"UnsignedInteger": 3}])
    assert values[0] == Decimal(3) and values[-1] == 7 and values[1:-1] == [None] * 13 and raw is None
    with pytest.raises(SchemaMismatch, match=r"db\.t has no column 'color'"):
        conv.values(["id", "color"], [{"UnsignedInteger": 1}, "Null"])


def test_decimal_scale_and_precision_are_checked():
    conv = ImageConverter(TableSchema("db", "t", (ColumnType("m", "decimal", precision=5, scale=2),)))
    assert conv.values(["m"], [{"Decimal": "123.4"}])[0] == [Decimal("123.40")]
    _, raw = conv.values(["m"], [{"Decimal": "1234.5"}])  # 6 digits in DECIMAL(5,2): the column changed
    assert json.loads(raw) == {"m": {"Decimal": "1234.5"}}
