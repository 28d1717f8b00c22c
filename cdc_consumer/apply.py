"""Change events -> SQL text for the follower.

Statements are built by small pure functions: identifiers quoted with backticks
doubled, values written as escaped literals by cdc_consumer.literals (what
PyMySQL's client-side parameters would send, only faster). How rows are written:

- Add: one multi-row INSERT.
- Update of a table with a primary key that keeps each row's key: one multi-row
  INSERT ... ON DUPLICATE KEY UPDATE setting the other columns. MySQL checks
  unique keys row by row, in the order the rows were changed on the leader, so
  an after-image never collides with another row's unique key: the outcome is
  that of the UPDATEs.
- Delete from a table with a primary key: DELETE ... WHERE key IN (...).
- An Update changing the key, and Update/Delete of a table without a primary
  key: one statement per row, sent many to a round trip (cdc_consumer.batch).

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

from cdc_consumer.literals import literal, row_literal
from cdc_stream import values
from cdc_stream.events import ChangeEvent
from cdc_stream.mysql import qualified, quote_ident

# The consumer's SQL mode (cdc_consumer.run.SESSION_SQL) without strictness: the
# mode of the statements writing an ENUM's '' error value, which strict mode refuses.
RELAXED_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES"
# MariaDB runs /*M! ... */ and ignores optimizer hints; MySQL ignores /*M! ... */
# and applies the SET_VAR hint. Either way only this statement is relaxed.
_RELAX_PREFIX = f"/*M! SET STATEMENT sql_mode='{RELAXED_SQL_MODE}' FOR */ "
_RELAX_HINT = f"/*+ SET_VAR(sql_mode='{RELAXED_SQL_MODE}') */ "

PLAIN, TEXT, JSON = "plain", "text", "json"


@dataclass(slots=True)
class RowsSql:
    """Rows that can share one statement: `head` + ",".join(parts) + `tail`.

    Consecutive RowsSql of the same `shape` are merged into one statement by
    cdc_consumer.batch; `keys` (one per part, or None) keeps a key from
    appearing twice in one statement."""

    shape: tuple[Any, ...]
    head: str
    tail: str
    parts: list[str]
    keys: list[str] | None = None


Piece = RowsSql | str


def _columns(columns: list[str]) -> str:
    return ", ".join(quote_ident(c) for c in columns)


def insert_head(db: str, table: str, columns: list[str], relaxed: bool = False) -> str:
    """`INSERT INTO t (cols) VALUES ` (relaxed: in the non-strict SQL mode)."""
    verb = f"{_RELAX_PREFIX}INSERT {_RELAX_HINT}INTO" if relaxed else "INSERT INTO"
    return f"{verb} {qualified(db, table)} ({_columns(columns)}) VALUES "


def upsert_tail(columns: list[str], keys: list[str]) -> str:
    """` ON DUPLICATE KEY UPDATE` setting every non-key column from the row's values."""
    others = [c for c in columns if c not in keys] or keys[:1]
    return " ON DUPLICATE KEY UPDATE " + ", ".join(f"{quote_ident(c)}=VALUES({quote_ident(c)})" for c in others)


def delete_in_head(db: str, table: str, keys: list[str]) -> str:
    """`DELETE FROM t WHERE key IN (` (a row constructor for a composite key)."""
    target = quote_ident(keys[0]) if len(keys) == 1 else f"({_columns(keys)})"
    return f"DELETE FROM {qualified(db, table)} WHERE {target} IN ("


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
               one_row: bool, how: list[str], relaxed: bool = False) -> str:
    """UPDATE of one row: every column set to `after`, matched on `keys` = `before` (literals)."""
    sets = ", ".join(f"{quote_ident(c)}={v}" for c, v in zip(columns, after))
    head = f"{_RELAX_PREFIX}UPDATE {_RELAX_HINT}" if relaxed else "UPDATE "
    limit = " LIMIT 1" if one_row else ""
    return f"{head}{qualified(db, table)} SET {sets} WHERE {_where(keys, before, how)}{limit}"


def delete_sql(db: str, table: str, keys: list[str], before: list[str], one_row: bool, how: list[str]) -> str:
    """DELETE of one row matched on `keys` = `before` (literals)."""
    return f"DELETE FROM {qualified(db, table)} WHERE {_where(keys, before, how)}" + (" LIMIT 1" if one_row else "")


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


def event_sql(ev: ChangeEvent) -> list[Piece]:
    """The SQL of one row event, in row order: multi-row pieces and single statements."""
    db, table = _target(ev)
    columns = ev.columns or []
    pk = ev.pk or []
    key_idx = [columns.index(k) for k in pk]
    if ev.operation == "Add":
        relaxed = _writes_enum_error_value(ev.rows)
        return [RowsSql(("insert", db, table, tuple(columns), relaxed), insert_head(db, table, columns, relaxed), "",
                        [row_literal(row) for row in ev.rows])]
    if ev.operation == "Delete":
        if not pk:
            return _keyless(ev, columns)
        rows = [[literal(row[i]) for i in key_idx] for row in ev.rows]
        parts = [r[0] if len(r) == 1 else "(" + ",".join(r) + ")" for r in rows]
        return [RowsSql(("delete", db, table, tuple(pk)), delete_in_head(db, table, pk), ")", parts, parts)]
    if ev.operation == "Update":
        if not pk:
            return _keyless(ev, columns)
        return _keyed_updates(ev, columns, pk, key_idx)
    raise ValueError(f"not a row event: {ev.operation}")


def _target(ev: ChangeEvent) -> tuple[str, str]:
    """The database and table a row event changes (decode_event checked the uri names them)."""
    return ev.schema or "", ev.table or ""


def _keyed_updates(ev: ChangeEvent, columns: list[str], pk: list[str], key_idx: list[int]) -> list[Piece]:
    db, table = _target(ev)
    relaxed = _writes_enum_error_value([after for _, after in ev.rows])
    shape = ("upsert", db, table, tuple(columns), relaxed)
    head, tail = insert_head(db, table, columns, relaxed), upsert_tail(columns, pk)
    out: list[Piece] = []
    run: RowsSql | None = None
    for before, after in ev.rows:
        after_lit = [literal(v) for v in after]
        if all(before[i] == after[i] for i in key_idx):
            if run is None:
                keys: list[str] = []
                run = RowsSql(shape, head, tail, [], keys)
                out.append(run)
            run.parts.append("(" + ",".join(after_lit) + ")")
            keys.append(",".join(after_lit[i] for i in key_idx))
        else:  # the key changes: an upsert would insert a second row
            before_lit = [literal(before[i]) for i in key_idx]
            out.append(update_sql(db, table, columns, after_lit, pk, before_lit, False, [PLAIN] * len(pk), relaxed))
            run = None
    return out


def _keyless(ev: ChangeEvent, columns: list[str]) -> list[Piece]:
    db, table = _target(ev)
    idx = list(range(len(columns)))
    if ev.operation == "Delete":
        how = comparisons(ev.rows, idx)
        return [delete_sql(db, table, columns, [literal(v) for v in row], True, how) for row in ev.rows]
    how = comparisons([before for before, _ in ev.rows], idx)
    relaxed = _writes_enum_error_value([after for _, after in ev.rows])
    return [
        update_sql(db, table, columns, [literal(v) for v in after], columns, [literal(v) for v in before], True, how,
                   relaxed)
        for before, after in ev.rows
    ]
