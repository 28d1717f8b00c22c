"""The lake's Engine on Spark: a micro-batch's rows stay on the executors, which write the data files.

The batch is the `mysql_cdc` source's lake rows (option images=lake, cdc_spark/rows.py): each image one
binary JSON array, its column list, and its bucket, computed by the source's tasks as
lakefiles.bucket_of does. Per batch, over the batch's DataFrame (persisted on the executors, read from
the source once): the DDL rows are collected (few), a per-(segment, table) aggregate is collected (keys,
column lists, counts: one row per table), and per segment one grouped pass
`groupBy(database, table, _cdc_bucket).applyInArrow(...)` writes the files
(cdc_spark/lakefiles.apply_group) and returns their actions, one small row per file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from cdc_spark.lake import META, Change_, Pos, TableSummary
from cdc_spark.lakefiles import (
    BUCKETS,
    WRITTEN,
    Plan,
    Rewrite,
    Written,
    apply_group,
    columns_text,
    rebucket,
    rewrite_file,
)

ROW_BITS = 32  # a row's position as one long: offset << 32 | row_index
# Spark's Arrow batches to the grouped pass's Python workers are cut by rows (arrow.maxRecordsPerBatch, 10,000)
# and, unless this is Int.MaxValue, also by bytes: Spark then asks the Arrow writer its size after every row,
# and for a map or list column (the generic images, the chunk markers) that walks the batch's offsets: a
# batch's cost grows with the square of its rows. Profiled on the executor (JFR), that check was 60% of the
# grouped pass's JVM time on 100,000 changes; the row bound alone keeps a batch at ~10,000 rows.
NO_BYTE_LIMIT = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


def group_writer(plans: dict[tuple[str, str], Plan]) -> Any:
    """The applyInArrow function: one (table, bucket) group -> its Written rows (runs on an executor).

    A plain function without annotations: pyspark 4.3 infers the UDF kind from type hints and fails on
    callable objects and on hints it does not know."""
    def write(key, rows):  # type: ignore[no-untyped-def]
        database, table, bucket = (k.as_py() for k in key)
        written = apply_group(plans[(database, table)], bucket, rows)
        return pa.Table.from_pylist([w.row() for w in written], schema=WRITTEN)
    return write


def rebucketer(keys: dict[tuple[str, str], tuple[str, ...]]) -> Any:
    """The mapInArrow function bucketing rows of tables without a key again by their key (lakefiles.rebucket)."""
    def again(batches):  # type: ignore[no-untyped-def]
        for batch in batches:
            yield from rebucket(pa.Table.from_batches([batch]), keys).to_batches()
    return again


def _rewrite(job: Rewrite) -> dict[str, Any]:
    return rewrite_file(job).row()


@contextmanager
def settings(spark: Any, values: dict[str, str]) -> Iterator[None]:
    """Session settings for the actions run inside, then as they were."""
    conf = spark.conf
    old = {k: conf.get(k, None) for k in values}
    for k, v in values.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)


class SparkEngine:
    """The micro-batch DataFrame of the lake's foreachBatch."""

    def __init__(self, df: Any):
        from pyspark import StorageLevel

        self.df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.spark = df.sparkSession
        self._whole: list[TableSummary] | None = None  # the summary of a batch without DDL, found with its DDL

    def close(self) -> None:
        self.df.unpersist()

    def ddl(self) -> list[Change_]:
        """The DDL rows, and in the same job (the batch's first: it reads the source) the tables' summary as if
        the batch had no DDL, which is what summary() returns when it has none (most batches: one pass, not two)."""
        from pyspark.sql import functions as F

        types = {f.name: f.dataType for f in self.df.schema.fields}

        def null(name: str, kind: Any) -> Any:
            return F.lit(None).cast(kind).alias(name)

        ddl = self.df.where("op = 'ddl'").select(
            F.lit(True).alias("is_ddl"), "offset", "row_index", "ddl", *META, null("pk", types["pk"]),
            null("cols", types["cols"]), null("first", "long"), null("last", "long"), null("n", "long"))
        found = self._aggregate(self.df.where("op <> 'ddl'").withColumn("_seg", F.lit(0)))
        tables = found.select(
            F.lit(False).alias("is_ddl"), null("offset", types["offset"]), null("row_index", types["row_index"]),
            null("ddl", types["ddl"]), *[k if k in ("database", "table") else null(k, types[k]) for k in META],
            "pk", "cols", "first", "last", "n")
        rows = ddl.unionByName(tables).collect()
        self._whole = _summaries([r for r in rows if not r["is_ddl"]], 0)
        return sorted((Change_(r["offset"], r["row_index"], "ddl", {k: r[k] for k in META}, r["ddl"])
                       for r in rows if r["is_ddl"]), key=lambda c: c.pos)

    def _segments(self, ddl: Sequence[Pos]) -> Any:
        from pyspark.sql import functions as F

        rows = self.df.where("op <> 'ddl'")
        if not ddl:
            return rows.withColumn("_seg", F.lit(0))
        pos = F.col("offset") * F.lit(1 << ROW_BITS) + F.col("row_index")
        marks = F.array(*[F.lit((o << ROW_BITS) + i) for o, i in ddl])
        return rows.withColumn("_seg", F.size(F.filter(marks, lambda m: m < pos)))

    def summary(self, ddl: Sequence[Pos]) -> list[TableSummary]:
        if not ddl and self._whole is not None:
            return self._whole
        rows = self._aggregate(self._segments(ddl)).collect()
        return [s for seg in sorted({r["_seg"] for r in rows}) for s in _summaries([r for r in rows
                                                                                    if r["_seg"] == seg], seg)]

    @staticmethod
    def _aggregate(rows: Any) -> Any:
        """Per segment, table, primary key and column list: first and last offset, rows. A plain hash aggregate
        (arrays as grouping keys): a handful of rows per table, merged by _summaries; collect_set of arrays
        instead copies every row's arrays into per-group sets."""
        from pyspark.sql import functions as F

        return (rows.groupBy("_seg", "database", "table", "pk", "cols")
                .agg(F.min("offset").alias("first"), F.max("offset").alias("last"), F.count(F.lit(1)).alias("n")))

    def write(self, segment: int, ddl: Sequence[Pos], plans: dict[tuple[str, str], Plan]) -> list[Written]:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        name = F.concat_ws("\u0000", "database", "table")
        rows = (self._segments(ddl).where(F.col("_seg") == segment)
                .where(name.isin([f"{db}\u0000{t}" for db, t in plans])))
        # the source bucketed a table without a key by the event's columns; the lake's key is the columns it was
        # created with: rows naming others (after ADD COLUMN) are bucketed again, in Python (lakefiles.rebucket)
        keys = {k: p.key for k, p in plans.items() if not p.keyed}
        if keys:
            other = F.lit(False)
            for (db, t), key in keys.items():
                other = other | ((F.col("database") == db) & (F.col("table") == t) & F.col("cols").isNotNull()
                                 & (F.col("cols") != F.lit(columns_text(key))))
            rows = rows.where(~other).unionByName(rows.where(other).mapInArrow(rebucketer(keys), rows.schema))
        # (a live copy's chunk range goes to every bucket: any may hold a row of it)
        every = F.sequence(F.lit(0), F.lit(BUCKETS - 1))
        rows = rows.withColumn("_b", F.explode(F.when(F.col("op") == "copy_range", every).otherwise(
            F.array_distinct(F.filter(F.array("_bb", "_ba"), lambda b: b.isNotNull())))))
        with settings(self.spark, NO_BYTE_LIMIT):
            written = (rows.groupBy("database", "table", "_b")
                       .applyInArrow(group_writer(plans), from_arrow_schema(WRITTEN)).collect())
        return [_written(r) for r in written]

    def rewrite(self, jobs: list[Rewrite]) -> list[Written]:
        rdd = self.spark.sparkContext.parallelize(jobs, len(jobs))
        return [Written(**{**d, "removed": tuple(d["removed"])}) for d in rdd.map(_rewrite).collect()]


def _summaries(rows: list[Any], segment: int) -> list[TableSummary]:
    """The aggregate's rows of one segment -> one TableSummary per table."""
    found: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        s = found.setdefault((r["database"], r["table"]), [set(), set(), r["first"], r["last"], 0])
        s[0].add(tuple(r["pk"] or ()))
        s[1].add(tuple(json.loads(r["cols"])) if r["cols"] is not None else ())
        s[2], s[3], s[4] = min(s[2], r["first"]), max(s[3], r["last"]), s[4] + r["n"]
    return [TableSummary(segment, db, t, tuple(sorted(s[0])), tuple(sorted(s[1])), s[2], s[3], s[4])
            for (db, t), s in found.items()]


def _written(r: Any) -> Written:
    d = r.asDict()
    return Written(**{**d, "removed": tuple(d["removed"] or ())})
