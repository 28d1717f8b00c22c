"""The lake's executor-side typing of row images, without Spark: CPU time per 1,000 row changes.

`.venv/bin/python bench/lake_typing.py [--changes 50000] [--rounds 5] [--before REV] [--profile]`

Builds one micro-batch as the lake's write tasks get it (cdc_spark.spill.run_group: their record batches), grouped by
(table, bucket), in both forms: the source's rows with generic images (map<string,string> of column ->
tagged value's JSON text, as cdc_spark.convert.generic_images makes them) and `_bb`/`_ba` buckets, for
the code before; and the same rows in the lake's form (cdc_spark.rows.lake_rows: each image one JSON
array, its column list, its buckets; option images=lake), for the working tree's.
The workload: 4 tables (integers, DECIMALs, DATETIME/TIMESTAMP/DATE, utf8mb4 text, an ENUM, a BLOB, NULLs,
a few zero dates that go to `_cdc_raw`, and one table without a key), inserts with a tenth as many
updates and deletes. Two measures, each on every group of the batch:

- **typing**: lakefiles.typed_images of both images plus ImageConverter.build of both (the change log's
  struct columns): what the typing costs a task;
- **task**: lakefiles.apply_group into an empty lake (typing, the state merge, Parquet files written).

The code before (`--before`, a git revision, default the commit before the typing changes) is loaded from
git into separate modules and run in the same process, rounds alternating, so the machine's load falls
on both alike. CPU time (time.process_time) is what is reported: the machine is shared.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import pstats
import random
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import pyarrow as pa

from cdc_spark import convert as convert_now
from cdc_spark import lakefiles as lakefiles_now
from cdc_spark.convert import generic_images
from cdc_spark.rows import COPY, lake_rows
from cdc_spark.schema import ColumnType, TableSchema

BEFORE = "52bc525"  # main when the typing work began

DB = "shop"
TABLES = {
    "orders": TableSchema(DB, "orders", (
        ColumnType("id", "bigint"), ColumnType("customer", "int"), ColumnType("amount", "decimal", precision=12,
                                                                             scale=2),
        ColumnType("created", "datetime"), ColumnType("note", "varchar", charset="utf8mb4"),
        ColumnType("status", "enum"))),
    "events": TableSchema(DB, "events", (
        ColumnType("id", "bigint", unsigned=True), ColumnType("at", "timestamp"), ColumnType("payload", "blob"),
        ColumnType("kind", "varchar", charset="utf8mb4"), ColumnType("flag", "tinyint"))),
    "items": TableSchema(DB, "items", (
        ColumnType("id", "int"), ColumnType("sku", "char", charset="utf8mb4"),
        ColumnType("price", "decimal", precision=10, scale=4), ColumnType("qty", "int"), ColumnType("day", "date"),
        ColumnType("descr", "text", charset="utf8mb4"), ColumnType("big", "decimal", precision=50, scale=5))),
    "k": TableSchema(DB, "k", (ColumnType("a", "int"), ColumnType("b", "varchar", charset="utf8mb4"),
                               ColumnType("c", "int"))),
}
KEYS = {"orders": ("id",), "events": ("id",), "items": ("id",), "k": ("a", "b", "c")}


def _row(table: str, n: int, rnd: random.Random) -> list[Any]:
    null = "Null"
    if table == "orders":
        created = {"DateTime": {"year": 2026, "month": 1 + n % 12, "day": 1 + n % 28, "hour": n % 24,
                                "minute": n % 60, "second": (n * 7) % 60, "subsecond": (n * 13) % 1000000}}
        if n % 997 == 0:
            created = {"DateTime": {"year": 0, "month": 0, "day": 0, "hour": 0, "minute": 0, "second": 0,
                                    "subsecond": 0}}
        return [{"SignedInteger": n}, {"SignedInteger": rnd.randrange(1, 100000)},
                {"Decimal": f"{rnd.randrange(0, 10**8)}.{rnd.randrange(100):02d}"}, created,
                {"String": f"order {n} für Kunde"} if n % 5 else null, {"Enum": ("new", "paid", "sent")[n % 3]}]
    if table == "events":
        return [{"UnsignedInteger": n}, {"Timestamp": {"unix_time": 1_700_000_000 + n, "subsecond": n % 1000000}},
                {"Blob": "AAEC/w=="} if n % 3 else null, {"String": f"kind{n % 17}"}, {"SignedInteger": n % 100 - 50}]
    if table == "items":
        return [{"SignedInteger": n}, {"String": f"SKU-{n:08d}"},
                {"Decimal": f"{rnd.randrange(0, 10**6)}.{rnd.randrange(10000):04d}"},
                {"SignedInteger": rnd.randrange(0, 1000)},
                {"Date": {"year": 2020 + n % 6, "month": 1 + n % 12, "day": 1 + n % 28}},
                {"String": "x" * (n % 40)} if n % 4 else null,
                {"Decimal": f"{rnd.randrange(10**20)}{rnd.randrange(10**20)}.12345"}]
    return [{"SignedInteger": n % 50}, {"String": f"b{n % 7}"}, {"SignedInteger": n}]


def batch(changes: int, seed: int = 7) -> dict[tuple[str, int], tuple[pa.Table, pa.Table]]:
    """The batch's (table, bucket) groups, each as its task receives it: generic (before), lake rows (now)."""
    rnd = random.Random(seed)
    names = list(TABLES)
    rows: dict[str, list[tuple[str, list[Any] | None, list[Any] | None]]] = {t: [] for t in names}
    live: dict[str, list[int]] = {t: [] for t in names}
    for i in range(changes):
        t = names[i % 4]
        r = rnd.random()
        if r < 0.8 or len(live[t]) < 10:
            n = len(rows[t]) + 1
            live[t].append(n)
            rows[t].append(("insert", None, _row(t, n, rnd)))
        elif r < 0.9:
            n = rnd.choice(live[t])
            rows[t].append(("update", _row(t, n, rnd), _row(t, n, rnd)))
        else:
            n = live[t].pop(rnd.randrange(len(live[t])))
            rows[t].append(("delete", _row(t, n, rnd), None))
    groups: dict[tuple[str, int], tuple[pa.Table, pa.Table]] = {}
    for t in names:
        columns = TABLES[t].names
        key = KEYS[t]

        def texts(image: list[Any] | None, columns: list[str] = columns) -> dict[str, str] | None:
            if image is None:
                return None
            return dict(zip(columns, (convert_now._encode(v).decode() for v in image)))

        by_bucket: dict[int, list[int]] = {}
        befores, afters, bbs, bas = [], [], [], []
        for i, (_, before, after) in enumerate(rows[t]):
            bb = lakefiles_now.bucket_of(texts(before), key)
            ba = lakefiles_now.bucket_of(texts(after), key)
            bbs.append(bb)
            bas.append(ba)
            befores.append(None if before is None else (columns, before))
            afters.append(None if after is None else (columns, after))
            for b in {bb, ba} - {None}:
                by_bucket.setdefault(b, []).append(i)  # type: ignore[arg-type]
        n = len(rows[t])
        whole = pa.table({
            "offset": pa.array(range(n), pa.int64()), "row_index": pa.array([0] * n, pa.int32()),
            "sequence": pa.array(range(n), pa.int64()), "ts": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
            "database": [DB] * n, "table": [t] * n, "op": [op for op, _, _ in rows[t]],
            "txn_id": [f"0-1-{i}" for i in range(n)], "txn_index": pa.array([0] * n, pa.int32()),
            "txn_last": [True] * n, "position": [f"bin.000001:{i}" for i in range(n)],
            "pk": pa.array([list(KEYS[t]) if t != "k" else [] for _ in range(n)], pa.list_(pa.string())),
            "before": generic_images(befores), "after": generic_images(afters),
            "ddl": pa.array([None] * n, pa.string()), "copy": pa.nulls(n, COPY), "_bb": pa.array(bbs, pa.int32()),
            "_ba": pa.array(bas, pa.int32())})
        lake = lake_rows(whole)
        assert lake.column("_bb").equals(whole.column("_bb")) and lake.column("_ba").equals(whole.column("_ba"))
        for b, idx in by_bucket.items():
            groups[(t, b)] = (whole.take(pa.array(idx)), lake.take(pa.array(idx)))
    return groups


