"""What cdc-consumer tells about itself: health, lag, backlog, what it applied, as metric samples.

The Replayer counts into a `Tally` (rows by kind and transactions of the group it applies, added
to the totals when the group commits, so a rolled-back group counts nothing); one Tally lives
as long as the process, across the Replayers of successive reconnections. run.py updates the rest
per batch of records. The metrics endpoint (cdc_stream/metrics.py) reads `samples()` when scraped;
docs/metrics.md explains each metric.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cdc_stream.events import Operation
from cdc_stream.telemetry import Health, Sample, SourceLag

# The `kind` label of applied rows.
KIND: dict[Operation, str] = {"Add": "insert", "Update": "update", "Delete": "delete"}
_C = "mysql_cdc_consumer_"
END_OFFSET_INTERVAL = 1.0  # seconds between reads of the topic's end offset while busy
# Commits older than this many later ones have run: the writer holds at most 4 batches waiting
# and one running (writer.py), and each commit sends at least one; a failed batch stops all that follow.
UNCONFIRMED = 16


def _kinds() -> dict[Operation, int]:
    return dict.fromkeys(KIND, 0)


@dataclass(frozen=True)
class Counts:
    """Rows by kind, applied and repeated transactions: of one commit, or summed."""

    rows: dict[Operation, int] = field(default_factory=_kinds)
    transactions: int = 0
    repeated: int = 0

    def plus(self, other: Counts) -> Counts:
        """The sum of both."""
        return Counts({op: n + other.rows.get(op, 0) for op, n in self.rows.items()},
                      self.transactions + other.transactions, self.repeated + other.repeated)


@dataclass
class Tally:
    """What the consumer applied: the open group's counts and the committed totals.

    Mirrors the Replayer's group: `rows` as events are applied, `transaction_done` when a source
    transaction's last event is, `drop_open` when the open transaction is rolled back to its
    savepoint, `forget` when the whole group is, `committed` when its COMMIT is handed to the
    follower's writer. That COMMIT runs a little later (writer.py keeps a few batches in flight):
    if the connection is lost first, the replay restarts from the follower's checkpoint and
    `resumed` drops the commits past it, so nothing is counted twice."""

    next_offset: int | None = None  # the last committed checkpoint's
    _confirmed: Counts = field(default_factory=Counts)
    _pending: list[tuple[int, Counts]] = field(default_factory=list)  # (next_offset, counts) not known to have run
    _group: dict[Operation, int] = field(default_factory=_kinds)
    _done: dict[Operation, int] = field(default_factory=_kinds)  # the group's whole transactions
    _group_txns: tuple[int, int] = (0, 0)  # (applied, repeated) whole transactions of the group

    def totals(self) -> Counts:
        """Everything committed so far."""
        total = self._confirmed
        for _, counts in tuple(self._pending):  # a copy: the endpoint reads this from its own thread
            total = total.plus(counts)
        return total

    def rows(self, operation: Operation, n: int) -> None:
        """`n` rows of one event were applied (not committed yet)."""
        if operation in self._group:
            self._group[operation] += n

    def transaction_done(self, repeated: bool) -> None:
        """The open transaction's last event was applied (or skipped, `repeated`)."""
        applied, skipped = self._group_txns
        self._group_txns = (applied, skipped + 1) if repeated else (applied + 1, skipped)
        self._done = dict(self._group)

    def drop_open(self) -> None:
        """The open transaction was rolled back; the group's whole ones stay."""
        self._group = dict(self._done)

    def forget(self) -> None:
        """Everything not committed was rolled back."""
        self._group, self._done, self._group_txns = _kinds(), _kinds(), (0, 0)

    def committed(self, next_offset: int) -> None:
        """The group's COMMIT, with a checkpoint at `next_offset`, went to the follower."""
        self._pending.append((next_offset, Counts(self._done, *self._group_txns)))
        if len(self._pending) > UNCONFIRMED:
            self._confirmed = self._confirmed.plus(self._pending.pop(0)[1])
        self.next_offset = next_offset
        self.forget()

    def resumed(self, next_offset: int) -> None:
        """Replay (re)starts from the follower's checkpoint: commits past it did not happen."""
        for offset, counts in self._pending:
            if offset <= next_offset:
                self._confirmed = self._confirmed.plus(counts)
        self._pending = []
        self.next_offset = next_offset
        self.forget()


