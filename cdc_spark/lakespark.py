"""The lake's Engine on Spark: a micro-batch's rows stay on the executors, which write the data files.

The batch is the `mysql_cdc` source read with option spillPath (cdc_spark/spill.py): its read tasks spill the lake
rows of their log ranges to Arrow files and return only an index of them, which the driver collects (the batch's
one pass over the topic). Each segment's (table, bucket) groups are then one Spark task each, given the names of
their record batches: they read them and write the lake's files (cdc_spark/lakefiles.apply_group), and return one
small Written per file. Only file names and those Written cross the JVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdc_spark.lake import SpilledEngine
from cdc_spark.spill import SpillIndex, remove_files


class SparkEngine(SpilledEngine):
    """The micro-batch DataFrame of the lake's foreachBatch (the spilled source's index)."""

    def __init__(self, df: Any):
        self.df = df
        self.spark = df.sparkSession
        self.index: SpillIndex | None = None

    def _index(self) -> SpillIndex:
        if self.index is None:  # the batch's read: its tasks spill the rows (the first thing BatchWriter.run asks)
            self.index = SpillIndex([r.asDict() for r in self.df.collect()])
        return self.index

    def map(self, function: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """One Spark task per item (groups and rewrites are few, and each is a file's worth of work)."""
        if not items:
            return []
        found: list[Any] = self.spark.sparkContext.parallelize(items, len(items)).map(function).collect()
        return found

    def close(self) -> None:
        if self.index is not None:
            remove_files(self.index.files)
