"""Row events -> column names, primary key and tagged values, read from the raw row images.

python-mysql-replication parses the table map (column types, names, charsets,
ENUM/SET labels), but its row decoding loses information: zero dates
('0000-00-00', '2020-00-00') and the empty SET become None, YEAR 0000 becomes
1900, negative TIME(1..5) and old-format negative TIME come out wrong,
BINARY(n) loses its trailing zero bytes, DECIMAL can come out in exponent form
('0E-30'), latin1 is decoded as Python's cp1252 (which fails on 5 bytes MySQL
accepts), utf16/utf32 with Python's BOM-guessing codecs, and a value its codec
cannot decode stops the stream. So this module decodes the row images itself:
`column_codec` is the one switch over column types, giving each column an exact
reader (its bytes -> its tagged JSON value) and, for the common types, an inline
form from which rowcode.py generates the table's JSON-writing code once per table
map (the producer's fast path). tests/test_types.py checks the readers against
python-mysql-replication's decoding on every type where the library is right;
tests/test_rowcode.py checks the generated code against the readers.

Text is sent as {"String": ...} only when its charset maps to Unicode exactly
as MySQL maps it (so the follower, converting back from utf8mb4, stores the
same bytes); any other text travels as {"Blob": ...}, its exact bytes.
"""

from __future__ import annotations

import codecs
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pymysqlreplication import row_event
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import (
    PartialUpdateRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
)

from cdc_producer import mysql_json, partial_json
from cdc_producer.library_patches import BLOB_COMPRESSED, VARCHAR_COMPRESSED, row_image_bytes
from cdc_producer.rowcode import RowsFn, Spec, compile_rows_json
from cdc_stream import values
from cdc_stream.errors import DataError

# A reader takes (row image, offset) and returns (tagged value, offset after the value).
Reader = Callable[[bytes, int], "tuple[Any, int]"]
TextTagger = Callable[[bytes], Any]

_INTS = {FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.LONG, FIELD_TYPE.INT24, FIELD_TYPE.LONGLONG}
_TEXT_TYPES = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB}


def primary_key(event: RowsEvent) -> list[str]:
    """Primary-key column names from the table map's metadata ([] when there is none)."""
    pk = event.primary_key
    if not pk:
        return []
    return [pk] if isinstance(pk, str) else list(pk)


# ---------------------------------------------------------------------------
# Charsets (library_patches.py keeps the id of collations the library does not know).

# MariaDB's uca1400 collation ids: 2048 + 256 * (index of the charset below) + variant.
_UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")


def charset_of(column: Any) -> str | None:
    """The MySQL charset name of a text/ENUM/SET column ('binary' for binary data, None if unknown)."""
    return _charset_of_collation(getattr(column, "collation_name", None))


def charset_of_collation_id(collation_id: int | None, dbms: str = "mariadb") -> str | None:
    """The charset name of a collation id (a Query event's character_set_client), None if unknown."""
    if collation_id is None:
        return None
    # (through the module: library_patches.py makes it keep the ids the library does not know)
    return _charset_of_collation(row_event.find_charset(str(collation_id), dbms)[1])


def _charset_of_collation(collation: str | None) -> str | None:
    if not collation:
        return None
    if collation.startswith("#"):
        cid = int(collation[1:])
        index = (cid - 2048) >> 8
        return _UCA1400_CHARSETS[index] if cid >= 2048 and index < len(_UCA1400_CHARSETS) else None
    # Every collation name starts with its charset's name ("latin1_swedish_ci"), or is "binary".
    name = collation.split("_", 1)[0]
    return "utf8mb3" if name == "utf8" else name


def _mysql_latin1_table() -> str:
    # MySQL's latin1 is cp1252 plus the five bytes cp1252 leaves undefined, which
    # MySQL maps to U+0081, U+008D, U+008F, U+0090 and U+009D.
    chars = []
    for b in range(256):
        try:
            chars.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(b))
    return "".join(chars)


_LATIN1_TABLE = _mysql_latin1_table()

