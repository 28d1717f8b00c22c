"""Whole source transactions from a range of the log, as cdc-consumer sees them.

The log (cdc_stream.layout: the one topic, or the transaction topic of per-table topics)
is read through `LogReader`. A range of offsets [start, end) *owns* the transactions
whose first record lies in it: it reads past `end` to finish the last one, and skips
leading records of a transaction an earlier range owns, so ranges planned anywhere
(micro-batches, partitions) give every transaction exactly once. Like the consumer it
drops a partial copy of a transaction that a producer restarted before publishing its
last event, and a repeat of a transaction already on the log (Fluvio can append a
retried batch twice).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdc_stream.consumer_offsets import already_applied, position_after
from cdc_stream.errors import DataError
from cdc_stream.events import ChangeEvent, decode_event
from cdc_stream.positions import Position

if TYPE_CHECKING:
    from cdc_stream.layout import LogReader
    from cdc_stream.topics.base import Topic

READ_BATCH = 500  # log records per read
READ_WAIT = 0.5  # seconds a read of a table topic waits for records a transaction record names
PAST_END_WAIT = 2.0  # seconds a read past the range's end waits for the rest of a transaction


@dataclass(frozen=True)
class Located:
    """A change event and the offset of the log record it came from."""

    offset: int
    event: ChangeEvent


def is_repeat(first: ChangeEvent, position: Position | None) -> bool:
    """Whether the transaction `first` opens lies at or before `position` (a copy already on the log)."""
    return already_applied(first, position)


def _starts(ev: ChangeEvent) -> bool:
    return ev.txn is None or ev.txn.index == 0


def _ends(ev: ChangeEvent) -> bool:
    return ev.txn is None or ev.txn.last


def position_before(reader: LogReader, offset: int, per_table: bool) -> Position | None:
    """The position after the last complete transaction before `offset` (None: none has one)."""
    hi = offset
    step = 1 if per_table else READ_BATCH  # a transaction record ends its transaction
    while hi > 0:
        lo = max(0, hi - step)
        found = None
        for rec in reader.read(lo, wait=0.0, max_records=hi - lo):
            if rec.offset >= hi:
                break
            for ev in rec.events():
                if _ends(ev) and (p := position_after(ev)) is not None:
                    found = p
        if found is not None:
            return found
        hi, step = lo, READ_BATCH
    return None


def complete_end(reader: LogReader, per_table: bool) -> int:
    """The offset after the log's last complete transaction: where a range may end.

    A transaction being published (or left partial by a crashed producer) at the tail is
    not complete; ranges end before its first record.
    """
    end = reader.end_offset()
    if per_table or end == 0:
        return end  # a transaction record is written once its whole transaction is on the table topics
    hi = end
    while hi > 0:
        lo = max(0, hi - READ_BATCH)
        records = [r for r in reader.read(lo, wait=0.0, max_records=hi - lo) if r.offset < hi]
        for rec in reversed(records):
            (ev,) = list(rec.events())
            if _ends(ev):
                return rec.offset + 1
        hi = lo
    return 0


def transactions(reader: LogReader, start: int, end: int, per_table: bool,
                 batch: int = READ_BATCH, include_incomplete: bool = False) -> Iterator[list[Located]]:
    """The complete transactions whose first record is in [start, end), in log order
    (`include_incomplete`: and the events of one still incomplete at the log's end).

    Raises MalformedEvent for a record that is not a change event, DataError for a log
    out of order.
    """
    if start >= end:
        return
    position = position_before(reader, start, per_table)
    open_txn: list[Located] | None = None
    leading = True  # records of a transaction that started before `start`: an earlier range's
    offset = start
    while offset < end or open_txn is not None:
        records = reader.read(offset, wait=PAST_END_WAIT if offset >= end else 0.0, max_records=batch)
        if not records:
            if offset >= end:  # the rest is not on the log (being published, or a partial copy): not complete
                if include_incomplete and open_txn:
                    yield open_txn
                return
            raise DataError(f"the log has no record at offset {offset} (below its end {end}): was it truncated?")
        for rec in records:
            for ev in rec.events():
                if _starts(ev):
                    if rec.offset >= end:
                        return  # the next range's
                    leading = False
                    open_txn = [Located(rec.offset, ev)]  # an open one without its last event was abandoned
                elif open_txn is not None and ev.txn is not None and open_txn[0].event.txn is not None \
                        and ev.txn.id == open_txn[0].event.txn.id:
                    open_txn.append(Located(rec.offset, ev))
                elif leading or (open_txn is None and is_repeat(ev, position)):
                    # an earlier range's transaction; or the tail of a committed one again (a retried append)
                    if _ends(ev):
                        position = position_after(ev) or position
                    continue
                else:
                    txn = ev.txn.id if ev.txn else "?"
                    raise DataError(f"offset {rec.offset} continues transaction {txn} whose start was not seen; "
                                    "the log is out of order (was it written by cdc-producer?)")
                if _ends(ev):
                    txn_events, open_txn = open_txn, None
                    if not is_repeat(txn_events[0].event, position):
                        yield txn_events
                    position = position_after(ev) or position
            offset = rec.offset + 1


# -- per-table topics read on their own ---------------------------------------------------------
#
# With one topic per table, a read of some tables needs only their topics. The transaction topic
# still says which of their records count: a table topic can hold events no transaction record
# names (a producer that crashed between chunks of a large transaction publishes it again), and
# events past the last record belong to a transaction not yet complete.


@dataclass(frozen=True)
class Span:
    """One transaction's events in one table topic: offsets [first, first + count), named by the
    transaction record at `log_offset` (the rows' `offset`, as when read through the log)."""

    log_offset: int
    first: int
    count: int


def topic_spans(reader: LogReader, start: int, end: int, topics: frozenset[str],
                batch: int = READ_BATCH) -> dict[str, list[Span]]:
    """Per topic of `topics`, the spans the transaction records at log offsets [start, end) name, in
    log order. A record repeating an earlier transaction (Fluvio can append a retried batch twice)
    is skipped, by its sequence numbers: they only grow along the log."""
    from cdc_stream.layout import decode_txn

    spans: dict[str, list[Span]] = {t: [] for t in topics}
    last = -1
    if start > 0:
        before = reader.read(start - 1, wait=0.0, max_records=1)
        if before and before[0].offset == start - 1:
            last = decode_txn(before[0].value).sequence[1]
    offset = start
    while offset < end:
        records = [r for r in reader.read(offset, wait=0.0, max_records=min(batch, end - offset)) if r.offset < end]
        if not records:
            raise DataError(f"the log has no record at offset {offset} (below {end}): was it truncated?")
        for rec in records:
            txn = decode_txn(rec.value)
            if txn.sequence[1] <= last:
                continue
            last = txn.sequence[1]
            for name, (first, count) in txn.topics.items():
                if name in spans:
                    spans[name].append(Span(rec.offset, first, count))
        offset = records[-1].offset + 1
    return spans


def span_events(topic: Topic, spans: Iterable[Span], batch: int = READ_BATCH,
                raw_images: bool = False) -> Iterator[list[Located]]:
    """The events of each span of one table topic, as a list of Located (offset: the transaction
    record's), one span after the other (`raw_images`: decode_event's); raises DataError when the
    topic lacks a named offset."""
    for span in spans:
        located: list[Located] = []
        done = 0
        while done < span.count:
            # a committed span is all on the topic: the wait only lets a Fluvio fetch arrive
            records = topic.read(span.first + done, wait=READ_WAIT, max_records=min(batch, span.count - done))
            if not records or records[0].offset != span.first + done:
                raise DataError(f"topic '{topic.name}' lacks offset {span.first + done}, named by the transaction "
                                f"record at log offset {span.log_offset}: was it truncated?")
            done += len(records)
            located.extend(Located(span.log_offset, decode_event(r.value, raw_images=raw_images)) for r in records)
        yield located
