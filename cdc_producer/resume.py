"""Where the producer starts: the topic's tail, and the state file for transactions the filters dropped.

The topic is the producer's only durable position: the last record of each source transaction
carries where to resume after it (cdc_stream/positions.TxnEnd). A restart reads the tail and
continues from the last complete transaction, so it neither skips nor repeats one. Transactions
the filters drop entirely leave no record, so their progress is kept in a small state file
under [data] base_path, valid only while the topic's tail is the one it was written against.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from cdc_producer.binlog import LeaderInfo
from cdc_stream.errors import DataError, SetupError
from cdc_stream.layout import Layout, LogTail
from cdc_stream.positions import BinlogFile, Copying, Position, PreparedXa, SnapshotProgress, Windows, XaPending
from cdc_stream.topics import Stream


@dataclass(frozen=True)
class ResumePoint:
    """Where the producer got to: `position` is after the last transaction it published (or the
    filters dropped); `xa_pending` the XA transactions prepared before it and held, not committed."""

    position: Position
    xa_pending: tuple[PreparedXa, ...] = ()

    def read_from(self) -> Position:
        """Where reading the binlog resumes: before the oldest held XA PREPARE group (to hold it
        again), else at `position`."""
        return Position.parse(self.xa_pending[0].resume_from) if self.xa_pending else self.position

    def replay_until(self) -> Position | None:
        """Transactions up to here are read again but not published again (None: nothing is read again)."""
        return self.position if self.xa_pending else None

    def __str__(self) -> str:
        if not self.xa_pending:
            return str(self.position)
        return (f"{self.position} (reading from {self.read_from()} again for {len(self.xa_pending)} prepared "
                "XA transaction(s))")


@dataclass(frozen=True)
class Tail:
    """What the topic's tail says: the next sequence and where to resume (position None: empty topic)."""

    next_sequence: int
    last_sequence: int | None
    position: Position | None
    windows: Windows = field(default_factory=dict)
    snapshot: SnapshotProgress | None = None  # progress of a snapshot that did not complete
    xa_pending: XaPending = field(default_factory=list)
    copying: Copying = field(default_factory=dict)  # live copies in progress

    def resume_point(self) -> ResumePoint | None:
        """Where the topic's last transaction leaves the producer (None: empty topic)."""
        return None if self.position is None else ResumePoint(self.position, tuple(self.xa_pending))


def tail_of(log: LogTail | None, topic: str) -> Tail:
    """The resume point a log's tail gives (LogReader.tail())."""
    if log is None:
        return Tail(0, None, None)
    end = log.end
    position = end.position()
    if position is None:
        raise DataError(
            f"topic '{topic}' offset {log.offset} carries no binlog position (not written by cdc-producer?); "
            "use a new topic for cdc-producer"
        )
    snapshot = end.snapshot if isinstance(end.snapshot, SnapshotProgress) and not end.snapshot.complete else None
    return Tail(log.last_sequence + 1, log.last_sequence, position, dict(end.windows or {}), snapshot,
                list(end.xa_pending or []), dict(end.copying or {}))


def read_tail(layout: Layout, stream: Stream, base_path: str) -> tuple[Tail, ResumeState]:
    """The log topic's tail and the state file beside it: together, where a start resumes
    (`state.load(tail) or tail.resume_point()`; None for a first start)."""
    reader = layout.reader(stream)
    try:
        tail = tail_of(reader.tail(), layout.log_topic)
    finally:
        reader.close()
    return tail, ResumeState.beside(base_path, stream.identity, layout.log_topic)


class _Saved(msgspec.Struct):
    """The state file's content: the resume point's Position spelled flat (gtid_set, or file and pos
    of server_uuid), as the file has always held it."""

    stream_id: str
    topic: str
    tail_sequence: int | None
    gtid_set: str | None = None
    file: str | None = None
    pos: int | None = None
    server_uuid: str | None = None
    xa_pending: list[PreparedXa] = msgspec.field(default_factory=list)

    @classmethod
    def of(cls, stream_id: str, topic: str, tail_sequence: int | None, position: Position,
           xa_pending: XaPending) -> _Saved:
        """The content saving `position` (and the XA transactions held) against this tail."""
        binlog = position.binlog
        return cls(stream_id, topic, tail_sequence, position.gtid_set, binlog.file_name if binlog else None,
                   binlog.offset if binlog else None, position.server_uuid, xa_pending)

    def position(self) -> Position:
        """The saved resume point's Position."""
        binlog = BinlogFile(self.file, self.pos) if self.file is not None else None
        return Position(self.gtid_set, binlog, self.server_uuid)


@dataclass
class ResumeState:
    """Progress through transactions the filters dropped, kept beside the topic's tail."""

    path: Path
    stream_id: str
    topic: str

    @classmethod
    def beside(cls, base_path: str, stream_id: str, topic: str) -> ResumeState:
        """The state file of `topic` under [data] base_path."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in topic)
        return cls(Path(base_path) / f"producer-{safe}.json", stream_id, topic)

    def load(self, tail: Tail) -> ResumePoint | None:
        """The saved resume point, if it was written against this very tail."""
        try:
            saved = msgspec.json.decode(self.path.read_bytes(), type=_Saved)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None
        if (saved.stream_id, saved.topic, saved.tail_sequence) != (self.stream_id, self.topic, tail.last_sequence):
            return None
        return ResumePoint(saved.position(), tuple(saved.xa_pending))

    def save(self, tail_sequence: int | None, position: Position, xa_pending: XaPending | None = None) -> None:
        """Atomically replace the saved resume point."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(_Saved.of(self.stream_id, self.topic, tail_sequence, position,
                                                      list(xa_pending or []))))
        os.replace(tmp, self.path)


def check_same_server(start: Position, info: LeaderInfo) -> None:
    """A file:pos resume point names a place in one server's binlog: refuse it on another server."""
    if start.gtid_set is None and start.server_uuid and info.server_uuid and start.server_uuid != info.server_uuid:
        raise SetupError(
            f"the topic's resume point {start} was written by server {start.server_uuid}, "
            f"but the leader is now {info.server_uuid}: a binlog position means nothing on another server. "
            "Enable GTIDs (gtid_mode=ON, enforce_gtid_consistency=ON) to fail over, or re-create the follower "
            "and start with an empty topic"
        )
