"""One topic per table: which topic an event goes to, and the transaction topic that orders them.

With `[stream] topic = "{database}_{table}"` row events go to their table's topic,
DDL naming one table to that table's topic and database-level DDL to a topic
named after the database. Every source transaction also gets one record on the
transaction topic (like Debezium's transaction metadata) listing, per topic, the
offsets of its events; it is written last, so it is the transaction's commit
mark: a consumer following it replays per-table topics in exact source commit
order and never sees a half-published transaction.

The producer hands the router a large transaction in chunks: each chunk's events
are appended to their table topics as they come, and only where they landed
(per topic: first offset and count) is kept until the transaction's record is
written. A crash between chunks leaves events no record names; they are never
read, and the restart publishes the transaction again. The events of one
transaction must land contiguously in each topic (one producer writes them);
otherwise the record could not name them and the router stops with an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cdc_stream.errors import DataError

import msgspec

from cdc_stream.events import ChangeEvent
from cdc_stream.filters import ddl_targets

_FLUVIO_INVALID = re.compile(r"[^a-z0-9-]+")


def is_per_table(template: str) -> bool:
    """Whether the [stream] topic is a template with {database}/{table}."""
    return "{" in template


def check_template(template: str) -> str | None:
    """None when the template only uses {database} and {table}; else what is wrong."""
    try:
        template.format(database="d", table="t")
    except (KeyError, IndexError, ValueError) as e:
        return f"topic template {template!r} may only use {{database}} and {{table}} ({type(e).__name__}: {e})"
    return None


def topic_for(template: str, event: ChangeEvent, fluvio: bool = False) -> str:
    """The topic of one event under a per-table template."""
    db, table = event.schema, event.table
    if event.operation == "Query":
        targets = ddl_targets(event.query or "", event.database)
        tables = {(d, t) for d, t in targets if t is not None}
        if len(tables) == 1:  # DDL of one table goes with that table's rows
            db, table = tables.pop()
        else:
            db = event.database or next((d for d, _ in targets if d), None) or db
    name = template.format(database=db or "", table=table) if table else (db or "mysql")
    return fluvio_name(name) if fluvio else name


def fluvio_name(name: str) -> str:
    """Fluvio topic names are lowercase letters, digits and '-': flvDb_pet -> flvdb-pet."""
    return _FLUVIO_INVALID.sub("-", name.lower()).strip("-") or "mysql"


class TxnRecord(msgspec.Struct, omit_defaults=True):
    """One source transaction on the transaction topic: where its events are and where to resume after it."""

    txn: str
    sequence: list[int]  # [first, last] event sequence numbers
    topics: dict[str, list[int]]  # topic -> [first offset, event count]
    gtid: str | None = None
    gtid_set: str | None = None
    bn_file: dict | None = None
    server_uuid: str | None = None
    snapshot: dict | None = None
    windows: dict | None = None

    @classmethod
    def of(cls, first_sequence: int, last: ChangeEvent, placed: dict[str, list[int]]) -> "TxnRecord":
        """The record of a transaction from its first event's sequence, its last event and its placement."""
        bn = {"fileName": last.bn_file.file_name, "offset": last.bn_file.offset} if last.bn_file else None
        return cls(txn=last.txn.id, sequence=[first_sequence, last.sequence], topics=placed,
                   gtid=last.gtid, gtid_set=last.gtid_set, bn_file=bn, server_uuid=last.server_uuid,
                   snapshot=last.snapshot, windows=last.windows)

    def as_last_event(self) -> ChangeEvent:
        """The resume fields as a ChangeEvent, for the producer's tail logic."""
        from cdc_stream.events import BinlogFile, Txn

        ev = ChangeEvent(uri="flv://transactions/x", sequence=self.sequence[1], operation="Query", query="")
        ev.txn = Txn(self.txn, 0, True)
        ev.gtid, ev.gtid_set, ev.server_uuid = self.gtid, self.gtid_set, self.server_uuid
        ev.snapshot, ev.windows = self.snapshot, self.windows
        if self.bn_file:
            ev.bn_file = BinlogFile(self.bn_file["fileName"], self.bn_file.get("offset"))
        return ev


