"""Tagged values -> binary parameters of a prepared statement, for rows sent with MariaDB's bulk execution.

The SQL path's other form of the same rows is literals.py's text; this module writes, for each tag, the
parameter the server turns into the value that literal gives:
- integers as 8-byte integers (signed or not);
- FLOAT/DOUBLE as the 8-byte double the literal's text parses to (for a FLOAT, literals.stored_float_text);
- DECIMAL as a decimal string (NEWDECIMAL);
- a DATETIME as the protocol's binary DATETIME (its parts, zero and invalid dates included: 4x cheaper to
  write than its text);
- text and every other temporal, JSON and SET value as the literal's string in utf8mb4 (the session's
  character_set_client, as the literals are);
- binary data and geometry as BLOB, whose character set is binary (no conversion, as `_binary X'..'`).
tests/test_parameters.py stores every tag both ways on a server and compares the rows byte for byte.

A row is written as MariaDB's COM_STMT_BULK_EXECUTE wants it: per column an indicator byte (0: a value
follows, 1: NULL) and the value. The column types travel once per statement; a column's type comes
from its values' tags, so rows whose tags differ (text that travelled as Blob) go to different
statements (`compatible`).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

from cdc_consumer.literals import row_literal, stored_float_text
from cdc_stream import values
from cdc_stream.values import BadValue

# Field types and the unsigned flag of the protocol (include/mysql_com.h), each as the 2 bytes the
# statement's type list carries.
LONGLONG = b"\x08\x00"
ULONGLONG = b"\x08\x80"
DOUBLE = b"\x05\x00"
NEWDECIMAL = b"\xf6\x00"
VAR_STRING = b"\xfd\x00"
DATETIME = b"\x0c\x00"
BLOB = b"\xfc\x00"
_NULL_TYPE = VAR_STRING  # a column NULL in every row of a statement still needs a type

Types = tuple[bytes | None, ...]  # one row's parameter types, None where it is NULL

_PARAM = values.PARAM_CONVERTERS
_I64 = struct.Struct("<q").pack
_U64 = struct.Struct("<Q").pack
_F64 = struct.Struct("<d").pack
_DATETIME = struct.Struct("<BHBBBBBI").pack  # length 11, then year, month, day, hour, minute, second, microsecond


def lenenc(raw: bytes) -> bytes:
    """`raw` prefixed with its length as the protocol's length-encoded integer."""
    n = len(raw)
    if n < 251:
        return bytes((n,)) + raw
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little") + raw
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little") + raw
    return b"\xfe" + n.to_bytes(8, "little") + raw




def _double(v: Any) -> bytes:
    return _F64(_PARAM["Double"](v))


def _stored_float(v: Any) -> bytes:
    return _F64(float(stored_float_text(v)))




def _converted(tag: str) -> Callable[[Any], bytes]:
    convert = _PARAM[tag]
    return lambda v: lenenc(convert(v).encode("utf-8"))


def _datetime(v: dict[str, Any]) -> bytes:
    y, mo, d, h, mi, s, us = v["year"], v["month"], v["day"], v["hour"], v["minute"], v["second"], v["subsecond"]
    if (type(y) is int and type(mo) is int and type(d) is int and type(h) is int and type(mi) is int
            and type(s) is int and type(us) is int and 0 <= us < 1_000_000):
        return _DATETIME(11, y, mo, d, h, mi, s, us)
    raise ValueError("expected integers, subsecond 0..999999")


def _blob(v: Any) -> bytes:
    if type(v) is not str:
        raise TypeError("expected a string")
    return lenenc(base64.b64decode(v, validate=True))


# tag -> (its parameter type, the writer of its value; None where _row_writer writes it inline)
_WRITERS: dict[str, tuple[bytes, Callable[[Any], bytes] | None]] = {
    "SignedInteger": (LONGLONG, None),
    "UnsignedInteger": (ULONGLONG, None),
    "Float": (DOUBLE, _stored_float),
    "Double": (DOUBLE, _double),
    "Decimal": (NEWDECIMAL, None),
    "String": (VAR_STRING, None),
    "Blob": (BLOB, _blob),
    "Geometry": (BLOB, lambda v: lenenc(_PARAM["Geometry"](v))),
    "Date": (VAR_STRING, _converted("Date")),
    "DateTime": (DATETIME, _datetime),
    "Timestamp": (VAR_STRING, _converted("Timestamp")),
    "Time": (VAR_STRING, _converted("Time")),
    "Year": (ULONGLONG, None),
    "Enum": (VAR_STRING, None),
    "Set": (VAR_STRING, _converted("Set")),
    "Bit": (ULONGLONG, None),
    "Json": (VAR_STRING, _converted("Json")),
}
assert set(_WRITERS) == set(values.TAGS), "every tag of the contract needs a parameter writer"


