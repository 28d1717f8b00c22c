"""The lake's Engine on Spark: a micro-batch's rows stay on the executors, which write the data files.

Per batch, over the batch's DataFrame (persisted on the executors, read from the source once):
the DDL rows are collected (few), a per-(segment, table) aggregate is collected (keys, column
lists, counts: one row per table), and per segment one grouped pass
`groupBy(database, table, _cdc_bucket).applyInArrow(...)` writes the files
(cdc_spark/lakefiles.apply_group) and returns their actions, one small row per file. The bucket
is computed in Spark SQL exactly as lakefiles.bucket_of computes it in Python:
pmod(crc32(key text), BUCKETS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cdc_spark.lake import META, Change_, Pos, TableSummary
from cdc_spark.lakefiles import BUCKETS, KEY_SEPARATOR, WRITTEN, Plan, Rewrite, Written, apply_group, rewrite_file

ROW_BITS = 32  # a row's position as one long: offset << 32 | row_index


def group_writer(plans: dict[tuple[str, str], Plan]) -> Any:
    """The applyInArrow function: one (table, bucket) group -> its Written rows (runs on an executor).

    A plain function without annotations: pyspark 4.3 infers the UDF kind from type hints and fails on
    callable objects and on hints it does not know."""
    def write(key, rows):  # type: ignore[no-untyped-def]
        database, table, bucket = (k.as_py() for k in key)
        written = apply_group(plans[(database, table)], bucket, rows)
        return pa.Table.from_pylist([w.row() for w in written], schema=WRITTEN)
    return write


def _rewrite(job: Rewrite) -> dict[str, Any]:
    return rewrite_file(job).row()


class SparkEngine:
    """The micro-batch DataFrame of the lake's foreachBatch."""

    def __init__(self, df: Any):
        from pyspark import StorageLevel

        self.df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.spark = df.sparkSession

    def close(self) -> None:
        self.df.unpersist()

    def ddl(self) -> list[Change_]:
        rows = self.df.where("op = 'ddl'").select("offset", "row_index", "ddl", *META).collect()
        return sorted((Change_(r["offset"], r["row_index"], "ddl", {k: r[k] for k in META}, r["ddl"]) for r in rows),
                      key=lambda c: c.pos)

    def _segments(self, ddl: Sequence[Pos]) -> Any:
        from pyspark.sql import functions as F

        rows = self.df.where("op <> 'ddl'")
        if not ddl:
            return rows.withColumn("_seg", F.lit(0))
        pos = F.col("offset") * F.lit(1 << ROW_BITS) + F.col("row_index")
        marks = F.array(*[F.lit((o << ROW_BITS) + i) for o, i in ddl])
        return rows.withColumn("_seg", F.size(F.filter(marks, lambda m: m < pos)))

    def summary(self, ddl: Sequence[Pos]) -> list[TableSummary]:
        from pyspark.sql import functions as F

        found = (self._segments(ddl).groupBy("_seg", "database", "table")
                 .agg(F.collect_set("pk").alias("pks"),
                      F.collect_set(F.map_keys(F.coalesce("after", "before"))).alias("cols"),
                      F.min("offset").alias("first"), F.max("offset").alias("last"),
                      F.count(F.lit(1)).alias("n"))
                 .collect())
        return [TableSummary(r["_seg"], r["database"], r["table"], tuple(tuple(p or ()) for p in r["pks"]),
                             tuple(tuple(c) for c in r["cols"]), r["first"], r["last"], r["n"]) for r in found]

    def write(self, segment: int, ddl: Sequence[Pos], plans: dict[tuple[str, str], Plan]) -> list[Written]:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        name = F.concat_ws("\u0000", "database", "table")
        keys = F.create_map(*[x for (db, t), plan in plans.items()
                              for x in (F.lit(f"{db}\u0000{t}"), F.array(*[F.lit(k) for k in plan.key]))])
        key = F.element_at(keys, name)

        def bucket(image: str) -> Any:
            text = F.concat_ws(KEY_SEPARATOR, F.transform(key, lambda k: F.coalesce(F.try_element_at(image, k),
                                                                                    F.lit(""))))
            return F.when(F.col(image).isNull(), F.lit(None)).otherwise(
                F.pmod(F.crc32(F.encode(text, "UTF-8")), F.lit(BUCKETS)).cast("int"))

        rows = (self._segments(ddl).where(F.col("_seg") == segment)
                .where(name.isin([f"{db}\u0000{t}" for db, t in plans]))
                .withColumn("_bb", bucket("before")).withColumn("_ba", bucket("after")))
        # (a live copy's chunk range goes to every bucket: any may hold a row of it)
        every = F.sequence(F.lit(0), F.lit(BUCKETS - 1))
        rows = rows.withColumn("_b", F.explode(F.when(F.col("op") == "copy_range", every).otherwise(
            F.array_distinct(F.filter(F.array("_bb", "_ba"), lambda b: b.isNotNull())))))
        written = (rows.groupBy("database", "table", "_b")
                   .applyInArrow(group_writer(plans), from_arrow_schema(WRITTEN)).collect())
        return [_written(r) for r in written]

    def rewrite(self, jobs: list[Rewrite]) -> list[Written]:
        rdd = self.spark.sparkContext.parallelize(jobs, len(jobs))
        return [Written(**{**d, "removed": tuple(d["removed"])}) for d in rdd.map(_rewrite).collect()]


def _written(r: Any) -> Written:
    d = r.asDict()
    return Written(**{**d, "removed": tuple(d["removed"] or ())})
