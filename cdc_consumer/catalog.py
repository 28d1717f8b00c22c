"""What the follower's own schema says about a table the consumer writes (information_schema).

The SQL path writes rows as statements, so it must know what the follower computes itself
(generated columns, the hidden DB_ROW_HASH_n of a long UNIQUE key: never written), what would make
a statement wrong (triggers fire, unless guarded as definitions.py writes them; system versioning
stamps its own clock: refused), which statement
forms the table forbids (INSERT ... ON DUPLICATE KEY UPDATE on a WITHOUT OVERLAPS key), and whether
it can roll back at all (a non-transactional engine: its transactions are applied alone). The
Replayer caches a `TableInfo` per table and forgets those of a database at its DDL (all of them at a DDL
that writes no object it can name: ddl.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from cdc_consumer.definitions import is_guarded
from cdc_consumer.schedule import TableKeys
from cdc_stream.mysql import qualified, quote_ident

# MariaDB's hidden column of a UNIQUE key on a BLOB / USING HASH: in the row image, never listed.
HIDDEN_HASH = re.compile(r"DB_ROW_HASH_\d+", re.IGNORECASE)
_PERIOD = re.compile(r"PERIOD FOR SYSTEM_TIME \(`((?:[^`]|``)+)`, `((?:[^`]|``)+)`\)", re.IGNORECASE)
_GENERATED = re.compile(r"\b(VIRTUAL|STORED|PERSISTENT) GENERATED\b", re.IGNORECASE)


@dataclass(frozen=True)
class TableInfo:
    """A follower table as the consumer needs to know it."""

    exists: bool = True
    engine: str = "InnoDB"
    transactional: bool = True
    triggers: tuple[str, ...] = ()  # names of its triggers SQL would fire (those without the consumer's guard)
    versioned: bool = False  # WITH SYSTEM VERSIONING
    period: tuple[str, str] = ("row_start", "row_end")  # its row start and row end columns, lower case
    trx_id_versioned: bool = False  # its period columns hold transaction ids (BIGINT UNSIGNED), not timestamps
    without_overlaps: bool = False  # a UNIQUE key with WITHOUT OVERLAPS: no INSERT ... ON DUPLICATE KEY UPDATE
    columns: frozenset[str] | None = None  # lower-cased names information_schema lists (None: not known)
    generated: frozenset[str] = frozenset()  # lower-cased names of VIRTUAL/STORED generated columns

    def unwritten(self, names: Sequence[str]) -> list[int]:
        """Indexes of the event's columns a statement must not write: generated ones, and hidden hash
        columns the follower does not list (any other unlisted column is left in: the server names it)."""
        out = []
        for i, name in enumerate(names):
            low = name.lower()
            hidden = self.columns is not None and low not in self.columns and HIDDEN_HASH.fullmatch(name)
            if low in self.generated or hidden:
                out.append(i)
        return out


MISSING = TableInfo(exists=False)

_TABLE_SQL = (
    "SELECT t.TABLE_NAME, t.ENGINE, t.TABLE_TYPE, e.TRANSACTIONS FROM information_schema.TABLES t "
    "LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE WHERE t.TABLE_SCHEMA = %s AND t.TABLE_NAME = %s"
)
_COLUMNS_SQL = ("SELECT TABLE_NAME, COLUMN_NAME, EXTRA FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s")
_TRIGGERS_SQL = ("SELECT EVENT_OBJECT_TABLE, TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS "
                 "WHERE EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s")


def describe(conn: pymysql.Connection, database: str, table: str) -> TableInfo:
    """The follower's `database`.`table` (names compared exactly: information_schema's are case-blind)."""
    with conn.cursor() as cur:
        cur.execute(_TABLE_SQL, (database, table))
        tables = [r for r in cur.fetchall() if r[0] == table]
        if not tables:
            return MISSING
        cur.execute(_COLUMNS_SQL, (database, table))
        columns = [r for r in cur.fetchall() if r[0] == table]
        cur.execute(_TRIGGERS_SQL, (database, table))
        triggers = tuple(str(r[1]) for r in cur.fetchall() if r[0] == table and not is_guarded(str(r[2])))
        create = ""
        if tables[0][2] != "VIEW":
            cur.execute(f"SHOW CREATE TABLE {qualified(database, table)}")
            row = cur.fetchone()
            create = str(row[1]) if row else ""
    return table_info(tables[0], columns, triggers, create)


def table_info(table: Sequence[Any], columns: Sequence[Sequence[Any]], triggers: tuple[str, ...], create: str
               ) -> TableInfo:
    """TableInfo from information_schema rows: TABLES (name, ENGINE, TABLE_TYPE, ENGINES.TRANSACTIONS),
    COLUMNS (table, name, EXTRA), the TRIGGERS without the consumer's guard, and SHOW CREATE TABLE."""
    _, engine, kind, transactions = table
    period, trx_id = ("row_start", "row_end"), False  # the implicit ROW_START/ROW_END: TIMESTAMP(6)
    if m := _PERIOD.search(create):
        period = (m[1].lower(), m[2].lower())
        trx_id = bool(re.search(rf"^\s*{re.escape(quote_ident(m[1]))} bigint", create, re.IGNORECASE | re.MULTILINE))
    return TableInfo(
        engine=str(engine or ""),
        # A view, or an engine the server does not list: treat it as transactional (its statements fail loudly).
        transactional=transactions != "NO",
        triggers=triggers,
        versioned=kind == "SYSTEM VERSIONED",
        period=period,
        trx_id_versioned=trx_id,
        without_overlaps="WITHOUT OVERLAPS" in create.upper(),
        columns=frozenset(str(c[1]).lower() for c in columns),
        generated=frozenset(str(c[1]).lower() for c in columns if _GENERATED.search(str(c[2] or ""))),
    )


