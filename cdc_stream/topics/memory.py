"""An in-process topic backend: the same Stream/Topic contract, kept in memory.

For fast tests of the programs' state machines (no server, no file), as httpx's MockTransport
stands in for the network. tests/test_topic_contract.py runs it through the contract suite the
real backends pass. Not selectable from a profile: nothing in it survives the process.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from cdc_stream.topics.base import Batch, Record, Stream, Topic, TopicError, TopicNotFound


class _Log:
    """One topic's records, shared by every MemoryTopic opened on it."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.changed = threading.Condition()


class MemoryStream(Stream):
    """A set of topics in this process. `fail_appends` makes the next N appends raise TopicError."""

    def __init__(self) -> None:
        self._logs: dict[str, _Log] = {}
        self._id = str(uuid.uuid4())
        self.fail_appends = 0

    @property
    def identity(self) -> str:
        return self._id

    def describe(self) -> str:
        return "memory stream"

    def create(self, name: str) -> None:
        if not name:
            raise TopicError("invalid topic name ''")
        self._logs.setdefault(name, _Log())

    def exists(self, name: str) -> bool:
        return name in self._logs

    def topic(self, name: str) -> MemoryTopic:
        if name not in self._logs:
            raise TopicNotFound(f"topic '{name}' does not exist in the memory stream")
        return MemoryTopic(self, name, self._logs[name])

    def list_topics(self) -> list[tuple[str, int]]:
        return sorted((name, len(log.records)) for name, log in self._logs.items())


class MemoryTopic(Topic):
    """One topic of a MemoryStream."""

    def __init__(self, stream: MemoryStream, name: str, log: _Log):
        self.name, self._stream, self._log = name, stream, log

    def append(self, batch: Batch) -> list[int]:
        self._check()
        return self._add(list(batch))

    def stage(self, batch: Batch) -> Callable[[], None] | None:
        """Nothing is visible until the returned function ran (like the embedded log's open transaction)."""
        self._check()
        staged = list(batch)
        return lambda: self._add_all(staged)

    def _check(self) -> None:
        if self._stream.fail_appends > 0:
            self._stream.fail_appends -= 1
            raise TopicError(f"cannot append to topic '{self.name}': injected failure")

    def _add_all(self, batch: list[tuple[bytes | None, bytes]]) -> None:
        self._add(batch)

    def _add(self, batch: list[tuple[bytes | None, bytes]]) -> list[int]:
        now = int(time.time() * 1000)
        with self._log.changed:
            first = len(self._log.records)
            self._log.records.extend(Record(first + i, value, key, now) for i, (key, value) in enumerate(batch))
            self._log.changed.notify_all()
        return list(range(first, first + len(batch)))

    def read(self, from_offset: int, wait: float = 0.0, max_records: int = 1000) -> list[Record]:
        deadline = time.monotonic() + wait
        with self._log.changed:
            while len(self._log.records) <= from_offset and time.monotonic() < deadline:
                self._log.changed.wait(deadline - time.monotonic())
            return self._log.records[from_offset:from_offset + max_records]

    def end_offset(self) -> int:
        return len(self._log.records)
