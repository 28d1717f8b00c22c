"""Savepoints inside a logged transaction: which of its rows a ROLLBACK TO SAVEPOINT undid.

MariaDB truncates its binlog cache at `ROLLBACK TO s` when the transaction changed only
transactional tables, so nothing rolled back is logged. Once the transaction has changed a
non-transactional table (whose rows it logs as their own group, before), it logs `SAVEPOINT `s``,
the rows after it and `ROLLBACK TO `s``: a native replica runs them and its InnoDB undoes the rows
in between. The producer drops those rows instead (`Savepoints` says where in the open transaction
each savepoint was taken); a savepoint in a part of a large transaction already handed on is
dealt with by reading the transaction again and skipping the rolled-back range (`SkipRanges`).
The statements are read by cdc_stream.classify.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Savepoint:
    """Where a savepoint was taken: the number of the transaction's events before it, and the
    binlog offset after its SAVEPOINT statement."""

    name: str
    events_before: int
    file: str
    after: int


@dataclass
class Savepoints:
    """The open transaction's savepoints, in the order they were taken."""

    _taken: list[Savepoint] = field(default_factory=list)

    def take(self, savepoint: Savepoint) -> None:
        """SAVEPOINT: a savepoint of the same name is replaced."""
        self._taken = [s for s in self._taken if s.name != savepoint.name] + [savepoint]

    def rollback_to(self, name: str) -> Savepoint | None:
        """ROLLBACK TO: the savepoint (kept: it can be rolled back to again); later ones are gone.
        None when there is no such savepoint (the leader refused the statement: it is not logged)."""
        for i, s in enumerate(self._taken):
            if s.name == name:
                del self._taken[i + 1:]
                return s
        return None

    def release(self, name: str) -> None:
        """RELEASE SAVEPOINT: the savepoint and every later one are gone."""
        for i, s in enumerate(self._taken):
            if s.name == name:
                del self._taken[i:]
                return

    def clear(self) -> None:
        """The transaction ended."""
        self._taken.clear()


@dataclass
class SkipRanges:
    """Rows events to skip when a transaction is read again: those a ROLLBACK TO undid, by where
    they end in the binlog (after the SAVEPOINT, up to the ROLLBACK TO)."""

    _ranges: list[tuple[str, int, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def add(self, file: str, after: int, until: int) -> None:
        """Skip rows events of `file` ending after offset `after` and at or before `until`."""
        self._ranges.append((file, after, until))

    def holds(self, file: str | None, end: int) -> bool:
        """Whether the rows event ending at `end` of `file` was rolled back."""
        return any(f == file and after < end <= until for f, after, until in self._ranges)

    def clear(self) -> None:
        """The transaction committed: its offsets do not come again."""
        self._ranges.clear()
