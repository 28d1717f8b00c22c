"""Change events -> SQL text for the follower (the SQL path; cdc_consumer/binlog_replay.py is the other).

Statements are built by small pure functions: identifiers quoted with backticks
doubled, values written as escaped literals by cdc_consumer.literals (what
PyMySQL's client-side parameters would send, only faster). How rows are written:

- Add: one multi-row INSERT.
- Update of a table with a primary key that keeps each row's key: one multi-row
  INSERT ... ON DUPLICATE KEY UPDATE setting the other columns. MySQL checks
  unique keys row by row, in the order the rows were changed on the leader, so
  an after-image never collides with another row's unique key: the outcome is
  that of the UPDATEs. (Not on a table with a WITHOUT OVERLAPS key, which refuses
  that statement: one UPDATE per row there.)
- Delete from a table with a primary key: DELETE ... WHERE key IN (...).
- An Update changing the key, and Update/Delete of a table without a primary
  key: one statement per row, sent many to a round trip (cdc_consumer.batch).

For a follower with MariaDB's bulk execution (`bulk`), the rows of an INSERT or an upsert of an event of
BULK_MIN_ROWS rows or more travel as parameters of one prepared statement instead
(cdc_consumer/parameters.py): the follower parses the statement once, not every row's literals
(bench/README.md, issue 26, seventh part).

Every UPDATE and DELETE says how many rows it must affect (the connection counts
matched rows, CLIENT.FOUND_ROWS): a row the follower lacks stops the consumer, as
error 1032 stops a native replica, instead of being inserted or skipped silently.
An upsert row that updates counts 2 and one that inserts 1, so upserts hold only
rows whose after-image differs from the before-image (the others are UPDATEs).

Columns the follower computes itself (generated ones, the hidden DB_ROW_HASH_n of a
long UNIQUE key: catalog.TableInfo) are left out; the checks the leader's session
had off (`checks`) are switched off for the statement alone, with the same
statement modifiers as the relaxed sql_mode (MariaDB's SET STATEMENT, MySQL's
SET_VAR hint), and are part of a statement's shape, so events with different
checks never share a statement.

Without a primary key a row is matched on its whole before-image with LIMIT 1
(of two identical rows exactly one changes), and then "equal" must mean "the
same value", not "equal under the column's collation": 'a', 'A' and 'a ' are
equal in a case-insensitive PAD SPACE collation. So text is also compared as
the bytes of its utf8mb4 form (`_text_match`). Other types compare exactly with
a plain `<=>`: numbers, dates and times by value, DECIMAL as a decimal literal,
FLOAT as the double it widens to, binary data and geometry byte by byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc_consumer.binlog_replay import BinlogRows
from cdc_consumer.catalog import TableInfo
from cdc_consumer.literals import literal, row_literal, stored_literal
from cdc_consumer.parameters import Types, param_row, param_rows, typed_param_rows
from cdc_stream import typed_rows, values
from cdc_stream.events import ChangeEvent, RowChecks
from cdc_stream.mysql import qualified, quote_ident
from cdc_stream.positions import SnapshotChunk

# The consumer's SQL mode (cdc_consumer.follower.SESSION_SQL) without strictness: the
# mode of the statements writing an ENUM's '' error value, which strict mode refuses.
RELAXED_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES"

PLAIN, TEXT, JSON = "plain", "text", "json"
# Rows an event needs for bulk execution: a Bulk statement is a round trip of its own, while text statements
# share one (writer.py); on small transactions (sysbench's 1-row events) text costs less.
BULK_MIN_ROWS = 16
_KEY_SHOWN = 200  # characters of a key kept for an error message


@dataclass(slots=True)
class RowsSql:
    """Rows that can share one statement: `head` + ",".join(parts) + `tail`; or, with `types`, the
    prepared statement `head` run once per part, each part a row of parameters (parameters.py) whose
    types are `types`' entry.

    Consecutive RowsSql of the same `shape` are merged into one statement by
    cdc_consumer.batch; `keys` (one per part, or None) keeps a key from
    appearing twice in one statement and names the rows in errors; `expect_each`
    is the number of rows each part must affect (0: not checked)."""

    shape: tuple[Any, ...]
    head: str
    tail: str
    parts: list[str | bytes]  # literal rows (text), or parameter rows (with `types`)
    keys: list[str] | None = None
    expect_each: int = 0
    types: list[Types] | None = None


@dataclass(slots=True)
class Single:
    """One statement of one row: the rows it must affect, and the row's key for errors."""

    sql: str
    expect: int
    key: str