# Charsets whose Python codec maps every byte sequence it accepts to the same
# code points as MySQL does, and back (tests/test_types.py re-checks the
# single-byte ones against the server). Bytes a codec rejects make that one
# value a Blob, which is exact too.
UNICODE_CODECS = {"utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf16": "utf-16-be", "utf16le": "utf-16-le",
                  "utf32": "utf-32-be", "ucs2": "utf-16-be"}
SINGLE_BYTE_CODECS = {
    "ascii": "ascii", "latin2": "iso8859_2", "latin5": "iso8859_9", "latin7": "iso8859_13",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1257": "cp1257", "cp850": "cp850", "cp852": "cp852",
    "koi8r": "koi8_r", "macroman": "mac_roman", "tis620": "tis_620",
}
EXACT_CHARSETS = frozenset(UNICODE_CODECS) | frozenset(SINGLE_BYTE_CODECS) | {"latin1"}


def exact_text(raw: bytes, charset: str | None) -> str | None:
    """`raw` (text in `charset`) as Unicode when the mapping is exact both ways, else None
    (the same rule as text_tagger: a String only where the follower gets the very same bytes back)."""
    if charset == "latin1":
        return codecs.charmap_decode(raw, "strict", _LATIN1_TABLE)[0]
    codec = UNICODE_CODECS.get(charset or "") or SINGLE_BYTE_CODECS.get(charset or "")
    if codec is None:
        return None
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError:
        return None
    if charset == "ucs2" and any(ord(c) > 0xFFFF for c in text):
        return None
    return text


def text_tagger(charset: str | None) -> TextTagger:
    """A function turning one value's bytes in `charset` into {"String": ...}, or {"Blob": ...}
    when the text has no exact round trip through Unicode (binary data, unknown or legacy
    multi-byte charsets, bytes the charset does not define)."""
    blob = values.blob_tag
    if charset == "latin1":
        table = _LATIN1_TABLE
        return lambda raw: {"String": codecs.charmap_decode(raw, "strict", table)[0]}
    codec = UNICODE_CODECS.get(charset or "") or SINGLE_BYTE_CODECS.get(charset or "")
    if codec is None:
        return blob
    decode = codecs.getdecoder(codec)
    bmp_only = charset == "ucs2"  # UCS-2 has no surrogate pairs: an astral result would be wrong

    def tag(raw: bytes) -> Any:
        try:
            text = decode(raw)[0]
        except UnicodeDecodeError:
            return blob(raw)
        if bmp_only and any(ord(c) > 0xFFFF for c in text):
            return blob(raw)
        return {"String": text}

    return tag


# ---------------------------------------------------------------------------
# Readers of one column's bytes in a row image (formats: MySQL's
# sql/field.cc, mysys/my_time.cc, strings/decimal.cc; MariaDB's are the same).


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


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_reader(precision: int, scale: int) -> Reader:
    """DECIMAL(precision, scale) in MySQL's binary form: groups of 9 digits in 4
    big-endian bytes, shorter leading/trailing groups, sign in the top bit,
    negative numbers stored with every bit inverted."""
    intg = precision - scale
    lead_digits, int_groups = intg % 9, intg // 9
    frac_groups, tail_digits = scale // 9, scale % 9
    lead_bytes, tail_bytes = _DIG2BYTES[lead_digits], _DIG2BYTES[tail_digits]
    size = lead_bytes + 4 * int_groups + 4 * frac_groups + tail_bytes
    # The digit groups as (shift, mask) of the whole value read as one big-endian integer.
    lead = (8 * (size - lead_bytes), (1 << 8 * lead_bytes) - 1)
    ints = [(8 * (size - lead_bytes - 4 * (k + 1)), 0xFFFFFFFF) for k in range(int_groups)]
    fracs = [(8 * (tail_bytes + 4 * (frac_groups - k - 1)), 0xFFFFFFFF) for k in range(frac_groups)]
    tail_mask = (1 << 8 * tail_bytes) - 1
    sign = 1 << (8 * size - 1) if size else 0
    invert = (1 << 8 * size) - 1 ^ sign  # a negative number: every bit but the sign flipped back

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value = int.from_bytes(data[pos:pos + size], "big")
        negative = not value & sign
        value ^= invert if negative else sign
        int_part = value >> lead[0] & lead[1] if lead_bytes else 0
        for shift, mask in ints:
            int_part = int_part * 1_000_000_000 + (value >> shift & mask)
        frac = [f"{value >> shift & mask:09d}" for shift, mask in fracs]
        if tail_bytes:
            frac.append(f"{value & tail_mask:0{tail_digits}d}")
        text = f"{'-' if negative else ''}{int_part}" + (f".{''.join(frac)}" if scale else "")
        return {"Decimal": text}, pos + size

    return read


