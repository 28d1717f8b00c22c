"""MySQL's binary forms of numbers and times -> values: DECIMAL, DATE/TIME/DATETIME/TIMESTAMP/YEAR and
the binlog's packed integer.

The one place that knows these layouts (MySQL's sql/field.cc, mysys/my_time.cc,
strings/decimal.cc, sql-common/json_binary.cc; MariaDB's are the same). Row images are read
with the readers here (columns.py picks them per column; rowcode.py inlines the common ones,
checked against them by tests/test_rowcode.py); MySQL's binary JSON holds DECIMALs and times
in the same forms (mysql_json.py), and partial JSON updates and compressed events count
lengths with packed integers (partial_json.py, compression.py).

A reader takes (bytes, offset) and returns (tagged value, offset after the value).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from cdc_stream import values

Reader = Callable[[bytes, int], "tuple[Any, int]"]


def packed_int(data: bytes, pos: int) -> tuple[int, int]:
    """A packed integer of the binlog format (MySQL's net_field_length): (value, offset after it);
    ValueError when it is not one or runs past the data."""
    first = data[pos]
    if first < 251:
        return first, pos + 1
    size = {252: 2, 253: 3, 254: 8}.get(first)
    if size is None:
        raise ValueError(f"invalid packed integer (first byte {first})")
    if pos + 1 + size > len(data):
        raise ValueError("packed integer past the end")
    return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size


# ---------------------------------------------------------------------------
# DECIMAL

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes holding a group of 0..9 decimal digits


def decimal_reader(precision: int, scale: int) -> Reader:
    """DECIMAL(precision, scale) in MySQL's binary form: groups of 9 digits in 4
    big-endian bytes, shorter leading/trailing groups, sign in the top bit,
    negative numbers stored with every bit inverted."""
    intg = precision - scale
    lead_digits, int_groups = intg % 9, intg // 9
    frac_groups, tail_digits = scale // 9, scale % 9
    lead_bytes, tail_bytes = DIG2BYTES[lead_digits], DIG2BYTES[tail_digits]
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


# ---------------------------------------------------------------------------
# Temporal values: the packed fields, the MySQL 5.6+ formats, the pre-5.6 formats


def fraction_size(fsp: int) -> tuple[int, int]:
    """(bytes, multiplier to microseconds) of the fractional seconds of TIME2/DATETIME2/TIMESTAMP2(fsp):
    1 byte holds 1/100 s, 2 bytes 1/10000 s, 3 bytes microseconds."""
    n = (fsp + 1) // 2
    return n, 10 ** (6 - 2 * n)


def datetime_parts(packed: int) -> tuple[int, int, int, int, int, int]:
    """(y, m, d, h, mi, s) of a packed datetime without sign and fraction: year * 13 + month (17 bits),
    day (5), hour (5), minute (6), second (6). DATETIME2's integer part and the datetimes of binary
    JSON (TIME_to_longlong_datetime_packed >> 24) have this form."""
    ymd, hms = packed >> 17, packed & 0x1FFFF
    ym = ymd >> 5
    return ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63


def time_parts(packed: int) -> tuple[int, int, int]:
    """(h, mi, s) of a packed time without sign and fraction: hour (10 bits), minute (6), second (6).
    TIME2's integer part and the times of binary JSON (TIME_to_longlong_time_packed >> 24) have this form."""
    return (packed >> 12) & 0x3FF, (packed >> 6) & 63, packed & 63


def longlong_packed(raw: bytes) -> tuple[bool, int, int]:
    """(negative, packed fields, microseconds) of a date, time or datetime as binary JSON holds it: a
    signed little-endian 64-bit integer, the fields (datetime_parts or time_parts) above 24 bits of
    microseconds."""
    packed, = struct.unpack_from("<q", raw, 0)
    negative, packed = packed < 0, abs(packed)
    return negative, packed >> 24, packed % (1 << 24)


def _fraction_reader(fsp: int) -> Callable[[bytes, int], tuple[int, int]]:
    """The fractional-seconds part of TIME2/DATETIME2/TIMESTAMP2: (microseconds, bytes)."""
    n, scale = fraction_size(fsp)
    return lambda data, pos: (int.from_bytes(data[pos:pos + n], "big") * scale if n else 0, n)


def datetime2_reader(fsp: int) -> Reader:
    """DATETIME(fsp), MySQL 5.6+ format: 5 big-endian bytes (offset by 2^39) + fraction."""
    frac = _fraction_reader(fsp)
    tag = values.datetime_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        packed = int.from_bytes(data[pos:pos + 5], "big") - 0x8000000000
        micro, n = frac(data, pos + 5)
        return tag(*datetime_parts(packed), micro), pos + 5 + n

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
    n, frac_scale = fraction_size(fsp)
    size = 3 + n
    offset = 1 << (8 * size - 1)
    frac_bits = 8 * n
    tag = values.time_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value = int.from_bytes(data[pos:pos + size], "big") - offset
        negative = value < 0
        value = -value if negative else value
        int_part, micro = value >> frac_bits, (value & ((1 << frac_bits) - 1)) * frac_scale
        # time_parts(int_part), written out: a call per value costs more than the arithmetic
        return tag(negative, (int_part >> 12) & 0x3FF, (int_part >> 6) & 63, int_part & 63, micro), pos + size

    return read


def time_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """TIME, pre-5.6 format without fractions (MariaDB with mysql56_temporal_format=OFF): signed 3-byte HHMMSS."""
    value = int.from_bytes(data[pos:pos + 3], "little", signed=True)
    negative, value = value < 0, abs(value)
    return values.time_tag(negative, value // 10000, value // 100 % 100, value % 100, 0), pos + 3


def datetime_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """DATETIME, pre-5.6 format: 8-byte integer YYYYMMDDhhmmss."""
    value = int.from_bytes(data[pos:pos + 8], "little")
    d, t = divmod(value, 1_000_000)
    return values.datetime_tag(d // 10000, d // 100 % 100, d % 100, t // 10000, t // 100 % 100, t % 100, 0), pos + 8


def timestamp_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """TIMESTAMP, pre-5.6 format: 4-byte little-endian unix time."""
    return values.timestamp_tag(int.from_bytes(data[pos:pos + 4], "little"), 0), pos + 4


# MariaDB's pre-10.1 formats with fractional seconds (mysql56_temporal_format=OFF; sql/field.cc's
# Field_time_hires, Field_datetime_hires, Field_timestamp_hires): logged as the old types (TIME 11,
# DATETIME 12, TIMESTAMP 7) without metadata, so neither their size nor their precision is in the
# table map (old_temporals.py finds the precision). Each holds its value in units of 10^-dec seconds,
# big-endian. With no fractions (dec 0) the columns have the formats above.
_TIME_HIRES_BYTES = (3, 4, 4, 5, 5, 5, 6)  # Type_handler_time::hires_bytes
_DATETIME_HIRES_BYTES = (5, 6, 6, 7, 7, 7, 8)  # Type_handler_datetime::hires_bytes
_TIME_ZERO = 3020400  # TIME_MAX_VALUE_SECONDS + 1 (838:59:59 + 1 s): the stored zero point, in seconds


def old_time_reader(dec: int) -> Reader:
    """TIME(dec), MariaDB's old format: dec 0 is `time_reader`; else (value + 838:59:59 + 1 s) in 10^-dec
    seconds, unsigned big-endian in 4 to 6 bytes."""
    if dec == 0:
        return time_reader
    size, unit, zero = _TIME_HIRES_BYTES[dec], 10 ** (6 - dec), _TIME_ZERO * 10 ** dec
    tag = values.time_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        micro = (int.from_bytes(data[pos:pos + size], "big") - zero) * unit
        negative = micro < 0
        seconds, micro = divmod(-micro if negative else micro, 1_000_000)
        return tag(negative, seconds // 3600, seconds // 60 % 60, seconds % 60, micro), pos + size

    return read


def old_datetime_reader(dec: int) -> Reader:
    """DATETIME(dec), MariaDB's old format: dec 0 is `datetime_reader`; else ((((year * 13 + month) * 32 + day)
    * 24 + hour) * 60 + minute) * 60 + second, in 10^-dec seconds, big-endian in 5 to 8 bytes (pack_time)."""
    if dec == 0:
        return datetime_reader
    size, unit = _DATETIME_HIRES_BYTES[dec], 10 ** (6 - dec)
    tag = values.datetime_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        rest, micro = divmod(int.from_bytes(data[pos:pos + size], "big") * unit, 1_000_000)
        rest, second = divmod(rest, 60)
        rest, minute = divmod(rest, 60)
        rest, hour = divmod(rest, 24)
        rest, day = divmod(rest, 32)
        year, month = divmod(rest, 13)
        return tag(year, month, day, hour, minute, second, micro), pos + size

    return read


def old_timestamp_reader(dec: int) -> Reader:
    """TIMESTAMP(dec), MariaDB's old format: dec 0 is `timestamp_reader`; else 4 big-endian bytes of unix time,
    then the fraction in 10^-dec seconds, big-endian in (dec + 1) // 2 bytes."""
    if dec == 0:
        return timestamp_reader
    n, unit = (dec + 1) // 2, 10 ** (6 - dec)
    tag = values.timestamp_tag

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        seconds = int.from_bytes(data[pos:pos + 4], "big")
        return tag(seconds, int.from_bytes(data[pos + 4:pos + 4 + n], "big") * unit), pos + 4 + n

    return read


def date_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """DATE: 3 little-endian bytes, day:5 month:4 year:15 bits; zero parts are kept."""
    value = int.from_bytes(data[pos:pos + 3], "little")
    return values.date_tag(value >> 9, (value >> 5) & 15, value & 31), pos + 3


def year_reader(data: bytes, pos: int) -> tuple[Any, int]:
    """YEAR: one byte, years since 1900, where 0 means the year 0000."""
    b = data[pos]
    return {"Year": 1900 + b if b else 0}, pos + 1


__all__ = [
    "DIG2BYTES", "Reader", "date_reader", "datetime2_reader", "datetime_parts", "datetime_reader", "decimal_reader",
    "fraction_size", "longlong_packed", "old_datetime_reader", "old_time_reader", "old_timestamp_reader", "packed_int",
    "time2_reader", "time_parts", "time_reader",
    "timestamp2_reader", "timestamp_reader", "year_reader",
]
