"""The generated row-reading code (cdc_producer/rowcode.py) against the per-column readers (columns.py):
the same values from the same random row images, for every column type with an inline form."""

from __future__ import annotations

import struct
from functools import partial
from types import SimpleNamespace

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pymysqlreplication.constants import FIELD_TYPE

from cdc_producer import decode, rowcode
from cdc_producer.columns import column_codec
from cdc_producer.unpack import DIG2BYTES
from cdc_stream.errors import DataError
from cdc_stream.events import ChangeEvent, encode_event

settings.register_profile("rowcode", max_examples=300, deadline=None)


def col(type_: int, **kw) -> SimpleNamespace:
    base = dict(name="c", type=type_, unsigned=False, precision=10, decimals=2, fsp=0, max_length=40,
                length_size=2, collation_name="utf8mb4_general_ci")
    return SimpleNamespace(**{**base, **kw})


COLUMNS = [
    col(FIELD_TYPE.TINY), col(FIELD_TYPE.TINY, unsigned=True), col(FIELD_TYPE.SHORT), col(FIELD_TYPE.SHORT, unsigned=True),
    col(FIELD_TYPE.LONG), col(FIELD_TYPE.LONG, unsigned=True), col(FIELD_TYPE.LONGLONG),
    col(FIELD_TYPE.LONGLONG, unsigned=True), col(FIELD_TYPE.INT24), col(FIELD_TYPE.FLOAT), col(FIELD_TYPE.DOUBLE),
    *[col(FIELD_TYPE.NEWDECIMAL, precision=p, decimals=s)
      for p, s in [(1, 0), (5, 5), (8, 2), (10, 2), (12, 2), (18, 9), (30, 0), (38, 10), (65, 30), (14, 7)]],
    *[col(FIELD_TYPE.DATETIME2, fsp=f) for f in range(7)],
    *[col(FIELD_TYPE.TIMESTAMP2, fsp=f) for f in range(7)],
    col(FIELD_TYPE.DATE), col(FIELD_TYPE.YEAR), col(FIELD_TYPE.TIME2, fsp=3),
    col(FIELD_TYPE.VARCHAR, max_length=40), col(FIELD_TYPE.VARCHAR, max_length=1000),
    col(FIELD_TYPE.STRING, max_length=32), col(FIELD_TYPE.BLOB, length_size=1), col(FIELD_TYPE.BLOB, length_size=3),
    col(FIELD_TYPE.BLOB, length_size=4), col(FIELD_TYPE.VARCHAR, collation_name="cp1251_general_ci"),
    col(FIELD_TYPE.VARCHAR, collation_name="latin1_swedish_ci"), col(FIELD_TYPE.VARCHAR, collation_name="ucs2_general_ci"),
    col(FIELD_TYPE.VARCHAR, collation_name="utf16_general_ci", max_length=400),
    col(FIELD_TYPE.VARCHAR, collation_name="binary"), col(FIELD_TYPE.STRING, collation_name="binary", max_length=8),
    col(FIELD_TYPE.BLOB, collation_name="binary", length_size=2), col(FIELD_TYPE.VARCHAR, collation_name="sjis_japanese_ci"),
]


def value_bytes(column, draw) -> bytes:
    """Random bytes of one column's value in a row image (any content, the right framing)."""
    if column.type in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        size = column.length_size if column.type == FIELD_TYPE.BLOB else (2 if column.max_length > 255 else 1)
        text = draw(st.one_of(st.text(max_size=20).map(lambda s: s.encode("utf-8")), st.binary(max_size=20),
                              st.binary(min_size=256, max_size=300) if size > 1 else st.binary(max_size=255)))
        return len(text).to_bytes(size, "little") + text
    width = probe_width(column)
    return draw(st.binary(min_size=width, max_size=width))


def probe_width(column) -> int:
    """The fixed width of a column's value: where its reader ends on zero bytes."""
    return column_codec(column).reader(bytes(64), 0)[1]


@st.composite
def table_and_images(draw):
    columns = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=12))
    images = []
    for _ in range(draw(st.integers(1, 6))):
        nulls = draw(st.integers(0, (1 << len(columns)) - 1)) if draw(st.booleans()) else 0
        nbytes = (len(columns) + 7) // 8
        # The server sets the bitmap's unused high bits (as MariaDB and MySQL do): they mean nothing.
        padding = (1 << 8 * nbytes) - (1 << len(columns)) if draw(st.booleans()) else 0
        image = (nulls | padding).to_bytes(nbytes, "little")
        for i, c in enumerate(columns):
            if not nulls >> i & 1:
                image += value_bytes(c, draw)
        images.append(image)
    return columns, images


