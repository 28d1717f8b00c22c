"""Change events -> parameterized SQL on the follower.

SQL text is built by small pure functions from identifiers only (quoted, with
backticks doubled); every value travels as a bound parameter.
"""

from __future__ import annotations

from cdc_stream import values
from cdc_stream.events import ChangeEvent


def quote_ident(name: str) -> str:
    """`name` with embedded backticks doubled: safe for any identifier."""
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """`db`.`table`."""
    return f"{quote_ident(db)}.{quote_ident(table)}"


def insert_sql(db: str, table: str, columns: list[str]) -> str:
    """INSERT of one row; executemany turns it into multi-row INSERTs."""
    cols = ", ".join(quote_ident(c) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    return f"INSERT INTO {qualified(db, table)} ({cols}) VALUES ({marks})"


def _where(keys: list[str]) -> str:
    # <=> is NULL-safe equality, so a NULL in a key-less table's row still matches.
    return " AND ".join(f"{quote_ident(k)} <=> %s" for k in keys)


def update_sql(db: str, table: str, columns: list[str], keys: list[str], one_row: bool) -> str:
    """UPDATE setting every column, matching the before-image on `keys`."""
    sets = ", ".join(f"{quote_ident(c)} = %s" for c in columns)
    return f"UPDATE {qualified(db, table)} SET {sets} WHERE {_where(keys)}" + (" LIMIT 1" if one_row else "")


def delete_sql(db: str, table: str, keys: list[str], one_row: bool) -> str:
    """DELETE matching the before-image on `keys`."""
    return f"DELETE FROM {qualified(db, table)} WHERE {_where(keys)}" + (" LIMIT 1" if one_row else "")


def row_statements(ev: ChangeEvent) -> tuple[str, list[tuple]]:
    """(SQL, parameter rows) for a row event.

    With a primary key, rows are matched on it; without one, on the whole
    before-image with LIMIT 1, so of two identical rows exactly one changes.
    """
    db, table = ev.schema, ev.table
    columns = ev.columns or []
    keys = ev.pk or columns
    one_row = not ev.pk
    key_idx = [columns.index(k) for k in keys]
    param = values.to_param
    if ev.operation == "Add":
        return insert_sql(db, table, columns), [tuple(param(v) for v in row) for row in ev.rows]
    if ev.operation == "Delete":
        return delete_sql(db, table, keys, one_row), [tuple(param(row[i]) for i in key_idx) for row in ev.rows]
    if ev.operation == "Update":
        sql = update_sql(db, table, columns, keys, one_row)
        return sql, [
            tuple(param(v) for v in after) + tuple(param(before[i]) for i in key_idx) for before, after in ev.rows
        ]
    raise ValueError(f"not a row event: {ev.operation}")
