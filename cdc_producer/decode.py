"""Row events -> column names, primary key and tagged values, read from the raw row images.

A table map's `TableDecoder` (built once per table map, from columns.py's `column_codec` per
column) reads every row image of an event: each row's JSON text by code rowcode.py generates
(the producer's fast path), or each row as tagged values through the readers (snapshot
windows, tests). MySQL 8's partial JSON updates are made whole rows by partial_json.py.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication.row_event import (
    PartialUpdateRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
)

from cdc_producer import partial_json
from cdc_producer.columns import column_codec
from cdc_producer.library_patches import ctl_connection, row_image_bytes
from cdc_producer.old_temporals import OLD_TEMPORAL_TYPES, PRECISIONS
from cdc_producer.rowcode import RowsFn, Spec, compile_rows_json
from cdc_producer.unpack import Reader
from cdc_stream import values
from cdc_stream.errors import DataError


def primary_key(event: RowsEvent) -> list[str]:
    """Primary-key column names from the table map's metadata ([] when there is none)."""
    pk = event.primary_key
    if not pk:
        return []
    return [pk] if isinstance(pk, str) else list(pk)


@dataclass(frozen=True)
class TableDecoder:
    """Column names and per-column readers of one table map.

    `specs` (one per column, None where the column has no inline form) let
    rowcode.py generate the table's row-reading code; without them the
    generated code calls the readers."""

    names: list[str]
    readers: tuple[Reader, ...]
    table: str = "?"
    specs: tuple[Spec | None, ...] | None = None
    _compiled: list[RowsFn] = field(default_factory=list, repr=False, compare=False)

    def image(self, data: bytes, pos: int) -> tuple[list[Any], int]:
        """One row image at `pos`: (tagged values, offset after it)."""
        readers = self.readers
        nbytes = (len(readers) + 7) // 8
        nulls = int.from_bytes(data[pos:pos + nbytes], "little")
        pos += nbytes
        row: list[Any] = []
        append = row.append
        null = values.NULL
        for i, read in enumerate(readers):
            if nulls >> i & 1:
                append(null)
            else:
                value, pos = read(data, pos)
                append(value)
        return row, pos

    def _images(self, data: bytes, per_row: int) -> list[list[Any]]:
        """Every image of `data`, through the readers (the rare path: snapshot windows, tests)."""
        out: list[list[Any]] = []
        pos, end = 0, len(data)
        try:
            while pos < end:
                row, pos = self.image(data, pos)
                out.append(row)
        except (IndexError, struct.error):
            pos = end + 1  # a reader ran past the end
        self._check_length(pos, end)
        if len(out) % per_row:
            self._check_length(end + 1, end)
        return out

    def _compiled_json(self, which: int) -> RowsFn:
        # Generated on first use: a table map whose rows are all filtered out costs nothing.
        if not self._compiled:
            specs: list[Spec | None] = list(self.specs) if self.specs is not None else [None] * len(self.readers)
            self._compiled.extend(compile_rows_json(specs, self.readers))
        return self._compiled[which]

    def _run_json(self, which: int, data: bytes) -> list[bytes]:
        end = len(data)
        try:
            out, pos = self._compiled_json(which)(data, 0, end)
        except (IndexError, struct.error):
            out, pos = [], end + 1  # a reader ran past the end
        self._check_length(pos, end)
        return out

    def rows(self, data: bytes) -> list[list[Any]]:
        """Every row image of a write/delete event's body, as tagged values."""
        return self._images(data, 1)

    def row_pairs(self, data: bytes) -> list[tuple[list[Any], list[Any]]]:
        """Every (before, after) pair of an update event's body, as tagged values."""
        images = self._images(data, 2)
        return [(images[i], images[i + 1]) for i in range(0, len(images), 2)]

    def rows_json(self, data: bytes) -> list[bytes]:
        """rows(), each row already as the JSON of its entry in an event's rows ({"cols": [...]}):
        code generated per table map (rowcode.py), the producer's fast path."""
        return self._run_json(0, data)

    def row_pairs_json(self, data: bytes) -> list[bytes]:
        """row_pairs(), each pair as JSON ({"before_cols": [...], "after_cols": [...]})."""
        return self._run_json(1, data)

    def _check_length(self, pos: int, end: int) -> None:
        # Readers that disagree with the table map about a column's width end
        # anywhere but exactly at the end: better to stop than to publish garbage.
        if pos != end:
            raise DataError(
                f"the row images of {self.table} did not decode to their exact length ({pos} of {end} bytes): "
                "a column format the binlog does not describe (MariaDB's pre-10.1 TIME/DATETIME/TIMESTAMP "
                "with fractional seconds, whose table was changed after these rows?); rebuild the table on the "
                "leader with ALTER TABLE ... FORCE"
            )


