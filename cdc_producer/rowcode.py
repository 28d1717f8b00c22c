"""Row images -> tagged values by Python code generated once per table map.

decode.py's per-column readers are exact but cost a call, a tuple and a closure
lookup per value. For the common column types this module writes the reading
code of a whole table out as straight-line Python (exec'd once per table map):
each value is read in place, little-endian fixed-width runs (integers, floats)
are unpacked by one struct call, and a row without NULLs skips the per-column
NULL tests. Column types without an inline form call decode.py's reader, so
every type decodes exactly as the reader does (tests/test_rowcode.py compares
the two on random images).

An inline form is described by a `Spec`; decode.py derives them from the table map.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

from cdc_stream import values

Reader = Callable[[bytes, int], "tuple[Any, int]"]
RowsFn = Callable[[bytes, int, int], "tuple[list, int]"]

_LE_CODES = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "f": 4, "d": 8}
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_BE_CODE = {1: "B", 2: "H", 4: "I"}


@dataclass(frozen=True)
class Spec:
    """How to read one column inline.

    kind: "fixed" (args: struct code, tag), "decimal" (precision, scale),
    "datetime2" / "timestamp2" (fsp), "date" (), "text" (length bytes, Python codec),
    "blob" (length bytes)."""

    kind: str
    args: tuple = ()


@dataclass
class _Gen:
    """Code being generated: the namespace it runs in and a counter for unique names."""

    ns: dict
    n: int = 0

    def name(self, value: Any, prefix: str = "k") -> str:
        """A global of the generated code bound to `value`."""
        self.n += 1
        key = f"{prefix}{self.n}"
        self.ns[key] = value
        return key


def _fixed(gen: _Gen, spec: Spec, var: str) -> list[str]:
    code, tag = spec.args
    fn = gen.name(struct.Struct("<" + code).unpack_from, "u")
    return [f"{var} = {{{tag!r}: {fn}(data, pos)[0]}}", f"pos += {_LE_CODES[code]}"]


def _decimal(gen: _Gen, spec: Spec, var: str, reader: Reader) -> list[str]:
    """Positive values inline (struct fields per digit group); negative ones by the reader."""
    precision, scale = spec.args
    intg = precision - scale
    parts: list[int] = []  # byte widths: lead, int groups, frac groups, tail
    if intg % 9:
        parts.append(_DIG2BYTES[intg % 9])
    parts += [4] * (intg // 9)
    n_int = len(parts)
    parts += [4] * (scale // 9)
    if scale % 9:
        parts.append(_DIG2BYTES[scale % 9])
    if not parts:
        return [f"{var}, pos = {gen.name(reader, 'r')}(data, pos)"]
    fmt, exprs, fields = ">", [], 0
    for width in parts:  # 3-byte parts are read as B + H
        if width == 3:
            fmt += "BH"
            exprs.append(f"(p{fields} << 16 | p{fields + 1})")
            fields += 2
        else:
            fmt += _BE_CODE[width]
            exprs.append(f"p{fields}")
            fields += 1
    top = 1 << (8 * parts[0] - 1)
    first = exprs[0]
    exprs[0] = f"({first} ^ {top})"  # the sign bit, set on positive numbers
    int_expr = "0"
    for e in exprs[:n_int]:
        int_expr = e if int_expr == "0" else f"({int_expr}) * 1000000000 + {e}"
    frac = [f"{{{e}:09d}}" for e in exprs[n_int:n_int + scale // 9]]
    if scale % 9:
        frac.append(f"{{{exprs[-1]}:0{scale % 9}d}}")
    text = f"{{{int_expr}}}" + ("." + "".join(frac) if scale else "")
    unpack = gen.name(struct.Struct(fmt).unpack_from, "u")
    names = ", ".join(f"p{i}" for i in range(fields))
    return [
        f"{names}, = {unpack}(data, pos)",
        f"if {first} & {top}:",
        f"    {var} = {{'Decimal': f{text!r}}}",
        f"    pos += {sum(parts)}",
        "else:",
        f"    {var}, pos = {gen.name(reader, 'r')}(data, pos)",
    ]


def _fraction(fsp: int) -> tuple[int, int]:
    """(bytes, multiplier to microseconds) of a TIME2/DATETIME2/TIMESTAMP2 fraction."""
    n = (fsp + 1) // 2
    return n, 10 ** (6 - 2 * n)


def _big_int(gen: _Gen, size: int, at: str = "pos") -> str:
    """An expression reading `size` big-endian bytes at `at` as an unsigned int."""
    if size in (1, 2, 4, 8):
        code = {1: "B", 2: "H", 4: "I", 8: "Q"}[size]
        return f"{gen.name(struct.Struct('>' + code).unpack_from, 'u')}(data, {at})[0]"
    return f"int.from_bytes(data[{at}:{at} + {size}], 'big')"


def _datetime2(gen: _Gen, spec: Spec, var: str) -> list[str]:
    n, scale = _fraction(spec.args[0])
    lines = [f"x = {_big_int(gen, 5 + n)}"]
    if n:
        mask = (1 << 8 * n) - 1
        lines += [f"f = (x & {mask}) * {scale}", f"x = (x >> {8 * n}) - 0x8000000000"]
    else:
        lines += ["f = 0", "x -= 0x8000000000"]
    return lines + [
        "d = x >> 17", "t = x & 0x1FFFF", "m = d >> 5",
        f"{var} = {{'DateTime': {{'year': m // 13, 'month': m % 13, 'day': d & 31, 'hour': t >> 12, "
        "'minute': (t >> 6) & 63, 'second': t & 63, 'subsecond': f}}",
        f"pos += {5 + n}",
    ]


def _timestamp2(gen: _Gen, spec: Spec, var: str) -> list[str]:
    n, scale = _fraction(spec.args[0])
    f = f"{_big_int(gen, n, 'pos + 4')} * {scale}" if n else "0"
    return [f"{var} = {{'Timestamp': {{'unix_time': {_big_int(gen, 4)}, 'subsecond': {f}}}}}", f"pos += {4 + n}"]


def _date(gen: _Gen, spec: Spec, var: str) -> list[str]:
    return [
        "x = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16",
        f"{var} = {{'Date': {{'year': x >> 9, 'month': (x >> 5) & 15, 'day': x & 31}}}}",
        "pos += 3",
    ]


def _length(gen: _Gen, size: int) -> str:
    if size == 1:
        return "data[pos]"
    if size == 2:
        return "(data[pos] | data[pos + 1] << 8)"
    if size == 4:  # LONGTEXT/LONGBLOB, and MariaDB's JSON: no slice to read the length
        return f"{gen.name(struct.Struct('<I').unpack_from, 'u')}(data, pos)[0]"
    return f"int.from_bytes(data[pos:pos + {size}], 'little')"


def _text(gen: _Gen, spec: Spec, var: str) -> list[str]:
    size, codec = spec.args
    blob = gen.name(values.blob_tag, "b")
    return [
        f"s = pos + {size}", f"pos = s + {_length(gen, size)}", "x = data[s:pos]",
        "try:", f"    {var} = {{'String': x.decode({codec!r})}}",
        "except UnicodeDecodeError:", f"    {var} = {blob}(x)",
    ]


def _blob(gen: _Gen, spec: Spec, var: str) -> list[str]:
    (size,) = spec.args
    blob = gen.name(values.blob_tag, "b")
    return [f"s = pos + {size}", f"pos = s + {_length(gen, size)}", f"{var} = {blob}(data[s:pos])"]


_INLINE = {"datetime2": _datetime2, "timestamp2": _timestamp2, "date": _date, "text": _text, "blob": _blob}


def _column(gen: _Gen, spec: Spec | None, reader: Reader, var: str) -> list[str]:
    if spec is None:
        return [f"{var}, pos = {gen.name(reader, 'r')}(data, pos)"]
    if spec.kind == "fixed":
        return _fixed(gen, spec, var)
    if spec.kind == "decimal":
        return _decimal(gen, spec, var, reader)
    return _INLINE[spec.kind](gen, spec, var)


def _no_nulls(gen: _Gen, specs: list[Spec | None], readers: tuple[Reader, ...], prefix: str) -> list[str]:
    """One image whose NULL bitmap is all zero: runs of fixed-width columns in one struct call."""
    lines: list[str] = []
    i = 0
    while i < len(specs):
        run = i
        while run < len(specs) and specs[run] is not None and specs[run].kind == "fixed":
            run += 1
        if run - i >= 2:
            codes = "".join(specs[j].args[0] for j in range(i, run))
            unpack = gen.name(struct.Struct("<" + codes).unpack_from, "u")
            names = [f"{prefix}{j}" for j in range(i, run)]
            lines.append(f"{', '.join(names)} = {unpack}(data, pos)")
            lines += [f"{prefix}{j} = {{{specs[j].args[1]!r}: {prefix}{j}}}" for j in range(i, run)]
            lines.append(f"pos += {sum(_LE_CODES[c] for c in codes)}")
            i = run
            continue
        lines += _column(gen, specs[i], readers[i], f"{prefix}{i}")
        i += 1
    return lines


def _image(gen: _Gen, specs: list[Spec | None], readers: tuple[Reader, ...], prefix: str) -> list[str]:
    """The code reading one row image at `pos` into variables prefix0..prefixN."""
    nbytes = (len(specs) + 7) // 8
    nulls = "data[pos]" if nbytes == 1 else f"int.from_bytes(data[pos:pos + {nbytes}], 'little')"
    null = gen.name(values.NULL, "n")
    lines = [f"nulls = {nulls}", f"pos += {nbytes}", "if nulls:"]
    for i, (spec, reader) in enumerate(zip(specs, readers)):
        lines += [f"    if nulls & {1 << i}:", f"        {prefix}{i} = {null}", "    else:"]
        lines += ["        " + line for line in _column(gen, spec, reader, f"{prefix}{i}")]
    lines.append("else:")
    lines += ["    " + line for line in _no_nulls(gen, specs, readers, prefix)]
    return lines


def compile_rows(specs: list[Spec | None], readers: tuple[Reader, ...]) -> tuple[RowsFn, RowsFn]:
    """(rows, pairs): functions (data, pos, end) -> (list, offset reached) reading every row
    image (rows) or every before/after pair of images (pairs) from pos up to end.

    They stop at the first image that starts at or after `end`; a reader that ran
    past the data raises IndexError or struct.error, as the readers do."""
    gen = _Gen({"__builtins__": __builtins__})
    width = len(readers)
    row = "[" + ", ".join(f"v{i}" for i in range(width)) + "]"
    before = "[" + ", ".join(f"w{i}" for i in range(width)) + "]"
    body_rows = _image(gen, specs, readers, "v") + [f"append({row})"]
    body_pairs = _image(gen, specs, readers, "w") + _image(gen, specs, readers, "v") + [f"append(({before}, {row}))"]
    source = []
    for name, body in (("rows", body_rows), ("pairs", body_pairs)):
        source += [f"def {name}(data, pos, end):", "    out = []", "    append = out.append", "    while pos < end:"]
        source += ["        " + line for line in body]
        source += ["    return out, pos", ""]
    gen.ns["__source__"] = "\n".join(source)  # for tracebacks and debugging
    exec(compile(gen.ns["__source__"], "<cdc_producer.rowcode>", "exec"), gen.ns)
    return gen.ns["rows"], gen.ns["pairs"]


__all__ = ["Spec", "compile_rows"]