def load_before(rev: str) -> tuple[types.ModuleType, types.ModuleType]:
    """cdc_spark.convert and cdc_spark.lakefiles as they were at `rev`, as separate modules."""
    def source(path: str) -> str:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=HERE.parent, check=True, capture_output=True,
                              text=True).stdout

    def module(name: str, text: str) -> types.ModuleType:
        spec = importlib.util.spec_from_loader(name, loader=None)
        assert spec is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up
        exec(compile(text, f"{rev}:{name}", "exec"), mod.__dict__)
        return mod

    conv = module("before_convert", source("cdc_spark/convert.py"))
    files = module("before_lakefiles", source("cdc_spark/lakefiles.py").replace(
        "from cdc_spark.convert import", "from before_convert import"))
    return conv, files


def plans(files: types.ModuleType, root: str) -> dict[str, Any]:
    return {t: files.Plan(DB, t, s, KEYS[t], t != "k", f"{root}/{t}", f"{root}/{t}_log") for t, s in TABLES.items()}


Groups = dict[tuple[str, int], tuple[pa.Table, pa.Table]]


def typing(conv: types.ModuleType, files: types.ModuleType, groups: Groups) -> list[Any]:
    out = []
    now = files is lakefiles_now
    for (t, _), both in groups.items():
        rows = both[now]
        c = conv.ImageConverter(TABLES[t], lake=True)
        offsets = rows.column("offset").to_pylist()
        if now:  # the lake's rows
            cols = rows.column("cols").to_pylist()
            before = files.typed_images(c, rows.column("before"), cols, offsets, t)
            after = files.typed_images(c, rows.column("after"), cols, offsets, t)
        else:
            before = files.typed_images(c, rows.column("before"), offsets, t)
            after = files.typed_images(c, rows.column("after"), offsets, t)
        out.append((c.build(before), c.build(after)))
    return out