Piece = RowsSql | Single | BinlogRows | str


@dataclass(frozen=True, slots=True)
class Modifiers:
    """Session values one statement runs with: MariaDB's `SET STATEMENT ... FOR` prefix (in an
    executable comment MySQL skips) and MySQL's SET_VAR hint (a comment MariaDB skips)."""

    prefix: str = ""
    hint: str = ""

    @classmethod
    def of(cls, relaxed: bool, checks: RowChecks | None, mariadb_only: tuple[str, ...] = ()) -> Modifiers:
        """`mariadb_only`: more `name=value` for MariaDB's SET STATEMENT (versioning.py: the leader's time)."""
        mariadb: list[str] = list(mariadb_only)
        mysql: list[str] = []
        if relaxed:
            mariadb.append(f"sql_mode='{RELAXED_SQL_MODE}'")
            mysql.append(f"sql_mode='{RELAXED_SQL_MODE}'")
        if checks is not None:
            if not checks.foreign_keys:
                mariadb.append("foreign_key_checks=0")
                mysql.append("foreign_key_checks=OFF")
            if not checks.unique:
                mariadb.append("unique_checks=0")
                mysql.append("unique_checks=OFF")
            if not checks.check_constraints:
                mariadb.append("check_constraint_checks=0")  # MariaDB's; MySQL has no such switch
        if not mariadb:
            return _PLAIN
        hint = "/*+ " + " ".join(f"SET_VAR({v})" for v in mysql) + " */ " if mysql else ""
        return cls(f"/*M! SET STATEMENT {', '.join(mariadb)} FOR */ ", hint)

    def verb(self, verb: str) -> str:
        """`INSERT` -> `<prefix>INSERT <hint>`."""
        return f"{self.prefix}{verb} {self.hint}"


_PLAIN = Modifiers()
_NO_FOREIGN_KEYS = RowChecks(foreign_keys=False)


def _columns(columns: list[str]) -> str:
    return ", ".join(quote_ident(c) for c in columns)


def insert_head(db: str, table: str, columns: list[str], mods: Modifiers = _PLAIN) -> str:
    """`INSERT INTO t (cols) VALUES ` (with the statement's modifiers)."""
    return f"{mods.verb('INSERT')}INTO {qualified(db, table)} ({_columns(columns)}) VALUES "


def placeholders(columns: list[str]) -> str:
    """`(?,?,...)`: one row of parameters."""
    return "(" + ",".join("?" * len(columns)) + ")"


def _stored_rows(shape: tuple[Any, ...], head: str, tail: str, columns: list[str], rows: list[list[Any]],
                 bulk: bool, params: tuple[list[Types], list[bytes]] | None = None) -> RowsSql:
    """Rows to store with `head` ... `tail`: as literals, or (`bulk`) as parameter rows of one prepared
    statement (`params`: the rows' parameters, when already written)."""
    if not bulk:
        return RowsSql(shape, head, tail, [row_literal(row) for row in rows])
    types, data = params or param_rows(rows)
    return RowsSql(("bulk",) + shape, head + placeholders(columns) + tail, "", list(data), types=types)


def upsert_tail(columns: list[str], keys: list[str]) -> str:
    """` ON DUPLICATE KEY UPDATE` setting every non-key column from the row's values."""
    others = [c for c in columns if c not in keys] or keys[:1]
    return " ON DUPLICATE KEY UPDATE " + ", ".join(f"{quote_ident(c)}=VALUES({quote_ident(c)})" for c in others)


