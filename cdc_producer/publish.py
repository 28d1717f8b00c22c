"""Binlog events -> source transactions -> atomic appends to the topic, and the resume point.

The topic is the producer's only durable position: the last event of each source
transaction carries where to resume after it. A restart reads the tail and
continues from the last complete transaction, so it neither skips nor repeats one.

Two things keep the producer fast and its memory bounded. Whole transactions are
queued and appended together (one durable write, one fsync for the embedded log)
while the binlog has more to read, and at the latest after OUTBOX_BYTES or
MAX_DELAY. A large transaction is published in chunks of about CHUNK_BYTES of
binlog rows, so it is never held whole; only its last event says `txn.last`.
A crash between chunks leaves a partial transaction at the topic's tail: the
restart republishes it whole, and the consumer drops the partial copy when the
transaction's first event comes again. Transactions the filters drop entirely leave no
record, so their progress is kept in a small state file under [data] base_path,
valid only while the topic's tail is the one it was written against.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from cdc_producer.binlog import LeaderInfo, Position, merge_gtid, parse_position
from cdc_producer.decode import encode_rows, primary_key
from cdc_stream.errors import DataError, SetupError
from cdc_stream.events import BinlogFile, ChangeEvent, MalformedEvent, Txn, decode_event, encode_event, make_uri
from cdc_stream.filters import TableFilter, ddl_targets
from cdc_stream.positions import covers, passed
from cdc_stream.routing import Router, decode_txn
from cdc_stream.topics import Topic
from cdc_stream.topics.background import BackgroundAppends

_ROW_OPERATION = {
    WriteRowsEvent: "Add", UpdateRowsEvent: "Update", DeleteRowsEvent: "Delete",
    PartialUpdateRowsEvent: "Update",  # MySQL binlog_row_value_options=PARTIAL_JSON: decode.py rebuilds whole rows
}
_IGNORED_STATEMENTS = ("SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA ")
STATE_SAVE_INTERVAL = 1.0
# A transaction's events are queued for the topic once they hold this many bytes
# of binlog row images (decoded, ~20-30 times that in Python objects).
CHUNK_BYTES = 1 << 20
# Queued records are appended at the latest when they reach this size or age
# (earlier when the binlog has nothing more to read right now).
OUTBOX_BYTES = 4 << 20
MAX_DELAY = 0.1
_FL_STANDALONE = 0x01  # MariaDB GTID event flag: a group without BEGIN/COMMIT (DDL)


@dataclass
class Tail:
    """What the topic's tail says: the next sequence and where to resume (None: empty topic)."""

    next_sequence: int
    last_sequence: int | None
    position: Position | None
    windows: dict = field(default_factory=dict)
    snapshot: dict | None = None  # progress of a snapshot that did not complete


def read_tail(topic: Topic, flavor: str) -> Tail:
    """Find the last complete source transaction on the topic."""
    end = topic.end_offset()
    if end == 0:
        return Tail(0, None, None)
    last = _decode_at(topic, end - 1)
    offset, event = end - 1, last
    # A trailing partial transaction (a large one published in chunks, or a stream
    # without atomic batches) is republished whole: resume from the last event
    # that completed one.
    while event.txn is not None and not event.txn.last:
        offset, event = _first_of_partial(topic, offset, event)
        if offset == 0:
            raise DataError(
                f"topic '{topic.name}' holds only a partial first transaction and no position before it; "
                "recreate the topic (and the follower) to start over"
            )
        offset -= 1
        event = _decode_at(topic, offset)
    windows = dict(event.windows or {})
    if event.snapshot is not None:
        marker = event.snapshot
        position = parse_position(marker["stream_from"])
        return Tail(last.sequence + 1, last.sequence, position, windows, None if marker.get("complete") else marker)
    return Tail(last.sequence + 1, last.sequence, _resume_position(event, topic.name, offset), windows)


def _first_of_partial(topic: Topic, offset: int, event: ChangeEvent) -> tuple[int, ChangeEvent]:
    """The first event of the partial transaction `event` belongs to, found by its txn index
    (one read instead of one per event); (offset, event) unchanged when the record there is
    not that first event (the events are not contiguous, e.g. another writer interleaved)."""
    first = offset - event.txn.index
    if first == offset or first < 0:
        return offset, event
    candidate = _decode_at(topic, first)
    if candidate.txn is not None and candidate.txn.id == event.txn.id and candidate.txn.index == 0:
        return first, candidate
    return offset, event


