"""The topic layout: where change events go and how they are read back, in one place.

Two layouts, chosen by `[stream] topic`:

- **One topic** (`topic = "rust-mysql-cdc"`): every event is one record, in source order; the
  topic is also the log a consumer follows and the producer resumes from.
- **One topic per table** (`topic = "{database}_{table}"`): row events go to their table's
  topic, DDL naming one table to that table's topic and database-level DDL to a topic named
  after the database. Every source transaction also gets one record on the *transaction topic*
  (like Debezium's transaction metadata) naming, per topic, the offsets of its events. It is
  written last, so it is the transaction's commit mark: the transaction topic is the log, and
  a reader following it replays the table topics in exact source commit order and never sees a
  half-published transaction.

The producer writes through `Layout.writer()`, the consumer, the Spark audit and `cdc-topic`
read through `Layout.reader()`: a `LogRecord` per record of the log, whose `events()` are the
change events it stands for. The producer finds where to resume with `LogReader.tail()`.
"""

from __future__ import annotations

import abc
import heapq
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from cdc_stream.classify import statement_of
from cdc_stream.errors import DataError
from cdc_stream.events import ChangeEvent, MalformedEvent, decode_event
from cdc_stream.positions import BinlogFile, TxnEnd, typed_markers
from cdc_stream.topics.base import Stream, Topic

if TYPE_CHECKING:
    from cdc_stream.profile import Stream as StreamSettings

READ_BATCH = 500  # records per read of a table topic while merging one transaction
READ_WAIT = 0.5  # seconds a table topic read waits for records the transaction record names
_FLUVIO_INVALID = re.compile(r"[^a-z0-9-]+")

Finish = Callable[[], None]  # the part of an append that may complete in another thread (Topic.stage)


def check_template(template: str) -> str | None:
    """None when a [stream] topic (template) only uses {database} and {table}; else what is wrong."""
    try:
        template.format(database="d", table="t")
    except (KeyError, IndexError, ValueError) as e:
        return f"topic template {template!r} may only use {{database}} and {{table}} ({type(e).__name__}: {e})"
    return None


def fluvio_name(name: str) -> str:
    """Fluvio topic names are lowercase letters, digits and '-': flvDb_pet -> flvdb-pet."""
    return _FLUVIO_INVALID.sub("-", name.lower()).strip("-") or "mysql"


@dataclass(frozen=True)
class Layout:
    """The layout a profile's [stream] section describes."""

    topic: str  # a topic name, or a per-table template with {database}/{table}
    transaction_topic: str = "mysql-cdc-transactions"
    fluvio: bool = False  # table topic names follow Fluvio's rules

    @classmethod
    def of(cls, settings: StreamSettings) -> Layout:
        """The layout of a [stream] section."""
        return cls(settings.topic, settings.transaction_topic, settings.backend == "fluvio")

    @property
    def per_table(self) -> bool:
        """Whether each table has its own topic (the [stream] topic is a template)."""
        return "{" in self.topic

    @property
    def log_topic(self) -> str:
        """The topic whose offsets order everything: what a consumer follows and the producer resumes from."""
        return self.transaction_topic if self.per_table else self.topic

    def topic_for(self, event: ChangeEvent) -> str:
        """The topic an event is written to."""
        if not self.per_table:
            return self.topic
        db, table = event.schema, event.table
        if event.operation == "Query":
            targets = statement_of(event).targets
            tables = {(d, t) for d, t in targets if t is not None}
            if len(tables) == 1:  # DDL of one table goes with that table's rows
                db, table = tables.pop()
            else:
                db = event.database or next((d for d, _ in targets if d), None) or db
        return self.table_topic(db, table)

    def table_topic(self, database: str | None, table: str | None) -> str:
        """The topic of a table's rows and DDL (per-table layout); table None: the topic of the
        database's own DDL (and of statements naming several tables)."""
        name = self.topic.format(database=database or "", table=table) if table else (database or "mysql")
        return fluvio_name(name) if self.fluvio else name

    def writer(self, stream: Stream) -> LogWriter:
        """The producer's side: creates the log topic; table topics are created as events reach them."""
        stream.create(self.log_topic)
        log = stream.topic(self.log_topic)
        return PerTableWriter(self, stream, log) if self.per_table else SingleTopicWriter(log)

    def reader(self, stream: Stream, lazy_rows: bool = False, raw_images: bool = False,
               typed_inserts: int = 0) -> LogReader:
        """The reading side (raises TopicNotFound when the log topic does not exist); `lazy_rows`:
        decode_event's, for a reader that replays binlog events; `raw_images`: decode_event's, the lake's;
        `typed_inserts`: decode_event's, for a reader sending inserts in bulk."""
        log = stream.topic(self.log_topic)
        return (PerTableReader(stream, log, lazy_rows, raw_images, typed_inserts) if self.per_table
                else LogReader(log, lazy_rows, raw_images, typed_inserts))


