"""The producer's middle, wired: binlog events -> Assembler -> Outbox -> topic, plus the resume state file.

`Publisher` is the Assembler's TransactionSink: it stamps each transaction's last event with the
open snapshot windows, hands the events to the Outbox, counts what it published, and saves the
position reached through transactions the filters dropped (resume.ResumeState) whenever that
position matches what is durable on the topic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdc_producer.assemble import CHUNK_BYTES, Assembler
from cdc_producer.binlog import LeaderInfo
from cdc_producer.outbox import Outbox
from cdc_producer.resume import ResumeState
from cdc_producer.windows import SnapshotWindows
from cdc_stream.events import OPERATIONS, ChangeEvent, Operation
from cdc_stream.filters import TableFilter
from cdc_stream.layout import LogWriter
from cdc_stream.positions import Position, Windows

if TYPE_CHECKING:
    from cdc_producer.chunks import LiveCopy

STATE_SAVE_INTERVAL = 1.0


@dataclass
class Stats:
    """What the producer published since it started."""

    transactions: int = 0
    events: int = 0
    rows: int = 0
    skipped_transactions: int = 0
    events_by_kind: dict[Operation, int] = field(default_factory=lambda: dict.fromkeys(OPERATIONS, 0))
    heartbeats: int = 0  # times the leader said it has nothing more (the producer is caught up)


class Publisher:
    """Feeds on binlog events (through `assembler`, a BinlogHandler) and publishes each source
    transaction that passes the filters."""

    def __init__(self, writer: LogWriter, resource: str, filters: TableFilter, info: LeaderInfo, next_sequence: int,
                 position: Position, state: ResumeState | None = None, windows: Windows | None = None,
                 chunk_bytes: int = CHUNK_BYTES, replay_until: Position | None = None, binlog: bool = True):
        self.resource = resource
        self.outbox = Outbox(writer, next_sequence)
        self.windows = SnapshotWindows(windows)
        self.assembler = Assembler(self, resource, filters, info, position, self.windows, chunk_bytes, replay_until,
                                   binlog)
        self.state = state
        self.stats = Stats()
        self._dirty_since: float | None = None  # a dropped transaction moved the position past the tail
        self.copy: LiveCopy | None = None  # live copies in progress (cdc_producer/chunks.py)
        self._copying = False  # the last transaction published said copies were in progress

    def attach_copy(self, copy: LiveCopy) -> None:
        """Route the copied tables' row events through `copy`, and carry its cursors on the topic."""
        self.copy = self.assembler.copy = copy

    @property
    def position(self) -> Position:
        """Where the binlog continues: after the last committed transaction (the Assembler's)."""
        return self.assembler.position

    @property
    def next_sequence(self) -> int:
        return self.outbox.next_sequence

    # -- TransactionSink ------------------------------------------------------------------------

    def add(self, events: list[ChangeEvent], txn_id: str, complete: bool) -> None:
        if complete and self.windows:
            events[-1].windows = self.windows.current()
        if complete and self.copy is not None:
            events[-1].copying = self.copy.state() or None
        self.outbox.add(events, txn_id, complete)
        self.stats.events += len(events)
        self.stats.rows += sum(len(e.rows) for e in events)
        for e in events:
            self.stats.events_by_kind[e.operation] += 1
        if complete:
            self._dirty_since = None
            self.stats.transactions += 1

    def skipped(self) -> None:
        self.stats.skipped_transactions += 1
        self._dirty_since = self._dirty_since or time.monotonic()

    def abandon(self) -> None:
        self.outbox.abandon()

    def idle(self) -> None:
        self.flush()
        self.flush_state()
        self.stats.heartbeats += 1

    # -- for the snapshot and the run loop ----------------------------------------------------------

    def publish(self, events: list[ChangeEvent], txn_id: str) -> None:
        """Number the events of one whole transaction (a snapshot's) and append them now, with anything queued."""
        self.add(events, txn_id, complete=True)
        self.flush()

    def publish_here(self, events: list[ChangeEvent], txn_id: str) -> None:
        """Publish a transaction of the producer's own (a copy's chunk or DDL) between two binlog
        transactions: its last event carries the position reached, so a restart resumes after it."""
        last = events[-1]
        last.end_at(self.position)
        last.xa_pending = self.assembler.prepared.pending() or None
        self.publish(events, txn_id)

    def discard_partial(self) -> None:
        """Forget the open transaction (the binlog connection dropped): it is read again from its start."""
        self.assembler.discard_partial()

    @property
    def queued(self) -> bool:
        """Whether records are queued and not yet handed to the topic."""
        return self.outbox.queued

    def flush(self, wait: bool = True) -> None:
        """Append everything queued (Outbox.flush)."""
        self.outbox.flush(wait)

    def settle(self) -> None:
        """Let a background append end before the topic is closed."""
        self.outbox.settle()

    def flush_state(self, force: bool = False) -> None:
        """Save progress through filtered-out transactions (at most once a second)."""
        if (self.state is None or self._dirty_since is None or self.assembler.in_transaction or self.outbox.unflushed
                or self.assembler.replaying):
            return  # the saved position must match the topic's tail (and be past it)
        if force or time.monotonic() - self._dirty_since >= STATE_SAVE_INTERVAL:
            self.state.save(self.outbox.last_sequence, self.position, self.assembler.prepared.pending())
            self._dirty_since = None

    def close(self) -> None:
        """Close the topics."""
        self.outbox.close()
