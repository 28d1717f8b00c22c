"""The producer's outbox: numbers, encodes and batches the events of source transactions onto the topic.

Whole transactions are queued and appended together (one durable write, one fsync for the
embedded log) while the binlog has more to read, and at the latest after `outbox_bytes` or
`max_delay`. The layout's LogWriter decides where each record goes (one topic, or table topics
plus the transaction topic); the embedded log's commit runs in a thread while decoding goes on
(background.py), one append in flight at most.
"""

from __future__ import annotations

import time

from cdc_producer.background import BackgroundAppends
from cdc_stream.events import ChangeEvent, Txn, encode_event
from cdc_stream.layout import LogWriter

# Queued records are appended at the latest when they reach this size or age
# (earlier when the binlog has nothing more to read right now).
OUTBOX_BYTES = 4 << 20
MAX_DELAY = 0.1
# When the binlog has nothing more to read, what is queued is appended at once, unless the previous
# append started less than this long ago: then the producer waits that long for more transactions. A
# leader committing small transactions one by one (sysbench OLTP: ~1,000/s) otherwise cost one topic
# commit (~140 µs of CPU, bench/README.md issue 26) per transaction or two; transactions further apart
# than this are appended as they come, without waiting.
MIN_APPEND_INTERVAL = 0.005


class Outbox:
    """Numbers events (sequence, txn index), encodes them and appends them in batches through a LogWriter."""

    def __init__(self, writer: LogWriter, next_sequence: int, outbox_bytes: int = OUTBOX_BYTES,
                 max_delay: float = MAX_DELAY, min_interval: float = MIN_APPEND_INTERVAL):
        self.writer = writer
        self.next_sequence = next_sequence
        self.last_sequence: int | None = next_sequence - 1 if next_sequence else None  # of a complete transaction
        self.outbox_bytes, self.max_delay, self.min_interval = outbox_bytes, max_delay, min_interval
        self._appended = -min_interval  # when the last append was handed to the topic (monotonic)
        self._appends = BackgroundAppends(idle=writer.idle)
        self._txn_index = 0  # events of the open transaction already queued
        self._size = 0
        self._since: float | None = None  # when the oldest queued record was queued

    def add(self, events: list[ChangeEvent], txn_id: str, complete: bool) -> None:
        """Number and queue events of one transaction (all of it, or a chunk when not `complete`)."""
        first_index = self._txn_index
        for i, event in enumerate(events):
            event.sequence = self.next_sequence + i
            event.txn = Txn(txn_id, first_index + i, complete and i == len(events) - 1)
        encoded = [encode_event(e) for e in events]
        self.writer.add(events, encoded, txn_id.encode(), complete)
        self._size += sum(len(data) for data in encoded)
        self._since = self._since or time.monotonic()
        self.next_sequence += len(events)
        self._txn_index = 0 if complete else first_index + len(events)
        if complete:
            self.last_sequence = events[-1].sequence
        if self._size >= self.outbox_bytes or time.monotonic() - self._since >= self.max_delay:
            self.flush(wait=False)

    def abandon(self) -> None:
        """The open transaction will not complete: chunks of it already queued stay where they are."""
        if self._txn_index:
            self.writer.abandon()
        self._txn_index = 0

    def linger(self) -> float:
        """Seconds to wait for more transactions before appending what is queued (0: append now):
        what is left of MIN_APPEND_INTERVAL since the previous append."""
        return self._appended + self.min_interval - time.monotonic()

    @property
    def queued(self) -> bool:
        """Whether records are queued and not yet handed to the topic."""
        return self._since is not None

    @property
    def unflushed(self) -> bool:
        """Whether records are queued or being appended, not yet durable on the topic."""
        return self._since is not None or self._appends.pending

    def flush(self, wait: bool = True) -> None:
        """Append everything queued; durable when this returns.

        wait=False: where the backend can (Topic.stage), the batch is committed in the
        background while decoding goes on; the next flush waits for it first."""
        if self._since is not None:
            self._appends.submit(self.writer.stage)
            self._size, self._since = 0, None
            self._appended = time.monotonic()
        if wait:
            self._appends.wait()

    def settle(self) -> None:
        """Let a background append end before the topic is closed (its failure, if any,
        was or will be raised by flush())."""
        self._appends.settle()

    def close(self) -> None:
        """End the appends' thread (after an append in flight) and close the topics."""
        self._appends.close()
        self.writer.close()
