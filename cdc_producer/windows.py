"""Snapshot windows: binlog changes a resumed snapshot already holds, which the producer must drop.

A snapshot killed mid-way resumes with a new read view at a later binlog position (`until`);
for the tables it copies then, the binlog changes up to `until` are already in the copied rows:
every change of a table copied whole after the restart, or only the rows with a key above
`key_after` for the table whose copy continued after its last chunk. The windows travel on
the topic (the `windows` field of each transaction's last record) until the stream passes
`until`, so a producer restarted inside a window still drops what it must.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdc_stream.positions import BinlogFile, Position, SnapshotWindow, Windows

if TYPE_CHECKING:
    from cdc_stream.classify import Statement


class SnapshotWindows:
    """The open windows, by "db.table"."""

    def __init__(self, windows: Windows | None = None):
        self._open: Windows = dict(windows or {})
        # Each window's `until` as a Position, parsed once (the window itself is what the topic carries).
        self._until = {table: Position.parse(w.until) for table, w in self._open.items()}

    def __bool__(self) -> bool:
        return bool(self._open)

    def open(self, table: str, until: Position, key_after: list[Any] | None) -> None:
        """Drop `table`'s binlog changes up to `until` (for keys above `key_after`, or all)."""
        self._open[table] = SnapshotWindow(until.text(), key_after)
        self._until[table] = until

    def holding(self, table: str, gtid: str | None, binlog_file: str | None) -> SnapshotWindow | None:
        """The window that holds `table`'s current transaction (by its GTID, else its binlog file), if any."""
        window = self._open.get(table)
        if window is None:
            return None
        binlog = BinlogFile(binlog_file, 0) if binlog_file else None
        return window if self._until[table].covers(gtid, binlog) else None

    def cover(self, gtid: str | None, binlog_file: str | None) -> bool:
        """Whether an open window covers the transaction (a snapshot read after it: it holds its
        effect on the windows' tables)."""
        binlog = BinlogFile(binlog_file, 0) if binlog_file else None
        return any(until.covers(gtid, binlog) for until in self._until.values())

    def holds_ddl(self, statement: Statement, gtid: str | None, binlog_file: str | None) -> bool:
        """Whether every table a DDL statement names is held by a window (the snapshot has its result)."""
        if not self._open:
            return False
        tables = [f"{d}.{t}" for d, t in statement.targets if t is not None]
        return bool(tables) and all(self.holding(t, gtid, binlog_file) is not None for t in tables)

    def expire(self, position: Position) -> None:
        """Close the windows the stream has passed."""
        for table in [t for t, until in self._until.items() if position.passed(until)]:
            del self._open[table], self._until[table]

    def current(self) -> Windows:
        """A copy of the open windows, for a transaction's last record."""
        return dict(self._open)


def rows_up_to(columns: list[str], pk: list[str], rows: list[Any], key_after: list[Any]) -> list[Any]:
    """Rows whose primary key is at or below key_after: the part a resumed snapshot read earlier.

    Such windows exist only for integer keys, so the tagged values compare as numbers.
    """
    idx = [columns.index(k) for k in pk]
    bound = list(key_after)
    keep = []
    for row in rows:
        image = row[0] if isinstance(row, tuple) else row  # an update is matched by its before-image
        key = [next(iter(image[i].values())) for i in idx]
        if key <= bound:
            keep.append(row)
    return keep