def param_row(row: list[Any]) -> tuple[Types, bytes]:
    """A row image to store, as its parameters' types and its bulk-execution bytes; raises BadValue
    for anything off the contract (with literals' message)."""
    try:
        signature = tuple(map(next, map(iter, row)))
        compiled = _ROW_WRITERS.get(signature)
        if compiled is None:
            compiled = _row_writer(signature)
        return compiled[0], compiled[1](row)
    except Exception:
        pass
    row_literal(row)  # raises the precise BadValue, as the text path would
    raise BadValue(f"a value of this row cannot be sent as a parameter: {row!r}")


def param_rows(rows: list[list[Any]]) -> tuple[list[Types], list[bytes]]:
    """`param_row` of each row: their types and their bytes. A row is first tried with the writer of the row
    before it (a compiled writer raises for a row of another signature), which spares most rows the
    signature's computation."""
    written = _written(rows, typed=False)
    assert written is not None  # (a row no compiled writer takes goes to param_row, which raises BadValue)
    return written


def typed_param_rows(rows: list[Any]) -> tuple[list[Types], list[bytes]] | None:
    """`param_rows` of typed rows (cdc_stream.typed_rows, each value already checked as its tag's JSON type):
    the same types and bytes, or None where a row does not convert (the caller then converts the rows'
    tagged form with param_rows, which raises the precise BadValue)."""
    return _written(rows, typed=True)


def _written(rows: list[Any], typed: bool) -> tuple[list[Types], list[bytes]] | None:
    types: list[Types] = []
    data: list[bytes] = []
    last: tuple[Types, Callable[[Any], bytes]] | None = None
    cache = _TYPED_WRITERS if typed else _ROW_WRITERS
    for row in rows:
        image = row.cols if typed else row
        if last is not None:
            try:
                data.append(last[1](image))
                types.append(last[0])
                continue
            except Exception:
                pass
        try:
            signature = (tuple("N" if c.__class__ is str else c.__struct_fields__[0] for c in image) if typed
                         else tuple(map(next, map(iter, image))))
            last = cache.get(signature) or _row_writer(signature, typed)
            data.append(last[1](image))
            types.append(last[0])
            continue
        except Exception:
            if typed:
                return None
            last = None
        row_types, row_data = param_row(row)  # raises the precise BadValue
        types.append(row_types)
        data.append(row_data)
    return types, data


def compatible(types: list[bytes | None], row: Types) -> bool:
    """Whether a row of these types can join a statement whose columns have `types` so far (NULL fits
    any type); if so, `types` takes the row's types where it had none."""
    if len(types) != len(row):
        return False
    for i, t in enumerate(row):
        if t is not None and types[i] != t:
            if types[i] is not None:
                return False
            types[i] = t
    return True


def type_list(types: list[bytes | None]) -> bytes:
    """A statement's column types, as the bulk command sends them."""
    return b"".join(_NULL_TYPE if t is None else t for t in types)


_ROW_WRITERS: dict[tuple[str, ...], tuple[Types, Callable[[Any], bytes]]] = {}
_TYPED_WRITERS: dict[tuple[str, ...], tuple[Types, Callable[[Any], bytes]]] = {}  # (typed rows' cols)
_MAX_ROW_WRITERS = 4096  # tables x NULL patterns; past this, start over


