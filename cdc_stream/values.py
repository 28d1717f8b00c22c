"""MySQL value <-> tagged JSON value, exact both ways.

Every column value travels as a one-key object naming its type (`{"Date": {...}}`)
or as the string "Null". docs/events.md documents every tag; tags follow the
Fluvio tutorial where it has one.

Two producers of tags exist: the producer's row decoding (cdc_producer/columns.py,
unpack.py, charsets.py, rowcode.py; decode.py drives them) builds them straight from
the binlog's row images (with the `*_tag` builders below), and `encode` builds
them from Python values (as PyMySQL or python-mysql-replication return them;
the Python type alone cannot tell FLOAT from DOUBLE or TIMESTAMP from DATETIME,
so callers pass the column's *kind*). The consumer turns a tag back into a
query parameter with `to_param`; with the follower session at time zone +00:00
and the SQL mode of cdc_consumer.follower.SESSION_SQL, MySQL stores exactly the
leader's value.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import datetime as dt
import json
import re
import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

NULL = "Null"

class BadValue(ValueError):
    """A tagged value that does not match the contract."""


# ---------------------------------------------------------------------------
# Tag builders: the one place that knows each tag's JSON shape.


def blob_tag(raw: bytes) -> dict[str, Any]:
    """{"Blob": base64}: binary data, or text that has no exact Unicode form."""
    return {"Blob": base64.b64encode(raw).decode("ascii")}


def date_tag(year: int, month: int, day: int) -> dict[str, Any]:
    """{"Date": ...}; zero parts ('0000-00-00', '2020-00-00') are kept as 0."""
    return {"Date": {"year": year, "month": month, "day": day}}


def datetime_tag(year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int) -> dict[str, Any]:
    """{"DateTime": ...}: wall-clock time without zone; zero parts kept as 0."""
    return {"DateTime": {
        "year": year, "month": month, "day": day, "hour": hour, "minute": minute, "second": second,
        "subsecond": micro,
    }}


def timestamp_tag(unix_time: int, micro: int) -> dict[str, Any]:
    """{"Timestamp": ...}: seconds since the epoch in UTC; 0 is MySQL's zero TIMESTAMP."""
    return {"Timestamp": {"unix_time": unix_time, "subsecond": micro}}


def time_tag(negative: bool, hours: int, minutes: int, seconds: int, micro: int) -> dict[str, Any]:
    """{"Time": ...}: a duration of up to 838:59:59.999999 either side of zero."""
    time = {"hours": hours, "minutes": minutes, "seconds": seconds, "subseconds": micro}
    if negative and (hours or minutes or seconds or micro):
        time["negative"] = True
    return {"Time": time}


def geometry_tag(internal: bytes) -> dict[str, Any]:
    """{"Geometry": {"srid", "wkb"}} from MySQL's internal form (4-byte little-endian SRID + WKB)."""
    if len(internal) < 4:
        raise ValueError(f"geometry value of {len(internal)} bytes has no SRID")
    (srid,) = struct.unpack_from("<I", internal)
    return {"Geometry": {"srid": srid, "wkb": base64.b64encode(internal[4:]).decode("ascii")}}


def decimal_text(value: Decimal) -> str:
    """A DECIMAL as MySQL prints it: plain digits, never an exponent ('0E-30' -> '0.000...')."""
    return format(value, "f")


# ---------------------------------------------------------------------------
# Python values -> tags


def encode(value: Any, kind: str = "") -> Any:
    """A column value as PyMySQL/python-mysql-replication return it -> its tagged JSON form."""
    if value is None:
        return NULL
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    return _infer(value, kind)


