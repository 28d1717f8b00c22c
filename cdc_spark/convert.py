"""Tagged values (docs/events.md) -> Arrow columns of the types schema.py gives, exactly.

Every value is read through cdc_stream.values (to_param: the project's one reader of tags,
which validates them); only the date and time parts are taken from the tag's fields,
because to_param renders them as MySQL text. A value the column's Spark type cannot
hold (a zero or invalid date, a zero TIMESTAMP, bytes where the column's charset would
give text, a value whose tag does not fit the column) becomes NULL there and its tag goes
to the image's `_cdc_raw` JSON object, `{"column": <tagged value>}`: nothing is lost.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa

from cdc_spark.schema import RAW_COLUMN, ColumnType, TableSchema
from cdc_stream.column_types import TEMPORAL_TYPES
from cdc_stream.errors import SchemaMismatch
from cdc_stream.values import NULL, BadValue, tag_of, to_param

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
        # (tag, Python type) of the columns whose common values need no conversion (integers, Unicode text)
        self._plain: list[tuple[str, type] | None] = [
            ("SignedInteger", int) if pa.types.is_integer(c.arrow(lake)) and c.data_type not in ("time", "bit")
            else ("String", str) if pa.types.is_string(c.arrow(lake)) and c.data_type not in ("set", "time")
            and c.data_type not in ("decimal", "numeric") else None
            for c in schema.columns]

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

    def columns(self, columns: Sequence[str], texts: Sequence[Sequence[str]],
                n: int) -> tuple[list[list[Any]], list[str | None]]:
        """`n` images given column-wise (for each of the event's `columns`, the n tagged values' JSON texts):
        each schema column's n values, and each image's _cdc_raw (as `values` gives them, one column at a time)."""
        out: list[list[Any]] = []
        raws: list[dict[str, Any] | None] = [None] * n
        for name, convert, plain, i in zip(self.schema.names, self._converters, self._plain, self._plan(columns)):
            if i is None:
                out.append([None] * n)
                continue
            tagged = _decode("[" + ",".join(texts[i]) + "]") if n else []
            values = _plain_column(tagged, *plain) if plain is not None else None
            if values is None:
                values = []
                for row, t in enumerate(tagged):
                    if t == NULL:
                        values.append(None)
                        continue
                    try:
                        values.append(convert(t))
                    except Untypable:
                        values.append(None)
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
        cols: list[list[Any]] = [[] for _ in range(width + 1)]
        mask = []
        for row in rows:
            if row is None:
                for c in cols:
                    c.append(None)
                mask.append(True)
                continue
            values, raw = row
            for c, v in zip(cols, values):
                c.append(v)
            cols[width].append(raw)
            mask.append(False)
        arrays = [pa.array(c, type=f.type) for c, f in zip(cols, self.struct)]
        return pa.StructArray.from_arrays(arrays, fields=list(self.struct), mask=pa.array(mask, pa.bool_()))


def _plain_column(tagged: list[Any], tag: str, kind: type) -> list[Any] | None:
    """The values of a column whose values are all NULL or {tag: a `kind`} (None: some other value is there)."""
    out: list[Any] = []
    for t in tagged:
        if type(t) is dict and len(t) == 1:
            v = t.get(tag)
            if type(v) is kind:
                out.append(v)
                continue
        elif t == NULL:
            out.append(None)
            continue
        return None
    return out


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


__all__ = ["RAW_COLUMN", "ImageConverter", "SchemaMismatch", "Untypable", "converter", "generic_images"]
