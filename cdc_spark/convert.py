"""Tagged values (docs/events.md) -> Arrow columns of the types schema.py gives, exactly.

Every value is read through cdc_stream.values (to_param: the project's one reader of tags,
which validates them); only the date and time parts are taken from the tag's fields,
because to_param renders them as MySQL text. A value the column's Spark type cannot
hold (a zero or invalid date, a zero TIMESTAMP, bytes where the column's charset would
give text, a value whose tag does not fit the column) becomes NULL there and its tag goes
to the image's `_cdc_raw` JSON object, `{"column": <tagged value>}`: nothing is lost.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec
import pyarrow as pa

from cdc_spark.schema import RAW_COLUMN, ColumnType, TableSchema
from cdc_stream.column_types import TEMPORAL_TYPES
from cdc_stream.errors import SchemaMismatch
from cdc_stream.typed_rows import DateTimeParts
from cdc_stream.values import DECIMAL_PATTERN, NULL, BadValue, tag_of, to_param

_EPOCH = dt.datetime(1970, 1, 1)
_UTC = dt.UTC
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Untypable(Exception):
    """This value cannot be held by the column's Spark type: keep its tag in _cdc_raw."""


Converter = Callable[[Any], Any]  # tagged value -> Python value for pa.array (raises Untypable)


def _date(v: dict[str, Any]) -> dt.date:
    # Zero parts ('0000-00-00', '2020-00-00') and invalid dates ('2021-02-30') raise ValueError: Untypable
    return dt.date(v["year"], v["month"], v["day"])


def _datetime(v: dict[str, Any]) -> dt.datetime:
    return dt.datetime(v["year"], v["month"], v["day"], v["hour"], v["minute"], v["second"], v["subsecond"])


def _timestamp(v: dict[str, Any]) -> dt.datetime:
    if v["unix_time"] == 0 and v["subsecond"] == 0:
        raise Untypable  # MySQL's zero TIMESTAMP
    return (_EPOCH + dt.timedelta(seconds=v["unix_time"], microseconds=v["subsecond"])).replace(tzinfo=_UTC)


def _time_micros(v: dict[str, Any]) -> int:
    micros: int = ((v["hours"] * 60 + v["minutes"]) * 60 + v["seconds"]) * 1_000_000 + v["subseconds"]
    return -micros if v.get("negative") else micros


def _expect(*tags: str) -> Callable[[Converter], Converter]:
    """Only these tags are converted; another tag (the column's type changed?) goes to _cdc_raw."""
    def wrap(convert: Converter) -> Converter:
        def checked(tagged: Any) -> Any:
            if tag_of(tagged) not in tags:
                raise Untypable
            return convert(tagged)
        return checked
    return wrap


def _fields(tag: str, read: Callable[[dict[str, Any]], Any]) -> Converter:
    """Date/time tags, read from the tag's fields: a value out of the Spark type's range is Untypable,
    a malformed tag (a missing field, a field of the wrong type) a BadValue."""
    def convert(tagged: Any) -> Any:
        if type(tagged) is not dict or len(tagged) != 1 or tag not in tagged:
            if tag_of(tagged) == NULL or isinstance(tagged, dict):
                raise Untypable  # another tag: the column's type changed
            raise BadValue(f"not a tagged value: {tagged!r}")
        try:
            return read(tagged[tag])
        except (ValueError, OverflowError):
            raise Untypable from None
        except (KeyError, TypeError, AttributeError) as e:
            raise BadValue(f"bad {tag} value {tagged[tag]!r}: {type(e).__name__} {e}") from None
    return convert


def _plain(tags: tuple[str, ...], kind: type, slow_tags: tuple[str, ...] = ()) -> Converter:
    """Tags whose JSON value is the Python value (integers, text): checked inline; anything else
    (and `slow_tags`) through to_param's checks."""
    slow = _expect(*tags, *slow_tags)(to_param)

    def convert(tagged: Any) -> Any:
        if type(tagged) is dict and len(tagged) == 1:
            for tag, v in tagged.items():
                if type(v) is kind and tag in tags and (kind is not int or tag == "SignedInteger" or v >= 0):  # type: ignore[operator]
                    return v
        return slow(tagged)
    return convert