def decoders(columns) -> tuple[decode.TableDecoder, decode.TableDecoder]:
    codecs = [column_codec(c) for c in columns]
    readers = tuple(c.reader for c in codecs)
    specs = tuple(c.spec for c in codecs)
    names = [f"c{i}" for i in range(len(columns))]
    return decode.TableDecoder(names, readers, "db.t", specs), decode.TableDecoder(names, readers, "db.t")


def by_readers(dec: decode.TableDecoder, data: bytes) -> list[list]:
    out, pos = [], 0
    while pos < len(data):
        row, pos = dec.image(data, pos)
        out.append(row)
    assert pos == len(data)
    return out


def exact(rows) -> str:
    """rows in a form where NaN equals NaN and -0.0 differs from 0.0 (repr round-trips every float)."""
    return repr(rows)


@settings(settings.get_profile("rowcode"))
@given(table_and_images())
@example(([col(FIELD_TYPE.TINY), col(FIELD_TYPE.FLOAT), col(FIELD_TYPE.DOUBLE)],  # NaN bits, then -0.0 (CI found it)
          [b"\x00\x00\x00\x00\x81\x7f" + b"\x00" * 7 + b"\x80"]))
def test_generated_code_reads_what_the_readers_read(case):
    columns, images = case
    inline, calls = decoders(columns)
    data = b"".join(images)
    expected = by_readers(inline, data)
    assert exact(inline.rows(data)) == exact(expected)
    assert exact(calls.rows(data)) == exact(expected)  # readers only (no specs): the generated calls
    if len(images) % 2 == 0:
        pairs = [(expected[i], expected[i + 1]) for i in range(0, len(expected), 2)]
        assert exact(inline.row_pairs(data)) == exact(pairs)


@settings(settings.get_profile("rowcode"))
@given(table_and_images())
@example(([col(FIELD_TYPE.TINY), col(FIELD_TYPE.FLOAT), col(FIELD_TYPE.DOUBLE)],
          [b"\x00\x00\x00\x00\x81\x7f" + b"\x00" * 7 + b"\x80"]))
def test_generated_json_is_what_msgspec_writes_for_the_values(case):
    """The JSON written straight from row images, byte for byte msgspec's encoding of the tagged values."""
    columns, images = case
    data = b"".join(images)
    for inline in decoders(columns):  # inline forms, and readers only
        expected = by_readers(inline, data)
        assert b",".join(inline.rows_json(data)) == b",".join(msgspec.json.encode({"cols": r}) for r in expected)
        event = partial(ChangeEvent, uri="flv://db/db/t", sequence=7, operation="Add", columns=["c"], pk=[])
        assert encode_event(event(rows=inline.rows_json(data), rows_json=True)) == encode_event(event(rows=expected))
        if len(images) % 2 == 0:
            pairs = [{"before_cols": expected[i], "after_cols": expected[i + 1]} for i in range(0, len(expected), 2)]
            assert b",".join(inline.row_pairs_json(data)) == b",".join(msgspec.json.encode(p) for p in pairs)


def test_every_inline_kind_is_covered():
    kinds = {column_codec(c).spec.kind for c in COLUMNS if column_codec(c).spec is not None}
    assert kinds == {"fixed", "decimal", "datetime2", "timestamp2", "date", "text", "blob"}


@pytest.mark.parametrize("cut", [1, 3])
def test_truncated_images_are_refused(cut):
    columns = [col(FIELD_TYPE.LONGLONG), col(FIELD_TYPE.NEWDECIMAL, precision=12, decimals=2), col(FIELD_TYPE.VARCHAR)]
    inline, _ = decoders(columns)
    image = b"\x00" + bytes(8) + bytes([0x80, 0, 0, 0, 1, 5]) + b"\x03abc"
    assert inline.rows(image) == [[{"SignedInteger": 0}, {"Decimal": "1.05"}, {"String": "abc"}]]
    assert inline.rows_json(image) == [b'{"cols":[{"SignedInteger":0},{"Decimal":"1.05"},{"String":"abc"}]}']
    for read in (inline.rows, inline.rows_json):
        with pytest.raises(DataError, match="exact length"):
            read(image[:-cut])


# Decimals with more than one integer group; the generated code formats those whose first group is 0
# (most values of a DECIMAL(12,2)) without it. Random images almost never have it 0: these do.
WIDE_DECIMALS = [col(FIELD_TYPE.NEWDECIMAL, precision=p, decimals=s) for p, s in [(12, 2), (20, 2), (30, 0), (38, 10),
                                                                                  (65, 30)]]


def first_group_width(column) -> int:
    intg = column.precision - column.decimals
    return DIG2BYTES[intg % 9] if intg % 9 else 4


