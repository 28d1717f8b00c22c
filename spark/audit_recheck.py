"""The audit's second pass: the differing keys re-read on both servers, and excused by the topic.

The follower is read with its checkpoint in one snapshot, then the leader, then the topic
beyond the checkpoint (through the `mysql_cdc` source); a difference the topic still holds,
or a row the leader changed between the passes, is pending, not drift.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from audit_tables import Key, Table, select_exprs

from cdc_stream.classify import ddl_targets
from cdc_stream.column_types import TEMPORAL_TYPES, types_of
from cdc_stream.consumer_offsets import SCHEMA as CDC_SCHEMA
from cdc_stream.consumer_offsets import TABLE as CDC_TABLE
from cdc_stream.mysql import quote_ident
from cdc_stream.values import BadValue, to_param

RECHECK_BATCH = 200
INDEXABLE = types_of("signed", "year") | TEMPORAL_TYPES | {"char", "varchar"}  # `col IN (canonical)` works


@dataclass
class Backlog:
    """What the topic holds beyond the consumer's checkpoint: keys touched (normalised), tables altered."""

    start: int = 0
    end: int = 0
    keys: dict[tuple[str, str], set[Key]] = field(default_factory=dict)
    ddl: set[tuple[str | None, str | None]] = field(default_factory=set)

    def touches(self, table: Table, key: Key) -> bool:
        """Whether applying the backlog may still change this (normalised) key of this table."""
        if {(table.database, table.name), (table.database, None)} & self.ddl:
            return True
        return key in self.keys.get((table.database, table.name), set())


def read_backlog(spark, profile: Path, start: int, end: int, tables: Sequence[Table]) -> Backlog:
    """The keys of `tables` that the log's records in [start, end) touch, read by the `mysql_cdc` source
    on the executors (whole transactions, per-table topics merged in source order, and a transaction
    still being published at the end included: it may still change the follower).

    Only the distinct keys (as the topic's tagged values) and the DDL reach the driver."""
    from pyspark.sql import functions as F

    backlog = Backlog(start=start, end=end)
    if start >= end or not tables:
        return backlog
    df = (spark.read.format("mysql_cdc").option("profile", str(profile)).option("typed", "false")
          .option("startingOffset", str(start)).option("endingOffset", str(end)).option("includeIncomplete", "true")
          .load())
    for row in df.where(F.col("op") == "ddl").select("database", "ddl").collect():
        backlog.ddl.update(ddl_targets(row["ddl"] or "", row["database"]))
    # A live copy's chunk not applied yet replaces a key range: the whole table may still change.
    for row in df.where(F.col("op") == "copy_range").select("database", "table").distinct().collect():
        backlog.ddl.add((row["database"], row["table"]))
    key = None
    for t in tables:  # each table's key columns, as an array of tagged values (JSON text)
        this = (F.col("database") == t.database) & (F.col("table") == t.name)
        cols = F.array(*[F.col("image")[c.name] for c in t.key_columns])
        key = F.when(this, cols) if key is None else key.when(this, cols)
    images = (df.where(F.col("op") != "ddl")
              .select("database", "table", F.explode(F.array("before", "after")).alias("image"))
              .where(F.col("image").isNotNull()))
    keyed = images.select("database", "table", key.alias("key")).where(F.col("key").isNotNull()).distinct()
    for row in keyed.collect():
        table = next(t for t in tables if (t.database, t.name) == (row["database"], row["table"]))
        keys = backlog.keys.setdefault((table.database, table.name), set())
        try:
            keys.add(tuple(c.norm(to_param(json.loads(v)), from_server=False) for c, v in zip(table.key_columns,
                                                                                                 row["key"])))
        except (BadValue, ValueError, TypeError, ArithmeticError):
            backlog.ddl.add((table.database, table.name))  # columns changed: cannot tell, so all pending
    return backlog


@dataclass
class TableReport:
    """The audit of one table; keys are JSON-friendly lists (PK values, or whole rows)."""

    database: str
    table: str
    leader_rows: int = 0
    follower_rows: int = 0
    missing: list[list] = field(default_factory=list)
    extra: list[list] = field(default_factory=list)
    changed: list[list] = field(default_factory=list)
    pending: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        """No drift (pending keys are the follower being behind, not drift)."""
        return not (self.missing or self.extra or self.changed)

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("database", "table", "leader_rows", "follower_rows")}
        return d | {k: getattr(self, k) for k in ("missing", "extra", "changed", "pending")}