# -- the transaction topic's records --------------------------------------------------------


class TxnRecord(msgspec.Struct, omit_defaults=True):
    """One source transaction on the transaction topic: where its events are and where to resume after it."""

    txn: str
    sequence: list[int]  # [first, last] event sequence numbers
    topics: dict[str, list[int]]  # topic -> [first offset, event count]
    gtid: str | None = None
    gtid_set: str | None = None
    bn_file: BinlogFile | None = None  # as in change events
    server_uuid: str | None = None
    snapshot: Any = None  # positions.SnapshotTag | SnapshotProgress (JSON object when decoded)
    windows: Any = None  # positions.Windows (JSON object when decoded)
    xa_pending: Any = None  # positions.XaPending (JSON array when decoded)
    copying: Any = None  # positions.Copying (JSON object when decoded)

    @classmethod
    def of(cls, first_sequence: int, last: ChangeEvent, placed: dict[str, list[int]]) -> TxnRecord:
        """The record of a transaction from its first event's sequence, its last event and its placement."""
        return cls(txn=last.txn.id if last.txn else "", sequence=[first_sequence, last.sequence], topics=placed,
                   gtid=last.gtid, gtid_set=last.gtid_set, bn_file=last.bn_file, server_uuid=last.server_uuid,
                   snapshot=last.snapshot, windows=last.windows, xa_pending=last.xa_pending or None,
                   copying=last.copying or None)

    def txn_end(self) -> TxnEnd:
        """The resume fields of the transaction; raises MalformedEvent when they are not valid."""
        try:
            markers = typed_markers(self.snapshot, self.windows, self.xa_pending, self.copying)
        except msgspec.ValidationError as e:
            raise MalformedEvent(f"invalid snapshot, windows, xa_pending or copying field: {e}") from None
        return TxnEnd(self.sequence[1], self.txn, self.gtid_set, self.bn_file, self.server_uuid, *markers)


def encode_txn(record: TxnRecord) -> bytes:
    """A transaction record as its JSON line."""
    return msgspec.json.encode(record)


def decode_txn(data: bytes) -> TxnRecord:
    """Parse a transaction-topic record; raises MalformedEvent when it is not one."""
    try:
        return msgspec.json.decode(data, type=TxnRecord)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise MalformedEvent(f"not a transaction record: {e}") from None


# -- writing ----------------------------------------------------------------------------------


class LogWriter(abc.ABC):
    """Queues the encoded events of source transactions, then appends them where the layout puts them."""

    log: Topic

    @abc.abstractmethod
    def add(self, events: list[ChangeEvent], encoded: list[bytes], key: bytes, complete: bool) -> None:
        """Queue events of one transaction: all of it, or (not `complete`) a chunk that more will follow."""

    @abc.abstractmethod
    def stage(self) -> Finish | None:
        """Hand everything queued to the topics. Returns the function that makes the append durable
        (Topic.stage: it may run in another thread, before any other call on this writer), or None
        when the append is durable already."""

    def idle(self) -> None:
        """The topics' housekeeping while there is nothing to append (Topic.idle)."""
        self.log.idle()

    def abandon(self) -> None:
        """The open transaction will not complete (it will be published again from its start)."""

    def close(self) -> None:
        """Close the topics."""
        self.log.close()


class SingleTopicWriter(LogWriter):
    """Every event is one record of the one topic."""

    def __init__(self, log: Topic):
        self.log = log
        self._queued: list[tuple[bytes | None, bytes]] = []

    def add(self, events: list[ChangeEvent], encoded: list[bytes], key: bytes, complete: bool) -> None:
        self._queued.extend((key, data) for data in encoded)

    def stage(self) -> Finish | None:
        batch, self._queued = self._queued, []
        return self.log.stage(batch) if batch else None


@dataclass
class _Chunk:
    """Events of one transaction queued for the table topics: how many went to each, in order."""

    key: bytes
    first_sequence: int
    counts: dict[str, int]
    last: ChangeEvent | None  # the transaction's last event when this chunk completes it


