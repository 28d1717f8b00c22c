"""Change events -> parameterized SQL on the follower.

SQL text is built by small pure functions from identifiers only (quoted, with
backticks doubled); every value travels as a bound parameter.

Rows are matched on the primary key when the table has one. Without one, on
the whole before-image with LIMIT 1 (of two identical rows exactly one
changes), and then "equal" must mean "the same value", not "equal under the
column's collation": 'a', 'A' and 'a ' are equal in a case-insensitive PAD
SPACE collation. So text is also compared as the bytes of its utf8mb4 form
(`_text_match`). Other types compare exactly with a plain `<=>`: numbers,
dates and times by value, DECIMAL as a decimal literal (values.to_param
returns a Decimal), FLOAT as the double it widens to, binary data and
geometry byte by byte.
"""

from __future__ import annotations

from cdc_stream import values
from cdc_stream.events import ChangeEvent

# The consumer's SQL mode (cdc_consumer.run.SESSION_SQL) without strictness: the
# mode of the statements writing an ENUM's '' error value, which strict mode refuses.
RELAXED_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES"
# MariaDB runs /*M! ... */ and ignores optimizer hints; MySQL ignores /*M! ... */
# and applies the SET_VAR hint. Either way only this statement is relaxed.
_RELAX_PREFIX = f"/*M! SET STATEMENT sql_mode='{RELAXED_SQL_MODE}' FOR */ "
_RELAX_HINT = f"/*+ SET_VAR(sql_mode='{RELAXED_SQL_MODE}') */ "

PLAIN, TEXT, JSON = "plain", "text", "json"


def quote_ident(name: str) -> str:
    """`name` with embedded backticks doubled: safe for any identifier."""
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """`db`.`table`."""
    return f"{quote_ident(db)}.{quote_ident(table)}"


def _ident(name: str) -> str:
    # In a statement with %s parameters PyMySQL %-formats the SQL text, so a %
    # inside an identifier must be doubled to survive as itself.
    return quote_ident(name).replace("%", "%%")


def _table(db: str, table: str) -> str:
    return f"{_ident(db)}.{_ident(table)}"


def insert_sql(db: str, table: str, columns: list[str], relaxed: bool = False) -> str:
    """INSERT of one row; executemany turns it into multi-row INSERTs (unless relaxed)."""
    cols = ", ".join(_ident(c) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    if relaxed:
        return f"{_RELAX_PREFIX}INSERT {_RELAX_HINT}INTO {_table(db, table)} ({cols}) VALUES ({marks})"
    return f"INSERT INTO {_table(db, table)} ({cols}) VALUES ({marks})"


def match_sql(column: str, how: str = PLAIN) -> str:
    """The WHERE condition matching one column's value; NULL-safe (<=>).

    PLAIN takes one parameter, TEXT and JSON the value twice."""
    col = _ident(column)
    if how == TEXT:
        return _text_match(col)
    if how == JSON:
        # JSON documents compare as JSON (MySQL's JSON type), not as their text.
        return f"JSON_EXTRACT({col}, '$') <=> JSON_EXTRACT(%s, '$')"
    return f"{col} <=> %s"


def _text_match(col: str) -> str:
    # The first test can use an index; the second makes it exact: the utf8mb4
    # bytes of the column's value (whatever its charset) equal the parameter's.
    return f"{col} <=> %s AND CAST(CONVERT({col} USING utf8mb4) AS BINARY) <=> CAST(%s AS BINARY)"


def params_per_match(how: str) -> int:
    """How many parameters match_sql(how) takes (the same value each time)."""
    return 1 if how == PLAIN else 2


def _where(keys: list[str], how: list[str] | None) -> str:
    hows = how or [PLAIN] * len(keys)
    return " AND ".join(match_sql(k, h) for k, h in zip(keys, hows))


def update_sql(
    db: str, table: str, columns: list[str], keys: list[str], one_row: bool,
    how: list[str] | None = None, relaxed: bool = False,
) -> str:
    """UPDATE setting every column, matching the before-image on `keys` (compared as `how` says)."""
    sets = ", ".join(f"{_ident(c)} = %s" for c in columns)
    head = f"{_RELAX_PREFIX}UPDATE {_RELAX_HINT}" if relaxed else "UPDATE "
    return f"{head}{_table(db, table)} SET {sets} WHERE {_where(keys, how)}" + (" LIMIT 1" if one_row else "")


def delete_sql(db: str, table: str, keys: list[str], one_row: bool, how: list[str] | None = None) -> str:
    """DELETE matching the before-image on `keys` (compared as `how` says)."""
    return f"DELETE FROM {_table(db, table)} WHERE {_where(keys, how)}" + (" LIMIT 1" if one_row else "")


def comparisons(images: list[list], key_idx: list[int]) -> list[str]:
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


def _writes_enum_error_value(rows: list[list]) -> bool:
    return any(v == {"Enum": ""} for row in rows for v in row)


def _key_params(row: list, key_idx: list[int], how: list[str]) -> tuple:
    param = values.to_param
    out: list = []
    for i, h in zip(key_idx, how):
        out.extend([param(row[i])] * params_per_match(h))
    return tuple(out)


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
        relaxed = _writes_enum_error_value(ev.rows)
        return insert_sql(db, table, columns, relaxed), [tuple(param(v) for v in row) for row in ev.rows]
    if ev.operation == "Delete":
        how = comparisons(ev.rows, key_idx) if one_row else [PLAIN] * len(keys)
        return delete_sql(db, table, keys, one_row, how), [_key_params(row, key_idx, how) for row in ev.rows]
    if ev.operation == "Update":
        how = comparisons([before for before, _ in ev.rows], key_idx) if one_row else [PLAIN] * len(keys)
        relaxed = _writes_enum_error_value([after for _, after in ev.rows])
        sql = update_sql(db, table, columns, keys, one_row, how, relaxed)
        return sql, [
            tuple(param(v) for v in after) + _key_params(before, key_idx, how) for before, after in ev.rows
        ]
    raise ValueError(f"not a row event: {ev.operation}")
