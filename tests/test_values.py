"""The value codec without servers: properties of encode -> JSON -> to_param, the binlog
readers of unpack.py and charsets.py against packers written from MySQL's formats, the consumer's SQL,
and the JSON Schema of events."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from decimal import Decimal
from pathlib import Path

import jsonschema
import msgspec
import pymysql.converters
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_consumer import apply
from cdc_producer import charsets, decode, unpack
from cdc_stream import values
from cdc_stream.errors import DataError
from cdc_stream.events import (
    ChangeEvent,
    MalformedEvent,
    QuerySession,
    RowChecks,
    Txn,
    decode_event,
    encode_event,
    make_uri,
)

settings.register_profile("cdc", max_examples=150, deadline=None)
settings.load_profile("cdc")

_json = msgspec.json.Encoder()
_unjson = msgspec.json.Decoder()


def through_topic(tagged):
    """What the consumer gets back: the tag encoded to JSON and decoded, as on the topic."""
    return _unjson.decode(_json.encode(tagged))


def param(value, kind: str):
    return values.to_param(through_topic(values.encode(value, kind)))


def literal(p) -> str:
    """The SQL literal PyMySQL sends for a numeric parameter."""
    return pymysql.converters.escape_item(p, "utf8mb4")


# ---------------------------------------------------------------------------
# encode -> JSON -> to_param gives what MySQL would store


@given(st.integers(-(2**63), 2**63 - 1))
def test_signed_integers(v):
    assert values.encode(v, "signed") == {"SignedInteger": v}
    assert param(v, "signed") == v


@given(st.integers(0, 2**64 - 1))
def test_unsigned_integers(v):
    assert values.encode(v, "unsigned") == {"UnsignedInteger": v}
    assert param(v, "unsigned") == v
    assert literal(param(v, "unsigned")) == str(v)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float(v):
    p = param(v, "float")
    # The double literal parses back to the same double, which narrows to the same float.
    assert float(literal(p)) == v and struct.pack("<f", float(literal(p))) == struct.pack("<f", v)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double(v):
    p = param(v, "double")
    assert "e" in literal(p)  # a double literal, not a DECIMAL one
    assert struct.pack("<d", float(literal(p))) == struct.pack("<d", v)


@st.composite
def decimals(draw):
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    digits = draw(st.text("0123456789", min_size=precision, max_size=precision))
    sign = draw(st.sampled_from(["", "-"]))
    int_part = digits[: precision - scale].lstrip("0") or "0"
    text = sign + int_part + ("." + digits[precision - scale:] if scale else "")
    if Decimal(text) == 0:
        text = text.lstrip("-")  # MySQL has no negative zero
    return precision, scale, text


@given(decimals())
def test_decimal(case):
    _, _, text = case
    assert values.encode(Decimal(text), "decimal") == {"Decimal": text}
    p = param(Decimal(text), "decimal")
    assert isinstance(p, Decimal) and literal(p) == text  # a bare decimal literal, never an exponent


def test_decimal_never_in_exponent_form():
    assert values.encode(Decimal("0E-30"), "decimal") == {"Decimal": "0." + "0" * 30}
    assert values.encode(Decimal("1E+2"), "decimal") == {"Decimal": "100"}


dates = st.tuples(st.integers(0, 9999), st.integers(0, 12), st.integers(0, 31))


@given(dates)
def test_date_including_zero_parts(ymd):
    y, m, d = ymd
    text = f"{y:04d}-{m:02d}-{d:02d}"  # as PyMySQL returns dates Python cannot hold
    assert values.encode(text, "date") == {"Date": {"year": y, "month": m, "day": d}}
    assert param(text, "date") == text


@given(dates, st.integers(0, 23), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999999))
def test_datetime(ymd, h, mi, s, us):
    y, m, d = ymd
    text = f"{y:04d}-{m:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}.{us:06d}"
    assert param(text, "datetime") == text
    if m and d and y and d <= 28:
        assert param(dt.datetime(y, m, d, h, mi, s, us), "datetime") == text


@given(st.datetimes(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 999999)))
def test_timestamp_is_utc(t):
    tagged = values.encode(t, "timestamp")
    assert tagged["Timestamp"]["unix_time"] == int(t.replace(tzinfo=dt.UTC).timestamp())
    assert param(t, "timestamp") == f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}"


def test_zero_timestamp():
    assert values.encode("0000-00-00 00:00:00", "timestamp") == {"Timestamp": {"unix_time": 0, "subsecond": 0}}
    assert values.to_param({"Timestamp": {"unix_time": 0, "subsecond": 0}}) == "0000-00-00 00:00:00"


@given(st.integers(-(838 * 3600 + 59 * 60 + 59) * 10**6 - 999999, (838 * 3600 + 59 * 60 + 59) * 10**6 + 999999))
def test_time_both_signs(micros):
    neg, a = micros < 0, abs(micros)
    s, us = divmod(a, 10**6)
    expected = f"{'-' if neg else ''}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{us:06d}"
    assert param(dt.timedelta(microseconds=micros), "time") == expected
    assert param(expected, "time") == expected  # the string form too


@given(st.sampled_from([0] + list(range(1901, 2156))))
def test_year(y):
    assert param(y, "year") == y


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"])))
def test_text(s):
    assert param(s, "string") == s


@given(st.binary(max_size=600))
def test_binary(b):
    assert values.encode(b, "binary") == {"Blob": base64.b64encode(b).decode()}
    assert param(b, "binary") == b


@given(st.lists(st.text(alphabet="abcxyzé😀 ", min_size=1, max_size=5), unique=True, max_size=64))
def test_set_keeps_order(labels):
    assert param(",".join(labels), "set") == ",".join(labels)
    assert values.encode(labels, "set") == {"Set": labels}


def test_empty_set_and_enum_error_value():
    assert values.encode("", "set") == {"Set": []} and values.to_param({"Set": []}) == ""
    assert values.encode("", "enum") == {"Enum": ""} and values.to_param({"Enum": ""}) == ""


@given(st.integers(0, 2**64 - 1))
def test_bit(v):
    assert param(v, "bit") == v
    assert param(v.to_bytes(8, "big"), "bit") == v  # PyMySQL returns BIT as big-endian bytes
    assert param(format(v, "b"), "bit") == v  # python-mysql-replication as a bit string


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=["Cs"])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_json(v):
    # MySQL's JSON arrives as text (PyMySQL) or parsed (python-mysql-replication).
    assert json.loads(param(json.dumps(v), "json")) == v
    if v is not None and not isinstance(v, str):
        assert json.loads(param(v, "json")) == v


@given(st.integers(0, 2**32 - 1), st.binary(min_size=5, max_size=100))
def test_geometry(srid, wkb):
    internal = struct.pack("<I", srid) + wkb
    assert values.encode(internal, "geometry") == {"Geometry": {"srid": srid, "wkb": base64.b64encode(wkb).decode()}}
    assert param(internal, "geometry") == internal


@pytest.mark.parametrize("tagged", [
    {"SignedInteger": "1"}, {"SignedInteger": True}, {"UnsignedInteger": -1}, {"Decimal": "1e5"},
    {"Decimal": 1.5}, {"Float": float("nan")}, {"Blob": "not base64!"}, {"Date": {"year": 2020}},
    {"Time": {"hours": 1, "minutes": 2, "seconds": 3, "subseconds": 10**6}}, {"Set": "a,b"}, {"Nope": 1},
    {"String": 1}, [1], {"Geometry": {"srid": -1, "wkb": ""}},
])
def test_bad_values_are_refused(tagged):
    with pytest.raises(values.BadValue):
        values.to_param(tagged)


# ---------------------------------------------------------------------------
# The readers (unpack.py, charsets.py) against packers written from MySQL's storage formats


def pack_decimal(text: str, precision: int, scale: int) -> bytes:
    """MySQL's decimal2bin."""
    negative = text.startswith("-")
    int_part, _, frac = text.lstrip("-").partition(".")
    intg = precision - scale
    int_digits, frac_digits = int_part.rjust(intg, "0"), frac.ljust(scale, "0")
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    out = b""
    lead = intg % 9
    if lead:
        out += int(int_digits[:lead]).to_bytes(sizes[lead], "big")
    for i in range(lead, intg, 9):
        out += int(int_digits[i:i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac_digits[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_digits[scale - scale % 9:]).to_bytes(sizes[scale % 9], "big")
    buf = bytearray(out)
    if negative:
        buf = bytearray(b ^ 0xFF for b in buf)
    buf[0] ^= 0x80
    return bytes(buf)


@given(decimals())
def test_decimal_reader(case):
    precision, scale, text = case
    raw = pack_decimal(text, precision, scale)
    value, end = unpack.decimal_reader(precision, scale)(b"\x01" + raw + b"\x02", 1)
    assert end == 1 + len(raw)
    assert value == {"Decimal": text}


def pack_fraction(micro: int, fsp: int) -> tuple[int, int]:
    """(stored fraction, bytes) of fsp digits: MySQL keeps 2 digits per byte."""
    n = (fsp + 1) // 2
    return micro // 10 ** (6 - 2 * n), n


fsps = st.integers(0, 6)


def truncate(micro: int, fsp: int) -> int:
    return micro - micro % 10 ** (6 - fsp)


@given(st.integers(-(838 * 3600 + 59 * 60 + 59), 838 * 3600 + 59 * 60 + 59), st.integers(0, 999999), fsps)
def test_time2_reader(seconds, micro, fsp):
    micro = truncate(micro, fsp)
    if abs(seconds) == 838 * 3600 + 59 * 60 + 59:
        micro = 0
    negative = seconds < 0
    a = abs(seconds)
    hms = ((a // 3600) << 12) | ((a // 60 % 60) << 6) | (a % 60)
    frac, n = pack_fraction(micro, fsp)
    packed = (hms << (8 * n)) | frac
    if negative:
        packed = -packed
    size = 3 + n
    raw = (packed + (1 << (8 * size - 1))).to_bytes(size, "big")
    value, end = unpack.time2_reader(fsp)(raw, 0)
    assert end == size
    expected = values.time_tag(negative, a // 3600, a // 60 % 60, a % 60, micro)
    assert value == expected


@given(st.integers(0, 59), st.integers(1, 999999), fsps)
def test_time2_reader_negative_fractions(second, micro, fsp):
    """-00:00:SS.ffffff: the case python-mysql-replication gets wrong."""
    micro = (truncate(micro, fsp) or 10 ** (6 - fsp)) if fsp else 0
    frac, n = pack_fraction(micro, fsp)
    packed = -((second << (8 * n)) | frac)
    size = 3 + n
    raw = (packed + (1 << (8 * size - 1))).to_bytes(size, "big")
    value, _ = unpack.time2_reader(fsp)(raw, 0)
    assert value == values.time_tag(True, 0, 0, second, micro)
    assert values.to_param(value) == f"{'-' if second or micro else ''}00:00:{second:02d}.{micro:06d}"


@given(dates, st.integers(0, 23), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999999), fsps)
def test_datetime2_reader(ymd, h, mi, s, micro, fsp):
    y, m, d = ymd
    micro = truncate(micro, fsp)
    intpart = ((((y * 13 + m) << 5) | d) << 17) | (h << 12) | (mi << 6) | s
    frac, n = pack_fraction(micro, fsp)
    raw = (intpart + 0x8000000000).to_bytes(5, "big") + frac.to_bytes(n, "big")
    value, end = unpack.datetime2_reader(fsp)(raw, 0)
    assert end == 5 + n
    assert value == values.datetime_tag(y, m, d, h, mi, s, micro)


@given(st.integers(0, 2**32 - 1), st.integers(0, 999999), fsps)
def test_timestamp2_reader(seconds, micro, fsp):
    micro = truncate(micro, fsp)
    frac, n = pack_fraction(micro, fsp)
    raw = seconds.to_bytes(4, "big") + frac.to_bytes(n, "big")
    assert unpack.timestamp2_reader(fsp)(raw, 0) == (values.timestamp_tag(seconds, micro), 4 + n)


@given(dates)
def test_date_reader(ymd):
    y, m, d = ymd
    raw = ((y << 9) | (m << 5) | d).to_bytes(3, "little")
    assert unpack.date_reader(raw, 0) == (values.date_tag(y, m, d), 3)


def test_year_reader():
    assert unpack.year_reader(b"\x00", 0) == ({"Year": 0}, 1)
    assert unpack.year_reader(bytes([255]), 0) == ({"Year": 2155}, 1)


def test_row_images_must_decode_to_their_exact_length():
    dec = decode.TableDecoder(["y", "d"], (unpack.year_reader, unpack.decimal_reader(10, 2)), "db.t")
    image = b"\x00" + b"\x01" + pack_decimal("-1.50", 10, 2)  # null bitmap, YEAR 1901, DECIMAL
    assert dec.rows(image * 2) == [[{"Year": 1901}, {"Decimal": "-1.50"}]] * 2
    for broken in (image[:-1], image + b"\x00"):
        with pytest.raises(DataError, match="exact length"):
            dec.rows(broken)


def test_text_taggers():
    latin1 = charsets.text_tagger("latin1")
    text = latin1(bytes(range(256)))["String"]
    assert len(text) == 256 and text[:0x80] == bytes(range(0x80)).decode("ascii")
    assert latin1(b"\x81\x80") == {"String": "\u0081€"}
    assert charsets.text_tagger("utf8mb4")(b"\xff") == values.blob_tag(b"\xff")  # not UTF-8: kept as bytes
    assert charsets.text_tagger("ucs2")("😀".encode("utf-16-be"))["Blob"]  # UCS-2 has no surrogate pairs
    assert charsets.text_tagger("utf16")("😀".encode("utf-16-be")) == {"String": "😀"}
    assert charsets.text_tagger("sjis")("日本".encode("shift_jis")) == values.blob_tag("日本".encode("shift_jis"))
    assert charsets.text_tagger(None)(b"abc") == values.blob_tag(b"abc")


def test_charset_of_collations():
    class Col:
        def __init__(self, collation):
            self.collation_name = collation

    assert charsets.charset_of(Col("latin1_swedish_ci")) == "latin1"
    assert charsets.charset_of(Col("utf8_general_ci")) == "utf8mb3"
    assert charsets.charset_of(Col("binary")) == "binary"
    assert charsets.charset_of(Col("#2304")) == "utf8mb4"  # utf8mb4_uca1400_ai_ci
    assert charsets.charset_of(Col("#2560")) == "ucs2"
    assert charsets.charset_of(Col("#9999")) is None


# ---------------------------------------------------------------------------
# The consumer's SQL


def row_event(op: str, rows, pk=None, columns=("a", "b")):
    return ChangeEvent(uri=make_uri("r", "d`b", "t%s"), schema="d`b", table="t%s", sequence=0, operation=op, rows=rows,
                       columns=list(columns), pk=pk or [])


def test_identifiers_are_quoted():
    (piece,) = apply.event_sql(row_event("Add", [[{"String": "x"}, "Null"], [{"String": "it's"}, {"Year": 0}]],
                                         columns=("50%", "`c`")))
    assert piece.head == "INSERT INTO `d``b`.`t%s` (`50%`, ```c```) VALUES "
    assert piece.parts == ["('x',NULL)", "('it\\'s',0)"]


def test_keyless_text_is_matched_exactly():
    ev = row_event("Delete", [[{"String": "a "}, {"SignedInteger": 1}]])
    assert apply.event_sql(ev) == [apply.Single(
        "DELETE FROM `d``b`.`t%s` WHERE `a` <=> 'a ' AND CAST(CONVERT(`a` USING utf8mb4) AS BINARY) <=> "
        "CAST('a ' AS BINARY) AND `b` <=> 1 LIMIT 1", 1, "('a ',1)")]


def test_keyed_updates_upsert_unless_the_key_changes():
    k = {"String": "k"}
    ev = row_event("Update", [
        ([k, {"Decimal": "1.50"}], [k, {"Decimal": "2"}]),
        ([k, {"Decimal": "2"}], [{"String": "k2"}, {"Decimal": "2"}]),
        ([{"String": "k3"}, "Null"], [{"String": "k3"}, {"Decimal": "-0.5"}]),
    ], pk=["a"])
    first, moved, last = apply.event_sql(ev)
    assert first.head == last.head == "INSERT INTO `d``b`.`t%s` (`a`, `b`) VALUES "
    assert first.tail == " ON DUPLICATE KEY UPDATE `b`=VALUES(`b`)"
    assert (first.parts, first.keys, last.parts) == (["('k',2)"], ["'k'"], ["('k3',-0.5)"])
    assert first.expect_each == last.expect_each == 2  # an updated row counts 2, an inserted one 1
    assert moved == apply.Single("UPDATE `d``b`.`t%s` SET `a`='k2', `b`=2 WHERE `a` <=> 'k'", 1, "'k'")


def test_keyed_deletes_are_one_in_list():
    ev = row_event("Delete", [[{"SignedInteger": 1}, {"String": "x"}], [{"SignedInteger": 2}, "Null"]], pk=["b", "a"])
    (piece,) = apply.event_sql(ev)
    assert piece.head == "DELETE FROM `d``b`.`t%s` WHERE (`b`, `a`) IN ("
    assert (piece.parts, piece.tail) == (["('x',1)", "(NULL,2)"], ")")


def test_enum_error_value_is_written_in_a_relaxed_statement():
    (piece,) = apply.event_sql(row_event("Add", [[{"Enum": ""}, "Null"]]))
    assert piece.head.startswith(f"/*M! SET STATEMENT sql_mode='{apply.RELAXED_SQL_MODE}' FOR */ INSERT /*+ SET_VAR(")
    (piece,) = apply.event_sql(row_event("Add", [[{"Enum": "x"}, "Null"]]))
    assert piece.head.startswith("INSERT INTO")


def test_relaxed_mode_is_the_session_mode_without_strictness():
    from cdc_consumer.follower import SESSION_SQL

    mode = next(s for s in SESSION_SQL if "sql_mode" in s).split("'")[1].split(",")
    assert set(apply.RELAXED_SQL_MODE.split(",")) == set(mode) - {"STRICT_ALL_TABLES"}


# ---------------------------------------------------------------------------
# The JSON Schema


def schema_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((Path(values.__file__).parent / "event.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def matrix_events() -> list[dict]:
    """Events carrying every value the type matrix of test_types.py puts on the topic
    (test_types.py checks those are the values the pipeline produces, and validates
    the real events against the schema too)."""
    from test_types import EXPECTED_TAGS

    by_table: dict[str, dict[int, dict]] = {}
    for (table, row_id, column), tagged in EXPECTED_TAGS.items():
        by_table.setdefault(table, {}).setdefault(row_id, {"id": {"SignedInteger": row_id}})[column] = tagged
    events = []
    for n, (table, rows) in enumerate(sorted(by_table.items())):
        columns = sorted({c for row in rows.values() for c in row})
        cols = [[row.get(c, "Null") for c in columns] for row in rows.values()]
        txn = Txn(f"0-1-{n}", 0, True)
        events.append(ChangeEvent(uri=make_uri("mysql-srv1", "cdc_types", table), schema="cdc_types", table=table, sequence=3 * n, operation="Add",
                                  rows=cols, columns=columns, pk=["id"], gtid=txn.id, txn=txn, ts=1))
        events.append(ChangeEvent(uri=make_uri("mysql-srv1", "cdc_types", table), schema="cdc_types", table=table, sequence=3 * n + 1,
                                  operation="Update", rows=list(zip(cols, reversed(cols))), columns=columns, pk=["id"]))
        events.append(ChangeEvent(uri=make_uri("mysql-srv1", "cdc_types"), schema="cdc_types", sequence=3 * n + 2, operation="Query",
                                  query=f"DROP TABLE {table}", database="cdc_types"))
    return [_unjson.decode(encode_event(e)) for e in events]


def test_matrix_events_match_the_schema():
    validator = schema_validator()
    events = matrix_events()
    assert len(events) == 9
    for ev in events:
        assert not list(validator.iter_errors(ev)), ev
        decode_event(_json.encode(ev))  # and the consumer accepts them


@pytest.mark.parametrize("mutate", [
    lambda e: e.pop("uri"),
    lambda e: e.update(sequence=-1),
    lambda e: e["operation"]["Add"]["rows"][0]["cols"].append({"Tagless": 1}),
    lambda e: e["operation"]["Add"]["rows"][0]["cols"].append({"Decimal": "1e3"}),
    lambda e: e["operation"]["Add"]["rows"][0]["cols"].append({"Date": {"year": 2020, "month": 13, "day": 1}}),
    lambda e: e.pop("columns"),
    lambda e: e.update(uri="flv://mysql-srv1/cdc_types"),
])
def test_schema_refuses_broken_events(mutate):
    ev = matrix_events()[0]
    mutate(ev)
    assert list(schema_validator().iter_errors(ev))


def test_session_checks_and_binlog_fields_round_trip_and_match_the_schema():
    """The fields a native replica needs beside the rows: a DDL's leader session and error code, its
    exact bytes, a row batch's checks and the leader's binlog events."""
    ddl = ChangeEvent(uri=make_uri("s", "db"), schema="db", sequence=0, operation="Query", query="DROP TABLE a, b", database="db",
                      session=QuerySession(sql_mode=1436549152, character_set_client=8, time_zone="+05:00",
                                           foreign_key_checks=False, timestamp_us=1000000000123456),
                      error_code=1051, query_b64="RFJPUCBUQUJMRSBhLCBi", txn=Txn("0-1-1", 0, True))
    rows = ChangeEvent(uri=make_uri("s", "db", "t"), schema="db", table="t", sequence=1, operation="Add", rows=[[{"SignedInteger": 1}]],
                       columns=["id"], pk=["id"], checks=RowChecks(foreign_keys=False, unique=False),
                       binlog="AAEC", txn=Txn("0-1-2", 0, True))
    encoded = [encode_event(e) for e in (ddl, rows)]
    assert _unjson.decode(encoded[0])["session"] == {"sql_mode": 1436549152, "character_set_client": 8,
                                                     "time_zone": "+05:00", "foreign_key_checks": False,
                                                     "timestamp_us": 1000000000123456}
    assert _unjson.decode(encoded[1])["checks"] == {"foreign_keys": False, "unique": False}
    assert list(_unjson.decode(encoded[1]))[-1] == "binlog"  # after the rows: readers see those first
    validator = schema_validator()
    for data in encoded:
        assert not list(validator.iter_errors(_unjson.decode(data)))
    back = [decode_event(data) for data in encoded]
    assert (back[0].session, back[0].error_code, back[0].query_b64) == (ddl.session, 1051, "RFJPUCBUQUJMRSBhLCBi")
    assert (back[1].checks, back[1].binlog) == (RowChecks(foreign_keys=False, unique=False), "AAEC")
    with pytest.raises(MalformedEvent, match="session"):
        decode_event(encoded[0].replace(b'"sql_mode":1436549152', b'"sql_mode":"ANSI"'))


def test_xa_pending_round_trips_through_events_and_transaction_records():
    """The XA transactions held after a transaction travel on its last record (and its transaction record)."""
    from cdc_stream.layout import TxnRecord, decode_txn, encode_txn
    from cdc_stream.positions import PreparedXa

    held = [PreparedXa("X'7831',X'',1", "0-1-41", "0-1-42"), PreparedXa("X'7832',X'6271',7", "0-1-43")]
    last = ChangeEvent(uri=make_uri("s", "db", "t"), schema="db", table="t", sequence=5, operation="Add", rows=[[{"SignedInteger": 1}]],
                       columns=["id"], pk=["id"], gtid="0-1-44", gtid_set="0-1-44", xa_pending=held,
                       txn=Txn("0-1-44", 0, True))
    data = encode_event(last)
    assert _unjson.decode(data)["xa_pending"] == [
        {"xid": "X'7831',X'',1", "resume_from": "0-1-41", "gtid": "0-1-42"},
        {"xid": "X'7832',X'6271',7", "resume_from": "0-1-43"}]
    assert not list(schema_validator().iter_errors(_unjson.decode(data)))
    assert decode_event(data).txn_end().xa_pending == held
    assert decode_event(data.decode()).xa_pending == held  # the slow, generic path too
    record = decode_txn(encode_txn(TxnRecord.of(5, last, {"db_t": [0, 1]})))
    assert record.txn_end().xa_pending == held
    assert "xa_pending" not in _unjson.decode(encode_event(ChangeEvent(uri=make_uri("s", "db"), schema="db", sequence=0,
                                                                       operation="Query", query="x")))
    with pytest.raises(MalformedEvent, match="xa_pending"):
        decode_event(data.replace(b'"resume_from":"0-1-41",', b""))


def test_lazy_rows_stay_json_until_loaded_only_for_events_with_binlog_events():
    """decode_event(lazy_rows=True): an event's rows stay JSON while it carries binlog events (a
    consumer replaying those never needs the values); load_rows() gives what the eager decode gives."""
    rows = [([{"SignedInteger": 1}, {"String": "a"}], [{"SignedInteger": 1}, {"String": "b"}])]
    ev = ChangeEvent(uri=make_uri("s", "db", "t"), schema="db", table="t", sequence=3, operation="Update", rows=rows,
                     columns=["id", "v"], pk=["id"], gtid="0-1-4", binlog="AAEC")
    data = encode_event(ev)
    eager, lazy = decode_event(data), decode_event(data, lazy_rows=True)
    assert (eager.rows_json, eager.rows) == (False, rows)
    assert lazy.rows_json and len(lazy.rows) == 1 and lazy.binlog == "AAEC"
    lazy.load_rows()
    assert lazy == eager
    ev.binlog = None  # without binlog events the rows are what is applied: decoded (and checked) at once
    assert decode_event(encode_event(ev), lazy_rows=True) == eager.__class__(**{**_fields(eager), "binlog": None})
    bad = data.replace(b'"before_cols":[{"SignedInteger":1},{"String":"a"}],', b"")
    with pytest.raises(MalformedEvent, match="before_cols and after_cols of 2 values"):
        decode_event(bad)
    late = decode_event(bad, lazy_rows=True)  # checked when loaded
    with pytest.raises(MalformedEvent, match="before_cols and after_cols of 2 values"):
        late.load_rows()


def _fields(ev: ChangeEvent) -> dict:
    return {name: getattr(ev, name) for name in ev.__dataclass_fields__}
