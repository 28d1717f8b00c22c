"""The lake's data files, written where the rows are (Spark executor tasks; in-process for tests).

A state table is partitioned by `_cdc_bucket`: crc32 of the row's key text (the primary-key
columns' tagged values as the stream carries them, or all columns the table was created with
when it has no key) modulo BUCKETS. Every change of a key in a micro-batch meets in the one
task of its (table, bucket) group, which:

- reads the key columns of the bucket's current files (the version the driver pinned),
- applies the group's changes in source order, (offset, row_index): a change applies only over
  a row written by an older one (`_cdc_offset`, `_cdc_row_index`), so a replay never goes back;
  a live copy's chunk (`copy_range`, sent to every bucket of its table) first removes the rows of its
  key range, as the consumer does (docs/events.md, "Live copies"), then its `copy` rows are upserts,
- rewrites only the files holding a row that changed (copy-on-write, like delta-spark's MERGE),
  adds one file of new rows, and writes the group's change-log rows,

and returns the file actions (`Written`) for the driver to commit. Nothing here commits.
"""

from __future__ import annotations

import datetime as dt
import functools
import gc
import json
import os
import struct
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from cdc_spark.convert import ImageConverter
from cdc_spark.schema import RAW_COLUMN, TableSchema

BUCKET = "_cdc_bucket"
BUCKETS = 8  # state partitions per table: a batch's groups, so its parallelism per table
ORDER = ("_cdc_offset", "_cdc_row_index")
SOURCE_COLUMNS = (("_cdc_offset", pa.int64()), ("_cdc_row_index", pa.int32()), ("_cdc_sequence", pa.int64()),
                  ("_cdc_position", pa.string()))
KEY_SEPARATOR = "\x01"
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def state_schema(schema: TableSchema, bucket: bool = True) -> pa.Schema:
    """A state table's columns: the source's (typed), `_cdc_raw`, where each row comes from, its bucket."""
    fields = list(schema.arrow_schema(lake=True)) + [pa.field(n, t) for n, t in SOURCE_COLUMNS]
    return pa.schema(fields + ([pa.field(BUCKET, pa.int32())] if bucket else []))