def _fraction_reader(fsp: int) -> Callable[[bytes, int], tuple[int, int]]:
    """The fractional-seconds part of TIME2/DATETIME2/TIMESTAMP2: (microseconds, bytes)."""
    n = (fsp + 1) // 2
    scale = 10 ** (6 - 2 * n)  # 1 byte holds 1/100 s, 2 bytes 1/10000 s, 3 bytes microseconds
    return lambda data, pos: (int.from_bytes(data[pos:pos + n], "big") * scale if n else 0, n)


def _unpack_datetime(packed: int) -> tuple[int, int, int, int, int, int]:
    """(y, m, d, h, mi, s) of the 40-bit integer part of DATETIME2 (sign bit already removed)."""
    ymd, hms = packed >> 17, packed & 0x1FFFF
    ym = ymd >> 5
    return ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63


def datetime2_reader(fsp: int) -> Reader:
    """DATETIME(fsp), MySQL 5.6+ format: 5 big-endian bytes (offset by 2^39) + fraction."""
    frac = _fraction_reader(fsp)
    tag = values.datetime_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        packed = int.from_bytes(data[pos:pos + 5], "big") - 0x8000000000
        micro, n = frac(data, pos + 5)
        return tag(*_unpack_datetime(packed), micro), pos + 5 + n

    return read


def timestamp2_reader(fsp: int) -> Reader:
    """TIMESTAMP(fsp), MySQL 5.6+ format: 4 big-endian bytes of unix time + fraction."""
    frac = _fraction_reader(fsp)
    tag = values.timestamp_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        micro, n = frac(data, pos + 4)
        return tag(int.from_bytes(data[pos:pos + 4], "big"), micro), pos + 4 + n

    return read


def time2_reader(fsp: int) -> Reader:
    """TIME(fsp), MySQL 5.6+ format: (hh:mm:ss packed in 3 bytes << 8n | fraction in n bytes)
    as one signed big-endian number offset by 2^(8*(3+n)-1). python-mysql-replication
    decodes the integer and fractional parts separately, which is wrong for
    negative values with 1..5 fractional digits."""
    n = (fsp + 1) // 2
    size = 3 + n
    offset = 1 << (8 * size - 1)
    frac_scale = 10 ** (6 - 2 * n)  # the stored fraction -> microseconds
    frac_bits = 8 * n
    tag = values.time_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value = int.from_bytes(data[pos:pos + size], "big") - offset
        negative = value < 0
        value = -value if negative else value
        int_part, micro = value >> frac_bits, (value & ((1 << frac_bits) - 1)) * frac_scale
        return tag(negative, (int_part >> 12) & 0x3FF, (int_part >> 6) & 63, int_part & 63, micro), pos + size

    return read


