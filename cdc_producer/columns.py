"""One column of a row image -> its tagged value: `column_codec`, the one switch over column types.

python-mysql-replication parses the table map (column types, names, charsets, ENUM/SET
labels), but its row decoding loses information: zero dates ('0000-00-00', '2020-00-00') and
the empty SET become None, YEAR 0000 becomes 1900, negative TIME(1..5) and old-format negative
TIME come out wrong, BINARY(n) loses its trailing zero bytes, DECIMAL can come out in exponent
form ('0E-30'), and text is decoded with the wrong codecs (charsets.py). So the row images are
read here: `column_codec` gives each column an exact reader (its bytes -> its tagged JSON value;
numbers and times from unpack.py, text tagged by charsets.py) and, for the common types, an
inline form (`Spec`) from which rowcode.py generates the table's JSON-writing code once per
table map (the producer's fast path). tests/test_types.py checks the readers against
python-mysql-replication's decoding on every type where the library is right;
tests/test_rowcode.py checks the generated code against the readers.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

from pymysqlreplication.constants import FIELD_TYPE

from cdc_producer import mysql_json
from cdc_producer.charsets import charset_of, text_tagger
from cdc_producer.library_patches import BLOB_COMPRESSED, VARCHAR_COMPRESSED
from cdc_producer.rowcode import Spec
from cdc_producer.unpack import (
    Reader,
    date_reader,
    datetime2_reader,
    decimal_reader,
    old_datetime_reader,
    old_time_reader,
    old_timestamp_reader,
    time2_reader,
    timestamp2_reader,
    year_reader,
)
from cdc_stream import values
from cdc_stream.column_types import codec_of
from cdc_stream.errors import DataError

_INTS = {FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.LONG, FIELD_TYPE.INT24, FIELD_TYPE.LONGLONG}
_TEXT_TYPES = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB}


# ---------------------------------------------------------------------------
# Readers of one column's bytes in a row image (formats: MySQL's sql/field.cc; MariaDB's are
# the same). DECIMAL and the temporal types are read by unpack.py.

def _struct_reader(fmt: str, tag: str) -> Reader:
    s = struct.Struct(fmt)
    unpack, size = s.unpack_from, s.size
    return lambda data, pos: ({tag: unpack(data, pos)[0]}, pos + size)


def _int24_reader(signed: bool) -> Reader:
    tag = "SignedInteger" if signed else "UnsignedInteger"
    return lambda data, pos: ({tag: int.from_bytes(data[pos:pos + 3], "little", signed=signed)}, pos + 3)


def _int_reader(column: Any) -> Reader:
    signed = not column.unsigned
    if column.type == FIELD_TYPE.INT24:
        return _int24_reader(signed)
    fmt = {FIELD_TYPE.TINY: "b", FIELD_TYPE.SHORT: "h", FIELD_TYPE.LONG: "i", FIELD_TYPE.LONGLONG: "q"}[column.type]
    return _struct_reader("<" + (fmt if signed else fmt.upper()), "SignedInteger" if signed else "UnsignedInteger")


def _length_prefixed(size: int) -> Callable[[bytes, int], tuple[bytes, int]]:
    """A reader of `size`-byte little-endian length + that many bytes."""
    def read(data: bytes, pos: int) -> tuple[bytes, int]:
        start = pos + size
        end = start + int.from_bytes(data[pos:start], "little")
        return data[start:end], end

    return read


def text_reader(column: Any) -> Reader:
    """CHAR/VARCHAR/TEXT/BINARY/VARBINARY/BLOB (and MariaDB's JSON, a LONGTEXT)."""
    if column.type == FIELD_TYPE.BLOB:
        raw = _length_prefixed(column.length_size)
    else:
        raw = _length_prefixed(2 if column.max_length > 255 else 1)
    return _tagged(column, raw)


def _tagged(column: Any, raw: Callable[[bytes, int], tuple[bytes, int]]) -> Reader:
    """A reader tagging the bytes `raw` reads as the column's text (String, or Blob where not exact) or binary."""
    charset = charset_of(column)
    if charset == "binary":
        blob = values.blob_tag
        if column.type == FIELD_TYPE.STRING:
            # BINARY(n) is logged without its trailing zero bytes; the stored value has them.
            width = column.max_length

            def read_binary(data: bytes, pos: int) -> tuple[Any, int]:
                value, pos = raw(data, pos)
                return blob(value.ljust(width, b"\0")), pos

            return read_binary

        def read_blob(data: bytes, pos: int) -> tuple[Any, int]:
            value, pos = raw(data, pos)
            return blob(value), pos

        return read_blob
    tag = text_tagger(charset)

    def read_text(data: bytes, pos: int) -> tuple[Any, int]:
        value, pos = raw(data, pos)
        return tag(value), pos

    return read_text


def uncompress(value: bytes, column: str) -> bytes:
    """The value of a MariaDB COMPRESSED column from its stored form (sql/field.cc, Field_longstr::
    uncompress): empty, or a header byte whose high nibble is the method (0: the value follows as
    is; 8: zlib, its low 3 bits the number of big-endian length bytes that follow, bit 3 set for a
    raw deflate stream, clear for one with the zlib wrapper)."""
    if not value:
        return b""
    head = value[0]
    if head >> 4 == 0:
        return value[1:]
    if head >> 4 != 8:
        raise DataError(f"COMPRESSED column {column!r} holds a value compressed with method {head >> 4}, "
                        "which MariaDB 10.11 does not write (only zlib): the binlog is damaged or from a newer server")
    n = head & 7
    length = int.from_bytes(value[1:1 + n], "big")
    try:
        plain = zlib.decompress(value[1 + n:], -zlib.MAX_WBITS if head & 8 else zlib.MAX_WBITS)
    except zlib.error as e:
        raise DataError(
            f"COMPRESSED column {column!r} holds a value that does not inflate ({e}): the binlog is damaged") from None
    if len(plain) != length:
        raise DataError(f"COMPRESSED column {column!r} inflated to {len(plain)} bytes, its header says {length}: "
                        "the binlog is damaged")
    return plain


def compressed_reader(column: Any) -> Reader:
    """MariaDB's VARCHAR/VARBINARY/TEXT/BLOB ... COMPRESSED: length-prefixed like VARCHAR/BLOB, the
    stored form uncompressed (`uncompress`), then tagged as the plain column would be (the follower
    compresses the value again itself)."""
    if column.type == BLOB_COMPRESSED:
        stored = _length_prefixed(column.length_size)
    else:
        stored = _length_prefixed(2 if column.max_length > 255 else 1)
    name = column.name

    def raw(data: bytes, pos: int) -> tuple[bytes, int]:
        value, pos = stored(data, pos)
        return uncompress(value, name), pos

    return _tagged(column, raw)


def _labels(column: Any, labels: list[str]) -> list[Any]:
    """ENUM/SET labels decoded with the column's charset: each a str, or a Blob tag."""
    tag = text_tagger(charset_of(column))
    out = []
    for label in labels:
        decoded = tag(label.encode("utf-8", "surrogateescape"))
        out.append(decoded.get("String", decoded))
    return out


def enum_reader(column: Any) -> Reader:
    """ENUM: a 1- or 2-byte index into the labels; 0 is the '' error value."""
    labels = _labels(column, column.enum_values or [""])
    tags = [{"Enum": label} if isinstance(label, str) else label for label in labels]
    tags[0] = {"Enum": ""}  # the error value, whatever the charset
    # (rows share these dicts: values are never mutated after decoding)
    size = column.size

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        index = int.from_bytes(data[pos:pos + size], "little")
        if index >= len(tags):
            raise DataError(f"ENUM column {column.name!r} holds index {index} but has {len(tags) - 1} labels")
        return tags[index], pos + size

    return read


def set_reader(column: Any) -> Reader:
    """SET: a 1..8-byte bitmask; labels listed in definition order (the empty set is [])."""
    labels = _labels(column, column.set_values or [])
    size = column.size
    as_text = all(isinstance(label, str) for label in labels)
    raw_labels = [lab.encode("utf-8", "surrogateescape") for lab in (column.set_values or [])]

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        mask = int.from_bytes(data[pos:pos + size], "little")
        members = [i for i in range(len(labels)) if mask >> i & 1]
        if as_text:
            return {"Set": [labels[i] for i in members]}, pos + size
        return values.blob_tag(b",".join(raw_labels[i] for i in members)), pos + size

    return read


def bit_reader(column: Any) -> Reader:
    """BIT(n): ceil(n/8) big-endian bytes."""
    size = column.bytes
    return lambda data, pos: ({"Bit": int.from_bytes(data[pos:pos + size], "big")}, pos + size)


def geometry_reader(column: Any) -> Reader:
    """GEOMETRY and its subtypes: length + MySQL's internal form (SRID + WKB)."""
    raw = _length_prefixed(column.length_size)
    tag = values.geometry_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, pos = raw(data, pos)
        return tag(value), pos

    return read


def json_reader(column: Any) -> Reader:
    """MySQL's binary JSON (MariaDB's JSON is a LONGTEXT, read by text_reader)."""
    raw = _length_prefixed(column.length_size)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, pos = raw(data, pos)
        return {"Json": mysql_json.decode(value)}, pos

    return read


class Codec(NamedTuple):
    """How one column is read: its exact reader, and its inline form for rowcode.py (None where only
    the reader is exact). A spec must decode exactly as the reader does (tests/test_rowcode.py)."""

    reader: Reader
    spec: Spec | None = None


_FIXED_CODES = {FIELD_TYPE.TINY: "b", FIELD_TYPE.SHORT: "h", FIELD_TYPE.LONG: "i", FIELD_TYPE.LONGLONG: "q"}
_FIXED_TYPES: dict[int, Codec] = {
    FIELD_TYPE.FLOAT: Codec(_struct_reader("<f", "Float"), Spec("fixed", ("f", "Float"))),
    FIELD_TYPE.DOUBLE: Codec(_struct_reader("<d", "Double"), Spec("fixed", ("d", "Double"))),
    FIELD_TYPE.YEAR: Codec(year_reader),
    FIELD_TYPE.DATE: Codec(date_reader, Spec("date")),
}
# The old formats of the temporal types, by their fractional-second precision (unpack.py).
_OLD_TEMPORAL = {FIELD_TYPE.TIME: old_time_reader, FIELD_TYPE.DATETIME: old_datetime_reader,
                 FIELD_TYPE.TIMESTAMP: old_timestamp_reader}


def column_codec(column: Any, table: str = "?", fraction: int | None = None) -> Codec:
    """The reader (and inline form) of one table-map column of `table`; DataError for types the binlog
    cannot carry exactly. `fraction`: an old-format TIME/DATETIME/TIMESTAMP column's precision, which
    the table map does not give (old_temporals.py; None: 0)."""
    t = column.type
    if t in _OLD_TEMPORAL:
        return Codec(_OLD_TEMPORAL[t](fraction or 0))
    if t in _INTS:
        code = _FIXED_CODES.get(t)
        spec = None if code is None else Spec(
            "fixed", (code.upper(), "UnsignedInteger") if column.unsigned else (code, "SignedInteger"))
        return Codec(_int_reader(column), spec)
    if t in _FIXED_TYPES:
        return _FIXED_TYPES[t]
    if t == FIELD_TYPE.NEWDECIMAL:
        return Codec(decimal_reader(column.precision, column.decimals),
                     Spec("decimal", (column.precision, column.decimals)))
    if t == FIELD_TYPE.DATETIME2:
        return Codec(datetime2_reader(column.fsp), Spec("datetime2", (column.fsp,)))
    if t == FIELD_TYPE.TIMESTAMP2:
        return Codec(timestamp2_reader(column.fsp), Spec("timestamp2", (column.fsp,)))
    if t == FIELD_TYPE.TIME2:
        return Codec(time2_reader(column.fsp))
    if t in _TEXT_TYPES:
        return Codec(text_reader(column), _text_spec(column))
    if t == FIELD_TYPE.ENUM:
        return Codec(enum_reader(column))
    if t == FIELD_TYPE.SET:
        return Codec(set_reader(column))
    if t == FIELD_TYPE.BIT:
        return Codec(bit_reader(column))
    if t == FIELD_TYPE.GEOMETRY:
        return Codec(geometry_reader(column))
    if t == FIELD_TYPE.JSON:
        return Codec(json_reader(column))
    if t in (BLOB_COMPRESSED, VARCHAR_COMPRESSED):
        return Codec(compressed_reader(column))
    if t == FIELD_TYPE.DECIMAL:
        raise DataError(
            f"column {column.name!r} of {table} has the pre-5.0 DECIMAL format (binlog type 0), which cdc-producer "
            "cannot decode; ALTER TABLE ... FORCE on the leader rewrites it in the current format"
        )
    raise DataError(
        f"column {column.name!r} of {table} has binlog type {t}, which cdc-producer cannot decode; exclude the "
        "table in [filters] exclude_tables if its changes need not flow, or change the column's type on the leader"
    )


def _text_spec(column: Any) -> Spec | None:
    t = column.type
    size = column.length_size if t == FIELD_TYPE.BLOB else (2 if column.max_length > 255 else 1)
    charset = charset_of(column)
    if charset == "binary":
        return None if t == FIELD_TYPE.STRING else Spec("blob", (size,))  # BINARY(n) is padded by its reader
    if charset == "latin1" or charset == "ucs2":
        return None  # MySQL's own latin1 table; UCS-2's check for astral characters
    codec = codec_of(charset)
    return Spec("text", (size, codec)) if codec else Spec("blob", (size,))


__all__ = ["Codec", "column_codec", "compressed_reader", "text_reader", "uncompress"]
