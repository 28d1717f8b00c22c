"""Rows of a system-versioned table on the SQL path, with the leader's history exactly (pure).

A MariaDB leader logs, for a table WITH SYSTEM VERSIONING (row_start/row_end in every row image):
an INSERT as the new row (row_end = the maximum TIMESTAMP); an UPDATE as the current row's update
(new row_start) followed by the insert of its history row (the old values, row_end = that time); a
DELETE as an update setting row_end. Plain SQL would stamp the follower's clock. Instead:

- an inserted row is written with its row_start/row_end as they are: `SET STATEMENT
  system_versioning_insert_history=1 FOR INSERT ...` (MariaDB 10.11);
- an UPDATE runs at the leader's time: `SET STATEMENT timestamp=<after.row_start> FOR UPDATE ...`,
  so the follower's own versioning writes the same history row as the leader's, and that row,
  when it comes next in the same transaction, is not inserted again (`History`);
- a DELETE (row_end set) runs as `SET STATEMENT timestamp=<after.row_end> FOR DELETE ...`.

The follower must let its session set both (MariaDB 10.11 or later, secure_timestamp = NO, or
SUPER/REPLICATION with the privilege that level asks). `Refused` says what stays out of reach: tables
versioned by transaction id (their period columns hold the leader's transaction ids), rows removed
from the history (DELETE HISTORY, dropped partitions), history rows changed, tables without a primary
key, and rows without their period columns.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cdc_consumer.apply import Modifiers, Piece, RowsSql, Single, delete_sql, insert_head, update_sql
from cdc_consumer.catalog import TableInfo
from cdc_consumer.literals import literal, row_literal, stored_literal
from cdc_stream.events import ChangeEvent

# The row_end of a current row: the largest TIMESTAMP (MariaDB 11.5 and later: 2106-02-07).
_MAX_ROW_END = (2147483647, 4294967295)
PROBE_SQL = "SET STATEMENT system_versioning_insert_history=1, timestamp=1000000000.000001 FOR SELECT 1"
WHAT_IT_NEEDS = ("exact history through SQL needs a MariaDB 10.11 or later follower whose session may set "
                 "system_versioning_insert_history and timestamp (secure_timestamp = NO)")


class Refused(Exception):
    """Rows of a versioned table that SQL cannot write with the leader's history: the reason, after
    "the follower's table"."""


@dataclass
class History:
    """History rows the follower's own versioning writes for the open source transaction's UPDATEs,
    which the leader's binlog holds too: not inserted again. Forgotten at each transaction start."""

    expected: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def clear(self) -> None:
        self.expected.clear()


def _row_key(db: str, table: str, row: list[Any]) -> tuple[str, str, str]:
    return db, table, json.dumps(row, sort_keys=True)


def _timestamp(value: Any, column: str) -> tuple[int, int]:
    if not isinstance(value, dict) or "Timestamp" not in value:
        raise Refused(f"is system-versioned, but its {column} holds {value!r}, not a TIMESTAMP")
    t = value["Timestamp"]
    return int(t["unix_time"]), int(t["subsecond"])


def _current(value: tuple[int, int]) -> bool:
    return value[0] in _MAX_ROW_END and value[1] == 999999


def event_sql(ev: ChangeEvent, table: TableInfo, history: History) -> list[Piece]:
    """The SQL of a row event of a system-versioned follower table; raises Refused."""
    if table.trx_id_versioned:
        raise Refused("is system-versioned by transaction id: its row_start/row_end hold the leader's transaction "
                      "ids (mysql.transaction_registry), which no follower session can write")
    columns = ev.columns or []
    lower = [c.lower() for c in columns]
    start_col, end_col = table.period
    if start_col not in lower or end_col not in lower:
        raise Refused(f"is system-versioned, but the event lacks its {start_col}/{end_col} columns (rows a snapshot "
                      "read, or a leader not logging them): SQL would stamp its history with the follower's clock")
    start, end = lower.index(start_col), lower.index(end_col)
    db, name = ev.schema or "", ev.table or ""
    # Columns written: all but those the follower computes (generated, hidden hashes); the period
    # columns are listed as generated but written by an INSERT of history.
    skip = set(table.unwritten(columns)) - {start, end}
    keep = [i for i in range(len(columns)) if i not in skip]
    pk = [lower.index(k.lower()) for k in ev.pk or []]
    if ev.operation == "Add":
        return _inserts(ev, db, name, columns, keep, history)
    if ev.operation == "Delete":
        raise Refused("is system-versioned and the leader removed rows from its history (DELETE HISTORY, or a "
                      "dropped history partition): no SQL statement removes exactly those rows")
    if not pk:
        raise Refused("is system-versioned without a primary key: SQL cannot name the one row an UPDATE or DELETE "
                      "of the leader changed")
    out: list[Piece] = []
    sets = [i for i in keep if i not in (start, end)]
    for before, after in ev.rows:
        if not _current(_timestamp(before[end], columns[end])):
            raise Refused("is system-versioned and the leader changed a history row (its row_end is in the past)")
        key_lit = [literal(before[i]) for i in pk]
        key_text = key_lit[0] if len(key_lit) == 1 else "(" + ",".join(key_lit) + ")"
        ended = _timestamp(after[end], columns[end])
        if _current(ended):  # an UPDATE: the current row changes at the leader's row_start
            at = _timestamp(after[start], columns[start])
            mods = Modifiers.of(False, ev.checks, (f"timestamp={at[0]}.{at[1]:06d}",))
            out.append(Single(update_sql(db, name, [columns[i] for i in sets], [stored_literal(after[i]) for i in sets],
                                         [columns[i] for i in pk], key_lit, False, ["plain"] * len(pk), mods),
                              1, key_text))
            old = list(before)
            old[end] = after[start]
            history.expected[_row_key(db, name, old)] += 1
        elif all(before[i] == after[i] for i in range(len(columns)) if i != end):  # a DELETE at the leader's row_end
            mods = Modifiers.of(False, ev.checks, (f"timestamp={ended[0]}.{ended[1]:06d}",))
            out.append(Single(delete_sql(db, name, [columns[i] for i in pk], key_lit, False, ["plain"] * len(pk),
                                         mods), 1, key_text))
        else:
            raise Refused("is system-versioned and the leader ended a row's history while changing its values")
    return out


def _inserts(ev: ChangeEvent, db: str, name: str, columns: list[str], keep: list[int], history: History
             ) -> list[Piece]:
    rows = []
    for row in ev.rows:
        key = _row_key(db, name, row)
        if history.expected[key] > 0:  # the history row of an UPDATE the follower already versioned
            history.expected[key] -= 1
            continue
        rows.append([row[i] for i in keep])
    if not rows:
        return []
    mods = Modifiers.of(False, ev.checks, ("system_versioning_insert_history=1",))
    cols = [columns[i] for i in keep]
    return [RowsSql(("versioned-insert", db, name, tuple(cols), mods), insert_head(db, name, cols, mods), "",
                    [row_literal(row) for row in rows])]
