"""The `mysql_cdc` Spark data source (pyspark's Python Data Source API): batch and streaming.

Offsets are log offsets (cdc_stream.layout: the one topic's, or the transaction topic's
with per-table topics), kept by Spark in the query's checkpoint as {"offset": N}. A
micro-batch is a range of them, cut into partitions of `recordsPerPartition` records that
executors read on their own (reading.transactions: each range owns the transactions that
start in it), so a batch re-planned after a crash reads exactly the same rows.

With per-table topics and a choice of tables, executors read only the chosen tables' topics
(and their databases' DDL topics), each topic's spans its own partitions, so the tables are
read in parallel (`TopicOffsets`). The driver reads the transaction records of the batch's
log range to learn which spans of those topics are committed; the log offset stays what the
batch is, so a re-planned batch reads the same rows here too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from cdc_spark.convert import ImageConverter
from cdc_spark.options import SourceOptions, parse_options
from cdc_spark.reading import Span, complete_end, span_events, topic_spans, transactions
from cdc_spark.rows import GENERIC_IMAGE, RowBuilder, lake_schema, output_schema, record_batches
from cdc_spark.schema import TableSchema, read_tables
from cdc_spark.spill import INDEX, spill
from cdc_stream.errors import ConfigError, TopicNotFound
from cdc_stream.layout import Layout
from cdc_stream.topics import open_stream

if TYPE_CHECKING:
    from cdc_stream.layout import LogReader

NAME = "mysql_cdc"


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One partition: the transactions that start at log offsets [start, end)."""

    start: int
    end: int


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One partition of a read by table topics: these committed spans of one table topic."""

    topic: str
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class TopicOffsets:
    """A streaming offset of a read by table topics: the log offset (the transaction topic's:
    what the micro-batch is) and, per table topic read, the offset after its last committed event
    read so far (where each topic stands; the partitions come from the log range).

    Spark keeps it as a JSON object of topic -> offset; {"offset": N}, the offset of a read
    through the log (a checkpoint from before), is read as the log offset N."""

    log_topic: str
    log: int
    topics: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, int]:
        """The JSON object Spark stores."""
        return {self.log_topic: self.log, **dict(self.topics)}

    @classmethod
    def of(cls, log_topic: str, stored: dict[str, int]) -> TopicOffsets:
        """The offset from its JSON object (either form)."""
        if log_topic not in stored and "offset" in stored:
            return cls(log_topic, int(stored["offset"]))
        if log_topic not in stored:
            raise ConfigError(f"mysql_cdc: the checkpoint's offset {stored} names no log topic '{log_topic}'; the "
                              "profile's [stream] changed since the checkpoint was written: use a new checkpoint")
        return cls(log_topic, int(stored[log_topic]),
                   tuple(sorted((k, int(v)) for k, v in stored.items() if k != log_topic)))

    def advanced(self, log: int, spans: dict[str, list[Span]]) -> TopicOffsets:
        """The offset after reading `spans` up to log offset `log`."""
        topics = dict(self.topics)
        for name, found in spans.items():
            if found:
                topics[name] = found[-1].first + found[-1].count
        return TopicOffsets(self.log_topic, log, tuple(sorted(topics.items())))


def table_schema(options: SourceOptions) -> TableSchema | None:
    """The typed table's columns from information_schema (None: generic images)."""
    chosen = options.typed_table
    if chosen is None or options.database is None:
        return None
    from cdc_stream.mysql import connect

    conn = connect(options.database, "server holding the table schema")
    try:
        found = read_tables(conn, [chosen]).get(chosen)
    finally:
        conn.close()
    if found is None:
        raise ConfigError(f"mysql_cdc: table {chosen[0]}.{chosen[1]} does not exist on "
                          f"{options.database.ip_or_host}:{options.database.port}; check option 'table'")
    return found


