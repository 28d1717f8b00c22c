"""What a DDL statement does to the lake's tables (read by cdc_stream.classify, as every statement is).

The lake follows: a new table, added columns (with the value existing rows got), a dropped
or truncated table (its rows go). Statements that change no row (indexes, constraints,
options, views, triggers, routines, grants) change nothing. Anything else on a table the
lake holds (a dropped, renamed or retyped column, a renamed table) cannot be followed:
`Unsupported`, and the job stops there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc_stream.classify import AddedColumn, classify

__all__ = ["AddedColumn", "Change", "changes"]


@dataclass(frozen=True)
class Change:
    """The effect of one statement on one table (database, table)."""

    kind: str  # "create" | "add_columns" | "drop" | "truncate" | "unsupported" | "none"
    database: str | None
    table: str | None
    columns: list[str] | None = None  # create: the column names, in order (None: CREATE ... LIKE/SELECT)
    added: list[AddedColumn] = field(default_factory=list)
    if_not_exists: bool = False
    reason: str = ""


def changes(sql: str, default_db: str | None) -> list[Change]:
    """The table-level changes a DDL statement makes."""
    out: list[Change] = []
    for effect in classify(sql, default_db).table_effects:
        db, table = effect.database, effect.table
        if effect.kind == "unread":
            out.append(Change("unsupported", db, None, reason="the statement cannot be parsed"))
        elif effect.kind == "create":
            out.append(Change("create", db, table, columns=effect.columns, if_not_exists=effect.if_not_exists))
        elif effect.kind in ("drop", "truncate", "none"):
            out.append(Change(effect.kind, db, table))
        elif effect.kind == "unknown":
            out.append(Change("unsupported", db, table, reason="the statement is not understood here"))
        elif effect.other is not None:  # alter
            out.append(Change("unsupported", db, table, reason=f"{effect.other} cannot be followed"))
        else:
            out.append(Change("add_columns" if effect.added else "none", db, table, added=effect.added))
    return out
