"""The one interface every topic backend implements (embedded log, Fluvio).

A *stream* is a place that holds named topics; a *topic* is an append-only log of
records with offsets starting at 0 that never repeat. Programs only talk to these
two classes, so switching backends is a profile setting.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cdc_stream.errors import TopicError, TopicNotFound, TopicUnavailable

__all__ = ["Batch", "Record", "Stream", "Topic", "TopicError", "TopicNotFound", "TopicUnavailable"]

Batch = Sequence[tuple[bytes | None, bytes]]  # (key, value) records to append


@dataclass(frozen=True, slots=True)
class Record:
    """One record read back from a topic."""

    offset: int
    value: bytes
    key: bytes | None = None
    timestamp_ms: int = 0


class Topic(abc.ABC):
    """An append-only log of records."""

    name: str

    @abc.abstractmethod
    def append(self, batch: Batch) -> list[int]:
        """Append (key, value) records atomically where the backend allows.

        Returns their offsets once the backend has acknowledged them durably:
        a record whose offset was returned survives a crash of the caller (readers
        may see it a little before: durable()).
        """

    def stage(self, batch: Batch) -> Callable[[], None] | None:
        """Start appending the batch; returns the function that finishes the append (durably,
        as append() does; it may run in another thread, and no other call on this topic may
        come before it returned), or None when the batch is already appended.

        The default appends right away; a backend whose slow part can run without the
        GIL returns that part (the producer runs it in a thread: cdc_producer/background.py)."""
        self.append(batch)
        return None

    def idle(self) -> None:
        """Housekeeping for a writer that has nothing to append for now (the embedded log checkpoints its
        WAL), so that it does not run right after an append, while readers work on what it brought. It
        may run in the thread that finishes appends (stage()); no other call on this topic may come before
        it returned. The default does nothing."""

    def value_sizes(self, start: int, end: int) -> list[int] | None:
        """The value sizes in bytes of the records [start, end), without reading them (None: the backend
        cannot tell; Spark then sizes its partitions in records)."""
        return None

    @abc.abstractmethod
    def read(self, from_offset: int, wait: float = 0.0, max_records: int = 1000) -> list[Record]:
        """Records with offset >= from_offset, in order, at most max_records.

        When none are available, waits up to `wait` seconds for one to arrive,
        then returns what it has (possibly an empty list).
        """

    def durable(self, end: int) -> None:
        """Block until the records below `end`, which read() has returned, survive a crash of the
        machine; raises TopicError if they cannot be made to.

        read() may return a record a moment before its append is acknowledged (the embedded log: between
        its commit and its fsync). A reader calls this before anything it derived from records becomes
        durable elsewhere: the consumer before their statements reach the follower, Spark before a batch
        ends at `end`. The default returns at once: the backend shows only acknowledged records."""

    @abc.abstractmethod
    def end_offset(self) -> int:
        """The offset the next appended record will get (= record count for a new topic)."""

    def last_record(self) -> Record | None:
        """The record with the highest offset, or None for an empty topic."""
        end = self.end_offset()
        if end == 0:
            return None
        records = self.read(end - 1, wait=0.0, max_records=1)
        return records[0] if records else None

    def close(self) -> None:
        """Release connections and file handles."""


class Stream(abc.ABC):
    """A set of named topics (one embedded directory or one Fluvio cluster)."""

    @abc.abstractmethod
    def create(self, name: str) -> None:
        """Create the topic if it does not exist yet (idempotent)."""

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether the topic exists."""

    @abc.abstractmethod
    def topic(self, name: str) -> Topic:
        """Open an existing topic; raises TopicNotFound with a hint otherwise."""

    @abc.abstractmethod
    def list_topics(self) -> list[tuple[str, int]]:
        """(name, record count) of every topic, sorted by name."""

    @property
    def identity(self) -> str:
        """An id that changes when the stream is recreated ("" when the backend has none).

        The consumer stores it beside its checkpoint so that offsets of a wiped and
        recreated stream are never mistaken for the old ones.
        """
        return ""

    def describe(self) -> str:
        """Where this stream is, for messages (a path or an endpoint)."""
        return type(self).__name__

    def close(self) -> None:
        """Release connections and file handles."""

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