def task(files: types.ModuleType, groups: Groups, root: str) -> int:
    p = plans(files, root)
    now = files is lakefiles_now
    return sum(len(files.apply_group(p[t], b, both[now])) for (t, b), both in groups.items())


def cpu(fn: Any) -> float:
    gc.collect()
    gc.disable()  # as apply_group runs
    try:
        start = time.process_time()
        fn()
        return time.process_time() - start
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--profile", choices=["now", "before"], help="cProfile the typing of one batch and stop")
    args = ap.parse_args()
    groups = batch(args.changes)
    changes = sum(g.num_rows for g, _ in groups.values())  # a change in two buckets counts in both tasks
    old_conv, old_files = load_before(args.before)
    now = (convert_now, lakefiles_now)
    old = (old_conv, old_files)
    if args.profile:
        mods = now if args.profile == "now" else old
        prof = cProfile.Profile()
        prof.runcall(typing, *mods, groups)
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        return
    # the same values, exactly
    for (a1, a2), (b1, b2) in zip(typing(*now, groups), typing(*old, groups)):
        assert a1.equals(b1) and a2.equals(b2), "the typed images differ from the code before"
    print(f"{args.changes} change events, {len(groups)} (table, bucket) groups, {changes} rows in the tasks; "
          f"CPU ms per 1,000 rows, before -> now ({args.before} -> working tree)")
    results: dict[str, list[float]] = {k: [] for k in ("typing before", "typing now", "task before", "task now")}
    for r in range(args.rounds):
        order = [("before", old), ("now", now)] if r % 2 == 0 else [("now", now), ("before", old)]
        for name, (conv, files) in order:
            results[f"typing {name}"].append(cpu(lambda conv=conv, files=files: typing(conv, files, groups)))
        for name, (_, files) in order:
            with tempfile.TemporaryDirectory(prefix="lake-typing-") as root:
                results[f"task {name}"].append(cpu(lambda files=files, root=root: task(files, groups, root)))
    for what in ("typing", "task"):
        b, n = sorted(results[f"{what} before"]), sorted(results[f"{what} now"])
        mb, mn = b[len(b) // 2], n[len(n) // 2]
        print(f"{what:7s} before {mb / changes * 1e6:8.1f} ms  now {mn / changes * 1e6:8.1f} ms  "
              f"{mb / mn:5.2f}x  (medians of {args.rounds}; before {[round(x, 2) for x in b]} s, "
              f"now {[round(x, 2) for x in n]} s)")


if __name__ == "__main__":
    main()