def converter(column: ColumnType, lake: bool = False) -> Converter:
    """The function turning one tagged value of `column` into its Arrow value."""
    t, arrow = column.data_type, column.arrow(lake)
    if t == "time":
        return _fields("Time", _time_micros)
    if pa.types.is_integer(arrow):
        return _plain(("SignedInteger", "UnsignedInteger", "Year", "Bit"), int)
    if pa.types.is_decimal(arrow):
        if t in ("decimal", "numeric"):
            return _expect("Decimal")(to_param)
        return _expect("UnsignedInteger", "Bit")(lambda v: Decimal(to_param(v)))
    if pa.types.is_floating(arrow):
        return _expect("Float", "Double")(to_param)
    if t == "date":
        return _fields("Date", _date)
    if t == "datetime":
        return _fields("DateTime", _datetime)
    if t == "timestamp":
        return _fields("Timestamp", _timestamp)
    if t == "set":
        return _expect("Set")(lambda v: list(v["Set"]) if to_param(v) is not None else None)
    if t in ("decimal", "numeric"):  # more digits than Spark's 38: the exact text
        return _expect("Decimal")(lambda v: str(to_param(v)))
    if pa.types.is_string(arrow):
        return _plain(("String", "Enum"), str, slow_tags=("Json",))
    return _expect("Blob", "Geometry")(to_param)  # binary: bytes exactly as stored


ColumnConverter = Callable[[list[Any]], tuple[list[Any], list[int]]]
"""A column's decoded tagged values -> their Arrow values and the rows it left to the value's Converter
(placeholders in the values): the common values typed in one loop, no call per value."""


def _column_loop(tags: frozenset[str], read: Callable[[Any], Any], check: Callable[[Any], bool]) -> ColumnConverter:
    """NULL is None; {tag: v} with a tag of `tags` and check(v) is read(v); a read raising (any error) or any
    other value is left to the value's Converter, which says what it is (Untypable, BadValue) exactly as before."""
    def convert(tagged: list[Any]) -> tuple[list[Any], list[int]]:
        out: list[Any] = []
        slow: list[int] = []
        append = out.append
        for row, t in enumerate(tagged):
            if type(t) is dict and len(t) == 1:
                for tag, v in t.items():
                    if tag in tags and check(v):
                        try:
                            append(read(v))
                            break
                        except Exception:  # the Converter classifies it
                            pass
                    append(None)
                    slow.append(row)
            elif t == NULL:
                append(None)
            else:
                append(None)
                slow.append(row)
        return out, slow
    return convert


def _plain_loop(tags: frozenset[str], kind: type) -> ColumnConverter:
    """Integers and text: the JSON value is the Arrow value (a negative integer only as SignedInteger)."""
    def convert(tagged: list[Any]) -> tuple[list[Any], list[int]]:
        out: list[Any] = []
        slow: list[int] = []
        append = out.append
        for row, t in enumerate(tagged):
            if type(t) is dict and len(t) == 1:
                for tag, v in t.items():
                    if type(v) is kind and tag in tags and (kind is not int or tag == "SignedInteger" or v >= 0):  # type: ignore[operator]
                        append(v)
                    else:
                        append(None)
                        slow.append(row)
            elif t == NULL:
                append(None)
            else:
                append(None)
                slow.append(row)
        return out, slow
    return convert


def _is_str(v: Any) -> bool:
    return type(v) is str


def _is_fields(v: Any) -> bool:
    return type(v) is dict


def _finite(v: Any) -> bool:
    return type(v) is float and v - v == 0.0  # not NaN, not infinite (to_param refuses those)


def _decimal_text(v: Any) -> bool:
    return type(v) is str and DECIMAL_PATTERN.match(v) is not None


_PLAIN_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")  # ASCII, nothing around: its digits and scale are the text's
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_timedelta = dt.timedelta


