"""Row images -> each row's JSON text, by Python code generated once per table map.

The per-column readers (columns.py, unpack.py) are exact but cost a call, a tuple and a closure
lookup per value, and a dict per value that is encoded and freed again. For the
common column types this module writes the code of a whole table out as
straight-line Python (exec'd once per table map) that formats each row's JSON
directly: each value is read in place, little-endian fixed-width runs (integers,
floats, and the length of a text column after them) are unpacked by one struct call,
a row without NULLs skips the per-column NULL tests, and the temporal types' fields are
mostly looked up rather than formatted. Column types without an inline form call their
reader and encode its value, so every type comes out exactly as the reader's
value would (tests/test_rowcode.py compares the two on random images).

An inline form is described by a `Spec`; columns.column_codec derives them from the table map.
The generated expressions are unpack.py's layouts written out (DECIMAL's digit groups,
datetime_parts): a call per value is what they save.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cdc_producer.unpack import DIG2BYTES, Reader, fraction_size
from cdc_stream import values

RowsFn = Callable[[bytes, int, int], tuple[list[bytes], int]]

_LE_CODES = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "f": 4, "d": 8}
_LENGTH_CODES = {1: "B", 2: "H", 4: "I"}  # a text or blob column's length (bytes -> struct code)
_BE_CODE = {1: "B", 2: "H", 4: "I"}


@dataclass(frozen=True)
class Spec:
    """How to read one column inline.

    kind: "fixed" (args: struct code, tag), "decimal" (precision, scale),
    "datetime2" / "timestamp2" (fsp), "date" (), "text" (length bytes, Python codec),
    "blob" (length bytes)."""

    kind: str
    args: tuple[Any, ...] = ()


@dataclass
class _Gen:
    """Code being generated: the namespace it runs in and a counter for unique names."""

    ns: dict[str, Any]
    n: int = 0

    def name(self, value: Any, prefix: str = "k") -> str:
        """A global of the generated code bound to `value`."""
        self.n += 1
        key = f"{prefix}{self.n}"
        self.ns[key] = value
        return key


@dataclass
class _DecimalLayout:
    """How a DECIMAL's digit groups are read: one struct call into fields p0.. (a negative number's are
    inverted first: every bit of each field, its `masks`), then `integer` (an expression),
    `fractions` ((expression, digits, bytes) per fraction group), and where the first of several
    integer groups is 0 (`lead_zero`), `rest`: the integer without it."""

    unpack_fmt: str
    fields: list[str]
    masks: list[int]
    integer: str
    fractions: list[tuple[str, int, int]]
    sign_test: str  # true on positive numbers
    size: int
    lead_zero: str | None = None
    rest: str = "0"


def _decimal_layout(spec: Spec, prefix: str) -> _DecimalLayout | None:
    precision, scale = spec.args
    intg = precision - scale
    parts: list[int] = []  # byte widths: lead, int groups, frac groups, tail
    if intg % 9:
        parts.append(DIG2BYTES[intg % 9])
    parts += [4] * (intg // 9)
    n_int = len(parts)
    parts += [4] * (scale // 9)
    if scale % 9:
        parts.append(DIG2BYTES[scale % 9])
    if not parts:
        return None
    fmt, exprs, fields, masks = ">", [], 0, []
    for width in parts:  # 3-byte parts are read as B + H
        if width == 3:
            fmt += "BH"
            exprs.append(f"({prefix}{fields} << 16 | {prefix}{fields + 1})")
            fields += 2
            masks += [0xFF, 0xFFFF]
        else:
            fmt += _BE_CODE[width]
            exprs.append(f"{prefix}{fields}")
            fields += 1
            masks.append((1 << 8 * width) - 1)
    top = 1 << (8 * parts[0] - 1)
    first = exprs[0]
    exprs[0] = f"({first} ^ {top})"  # the sign bit, set on positive numbers

    def integer(groups: list[str]) -> str:
        out = "0"
        for e in groups:
            out = e if out == "0" else f"({out}) * 1000000000 + {e}"
        return out

    fractions = [(e, 9, 4) for e in exprs[n_int:n_int + scale // 9]]
    if scale % 9:
        fractions.append((exprs[-1], scale % 9, parts[-1]))
    # Most values of a DECIMAL(12,2) fit in its last integer group: their first is 0, and the product
    # and the wider number are left out.
    lead_zero = f"{first} == {top}" if n_int >= 2 else None
    return _DecimalLayout(fmt, [f"{prefix}{i}" for i in range(fields)], masks, integer(exprs[:n_int]), fractions,
                          f"{first} & {top}", sum(parts), lead_zero, integer(exprs[1:n_int]))


@functools.cache
def _fraction_digits(digits: int) -> tuple[bytes, ...]:
    """The text of a 1-byte fraction group of `digits` digits, by its value (every byte value: those
    above 10**digits - 1 read as %0Nd writes them), looked up rather than formatted."""
    return tuple(b"%0*d" % (digits, i) for i in range(256))


def _big_int(gen: _Gen, size: int, at: str = "pos") -> str:
    """An expression reading `size` big-endian bytes at `at` as an unsigned int."""
    if size in (1, 2, 4, 8):
        code = {1: "B", 2: "H", 4: "I", 8: "Q"}[size]
        return f"{gen.name(struct.Struct('>' + code).unpack_from, 'u')}(data, {at})[0]"
    return f"int.from_bytes(data[{at}:{at} + {size}], 'big')"


# A structured value's reading: (lines setting temporaries named with `sfx`, %-format of its JSON, the
# format's arguments, bytes to advance). The arguments use only those temporaries, so they may be evaluated later.
Fields = tuple[list[str], str, list[str], int]

# The temporal types' JSON is mostly looked up, not formatted: a %d in a bytes format costs ~60 ns, and
# DATETIME's seven fields were a fifth of a row's time on the standard table. Hour, minute and second
# (and DATE's day) come from tables built once (_clock); the year and month from a cache (_Months).
_MONTHS_KEPT = 4096


@dataclass
class _Months:
    """Each year and month's JSON text, up to the day, formatted the first time it is seen (a table's dates
    share few months) and looked up after; at most _MONTHS_KEPT kept (all dropped when full)."""

    text: Callable[[int], bytes]  # key -> the text
    cache: dict[int, bytes] = field(default_factory=dict)

    def miss(self, key: int) -> bytes:
        if len(self.cache) >= _MONTHS_KEPT:
            self.cache.clear()
        text = self.cache[key] = self.text(key)
        return text


# DATETIME2's key: the packed value >> 22, offset by 2^17 (year * 13 + month, datetime_parts); DATE's:
# the 3 bytes >> 5 (year * 16 + month).
_DATETIME_MONTHS = _Months(lambda key: b'{"DateTime":{"year":%d,"month":%d,' % divmod(key - (1 << 17), 13))
_DATE_MONTHS = _Months(lambda key: b'{"Date":{"year":%d,"month":%d,"day":' % (key >> 4, key & 15))


@functools.cache
def _clock() -> tuple[tuple[bytes, ...], tuple[bytes, ...], tuple[bytes, ...]]:
    """(day and hour by the 10 bits above minute and second, minute and second by their 12 bits, DATE's
    day by its 5 bits): every value the bits can hold, so out-of-range ones read as %d writes them."""
    return (tuple(b'"day":%d,"hour":%d,"minute":' % (i >> 5, i & 31) for i in range(1024)),
            tuple(b'%d,"second":%d,"subsecond":' % (i >> 6, i & 63) for i in range(4096)),
            tuple(b"%d}}" % i for i in range(32)))


def _months_lookup(gen: _Gen, months: _Months, key: str, var: str) -> list[str]:
    """Lines setting `var` to the cached text of `key` (an expression)."""
    get, miss = gen.name(months.cache.get, "m"), gen.name(months.miss, "m")
    return [f"{var} = {get}({key})", f"if {var} is None:", f"    {var} = {miss}({key})"]


def _datetime2_fields(gen: _Gen, spec: Spec, sfx: str) -> Fields:
    n, scale = fraction_size(spec.args[0])
    x, f, c = (v + sfx for v in "xfc")
    day_hour, minute_second, _ = _clock()
    lines = [f"{x} = {_big_int(gen, 5 + n)}"]
    if n:
        lines += [f"{f} = ({x} & {(1 << 8 * n) - 1})" + (f" * {scale}" if scale != 1 else ""), f"{x} >>= {8 * n}"]
    lines += _months_lookup(gen, _DATETIME_MONTHS, f"{x} >> 22", c)
    args = [c, f"{gen.name(day_hour, 't')}[({x} >> 12) & 1023]", f"{gen.name(minute_second, 't')}[{x} & 4095]"]
    return lines, "%b%b%b" + ("%d}}" if n else "0}}"), args + ([f] if n else []), 5 + n


def _timestamp2_fields(gen: _Gen, spec: Spec, sfx: str) -> Fields:
    n, scale = fraction_size(spec.args[0])
    fraction = f"f{sfx} = {_big_int(gen, n, 'pos + 4')} * {scale}" if n else f"f{sfx} = 0"
    lines = [f"x{sfx} = {_big_int(gen, 4)}", fraction]
    return lines, '{"Timestamp":{"unix_time":%d,"subsecond":%d}}', [f"x{sfx}", f"f{sfx}"], 4 + n


def _date_fields(gen: _Gen, spec: Spec, sfx: str) -> Fields:
    x, c = f"x{sfx}", f"c{sfx}"
    lines = [f"{x} = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16"]
    lines += _months_lookup(gen, _DATE_MONTHS, f"{x} >> 5", c)
    return lines, "%b%b", [c, f"{gen.name(_clock()[2], 't')}[{x} & 31]"], 3


_STRUCTURED = {"datetime2": _datetime2_fields, "timestamp2": _timestamp2_fields, "date": _date_fields}


def _length(gen: _Gen, size: int) -> str:
    if size == 1:
        return "data[pos]"
    if size == 2:
        return "(data[pos] | data[pos + 1] << 8)"
    if size == 4:  # LONGTEXT/LONGBLOB, and MariaDB's JSON: no slice to read the length
        return f"{gen.name(struct.Struct('<I').unpack_from, 'u')}(data, pos)[0]"
    return f"int.from_bytes(data[pos:pos + {size}], 'little')"


def _null_test(width: int) -> list[str]:
    """The code reading the NULL bitmap of a `width`-column image at `pos` into `nulls`, then `if nulls:`.

    The bitmap's unused high bits are masked off: the server sets them (pack_row starts
    each bitmap byte at 0xFF), and left in they would send every row of a table whose
    width is not a multiple of 8 down the slower path that tests each column."""
    nbytes = (width + 7) // 8
    nulls = "data[pos]" if nbytes == 1 else f"int.from_bytes(data[pos:pos + {nbytes}], 'little')"
    if width % 8:
        nulls += f" & {(1 << width) - 1:#x}"
    return [f"nulls = {nulls}", f"pos += {nbytes}", "if nulls:"]


def _compile(gen: _Gen, bodies: list[tuple[str, list[str]]]) -> list[RowsFn]:
    """exec one `name(data, pos, end) -> (out, pos)` function per (name, loop body); body lines append to out."""
    source = []
    for name, body in bodies:
        source += [f"def {name}(data, pos, end):", "    out = []", "    append = out.append", "    while pos < end:"]
        source += ["        " + line for line in body]
        source += ["    return out, pos", ""]
    gen.ns["__source__"] = "\n".join(source)  # for tracebacks and debugging
    exec(compile(gen.ns["__source__"], "<cdc_producer.rowcode>", "exec"), gen.ns)
    return [gen.ns[name] for name, _ in bodies]


# -- each row written straight as the event's JSON ---------------------------
#
# Building a dict per value, encoding it and freeing it again was over half of the
# producer's time. These functions format each row's JSON text directly, byte for
# byte what msgspec writes for the tagged values (tests/test_rowcode.py checks it):
# integers and the fields of dates with %d, strings and floats by msgspec itself.

_ENCODE = msgspec.json.Encoder().encode


def _key(name: str) -> str:
    return _ENCODE(name).decode() + ":"


def _fixed_json(enc: str, code: str, tag: str, var: str) -> tuple[str, list[str]]:
    if code in "fd":
        return "{" + _key(tag) + "%b}", [f"{enc}({var})"]
    return "{" + _key(tag) + "%d}", [var]


def _json_value(gen: _Gen, spec: Spec | None, reader: Reader, i: int,
                length: str | None = None) -> tuple[list[str], str, list[str]]:
    """(lines reading column i at pos, %-format of its JSON, the format's arguments). `length`: a text or
    blob column's length, read already (by the struct call of the fixed-width columns before it)."""
    a, enc = f"a{i}", gen.name(_ENCODE, "e")
    layout = _decimal_layout(spec, f"p{i}_") if spec is not None and spec.kind == "decimal" else None
    if spec is None or (spec.kind == "decimal" and layout is None):
        return [f"{a}, pos = {gen.name(reader, 'r')}(data, pos)", f"{a} = {enc}({a})"], "%b", [a]
    if spec.kind == "fixed":
        code, tag = spec.args
        unpack = gen.name(struct.Struct("<" + code).unpack_from, "u")
        return [f"{a} = {unpack}(data, pos)[0]", f"pos += {_LE_CODES[code]}"], *_fixed_json(enc, code, tag, a)
    if layout is not None:
        # Sign, integer and fraction groups go straight into the row's format (unpack.decimal_reader's
        # text: a negative number inverted back first, and "-" before it, -0 included).
        sign, integer = f"z{i}", f"v{i}"
        fracs = [(f"{gen.name(_fraction_digits(d), 't')}[{e}]", "%b") if width == 1 else (e, f"%0{d}d")
                 for e, d, width in layout.fractions]
        text = '{"Decimal":"%b%d' + ("." + "".join(f for _, f in fracs) if fracs else "") + '"}'
        unpack = gen.name(struct.Struct(layout.unpack_fmt).unpack_from, "u")
        lines = [f"{', '.join(layout.fields)}, = {unpack}(data, pos)",
                 f"if {layout.sign_test}:", f"    {sign} = b''", "else:", f"    {sign} = b'-'"]
        lines += [f"    {field} ^= {mask}" for field, mask in zip(layout.fields, layout.masks)]
        if layout.lead_zero is not None:
            lines.append(f"{integer} = {layout.rest} if {layout.lead_zero} else {layout.integer}")
        else:
            lines.append(f"{integer} = {layout.integer}")
        return lines + [f"pos += {layout.size}"], text, [sign, integer] + [e for e, _ in fracs]
    if spec.kind in _STRUCTURED:
        lines, fmt, args, size = _STRUCTURED[spec.kind](gen, spec, f"_{i}")
        return lines + [f"pos += {size}"], fmt, args
    size, start = spec.args[0], f"s{i}"
    lines = [f"{start} = pos + {size}", f"pos = {start} + {length or _length(gen, size)}"]
    if spec.kind == "blob":  # msgspec writes bytes as base64, as values.blob_tag does
        return lines + [f"{a} = {enc}(data[{start}:pos])"], '{"Blob":%b}', [a]
    codec, tag = spec.args[1], f"g{i}"
    return lines + [
        f"x{i} = data[{start}:pos]",
        "try:", f"    {a}, {tag} = {enc}(x{i}.decode({codec!r})), b'String'",
        "except UnicodeDecodeError:", f"    {a}, {tag} = {enc}(x{i}), b'Blob'",
    ], '{"%b":%b}', [tag, a]


def _image_json(gen: _Gen, specs: list[Spec | None], readers: tuple[Reader, ...], head: str, tail: str,
                var: str) -> list[str]:
    """The code reading one row image at `pos` into `var`: head + the values' JSON, comma separated + tail."""
    n, enc = len(specs), gen.name(_ENCODE, "e")
    lines = _null_test(n)
    null = gen.name(_ENCODE(values.NULL), "n")
    for i, (spec, reader) in enumerate(zip(specs, readers)):
        col_lines, fmt, col_args = _json_value(gen, spec, reader, i)
        lines += [f"    if nulls & {1 << i}:", f"        a{i} = {null}", "    else:"]
        lines += ["        " + line for line in col_lines]
        if (fmt, col_args) != ("%b", [f"a{i}"]):
            lines.append(f"        a{i} = {fmt.encode()!r} % ({', '.join(col_args)},)")
    pieces = ", ".join(f"a{i}" for i in range(n))
    lines.append(f"    {var} = {(head + ','.join(['%b'] * n) + tail).encode()!r} % ({pieces},)")
    lines.append("else:")
    fmts: list[str] = []
    args: list[str] = []
    fixed = [spec if spec is not None and spec.kind == "fixed" else None for spec in specs]
    i = 0
    while i < n:
        run = i
        while run < n and fixed[run] is not None:
            run += 1
        # The length of a text or blob column right after fixed-width ones is read by their struct call.
        after = specs[run] if i < run < n else None
        length = _LENGTH_CODES.get(after.args[0]) if after is not None and after.kind in ("text", "blob") else None
        if run - i >= 2 or length:  # one struct call for a run of fixed-width columns
            codes = "".join(spec.args[0] for spec in fixed[i:run] if spec is not None)
            names = [f"a{j}" for j in range(i, run)] + ([f"l{run}"] if length else [])
            unpack = gen.name(struct.Struct("<" + codes + (length or "")).unpack_from, "u")
            lines.append(f"    {', '.join(names)} = {unpack}(data, pos)")
            lines.append(f"    pos += {sum(_LE_CODES[c] for c in codes)}")
            for j, spec in enumerate(fixed[i:run], i):
                assert spec is not None
                code, tag = spec.args
                fmt, more = _fixed_json(enc, code, tag, f"a{j}")
                fmts.append(fmt)
                args += more
            i = run
            if not length:
                continue
        col_lines, fmt, more = _json_value(gen, specs[i], readers[i], i, f"l{i}" if length else None)
        lines += ["    " + line for line in col_lines]
        fmts.append(fmt)
        args += more
        i += 1
    lines.append(f"    {var} = {(head + ','.join(fmts) + tail).encode()!r} % ({', '.join(args)},)")
    return lines


_PAIR = b'{"before_cols":[%b],"after_cols":[%b]}'


def compile_rows_json(specs: list[Spec | None], readers: tuple[Reader, ...]) -> tuple[RowsFn, RowsFn]:
    """(rows, pairs): functions (data, pos, end) -> (list, offset reached) reading every row image
    (rows) or every before/after pair of images (pairs) from pos up to end, each row as the bytes
    of its JSON object in an event's `rows`: {"cols":[...]}, or {"before_cols":[...],"after_cols":[...]}.

    They stop at the first image that starts at or after `end`; a reader that ran past the data
    raises IndexError or struct.error, as the readers do."""
    gen = _Gen({"__builtins__": __builtins__})
    body_rows = _image_json(gen, specs, readers, '{"cols":[', "]}", "r") + ["append(r)"]
    body_pairs = (_image_json(gen, specs, readers, "", "", "w") + _image_json(gen, specs, readers, "", "", "r")
                  + [f"append({_PAIR!r} % (w, r))"])
    rows, pairs = _compile(gen, [("rows", body_rows), ("pairs", body_pairs)])
    return rows, pairs


__all__ = ["Spec", "compile_rows_json"]