def delete_in_head(db: str, table: str, keys: list[str], mods: Modifiers = _PLAIN) -> str:
    """`DELETE FROM t WHERE key IN (` (a row constructor for a composite key)."""
    target = quote_ident(keys[0]) if len(keys) == 1 else f"({_columns(keys)})"
    return f"{mods.verb('DELETE')}FROM {qualified(db, table)} WHERE {target} IN ("


def replace_range_sql(db: str, table: str, pk: list[str], after: list[Any] | None, upto: list[Any] | None,
                      mods: Modifiers = _PLAIN, where: str | None = None, keys: list[list[Any]] | None = None) -> str:
    """The DELETE a live copy's chunk starts with: the follower's rows with a key in (after, upto]
    (integer keys; no bound on a side that is None), which the chunk's rows then replace. A copy with a
    condition (`where`, leader SQL the producer checked) deletes only the rows matching it, or having one
    of the chunk's `keys` (a follower row that differs so as not to match would block the insert)."""
    target = quote_ident(pk[0]) if len(pk) == 1 else f"({_columns(pk)})" if pk else ""

    def bound(key: list[Any]) -> str:
        ints = [str(int(v)) for v in key]  # integer keys only: no other text reaches the statement
        return ints[0] if len(ints) == 1 else "(" + ",".join(ints) + ")"

    conditions = []
    if after is not None:
        conditions.append(f"{target} > {bound(after)}")
    if upto is not None:
        conditions.append(f"{target} <= {bound(upto)}")
    if where is not None:
        chosen = f"({where})"
        if keys:
            chosen = f"({chosen} OR {target} IN ({', '.join(bound(k) for k in keys)}))"
        conditions.append(chosen)
    clause = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"{mods.verb('DELETE')}FROM {qualified(db, table)}{clause}"


def match_sql(column: str, value: str, how: str = PLAIN) -> str:
    """The WHERE condition matching one column to a literal; NULL-safe (<=>)."""
    col = quote_ident(column)
    if how == TEXT:
        return _text_match(col, value)
    if how == JSON:
        # JSON documents compare as JSON (MySQL's JSON type), not as their text.
        return f"JSON_EXTRACT({col}, '$') <=> JSON_EXTRACT({value}, '$')"
    return f"{col} <=> {value}"


def _text_match(col: str, value: str) -> str:
    # The first test can use an index; the second makes it exact: the utf8mb4
    # bytes of the column's value (whatever its charset) equal the literal's.
    return f"{col} <=> {value} AND CAST(CONVERT({col} USING utf8mb4) AS BINARY) <=> CAST({value} AS BINARY)"


def _where(keys: list[str], literals: list[str], how: list[str]) -> str:
    return " AND ".join(match_sql(k, v, h) for k, v, h in zip(keys, literals, how))


def update_sql(db: str, table: str, columns: list[str], after: list[str], keys: list[str], before: list[str],
               one_row: bool, how: list[str], mods: Modifiers = _PLAIN) -> str:
    """UPDATE of one row: every column set to `after`, matched on `keys` = `before` (literals)."""
    sets = ", ".join(f"{quote_ident(c)}={v}" for c, v in zip(columns, after))
    limit = " LIMIT 1" if one_row else ""
    return f"{mods.verb('UPDATE')}{qualified(db, table)} SET {sets} WHERE {_where(keys, before, how)}{limit}"


def delete_sql(db: str, table: str, keys: list[str], before: list[str], one_row: bool, how: list[str],
               mods: Modifiers = _PLAIN) -> str:
    """DELETE of one row matched on `keys` = `before` (literals)."""
    limit = " LIMIT 1" if one_row else ""
    return f"{mods.verb('DELETE')}FROM {qualified(db, table)} WHERE {_where(keys, before, how)}{limit}"