def _decimal_loop(tag: str, scale: int, precision: int) -> ColumnConverter:
    """DECIMAL(p,s) from its text with exactly s decimals and at most p digits; any other (a scale to fit,
    leading zeros to drop, a value to refuse) is left to the Converter."""
    plain = _PLAIN_DECIMAL.fullmatch

    def convert(tagged: list[Any]) -> tuple[list[Any], list[int]]:
        out: list[Any] = []
        slow: list[int] = []
        append = out.append
        for row, t in enumerate(tagged):
            if type(t) is dict and len(t) == 1:
                v = t.get(tag)
                if type(v) is str and plain(v) is not None:
                    dot = v.find(".")
                    if (len(v) - dot - 1 if dot >= 0 else 0) == scale and \
                            len(v) - (v[0] == "-") - (dot >= 0) <= precision:
                        append(Decimal(v))
                        continue
            elif t == NULL:
                append(None)
                continue
            append(None)
            slow.append(row)
        return out, slow
    return convert


def _unsigned_decimal_loop(precision: int) -> ColumnConverter:
    """DECIMAL(p,0) of an unsigned integer (BIGINT UNSIGNED, BIT(64))."""
    limit = 10 ** precision

    def convert(tagged: list[Any]) -> tuple[list[Any], list[int]]:
        out: list[Any] = []
        slow: list[int] = []
        append = out.append
        for row, t in enumerate(tagged):
            if type(t) is dict and len(t) == 1:
                for tag, v in t.items():
                    if type(v) is int and 0 <= v < limit and (tag == "UnsignedInteger" or tag == "Bit"):
                        append(Decimal(v))
                    else:
                        append(None)
                        slow.append(row)
            elif t == NULL:
                append(None)
            else:
                append(None)
                slow.append(row)
        return out, slow
    return convert


def _timestamp_loop(tagged: list[Any]) -> tuple[list[Any], list[int]]:
    """TIMESTAMP from its unix time (a zero TIMESTAMP, an odd value: left to the Converter)."""
    out: list[Any] = []
    slow: list[int] = []
    append = out.append
    for row, t in enumerate(tagged):
        if type(t) is dict and len(t) == 1:
            v = t.get("Timestamp")
            if type(v) is dict:
                u, s = v.get("unix_time"), v.get("subsecond")
                if type(u) is int and type(s) is int and (u or s):
                    try:
                        append(_EPOCH_UTC + _timedelta(0, u, s))
                        continue
                    except OverflowError:
                        pass
        elif t == NULL:
            append(None)
            continue
        append(None)
        slow.append(row)
    return out, slow


class _DateFields(msgspec.Struct):
    year: int
    month: int
    day: int


class _TimestampFields(msgspec.Struct):
    unix_time: int
    subsecond: int


def _no(_: Any) -> Any:
    raise Untypable


Finish = Callable[[Any], Any]  # a decoded tagged struct's field -> the Arrow value (raises: left to the Converter)


@dataclass(frozen=True)
class TypedDecoding:
    """How msgspec decodes one column's usual tag straight into typed structs: `tagged` is the JSON value's type
    (`{tag: v}` with v of the tag's usual JSON, or "Null"), `finish` makes the Arrow value of a struct's v."""

    tagged: Any
    finish: Finish | None  # None: v is the value