def _infer(value: Any, kind: str) -> Any:
    if isinstance(value, bool):
        return {"SignedInteger": int(value)}
    if isinstance(value, int):
        return {"UnsignedInteger": value} if kind == "unsigned" else {"SignedInteger": value}
    if isinstance(value, float):
        return {"Double": value}
    if isinstance(value, Decimal):
        return {"Decimal": decimal_text(value)}
    if isinstance(value, str):
        return {"String": value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_tag(bytes(value))
    if isinstance(value, dt.datetime):
        return _encode_datetime(value)
    if isinstance(value, dt.date):
        return _encode_date(value)
    if isinstance(value, (dt.timedelta, dt.time)):
        return _encode_time(value)
    if isinstance(value, (set, frozenset)):
        return {"Set": sorted(value)}
    raise TypeError(f"no tag for {type(value).__name__} value (column kind {kind!r})")


_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?$")
_TIME_RE = re.compile(r"(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def _micro(fraction: str | None) -> int:
    return int(fraction.ljust(6, "0")) if fraction else 0


def _date_parts(value: Any) -> tuple[int, ...]:
    """(y, m, d, h, mi, s, us) of a date/datetime, or of the string PyMySQL returns for zero dates."""
    if isinstance(value, dt.datetime):
        return (value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond)
    if isinstance(value, dt.date):
        return (value.year, value.month, value.day, 0, 0, 0, 0)
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("ascii")
    m = _DATE_RE.match(str(value))
    if not m:
        raise TypeError(f"not a date: {value!r}")
    y, mo, d, h, mi, s, frac = m.groups()
    return (int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), _micro(frac))


def _encode_date(value: Any) -> dict[str, Any]:
    return date_tag(*_date_parts(value)[:3])


def _encode_datetime(value: Any) -> dict[str, Any]:
    return datetime_tag(*_date_parts(value))


def _encode_timestamp(value: Any) -> dict[str, Any]:
    """A TIMESTAMP read as a naive UTC datetime (or the zero string) -> unix time."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    y, mo, d, h, mi, s, us = _date_parts(value)
    if y == 0:
        return timestamp_tag(0, 0)
    return timestamp_tag(calendar.timegm((y, mo, d, h, mi, s)), us)


def _encode_time(value: Any) -> dict[str, Any]:
    if isinstance(value, dt.time):
        return time_tag(False, value.hour, value.minute, value.second, value.microsecond)
    if isinstance(value, dt.timedelta):
        micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
        negative, micros = micros < 0, abs(micros)
        seconds, sub = divmod(micros, 1_000_000)
        return time_tag(negative, seconds // 3600, seconds // 60 % 60, seconds % 60, sub)
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("ascii")
    m = _TIME_RE.match(str(value))
    if not m:
        raise TypeError(f"not a time: {value!r}")
    sign, h, mi, s, frac = m.groups()
    return time_tag(bool(sign), int(h), int(mi), int(s), _micro(frac))


def _encode_set(value: Any) -> dict[str, Any]:
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return {"Set": [v for v in value.split(",") if v]}
    if isinstance(value, (list, tuple)):
        return {"Set": list(value)}
    return {"Set": sorted(value)}  # a Python set has lost the definition order


def _encode_bit(value: Any) -> dict[str, Any]:
    if isinstance(value, str):  # python-mysql-replication: "0101"
        return {"Bit": int(value, 2)}
    if isinstance(value, (bytes, bytearray)):  # PyMySQL: big-endian bytes
        return {"Bit": int.from_bytes(value, "big")}
    return {"Bit": int(value)}


def json_value(value: Any) -> Any:
    """python-mysql-replication's MySQL JSON (bytes keys and strings) -> plain JSON values."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8")
    if isinstance(value, dict):
        return {json_value(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.date, dt.time, dt.datetime)):
        return value.isoformat()
    return value


def _encode_json(value: Any) -> dict[str, Any]:
    if isinstance(value, (str, bytes, bytearray)):
        return {"Json": json.loads(value)}
    return {"Json": json_value(value)}


def _encode_string(value: Any) -> dict[str, Any]:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_tag(bytes(value))  # text whose charset Python could not decode: keep the bytes
    return {"String": str(value)}


def _encode_binary(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    return blob_tag(bytes(value))


def _encode_int(tag: str) -> Callable[[Any], dict[str, Any]]:
    return lambda v: {tag: int(v)}


_ENCODERS: dict[str, Callable[[Any], Any]] = {
    "signed": _encode_int("SignedInteger"),
    "unsigned": _encode_int("UnsignedInteger"),
    "float": lambda v: {"Float": float(v)},
    "double": lambda v: {"Double": float(v)},
    "decimal": lambda v: {"Decimal": decimal_text(Decimal(v))},
    "string": _encode_string,
    "binary": _encode_binary,
    "date": _encode_date,
    "datetime": _encode_datetime,
    "timestamp": _encode_timestamp,
    "time": _encode_time,
    "year": lambda v: {"Year": int(v)},
    "enum": lambda v: {"Enum": v.decode("utf-8") if isinstance(v, bytes) else str(v)},
    "set": _encode_set,
    "bit": _encode_bit,
    "json": _encode_json,
    "geometry": lambda v: geometry_tag(bytes(v)),
}


# ---------------------------------------------------------------------------
# Tags -> query parameters


def to_param(tagged: Any) -> Any:
    """A tagged JSON value -> a PyMySQL query parameter storing exactly that value."""
    if tagged == NULL or tagged is None:
        return None
    if not isinstance(tagged, dict) or len(tagged) != 1:
        raise BadValue(f"not a tagged value: {tagged!r}")
    ((tag, v),) = tagged.items()
    try:
        convert = PARAM_CONVERTERS[tag]
    except KeyError:
        raise BadValue(f"unknown value tag {tag!r}") from None
    try:
        return convert(v)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            InvalidOperation, binascii.Error) as e:
        raise BadValue(f"bad {tag} value {v!r}: {e}") from None


def tag_of(tagged: Any) -> str:
    """The tag name of a tagged value ("Null" for NULL)."""
    if isinstance(tagged, dict) and len(tagged) == 1:
        return str(next(iter(tagged)))
    return NULL


def _int(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("expected an integer")
    return v


def _uint(v: Any) -> int:
    n = _int(v)
    if n < 0:
        raise ValueError("expected a non-negative integer")
    return n


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("expected a number")
    f = float(v)
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError("MySQL cannot store NaN or infinity")
    return f


DECIMAL_PATTERN = re.compile(r"-?\d+(\.\d+)?$")


def _decimal(v: Any) -> Decimal:
    # A Decimal parameter is sent as a bare decimal literal, so MySQL neither goes
    # through a double (which a quoted string would in comparisons) nor rounds it.
    if not isinstance(v, str) or not DECIMAL_PATTERN.match(v):
        raise ValueError("expected a decimal string such as '-12.50'")
    return Decimal(v)


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v


def _blob(v: Any) -> bytes:
    return base64.b64decode(_text(v), validate=True)


def _geometry(v: Any) -> bytes:
    if isinstance(v, str):  # the pre-0.2 form: base64 of the internal value
        return _blob(v)
    return struct.pack("<I", _uint(v["srid"])) + _blob(v["wkb"])


def _date(v: dict[str, Any]) -> str:
    return f"{_int(v['year']):04d}-{_int(v['month']):02d}-{_int(v['day']):02d}"


def _datetime(v: dict[str, Any]) -> str:
    return (
        f"{_date(v)} {_int(v['hour']):02d}:{_int(v['minute']):02d}:{_int(v['second']):02d}"
        f".{_micros(v['subsecond'])}"
    )


def _micros(v: Any) -> str:
    if not 0 <= _int(v) < 1_000_000:
        raise ValueError("subsecond must be 0..999999 microseconds")
    return f"{v:06d}"


def _timestamp(v: dict[str, Any]) -> str:
    seconds, micro = _int(v["unix_time"]), _micros(v["subsecond"])
    if seconds == 0 and micro == "000000":
        return "0000-00-00 00:00:00"  # MySQL's zero TIMESTAMP is stored as epoch 0
    t = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    return f"{t:%Y-%m-%d %H:%M:%S}.{micro}"


def _time(v: dict[str, Any]) -> str:
    sign = "-" if v.get("negative") else ""
    return (
        f"{sign}{_int(v['hours']):02d}:{_int(v['minutes']):02d}:{_int(v['seconds']):02d}"
        f".{_micros(v['subseconds'])}"
    )


def _set(v: Any) -> str:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise TypeError("expected a list of labels")
    return ",".join(v)


def _json(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# Each tag's value -> the query parameter storing it (literals.py writes SQL literals from these).
PARAM_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "SignedInteger": _int,
    "UnsignedInteger": _uint,
    "Float": _float,
    "Double": _float,
    "Decimal": _decimal,
    "String": _text,
    "Blob": _blob,
    "Geometry": _geometry,
    "Date": _date,
    "DateTime": _datetime,
    "Timestamp": _timestamp,
    "Time": _time,
    "Year": _uint,
    "Enum": _text,
    "Set": _set,
    "Bit": _uint,
    "Json": _json,
}
TAGS = tuple(PARAM_CONVERTERS)
