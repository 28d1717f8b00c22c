"""The lake's Engine on Spark: a micro-batch's rows stay on the executors, which write the data files.

The batch is the `mysql_cdc` source read with option spillPath (cdc_spark/spill.py): its read tasks spill the lake
rows of their log ranges to Arrow files and return only an index of them, which the driver collects (the batch's
one pass over the topic). Each segment's (table, bucket) groups are then one Spark task each, given the names of
their record batches: they read them and write the lake's files (cdc_spark/lakefiles.apply_group), and return one
small Written per file. Only file names and those Written cross the JVM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cdc_spark.lake import SpilledEngine
from cdc_spark.spill import SpillIndex, packed, remove_files


def each(function: Callable[[Any], Any], bundle: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """A bundle's items, one after the other (runs on an executor)."""
    return [(i, function(item)) for i, item in bundle]


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

    def map(self, function: Callable[[Any], Any], items: list[Any], weights: list[int] | None = None) -> list[Any]:
        """The items in one Spark task per core at most, bundled by weight (spill.packed); results in order."""
        if not items:
            return []
        bundles = packed(weights or [1] * len(items), self.spark.sparkContext.defaultParallelism)
        jobs = [[(i, items[i]) for i in bundle] for bundle in bundles]
        done = self.spark.sparkContext.parallelize(jobs, len(jobs)).map(functools.partial(each, function)).collect()
        return [result for _, result in sorted((pair for found in done for pair in found), key=lambda p: p[0])]

    def close(self) -> None:
        if self.index is not None:
            remove_files(self.index.files)