class _Log:
    """The log of the options' stream, opened on first use (in whichever process reads: `where`)."""

    def __init__(self, options: SourceOptions, where: str = "driver"):
        self.options, self.where = options, where
        self.layout = Layout.of(options.stream)
        self._stream: Any = None
        self._reader: LogReader | None = None
        self._spans: tuple[tuple[int, int], dict[str, list[Span]]] | None = None

    @property
    def reader(self) -> LogReader:
        if self._reader is None:
            try:
                self._stream = open_stream(self.options.stream, create=False)
            except TopicNotFound as e:
                if self.options.stream.backend == "fluvio":
                    raise
                import socket

                raise ConfigError(f"mysql_cdc: {e} (looked for on host {socket.gethostname()}, by the Spark "
                                  f"{self.where}); the embedded topic is a SQLite file that one host reads: run the "
                                  "driver and every executor on the host that holds it (master local[*], "
                                  "local-cluster, or a one-host standalone cluster), or publish to Fluvio") from None
            self._reader = self.layout.reader(self._stream, raw_images=self.options.lake)
        return self._reader

    @property
    def topics(self) -> frozenset[str] | None:
        """The table topics a read of the chosen tables needs (None: read through the log): each table's, and
        each of their databases' (its own DDL, and statements naming several tables)."""
        if not self.layout.per_table or self.options.tables is None:
            return None
        return frozenset(self.layout.table_topic(db, t) for db, t in self.options.tables) | frozenset(
            self.layout.table_topic(db, None) for db, _ in self.options.tables)

    def spans(self, start: int, end: int) -> dict[str, list[Span]]:
        """The chosen topics' committed spans of log range [start, end) (the last range's kept: a micro-batch
        asks for its range twice, for its end offset and for its partitions)."""
        assert self.topics is not None
        if self._spans is None or self._spans[0] != (start, end):
            self._spans = ((start, end), topic_spans(self.reader, start, end, self.topics))
        return self._spans[1]

    def complete_end(self) -> int:
        """The log's complete end, its records made durable first: a batch ending there is not undone by a
        crash of the machine under the producer (Topic.durable)."""
        end = complete_end(self.reader, self.layout.per_table)
        self.reader.durable(end)
        return end

    def resolve(self, offset: str | int) -> int:
        """"earliest" / "latest" / a number -> a log offset."""
        if offset == "earliest":
            return 0
        if offset == "latest":
            return self.complete_end()
        return int(offset)

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "where": self.where, "layout": self.layout, "_stream": None,
                "_reader": None, "_spans": None}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._stream is not None:
            self._stream.close()
        self._reader = self._stream = None
        self._spans = None


