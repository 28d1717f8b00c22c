"""MySQL's binary JSON (the JSON column type in MySQL 5.7+ row images) -> plain JSON values.

The value each document carries is the one MySQL prints for it (Json_wrapper::to_string), so
the follower stores the same JSON text: objects keep MySQL's key order (by length, then
bytes), dates print as "YYYY-MM-DD", datetimes and timestamps as "YYYY-MM-DD
HH:MM:SS.ffffff", times as "HH:MM:SS.ffffff", DECIMALs as numbers with their exact digits
(msgspec.Raw, so "9.00" stays 9.00 on the topic), other opaque values as
"base64:typeNN:...". python-mysql-replication's parse_json differs in each of these (decimals
become floats, datetimes and times Python objects, a TIME over 23 hours raises, other opaque
values are decoded with errors="ignore", a short document becomes None).

Layout (sql-common/json_binary.cc): a type byte, then the value. Objects and arrays have a
count and a byte size (2 bytes each when small, 4 when large), key entries (offset + 2-byte
length, objects only) and value entries (type + offset, or the value itself for literals and
small integers, and for 32-bit integers in large containers); offsets are relative to the
container's first byte, so a document left sparse by an in-place partial update still reads.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import msgspec
from pymysqlreplication.constants import FIELD_TYPE

from cdc_producer.unpack import datetime_parts, decimal_reader, longlong_packed, time_parts
from cdc_stream.errors import DataError

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = (
    0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xA, 0xB, 0xC, 0xF)
_LITERALS = {0: None, 1: True, 2: False}
_SCALARS = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q", DOUBLE: "<d"}

# Field types of opaque values MySQL prints as dates/times/decimals (include/field_types.h).
_DECIMAL_TYPES = {FIELD_TYPE.DECIMAL, FIELD_TYPE.NEWDECIMAL}
_DATE_TYPES = {FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE}
_TIME_TYPES = {FIELD_TYPE.TIME, FIELD_TYPE.TIME2}
_DATETIME_TYPES = {FIELD_TYPE.TIMESTAMP, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.DATETIME2}


def decode(data: bytes) -> Any:
    """One JSON column value (type byte + value); an empty value is JSON null, as in MySQL."""
    if not data:
        return None
    try:
        return _value(data[0], data, 1)
    except (IndexError, struct.error, ValueError) as e:
        raise DataError(f"a MySQL JSON value could not be decoded ({e}): the binlog is corrupt") from None


def mysql_key_order(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's members in the order MySQL keeps them: shorter keys first, then by their bytes."""
    return {k: obj[k] for k in sorted(obj, key=lambda k: (len(k.encode("utf-8")), k.encode("utf-8")))}


def _value(kind: int, data: bytes, pos: int) -> Any:
    """The value of type `kind` whose bytes start at data[pos]."""
    if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(data, pos, large=kind in (LARGE_OBJECT, LARGE_ARRAY), is_object=kind < SMALL_ARRAY)
    if kind == LITERAL:
        if data[pos] not in _LITERALS:
            raise ValueError(f"literal {data[pos]}")
        return _LITERALS[data[pos]]
    if kind in _SCALARS:
        return struct.unpack_from(_SCALARS[kind], data, pos)[0]
    if kind == STRING:
        length, pos = _varlen(data, pos)
        raw = data[pos:pos + length]
        if len(raw) != length:
            raise ValueError("string past the end")
        return raw.decode("utf-8")
    if kind == OPAQUE:
        field_type = data[pos]
        length, pos = _varlen(data, pos + 1)
        raw = data[pos:pos + length]
        if len(raw) != length:
            raise ValueError("opaque value past the end")
        return _opaque(field_type, raw)
    raise ValueError(f"type {kind}")


def _varlen(data: bytes, pos: int) -> tuple[int, int]:
    """A length of 1-5 bytes, 7 bits each, lowest first."""
    length = shift = 0
    for _ in range(5):
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, pos
        shift += 7
    raise ValueError("length longer than 5 bytes")


def _container(data: bytes, start: int, large: bool, is_object: bool) -> Any:
    size_fmt, width = ("<I", 4) if large else ("<H", 2)
    count, size = struct.unpack_from(size_fmt + size_fmt[1], data, start)
    if start + size > len(data):
        raise ValueError("container past the end")
    entry = start + 2 * width
    keys: list[str] = []
    if is_object:
        for i in range(count):
            key_offset, = struct.unpack_from(size_fmt, data, entry + i * (width + 2))
            key_length, = struct.unpack_from("<H", data, entry + i * (width + 2) + width)
            raw = data[start + key_offset:start + key_offset + key_length]
            if len(raw) != key_length:
                raise ValueError("key past the end")
            keys.append(raw.decode("utf-8"))
        entry += count * (width + 2)
    values = []
    for i in range(count):
        at = entry + i * (1 + width)
        kind = data[at]
        if kind in (LITERAL, INT16, UINT16) or (large and kind in (INT32, UINT32)):
            values.append(_value(kind, data, at + 1))  # inlined in the entry
        else:
            offset, = struct.unpack_from(size_fmt, data, at + 1)
            values.append(_value(kind, data, start + offset))
    return dict(zip(keys, values)) if is_object else values


def _opaque(field_type: int, raw: bytes) -> Any:
    if field_type in _DECIMAL_TYPES:  # precision, scale, then DECIMAL's binary form
        text = decimal_reader(raw[0], raw[1])(raw, 2)[0]["Decimal"]
        return msgspec.Raw(text.encode())
    if field_type in _DATE_TYPES | _DATETIME_TYPES | _TIME_TYPES:
        negative, whole, micro = longlong_packed(raw)
        if field_type in _TIME_TYPES:
            hour, minute, second = time_parts(whole)
            return f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"
        year, month, day, hour, minute, second = datetime_parts(whole)
        date = f"{year:04d}-{month:02d}-{day:02d}"
        if field_type in _DATE_TYPES:
            return date
        return f"{date} {hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"
    return f"base64:type{field_type}:{base64.b64encode(raw).decode()}"


__all__ = ["decode", "mysql_key_order"]