def comparisons(images: list[list[Any]], key_idx: list[int]) -> list[str]:
    """How to compare each key column, from the tags its values carry in these row images.

    A column holding only String values (and NULLs) is compared exactly as text;
    one holding Json as JSON; anything else, or a mixture (text some of whose
    values had to travel as Blob), with a plain <=>."""
    out = []
    for i in key_idx:
        tags = {values.tag_of(row[i]) for row in images} - {values.NULL}
        if tags == {"String"}:
            out.append(TEXT)
        elif tags == {"Json"}:
            out.append(JSON)
        else:
            out.append(PLAIN)
    return out


def _writes_enum_error_value(rows: list[list[Any]]) -> bool:
    error_value = {"Enum": ""}
    return any(error_value in row for row in rows)


def _key_text(literals: list[str]) -> str:
    text = literals[0] if len(literals) == 1 else "(" + ",".join(literals) + ")"
    return text if len(text) <= _KEY_SHOWN else text[:_KEY_SHOWN] + "..."


@dataclass(slots=True)
class _Rows:
    """A row event as the statements see it: the columns the follower takes, and its rows over them."""

    db: str
    table: str
    columns: list[str]
    pk: list[str]
    rows: list[Any]
    checks: RowChecks | None
    without_overlaps: bool


def _project(ev: ChangeEvent, table: TableInfo | None) -> _Rows:
    columns, rows = ev.columns or [], ev.rows
    pk = ev.pk or []
    drop = table.unwritten(columns) if table is not None else []
    if drop:
        keep = [i for i in range(len(columns)) if i not in set(drop)]
        columns = [columns[i] for i in keep]
        pk = [c for c in pk if c in columns]
        if ev.operation == "Update":
            rows = [([b[i] for i in keep], [a[i] for i in keep]) for b, a in rows]
        else:
            rows = [[r[i] for i in keep] for r in rows]
    return _Rows(ev.schema or "", ev.table or "", columns, pk, rows, ev.checks,
                 table is not None and table.without_overlaps)


def _inserted(r: _Rows, relaxed: bool, bulk: bool, params: tuple[list[Types], list[bytes]] | None = None) -> RowsSql:
    """The INSERT of an Add event's rows (`relaxed`: one writes an ENUM's error value)."""
    return _stored_rows(("insert", r.db, r.table, tuple(r.columns), relaxed, _checks_key(r.checks)),
                        insert_head(r.db, r.table, r.columns, Modifiers.of(relaxed, r.checks)), "", r.columns, r.rows,
                        bulk, params)


def _checks_key(checks: RowChecks | None) -> tuple[bool, bool, bool] | None:
    return None if checks is None else (checks.foreign_keys, checks.unique, checks.check_constraints)


def event_sql(ev: ChangeEvent, table: TableInfo | None = None, bulk: bool = False) -> list[Piece]:
    """The SQL of one row event, in row order: multi-row pieces and single statements.

    `table`: the follower's table (what it computes itself, which statement forms it refuses); `bulk`: the
    follower runs MariaDB's bulk execution, so the inserted and upserted rows of an event of BULK_MIN_ROWS
    rows or more travel as parameters.

    An insert's typed rows (ChangeEvent.rows_typed) are written as parameters straight from them, or else
    given their tagged form first."""
    if ev.rows_typed:
        if (bulk and ev.operation == "Add" and len(ev.rows) >= BULK_MIN_ROWS
                and not isinstance(ev.snapshot, SnapshotChunk)
                and not (table is not None and table.unwritten(ev.columns or []))):
            params = typed_param_rows(ev.rows)
            if params is not None:
                return [_inserted(_project(ev, None), typed_rows.holds(ev.rows, "Enum", ""), True, params)]
        ev.load_rows()
    r = _project(ev, table)
    bulk = bulk and len(r.rows) >= BULK_MIN_ROWS
    key_idx = [r.columns.index(k) for k in r.pk]
    checks = _checks_key(r.checks)
    if ev.operation == "Add":
        relaxed = _writes_enum_error_value(r.rows)
        chunk = ev.snapshot
        if isinstance(chunk, SnapshotChunk):
            # A live copy's chunk replaces its key range (the rows are the leader's as they are: no
            # foreign-key check, and no ON DELETE CASCADE reaching other tables).
            mods = Modifiers.of(relaxed, _NO_FOREIGN_KEYS)
            head = insert_head(r.db, r.table, r.columns, mods)
            shape = ("insert", r.db, r.table, tuple(r.columns), relaxed, _checks_key(_NO_FOREIGN_KEYS))
            insert: list[Piece] = [_stored_rows(shape, head, "", r.columns, r.rows, bulk)] if r.rows else []
            if chunk.append:
                return insert
            keys = [[next(iter(row[i].values())) for i in key_idx] for row in r.rows] if chunk.where else None
            return [replace_range_sql(r.db, r.table, ev.pk or [], chunk.after, chunk.upto,
                                      Modifiers.of(False, _NO_FOREIGN_KEYS), chunk.where, keys)] + insert
        return [_inserted(r, relaxed, bulk)]
    if ev.operation == "Delete":
        if not r.pk:
            return _keyless(ev.operation, r)
        rows = [[literal(row[i]) for i in key_idx] for row in r.rows]
        key_texts = [k[0] if len(k) == 1 else "(" + ",".join(k) + ")" for k in rows]
        mods = Modifiers.of(False, r.checks)
        return [RowsSql(("delete", r.db, r.table, tuple(r.pk), checks), delete_in_head(r.db, r.table, r.pk, mods),
                        ")", list(key_texts), key_texts, expect_each=1)]
    if ev.operation == "Update":
        if not r.pk:
            return _keyless(ev.operation, r)
        return _keyed_updates(r, key_idx, bulk)
    raise ValueError(f"not a row event: {ev.operation}")


