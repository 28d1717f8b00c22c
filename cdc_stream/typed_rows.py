"""An insert's row images decoded straight into typed structs: one struct per tagged value.

The contract's rows decode, by default, into a list of one-key dicts per image (`{"SignedInteger": 5}`,
`values.py`): a dict per value, made and later freed, and each value's tag and type checked again in
Python by whoever uses it. The consumer's SQL path sends an insert's rows as bulk parameters
(cdc_consumer/parameters.py), which needs each value's tag and value only. Here the rows of an event
decode with a msgspec type made for its columns' tags, as the previous event of its table had them
(`learn`): a struct per value whose one field is its tag (exactly that key, a value of the tag's JSON
type, checked in C), or "Null" (a column NULL in all of that event's rows can only be NULL). On the
bench's inserts the rows decoded in 0.7 us a row, against 1.1 as dicts (bench/README.md, issue 26,
eleventh part).

`decode` returns None where the rows do not fit the type (another tag in a later row, a malformed
value, ...): the caller decodes them as before, which says what is wrong. A typed row holds the same
values as the tagged form, which `tagged` gives back (equal to what the default decoding gives).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from cdc_stream.values import NULL, TAGS


class DateTimeParts(msgspec.Struct, gc=False):
    """A DateTime value's parts (values.datetime_tag's object)."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    subsecond: int


# The JSON type each tag's value must have to be decoded here; Any where the consumer converts it itself.
_VALUE_TYPES: dict[str, Any] = {"SignedInteger": int, "UnsignedInteger": int, "Year": int, "Bit": int,
                                "Decimal": str, "String": str, "Enum": str, "DateTime": DateTimeParts}

# tag -> the struct of a value carrying it: its one field is the tag, no other key allowed.
VALUE_STRUCTS: dict[str, type[msgspec.Struct]] = {
    tag: msgspec.defstruct(tag, [(tag, _VALUE_TYPES.get(tag, Any))], gc=False, forbid_unknown_fields=True)
    for tag in TAGS
}

Signature = tuple[str, ...]  # each column's tag; NULL where the rows it was taken from are NULL there

_DECODERS: dict[Signature, tuple[type[msgspec.Struct], msgspec.json.Decoder[list[Any]]]] = {}  # row type, rows'
_LAST: dict[tuple[str, int], Signature] = {}  # (the events' uri, their width) -> the signature their rows had
_MAX_DECODERS = 1024
_current: list[Signature] = []  # the signature of the last rows learned or decoded (decode_event tries it first)


def current() -> Signature | None:
    """The signature of the last rows `learn` saw or `decode` gave (a load's inserts are mostly of one table)."""
    return _current[0] if _current else None


def row_type(sig: Signature) -> type[msgspec.Struct]:
    """The typed row of `sig` (a struct whose `cols` is a tuple of its values), for a decoder of whole records."""
    return _DECODERS[sig][0]


def decode(rows: bytes, uri: str, width: int) -> list[Any] | None:
    """An event's rows (their JSON array) as typed rows, each a struct whose `cols` is a tuple of `width` values (a
    VALUE_STRUCTS struct, or "Null"), typed as `learn` saw the rows of an earlier event of `uri`; None where
    there is none, or they do not all fit."""
    sig = _LAST.get((uri, width))
    if sig is None:
        return None
    try:
        typed: list[Any] = _DECODERS[sig][1].decode(rows)
    except msgspec.DecodeError:  # (a ValidationError is one)
        return None
    _current[:] = [sig]
    return typed


def learn(uri: str, rows: list[list[Any]]) -> None:
    """The tags of an event's rows (each a list of tagged values), for `decode` of the next event of `uri`: from
    its first row and, for the columns NULL there, the first row not NULL there."""
    try:
        tags = [_tag(v) for v in rows[0]]
        for i, t in enumerate(tags):
            if t == NULL:
                tags[i] = _tag(next((row[i] for row in rows if row[i] != NULL), NULL))
    except (ValueError, IndexError):
        return
    sig = tuple(tags)
    if sig not in _DECODERS:
        if len(_DECODERS) >= _MAX_DECODERS:
            _DECODERS.clear()
            _LAST.clear()
        row = _row_type(sig)
        _DECODERS[sig] = (row, msgspec.json.Decoder(list[row]))  # type: ignore[valid-type]
    if len(_LAST) >= _MAX_DECODERS:
        _LAST.clear()
    _LAST[(uri, len(sig))] = sig
    _current[:] = [sig]


def forget() -> None:
    """Forget what `learn` saw (tests)."""
    _LAST.clear()
    _current.clear()


def _tag(value: Any) -> str:
    if value == NULL:
        return NULL
    if type(value) is not dict or len(value) != 1:
        raise ValueError("not a tagged value")
    tag = next(iter(value))
    if tag not in VALUE_STRUCTS:
        raise ValueError("unknown tag")
    return str(tag)


def _row_type(sig: Signature) -> type[msgspec.Struct]:
    null = Literal["Null"]
    cols: Any = tuple[tuple(null if tag == NULL else VALUE_STRUCTS[tag] | null for tag in sig)]  # type: ignore[misc]
    # The other images' keys as the default decoding types them, so that what it refuses is refused here.
    row = msgspec.defstruct("TypedRow", [("cols", cols), ("before_cols", list[Any] | None, None),
                                         ("after_cols", list[Any] | None, None)],
                            namespace={"signature": sig}, gc=False)
    return row


def holds(rows: list[Any], tag: str, value: Any) -> bool:
    """Whether any of the typed rows holds `value` tagged `tag` (only the columns of that tag are looked at)."""
    columns = [i for i, t in enumerate(rows[0].signature) if t == tag] if rows else []
    if not columns:
        return False
    struct = VALUE_STRUCTS[tag]
    return any(c.__class__ is struct and getattr(c, tag) == value for row in rows for c in map(row.cols.__getitem__,
                                                                                               columns))


def tagged(rows: list[Any]) -> list[list[Any]]:
    """Typed rows as the default decoding gives them: each image a list of one-key dicts or "Null"."""
    return [list(msgspec.to_builtins(row.cols)) for row in rows]