def _row_writer(signature: tuple[str, ...], typed: bool = False) -> tuple[Types, Callable[[Any], bytes]]:
    """Compile the writer of rows whose values carry these tags ("N": the "Null" string), as
    literals.row_literal compiles its own; only known tags reach the generated code. The commonest tags
    are written inline (a call per value was a third of a row's cost); the others call their writer in
    _WRITERS. `typed`: the writer of typed rows' `cols` (cdc_stream.typed_rows): each value its tag's
    struct, whose type the decoder checked, or "Null"; the same bytes."""
    names = [f"c{i}" for i in range(len(signature))]
    env: dict[str, Any] = {"_P": _HEADS, "_X": _long_head, "_I64": _I64, "_U64": _U64, "_DT": _DATETIME,
                           "_DEC": values.DECIMAL_PATTERN.match}
    types: Types = tuple(None if tag == "N" else _WRITERS[tag][0] for tag in signature)
    body = [f"    {''.join(n + ', ' for n in names)}= {'cols' if typed else 'row'}"]
    if typed:  # (a struct where "Null" is expected fails here; "Null" where a struct is, at its field)
        body += [f"    if {n}.__class__ is not str: raise TypeError('not this signature')"
                 for n, tag in zip(names, signature) if tag == "N"]
    else:
        tagged = [n for n, tag in zip(names, signature) if tag != "N"]
        checks = [" == ".join(f"len({n})" for n in tagged) + " == 1"] if tagged else []
        checks += [f"{n} == 'Null'" for n, tag in zip(names, signature) if tag == "N"]
        body += [f"    if not ({' and '.join(checks) or 'True'}):", "        raise TypeError('not this signature')"]

    def check(test: str, error: str) -> list[str]:  # a type check the typed rows' decoder made already
        return [] if typed else [f"    if {test}: raise {error}"]

    parts = []
    for i, (n, tag) in enumerate(zip(names, signature)):
        v = f"v{i}"
        value = f"{n}.{tag}" if typed else f"{n}[{tag!r}]"
        if tag == "N":
            parts.append("b'\\x01'")
        elif tag in ("String", "Enum"):
            body += [f"    {v} = {value}", *check(f"{v}.__class__ is not str", "TypeError('expected a string')"),
                     f"    {v} = {v}.encode()", f"    n{i} = len({v})"]
            parts.append(f"_P[n{i}] if n{i} < 251 else _X({v}), {v}")
        elif tag == "SignedInteger":
            body += [f"    {v} = {value}", *check(f"type({v}) is not int", "TypeError('expected an integer')")]
            parts.append(f"b'\\x00', _I64({v})")
        elif tag in ("UnsignedInteger", "Year", "Bit"):
            body += [f"    {v} = {value}", *check(f"type({v}) is not int", "TypeError('expected an integer')"),
                     f"    if {v} < 0: raise ValueError('expected a non-negative integer')"]
            parts.append(f"b'\\x00', _U64({v})")
        elif tag == "Decimal":
            body += [f"    {v} = {value}", *check(f"type({v}) is not str", "TypeError('expected a string')"),
                     f"    if not _DEC({v}): raise ValueError('expected a decimal')", f"    {v} = {v}.encode()"]
            parts.append(f"_P[len({v})], {v}")  # at most 67 characters: 65 digits, a sign and a point
        elif tag == "DateTime" and typed:
            body += [f"    {v} = {value}",
                     f"    if not 0 <= {v}.subsecond < 1_000_000: raise ValueError('subsecond 0..999999')"]
            parts.append(f"b'\\x00', _DT(11, {v}.year, {v}.month, {v}.day, {v}.hour, {v}.minute, {v}.second, "
                         f"{v}.subsecond)")
        else:
            writer = _WRITERS[tag][1]
            assert writer is not None, f"{tag} is written inline above"  # (once per signature)
            env[f"w{i}"] = writer
            parts.append(f"b'\\x00', w{i}({value})")
    code = (f"def write({'cols' if typed else 'row'}):\n" + "\n".join(body)
            + f"\n    return b''.join(({', '.join(parts)},))\n")
    exec(code, env)
    cache = _TYPED_WRITERS if typed else _ROW_WRITERS
    if len(cache) >= _MAX_ROW_WRITERS:
        cache.clear()
    cache[signature] = (types, env["write"])
    return cache[signature]


# A present value's indicator and its length, for lengths under 251 (one byte), and for longer ones.
_HEADS = tuple(bytes((0, n)) for n in range(251))


def _long_head(raw: bytes) -> bytes:
    return b"\x00" + lenenc(raw)[: -len(raw)]
