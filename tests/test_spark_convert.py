"""cdc_spark's typing: tagged values -> Arrow values of the declared column types (pure, no Spark)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_spark.convert import ImageConverter, SchemaMismatch
from cdc_spark.schema import ColumnType, TableSchema
from cdc_stream.values import BadValue

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


# The column-at-a-time path (typed msgspec decoders, column loops) against the value-by-value Converters, on
# usual and odd values of every type: the same Python values (type and digits), the same _cdc_raw, the same
# BadValue. Each value alone (three rows: the decoder's path when it takes it) and all of a column together.
WIDE = [
    (ColumnType("i", "int"), [{"SignedInteger": 0}, {"SignedInteger": -2147483648}, {"UnsignedInteger": 5},
                              {"Year": 7}, {"Bit": 1}, {"String": "1"}, {"Decimal": "1"}]),
    (ColumnType("iu", "int", unsigned=True), [{"UnsignedInteger": 4294967295}, {"SignedInteger": -1},
                                              {"SignedInteger": 3}]),
    (ColumnType("big", "bigint", unsigned=True), [{"UnsignedInteger": 0}, {"UnsignedInteger": 18446744073709551615},
                                                  {"UnsignedInteger": 10**20}, {"Bit": 5}, {"SignedInteger": 5}]),
    (ColumnType("m", "decimal", precision=12, scale=4), [
        {"Decimal": "1.2345"}, {"Decimal": "-0.0001"}, {"Decimal": "12"}, {"Decimal": "12.3"}, {"Decimal": "1.23456"},
        {"Decimal": "00001.0000"}, {"Decimal": "12345678.1234"}, {"Decimal": "123456789.1234"},
        {"Decimal": "0.0000"}, {"Decimal": "-0.0000"}, {"Decimal": "1.23450"}, {"Decimal": "\u0661\u0662.3456"},
        {"Decimal": "0012345678.1234"}, {"String": "1.0000"}]),
    (ColumnType("d0", "decimal", precision=10, scale=0), [{"Decimal": "5"}, {"Decimal": "-0"}, {"Decimal": "5.0"},
                                                          {"Decimal": "12345678901"}]),
    (ColumnType("d", "decimal", precision=65, scale=30), [{"Decimal": "1.5"}, {"Decimal": "0.000000001"},
                                                          {"Decimal": "-" + "9" * 35 + "." + "1" * 30}]),
    (ColumnType("f", "float"), [{"Float": 0.1}, {"Float": -0.0}, {"Float": 1}, {"Float": 1e300}, {"Double": 1.5}]),
    (ColumnType("g", "double"), [{"Double": 2.5}, {"Double": 2}, {"Double": 9007199254740993},
                                 {"Double": 1.7976931348623157e308}, {"Float": 0.5}]),
    (ColumnType("day", "date"), [{"Date": {"year": 2024, "month": 2, "day": 29}},
                                 {"Date": {"year": 0, "month": 0, "day": 0}},
                                 {"Date": {"year": 2021, "month": 2, "day": 30}},
                                 {"Date": {"year": 2021, "month": 2, "day": 3, "extra": 1}},
                                 {"DateTime": {"year": 2021, "month": 2, "day": 3, "hour": 0, "minute": 0,
                                               "second": 0, "subsecond": 0}}]),
    (ColumnType("at", "datetime"), [{"DateTime": {"year": 2021, "month": 2, "day": 3, "hour": 4, "minute": 5,
                                                  "second": 6, "subsecond": 999999}},
                                    {"DateTime": {"year": 0, "month": 0, "day": 0, "hour": 0, "minute": 0,
                                                  "second": 0, "subsecond": 0}},
                                    {"DateTime": {"year": 1, "month": 1, "day": 1, "hour": 0, "minute": 0,
                                                  "second": 0, "subsecond": 0}}]),
    (ColumnType("ts", "timestamp"), [{"Timestamp": {"unix_time": 1700000000, "subsecond": 123456}},
                                     {"Timestamp": {"unix_time": 0, "subsecond": 0}},
                                     {"Timestamp": {"unix_time": 0, "subsecond": 5}},
                                     {"Timestamp": {"unix_time": -1, "subsecond": 0}},
                                     {"Timestamp": {"unix_time": 10**12, "subsecond": 0}},
                                     {"Timestamp": {"unix_time": 5, "subsecond": 2000000}}]),
    (ColumnType("t", "time"), [{"Time": {"hours": 838, "minutes": 59, "seconds": 59, "subseconds": 0,
                                         "negative": True}},
                               {"Time": {"hours": 1, "minutes": 2, "seconds": 3, "subseconds": 4}}]),
    (ColumnType("s", "varchar", charset="utf8mb4"), [{"String": "h\u00e9llo \U0001f600"}, {"String": ""},
                                                     {"Enum": "a"}, {"Blob": "/w=="}, {"String": "Null"}]),
    (ColumnType("e", "enum"), [{"Enum": "a"}, {"String": "b"}, {"Enum": ""}]),
    (ColumnType("j", "json"), [{"Json": {"a": [1, 2.5]}}, {"String": "x"}]),
    (ColumnType("sj", "varchar", charset="sjis"), [{"Blob": "k/qWe4zq"}, {"String": "x"}]),
    (ColumnType("b", "blob"), [{"Blob": ""}, {"Blob": "AAEC/w=="}, {"String": "x"},
                               {"Geometry": {"srid": 0, "wkb": "AQ=="}}]),
    (ColumnType("set", "set"), [{"Set": ["a", "b"]}, {"Set": []}]),
    (ColumnType("y", "year"), [{"Year": 2024}, {"Year": 0}, {"SignedInteger": 1}]),
    (ColumnType("bit8", "bit", precision=8), [{"Bit": 5}, {"UnsignedInteger": 6}]),
    (ColumnType("bit64", "bit", precision=64), [{"Bit": 2**64 - 1}, {"UnsignedInteger": 6}]),
    (ColumnType("tiny", "tinyint", unsigned=True), [{"UnsignedInteger": 255}]),
]
BAD = [  # values whose tag is the column's but whose JSON is not the tag's: a BadValue either way
    (ColumnType("i", "int"), {"SignedInteger": 1.0}), (ColumnType("i", "int"), {"SignedInteger": True}),
    (ColumnType("m", "decimal", precision=12, scale=4), {"Decimal": "1e5"}),
    (ColumnType("day", "date"), {"Date": {"year": 2024, "month": 2}}),
    (ColumnType("f", "float"), {"Float": "0.5"}), (ColumnType("b", "blob"), {"Blob": "!!"}),
    (ColumnType("ts", "timestamp"), {"Timestamp": {"unix_time": "1"}}),
]


def _exact(value):
    """A value with its type and exact digits (Decimal('1.0') is not Decimal('1.00'))."""
    return [_exact(v) for v in value] if isinstance(value, list) else (type(value), repr(value))


def _image(values):
    """An image as the lake's rows carry it: the JSON array of its tagged values (cdc_spark/rows.py)."""
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode()