def plan(start: int, end: int, per_partition: int, sizes: list[int] | None = None,
         bytes_per_partition: int | None = None) -> list[OffsetRange]:
    """[start, end) cut into ranges of at most `per_partition` log records; with the records' `sizes`, also
    of at most `bytes_per_partition` bytes (a record bigger than that is a range of its own)."""
    if end <= start:
        return []
    if sizes is None or bytes_per_partition is None or len(sizes) != end - start:
        n = math.ceil((end - start) / per_partition)
        cuts = [start + (end - start) * i // n for i in range(n + 1)]
        return [OffsetRange(a, b) for a, b in itertools.pairwise(cuts)]
    ranges, first, used = [], start, 0
    for offset, size in enumerate(sizes, start):
        if offset > first and (used + size > bytes_per_partition or offset - first >= per_partition):
            ranges.append(OffsetRange(first, offset))
            first, used = offset, 0
        used += size
    ranges.append(OffsetRange(first, end))
    return ranges


def plan_topics(spans: dict[str, list[Span]], per_partition: int) -> list[TopicRange]:
    """Each topic's spans cut into partitions of about `per_partition` events (a transaction's span is never
    cut: a bigger one is a partition of its own)."""
    ranges = []
    for topic in sorted(spans):
        taken: list[Span] = []
        events = 0
        for span in spans[topic]:
            if taken and events + span.count > per_partition:
                ranges.append(TopicRange(topic, tuple(taken)))
                taken, events = [], 0
            taken.append(span)
            events += span.count
        if taken:
            ranges.append(TopicRange(topic, tuple(taken)))
    return ranges


def plan_log(log: _Log, start: int, end: int) -> list[OffsetRange] | list[TopicRange]:
    """The partitions of [start, end): by bytes where the topic knows its records' sizes, else by records;
    by table topics when the read needs only some of them."""
    opts = log.options
    if log.topics is not None:
        if opts.spill is not None:
            raise ConfigError("mysql_cdc: spillPath reads through the log, not by table topics; drop option 'tables'")
        return plan_topics(log.spans(start, end), opts.records_per_partition)
    sizes = log.reader.value_sizes(start, end) if end > start else None
    per_partition, bytes_per_partition = opts.records_per_partition, opts.bytes_per_partition
    if opts.rows_per_partition is not None and end > start:
        rows, size = sample_rows(log.reader, start, end, sizes)
        if sizes is not None:
            bytes_per_partition = max(1, round(opts.rows_per_partition * size / max(rows, 1)))
        else:
            per_partition = max(1, min(per_partition, round(opts.rows_per_partition * size / max(rows, 1))))
    return plan(start, end, per_partition, sizes, bytes_per_partition)


ROW_SAMPLE = 64  # log records decoded to estimate the rows of a range (rowsPerPartition)


def sample_rows(reader: LogReader, start: int, end: int, sizes: list[int] | None) -> tuple[int, int]:
    """(output rows, bytes) of up to ROW_SAMPLE records spread over [start, end); without `sizes`, (rows,
    records). The topic stores no row count, and decoding every record on the driver would read the range
    twice: a sample tells the rows a byte holds in this range's workload."""
    step = max(1, (end - start) // ROW_SAMPLE)
    rows = size = 0
    for offset in range(start, end, step):
        for rec in reader.read(offset, wait=0.0, max_records=1)[:1]:
            rows += sum(max(1, len(ev.rows or ())) for ev in rec.events())
            size += sizes[rec.offset - start] if sizes is not None else 1
    return rows, size


def read_range(options: SourceOptions, schema: TableSchema | None,
               part: InputPartition) -> Iterator[pa.RecordBatch]:
    """The output rows of one partition (runs on an executor)."""
    if isinstance(part, TopicRange):
        yield from read_topic_range(options, schema, part)
        return
    assert isinstance(part, OffsetRange)
    log = _Log(options, "executor")
    try:
        builder = RowBuilder(options.tables, ImageConverter(schema) if schema is not None else None, options.lake)
        txns = transactions(log.reader, part.start, part.end, log.layout.per_table,
                            include_incomplete=options.include_incomplete)
        if options.spill is not None:
            yield from spill(record_batches(txns, builder), builder.schema, options.spill, f"{part.start}-{part.end}")
        else:
            yield from record_batches(txns, builder)
    finally:
        log.close()


def read_topic_range(options: SourceOptions, schema: TableSchema | None,
                     part: TopicRange) -> Iterator[pa.RecordBatch]:
    """The output rows of one table topic's partition (runs on an executor)."""
    log = _Log(options, "executor")
    log.reader  # noqa: B018  (opens the stream, with the error naming the host when it is not there)
    topic = log._stream.topic(part.topic)
    try:
        builder = RowBuilder(options.tables, ImageConverter(schema) if schema is not None else None, options.lake)
        yield from record_batches(span_events(topic, part.spans, raw_images=options.lake), builder)
    finally:
        topic.close()
        log.close()


class MysqlCdcDataSource(DataSource):
    """spark.read / spark.readStream .format("mysql_cdc").option("profile", ...)."""

    def __init__(self, options: dict[str, str]):
        super().__init__(options)
        self.parsed = parse_options(options)
        self._table: TableSchema | None = None
        self._looked_up = False

    @classmethod
    def name(cls) -> str:
        return NAME

    def table(self) -> TableSchema | None:
        if not self._looked_up:
            self._table, self._looked_up = table_schema(self.parsed), True
        return self._table

    def schema(self) -> StructType:
        if self.parsed.spill is not None:
            return from_arrow_schema(INDEX)
        if self.parsed.lake:
            return from_arrow_schema(lake_schema())
        table = self.table()
        return from_arrow_schema(output_schema(table.arrow_struct() if table else GENERIC_IMAGE))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(self.parsed, self.table())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(self.parsed, self.table())


class BatchReader(DataSourceReader):
    """A batch read of [startingOffset, endingOffset)."""

    def __init__(self, options: SourceOptions, table: TableSchema | None):
        self.options, self.table = options, table

    def partitions(self) -> Sequence[InputPartition]:
        log = _Log(self.options)
        try:
            start, end = log.resolve(self.options.starting), log.resolve(self.options.ending)
            log_end = log.reader.end_offset()
            if start <= end <= log_end:
                ranges = plan_log(log, start, end)
        finally:
            log.close()
        if end > log_end:
            raise ConfigError(f"mysql_cdc: endingOffset {end} is past the end of the log ({log_end}); give an offset "
                              "up to it, or \"latest\"")
        if start > end:
            until = "endingOffset" if isinstance(self.options.ending, int) else "the last complete transaction's end"
            raise ConfigError(f"mysql_cdc: startingOffset {start} is past {until} ({end}); "
                              "give a smaller startingOffset")
        # Spark reads one partition of its own when given none: an empty range reads nothing
        return ranges or [OffsetRange(start, start)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, self.table, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the log; ends only after whole transactions."""

    def __init__(self, options: SourceOptions, table: TableSchema | None):
        self.options, self.table = options, table
        self._log = _Log(options)
        self._target: int | None = None  # Trigger.AvailableNow: the end at the query's start

    def _offset(self, stored: dict[str, int]) -> int:
        """The log offset of a stored offset (either form, whichever the read is now: a query that drops or
        adds option `tables` resumes at the same log offset)."""
        if self._log.topics is None and "offset" in stored:
            return int(stored["offset"])
        return TopicOffsets.of(self._log.layout.log_topic, stored).log

    def _stored(self, start: dict[str, int], end: int) -> dict[str, int]:
        """The offset to store for log offset `end`, read from `start`."""
        if self._log.topics is None:
            return {"offset": end}
        first = TopicOffsets.of(self._log.layout.log_topic, start)
        return first.advanced(end, self._log.spans(first.log, end)).to_json()

    def initialOffset(self) -> dict[str, int]:
        start = self._log.resolve(self.options.starting)
        if self._log.topics is None:
            return {"offset": start}
        topics = sorted((t, 0) for t in self._log.topics) if start == 0 else []
        return TopicOffsets(self._log.layout.log_topic, start, tuple(topics)).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_records) if self.options.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._log.complete_end()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        first = self._offset(start)
        end = self._target if self._target is not None else self._log.complete_end()
        if isinstance(limit, ReadMaxRows):
            end = min(end, first + limit.max_rows)
        return self._stored(start, max(first, end))

    def reportLatestOffset(self) -> dict[str, int] | None:
        end = self._log.reader.end_offset()
        return {"offset": end} if self._log.topics is None else {self._log.layout.log_topic: end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return plan_log(self._log, self._offset(start), self._offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, self.table, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the log keeps its records (Spark's checkpoint holds the position)."""

    def stop(self) -> None:
        self._log.close()

