"""A lake micro-batch between its two passes: spilled to Arrow files by the read tasks, grouped by the write tasks.

The lake job reads the topic with option `spillPath` (and images=lake). Each read task (one log range) writes the
lake rows of its range (cdc_spark/rows.py) into ONE Arrow IPC file, one record batch per group: (run, table, column
list, bucket), where a run is the task's rows between two of its DDL statements and the bucket the one the lake's
state files are partitioned by (a row whose before and after images lie in different buckets is in both groups;
a live copy's chunk range in EVERY bucket). The task returns only an index of the file (`INDEX`: its DDL rows, a
summary row per run, table, key and column list, and one row per record batch), so the rows never cross into
Spark's JVM: no cache, no shuffle, no conversion to Spark's rows and back. The driver collects the index (a few
rows per table and task), plans each segment (the rows between two DDL of the batch), and sends every (table,
bucket) group the names of its record batches; the group's task reads them (memory-mapped) and writes the lake's
files (lakefiles.apply_group). The same index and grouping serve the in-process engine (tests, small batches).

Runs map to the batch's segments because a read task's log range is contiguous and owns whole transactions: a DDL
statement of another task lies before all of this task's rows or after all of them.
"""

from __future__ import annotations

import glob
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_spark.lakefiles import BUCKETS, Plan, Written, apply_group, columns_text, rebucket

Pos = tuple[int, int]
EVERY = -1  # a slice's bucket: every bucket of its table (a live copy's chunk range may hold a row of any)
_NONE = -2  # no image, no bucket
_KEY_SEPARATOR = "\u0000"
_SUFFIX = f"-{uuid.UUID(int=0)}.arrow"  # a spill file's name after its read task's range
META = ("database", "table", "sequence", "ts", "txn_id", "txn_index", "txn_last", "position")
INDEX = pa.schema([
    ("kind", pa.string()),  # ddl | summary | slice
    ("offset", pa.int64()), ("row_index", pa.int32()),  # ddl: its position; else the run's first row's
    ("database", pa.string()), ("table", pa.string()), ("sequence", pa.int64()),
    ("ts", pa.timestamp("us", tz="UTC")), ("txn_id", pa.string()), ("txn_index", pa.int32()),
    ("txn_last", pa.bool_()), ("position", pa.string()), ("ddl", pa.string()),
    ("pk", pa.list_(pa.string())), ("cols", pa.string()),
    ("first", pa.int64()), ("last", pa.int64()), ("n", pa.int64()),  # summary: offsets and rows; slice: rows
    ("file", pa.string()), ("batch", pa.int32()), ("bucket", pa.int32()),  # slice: where, and its bucket
])


def spill(batches: Iterable[pa.RecordBatch], schema: pa.Schema, directory: str, name: str) -> Iterator[pa.RecordBatch]:
    """A read task's lake rows (`schema`) -> one Arrow file in `directory` and its index (one record batch of INDEX).

    The file is `<name>-<uuid>.arrow`: a retried task writes a file of its own, and only the index of the attempt
    Spark keeps names it (`name`, the task's range, lets the driver delete the other attempts' files)."""
    table = pa.Table.from_batches(list(batches), schema=schema).combine_chunks()
    index: dict[str, list[Any]] = {f.name: [] for f in INDEX}

    def entry(**values: Any) -> None:
        for column, found in index.items():
            found.append(values.get(column))

    op = table.column("op")
    ddl = pc.equal(op, "ddl").to_numpy(zero_copy_only=False)
    runs = np.cumsum(ddl) - ddl  # a row's run: the task's DDL rows before it
    for i in np.flatnonzero(ddl).tolist():
        row = table.slice(i, 1).to_pylist()[0]
        entry(kind="ddl", offset=row["offset"], row_index=row["row_index"], ddl=row["ddl"], **{k: row[k] for k in META})
    rows = np.flatnonzero(~ddl)
    if len(rows):
        starts = _run_starts(table, runs, rows)
        _summaries(table, runs, rows, starts, entry)
        path = os.path.join(directory, f"{name}-{uuid.uuid4()}.arrow")
        os.makedirs(directory, exist_ok=True)
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for n, (key, members) in enumerate(_slices(table, runs, rows)):
                writer.write_batch(table.take(pa.array(members)).combine_chunks().to_batches()[0])
                run, database, table_name, cols, bucket = key
                entry(kind="slice", offset=starts[run][0], row_index=starts[run][1], database=database,
                      table=table_name, cols=cols, n=len(members), file=path, batch=n, bucket=bucket)
    yield pa.RecordBatch.from_pydict(index, schema=INDEX)