@functools.lru_cache(maxsize=1024)  # a task builds its converters per group: the struct classes once
def typed_decoding(column: ColumnType, lake: bool = False) -> TypedDecoding | None:
    """The typed decoding of the column's usual tag: integers, text, DECIMALs, floats, dates and times, blobs.
    It takes NULL and the tag with its usual JSON (an integer, not negative but as SignedInteger; a string; the
    date's fields) and gives what the Converter gives; any other value fails the decode, and one the Converter
    would not take as it is (a zero date, a DECIMAL to rescale) fails `finish` (None: no such decoding)."""
    t, arrow = column.data_type, column.arrow(lake)
    kind: Any
    finish: Finish | None = None
    if t == "time":
        return None
    if pa.types.is_integer(arrow):
        tag = {"year": "Year", "bit": "Bit"}.get(t, "UnsignedInteger" if column.unsigned else "SignedInteger")
        kind = int if tag == "SignedInteger" else Annotated[int, msgspec.Meta(ge=0)]
    elif pa.types.is_decimal(arrow) and t in ("decimal", "numeric"):
        scale, precision, plain = arrow.scale, arrow.precision, _PLAIN_DECIMAL.fullmatch

        def finish(v: str) -> Decimal:
            dot = v.find(".")
            if plain(v) is None or (len(v) - dot - 1 if dot >= 0 else 0) != scale or \
                    len(v) - (v[0] == "-") - (dot >= 0) > precision:
                raise Untypable  # the Converter says what it is
            return Decimal(v)
        tag, kind = "Decimal", str
    elif pa.types.is_decimal(arrow):  # BIGINT UNSIGNED, BIT(64)
        limit = 10 ** arrow.precision
        tag = "Bit" if t == "bit" else "UnsignedInteger"
        kind, finish = Annotated[int, msgspec.Meta(ge=0)], (lambda v: Decimal(v) if v < limit else _no(v))
    elif pa.types.is_floating(arrow):
        tag, kind = ("Float" if t == "float" else "Double"), float
        finish = lambda v: v if v - v == 0.0 else _no(v)  # NaN, infinities: the Converter refuses
    elif t == "date":
        tag, kind, finish = "Date", _DateFields, lambda v: dt.date(v.year, v.month, v.day)
    elif t == "datetime":
        tag, kind = "DateTime", DateTimeParts
        finish = lambda v: dt.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.subsecond)
    elif t == "timestamp":
        tag, kind = "Timestamp", _TimestampFields
        finish = lambda v: _EPOCH_UTC + _timedelta(0, v.unix_time, v.subsecond) if v.unix_time or v.subsecond \
            else _no(v)  # the zero TIMESTAMP
    elif pa.types.is_string(arrow) and t not in ("set", "json", "decimal", "numeric"):
        tag, kind = ("Enum" if t == "enum" else "String"), str
    elif pa.types.is_binary(arrow):
        tag, kind, finish = "Blob", str, _base64
    else:
        return None
    tagged = msgspec.defstruct(f"Tagged{tag}", [("v", kind)], rename={"v": tag}, forbid_unknown_fields=True)
    return TypedDecoding(tagged | Literal["Null"], finish)


def _finished(items: Sequence[Any], finish: Finish | None) -> tuple[list[Any], list[int]]:
    """Typed structs (or "Null") -> their Arrow values and the rows `finish` refused (left to the Converter)."""
    if finish is None:
        return [None if x.__class__ is str else x.v for x in items], []
    try:
        return [None if x.__class__ is str else finish(x.v) for x in items], []
    except Exception:  # a value to leave to the Converter (a zero date, a DECIMAL to rescale): find them
        pass
    out: list[Any] = []
    slow: list[int] = []
    for row, x in enumerate(items):
        if x.__class__ is str:
            out.append(None)
            continue
        try:
            out.append(finish(x.v))
        except Exception:  # the Converter says what it is
            out.append(None)
            slow.append(row)
    return out, slow


def column_converter(column: ColumnType, lake: bool = False) -> ColumnConverter:
    """The loop typing a whole column of `column`'s tagged values: the same values `converter` (with the
    DECIMAL fit ImageConverter adds) gives, for the rows it does not leave to that converter."""
    t, arrow = column.data_type, column.arrow(lake)
    if t == "time":
        return _column_loop(frozenset({"Time"}), _time_micros, _is_fields)
    if pa.types.is_integer(arrow):
        return _plain_loop(frozenset({"SignedInteger", "UnsignedInteger", "Year", "Bit"}), int)
    if pa.types.is_decimal(arrow):
        if t in ("decimal", "numeric"):
            return _decimal_loop("Decimal", arrow.scale, arrow.precision)
        assert arrow.scale == 0
        return _unsigned_decimal_loop(arrow.precision)
    if pa.types.is_floating(arrow):
        return _column_loop(frozenset({"Float", "Double"}), float, _finite)
    if t == "date":
        return _column_loop(frozenset({"Date"}), _date, _is_fields)
    if t == "datetime":
        return _column_loop(frozenset({"DateTime"}), _datetime, _is_fields)
    if t == "timestamp":
        return _timestamp_loop
    if t in ("decimal", "numeric"):  # more digits than Spark's 38: the exact text
        return _column_loop(frozenset({"Decimal"}), lambda v: str(Decimal(v)), _decimal_text)
    if pa.types.is_string(arrow) and t != "set":
        return _plain_loop(frozenset({"String", "Enum"}), str)
    if pa.types.is_binary(arrow):
        return _column_loop(frozenset({"Blob"}), _base64, _is_str)
    return _column_loop(frozenset(), _base64, _is_str)  # SET: every value through its Converter


