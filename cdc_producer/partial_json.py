"""MySQL 8 PARTIAL_UPDATE_ROWS_EVENT (binlog_row_value_options=PARTIAL_JSON) -> whole after-images.

With PARTIAL_JSON, an UPDATE that changes a JSON column with JSON_SET/JSON_REPLACE/JSON_REMOVE
logs, instead of the column's new document, the list of changes ("diffs") to apply to the old
one. The topic carries whole rows for every update, so each diff is applied here to the
before-image's document (sql/json_diff.cc apply_json_diffs semantics: REPLACE an existing
value, INSERT a member that is not there yet or an array cell, REMOVE a member or cell). Without
the old document (binlog_row_image=MINIMAL or NOBLOB) the new one cannot be known: the event is
refused, never dropped.

Row image layout (as UPDATE_ROWS_V2; MySQL's rows_event.h, sql/rpl_record.cc): each row is a
before image (null bitmap + values of the columns in the first columns-present bitmap), then an
after image that starts with `value_options` (packed integer; bit 0 = PARTIAL_JSON_UPDATES) and,
when that bit is set, one bit per JSON column of the table (set: the column carries diffs), then
the null bitmap and values. A diff vector is a 4-byte length, then diffs: operation (1 byte),
path (packed length + text such as `$.a[1]."b c"`), and unless REMOVE the value (packed length +
binary JSON).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
from pymysqlreplication.constants import FIELD_TYPE

from cdc_producer import mysql_json
from cdc_producer.unpack import Reader, packed_int
from cdc_stream import values
from cdc_stream.errors import DataError, PartialJsonError

REPLACE, INSERT, REMOVE = 0, 1, 2
_OPERATIONS = {REPLACE: "REPLACE", INSERT: "INSERT", REMOVE: "REMOVE"}
PARTIAL_JSON_UPDATES = 1

_encode = msgspec.json.Encoder().encode

FIX = "SET GLOBAL binlog_row_image='FULL' on the leader and make sure no session overrides it"


@dataclass(frozen=True)
class JsonDiff:
    """One change to a JSON document."""

    operation: int
    path: tuple[Any, ...]  # legs: str member, int index, ("last", n)
    value: Any = None  # the new value (plain JSON), None for REMOVE
    path_text: str = ""


# ---------------------------------------------------------------------------
# Paths: what Json_path::to_string writes for a diff (members, array cells; no wildcards).

_MEMBER = re.compile(r"\.\s*([^.\[\s\"]+)")
_QUOTED = re.compile(r"\.\s*(\"(?:[^\"\\]|\\.)*\")")
_CELL = re.compile(r"\[\s*(?:(\d+)|last\s*(?:-\s*(\d+))?)\s*\]")


def parse_path(text: str) -> tuple[Any, ...]:
    """A diff's path as legs; ValueError for anything else than $, .member, ."member", [n], [last], [last-n]."""
    stripped = text.strip()
    if not stripped.startswith("$"):
        raise ValueError(f"JSON path {text!r} does not start with $")
    legs: list[Any] = []
    pos = 1
    while pos < len(stripped):
        if stripped[pos].isspace():
            pos += 1
            continue
        match = _QUOTED.match(stripped, pos)
        if match:
            legs.append(json.loads(match.group(1)))
        elif (match := _CELL.match(stripped, pos)) is not None:
            if match.group(1) is not None:
                legs.append(int(match.group(1)))
            else:
                legs.append(("last", int(match.group(2) or 0)))
        elif (match := _MEMBER.match(stripped, pos)) is not None and match.group(1) != "*":
            legs.append(match.group(1))
        else:
            raise ValueError(f"JSON path {text!r} has an unsupported leg at {stripped[pos:]!r}")
        pos = match.end()
    return tuple(legs)


def read_diffs(data: bytes) -> list[JsonDiff]:
    """Every diff of a diff vector's body (without its 4-byte length)."""
    diffs = []
    pos = 0
    try:
        while pos < len(data):
            operation = data[pos]
            if operation not in _OPERATIONS:
                raise ValueError(f"unknown operation {operation}")
            length, pos = packed_int(data, pos + 1)
            raw_path = data[pos:pos + length]
            if len(raw_path) != length:
                raise ValueError("path past the end")
            pos += length
            path_text = raw_path.decode("utf-8")
            value = None
            if operation != REMOVE:
                length, pos = packed_int(data, pos)
                raw = data[pos:pos + length]
                if len(raw) != length:
                    raise ValueError("value past the end")
                pos += length
                value = mysql_json.decode(raw)
            diffs.append(JsonDiff(operation, parse_path(path_text), value, path_text))
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise DataError(f"a MySQL JSON diff could not be decoded ({e}): the binlog is corrupt") from None
    return diffs


# ---------------------------------------------------------------------------
# Applying diffs