def _run_starts(table: pa.Table, runs: np.ndarray, rows: np.ndarray) -> dict[int, Pos]:
    """Each run's first row's position."""
    found, first = np.unique(runs[rows], return_index=True)
    offsets, indexes = table.column("offset").to_numpy(), table.column("row_index").to_numpy()
    return {int(r): (int(offsets[rows[i]]), int(indexes[rows[i]])) for r, i in zip(found, first)}


def _summaries(table: pa.Table, runs: np.ndarray, rows: np.ndarray, starts: dict[int, Pos], entry: Any) -> None:
    """One summary row per (run, table, primary key, column list): first and last offset, rows."""
    taken = pa.array(rows)
    keyed = pa.table({
        "run": pa.array(runs[rows]), "database": table.column("database").take(taken),
        "table": table.column("table").take(taken), "cols": table.column("cols").take(taken),
        "pk": pc.binary_join(table.column("pk").take(taken), _KEY_SEPARATOR),
        "offset": table.column("offset").take(taken)})
    found = keyed.group_by(["run", "database", "table", "pk", "cols"], use_threads=False).aggregate(
        [("offset", "min"), ("offset", "max"), ("offset", "count")])
    for s in found.to_pylist():
        run = s["run"]
        entry(kind="summary", offset=starts[run][0], row_index=starts[run][1], database=s["database"],
              table=s["table"], pk=s["pk"].split(_KEY_SEPARATOR) if s["pk"] else [], cols=s["cols"],
              first=s["offset_min"], last=s["offset_max"], n=s["offset_count"])


def _slices(table: pa.Table, runs: np.ndarray, rows: np.ndarray) -> list[tuple[tuple[Any, ...], list[int]]]:
    """The rows of each (run, database, table, cols, bucket), in the task's order: a row in its after image's
    bucket (or its before image's), also in its before image's when that differs; a chunk range in EVERY."""
    before = pc.fill_null(table.column("_bb"), _NONE).to_numpy()
    after = pc.fill_null(table.column("_ba"), _NONE).to_numpy()
    copy_range = pc.equal(table.column("op"), "copy_range").to_numpy(zero_copy_only=False)
    main = np.where(after == _NONE, before, after)
    main = np.where(copy_range | (main == _NONE), EVERY, main)[rows].astype(np.int64)
    moved = rows[(before[rows] != _NONE) & (after[rows] != _NONE) & (before[rows] != after[rows])]
    members = np.concatenate([rows, moved])
    buckets = np.concatenate([main, before[moved].astype(np.int64)])
    taken = pa.array(members)
    keyed = pa.table({
        "member": taken, "run": pa.array(runs[members]), "database": table.column("database").take(taken),
        "table": table.column("table").take(taken), "cols": table.column("cols").take(taken),
        "bucket": pa.array(buckets)})
    found = keyed.group_by(["run", "database", "table", "cols", "bucket"], use_threads=False).aggregate(
        [("member", "list")])
    return [((g["run"], g["database"], g["table"], g["cols"], g["bucket"]), g["member_list"])
            for g in found.to_pylist()]


@dataclass(frozen=True)
class Slice:
    """One record batch of a spill file; `again`: its rows are bucketed again by the lake's key and only this
    group's are kept (a table without a primary key, rows naming other columns than it was created with)."""

    file: str
    batch: int
    again: bool = False


@dataclass(frozen=True)
class GroupTask:
    """One (table, bucket) group of a segment: what a write task needs."""

    plan: Plan
    bucket: int
    slices: tuple[Slice, ...]
    rows: int = 0  # the rows of its slices: its weight when tasks are packed into Spark's


def run_group(task: GroupTask) -> list[Written]:
    """Read the group's record batches and write its files (runs on an executor)."""
    readers: dict[str, Any] = {}
    parts = []
    key = {(task.plan.database, task.plan.table): task.plan.key}
    for s in task.slices:
        if s.file not in readers:
            readers[s.file] = pa.ipc.open_file(pa.memory_map(s.file))
        part = pa.Table.from_batches([readers[s.file].get_batch(s.batch)])
        if s.again:
            part = rebucket(part, key)
            part = part.filter(pc.or_kleene(pc.equal(part.column("_bb"), task.bucket),
                                            pc.equal(part.column("_ba"), task.bucket)).fill_null(False))
        parts.append(part)
    rows = pa.concat_tables(parts) if parts else None
    if rows is not None and any(s.again for s in task.slices):
        rows = _distinct(rows)  # a row whose images the source put in two buckets is in two of these slices
    return apply_group(task.plan, task.bucket, rows) if rows is not None and rows.num_rows else []


