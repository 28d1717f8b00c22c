"""One topic per table: which topic an event goes to, and the transaction topic that orders them.

With `[stream] topic = "{database}_{table}"` row events go to their table's topic,
DDL naming one table to that table's topic and database-level DDL to a topic
named after the database. Every source transaction also gets one record on the
transaction topic (like Debezium's transaction metadata) listing, per topic, the
offsets of its events; it is written last, so it is the transaction's commit
mark: a consumer following it replays per-table topics in exact source commit
order and never sees a half-published transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

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
    def of(cls, events: list[ChangeEvent], placed: dict[str, list[int]]) -> "TxnRecord":
        last = events[-1]
        bn = {"fileName": last.bn_file.file_name, "offset": last.bn_file.offset} if last.bn_file else None
        return cls(txn=last.txn.id, sequence=[events[0].sequence, last.sequence], topics=placed,
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
class Router:
    """Appends a transaction's events to their topics, then its record to the transaction topic."""

    stream: Any
    template: str
    txn_topic: str
    fluvio: bool = False
    _topics: dict = field(default_factory=dict)

    def topic(self, name: str):
        if name not in self._topics:
            self.stream.create(name)
            self._topics[name] = self.stream.topic(name)
        return self._topics[name]

    def append(self, events: list[ChangeEvent], encoded: list[bytes], key: bytes) -> None:
        groups: dict[str, list[bytes]] = {}
        for event, data in zip(events, encoded):
            groups.setdefault(topic_for(self.template, event, self.fluvio), []).append(data)
        placed = {}
        for name, batch in groups.items():
            offsets = self.topic(name).append([(key, data) for data in batch])
            placed[name] = [offsets[0], len(offsets)]
        self.topic(self.txn_topic).append([(key, encode_txn(TxnRecord.of(events, placed)))])

    def close(self) -> None:
        for t in self._topics.values():
            t.close()
