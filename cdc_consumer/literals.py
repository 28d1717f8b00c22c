"""Tagged values -> SQL literals, for statements sent without parameters.

PyMySQL has no server-side parameters either: `cursor.execute(sql, params)`
escapes each value into the SQL text on the client (`Cursor.mogrify`). This
module does the same job, one small function per tag instead of PyMySQL's
per-value type dispatch (faster: bench/README.md), and writes the literal PyMySQL
would write for the value `values.to_param` returns (tests/test_literals.py
compares the two on every tag, and runs hostile strings through a server).
Binary data is written as PyMySQL 1.2 writes it too: a hex literal
(`_binary X'..'`), which needs no escaping at all.

Escaping with backslashes is only right while the session's sql_mode lacks
NO_BACKSLASH_ESCAPES: cdc_consumer.follower.SESSION_SQL sets the mode explicitly.
Every value is checked as strictly as `values.to_param` checks it; a bad one
raises values.BadValue.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable
from decimal import ROUND_DOWN, Context, Decimal, InvalidOperation
from typing import Any

from cdc_stream import values
from cdc_stream.values import BadValue

NULL_LITERAL = "NULL"
_PARAM = values.PARAM_CONVERTERS
_FLOAT32 = struct.Struct("<f")


def quote_text(text: str) -> str:
    """A str as a quoted string literal, escaped as PyMySQL's escape_string escapes it."""
    if text.__class__ is not str:
        raise TypeError("expected a string")
    # A chain of str.replace is much faster than str.translate with a mapping (bench/README.md);
    # the backslash goes first, since the other replacements add backslashes.
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "'" in text:
        text = text.replace("'", "\\'")
    if '"' in text:
        text = text.replace('"', '\\"')
    if "\0" in text:
        text = text.replace("\0", "\\0")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if "\r" in text:
        text = text.replace("\r", "\\r")
    if "\032" in text:
        text = text.replace("\032", "\\Z")
    return "'" + text + "'"


_text = quote_text


def _int(v: Any) -> str:
    if type(v) is not int:
        raise TypeError("expected an integer")
    return str(v)


def _uint(v: Any) -> str:
    if type(v) is not int or v < 0:
        raise ValueError("expected a non-negative integer")
    return str(v)


def _float(v: Any) -> str:
    s = repr(_PARAM["Double"](v))
    # As PyMySQL: a literal with an exponent is a DOUBLE, one without would be a DECIMAL.
    return s if "e" in s else s + "e0"


def _as_float32(x: float) -> float | None:
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(x))[0])
    except OverflowError:
        return None


def stored_float_text(v: Any) -> str:
    """A FLOAT value to store: a short literal the server turns into the same 4 bytes.

    The exact double a FLOAT widens to can lie outside the column's declared range: FLOAT(30,0)
    holds 1e30 as 1.0000000150474662e30, which a strict session refuses to store ("Out of range",
    MariaDB's own type_float test), although the leader stored it and a native replica copies the
    4 bytes. The shortest decimal that the server's path (text -> double -> float) maps to the same
    float, and that is no farther from zero than the float itself (so no range check it passed on
    the leader can fail: FLT_MAX), is stored as the same bytes: rounded to 6 to 9 digits, or cut
    toward zero, which at 9 digits always lands on the same float. Compared in a WHERE clause it
    would not equal the column's widened double, so matching keeps `_float`.
    """
    f = _PARAM["Float"](v)
    exact = Decimal(f)
    for digits in (6, 7, 8, 9):
        for s in (f"{f:.{digits}g}", str(Context(prec=digits, rounding=ROUND_DOWN).plus(exact)).lower()):
            shorter = float(s)
            if abs(shorter) <= abs(f) and _as_float32(shorter) == f:
                return s if "e" in s else s + "e0"
    return _float(f)


def _decimal(v: Any) -> str:
    # A bare decimal literal: MySQL neither goes through a double nor rounds it.
    if type(v) is not str or not values.DECIMAL_PATTERN.match(v):
        raise ValueError("expected a decimal string such as '-12.50'")
    return v


def _binary(raw: bytes) -> str:
    return "_binary X'" + raw.hex() + "'"


def _blob(v: Any) -> str:
    if type(v) is not str:
        raise TypeError("expected a string")
    return _binary(base64.b64decode(v, validate=True))


def _datetime(v: dict[str, Any]) -> str:
    y, mo, d, h, mi, s, us = v["year"], v["month"], v["day"], v["hour"], v["minute"], v["second"], v["subsecond"]
    if (type(y) is int and type(mo) is int and type(d) is int and type(h) is int and type(mi) is int
            and type(s) is int and type(us) is int and 0 <= us < 1_000_000):
        return "'%04d-%02d-%02d %02d:%02d:%02d.%06d'" % (y, mo, d, h, mi, s, us)  # noqa: UP031 (the fastest)
    raise ValueError("expected integers, subsecond 0..999999")


