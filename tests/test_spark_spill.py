"""cdc_spark.spill without Spark: a batch spilled by several read tasks gives the lake what one task gives, its
rows reach every group they belong to once, and a batch's files (other attempts' too) are removed after it."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pyarrow as pa
from test_spark_lake_unit import SCHEMAS, i, new_lake, row, s, state

from cdc_spark.lake import LocalEngine, SpilledEngine, apply_batch
from cdc_spark.lakefiles import BUCKETS, Plan, bucket_of
from cdc_spark.rows import lake_rows, lake_schema, output_schema
from cdc_spark.spill import EVERY, SpillIndex, clear, packed, remove_files, spill


def lake_batch(rows: list[dict]) -> pa.Table:
    return lake_rows(pa.Table.from_pylist(rows, schema=output_schema()))


def index_of(table: pa.Table, directory: str, name: str) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(spill(table.to_batches(), lake_schema(), directory, name))).to_pylist()


class TasksEngine(SpilledEngine):
    """The batch read by several tasks, each spilling its own offset range (as Spark's read tasks do)."""

    def __init__(self, rows: list[dict], cuts: list[int], directory: str):
        table = lake_batch(rows)
        offsets = table.column("offset").to_pylist()
        bounds = [0, *cuts, max(offsets) + 1]
        found: list[dict[str, Any]] = []
        for a, b in itertools.pairwise(bounds):
            part = table.take([n for n, o in enumerate(offsets) if a <= o < b])
            found += index_of(part, directory, f"{a}-{b}")
        self.index = SpillIndex(found)

    def _index(self) -> SpillIndex:
        return self.index

    def map(self, function, items, weights=None):  # type: ignore[no-untyped-def]
        return [function(item) for item in items]


# two segments' worth of changes around a DDL statement, and a key change across buckets
BATCH = [row(0, "ddl", ddl="CREATE TABLE shop.t (id INT PRIMARY KEY, note VARCHAR(9))", pk=()),
         *(row(1, "insert", after=[i(n), s(f"v{n}")], index=n) for n in range(40)),
         row(2, "update", before=[i(1), s("v1")], after=[i(100), s("moved")]),
         row(3, "delete", before=[i(2), s("v2")]),
         row(4, "ddl", ddl="TRUNCATE TABLE shop.t", pk=()),
         *(row(5, "insert", after=[i(n), s(f"w{n}")], index=n) for n in range(7)),
         row(6, "update", before=[i(3), s("w3")], after=[i(3), s("x")])]
AFTER = sorted([(n, f"w{n}") for n in range(7) if n != 3] + [(3, "x")], key=repr)


def test_read_tasks_split_anywhere_give_the_lake_of_one_task(tmp_path):
    for cuts in ([], [2], [3, 5], [1, 2, 3, 4, 5, 6]):
        lake_dir = tmp_path / f"lake{len(cuts)}"
        engine = TasksEngine(BATCH, cuts, str(tmp_path / f"spill{len(cuts)}"))
        assert [d.pos for d in engine.ddl()] == [(0, 0), (4, 0)]
        summary = engine.summary([(0, 0), (4, 0)])
        assert sorted((x.segment, x.first_offset, x.last_offset, x.rows) for x in summary) == [(1, 1, 3, 42),
                                                                                             (2, 5, 6, 8)]
        apply_batch(new_lake(lake_dir), "q", 0, engine)
        assert state(lake_dir) == AFTER, cuts
    one = tmp_path / "one"
    apply_batch(new_lake(one), "q", 0, BATCH)  # LocalEngine: one task
    assert state(one) == AFTER


def test_each_row_reaches_the_groups_of_its_buckets_once(tmp_path):
    table = lake_batch(BATCH[:43])
    index = SpillIndex(index_of(table, str(tmp_path), "0-4"))
    plan = Plan("shop", "t", SCHEMAS[("shop", "t")], ("id",), True, str(tmp_path / "s"), str(tmp_path / "c"))
    tasks = index.tasks(1, [(0, 0)], {("shop", "t"): plan})
    seen: dict[int, list[tuple[int, int]]] = {}
    for task in tasks:
        for sl in task.slices:
            batch = pa.ipc.open_file(pa.memory_map(sl.file)).get_batch(sl.batch)
            for r in batch.to_pylist():
                seen.setdefault(task.bucket, []).append((r["offset"], r["row_index"]))
    expected: dict[int, list[tuple[int, int]]] = {}
    for r in BATCH[1:43]:
        images = [x for x in (r["before"], r["after"]) if x is not None]
        for b in {bucket_of(dict(x), ["id"]) for x in images}:
            expected.setdefault(b, []).append((r["offset"], r["row_index"]))
    assert {b: sorted(v) for b, v in seen.items()} == {b: sorted(v) for b, v in expected.items()}
    moved = [b for b, v in expected.items() if (2, 0) in v]
    assert len(moved) == 2  # the key change is in both buckets' groups


def test_a_copy_range_goes_to_every_bucket(tmp_path):
    marker = {"id": "c1", "after": None, "upto": None, "first": True, "done": True, "recopy": False,
              "append": False, "where": None}
    rows = [BATCH[0], {**row(1, "copy_range"), "copy": marker},
            *({**row(1, "copy", after=[i(n), s("c")], index=n + 1), "copy": marker} for n in range(3))]
    index = SpillIndex(index_of(lake_batch(rows), str(tmp_path), "0-2"))
    assert [r["bucket"] for r in index.slice_rows if r["cols"] is None] == [EVERY]
    plan = Plan("shop", "t", SCHEMAS[("shop", "t")], ("id",), True, str(tmp_path / "s"), str(tmp_path / "c"))
    assert sorted(t.bucket for t in index.tasks(1, [(0, 0)], {("shop", "t"): plan})) == list(range(BUCKETS))


def test_a_batchs_files_and_other_attempts_are_removed(tmp_path):
    table = lake_batch(BATCH[:3])
    index_of(table, str(tmp_path), "0-2")  # a failed attempt of the same read task
    kept = SpillIndex(index_of(table, str(tmp_path), "0-2"))
    other = SpillIndex(index_of(table, str(tmp_path), "10-20"))
    assert len(os.listdir(tmp_path)) == 3
    remove_files(kept.files)
    assert os.listdir(tmp_path) == [os.path.basename(f) for f in other.files]
    remove_files(kept.files)  # again (a replayed batch): nothing left to do
    clear(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_the_in_process_engine_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    apply_batch(new_lake(tmp_path / "lake"), "q", 0, BATCH)
    assert os.listdir(tmp_path / "tmp") == []
    engine = LocalEngine(BATCH)
    assert len(os.listdir(tmp_path / "tmp")) == 1
    engine.close()
    assert os.listdir(tmp_path / "tmp") == []


def test_groups_are_packed_into_one_task_per_core_of_about_equal_rows():
    weights = [5, 1, 1, 1, 4, 2]
    bundles = packed(weights, 2)
    assert sorted(i for b in bundles for i in b) == list(range(6))
    assert [sum(weights[i] for i in b) for b in bundles] == [7, 7]
    assert packed([3], 4) == [[0]]
    assert packed([], 2) == []


def test_spilling_reads_through_the_log_not_by_table_topics():
    """Runs map to segments only for ranges of the log (a table topic's partition may lie around another's DDL):
    with per-table topics and option tables, spillPath is refused before anything is read."""
    import pytest

    from cdc_spark.options import SourceOptions
    from cdc_spark.source import StreamReader
    from cdc_stream.errors import ConfigError
    from cdc_stream.profile import Stream

    options = SourceOptions(stream=Stream(topic="{database}_{table}"), tables=(("db", "t"),), lake=True,
                            spill="/nowhere")
    with pytest.raises(ConfigError, match="spillPath reads through the log, not by table topics; drop option 'tables'"):
        StreamReader(options, None).partitions({"offset": 0}, {"offset": 10})
