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

With option images=lake (the lake job, spark/lake.py), each image is instead one binary value, the JSON
array of the event's tagged values (in its column order), and three columns follow:

    cols        string   the event's column names as a JSON array (null on a row without an image)
    _bb, _ba    int      the before/after image's bucket (cdc_spark/lakefiles.py: by the primary key, or by
                         every column of the event without one); null without that image
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from cdc_spark.convert import ImageConverter, SchemaMismatch, generic_images
from cdc_spark.lakefiles import columns_text, key_bucket, raw_image_bucket, source_key
from cdc_spark.reading import Located
from cdc_stream.classify import statement_of
from cdc_stream.errors import MalformedEvent
from cdc_stream.positions import SnapshotChunk

GENERIC_IMAGE = pa.map_(pa.string(), pa.string())
LAKE_IMAGE = pa.binary()
LAKE_COLUMNS = (("cols", pa.string()), ("_bb", pa.int32()), ("_ba", pa.int32()))
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


def lake_schema() -> pa.Schema:
    """The source's rows with option images=lake."""
    return pa.schema(list(output_schema(LAKE_IMAGE)) + [pa.field(n, t) for n, t in LAKE_COLUMNS])


class RowBuilder:
    """Accumulates output rows and hands them out as record batches."""

    def __init__(self, tables: tuple[tuple[str, str], ...] | None, image: ImageConverter | None = None,
                 lake: bool = False):
        self.tables = tables  # None: every table
        self.image = image
        self.lake = lake
        self.schema = lake_schema() if lake else output_schema(image.struct if image else GENERIC_IMAGE)
        self._meta: list[list[Any]] = [[] for _ in range(12)]
        self._before: list[Any] = []
        self._after: list[Any] = []
        self._ddl: list[str | None] = []
        self._copy: list[dict[str, Any] | None] = []
        self._row_in_record: tuple[int, int] = (-1, 0)
        self._cols: list[str | None] = []  # images=lake: cols, _bb, _ba
        self._bb: list[int | None] = []
        self._ba: list[int | None] = []

    def __len__(self) -> int:
        return len(self._ddl)

    def _indexes(self, offset: int, n: int) -> range:
        """The row indexes within log record `offset` of its next `n` rows."""
        last, done = self._row_in_record
        done = done if last == offset else 0
        self._row_in_record = (offset, done + n)
        return range(done, done + n)

    def selects(self, database: str | None, table: str | None) -> bool:
        """Whether rows of database.table are wanted."""
        return self.tables is None or (database or "", table or "") in self.tables

    def _selects_db(self, database: str | None) -> bool:
        return self.tables is None or any(d == database for d, _ in self.tables)

    def _images_of(self, columns: Sequence[str], images: list[Any]) -> list[Any]:
        if self.lake:
            return images
        if self.image is None:
            return [None if image is None else (columns, image) for image in images]
        return [None if image is None else self.image.values(columns, image) for image in images]

    def _lake(self, columns: Sequence[str], pk: Sequence[str], befores: list[Any], afters: list[Any]) -> None:
        """images=lake: the rows' cols, _bb and _ba."""
        n = len(befores)
        if all(b is None for b in befores) and all(a is None for a in afters):  # DDL, a chunk's range
            self._cols.extend([None] * n)
            self._bb.extend([None] * n)
            self._ba.extend([None] * n)
            return
        where = {c: i for i, c in enumerate(columns)}
        index = [where.get(k) for k in source_key(pk, columns)]
        width = len(columns)
        try:
            bb = [None if b is None else raw_image_bucket(b, index, width) for b in befores]
            ba = [None if a is None else raw_image_bucket(a, index, width) for a in afters]
        except ValueError as e:  # (msgspec's DecodeError is one)
            raise MalformedEvent(f"rows: {e}") from None
        self._cols.extend([columns_text(columns)] * n)
        self._bb.extend(bb)
        self._ba.extend(ba)

    def _add(self, loc: Located, common: tuple[Any, ...], columns: Sequence[str], befores: list[Any],
             afters: list[Any], ddl: str | None = None, copy: dict[str, Any] | None = None) -> None:
        """The output rows of one event (or of its chunk range or statement: one row), an image of each in
        `befores` and `afters` (None: none); `common` holds the event's fields (sequence ... pk), the same on
        each of its rows."""
        n = len(befores)
        meta = self._meta
        meta[0].extend([loc.offset] * n)
        meta[1].extend(self._indexes(loc.offset, n))
        for column, v in zip(meta[2:], common):
            column.extend([v] * n)
        self._before.extend(self._images_of(columns, befores))
        self._after.extend(self._images_of(columns, afters))
        self._ddl.extend([ddl] * n)
        self._copy.extend([copy] * n)
        if self.lake:
            self._lake(columns, common[-1], befores, afters)

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
            self._add(loc, self._common(loc, db, table, "ddl", []), [], [None], [None], ev.query)
            return
        db, table = ev.schema, ev.table
        if not self.selects(db, table):
            return
        if self.lake and not ev.images_raw:
            raise ValueError("images=lake reads events with raw_images (decode_event)")
        columns = ev.columns or []
        rows = ev.rows
        chunk = ev.snapshot
        if isinstance(chunk, SnapshotChunk):  # a live copy's chunk: its range, then its rows
            marker = {"id": chunk.copy, "after": chunk.after, "upto": chunk.upto, "first": chunk.first,
                      "done": chunk.done, "recopy": chunk.recopy, "append": chunk.append, "where": chunk.where}
            pk = list(ev.pk or [])
            self._add(loc, self._common(loc, db, table, "copy_range", pk), columns, [None], [None], None, marker)
            self._add(loc, self._common(loc, db, table, "copy", pk), columns, [None] * len(rows), list(rows), None,
                      marker)
            return
        common = self._common(loc, db, table, OPS[ev.operation], list(ev.pk or []))
        if ev.operation == "Update":
            self._add(loc, common, columns, [b for b, _ in rows], [a for _, a in rows])
        elif ev.operation == "Add":
            self._add(loc, common, columns, [None] * len(rows), list(rows))
        else:
            self._add(loc, common, columns, list(rows), [None] * len(rows))

    def take(self) -> pa.RecordBatch:
        """The rows so far as one record batch (the builder starts empty again)."""
        arrays = [pa.array(col, type=self.schema.field(i).type) for i, col in enumerate(self._meta)]
        arrays += [self._images(self._before), self._images(self._after), pa.array(self._ddl, pa.string()),
                   pa.array(self._copy, COPY)]
        if self.lake:
            arrays += [pa.array(self._cols, pa.string()), pa.array(self._bb, pa.int32()),
                       pa.array(self._ba, pa.int32())]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        at = self._row_in_record  # a log record's next rows may follow (per-table topics: a transaction's events)
        self.__init__(self.tables, self.image, self.lake)  # type: ignore[misc]
        self._row_in_record = at
        return batch

    def _images(self, images: list[Any]) -> pa.Array:
        if self.lake:  # (the topic's bytes of each image: the events were read with raw_images)
            return pa.array([None if image is None else bytes(image) for image in images], LAKE_IMAGE)
        if self.image is None:
            return generic_images(images)
        return self.image.build(images)