def _decode_at(topic: Topic, offset: int) -> ChangeEvent:
    records = topic.read(offset, wait=0.0, max_records=1)
    if not records:
        raise DataError(f"topic '{topic.name}' has no record at offset {offset}")
    try:
        return decode_event(records[0].value)
    except MalformedEvent as e:
        try:  # the transaction topic of per-table topics
            return decode_txn(records[0].value).as_last_event()
        except ValueError:
            pass
        raise DataError(
            f"topic '{topic.name}' offset {offset} is not a change event ({e}); the producer cannot find where to "
            "resume: remove the record's topic or use a new topic"
        ) from None


def _resume_position(event: ChangeEvent, topic: str, offset: int) -> Position:
    if event.gtid_set is not None:
        return Position(gtid_set=event.gtid_set)
    if event.bn_file is not None and event.bn_file.offset is not None:
        return Position(file=event.bn_file.file_name, pos=event.bn_file.offset, server_uuid=event.server_uuid)
    raise DataError(
        f"topic '{topic}' offset {offset} carries no binlog position (not written by cdc-producer?); "
        "use a new topic for cdc-producer"
    )


@dataclass
class ResumeState:
    """Progress through transactions the filters dropped, kept beside the topic's tail."""

    path: Path
    stream_id: str
    topic: str

    def load(self, tail: Tail) -> Position | None:
        """The saved position, if it was written against this very tail."""
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if (saved.get("stream_id"), saved.get("topic"), saved.get("tail_sequence")) != (
            self.stream_id, self.topic, tail.last_sequence,
        ):
            return None
        return Position(saved.get("gtid_set"), saved.get("file"), saved.get("pos"), saved.get("server_uuid"))

    def save(self, tail_sequence: int | None, position: Position) -> None:
        """Atomically replace the saved position."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({
            "stream_id": self.stream_id, "topic": self.topic, "tail_sequence": tail_sequence,
            "gtid_set": position.gtid_set, "file": position.file, "pos": position.pos,
            "server_uuid": position.server_uuid,
        }))
        os.replace(tmp, self.path)


@dataclass
class Stats:
    transactions: int = 0
    events: int = 0
    rows: int = 0
    skipped_transactions: int = 0


@dataclass
class Publisher:
    """Feeds on binlog events; appends each source transaction that passes the filters."""

    topic: Topic
    resource: str
    filters: TableFilter
    info: LeaderInfo
    next_sequence: int
    position: Position
    state: ResumeState | None = None
    stats: Stats = field(default_factory=Stats)
    binlog_file: str | None = None
    on_publish: Callable[[list[ChangeEvent]], None] | None = None
    chunk_bytes: int = CHUNK_BYTES
    outbox_bytes: int = OUTBOX_BYTES
    max_delay: float = MAX_DELAY
    _pending: list[ChangeEvent] = field(default_factory=list)  # the open transaction's events not queued yet
    _pending_bytes: int = 0
    _txn_index: int = 0  # events of the open transaction already queued
    _outbox: list = field(default_factory=list)  # (key, record) queued for the topic
    _outbox_size: int = 0
    _outbox_since: float | None = None
    _gtid: str | None = None
    _txn_start: str | None = None
    _in_txn: bool = False
    _dirty_since: float | None = None
    _last_sequence: int | None = None
    windows: dict = field(default_factory=dict)
    router: Router | None = None  # one topic per table; `topic` is then the transaction topic
    _uris: dict = field(default_factory=dict)
    _appends: BackgroundAppends | None = None

    def __post_init__(self) -> None:
        self._last_sequence = self.next_sequence - 1 if self.next_sequence else None
        if self.router is None:
            self._appends = BackgroundAppends(self.topic)

    def handle(self, ev) -> None:
        """Process one binlog event."""
        if isinstance(ev, RowsEvent):
            op = _ROW_OPERATION.get(type(ev))
            if op and self.filters.allows_table(ev.schema, ev.table):
                window = self._in_window(f"{ev.schema}.{ev.table}") if self.windows else None
                if window is not None and window.get("key_after") is None:
                    return  # the snapshot read this table after this change
                # Rows go straight to JSON, except where the snapshot window needs their keys.
                columns, rows = encode_rows(ev, as_json=window is None)
                if window is not None:
                    rows = _rows_up_to(columns, primary_key(ev), rows, window["key_after"])
                if rows:
                    self._add(ChangeEvent(
                        uri=self._uri(ev.schema, ev.table), sequence=0, operation=op,
                        rows=rows, columns=columns, pk=primary_key(ev), rows_json=window is None,
                    ), ev)
            return
        if isinstance(ev, (MariadbGtidEvent, GtidEvent)):
            self.discard_partial()  # a new transaction starts: nothing can be pending
            self._gtid = ev.gtid
            # MariaDB's GTID event is itself the BEGIN ("BEGIN GTID"): without the
            # standalone flag the group runs to its XID/COMMIT, even when it opens
            # with DDL (CREATE TABLE ... SELECT logs CREATE + rows in one group).
            if isinstance(ev, MariadbGtidEvent) and not ev.flags & _FL_STANDALONE:
                self._in_txn = True
                self._txn_start = f"{self.binlog_file}:{ev.packet.log_pos - ev.event_size}"
            return
        if isinstance(ev, QueryEvent):
            self._query(ev)
            return
        if isinstance(ev, XidEvent):
            self._commit(ev)
            return
        if isinstance(ev, RotateEvent):
            self.binlog_file = ev.next_binlog
            return
        if isinstance(ev, HeartbeatLogEvent):  # the leader has nothing more for now
            self.flush()
            self.flush_state()

    def _uri(self, schema: str, table: str) -> str:
        key = (schema, table)
        uri = self._uris.get(key)
        if uri is None:
            if len(self._uris) > 10_000:
                self._uris.clear()
            uri = self._uris[key] = make_uri(self.resource, schema, table)
        return uri

    def _query(self, ev: QueryEvent) -> None:
        sql = ev.query.strip()
        head = sql[:20].upper()
        if head == "BEGIN":
            self._in_txn = True
            self._txn_start = f"{self.binlog_file}:{ev.packet.log_pos - ev.event_size}"
            return
        if head in ("COMMIT", "ROLLBACK"):
            self._commit(ev)
            return
        if head.startswith(_IGNORED_STATEMENTS):
            return
        db = ev.schema.decode("utf-8", "surrogateescape") if isinstance(ev.schema, bytes) else ev.schema
        db = db or None
        if self._txn_start is None:
            self._txn_start = f"{self.binlog_file}:{ev.packet.log_pos - ev.event_size}"
        if self.filters.allows_query(sql, db) and not self._ddl_in_window(sql, db):
            self._add(ChangeEvent(
                uri=make_uri(self.resource, db), sequence=0, operation="Query", query=sql, database=db,
            ), ev)
        if not self._in_txn:  # DDL is its own transaction
            self._commit(ev)

    def _ddl_in_window(self, sql: str, db: str | None) -> bool:
        if not self.windows:
            return False
        tables = [f"{d}.{t}" for d, t in ddl_targets(sql, db) if t is not None]
        return bool(tables) and all(self._in_window(t) is not None for t in tables)

    def _add(self, event: ChangeEvent, ev) -> None:
        event.bn_file = BinlogFile(self.binlog_file or "", ev.packet.log_pos)
        event.gtid = self._gtid
        event.ts = ev.timestamp * 1000
        self._pending.append(event)
        self._pending_bytes += ev.event_size
        if self._pending_bytes >= self.chunk_bytes and len(self._pending) > 1 and self._txn_id() is not None:
            # Queue all but the last event: the commit always has an event to mark `last`.
            chunk, self._pending = self._pending[:-1], self._pending[-1:]
            self._pending_bytes = ev.event_size
            self._queue(chunk, self._txn_id(), complete=False)

    def _txn_id(self) -> str | None:
        """The open transaction's id, once known (its GTID, or where its BEGIN is)."""
        return self._gtid or self._txn_start

    def _commit(self, ev) -> None:
        if self._gtid is not None:
            self.position = Position(gtid_set=merge_gtid(self.info.flavor, self.position.gtid_set or "", self._gtid))
        else:
            self.position = Position(file=self.binlog_file, pos=ev.packet.log_pos, server_uuid=self.info.server_uuid)
        events = self._pending
        txn_id = self._txn_id() or f"{self.binlog_file}:{ev.packet.log_pos}"
        self._reset_txn()
        if not events:
            self.stats.skipped_transactions += 1
            self._dirty_since = self._dirty_since or time.monotonic()
            return
        last = events[-1]
        last.bn_file = BinlogFile(self.binlog_file or "", ev.packet.log_pos)
        last.gtid_set = self.position.gtid_set
        if last.gtid_set is None:
            last.server_uuid = self.info.server_uuid
        self._expire_windows()
        self._queue(events, txn_id, complete=True)

    def _reset_txn(self) -> None:
        self._pending, self._pending_bytes = [], 0
        self._in_txn, self._gtid, self._txn_start = False, None, None

    def publish(self, events: list[ChangeEvent], txn_id: str) -> None:
        """Number the events of one source transaction and append them now (with anything queued)."""
        self._queue(events, txn_id, complete=True)
        self.flush()

    def _queue(self, events: list[ChangeEvent], txn_id: str, complete: bool) -> None:
        """Number and encode events of one transaction (all of it, or a chunk when not `complete`) for the topic."""
        first_index = self._txn_index
        for i, event in enumerate(events):
            event.sequence = self.next_sequence + i
            event.txn = Txn(txn_id, first_index + i, complete and i == len(events) - 1)
        last = events[-1]
        if complete and self.windows:
            last.windows = dict(self.windows)
        encoded = [encode_event(e) for e in events]
        key = txn_id.encode()
        if self.router is not None:
            self.router.add(events, encoded, key, complete)
        else:
            self._outbox.extend([(key, data) for data in encoded])
        self._outbox_size += sum(len(data) for data in encoded)
        self._outbox_since = self._outbox_since or time.monotonic()
        self.next_sequence += len(events)
        self.stats.events += len(events)
        self.stats.rows += sum(len(e.rows) for e in events)
        self._txn_index = 0 if complete else first_index + len(events)
        if complete:
            self._last_sequence = last.sequence
            self._dirty_since = None
            self.stats.transactions += 1
        if self.on_publish:
            self.on_publish(events)
        if self._outbox_size >= self.outbox_bytes or time.monotonic() - self._outbox_since >= self.max_delay:
            self.flush(wait=False)

    @property
    def queued(self) -> bool:
        """Whether records are queued and not yet handed to the topic."""
        return self._outbox_since is not None

    @property
    def unflushed(self) -> bool:
        """Whether records are queued or being appended, not yet durable on the topic."""
        return self._outbox_since is not None or (self._appends is not None and self._appends.pending)

    def flush(self, wait: bool = True) -> None:
        """Append everything queued, in one batch per topic; durable when this returns.

        wait=False: on one topic whose backend can (Topic.stage), the batch is committed
        in the background while decoding goes on; the next flush waits for it first."""
        if self._outbox_since is not None:
            if self.router is not None:
                self.router.flush()
            else:  # one topic: its appends always go through _appends
                self._appends.submit(self._outbox)
            self._outbox, self._outbox_size, self._outbox_since = [], 0, None
        if wait and self._appends is not None:
            self._appends.wait()

    def settle(self) -> None:
        """Let a background append end before the topic is closed (its failure, if any,
        was or will be raised by flush())."""
        if self._appends is not None:
            self._appends.settle()

    def _in_window(self, table: str) -> dict | None:
        """The snapshot window that still holds `table`'s current transaction, if any."""
        window = self.windows.get(table)
        if window is None:
            return None
        binlog = (self.binlog_file, 0) if self.binlog_file else None
        return window if covers(window["until"], self._gtid, binlog) else None

    def _expire_windows(self) -> None:
        for table in [t for t, w in self.windows.items() if passed(self.position.text(), w["until"])]:
            del self.windows[table]

    def discard_partial(self) -> None:
        """Forget a transaction whose commit was not seen (the connection dropped mid-way).

        Reading resumes from `position`, the last committed transaction, so it comes again whole.
        Chunks of it already queued or published stay: the consumer drops that partial copy
        when the transaction's first event comes again.
        """
        if self._txn_index and self.router is not None:
            self.router.abandon()
        self._txn_index = 0
        self._reset_txn()

    def flush_state(self, force: bool = False) -> None:
        """Save progress through filtered-out transactions (at most once a second)."""
        if self.state is None or self._dirty_since is None or self._in_txn or self._pending or self.unflushed:
            return  # the saved position must match the topic's tail
        if force or time.monotonic() - self._dirty_since >= STATE_SAVE_INTERVAL:
            self.state.save(self._last_sequence, self.position)
            self._dirty_since = None


def check_same_server(start: Position, info: LeaderInfo) -> None:
    """A file:pos resume point names a place in one server's binlog: refuse it on another server."""
    if start.gtid_set is None and start.server_uuid and info.server_uuid and start.server_uuid != info.server_uuid:
        raise SetupError(
            f"the topic's resume point {start.file}:{start.pos} was written by server {start.server_uuid}, "
            f"but the leader is now {info.server_uuid}: a binlog position means nothing on another server. "
            "Enable GTIDs (gtid_mode=ON, enforce_gtid_consistency=ON) to fail over, or re-create the follower "
            "and start with an empty topic"
        )


def _rows_up_to(columns: list[str], pk: list[str], rows: list, key_after: list) -> list:
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