@settings(settings.get_profile("rowcode"))
@given(st.data())
def test_decimals_whose_first_integer_group_is_zero(data):
    columns = [*WIDE_DECIMALS, col(FIELD_TYPE.TINY)]
    values = b""
    for c in WIDE_DECIMALS:
        width, rest = first_group_width(c), probe_width(c) - first_group_width(c)
        values += b"\x80" + bytes(width - 1) + data.draw(st.binary(min_size=rest, max_size=rest))
    # no NULL, then the TINY NULL: the two paths of the generated code
    images = b"\x00" + values + b"\x07" + b"\x20" + values
    for inline in decoders(columns):
        expected = by_readers(inline, images)
        assert inline.rows_json(images) == [msgspec.json.encode({"cols": r}) for r in expected]
        assert inline.row_pairs_json(images) == [msgspec.json.encode({"before_cols": expected[0],
                                                                      "after_cols": expected[1]})]
    inline, _ = decoders([WIDE_DECIMALS[0]])
    assert inline.rows_json(b"\x00" + bytes([0x80, 0x05, 0xF5, 0xE0, 0xFF, 0x07])) == [b'{"cols":[{"Decimal":"99999999.07"}]}']
    # negative numbers are stored inverted (but the sign bit): -1.05, and the -0.00 a damaged image may hold
    negative = b"\x00" + bytes([0x7F, 0xFF, 0xFF, 0xFF, 0xFE, 0xFA]) + b"\x00" + bytes([0x7F]) + b"\xff" * 5
    assert inline.rows_json(negative) == [b'{"cols":[{"Decimal":"-1.05"}]}', b'{"cols":[{"Decimal":"-0.00"}]}']
    assert inline.rows(negative) == [[{"Decimal": "-1.05"}], [{"Decimal": "-0.00"}]]


def datetime2_bytes(year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int) -> bytes:
    packed = ((year * 13 + month) << 22 | day << 17 | hour << 12 | minute << 6 | second) + (1 << 39)
    return packed.to_bytes(5, "big") + micro.to_bytes(3, "big")


def test_temporal_months_cache_is_bounded_and_exact(monkeypatch):
    """Year and month texts are cached, at most _MONTHS_KEPT of them; a table's values stay exact as it turns over."""
    monkeypatch.setattr(rowcode, "_MONTHS_KEPT", 3)
    columns = [col(FIELD_TYPE.DATETIME2, fsp=6), col(FIELD_TYPE.DATE)]
    months = [(y, m) for y in (1999, 2024, 9999) for m in range(13)] * 2
    images = b"".join(b"\x00" + datetime2_bytes(y, m, 31 - m, m, 59 - m, m, 999_999 - m)
                      + (y << 9 | m << 5 | m).to_bytes(3, "little") for y, m in months)
    inline, _ = decoders(columns)
    rows = inline.rows_json(images)
    assert rows == [msgspec.json.encode({"cols": r}) for r in by_readers(inline, images)]
    assert rows[14] == (b'{"cols":[{"DateTime":{"year":2024,"month":1,"day":30,"hour":1,"minute":58,"second":1,'
                        b'"subsecond":999998}},{"Date":{"year":2024,"month":1,"day":1}}]}')
    assert len(rowcode._DATETIME_MONTHS.cache) <= 3 and len(rowcode._DATE_MONTHS.cache) <= 3


def test_a_text_length_after_fixed_width_columns_is_read_with_them():
    """The no-NULL path reads a text or blob column's length in the struct call of the fixed-width columns
    before it; a row cut inside that length is refused, as anywhere else."""
    columns = [col(FIELD_TYPE.LONG), col(FIELD_TYPE.TINY), col(FIELD_TYPE.VARCHAR, max_length=1000),
               col(FIELD_TYPE.DOUBLE), col(FIELD_TYPE.BLOB, collation_name="binary", length_size=4)]
    inline, _ = decoders(columns)
    image = (b"\x00" + (-5).to_bytes(4, "little", signed=True) + b"\x07" + b"\x03\x00h\xc3\xa9"
             + struct.pack("<d", 0.5) + b"\x02\x00\x00\x00\x00\xff")
    assert inline.rows_json(image) == [b'{"cols":[{"SignedInteger":-5},{"SignedInteger":7},{"String":"h\xc3\xa9"},'
                                       b'{"Double":0.5},{"Blob":"AP8="}]}']
    assert inline.rows_json(image) == [msgspec.json.encode({"cols": r}) for r in by_readers(inline, image)]
    with pytest.raises(DataError, match="exact length"):
        inline.rows_json(image[:7])  # within the VARCHAR's 2-byte length