def _base64(v: str) -> bytes:
    return base64.b64decode(v, validate=True)


def _decimal_fits(arrow: pa.DataType) -> Callable[[Decimal], Decimal]:
    """A DECIMAL(p,s) value with exactly s decimals (the tag's text has them; a changed column may not)."""
    quantum = Decimal(1).scaleb(-arrow.scale)

    def fit(value: Decimal) -> Decimal:
        if value.as_tuple().exponent != -arrow.scale:
            exact = value.quantize(quantum)
            if exact != value:
                raise Untypable
            value = exact
        if len(value.as_tuple().digits) > arrow.precision:
            raise Untypable
        return value
    return fit


class ImageConverter:
    """Row images (lists of tagged values, in an event's column order) -> one Arrow StructArray."""

    def __init__(self, schema: TableSchema, lake: bool = False):
        self.schema = schema
        self.lake = lake
        self.struct = schema.arrow_struct(lake)
        self._converters = []
        for c in schema.columns:
            convert = converter(c, lake)
            arrow = c.arrow(lake)
            if pa.types.is_decimal(arrow):
                convert = _then(convert, _decimal_fits(arrow))
            self._converters.append(convert)
        self._plans: dict[tuple[str, ...], list[int | None]] = {}
        self._column_converters = [column_converter(c, lake) for c in schema.columns]
        self._typed = [typed_decoding(c, lake) for c in schema.columns]
        self._row_decoders: dict[tuple[str, ...], msgspec.json.Decoder[list[Any]]] = {}

    def _plan(self, columns: Sequence[str]) -> list[int | None]:
        """For each schema column, its index in the event's columns (None: the event lacks it)."""
        key = tuple(columns)
        plan = self._plans.get(key)
        if plan is None:
            names = self.schema.names
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise SchemaMismatch(f"{self.schema.database}.{self.schema.table} has no column "
                                     f"{', '.join(map(repr, unknown))} (its columns: {', '.join(names)})")
            index = {c: i for i, c in enumerate(columns)}
            plan = self._plans[key] = [index.get(n) for n in names]
        return plan

    def values(self, columns: Sequence[str], image: Sequence[Any]) -> tuple[list[Any], str | None]:
        """One image's Python values in schema order, and its _cdc_raw JSON (None when all are typed)."""
        out: list[Any] = []
        raw: dict[str, Any] | None = None
        for name, convert, i in zip(self.schema.names, self._converters, self._plan(columns)):
            tagged = NULL if i is None else image[i]
            if tagged == NULL:
                out.append(None)
                continue
            try:
                out.append(convert(tagged))
            except Untypable:
                out.append(None)
                raw = raw or {}
                raw[name] = tagged
            except BadValue as e:
                raise BadValue(f"column {name!r}: {e}") from None
        return out, (_encode(raw).decode() if raw is not None else None)

    def _row_decoder(self, columns: Sequence[str]) -> msgspec.json.Decoder[list[Any]]:
        """A decoder of a JSON array of images (each an array of the event's `columns`' tagged values) into tuples:
        a column's usual tag as typed structs (`typed_decoding`), any JSON where the column has no such decoding."""
        key = tuple(columns)
        decoder = self._row_decoders.get(key)
        if decoder is None:
            plan = self._plan(columns)
            kinds: list[Any] = [Any] * len(columns)
            for typed, i in zip(self._typed, plan):
                if i is not None and typed is not None:
                    kinds[i] = typed.tagged
            decoder = self._row_decoders[key] = msgspec.json.Decoder(list[tuple[tuple(kinds)]])  # type: ignore[misc]
        return decoder

    def rows(self, columns: Sequence[str], images: Sequence[bytes]) -> tuple[list[list[Any]], list[str | None]]:
        """Images given row-wise, each the JSON array of the event's `columns`' tagged values (the lake's form,
        cdc_spark/rows.py): each schema column's values and each image's _cdc_raw, as `values` gives them. All
        images are parsed at once, typed where every value has its column's usual tag; else as plain JSON, each
        column then typed by its column loop; what neither takes goes to the column's Converter, one by one."""
        n, width = len(images), len(columns)
        plan = self._plan(columns)
        whole = b"[" + b",".join(images) + b"]"
        try:
            items: list[Any] = self._row_decoder(columns).decode(whole)
            typed = True
        except msgspec.ValidationError:  # another tag or shape somewhere: plain JSON
            items, typed = _decode(whole), False
            if any(type(row) is not list or len(row) != width for row in items):
                raise BadValue(f"an image is not an array of {width} values (columns {', '.join(columns)})") from None
        by_column: list[Sequence[Any]] = list(zip(*items)) if n and width else [[] for _ in range(width)]
        out: list[list[Any]] = []
        raws: list[dict[str, Any] | None] = [None] * n
        for name, convert, loop, decoding, i in zip(self.schema.names, self._converters, self._column_converters,
                                                   self._typed, plan):
            if i is None:
                out.append([None] * n)
                continue
            if typed and decoding is not None:
                values, slow = _finished(by_column[i], decoding.finish)
                left = [(row, _decode(images[row])[i]) for row in slow]
            else:
                values, slow = loop(list(by_column[i]))
                left = [(row, by_column[i][row]) for row in slow]
            for row, t in left:  # what was left: converted (or kept in _cdc_raw) one by one, as `values` does
                try:
                    values[row] = convert(t)
                except Untypable:
                    raws[row] = raws[row] or {}
                    raws[row][name] = t  # type: ignore[index]
                except BadValue as e:
                    raise BadValue(f"column {name!r}: {e}") from None
            out.append(values)
        return out, [None if r is None else _encode(r).decode() for r in raws]

    def to_arrow(self, columns: Sequence[str], images: Sequence[Sequence[Any] | None]) -> pa.StructArray:
        """A StructArray of the images (None: a NULL struct, e.g. an insert's before image)."""
        return self.build([None if image is None else self.values(columns, image) for image in images])

    def build(self, rows: Sequence[tuple[list[Any], str | None] | None]) -> pa.StructArray:
        """A StructArray of images already converted by `values` (None: a NULL struct)."""
        width = len(self.schema.columns)
        nulls = [None] * width
        mask = [row is None for row in rows]
        # transposed in C (zip), not value by value
        cols: list[Sequence[Any]] = list(zip(*[nulls if row is None else row[0] for row in rows])) if rows and width \
            else [[] for _ in range(width)]
        cols.append([None if row is None else row[1] for row in rows])
        arrays = [pa.array(c, type=f.type) for c, f in zip(cols, self.struct)]
        return pa.StructArray.from_arrays(arrays, fields=list(self.struct), mask=pa.array(mask, pa.bool_()))


def _then(first: Converter, second: Callable[[Any], Any]) -> Converter:
    return lambda v: second(first(v))


def generic_images(images: Sequence[tuple[Sequence[str], Sequence[Any]] | None]) -> pa.MapArray:
    """The generic form of row images, (columns, tagged values) or None: a map<string,string> of
    column -> tagged value as JSON text, built from flat arrays (no Python object per entry)."""
    offsets, mask = [0], []
    keys: list[str] = []
    items: list[bytes] = []
    for image in images:
        if image is not None:
            columns, values = image
            keys.extend(columns)
            items.extend(map(_encode, values))
        offsets.append(len(keys))
        mask.append(image is None)
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(items, pa.binary()).cast(pa.string()), mask=pa.array(mask, pa.bool_()))


def has_temporal(schema: TableSchema) -> bool:
    """Whether any column is DATE/DATETIME/TIMESTAMP (whose zero values go to _cdc_raw)."""
    return any(c.data_type in TEMPORAL_TYPES for c in schema.columns)


__all__ = ["RAW_COLUMN", "ImageConverter", "SchemaMismatch", "Untypable", "column_converter", "converter",
           "generic_images", "typed_decoding"]