class ConsumerTelemetry:
    """The consumer's state for /metrics and /healthz."""

    def __init__(self) -> None:
        self.health = Health("not started yet: connecting to the follower")
        self.lag = SourceLag()
        self.tally = Tally()
        self.end_offset: int | None = None  # of the log topic, read at most once a second
        self.reconnects = 0
        self.dead_letters = 0
        self.stopped_at: int | None = None  # the checkpoint offset where it stopped on a record
        self._end_read = 0.0

    # -- from run.py ----------------------------------------------------------------------

    def applying(self, next_offset: int, end_offset: int, detail: str) -> None:
        """Replay starts (again) at the checkpoint `next_offset`; the topic ends at `end_offset`."""
        self.tally.resumed(next_offset)
        self.end_offset, self._end_read = end_offset, time.monotonic()
        self.health.running(detail)

    def end_offset_due(self) -> bool:
        """Whether the topic's end offset should be read again (at most once a second)."""
        return time.monotonic() - self._end_read >= END_OFFSET_INTERVAL

    def read_end_offset(self, end_offset: int) -> None:
        """The log topic's end offset now."""
        self.end_offset, self._end_read = end_offset, time.monotonic()

    def applied(self, source_ts_ms: int | None) -> None:
        """A batch of records was applied; the last change in it has this source timestamp (ms)."""
        if source_ts_ms:
            self.lag.at(source_ts_ms / 1000)

    def caught_up(self, offset: int) -> None:
        """Nothing more to read: everything before `offset`, the topic's end, is committed."""
        self.end_offset = offset
        self.lag.caught_up()

    def lost(self, detail: str) -> None:
        """The follower or the stream went away, or a new connection failed; reconnecting."""
        if self.health.state.ok:
            self.reconnects += 1
        self.health.reconnecting(detail)

    def stopped(self, detail: str) -> None:
        """Stopped on a record it cannot apply; the checkpoint stays before it."""
        self.stopped_at = self.tally.next_offset or 0
        self.health.stopped(detail)

    # -- for the endpoint ----------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """The consumer's metrics now."""
        t = self.tally
        totals = t.totals()
        out = [Sample(_C + "rows_total", "counter", "Row changes applied and committed on the follower, by kind.",
                      totals.rows[op], {"kind": kind}) for op, kind in KIND.items()]
        out += [
            Sample(_C + "transactions_total", "counter", "Source transactions applied and committed.",
                   totals.transactions),
            Sample(_C + "skipped_total", "counter",
                   "Source transactions skipped because the follower already had them (republished copies).",
                   totals.repeated),
            Sample(_C + "dead_letter_total", "counter",
                   "Records that are not change events, copied to the dead-letter topic (--skip-bad-records).",
                   self.dead_letters),
            Sample(_C + "reconnects_total", "counter", "Times the connection to the follower or the stream was lost.",
                   self.reconnects),
            Sample(_C + "stopped", "gauge", "1 when stopped on a record it cannot apply; offset: the checkpoint, "
                   "the first record not applied.", 0 if self.stopped_at is None else 1,
                   {"offset": "" if self.stopped_at is None else str(self.stopped_at)}),
        ]
        if t.next_offset is not None:
            out.append(Sample(_C + "checkpoint_offset", "gauge", "The follower's checkpoint: the next offset to apply.",
                              t.next_offset))
            if self.end_offset is not None:
                out.append(Sample(_C + "backlog_records", "gauge",
                                  "Records on the topic not applied yet: its end offset minus the checkpoint.",
                                  max(0, self.end_offset - t.next_offset)))
        lag = self.lag.seconds()
        if lag is not None:
            out.append(Sample(_C + "lag_seconds", "gauge", "Now minus the source timestamp of the last change "
                              "applied; 0 when caught up with the topic.", lag))
        return out
