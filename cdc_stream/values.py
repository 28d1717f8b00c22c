"""MySQL value <-> tagged JSON value, exact both ways.

The producer gets Python values from the binlog decoder plus a *kind* saying which
column type they came from (the Python type alone cannot tell FLOAT from DOUBLE,
TIMESTAMP from DATETIME, or ENUM from VARCHAR). The consumer turns the tags back
into query parameters that MySQL stores as exactly the original value, with the
session time zone at +00:00. Tags follow the Fluvio tutorial where it has one.
"""

from __future__ import annotations

import base64
import calendar
import datetime as dt
import json
from decimal import Decimal
from typing import Any

NULL = "Null"

# Column kinds the producer passes to encode(); "" means "infer from the Python type".
KINDS = (
    "", "signed", "unsigned", "float", "double", "decimal", "string", "binary", "date",
    "datetime", "timestamp", "time", "year", "enum", "set", "bit", "json", "geometry",
)


def encode(value: Any, kind: str = "") -> Any:
    """A decoded column value -> its tagged JSON form."""
    if value is None:
        return NULL
    if kind == "timestamp":
        seconds = calendar.timegm(value.timetuple())
        return {"Timestamp": {"unix_time": seconds, "subsecond": value.microsecond}}
    if kind == "enum":
        return {"Enum": value}
    if kind == "set":
        return {"Set": sorted(value) if not isinstance(value, str) else [v for v in value.split(",") if v]}
    if kind == "bit":
        return {"Bit": int(value, 2) if isinstance(value, str) else int(value)}
    if kind == "year":
        return {"Year": int(value)}
    if kind == "json":
        return {"Json": value}
    if kind == "geometry":
        return {"Geometry": base64.b64encode(value).decode("ascii")}
    if isinstance(value, bool):
        return {"SignedInteger": int(value)}
    if isinstance(value, int):
        return {"UnsignedInteger": value} if kind == "unsigned" else {"SignedInteger": value}
    if isinstance(value, float):
        return {"Float": value} if kind == "float" else {"Double": value}
    if isinstance(value, Decimal):
        return {"Decimal": str(value)}
    if isinstance(value, str):
        return {"String": value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"Blob": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {
            "DateTime": {
                "year": value.year, "month": value.month, "day": value.day,
                "hour": value.hour, "minute": value.minute, "second": value.second,
                "subsecond": value.microsecond,
            }
        }
    if isinstance(value, dt.date):
        return {"Date": {"year": value.year, "month": value.month, "day": value.day}}
    if isinstance(value, dt.timedelta):
        micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
        sign, micros = (micros < 0), abs(micros)
        seconds, sub = divmod(micros, 1_000_000)
        time = {"hours": seconds // 3600, "minutes": seconds // 60 % 60, "seconds": seconds % 60, "subseconds": sub}
        if sign:
            time["negative"] = True
        return {"Time": time}
    if isinstance(value, (set, frozenset)):
        return {"Set": sorted(value)}
    raise TypeError(f"no tag for {type(value).__name__} value (column kind {kind!r})")


class BadValue(ValueError):
    """A tagged value that does not match the contract."""


def to_param(tagged: Any) -> Any:
    """A tagged JSON value -> a PyMySQL query parameter storing exactly that value."""
    if tagged == NULL or tagged is None:
        return None
    if not isinstance(tagged, dict) or len(tagged) != 1:
        raise BadValue(f"not a tagged value: {tagged!r}")
    ((tag, v),) = tagged.items()
    try:
        return _TO_PARAM[tag](v)
    except KeyError:
        raise BadValue(f"unknown value tag {tag!r}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise BadValue(f"bad {tag} value {v!r}: {e}") from None


def _time(v: dict) -> str:
    sign = "-" if v.get("negative") else ""
    return f"{sign}{v['hours']:02d}:{v['minutes']:02d}:{v['seconds']:02d}.{v['subseconds']:06d}"


def _timestamp(v: dict) -> str:
    if v["unix_time"] == 0 and v["subsecond"] == 0:
        return "0000-00-00 00:00:00"  # MySQL's zero TIMESTAMP is stored as epoch 0
    t = dt.datetime.fromtimestamp(v["unix_time"], dt.timezone.utc)
    return f"{t:%Y-%m-%d %H:%M:%S}.{v['subsecond']:06d}"


def _datetime(v: dict) -> str:
    return (
        f"{v['year']:04d}-{v['month']:02d}-{v['day']:02d} "
        f"{v['hour']:02d}:{v['minute']:02d}:{v['second']:02d}.{v['subsecond']:06d}"
    )


def _int(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("expected an integer")
    return v


_TO_PARAM = {
    "SignedInteger": _int,
    "UnsignedInteger": _int,
    "Float": float,
    "Double": float,
    "Decimal": lambda v: str(Decimal(v)),
    "String": str,
    "Blob": lambda v: base64.b64decode(v, validate=True),
    "Geometry": lambda v: base64.b64decode(v, validate=True),
    "Date": lambda v: f"{v['year']:04d}-{v['month']:02d}-{v['day']:02d}",
    "DateTime": _datetime,
    "Timestamp": _timestamp,
    "Time": _time,
    "Year": _int,
    "Enum": str,
    "Set": lambda v: ",".join(v),
    "Bit": _int,
    "Json": lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
}
TAGS = tuple(_TO_PARAM)