def _index(leg: Any, size: int) -> int:
    """The array position a cell leg names ([last-n] counts from the end; may be out of bounds)."""
    if isinstance(leg, tuple):
        return size - 1 - int(leg[1])
    return int(leg)


def _seek(doc: Any, legs: Sequence[Any]) -> Any:
    """The value at `legs` (seek_exact_path), or _MISSING."""
    for leg in legs:
        if isinstance(doc, list) and not isinstance(leg, str):
            i = _index(leg, len(doc))
            if not 0 <= i < len(doc):
                return _MISSING
            doc = doc[i]
        elif isinstance(doc, dict) and isinstance(leg, str):
            if leg not in doc:
                return _MISSING
            doc = doc[leg]
        else:
            return _MISSING
    return doc


_MISSING = object()


def apply_diff(doc: Any, diff: JsonDiff) -> Any:
    """`doc` with one diff applied, as MySQL's apply_json_diffs does it; PartialJsonError where MySQL
    would reject it (the leader's and our view of the document disagree)."""
    if not diff.path:
        raise PartialJsonError(f"a JSON diff ({_OPERATIONS[diff.operation]} {diff.path_text!r}) targets the whole "
                               "document, which MySQL never logs as a diff: the binlog is corrupt")
    copy = _copy(doc)
    parent = _seek(copy, diff.path[:-1])
    last = diff.path[-1]
    rejected = PartialJsonError(
        f"the JSON diff {_OPERATIONS[diff.operation]} {diff.path_text!r} does not apply to the before-image's "
        "document: the row on the leader is not the one the binlog describes"
    )
    if diff.operation == REPLACE:
        if _seek(parent, [last]) is _MISSING:
            raise rejected
        if isinstance(parent, list):
            parent[_index(last, len(parent))] = diff.value
        else:
            parent[last] = diff.value
        return copy
    if diff.operation == INSERT:
        if isinstance(parent, dict) and isinstance(last, str):
            if last in parent:
                raise rejected
            parent[last] = diff.value
            if len(diff.path) == 1:
                return mysql_json.mysql_key_order(copy)
            _reorder(copy, diff.path[:-1])
            return copy
        if isinstance(parent, list) and not isinstance(last, str):
            # Json_array::insert_alias: positions past the end append.
            position = min(max(_index(last, len(parent)), 0), len(parent))
            parent.insert(position, diff.value)
            return copy
        raise rejected
    # REMOVE
    if isinstance(parent, dict) and isinstance(last, str) and last in parent:
        del parent[last]
        return copy
    if isinstance(parent, list) and not isinstance(last, str):
        i = _index(last, len(parent))
        if 0 <= i < len(parent):
            del parent[i]
            return copy
    raise rejected


def apply_diffs(doc: Any, diffs: Sequence[JsonDiff]) -> Any:
    """`doc` with every diff applied in order."""
    for diff in diffs:
        doc = apply_diff(doc, diff)
    return doc