@dataclass
class PerTableWriter(LogWriter):
    """Appends transactions' events to their table topics, then their records to the transaction topic.

    A large transaction comes in chunks: each chunk's events are appended to their table topics as
    they come, and only where they landed (per topic: first offset and count) is kept until the
    transaction's record is written. A crash between chunks leaves events no record names; they are
    never read, and the restart publishes the transaction again. The events of one transaction must
    land contiguously in each topic (one producer writes them); otherwise the record could not name
    them and the writer stops with an error.
    """

    layout: Layout
    stream: Stream
    log: Topic
    _topics: dict[str, Topic] = field(default_factory=dict)
    _batches: dict[str, list[tuple[bytes | None, bytes]]] = field(default_factory=dict)
    _chunks: list[_Chunk | None] = field(default_factory=list)  # None: the open transaction was abandoned
    _placed: dict[str, list[int]] | None = None  # the open transaction: topic -> [first offset, count] appended
    _first_sequence: int | None = None

    def add(self, events: list[ChangeEvent], encoded: list[bytes], key: bytes, complete: bool) -> None:
        counts: dict[str, int] = {}
        for event, data in zip(events, encoded):
            name = self.layout.topic_for(event)
            self._batches.setdefault(name, []).append((key, data))
            counts[name] = counts.get(name, 0) + 1
        self._chunks.append(_Chunk(key, events[0].sequence, counts, events[-1] if complete else None))

    def abandon(self) -> None:
        self._chunks.append(None)

    def stage(self) -> Finish | None:
        taken = {name: iter(self._table(name).append(batch)) for name, batch in self._batches.items()}
        records: list[tuple[bytes | None, bytes]] = []
        for chunk in self._chunks:
            if chunk is None:
                self._placed = self._first_sequence = None
                continue
            if self._placed is None or self._first_sequence is None:
                self._placed, self._first_sequence = {}, chunk.first_sequence
            for name, count in chunk.counts.items():
                _place(self._placed, name, [next(taken[name]) for _ in range(count)], chunk.key)
            if chunk.last is not None:
                records.append((chunk.key, encode_txn(TxnRecord.of(self._first_sequence, chunk.last, self._placed))))
                self._placed = self._first_sequence = None
        self._batches, self._chunks = {}, []
        if records:
            self.log.append(records)
        return None

    def idle(self) -> None:
        for topic in self._topics.values():
            topic.idle()
        self.log.idle()

    def _table(self, name: str) -> Topic:
        if name not in self._topics:
            self.stream.create(name)
            self._topics[name] = self.stream.topic(name)
        return self._topics[name]

    def close(self) -> None:
        for t in self._topics.values():
            t.close()
        self.log.close()


def _place(placed: dict[str, list[int]], name: str, offsets: list[int], key: bytes) -> None:
    """Add a chunk's offsets in topic `name` to its transaction's [first offset, count]."""
    first, count = placed.get(name, (offsets[0], 0))
    if offsets != list(range(first + count, first + count + len(offsets))):
        raise DataError(
            f"the events of transaction {key.decode(errors='replace')} did not land next to each other in topic "
            f"'{name}' (offsets {offsets[0]}..{offsets[-1]} after {first}+{count}): another program writes to it; "
            "per-table topics must be written by this cdc-producer only"
        )
    placed[name] = [first, count + len(offsets)]


# -- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogRecord:
    """One record of the log topic and the change events it stands for."""

    offset: int
    value: bytes
    _events: Callable[[], Iterator[ChangeEvent]]

    def events(self) -> Iterator[ChangeEvent]:
        """The change events, in source order; raises MalformedEvent (possibly after some events)."""
        return self._events()


@dataclass(frozen=True)
class LogTail:
    """The end of the log: the last sequence number used, and the last complete transaction."""

    last_sequence: int
    end: TxnEnd
    offset: int  # of the log record that holds `end`