def encode_txn(record: TxnRecord) -> bytes:
    return msgspec.json.encode(record)


def decode_txn(data: bytes) -> TxnRecord:
    """Parse a transaction-topic record; raises ValueError when it is not one."""
    try:
        return msgspec.json.decode(data, type=TxnRecord)
    except msgspec.DecodeError as e:
        raise ValueError(f"not a transaction record: {e}") from None


@dataclass
class _Chunk:
    """Events of one transaction queued in the router: how many went to each topic, in order."""

    key: bytes
    first_sequence: int
    counts: dict[str, int]
    last: ChangeEvent | None  # the transaction's last event when this chunk completes it


@dataclass
class Router:
    """Appends transactions' events to their topics, then their records to the transaction topic."""

    stream: Any
    template: str
    txn_topic: str
    fluvio: bool = False
    _topics: dict = field(default_factory=dict)
    _batches: dict = field(default_factory=dict)  # topic -> [(key, record)] not appended yet
    _chunks: list = field(default_factory=list)  # _Chunk, or None: the open transaction was abandoned
    _placed: dict | None = None  # the open transaction: topic -> [first offset, count] appended
    _first_sequence: int | None = None

    def topic(self, name: str):
        if name not in self._topics:
            self.stream.create(name)
            self._topics[name] = self.stream.topic(name)
        return self._topics[name]

    def append(self, events: list[ChangeEvent], encoded: list[bytes], key: bytes) -> None:
        """Append one whole transaction now."""
        self.add(events, encoded, key, complete=True)
        self.flush()

    def add(self, events: list[ChangeEvent], encoded: list[bytes], key: bytes, complete: bool) -> None:
        """Queue events of one transaction: all of it, or (not `complete`) a chunk that more will follow."""
        counts: dict[str, int] = {}
        for event, data in zip(events, encoded):
            name = topic_for(self.template, event, self.fluvio)
            self._batches.setdefault(name, []).append((key, data))
            counts[name] = counts.get(name, 0) + 1
        self._chunks.append(_Chunk(key, events[0].sequence, counts, events[-1] if complete else None))

    def abandon(self) -> None:
        """The open transaction will not complete (it will be published again from its start)."""
        self._chunks.append(None)

    def flush(self) -> None:
        """Append the queued events to their topics, then the records of the transactions they complete."""
        taken = {name: iter(self.topic(name).append(batch)) for name, batch in self._batches.items()}
        records = []
        for chunk in self._chunks:
            if chunk is None:
                self._placed = self._first_sequence = None
                continue
            if self._placed is None:
                self._placed, self._first_sequence = {}, chunk.first_sequence
            for name, count in chunk.counts.items():
                offsets = [next(taken[name]) for _ in range(count)]
                _place(self._placed, name, offsets, chunk.key)
            if chunk.last is not None:
                record = TxnRecord.of(self._first_sequence, chunk.last, self._placed)
                records.append((chunk.key, encode_txn(record)))
                self._placed = self._first_sequence = None
        self._batches, self._chunks = {}, []
        if records:
            self.topic(self.txn_topic).append(records)

    def close(self) -> None:
        for t in self._topics.values():
            t.close()


def _place(placed: dict[str, list[int]], name: str, offsets: list[int], key: bytes) -> None:
    """Add a chunk's offsets in topic `name` to its transaction's [first offset, count]."""
    first, count = placed.get(name, (offsets[0], 0))
    if offsets != list(range(first + count, first + count + len(offsets))):
        raise DataError(
            f"the events of transaction {key.decode(errors='replace')} did not land next to each other in topic "
            f"'{name}' (offsets {offsets[0]}..{offsets[-1]} after {first}+{count}): another program writes to it; "
            "per-table topics must be written by this cdc-producer only"
        )
    placed[name] = [first, count + len(offsets)]