_UNIQUE_SQL = ("SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS "
               "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
               "ORDER BY INDEX_NAME <> 'PRIMARY', INDEX_NAME, SEQ_IN_INDEX")
# Every foreign key of the server: a table's family is what its cascades (and checks) can reach.
_FOREIGN_KEYS_SQL = ("SELECT CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME "
                     "FROM information_schema.REFERENTIAL_CONSTRAINTS")


def table_keys(conn: pymysql.Connection, database: str, table: str) -> TableKeys:
    """How parallel apply (schedule.py) may name the rows of `database`.`table`: its unique keys, its
    foreign-key family, or that it runs alone (missing, non-transactional, triggers that fire)."""
    info = describe(conn, database, table)
    if not info.exists or not info.transactional or info.triggers:
        return TableKeys(barrier=True)
    with conn.cursor() as cur:
        cur.execute(_UNIQUE_SQL, (database, table))
        rows = [r for r in cur.fetchall() if r[0] == table]
        cur.execute(_FOREIGN_KEYS_SQL)
        edges = [((str(a), str(b)), (str(c), str(d))) for a, b, c, d in cur.fetchall()]
    conn.commit()  # end the read snapshot
    keys: dict[str, list[str]] = {}
    prefix = False
    for _, index, column, sub_part in rows:
        keys.setdefault(str(index), []).append(str(column).lower())
        prefix = prefix or sub_part is not None
    return TableKeys(unique=tuple(tuple(cols) for cols in keys.values()), family=foreign_key_family((database, table),
                     edges), whole=prefix or info.without_overlaps or info.versioned)


def foreign_key_family(table: tuple[str, str], edges: Sequence[tuple[tuple[str, str], tuple[str, str]]]
                       ) -> frozenset[tuple[str, str]]:
    """The tables linked to `table` by foreign keys (child -> parent `edges`), directly or not, itself
    included; empty when it has none."""
    linked: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for child, parent in edges:
        linked.setdefault(child, set()).add(parent)
        linked.setdefault(parent, set()).add(child)
    if table not in linked:
        return frozenset()
    seen, todo = {table}, [table]
    while todo:
        for other in linked[todo.pop()]:
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return frozenset(seen)