def _copy(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _copy(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_copy(v) for v in doc]
    return doc


def _reorder(doc: Any, legs: Sequence[Any]) -> None:
    """Put the members of the (non-root) object at `legs` back in MySQL's order after an insert."""
    parent = _seek(doc, legs[:-1])
    last = legs[-1]
    key = _index(last, len(parent)) if isinstance(parent, list) else last
    parent[key] = mysql_json.mysql_key_order(parent[key])


# ---------------------------------------------------------------------------
# Row images


@dataclass(frozen=True)
class PartialColumn:
    """What reading one column of a partial row image needs."""

    name: str
    reader: Reader
    is_json: bool
    length_size: int  # bytes of the length in front of a JSON value (or diff vector)


def _bits(bitmap: bytes, count: int) -> list[bool]:
    return [bool(bitmap[i >> 3] >> (i & 7) & 1) for i in range(count)]


def _image(columns: Sequence[PartialColumn], present: list[bool], data: bytes, pos: int,
           partial: list[bool] | None = None) -> tuple[list[Any], list[Any], int]:
    """One row image: (tagged values or _MISSING per column, diff lists or None per column, offset after it)."""
    width = sum(present)
    nbytes = (width + 7) // 8
    nulls = int.from_bytes(data[pos:pos + nbytes], "little")
    pos += nbytes
    row: list[Any] = []
    diffs: list[Any] = []
    j = 0
    json_index = 0
    for i, column in enumerate(columns):
        is_partial = False
        if column.is_json:
            is_partial = partial is not None and partial[json_index]
            json_index += 1
        if not present[i]:
            row.append(_MISSING)
            diffs.append(None)
            continue
        if nulls >> j & 1:
            row.append(values.NULL)
            diffs.append(None)
        elif is_partial:
            size = int.from_bytes(data[pos:pos + column.length_size], "little")
            start = pos + column.length_size
            body = data[start:start + size]
            if len(body) != size:
                raise DataError("a partial JSON value runs past its row image: the binlog is corrupt")
            row.append(None)
            diffs.append(read_diffs(body))
            pos = start + size
        else:
            value, pos = column.reader(data, pos)
            row.append(value)
            diffs.append(None)
        j += 1
    return row, diffs, pos


@dataclass(frozen=True)
class PartialRow:
    """One row of a partial update as logged: a column that carries diffs is None in `after`."""

    before: list[Any]  # tagged values; MISSING where the before-image does not carry the column
    after: list[Any]
    diffs: list[list[JsonDiff] | None]  # per column: its diffs, or None


def read_rows(columns: Sequence[PartialColumn], before_present: bytes, after_present: bytes,
              data: bytes) -> list[PartialRow]:
    """Every row of a PARTIAL_UPDATE_ROWS_EVENT's body, as logged (no diff applied)."""
    n = len(columns)
    before_bits, after_bits = _bits(before_present, n), _bits(after_present, n)
    json_count = sum(c.is_json for c in columns)
    rows = []
    pos = 0
    try:
        while pos < len(data):
            before, _, pos = _image(columns, before_bits, data, pos)
            options, pos = packed_int(data, pos)
            partial = None
            if options & PARTIAL_JSON_UPDATES:
                nbytes = (json_count + 7) // 8
                partial = _bits(data[pos:pos + nbytes], json_count)
                pos += nbytes
            after, diffs, pos = _image(columns, after_bits, data, pos, partial)
            rows.append(PartialRow(before, after, diffs))
    except (IndexError, ValueError, struct.error) as e:
        raise DataError(f"partial row images could not be decoded ({e}): the binlog is corrupt") from None
    if pos != len(data):
        raise DataError("partial row images did not decode to their exact length: the binlog is corrupt")
    return rows


def partial_rows(table: str, columns: Sequence[PartialColumn], before_present: bytes, after_present: bytes,
                 data: bytes) -> list[tuple[list[Any], list[Any]]]:
    """Every (before, after) pair of a PARTIAL_UPDATE_ROWS_EVENT's body, after-images whole.

    Columns absent from an image (a MINIMAL/NOBLOB row image) come out as MISSING; a diff whose
    column is absent from (or NULL in) the before-image is refused with the fix."""
    pairs = []
    for row in read_rows(columns, before_present, after_present, data):
        after = list(row.after)
        for i, column_diffs in enumerate(row.diffs):
            if column_diffs is None:
                continue
            old = row.before[i]
            if old is _MISSING:
                raise DataError(
                    f"a partial JSON update of {table}.{columns[i].name} (binlog_row_value_options=PARTIAL_JSON) "
                    "was logged without the column's old value in the before-image (binlog_row_image is not FULL "
                    f"in the session that wrote it): the new value cannot be known; {FIX}"
                )
            if old == values.NULL:
                raise PartialJsonError(
                    f"a partial JSON update of {table}.{columns[i].name} applies to a NULL document: "
                    "the row on the leader is not the one the binlog describes"
                )
            after[i] = {"Json": apply_diffs(old["Json"], column_diffs)}
        pairs.append((row.before, after))
    return pairs


MISSING = _MISSING


class _Decoder(Protocol):
    @property
    def names(self) -> list[str]: ...

    @property
    def readers(self) -> tuple[Reader, ...]: ...

    @property
    def table(self) -> str: ...


def event_rows(event: Any, columns: Sequence[Any], decoder: _Decoder, data: bytes
               ) -> list[tuple[list[Any], list[Any]]]:
    """partial_rows() of a python-mysql-replication PartialUpdateRowsEvent: `columns` are its table map's
    columns, `decoder` the table's decode.TableDecoder, `data` its row images (library_patches.row_image_bytes)."""
    spec = [
        PartialColumn(column.name or f"column #{i + 1}", reader, column.type == FIELD_TYPE.JSON,
                      getattr(column, "length_size", 4) or 4)
        for i, (reader, column) in enumerate(zip(decoder.readers, columns))
    ]
    return partial_rows(decoder.table, spec, event.columns_present_bitmap, event.columns_present_bitmap2, data)


def pair_json(pair: tuple[list[Any], list[Any]]) -> bytes:
    """One (before, after) pair as the JSON of its entry in an event's rows (decode.TableDecoder.row_pairs_json)."""
    return _encode({"before_cols": pair[0], "after_cols": pair[1]})

__all__ = [
    "FIX",
    "INSERT",
    "MISSING",
    "REMOVE",
    "REPLACE",
    "JsonDiff",
    "PartialColumn",
    "PartialJsonError",
    "PartialRow",
    "apply_diff",
    "apply_diffs",
    "event_rows",
    "pair_json",
    "parse_path",
    "partial_rows",
    "read_diffs",
    "read_rows",
]