def changelog_schema(table: TableSchema) -> pa.Schema:
    """A change-log table's columns: one row per change, both images typed."""
    image = table.arrow_struct(lake=True)
    return pa.schema([
        ("offset", pa.int64()), ("row_index", pa.int32()), ("sequence", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")), ("op", pa.string()), ("txn_id", pa.string()),
        ("txn_index", pa.int32()), ("txn_last", pa.bool_()), ("position", pa.string()),
        ("pk", pa.list_(pa.string())), ("before", image), ("after", image), ("ddl", pa.string()),
    ])


def key_bucket(texts: Iterable[str], buckets: int = BUCKETS) -> int:
    """The bucket of a row whose key columns' tagged values have these JSON texts ("" for a column it lacks)."""
    return zlib.crc32(KEY_SEPARATOR.join(texts).encode()) % buckets


def bucket_of(texts: dict[str, str] | None, key: Sequence[str], buckets: int = BUCKETS) -> int | None:
    """The bucket of an image (column -> tagged value's JSON text)."""
    if texts is None:
        return None
    return key_bucket((texts.get(k) or "" for k in key), buckets)


_values = msgspec.json.Decoder(list[msgspec.Raw]).decode


def raw_image_bucket(image: msgspec.Raw | bytes, index: Sequence[int | None], width: int,
                     buckets: int = BUCKETS) -> int:
    """The bucket of an image given as its JSON array (the topic's bytes), the key columns at `index` (None: a
    column the image lacks): bucket_of of the same image. Only its key values are decoded, and encoded again (the
    text bucket_of takes, whatever spacing the topic's writer used). ValueError when it does not hold `width`
    values."""
    values = _values(image)
    if len(values) != width:
        raise ValueError(f"an image of {len(values)} values for {width} columns")
    return key_bucket((_encode(_decode(values[i])).decode() if i is not None else "" for i in index), buckets)


def source_key(pk: Sequence[str], columns: Sequence[str]) -> Sequence[str]:
    """The key the source buckets an image by (cdc_spark/rows.py, the lake's rows): the primary key, or every
    column of the event without one. The lake's key is the same for a table with a key; for one without, the
    columns it was created with: a row naming other columns (after ADD COLUMN) is bucketed again (`rebucket`)."""
    return pk if pk else columns


def rebucket(rows: pa.Table, keys: dict[tuple[str, str], tuple[str, ...]]) -> pa.Table:
    """Lake rows with `_bb`/`_ba` computed again by the key in `keys` of their table (the tables without a
    primary key) where their column list is not that key; every other row as it was."""
    names = list(zip(rows.column("database").to_pylist(), rows.column("table").to_pylist()))
    columns = rows.column("cols").to_pylist()
    again = [i for i, (table, cols) in enumerate(zip(names, columns))
             if table in keys and cols is not None and _columns(cols) != keys[table]]
    if not again:
        return rows
    for name, image in (("_bb", "before"), ("_ba", "after")):
        buckets, images = rows.column(name).to_pylist(), rows.column(image)
        for i in again:
            text = images[i].as_py()
            if text is not None:
                where = {c: j for j, c in enumerate(_columns(columns[i]))}
                buckets[i] = raw_image_bucket(text, [where.get(k) for k in keys[names[i]]], len(where))
        rows = rows.set_column(rows.schema.get_field_index(name), name, pa.array(buckets, pa.int32()))
    return rows


def columns_text(columns: Sequence[str]) -> str:
    """A lake row's `cols`: the event's column names as one JSON array."""
    return _encode(list(columns)).decode()


@functools.lru_cache(maxsize=4096)
def _columns(text: str) -> tuple[str, ...]:
    """A lake row's column list (its `cols`: the JSON array of the event's column names)."""
    return tuple(_decode(text))


@dataclass(frozen=True)
class Plan:
    """What the tasks of one table need: shipped to the executors with the batch's function."""

    database: str
    table: str
    schema: TableSchema
    key: tuple[str, ...]  # the bucket's key columns
    keyed: bool  # key is the primary key (else: a multiset, key = the columns at creation)
    state_root: str
    changelog_root: str
    files: dict[int, tuple[str, ...]] = field(default_factory=dict)  # bucket -> state files (relative paths)
    write_state: bool = True
    write_log: bool = True

    @cached_property
    def odd_key(self) -> bool:
        """Whether a key column's values need care to be compared (SET lists, FLOAT singles)."""
        types = [c.arrow(True) for c in self.schema.columns if c.name in self.key]
        return any(pa.types.is_list(t) or pa.types.is_floating(t) for t in types)


@dataclass(frozen=True)
class Written:
    """A file a task wrote (or an error it met); the driver turns it into Delta actions."""

    kind: str  # "state" | "changelog" | "error"
    database: str
    table: str
    bucket: int | None
    path: str
    size: int
    records: int
    removed: tuple[str, ...] = ()
    writer: str = ""
    error: str = ""

    def row(self) -> dict[str, Any]:
        return {**self.__dict__, "removed": list(self.removed)}


WRITTEN = pa.schema([("kind", pa.string()), ("database", pa.string()), ("table", pa.string()),
                     ("bucket", pa.int32()), ("path", pa.string()), ("size", pa.int64()), ("records", pa.int64()),
                     ("removed", pa.list_(pa.string())), ("writer", pa.string()), ("error", pa.string())])


def writer_id() -> str:
    """Which executor this process serves (its id from Spark's environment; else host:pid)."""
    url = os.environ.get("SPARK_LOG_URL_STDERR", "")
    if "executorId=" in url:
        return "executor " + url.split("executorId=")[1].split("&")[0]
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


class GroupError(Exception):
    """A change of the group cannot be written (the message names its offset)."""


def typed_images(conv: ImageConverter, images: pa.ChunkedArray | pa.Array, columns: list[str | None],
                 offsets: list[int], name: str) -> list[tuple[list[Any], str | None] | None]:
    """Lake images (each the JSON array of its event's tagged values, `columns` the rows' `cols`) -> typed
    (values, _cdc_raw) per row (None: no image); the images of each column list parsed and typed at once
    (ImageConverter.rows)."""
    texts = images.to_pylist()
    by: dict[str | None, list[int]] = {}
    for i, (text, cols) in enumerate(zip(texts, columns)):
        if text is not None:
            by.setdefault(cols, []).append(i)
    out: list[tuple[list[Any], str | None] | None] = [None] * len(texts)
    for cols, rows in by.items():
        names = _columns(cols) if cols is not None else ()
        group = [texts[i] for i in rows]
        try:
            values, raws = conv.rows(names, group)
        except ValueError as e:  # which image: one by one, the first that fails names its offset
            for i in rows:
                try:
                    conv.values(names, _decode(texts[i]))
                except ValueError as one:
                    raise GroupError(f"offset {offsets[i]}: {name}: {one}") from None
            raise GroupError(f"{name}: {e}") from None
        # rows transposed in C (zip, map), not value by value
        typed = list(zip(map(list, zip(*values)), raws)) if values else [([], r) for r in raws]
        if len(rows) == len(texts):
            return typed  # type: ignore[return-value]
        for i, t in zip(rows, typed):
            out[i] = t
    return out


def _hashable(row: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def _aligned(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A file's rows in `schema` (a column added since it was written is NULL)."""
    n = table.num_rows
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) if f.name in table.column_names
                                 else pa.nulls(n, f.type) for f in schema], schema=schema)


