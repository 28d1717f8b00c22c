"""Parallel apply, the pure part: what a group of source transactions touches, and which group may run now.

With `[replay] workers` > 1 the Replayer still cuts contiguous groups of whole source transactions
(replayer.py), and each group still commits with its checkpoint; parallel.py runs them on several
follower sessions. This module decides, without any server:

- `KeyCollector`: a group's `GroupKeys`: per table, the values of every unique key (PRIMARY included)
  in the before and after images of its rows; the whole table when a row cannot be named by a key
  (no unique key on the follower, a key column missing from the image, a snapshot chunk's range) and
  for every table of a foreign-key family (cascades reach tables the rows do not name); a *barrier*
  (runs alone) for what cannot be analysed: DDL, non-transactional tables, tables whose triggers fire.
  Text key values are folded (case, accents, trailing spaces) so that collation-equal values meet:
  this can only add conflicts, never hide one.
- `Scheduler`: groups are started in their order when they conflict with no earlier group not yet
  committed, and committed strictly in their order (a commit ticket, `turn`). A group that fails while
  an earlier one is still uncommitted, or that waited too long for a lock (a conflict the keys did not
  show: gap locks, a later group holding a row it needs while waiting for its own turn), is rolled back
  with every later group in flight, and they run again one at a time in order; a failure that repeats
  alone stops everything, with every earlier group committed and none after it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from cdc_stream.events import ChangeEvent

TableName = tuple[str, str]
RowKey = tuple[str, str, int, tuple[Any, ...]]  # schema, table, which unique key, its (folded) values

# Times a group runs again after a lock wait timeout or deadlock before that error stops the consumer
# (each alone, every earlier group committed: only another session can still hold the lock).
MAX_ATTEMPTS = 5
LOCK_ERRORS = frozenset({1205, 1213})  # ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK


@dataclass(frozen=True)
class TableKeys:
    """A follower table as scheduling sees it (catalog.table_keys)."""

    unique: tuple[tuple[str, ...], ...] = ()  # lower-cased columns of each unique key, PRIMARY first
    family: frozenset[TableName] = frozenset()  # tables linked to it by foreign keys, itself included (or empty)
    whole: bool = False  # a unique key values cannot name (a prefix, WITHOUT OVERLAPS, system versioning)
    barrier: bool = False  # missing, non-transactional, or triggers that fire: applied alone


@dataclass
class GroupKeys:
    """What one group touches: row keys, tables claimed whole, or everything (a barrier)."""

    rows: set[RowKey] = field(default_factory=set)
    tables: set[TableName] = field(default_factory=set)  # claimed whole
    touched: set[TableName] = field(default_factory=set)  # every table it writes
    barrier: bool = False

    def conflicts(self, other: GroupKeys) -> bool:
        """Whether the two groups may touch the same row (then the later one waits for the earlier's commit)."""
        if self.barrier or other.barrier:
            return True
        if not self.tables.isdisjoint(other.touched) or not other.tables.isdisjoint(self.touched):
            return True
        small, large = (self.rows, other.rows) if len(self.rows) <= len(other.rows) else (other.rows, self.rows)
        return not large.isdisjoint(small)


class _RawRow(msgspec.Struct):
    cols: list[msgspec.Raw] | None = None
    before_cols: list[msgspec.Raw] | None = None
    after_cols: list[msgspec.Raw] | None = None


_raw_rows = msgspec.json.Decoder(list[_RawRow])
_value = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()  # (a decoded object keeps its keys' order: encoded again, the same bytes)


def fold_text(text: str) -> str:
    """A text key value as every collation that ignores case, accents or trailing spaces sees it."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold().rstrip(" ")


def key_value(tagged: Any) -> Any:
    """A decoded tagged value as a hashable key part: folded text, or the value's compact JSON."""
    if isinstance(tagged, dict) and len(tagged) == 1 and isinstance(tagged.get("String"), str):
        return ("s", fold_text(tagged["String"]))
    return _encode.encode(tagged)


def raw_key_value(raw: msgspec.Raw) -> Any:
    """key_value of a value still JSON: text is decoded to be folded, anything else kept as its bytes (the
    producer writes compact JSON, as `key_value` encodes it; a value written otherwise can only miss a
    conflict the follower's row locks then show: the group runs again in order)."""
    data = bytes(raw)
    if data.startswith(b'{"String"'):
        return key_value(_value.decode(data))
    return data


class KeyCollector:
    """Builds the GroupKeys of the open group from its row events (`add`), then hands them over (`take`).

    `lookup` describes a follower table (parallel.ParallelFollower.table_keys); answers are cached
    until `forget` (the Replayer calls it at every DDL)."""

    def __init__(self, lookup: Callable[[str, str], TableKeys]):
        self._lookup = lookup
        self._tables: dict[TableName, TableKeys] = {}
        self.keys = GroupKeys()

    def knows(self, schema: str, table: str) -> bool:
        """Whether the table is described already (else `add` asks the follower: its session must be idle)."""
        return (schema, table) in self._tables

    def forget(self) -> None:
        """Forget every table's description (after DDL)."""
        self._tables.clear()

    def barrier(self) -> None:
        """The open group must run alone (DDL, non-transactional writes, anything not analysed)."""
        self.keys.barrier = True

    def take(self) -> GroupKeys:
        """The open group's keys; the next group starts empty."""
        keys, self.keys = self.keys, GroupKeys()
        return keys

    def add(self, ev: ChangeEvent) -> None:
        """The keys of one row event (its rows may still be JSON: only key columns are decoded)."""
        name = (ev.schema or "", ev.table or "")
        info = self._tables.get(name)
        if info is None:
            info = self._tables[name] = self._lookup(*name)
        keys = self.keys
        keys.touched.add(name)
        if info.barrier:
            keys.barrier = True
            return
        if info.family:
            keys.tables.update(info.family)
            keys.touched.update(info.family)
            return
        columns = [c.lower() for c in ev.columns or []]
        # Every unique key must be named: two rows differing in one key may still collide on another.
        complete = all(c in columns for unique in info.unique for c in unique)
        if info.whole or not info.unique or not complete or ev.snapshot is not None:
            keys.tables.add(name)
            return
        positions = [(n, [columns.index(c) for c in unique]) for n, unique in enumerate(info.unique)]
        value: Callable[[Any], Any] = raw_key_value if ev.rows_json else key_value
        schema, table = name
        add = keys.rows.add
        for cols in _images(ev):
            for n, idx in positions:
                add((schema, table, n, tuple([value(cols[i]) for i in idx])))


def _images(ev: ChangeEvent) -> list[list[Any]]:
    """Each row image of the event (both of an update): values, or JSON values (msgspec.Raw) while the
    rows are still JSON (only key columns are decoded, by raw_key_value)."""
    if ev.rows_json:
        rows = _raw_rows.decode(b"[" + b",".join(ev.rows) + b"]")
        return [cols for row in rows for cols in (row.cols, row.before_cols, row.after_cols) if cols is not None]
    if ev.operation == "Update":
        return [cols for pair in ev.rows for cols in pair]
    return list(ev.rows)


G = TypeVar("G")


@dataclass
class Scheduled(Generic[G]):
    """A group in the scheduler: its payload (statements), keys, and how often it ran."""

    seq: int
    keys: GroupKeys
    payload: G
    attempts: int = 0
    serial: bool = False  # runs again after a conflict: alone, every earlier group committed


@dataclass
class Failure:
    """The group that failed alone (every earlier one committed), and its error."""

    seq: int
    error: BaseException


class Scheduler(Generic[G]):
    """Which group starts next, and whose turn it is to commit. Pure state: parallel.py calls it under its lock.

    Groups get consecutive `seq` numbers; `turn` is the first not committed. Groups start in seq order
    (`next_ready`), a group only when it conflicts with no group in flight (every earlier one not yet
    committed is in flight). A worker calls `committed` when `may_commit`; `abandoned` tells it that
    its group must be rolled back instead (a retry or a failure of an earlier one)."""

    def __init__(self) -> None:
        self.groups: dict[int, Scheduled[G]] = {}  # not committed yet
        self.in_flight: set[int] = set()
        self.turn = 0  # the next seq to commit
        self.next_seq = 0  # the seq the next added group gets
        self.next_dispatch = 0  # the next seq to start
        self.failure: Failure | None = None
        self.retries = 0  # groups rolled back to run again in order

    def add(self, keys: GroupKeys, payload: G) -> int:
        """Queue a group after the others; returns its seq."""
        seq = self.next_seq
        self.groups[seq] = Scheduled(seq, keys, payload)
        self.next_seq += 1
        return seq

    def next_ready(self) -> Scheduled[G] | None:
        """The next group, marked in flight, if it may start now."""
        group = self.groups.get(self.next_dispatch)
        if group is None or self.failure is not None:
            return None
        if group.serial or group.keys.barrier:
            if self.in_flight:
                return None
        elif any(self.groups[s].serial or self.groups[s].keys.conflicts(group.keys) for s in self.in_flight):
            return None
        self.in_flight.add(group.seq)
        self.next_dispatch += 1
        group.attempts += 1
        return group

    def may_commit(self, seq: int) -> bool:
        """Whether every earlier group committed (and this one is still wanted)."""
        return self.turn == seq and not self.abandoned(seq)

    def abandoned(self, seq: int) -> bool:
        """Whether the group in flight must be rolled back: it is to run again, or an earlier one failed."""
        return seq >= self.next_dispatch or (self.failure is not None and seq > self.failure.seq)

    def committed(self, seq: int) -> None:
        """The group's commit (with its checkpoint) returned."""
        assert seq == self.turn, f"group {seq} committed out of order (turn {self.turn})"
        self.in_flight.discard(seq)
        del self.groups[seq]
        self.turn += 1

    def rolled_back(self, seq: int) -> None:
        """A worker rolled back an abandoned group."""
        self.in_flight.discard(seq)

    def failed(self, seq: int, error: BaseException, lock: bool = False, lost: bool = False) -> None:
        """The group's statements failed (and its worker rolled it back).

        While an earlier group is uncommitted the failure may come from running beside it (a conflict the
        keys did not show): the group and every later one in flight run again, one at a time. A lock
        error retries up to MAX_ATTEMPTS; anything else alone, or a lost connection (`lost`), is final."""
        self.in_flight.discard(seq)
        group = self.groups[seq]
        if self.abandoned(seq):
            return  # rolled back anyway: the error of a group that was to run again is no news
        earlier_open = self.turn < seq
        if not lost and (earlier_open or (lock and group.attempts < MAX_ATTEMPTS)):
            self.retries += 1
            for s in range(seq, self.next_dispatch):
                self.groups[s].serial = True
            self.next_dispatch = seq
            return
        if self.failure is None or seq < self.failure.seq:
            self.failure = Failure(seq, error)

    @property
    def settled(self) -> bool:
        """Nothing in flight, and nothing left to start (all committed, or stopped by a failure)."""
        return not self.in_flight and (self.failure is not None or not self.groups)

    def clear(self) -> None:
        """Forget every group (after everything in flight was rolled back); the next seq follows on."""
        self.groups.clear()
        self.in_flight.clear()
        self.turn = self.next_dispatch = self.next_seq
        self.failure = None


__all__ = ["LOCK_ERRORS", "MAX_ATTEMPTS", "GroupKeys", "KeyCollector", "Scheduled", "Scheduler", "TableKeys",
           "fold_text", "key_value", "raw_key_value"]