def _keyed_updates(r: _Rows, key_idx: list[int], bulk: bool) -> list[Piece]:
    relaxed = _writes_enum_error_value([after for _, after in r.rows])
    mods = Modifiers.of(relaxed, r.checks)
    shape = ("upsert", r.db, r.table, tuple(r.columns), relaxed, _checks_key(r.checks))
    head, tail = insert_head(r.db, r.table, r.columns, mods), upsert_tail(r.columns, r.pk)
    out: list[Piece] = []
    run: RowsSql | None = None
    plain = [PLAIN] * len(r.pk)
    for before, after in r.rows:
        if before != after and not r.without_overlaps and all(before[i] == after[i] for i in key_idx):
            if run is None:
                run = _stored_rows(shape, head, tail, r.columns, [], bulk)
                run.keys, run.expect_each = [], 2
                out.append(run)
            if run.types is not None:
                types, data = param_row(after)
                run.types.append(types)
                run.parts.append(data)
            else:
                run.parts.append(row_literal(after))
            assert run.keys is not None
            run.keys.append(",".join([stored_literal(after[i]) for i in key_idx]))
        else:  # the key changes (an upsert would insert a second row), or nothing the follower stores does
            after_lit = [stored_literal(v) for v in after]
            before_lit = [literal(before[i]) for i in key_idx]
            out.append(Single(update_sql(r.db, r.table, r.columns, after_lit, r.pk, before_lit, False, plain, mods),
                              1, _key_text(before_lit)))
            run = None
    return out


def _keyless(operation: str, r: _Rows) -> list[Piece]:
    idx = list(range(len(r.columns)))
    if operation == "Delete":
        how = comparisons(r.rows, idx)
        mods = Modifiers.of(False, r.checks)
        out: list[Piece] = []
        for row in r.rows:
            before = [literal(v) for v in row]
            out.append(Single(delete_sql(r.db, r.table, r.columns, before, True, how, mods), 1, _key_text(before)))
        return out
    how = comparisons([before for before, _ in r.rows], idx)
    mods = Modifiers.of(_writes_enum_error_value([after for _, after in r.rows]), r.checks)
    out = []
    for before, after in r.rows:
        before_lit = [literal(v) for v in before]
        after_lit = [stored_literal(v) for v in after]
        sql = update_sql(r.db, r.table, r.columns, after_lit, r.columns, before_lit, True, how, mods)
        out.append(Single(sql, 1, _key_text(before_lit)))
    return out