def _write(root: str, relative: str, table: pa.Table) -> tuple[str, int]:
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, compression="snappy")
    return relative, os.path.getsize(path)


def _file_name(prefix: str) -> str:
    return f"{prefix}part-{uuid.uuid4()}-{writer_id().replace(' ', '').replace(':', '_')}.snappy.parquet"


def apply_group(plan: Plan, bucket: int, rows: pa.Table) -> list[Written]:
    """One (table, bucket) group of a batch segment: its state file actions and its change-log file."""
    writer = writer_id()
    collecting = gc.isenabled()
    gc.disable()  # the group's rows are long-lived lists and tuples: the collector's passes found nothing to free
    try:
        return _apply_group(plan, bucket, rows, writer)
    except GroupError as e:
        return [Written("error", plan.database, plan.table, bucket, "", 0, 0, writer=writer, error=str(e))]
    finally:
        if collecting:
            gc.enable()


def _apply_group(plan: Plan, bucket: int, rows: pa.Table, writer: str) -> list[Written]:
    rows = rows.sort_by([("offset", "ascending"), ("row_index", "ascending")])
    name = f"{plan.database}.{plan.table}"
    conv = ImageConverter(plan.schema, lake=True)
    offsets = rows.column("offset").to_pylist()
    before_b, after_b = rows.column("_bb").to_pylist(), rows.column("_ba").to_pylist()
    n = rows.num_rows
    logged = [(after_b[i] if after_b[i] is not None else before_b[i]) == bucket for i in range(n)]
    columns = rows.column("cols").to_pylist()
    before = typed_images(conv, rows.column("before"), columns, offsets, name)
    after = typed_images(conv, rows.column("after"), columns, offsets, name)
    after_struct = conv.build(after)  # the state's new rows are taken from it, the change log's images too
    out: list[Written] = []
    if plan.write_state:
        out += _state(plan, bucket, rows, before, after, after_struct, writer)
    if plan.write_log and any(logged):
        mask = pa.array(logged)
        out.append(_changelog(plan, rows.filter(mask), conv.build(before).filter(mask), after_struct.filter(mask),
                              writer))
    return out


@dataclass(frozen=True)
class CopyRange:
    """The key range a live copy's chunk replaces: (after, upto], a None bound open (both None: every row)."""

    after: tuple[Any, ...] | None
    upto: tuple[Any, ...] | None

    @classmethod
    def of(cls, marker: dict[str, Any] | None) -> CopyRange | None:
        """The range a `copy_range` row's marker removes; None when it removes nothing the lake can tell:
        an `append` chunk (insert only), or a chunk of a copy with a condition (`where`: leader SQL the lake
        cannot evaluate; its rows are upserts, and every change of such a table streams meanwhile)."""
        if marker is None or marker.get("append") or marker.get("where"):
            return None
        after, upto = marker.get("after"), marker.get("upto")
        return cls(tuple(after) if after is not None else None, tuple(upto) if upto is not None else None)

    def holds(self, key: tuple[Any, ...]) -> bool:
        """Whether a row with primary key `key` (the columns in the stream's pk order) lies in the range."""
        return (self.after is None or key > self.after) and (self.upto is None or key <= self.upto)


