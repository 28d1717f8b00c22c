"""The lake's Engine on Spark: a micro-batch's rows stay on the executors, which write the data files.

The batch is the `mysql_cdc` source read with option spillPath (cdc_spark/spill.py): its read tasks spill the lake
rows of their log ranges to Arrow files and return only an index of them, which the driver collects (the batch's
one pass over the topic). Each segment's (table, bucket) groups then run in one Spark task per core (bundled by
rows), given the names of their record batches: they read them and write the lake's files
(cdc_spark/lakefiles.apply_group), and return one small Written per file. Only file names and those Written cross
the JVM (pickled: the driver's own objects).
"""

from __future__ import annotations

import importlib
import pickle
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from cdc_spark.lake import SpilledEngine
from cdc_spark.spill import SpillIndex, packed, remove_files

RESULT = pa.schema([("result", pa.binary())])


def bundle_runner(function: Callable[[Any], Any], bundles: list[list[tuple[int, Any]]]) -> Any:
    """The mapInArrow function: each row's bundle (its id) run item by item, the (index, result) pairs pickled
    (runs on an executor). A plain function without annotations: pyspark infers the UDF kind from type hints."""
    def run(batches):  # type: ignore[no-untyped-def]
        for batch in batches:
            for k in batch.column(0).to_pylist():
                done = [(i, function(item)) for i, item in bundles[k]]
                yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(done)]}, schema=RESULT)
    return run


def _warm(batches):  # type: ignore[no-untyped-def]
    """warm_workers' mapInArrow function (on an executor): the modules of the batches' read and write tasks,
    imported into the Python worker that will run them. No annotations: pyspark infers a UDF's kind from them."""
    for name in ("cdc_spark.source", "cdc_spark.spill", "cdc_spark.lakefiles"):
        importlib.import_module(name)
    yield from batches


def warm_workers(spark: Any) -> threading.Thread:
    """Start each executor's Python worker, its modules imported, in a job of one task per core run beside
    the driver's own start (the data source's lookup and planning in Python processes of the driver: seconds
    on one core), so that the first batch finds them started: 1.3-2.2 s from launch on 2 cores (bench/README.md,
    "The start-up"). A daemon thread; a failed warm-up only loses the head start: the batch's own tasks start
    the workers then and report what fails."""
    def run() -> None:
        try:
            n = spark.sparkContext.defaultParallelism
            spark.range(n, numPartitions=n).mapInArrow(_warm, "id long").collect()
        except Exception:  # a lost head start only (the docstring)
            pass

    thread = threading.Thread(target=run, name="warm-workers", daemon=True)
    thread.start()
    return thread


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
        """The items in one Spark task per core at most, bundled by weight (spill.packed); results in order.

        A mapInArrow over one row per bundle, not an RDD: its tasks run in the Python workers the batch's read
        started (an RDD job starts a daemon and workers of its own in every executor, ~1-2 CPU s each)."""
        if not items:
            return []
        bundles = [[(i, items[i]) for i in bundle]
                   for bundle in packed(weights or [1] * len(items), self.spark.sparkContext.defaultParallelism)]
        done = (self.spark.range(len(bundles), numPartitions=len(bundles))
                .mapInArrow(bundle_runner(function, bundles), "result binary").collect())
        pairs = [pair for row in done for pair in pickle.loads(row["result"])]
        return [result for _, result in sorted(pairs, key=lambda p: p[0])]

    def close(self) -> None:
        if self.index is not None:
            remove_files(self.index.files)
