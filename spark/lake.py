"""Stream the topic into Delta tables kept equal to the leader's tables.

    spark-submit spark/lake.py --profile producer.toml --lake DIR [--checkpoint DIR] [--once]
    python spark/lake.py ...   (local Spark)

One streaming query over the `mysql_cdc` source. Per source table: DIR/state/<db>/<table>
(the current rows) and DIR/changelog/<db>/<table> (every change). --once processes what the
topic holds now and exits 0; without it the job follows the topic until SIGINT/SIGTERM.
Exactly once across crashes: Spark's checkpoint (default DIR/_checkpoint) plus a tag in
every Delta commit (cdc_spark/lake.py). Exit codes: 0 done, 2 bad command line or
profile, 5 a change the lake cannot follow (the message names its offset).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc_spark import missing_extra

if (_missing := missing_extra()) is not None:  # before cdc_spark.lake imports them
    print(f"error: {_missing}", file=sys.stderr)
    sys.exit(2)

from cdc_spark.lake import Lake, apply_batch
from cdc_spark.options import DEFAULT_RECORDS_PER_BATCH
from cdc_spark.schema import TableSchema, read_tables
from cdc_spark.spill import clear
from cdc_spark.task_errors import task_error
from cdc_stream.console import describe_error
from cdc_stream.errors import ConfigError
from cdc_stream.profile import ProducerProfile, load_consumer_profile, load_producer_profile

# How a failed micro-batch ends (lake.py's BatchWriter: its offsets are recorded only once it is applied whole).
AGAIN = "the micro-batch is not recorded as done: fix the cause and run the job again, which starts from it"
SPILL_DIR = "_spill"  # under --lake: the executors reach it (they write the lake's files), and so does the driver


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see --help)."""
    p = argparse.ArgumentParser(prog="lake.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, type=Path, help="cdc-producer profile: [stream] and the leader")
    p.add_argument("--lake", required=True, type=Path, help="directory of the Delta tables")
    p.add_argument("--checkpoint", type=Path, help="Spark checkpoint directory (default LAKE/_checkpoint)")
    p.add_argument("--once", action="store_true", help="process what the topic holds now, then exit")
    p.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval when following")
    p.add_argument("--max-records-per-batch", type=int, default=DEFAULT_RECORDS_PER_BATCH,
                   help=f"log records per micro-batch (default {DEFAULT_RECORDS_PER_BATCH})")
    p.add_argument("--records-per-partition", type=int, help="log records per Spark partition")
    p.add_argument("--master", help="Spark master for python runs (default local[*]; spark-submit sets its own)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Leader:
    """information_schema of the profile's server, asked when a table or a column is new."""

    def __init__(self, database: Any):
        self.database = database

    def __call__(self, database: str, table: str) -> TableSchema | None:
        from cdc_stream.mysql import connect

        conn = connect(self.database, "leader")
        try:
            return read_tables(conn, [(database, table)]).get((database, table))
        finally:
            conn.close()


class ForEachBatch:
    """The foreachBatch function: one micro-batch into the lake. It runs in the driver, which plans and commits;
    the batch's rows stay on the executors, which write the data files (cdc_spark/lakespark.py)."""

    def __init__(self, lake: Lake, checkpoint: Path):
        self.lake, self.checkpoint = lake, checkpoint
        self.error: BaseException | None = None
        self.last_offset: int | None = None
        self.rows = 0
        self._query: str | None = None

    def query_id(self) -> str:
        """The query's id, kept in its checkpoint: the same after a restart, new for a new checkpoint."""
        if self._query is None:
            self._query = json.loads((self.checkpoint / "metadata").read_text())["id"]
        return self._query

    def __call__(self, df: Any, batch_id: int) -> None:
        from cdc_spark.lakespark import SparkEngine

        try:
            started = time.monotonic()
            before = self.lake.commits
            engine = SparkEngine(df)
            try:
                writer = apply_batch(self.lake, self.query_id(), batch_id, engine)
            finally:
                engine.close()
            if writer.rows:
                self.last_offset = writer.last_offset
                self.rows += writer.rows
                tables = len(writer.tables)
                writers = len(writer.writers)
                log(f"batch {batch_id}: {writer.rows} changes of {tables} table{'s' * (tables != 1)} up to offset "
                    f"{self.last_offset}, {self.lake.commits - before} Delta commits, files written by {writers} "
                    f"executor{'s' * (writers != 1)}, {time.monotonic() - started:.2f} s (reading and planning "
                    f"{writer.seconds['read']:.2f} s, executors' writes {writer.seconds['write']:.2f} s, "
                    f"driver's commits {writer.seconds['commit']:.2f} s)")
        except BaseException as e:
            self.error = e
            raise


def leader_profile(path: Path) -> ProducerProfile:
    """The cdc-producer profile: its [database] is the leader, whose column types the lake takes. A cdc-consumer
    profile (accepted by the `mysql_cdc` source) is refused: its [database] is the follower."""
    try:
        return load_producer_profile(path)
    except ConfigError as producer_error:
        try:
            load_consumer_profile(path)
        except ConfigError:
            raise producer_error from None
        raise ConfigError(f"{path}: a cdc-consumer profile; pass the cdc-producer profile with --profile (the lake "
                          "takes column types from its [database], the leader)") from None


def make_directories(directories: list[tuple[str, Path]]) -> None:
    """Create each (option, directory) with its parents; ConfigError naming the option when one cannot be
    (a file in the way is found before anything is created)."""
    for option, directory in directories:
        if directory.exists() and not directory.is_dir():
            raise ConfigError(f"{option} {directory} is a file, not a directory; choose another {option}")
    for option, directory in directories:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{option} {directory}: cannot create the directory ({e.strerror or e}); "
                              f"choose another {option}") from None


def run(args: argparse.Namespace, at_window: Callable[[str], None] | None = None) -> int:
    """The job; `at_window`: Lake.at_window (tests' crash injection, tests/lake_crash.py)."""
    from cdc_spark.session import builder, prepare_local

    profile = leader_profile(args.profile)  # bad profiles and directories stop here, before Spark starts
    checkpoint = (args.checkpoint or args.lake / "_checkpoint").resolve()
    spill_dir = args.lake.resolve() / SPILL_DIR  # a file there would fail every read task
    make_directories([("--lake", args.lake), ("--lake", spill_dir), ("--checkpoint", checkpoint)])
    lake = Lake(args.lake.resolve(), Leader(profile.database), at_window=at_window)
    prepare_local(args.master)
    spark = builder("mysql-cdc lake", args.master, job_defaults=True).getOrCreate()  # executors' GC, the JIT
    try:
        return follow(args, spark, lake, checkpoint, spill_dir)
    finally:
        try:  # before the JVM's exit hooks: local-cluster's workers then start no executor again (0.9 s, an error)
            spark.stop()
        except Exception:  # the job's own outcome stands; the exit hooks stop what is left
            pass


def follow(args: argparse.Namespace, spark: Any, lake: Lake, checkpoint: Path, spill_dir: Path) -> int:
    """The streaming query on a started session, until the topic is read (--once) or a signal stops it."""
    from cdc_spark import register
    from cdc_spark.lakespark import warm_workers
    from cdc_spark.session import quiet_query_failures

    if not args.debug:
        quiet_query_failures(spark)
    warm_workers(spark)  # beside the data source's lookup and planning below
    register(spark)
    clear(str(spill_dir))  # a batch's rows left by a job that died between its passes
    reader = (spark.readStream.format("mysql_cdc").option("profile", str(args.profile.resolve()))
              .option("images", "lake").option("spillPath", str(spill_dir)))
    reader = reader.option("maxRecordsPerBatch", str(args.max_records_per_batch))
    if args.records_per_partition:
        reader = reader.option("recordsPerPartition", str(args.records_per_partition))
    handler = ForEachBatch(lake, checkpoint)
    writer = reader.load().writeStream.foreachBatch(handler).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if args.once else writer.trigger(
        processingTime=f"{int(args.trigger_seconds * 1000)} milliseconds")
    query = writer.start()
    stopping = []

    def stop(signum: int, frame: Any) -> None:
        stopping.append(signum)
        query.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"streaming into {args.lake} (checkpoint {checkpoint})")
    try:
        query.awaitTermination()
    except Exception:
        if handler.error is not None:
            raise handler.error from None
        raise
    if handler.error is not None:
        raise handler.error
    tables = len(lake.tracked())
    log(f"lake up to date: {tables} table{'s' * (tables != 1)}, {handler.rows} changes this run"
        + (f", last offset {handler.last_offset}" if handler.last_offset is not None else ""))
    return 0


def main(argv: list[str] | None = None, at_window: Callable[[str], None] | None = None) -> int:
    """Parse, run; one `error: ...` line on failure."""
    args = parse_args(argv)
    try:
        return run(args, at_window)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        message, code = describe_error(task_error(e, AGAIN))  # the CLIs' one path from an exception to its message
        log(f"error: {message}")
        return code


if __name__ == "__main__":
    sys.exit(main())