def _both(conv, name, column):
    one = [conv.values([name], [v]) for v in column]
    values, raws = conv.rows([name], [_image([v]) for v in column])
    many = [([v], r) for v, r in zip(values[0], raws)]
    return one, many


@pytest.mark.parametrize("lake", [False, True])
@pytest.mark.parametrize(("column", "values"), WIDE, ids=[c.name for c, _ in WIDE])
def test_column_typing_equals_value_by_value(column, values, lake):
    conv = ImageConverter(TableSchema("db", "t", (column,)), lake=lake)
    for column_values in [[v, "Null", v] for v in values] + [values + ["Null"]]:
        one, many = _both(conv, column.name, column_values)
        assert [(_exact(v), r) for v, r in many] == [(_exact(v), r) for v, r in one], column_values
        assert conv.build(many).equals(conv.build(one))


@pytest.mark.parametrize(("column", "value"), BAD, ids=[f"{c.name}-{v}" for c, v in BAD])
def test_a_malformed_value_is_refused_both_ways(column, value):
    conv = ImageConverter(TableSchema("db", "t", (column,)), lake=True)
    with pytest.raises(BadValue):
        conv.values([column.name], [value])
    with pytest.raises(BadValue):
        conv.rows([column.name], [_image([value])] * 2)


def test_build_equals_the_images_as_dicts():
    conv = ImageConverter(SCHEMA, lake=True)
    rows = [conv.values(NAMES, ROW), None, conv.values(["id"], [{"UnsignedInteger": 1}]),
            conv.values(["id", "day"], [{"UnsignedInteger": 2}, {"Date": {"year": 0, "month": 0, "day": 0}}])]
    dicts = [None if r is None else dict(zip([*NAMES, "_cdc_raw"], [*r[0], r[1]])) for r in rows]
    assert conv.build(rows).equals(pa.array(dicts, conv.struct))
    assert conv.build([]).equals(pa.array([], conv.struct))


def test_rows_of_many_columns_equal_value_by_value():
    """Whole images of every type, typed at once (ImageConverter.rows): the typed parse, and the plain JSON
    parse when one value has another tag, give what `values` gives image by image, in any column order."""
    conv = ImageConverter(SCHEMA, lake=True)
    zero = {"Date": {"year": 0, "month": 0, "day": 0}}
    odd = [*ROW[:4], zero, *ROW[5:]]
    other = [*ROW[:2], {"String": "not a decimal"}, *ROW[3:]]
    for images in ([ROW, odd, ROW], [ROW, other, odd], [ROW]):
        for names, order in ((NAMES, list(range(len(NAMES)))), (NAMES[::-1], list(range(len(NAMES)))[::-1])):
            rows = [[image[i] for i in order] for image in images]
            values, raws = conv.rows(names, [_image(r) for r in rows])
            many = list(zip(map(list, zip(*values)), raws))
            one = [conv.values(names, r) for r in rows]
            assert [(_exact(v), r) for v, r in many] == [(_exact(v), r) for v, r in one]
    values, raws = conv.rows(["id"], [_image([{"UnsignedInteger": 1}])])  # the other columns: NULL
    assert [v[0] for v in values] == [Decimal(1)] + [None] * (len(NAMES) - 1) and raws == [None]
    with pytest.raises(SchemaMismatch):
        conv.rows(["nope"], [_image([{"SignedInteger": 1}])])
    with pytest.raises(BadValue):
        conv.rows(["id", "day"], [_image([{"UnsignedInteger": 1}])])  # fewer values than columns