def _quoted(convert: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "'" + convert(v) + "'"


_LITERAL: dict[str, Callable[[Any], str]] = {
    "SignedInteger": _int,
    "UnsignedInteger": _uint,
    "Float": _float,
    "Double": _float,
    "Decimal": _decimal,
    "String": _text,
    "Blob": _blob,
    "Geometry": lambda v: _binary(_PARAM["Geometry"](v)),
    "Date": _quoted(_PARAM["Date"]),
    "DateTime": _datetime,
    "Timestamp": _quoted(_PARAM["Timestamp"]),
    "Time": _quoted(_PARAM["Time"]),
    "Year": _uint,
    "Enum": _text,
    "Set": lambda v: quote_text(_PARAM["Set"](v)),
    "Bit": _uint,
    "Json": lambda v: quote_text(_PARAM["Json"](v)),
}
assert set(_LITERAL) == set(values.TAGS), "every tag of the contract needs a literal writer"
_STORED = {**_LITERAL, "Float": stored_float_text}

_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, InvalidOperation,
           binascii.Error)


def literal(tagged: Any) -> str:
    """One tagged value as SQL literal text to compare with (WHERE, IN); raises BadValue for anything off
    the contract."""
    return _write(tagged, _LITERAL)


def stored_literal(tagged: Any) -> str:
    """One tagged value as SQL literal text to store (VALUES, SET): as `literal`, but a FLOAT as the
    shortest text the server stores as the same bytes (`stored_float_text`)."""
    return _write(tagged, _STORED)


def _write(tagged: Any, writers: dict[str, Callable[[Any], str]]) -> str:
    if type(tagged) is dict and len(tagged) == 1:
        for tag, v in tagged.items():
            write = writers.get(tag)
            if write is None:
                raise BadValue(f"unknown value tag {tag!r}")
            try:
                return write(v)
            except _ERRORS as e:
                raise BadValue(f"bad {tag} value {v!r}: {e}") from None
    if tagged == values.NULL or tagged is None:
        return NULL_LITERAL
    raise BadValue(f"not a tagged value: {tagged!r}")


def row_literal(row: list[Any]) -> str:
    """A row image to store, as a parenthesised list of literals (`stored_literal`): `(1,'a',NULL)`."""
    # The fast path: one writer compiled per *signature* (each value's tag, in column
    # order), so a row costs no per-value dispatch. The signature is each value's
    # first key; the string "Null" yields "N" and the writer checks it is "Null".
    # Anything unusual (a wrong shape, a bad value) takes the slow path, which
    # raises the precise BadValue.
    try:
        signature = tuple(map(next, map(iter, row)))
        writer = _ROW_WRITERS.get(signature)
        if writer is None:
            writer = _row_writer(signature)
        return writer(row)
    except Exception:
        pass
    return "(" + ",".join([stored_literal(v) for v in row]) + ")"


_ROW_WRITERS: dict[tuple[str, ...], Callable[[list[Any]], str]] = {}
_MAX_ROW_WRITERS = 4096  # tables x NULL patterns; past this, start over


def _row_writer(signature: tuple[str, ...]) -> Callable[[list[Any]], str]:
    """Compile the writer of rows whose values carry these tags ("N": the "Null" string)."""
    names = [f"c{i}" for i in range(len(signature))]
    tagged = [n for n, tag in zip(names, signature) if tag != "N"]
    nulls = [n for n, tag in zip(names, signature) if tag == "N"]
    # Only known tags reach the generated code (an unknown one raises KeyError here),
    # so no text from the topic is ever compiled.
    env = {f"w{i}": _STORED[tag] for i, tag in enumerate(signature) if tag != "N"}
    checks = []
    if tagged:
        checks.append(" == ".join(f"len({n})" for n in tagged) + " == 1")
    checks += [f"{n} == 'Null'" for n in nulls]
    parts = ["NULL" if tag == "N" else f"{{w{i}({n}[{tag!r}])}}" for i, (n, tag) in enumerate(zip(names, signature))]
    code = (
        f"def write(row):\n"
        f"    {''.join(n + ', ' for n in names)}= row\n"
        f"    if not ({' and '.join(checks) or 'True'}):\n"
        f"        raise TypeError('not this signature')\n"
        f"    return f\"({','.join(parts)})\"\n"
    )
    exec(code, env)
    if len(_ROW_WRITERS) >= _MAX_ROW_WRITERS:
        _ROW_WRITERS.clear()
    _ROW_WRITERS[signature] = env["write"]
    return env["write"]