def lake_rows(rows: pa.Table) -> pa.Table:
    """The source's generic rows in the lake's form (option images=lake: what RowBuilder(lake=True) gives for the
    same events); LocalEngine's input, the lake's tests and small batches without Spark."""
    pks = rows.column("pk").to_pylist()
    images = {name: rows.column(name).to_pylist() for name in ("before", "after")}
    texts: dict[str, list[bytes | None]] = {"before": [], "after": []}
    cols: list[str | None] = []
    buckets: dict[str, list[int | None]] = {"before": [], "after": []}
    for i, pk in enumerate(pks):
        pairs = images["after"][i] if images["after"][i] is not None else images["before"][i]
        columns = [k for k, _ in pairs] if pairs is not None else None
        cols.append(columns_text(columns) if columns is not None else None)
        for name in ("before", "after"):
            image = images[name][i]
            if image is None or columns is None:
                texts[name].append(None)
                buckets[name].append(None)
                continue
            values = dict(image)
            texts[name].append(("[" + ",".join(values[c] for c in columns) + "]").encode())
            buckets[name].append(key_bucket(values.get(k) or "" for k in source_key(pk or [], columns)))
    schema = lake_schema()
    kept = [f.name for f in output_schema() if f.name not in texts]
    table = pa.Table.from_arrays([rows.column(name) for name in kept], names=kept)
    table = table.append_column("before", pa.array(texts["before"], LAKE_IMAGE))
    table = table.append_column("after", pa.array(texts["after"], LAKE_IMAGE))
    table = table.append_column("cols", pa.array(cols, pa.string()))
    table = table.append_column("_bb", pa.array(buckets["before"], pa.int32()))
    table = table.append_column("_ba", pa.array(buckets["after"], pa.int32()))
    return table.select(schema.names).cast(schema)


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
            except MalformedEvent as e:
                raise MalformedEvent(f"offset {loc.offset}: {e}") from None
            if len(builder) >= rows_per_batch:
                yield builder.take()
    if len(builder):
        yield builder.take()