def _ranges(rows: pa.Table) -> list[CopyRange | None]:
    """Per row: the range a `copy_range` row removes (None for every other row)."""
    if "copy" not in rows.column_names:
        return [None] * rows.num_rows
    ops, markers = rows.column("op").to_pylist(), rows.column("copy").to_pylist()
    return [CopyRange.of(m) if op == "copy_range" else None for op, m in zip(ops, markers)]


def _state(plan: Plan, bucket: int, rows: pa.Table, before: list[Any], after: list[Any], after_struct: pa.StructArray,
           writer: str) -> list[Written]:
    schema = state_schema(plan.schema, bucket=False)
    names = plan.schema.names
    offsets, indexes = rows.column("offset").to_pylist(), rows.column("row_index").to_pylist()
    bb, ba = rows.column("_bb").to_pylist(), rows.column("_ba").to_pylist()
    key_index = [names.index(k) for k in plan.key]
    ranges = _ranges(rows)
    files = plan.files.get(bucket, ())
    removed: list[str] = []
    kept: list[pa.Table] = []
    new_rows: list[int] = []  # the rows whose after image is a state row
    if plan.keyed:
        final: dict[tuple[Any, ...], tuple[tuple[int, int], int | None]] = {}
        cleared: list[tuple[tuple[int, int], CopyRange]] = []  # ranges removed, and where in the source
        for i in range(rows.num_rows):
            order = (offsets[i], indexes[i])
            cut = ranges[i]
            if cut is not None:  # the batch's earlier changes in the range are gone, and the files' older rows
                for k in final:
                    if cut.holds(k):
                        final[k] = (order, None)
                cleared.append((order, cut))
                continue
            if bb[i] == bucket and before[i] is not None:
                final[_key(before[i], key_index, plan, offsets[i])] = (order, None)
            if ba[i] == bucket and after[i] is not None:
                final[_key(after[i], key_index, plan, offsets[i])] = (order, i)
        for path in files:
            table = _aligned(pq.read_table(os.path.join(plan.state_root, path)), schema)
            keys = [_hashable(k) for k in zip(*(table.column(c).to_pylist() for c in plan.key))] if len(plan.key) > 1 \
                else [(_hashable([k])[0],) for k in table.column(plan.key[0]).to_pylist()]
            orders = None
            drop = []
            for j, k in enumerate(keys):
                change = final.get(k)
                if change is None:
                    if cleared:
                        if orders is None:
                            orders = list(zip(*(table.column(c).to_pylist() for c in ORDER)))
                        if any(cut.holds(k) and (orders[j][0] is None or orders[j] < at) for at, cut in cleared):
                            drop.append(j)  # a chunk replaced its range after this row was written
                    continue
                if orders is None:
                    orders = list(zip(*(table.column(c).to_pylist() for c in ORDER)))
                if orders[j][0] is not None and orders[j] >= change[0]:
                    del final[k]  # the lake holds a newer row: this change is older, it does not apply
                else:
                    drop.append(j)
            if drop:
                mask = [True] * table.num_rows
                for j in drop:
                    mask[j] = False
                kept.append(table.filter(pa.array(mask)))
                removed.append(path)
        new_rows = [i for _, i in final.values() if i is not None]
    else:
        delta: dict[tuple[Any, ...], int] = {}
        images: dict[tuple[Any, ...], int] = {}
        clear = False  # a chunk replaced every row (a table without a key is copied whole: no range)
        for i in range(rows.num_rows):
            if ranges[i] is not None:
                delta, images, clear = {}, {}, True
                continue
            for image, step, mine in ((before[i], -1, bb[i] == bucket), (after[i], 1, ba[i] == bucket)):
                if image is not None and mine:
                    k = _hashable(image[0] + [image[1]])
                    delta[k] = delta.get(k, 0) + step
                    if step > 0:
                        images[k] = i
        if clear:
            removed = list(files)
        elif any(d < 0 for d in delta.values()):
            width = len(names) + 1
            for path in files:
                table = _aligned(pq.read_table(os.path.join(plan.state_root, path)), schema)
                values = zip(*(table.column(c).to_pylist() for c in schema.names[:width]))
                mask = []
                for v in values:
                    k = _hashable(v)
                    if delta.get(k, 0) < 0:
                        delta[k] += 1
                        mask.append(False)
                    else:
                        mask.append(True)
                if not all(mask):
                    kept.append(table.filter(pa.array(mask)))
                    removed.append(path)
        new_rows = [images[k] for k, d in delta.items() if d > 0 for _ in range(d)]
    parts = kept + ([_state_rows(schema, rows, after_struct, new_rows)] if new_rows else [])
    merged = pa.concat_tables(parts) if parts else schema.empty_table()
    if not removed and merged.num_rows == 0:
        return []
    written: list[Written] = []
    if merged.num_rows:
        path, size = _write(plan.state_root, _file_name(f"{BUCKET}={bucket}/"), merged)
        written.append(Written("state", plan.database, plan.table, bucket, path, size, merged.num_rows,
                               tuple(removed), writer))
    else:
        written.append(Written("state", plan.database, plan.table, bucket, "", 0, 0, tuple(removed), writer))
    return written


