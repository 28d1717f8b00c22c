"""Change events -> the `mysql_cdc` source's output rows, as Arrow record batches.

One row per changed row (and one per DDL statement):

    offset      long     the log record (single topic: the event's offset; per-table: the transaction record's)
    row_index   int      the row's index within that log record (reads by table topic: within the topic's share)
    sequence    long     the event's sequence number
    ts          timestamp when the leader wrote it (second resolution)
    database, table  string  (DDL: the table the statement names, if one)
    op          string   insert | update | delete | ddl
    txn_id, txn_index, txn_last  the source transaction (GTID or file:pos), the event's index in it, last event?
    position    string   binlog file:offset where the event ends on the leader
    pk          array<string> the primary-key columns ([] without one)
    before, after        the row images: a typed struct (one table, schema known) or the generic
                         map<string,string> of column -> tagged value as JSON text (docs/events.md)
    ddl         string   the statement (op = ddl)
    copy        struct   a live copy's chunk (docs/events.md, "Live copies"): {id, after, upto, first, done,
                         recopy, append, where}; on op = copy_range (one row per chunk, before it: the table's
                         rows with a key in (after, upto] are replaced by the chunk's rows, unless append; with
                         `where` (leader SQL), only the range's rows matching it or having a key of the chunk's
                         rows) and
                         op = copy (the chunk's rows, as after images); null on every other row
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from cdc_spark.convert import ImageConverter, SchemaMismatch, generic_images
from cdc_spark.reading import Located
from cdc_stream.classify import statement_of
from cdc_stream.positions import SnapshotChunk

GENERIC_IMAGE = pa.map_(pa.string(), pa.string())
OPS = {"Add": "insert", "Update": "update", "Delete": "delete", "Query": "ddl"}
COPY = pa.struct([("id", pa.string()), ("after", pa.list_(pa.int64())), ("upto", pa.list_(pa.int64())),
                  ("first", pa.bool_()), ("done", pa.bool_()), ("recopy", pa.bool_()), ("append", pa.bool_()),
                  ("where", pa.string())])
ROWS_PER_BATCH = 4096
_UTC = dt.UTC


def output_schema(image: pa.DataType = GENERIC_IMAGE) -> pa.Schema:
    """The source's rows; `image` is the before/after type."""
    return pa.schema([
        ("offset", pa.int64()), ("row_index", pa.int32()), ("sequence", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")), ("database", pa.string()), ("table", pa.string()),
        ("op", pa.string()), ("txn_id", pa.string()), ("txn_index", pa.int32()), ("txn_last", pa.bool_()),
        ("position", pa.string()), ("pk", pa.list_(pa.string())), ("before", image), ("after", image),
        ("ddl", pa.string()), ("copy", COPY),
    ])


class RowBuilder:
    """Accumulates output rows and hands them out as record batches."""

    def __init__(self, tables: tuple[tuple[str, str], ...] | None, image: ImageConverter | None = None):
        self.tables = tables  # None: every table
        self.image = image
        self.schema = output_schema(image.struct if image else GENERIC_IMAGE)
        self._meta: list[list[Any]] = [[] for _ in range(12)]
        self._before: list[Any] = []
        self._after: list[Any] = []
        self._ddl: list[str | None] = []
        self._copy: list[dict[str, Any] | None] = []
        self._row_in_record: tuple[int, int] = (-1, 0)

    def __len__(self) -> int:
        return len(self._ddl)

    def _index(self, offset: int) -> int:
        last, n = self._row_in_record
        n = n if last == offset else 0
        self._row_in_record = (offset, n + 1)
        return n

    def selects(self, database: str | None, table: str | None) -> bool:
        """Whether rows of database.table are wanted."""
        return self.tables is None or (database or "", table or "") in self.tables

    def _selects_db(self, database: str | None) -> bool:
        return self.tables is None or any(d == database for d, _ in self.tables)

    def _image(self, columns: Sequence[str], image: Any) -> Any:
        if image is None:
            return None
        return (columns, image) if self.image is None else self.image.values(columns, image)

    def _add(self, loc: Located, common: tuple[Any, ...], columns: Sequence[str], before: Any, after: Any,
             ddl: str | None, copy: dict[str, Any] | None = None) -> None:
        """One output row; `common` holds the event's fields (sequence ... pk), computed once per event."""
        meta = self._meta
        meta[0].append(loc.offset)
        meta[1].append(self._index(loc.offset))
        for column, v in zip(meta[2:], common):
            column.append(v)
        self._before.append(self._image(columns, before))
        self._after.append(self._image(columns, after))
        self._ddl.append(ddl)
        self._copy.append(copy)

    @staticmethod
    def _common(loc: Located, database: str | None, table: str | None, op: str, pk: list[str]) -> tuple[Any, ...]:
        ev = loc.event
        bn, txn = ev.bn_file, ev.txn
        return (ev.sequence, dt.datetime.fromtimestamp(ev.ts / 1000, _UTC) if ev.ts is not None else None, database,
                table, op, txn.id if txn else None, txn.index if txn else None, txn.last if txn else None,
                bn.text() if bn is not None and bn.offset is not None else None, pk)

    def add_event(self, loc: Located) -> None:
        """The rows of one event (none when its table is not selected)."""
        ev = loc.event
        if ev.operation == "Query":
            targets = statement_of(ev).targets
            named = [(d, t) for d, t in targets if t is not None]
            if not any(self.selects(d, t) for d, t in named) and not (
                    not named and any(self._selects_db(d) for d, _ in targets)):
                return
            db, table = named[0] if len(named) == 1 else (ev.database or (targets[0][0] if targets else None), None)
            self._add(loc, self._common(loc, db, table, "ddl", []), [], None, None, ev.query)
            return
        db, table = ev.schema, ev.table
        if not self.selects(db, table):
            return
        columns = ev.columns or []
        chunk = ev.snapshot
        if isinstance(chunk, SnapshotChunk):  # a live copy's chunk: its range, then its rows
            marker = {"id": chunk.copy, "after": chunk.after, "upto": chunk.upto, "first": chunk.first,
                      "done": chunk.done, "recopy": chunk.recopy, "append": chunk.append, "where": chunk.where}
            pk = list(ev.pk or [])
            self._add(loc, self._common(loc, db, table, "copy_range", pk), columns, None, None, None, marker)
            common = self._common(loc, db, table, "copy", pk)
            for row in ev.rows:
                self._add(loc, common, columns, None, row, None, marker)
            return
        common = self._common(loc, db, table, OPS[ev.operation], list(ev.pk or []))
        if ev.operation == "Update":
            for before, after in ev.rows:
                self._add(loc, common, columns, before, after, None)
        elif ev.operation == "Add":
            for row in ev.rows:
                self._add(loc, common, columns, None, row, None)
        else:
            for row in ev.rows:
                self._add(loc, common, columns, row, None, None)

    def take(self) -> pa.RecordBatch:
        """The rows so far as one record batch (the builder starts empty again)."""
        arrays = [pa.array(col, type=self.schema.field(i).type) for i, col in enumerate(self._meta)]
        arrays += [self._images(self._before), self._images(self._after), pa.array(self._ddl, pa.string()),
                   pa.array(self._copy, COPY)]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self.__init__(self.tables, self.image)  # type: ignore[misc]
        return batch

    def _images(self, images: list[Any]) -> pa.Array:
        if self.image is None:
            return generic_images(images)
        return self.image.build(images)


def record_batches(transactions: Iterable[list[Located]], builder: RowBuilder,
                   rows_per_batch: int = ROWS_PER_BATCH) -> Iterator[pa.RecordBatch]:
    """The output rows of these transactions, in log order, in batches of about rows_per_batch."""
    for txn in transactions:
        for loc in txn:
            try:
                builder.add_event(loc)
            except SchemaMismatch as e:
                raise SchemaMismatch(f"offset {loc.offset}: {e}; restart the query to read the table's schema again, "
                                     "or read with typed=false") from None
            if len(builder) >= rows_per_batch:
                yield builder.take()
    if len(builder):
        yield builder.take()