@dataclass
class AuditResult:
    """Every table's audit, and where the consumer stood in the topic."""

    tables: list[TableReport]
    checkpoint: int = 0
    topic_end: int = 0

    @property
    def status(self) -> str:
        return "ok" if all(t.in_sync for t in self.tables) else "drift"

    def to_json(self) -> dict[str, Any]:
        """The --report document: {"status": ..., "tables": [...]}."""
        return {"status": self.status, "tables": [t.to_json() for t in self.tables]}


def _sort_key(key: list) -> tuple:
    return tuple((0, 0, "") if v is None else (1, v, "") if isinstance(v, int) else (2, 0, str(v)) for v in key)


def classify(table: Table, candidates: list[tuple[Key, Any]], leader_now: dict, follower_now: dict,
             backlog: Backlog, report: TableReport) -> None:
    """Sort the first pass's differences, as re-read now, into missing/extra/changed/pending.

    A key is pending when the topic beyond the checkpoint touches it, or when the
    leader changed it between the two passes (a change perhaps not published yet).
    With a PK, `before` and the *_now maps hold rows; without, copies of a row.
    """
    for key, before in candidates:
        try:
            pending = backlog.touches(table, table.norm(key))
        except (ValueError, ArithmeticError):
            pending = False
        if table.pk:
            lead, follow = leader_now.get(key), follower_now.get(key)
            kind, copies = ("missing" if follow is None else "extra" if lead is None else "changed"), 1
        else:
            lead, follow = leader_now.get(key, 0), follower_now.get(key, 0)
            kind, copies = ("missing" if lead > follow else "extra"), abs(lead - follow)
        if lead != follow:  # else caught up (or was in flight) since the first pass
            target = report.pending if pending or lead != before else getattr(report, kind)
            target.extend([table.report(key)] * copies)
    for kind in ("missing", "extra", "changed", "pending"):
        getattr(report, kind).sort(key=_sort_key)


def fetch(conn: pymysql.Connection, table: Table, side: Table | None, keys: list[Key]) -> dict[Key, Any]:
    """The current canonical rows of `keys` on one server: {key: row} with a PK, {row: copies} without."""
    out: dict[Key, Any] = {}
    if side is None or not keys:
        return out
    exprs = [e.replace("%", "%%") for e in select_exprs(table, side)]  # pymysql formats with %
    key_exprs = [exprs[i] for i in table.key_index]
    first = {c.name: c for c in side.columns}.get(table.key_columns[0].name) if table.pk else None
    with conn.cursor() as cur:
        for i in range(0, len(keys), RECHECK_BATCH):
            batch = keys[i:i + RECHECK_BATCH]
            match = " OR ".join("(" + " AND ".join(f"{e} <=> %s" for e in key_exprs) + ")" for _ in batch)
            params = [v for k in batch for v in k[:len(key_exprs)]]
            sql = f"SELECT {', '.join(exprs)} FROM {side.qualified.replace('%', '%%')} WHERE ({match})"
            if first is not None and first.data_type in INDEXABLE:  # the PK index finds the rows: no full scan
                sql += f" AND {quote_ident(first.name).replace('%', '%%')} IN ({', '.join(['%s'] * len(batch))})"
                params += [k[0] for k in batch]
            cur.execute(sql, params)
            for row in cur.fetchall():
                if table.pk:
                    out[tuple(row[j] for j in table.key_index)] = list(row)
                else:
                    out[tuple(row)] = out.get(tuple(row), 0) + 1
    return out


def follower_snapshot(conn: pymysql.Connection, topic: str, work: list[tuple[Table, Table | None, list[Key]]]
                      ) -> tuple[int, str | None, list[dict]]:
    """(checkpoint next_offset, its stream id, the rows of each work item), all from one snapshot.

    The consumer commits rows and checkpoint together, so within one snapshot the
    follower is exactly "the topic applied up to next_offset".
    """
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            try:
                cur.execute(f"SELECT next_offset, stream_id FROM {quote_ident(CDC_SCHEMA)}.{quote_ident(CDC_TABLE)} "
                            "WHERE topic = %s", (topic,))
                row = cur.fetchone()
            except pymysql.err.ProgrammingError as e:
                if e.args[0] != 1146:
                    raise
                row = None  # the consumer never ran: nothing applied yet
            rows = [fetch(conn, t, side, keys) for t, side, keys in work]
        finally:
            conn.rollback()
    return (row[0], row[1], rows) if row else (0, None, rows)



__all__ = ["AuditResult", "Backlog", "TableReport", "classify", "fetch", "follower_snapshot", "read_backlog"]