def build_table_decoder(table: Any, leader: Any = None) -> TableDecoder:
    """Compile the readers of a table map (a pymysqlreplication Table). `leader`: a connection that reads the
    precision of old-format temporal columns where the binlog has not said it (old_temporals.py)."""
    names = [c.name if c.name is not None else f"UNKNOWN_COL{i}" for i, c in enumerate(table.columns)]
    name = f"{table.schema}.{table.table}"
    fractions: list[int | None] = [None] * len(table.columns)
    if any(c.type in OLD_TEMPORAL_TYPES for c in table.columns):
        fractions = PRECISIONS.of(table, leader)
    codecs = [column_codec(c, name, f) for c, f in zip(table.columns, fractions)]
    return TableDecoder(names, tuple(c.reader for c in codecs), name, tuple(c.spec for c in codecs))


_decoders: dict[int, tuple[Any, TableDecoder]] = {}


def table_decoder(table: Any, leader: Any = None) -> TableDecoder:
    """The decoder of a table map, compiled once per table map object (`leader`: see build_table_decoder)."""
    cached = _decoders.get(table.table_id)
    if cached is not None and cached[0] is table:
        return cached[1]
    if len(_decoders) > 10_000:  # table ids grow with every ALTER: forget old ones
        _decoders.clear()
    decoder = build_table_decoder(table, leader)
    _decoders[table.table_id] = (table, decoder)
    return decoder


def _require_full_image(event: RowsEvent, width: int) -> None:
    full = (1 << width) - 1
    bitmaps = [event.columns_present_bitmap]
    if isinstance(event, UpdateRowsEvent):
        bitmaps.append(event.columns_present_bitmap2)
    if event.number_of_columns != width or any(int.from_bytes(b, "little") & full != full for b in bitmaps):
        raise DataError(
            f"a row event of {event.schema}.{event.table} does not carry every column "
            "(binlog_row_image is not FULL in the session that wrote it): the change cannot be replayed; "
            "SET GLOBAL binlog_row_image='FULL' on the leader and make sure no session overrides it"
        )


def _require_column_names(table: Any) -> None:
    if any(c.name is None for c in table.columns):
        raise DataError(
            f"the table map of {table.schema}.{table.table} carries no column names (binlog_row_metadata was not FULL "
            "when it was logged): its rows cannot be replayed by name; SET GLOBAL binlog_row_metadata='FULL' on the "
            "leader (changes logged before that cannot be replayed: copy the table again with --snapshot)"
        )


def encode_rows(event: RowsEvent, as_json: bool = False) -> tuple[list[str], list[Any]]:
    """(column names, rows as lists of tagged values) of a rows event.

    Update rows come as (before, after) pairs. as_json: each row as the bytes of its
    JSON object in the event instead (ChangeEvent.rows_json)."""
    table = event.table_map[event.table_id]
    decoder = table_decoder(table, ctl_connection(event))
    if isinstance(event, PartialUpdateRowsEvent):  # binlog_row_value_options=PARTIAL_JSON: whole rows rebuilt
        pairs = partial_json.event_rows(event, table.columns, decoder, row_image_bytes(event))
        _require_full_image(event, len(decoder.readers))
        _require_column_names(table)
        return decoder.names, [partial_json.pair_json(p) for p in pairs] if as_json else pairs
    _require_full_image(event, len(decoder.readers))
    _require_column_names(table)
    data = row_image_bytes(event)
    if isinstance(event, UpdateRowsEvent):
        return decoder.names, decoder.row_pairs_json(data) if as_json else decoder.row_pairs(data)
    return decoder.names, decoder.rows_json(data) if as_json else decoder.rows(data)



__all__ = ["TableDecoder", "build_table_decoder", "encode_rows", "primary_key", "table_decoder"]