def _key(image: tuple[list[Any], str | None], index: list[int], plan: Plan, offset: int) -> tuple[Any, ...]:
    values, raw = image
    if raw is not None and any(plan.schema.names[i] in json.loads(raw) for i in index):
        raise GroupError(f"offset {offset}: a primary-key value of {plan.database}.{plan.table} has no Spark form "
                         f"({raw}); the lake cannot MERGE on it")
    key = tuple([values[i] for i in index])
    if plan.odd_key:  # a list (SET) is not hashable; a FLOAT key as the file holds it (32 bits)
        key = _hashable(_as_stored(v, plan.schema.columns[i].arrow(True)) for v, i in zip(key, index))
    return key


def _as_stored(value: Any, arrow: pa.DataType) -> Any:
    if type(value) is float and pa.types.is_float32(arrow):
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return value


def _state_rows(schema: pa.Schema, rows: pa.Table, after: pa.StructArray, taken: list[int]) -> pa.Table:
    """The state rows of these rows' after images (the columns and _cdc_raw), with where each comes from."""
    which = pa.array(taken, pa.int64())
    images = after.take(which).flatten()
    source = [rows.column(name).take(which) for name in ("offset", "row_index", "sequence", "position")]
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip([*images, *source], schema)], schema=schema)


def _changelog(plan: Plan, rows: pa.Table, before: pa.StructArray, after: pa.StructArray, writer: str) -> Written:
    schema = changelog_schema(plan.schema)
    arrays = []
    for f in schema:
        if f.name == "before":
            arrays.append(before)
        elif f.name == "after":
            arrays.append(after)
        else:
            arrays.append(rows.column(f.name).cast(f.type))
    table = pa.Table.from_arrays(arrays, schema=schema)
    path, size = _write(plan.changelog_root, _file_name(""), table)
    return Written("changelog", plan.database, plan.table, None, path, size, table.num_rows, writer=writer)


@dataclass(frozen=True)
class Rewrite:
    """ADD COLUMN with a default: one state file rewritten with the value existing rows got."""

    database: str
    table: str
    root: str
    path: str
    bucket: int
    schema: TableSchema  # with the new columns
    values: tuple[tuple[str, Any, str | None], ...]  # (column, typed value, its _cdc_raw tag JSON or None)


def rewrite_file(job: Rewrite) -> Written:
    """Existing rows get the added columns' defaults; runs on an executor."""
    schema = state_schema(job.schema, bucket=False)
    table = _aligned(pq.read_table(os.path.join(job.root, job.path)), schema)
    n = table.num_rows
    arrays = [table.column(f.name) for f in schema]
    for column, value, _ in job.values:
        arrays[schema.names.index(column)] = pa.array([value] * n, schema.field(column).type)
    extra = {c: json.loads(raw) for c, _, raw in job.values if raw is not None}
    if extra:
        raw_i = schema.names.index(RAW_COLUMN)
        old = table.column(RAW_COLUMN).to_pylist()
        arrays[raw_i] = pa.array([json.dumps({**(json.loads(v) if v else {}), **extra}, separators=(",", ":"))
                                  for v in old], pa.string())
    path, size = _write(job.root, _file_name(f"{BUCKET}={job.bucket}/"), pa.Table.from_arrays(arrays, schema=schema))
    return Written("state", job.database, job.table, job.bucket, path, size, n, (job.path,), writer_id())


def now_ms() -> int:
    return int(dt.datetime.now(dt.UTC).timestamp() * 1000)