def _distinct(rows: pa.Table) -> pa.Table:
    """Rows with distinct positions (the first of each)."""
    pos = (rows.column("offset").to_numpy().astype(np.int64) << 32) | rows.column("row_index").to_numpy()
    _, first = np.unique(pos, return_index=True)
    return rows if len(first) == rows.num_rows else rows.take(pa.array(np.sort(first)))


class SpillIndex:
    """A batch's index (the read tasks' INDEX rows): its DDL, its segments' summaries, and the write tasks."""

    def __init__(self, rows: Sequence[dict[str, Any]]):
        self.ddl_rows = sorted((r for r in rows if r["kind"] == "ddl"), key=lambda r: (r["offset"], r["row_index"]))
        self.summary_rows = [r for r in rows if r["kind"] == "summary"]
        self.slice_rows = [r for r in rows if r["kind"] == "slice"]

    @property
    def files(self) -> set[str]:
        return {r["file"] for r in self.slice_rows}

    def summary(self, ddl: Sequence[Pos]) -> list[tuple[int, dict[str, Any]]]:
        """(segment, summary row) of every summary row."""
        return [(segment_of((r["offset"], r["row_index"]), ddl), r) for r in self.summary_rows]

    def tasks(self, segment: int, ddl: Sequence[Pos], plans: dict[tuple[str, str], Plan]) -> list[GroupTask]:
        """The write tasks of a segment's planned tables: one per (table, bucket) that has rows."""
        groups: dict[tuple[str, str, int], list[Slice]] = {}
        rows: dict[tuple[str, str, int], int] = {}
        for r in self.slice_rows:
            plan = plans.get((r["database"], r["table"]))
            if plan is None or segment_of((r["offset"], r["row_index"]), ddl) != segment:
                continue
            again = not plan.keyed and r["cols"] is not None and r["cols"] != columns_text(plan.key)
            buckets = range(BUCKETS) if again or r["bucket"] == EVERY else (r["bucket"],)
            for b in buckets:
                group = (plan.database, plan.table, b)
                groups.setdefault(group, []).append(Slice(r["file"], r["batch"], again))
                rows[group] = rows.get(group, 0) + (r["n"] // BUCKETS if again else r["n"])
        return [GroupTask(plans[(db, t)], b, tuple(slices), rows[(db, t, b)])
                for (db, t, b), slices in sorted(groups.items())]


def packed(weights: Sequence[int], slots: int) -> list[list[int]]:
    """Item indexes in at most `slots` bundles of about equal weight (the heaviest first, each to the lightest
    bundle): one Spark task per bundle. A Python task costs ~50-100 ms before its first row here (bench/README.md),
    so a segment's groups run as one task per core, not one task each."""
    bundles: list[list[int]] = [[] for _ in range(max(1, min(slots, len(weights))))]
    load = [0] * len(bundles)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        lightest = load.index(min(load))
        bundles[lightest].append(i)
        load[lightest] += max(1, weights[i])
    return [b for b in bundles if b]


def segment_of(pos: Pos, ddl: Sequence[Pos]) -> int:
    """The segment a row lies in: how many DDL rows come before it."""
    return sum(1 for d in ddl if d < pos)


def remove_files(files: Iterable[str]) -> None:
    """Delete a batch's spill files, and any other attempt's file of the same read task (same name before the
    uuid); a file already gone is fine (a replayed batch, a cleaned directory)."""
    for path in files:
        base = path[: -len(_SUFFIX)]
        for found in glob.glob(glob.escape(base) + "-*.arrow") or [path]:
            try:
                os.remove(found)
            except FileNotFoundError:
                pass


def clear(directory: str) -> None:
    """Delete every spill file left in `directory` (a job that died between its passes)."""
    for found in glob.glob(os.path.join(glob.escape(directory), "*.arrow")):
        try:
            os.remove(found)
        except FileNotFoundError:
            pass