def _time_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """TIME, pre-5.6 format (MariaDB with mysql56_temporal_format=OFF): signed 3-byte HHMMSS."""
    value = int.from_bytes(data[pos:pos + 3], "little", signed=True)
    negative, value = value < 0, abs(value)
    return values.time_tag(negative, value // 10000, value // 100 % 100, value % 100, 0), pos + 3


def _datetime_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """DATETIME, pre-5.6 format: 8-byte integer YYYYMMDDhhmmss."""
    value = int.from_bytes(data[pos:pos + 8], "little")
    d, t = divmod(value, 1_000_000)
    return values.datetime_tag(d // 10000, d // 100 % 100, d % 100, t // 10000, t // 100 % 100, t % 100, 0), pos + 8


def _timestamp_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """TIMESTAMP, pre-5.6 format: 4-byte little-endian unix time."""
    return values.timestamp_tag(int.from_bytes(data[pos:pos + 4], "little"), 0), pos + 4


def _date_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """DATE: 3 little-endian bytes, day:5 month:4 year:15 bits; zero parts are kept."""
    value = int.from_bytes(data[pos:pos + 3], "little")
    return values.date_tag(value >> 9, (value >> 5) & 15, value & 31), pos + 3


def _year_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """YEAR: one byte, years since 1900, where 0 means the year 0000."""
    b = data[pos]
    return {"Year": 1900 + b if b else 0}, pos + 1


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
    FIELD_TYPE.YEAR: Codec(_year_reader),
    FIELD_TYPE.DATE: Codec(_date_reader, Spec("date")),
    FIELD_TYPE.TIME: Codec(_time_reader),
    FIELD_TYPE.DATETIME: Codec(_datetime_reader),
    FIELD_TYPE.TIMESTAMP: Codec(_timestamp_reader),
}


def column_codec(column: Any, table: str = "?") -> Codec:
    """The reader (and inline form) of one table-map column of `table`; DataError for types the binlog
    cannot carry exactly."""
    t = column.type
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
    codec = UNICODE_CODECS.get(charset or "") or SINGLE_BYTE_CODECS.get(charset or "")
    return Spec("text", (size, codec)) if codec else Spec("blob", (size,))


# ---------------------------------------------------------------------------
# Tables and rows


@dataclass(frozen=True)
class TableDecoder:
    """Column names and per-column readers of one table map.

    `specs` (one per column, None where the column has no inline form) let
    rowcode.py generate the table's row-reading code; without them the
    generated code calls the readers."""

    names: list[str]
    readers: tuple[Reader, ...]
    table: str = "?"
    specs: tuple[Spec | None, ...] | None = None
    _compiled: list[RowsFn] = field(default_factory=list, repr=False, compare=False)

    def image(self, data: bytes, pos: int) -> tuple[list[Any], int]:
        """One row image at `pos`: (tagged values, offset after it)."""
        readers = self.readers
        nbytes = (len(readers) + 7) // 8
        nulls = int.from_bytes(data[pos:pos + nbytes], "little")
        pos += nbytes
        row: list[Any] = []
        append = row.append
        null = values.NULL
        for i, read in enumerate(readers):
            if nulls >> i & 1:
                append(null)
            else:
                value, pos = read(data, pos)
                append(value)
        return row, pos

    def _images(self, data: bytes, per_row: int) -> list[list[Any]]:
        """Every image of `data`, through the readers (the rare path: snapshot windows, tests)."""
        out: list[list[Any]] = []
        pos, end = 0, len(data)
        try:
            while pos < end:
                row, pos = self.image(data, pos)
                out.append(row)
        except (IndexError, struct.error):
            pos = end + 1  # a reader ran past the end
        self._check_length(pos, end)
        if len(out) % per_row:
            self._check_length(end + 1, end)
        return out

    def _compiled_json(self, which: int) -> RowsFn:
        # Generated on first use: a table map whose rows are all filtered out costs nothing.
        if not self._compiled:
            specs: list[Spec | None] = list(self.specs) if self.specs is not None else [None] * len(self.readers)
            self._compiled.extend(compile_rows_json(specs, self.readers))
        return self._compiled[which]

    def _run_json(self, which: int, data: bytes) -> list[bytes]:
        end = len(data)
        try:
            out, pos = self._compiled_json(which)(data, 0, end)
        except (IndexError, struct.error):
            out, pos = [], end + 1  # a reader ran past the end
        self._check_length(pos, end)
        return out

    def rows(self, data: bytes) -> list[list[Any]]:
        """Every row image of a write/delete event's body, as tagged values."""
        return self._images(data, 1)

    def row_pairs(self, data: bytes) -> list[tuple[list[Any], list[Any]]]:
        """Every (before, after) pair of an update event's body, as tagged values."""
        images = self._images(data, 2)
        return [(images[i], images[i + 1]) for i in range(0, len(images), 2)]

    def rows_json(self, data: bytes) -> list[bytes]:
        """rows(), each row already as the JSON of its entry in an event's rows ({"cols": [...]}):
        code generated per table map (rowcode.py), the producer's fast path."""
        return self._run_json(0, data)

    def row_pairs_json(self, data: bytes) -> list[bytes]:
        """row_pairs(), each pair as JSON ({"before_cols": [...], "after_cols": [...]})."""
        return self._run_json(1, data)

    def _check_length(self, pos: int, end: int) -> None:
        # Readers that disagree with the table map about a column's width end
        # anywhere but exactly at the end: better to stop than to publish garbage.
        if pos != end:
            raise DataError(
                f"the row images of {self.table} did not decode to their exact length ({pos} of {end} bytes): "
                "a column format the binlog does not describe (MariaDB's pre-10.1 TIME/DATETIME/TIMESTAMP "
                "with fractional seconds?); rebuild the table on the leader with ALTER TABLE ... FORCE"
            )


def build_table_decoder(table: Any) -> TableDecoder:
    """Compile the readers of a table map (a pymysqlreplication Table)."""
    names = [c.name if c.name is not None else f"UNKNOWN_COL{i}" for i, c in enumerate(table.columns)]
    name = f"{table.schema}.{table.table}"
    codecs = [column_codec(c, name) for c in table.columns]
    return TableDecoder(names, tuple(c.reader for c in codecs), name, tuple(c.spec for c in codecs))


_decoders: dict[int, tuple[Any, TableDecoder]] = {}


def table_decoder(table: Any) -> TableDecoder:
    """The decoder of a table map, compiled once per table map object."""
    cached = _decoders.get(table.table_id)
    if cached is not None and cached[0] is table:
        return cached[1]
    if len(_decoders) > 10_000:  # table ids grow with every ALTER: forget old ones
        _decoders.clear()
    decoder = build_table_decoder(table)
    _decoders[table.table_id] = (table, decoder)
    return decoder


def _require_full_image(event: RowsEvent, width: int) -> None:
    full = (1 << width) - 1
    bitmaps = [event.columns_present_bitmap]
    if isinstance(event, UpdateRowsEvent):
        bitmaps.append(event.columns_present_bitmap2)
    if event.number_of_columns != width or any(int.from_bytes(b, "little") & full != full for b in bitmaps):
        raise DataError(
            f"a row event of {event.schema}.{event.table} does not carry every column "
            "(binlog_row_image is not FULL in the session that wrote it): the change cannot be replayed; "
            "SET GLOBAL binlog_row_image='FULL' on the leader and make sure no session overrides it"
        )


def _require_column_names(table: Any) -> None:
    if any(c.name is None for c in table.columns):
        raise DataError(
            f"the table map of {table.schema}.{table.table} carries no column names (binlog_row_metadata was not FULL "
            "when it was logged): its rows cannot be replayed by name; SET GLOBAL binlog_row_metadata='FULL' on the "
            "leader (changes logged before that cannot be replayed: copy the table again with --snapshot)"
        )


def encode_rows(event: RowsEvent, as_json: bool = False) -> tuple[list[str], list[Any]]:
    """(column names, rows as lists of tagged values) of a rows event.

    Update rows come as (before, after) pairs. as_json: each row as the bytes of its
    JSON object in the event instead (ChangeEvent.rows_json)."""
    table = event.table_map[event.table_id]
    decoder = table_decoder(table)
    if isinstance(event, PartialUpdateRowsEvent):  # binlog_row_value_options=PARTIAL_JSON: whole rows rebuilt
        pairs = partial_json.event_rows(event, table.columns, decoder, row_image_bytes(event))
        _require_full_image(event, len(decoder.readers))
        _require_column_names(table)
        return decoder.names, [partial_json.pair_json(p) for p in pairs] if as_json else pairs
    _require_full_image(event, len(decoder.readers))
    _require_column_names(table)
    data = row_image_bytes(event)
    if isinstance(event, UpdateRowsEvent):
        return decoder.names, decoder.row_pairs_json(data) if as_json else decoder.row_pairs(data)
    return decoder.names, decoder.rows_json(data) if as_json else decoder.rows(data)


__all__ = [
    "Codec", "TableDecoder", "build_table_decoder", "charset_of", "charset_of_collation_id", "column_codec",
    "compressed_reader", "encode_rows", "exact_text", "primary_key", "table_decoder", "text_tagger", "uncompress",
]