class LogReader:
    """Reads the one topic: each record is one event."""

    def __init__(self, log: Topic, lazy_rows: bool = False, raw_images: bool = False, typed_inserts: int = 0):
        self.log = log
        self.lazy_rows = lazy_rows  # decode_event's: the rows of events with binlog events stay JSON
        self.raw_images = raw_images  # decode_event's: every image stays its JSON array (the lake)
        self.typed_inserts = typed_inserts  # decode_event's: inserts of this many rows or more as typed rows

    def read(self, offset: int, wait: float = 0.0, max_records: int = READ_BATCH) -> list[LogRecord]:
        """Records of the log from `offset` (waiting up to `wait` s for the first), at most max_records."""
        return [LogRecord(r.offset, r.value, self._decoder(r.value)) for r in self.log.read(offset, wait, max_records)]

    def _decoder(self, value: bytes) -> Callable[[], Iterator[ChangeEvent]]:
        return lambda: iter((self.decode(value),))

    def decode(self, value: bytes) -> ChangeEvent:
        """One record's event, its rows as this reader was asked."""
        return decode_event(value, self.lazy_rows, self.raw_images, self.typed_inserts)

    def durable(self, end: int) -> None:
        """The log topic's durable() for its records below `end`; it covers the table topics' records they
        name too (per-table layout), which were appended before them to the same stream."""
        self.log.durable(end)

    def end_offset(self) -> int:
        """The offset the log's next record will get."""
        return self.log.end_offset()

    def value_sizes(self, start: int, end: int) -> list[int] | None:
        """Bytes of each record of [start, end) (None: unknown); one record is one event here."""
        return self.log.value_sizes(start, end)

    def tail(self) -> LogTail | None:
        """The last sequence number and the last complete transaction (None: empty log).

        A trailing partial transaction (a large one published in chunks, or a backend
        without atomic batches) will be published again whole: the tail is before it."""
        end = self.log.end_offset()
        if end == 0:
            return None
        offset = end - 1
        last = event = self._event_at(offset)
        while event.txn is not None and not event.txn.last:
            offset, event = self._first_of_partial(offset, event)
            if offset == 0:
                raise DataError(
                    f"topic '{self.log.name}' holds only a partial first transaction and no position before it; "
                    "recreate the topic (and the follower) to start over"
                )
            offset -= 1
            event = self._event_at(offset)
        return LogTail(last.sequence, event.txn_end(), offset)

    def _first_of_partial(self, offset: int, event: ChangeEvent) -> tuple[int, ChangeEvent]:
        """The first event of the partial transaction `event` belongs to, found by its txn index
        (one read instead of one per event); (offset, event) unchanged when the record there is
        not that first event (the events are not contiguous, e.g. another writer interleaved)."""
        assert event.txn is not None
        first = offset - event.txn.index
        if first == offset or first < 0:
            return offset, event
        candidate = self._event_at(first)
        if candidate.txn is not None and candidate.txn.id == event.txn.id and candidate.txn.index == 0:
            return first, candidate
        return offset, event

    def _event_at(self, offset: int) -> ChangeEvent:
        records = self.log.read(offset, wait=0.0, max_records=1)
        if not records:
            raise DataError(f"topic '{self.log.name}' has no record at offset {offset}")
        try:
            return decode_event(records[0].value)
        except MalformedEvent as e:
            raise _unreadable_tail(self.log.name, offset, e) from None

    def close(self) -> None:
        """Close the topics."""
        self.log.close()


class PerTableReader(LogReader):
    """Reads the transaction topic: each record names its transaction's events in the table topics."""

    def __init__(self, stream: Stream, log: Topic, lazy_rows: bool = False, raw_images: bool = False,
                 typed_inserts: int = 0):
        super().__init__(log, lazy_rows, raw_images, typed_inserts)
        self.stream = stream
        self._open: dict[str, Topic] = {}

    def _decoder(self, value: bytes) -> Callable[[], Iterator[ChangeEvent]]:
        return lambda: self._events(value)

    def value_sizes(self, start: int, end: int) -> list[int] | None:
        return None  # a transaction record's size says little of its events' (they are in the table topics)

    def _events(self, value: bytes) -> Iterator[ChangeEvent]:
        # Each table topic holds its share of the transaction in sequence order, so a merge of
        # the topics read READ_BATCH records at a time keeps memory bounded whatever its size.
        record = decode_txn(value)
        readers = [self._read(name, first, count, record.txn) for name, (first, count) in record.topics.items()]
        return heapq.merge(*readers, key=lambda e: e.sequence)

    def _read(self, name: str, first: int, count: int, txn: str) -> Iterator[ChangeEvent]:
        if name not in self._open:
            self._open[name] = self.stream.topic(name)
        done = 0
        while done < count:
            batch = self._open[name].read(first + done, wait=READ_WAIT, max_records=min(READ_BATCH, count - done))
            if not batch:
                raise DataError(f"topic '{name}' lacks offsets {first}..{first + count - 1} named by transaction {txn}")
            done += len(batch)
            for r in batch:
                yield self.decode(r.value)

    def tail(self) -> LogTail | None:
        end = self.log.end_offset()
        if end == 0:
            return None
        records = self.log.read(end - 1, wait=0.0, max_records=1)
        if not records:
            raise DataError(f"topic '{self.log.name}' has no record at offset {end - 1}")
        try:
            end_of_txn = decode_txn(records[0].value).txn_end()
        except MalformedEvent as e:
            raise _unreadable_tail(self.log.name, end - 1, e) from None
        return LogTail(end_of_txn.sequence, end_of_txn, end - 1)

    def close(self) -> None:
        for topic in self._open.values():
            topic.close()
        self.log.close()


def _unreadable_tail(topic: str, offset: int, e: Exception) -> DataError:
    return DataError(
        f"topic '{topic}' offset {offset} is not a change event ({e}); the producer cannot find where to "
        "resume: remove the record's topic or use a new topic"
    )
