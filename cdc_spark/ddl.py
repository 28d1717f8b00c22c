"""What a DDL statement does to the lake's tables (sqlglot, as cdc_stream.filters parses DDL).

The lake follows: a new table, added columns (with the value existing rows got), a dropped
or truncated table (its rows go). Statements that change no row (indexes, constraints,
options, views, triggers, routines, grants) change nothing. Anything else on a table the
lake holds (a dropped, renamed or retyped column, a renamed table) cannot be followed:
`Unsupported`, and the job stops there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logging.getLogger("sqlglot").setLevel(logging.ERROR)

KEY_KINDS = ("INDEX", "KEY", "CONSTRAINT", "PRIMARY KEY", "FOREIGN KEY", "CHECK")
NO_ROW_CHANGE = ("AddConstraint", "AlterIndex", "Comment", "DropPrimaryKey")


@dataclass(frozen=True)
class AddedColumn:
    """ADD COLUMN: its name and what existing rows hold in it."""

    name: str
    default: str | None  # the literal's text (None: NULL)
    nullable: bool = True
    problem: str | None = None  # why the value of existing rows cannot be known


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
    import sqlglot
    from sqlglot import exp

    try:
        statements = sqlglot.parse(sql, read="mysql")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return [Change("unsupported", default_db, None, reason="the statement cannot be parsed")]
    out: list[Change] = []
    for stmt in statements:
        if stmt is None:
            continue
        kind = str(stmt.args.get("kind") or "").upper()
        if isinstance(stmt, exp.Create):
            if kind == "TABLE":
                out.append(_create(stmt, default_db))
            continue  # databases, views, indexes, triggers, routines, events: no table rows change
        if isinstance(stmt, exp.Drop):
            if kind == "TABLE":
                out += [Change("drop", t.db or default_db, t.name) for t in stmt.find_all(exp.Table)]
            elif kind in ("DATABASE", "SCHEMA"):
                out += [Change("drop", t.name or t.db or default_db, None) for t in stmt.find_all(exp.Table)]
            continue
        if isinstance(stmt, exp.TruncateTable):
            out += [Change("truncate", t.db or default_db, t.name) for t in stmt.expressions]
            continue
        if isinstance(stmt, exp.Alter) and kind == "TABLE":
            out.append(_alter(stmt, default_db))
            continue
        if isinstance(stmt, exp.Command):
            word = str(stmt.this).upper()
            if word in ("RENAME", "ALTER"):
                from cdc_stream.filters import ddl_targets

                for db, table in ddl_targets(sql, default_db):
                    out.append(Change("unsupported", db, table, reason="the statement is not understood here"))
            continue
    return out or [Change("none", default_db, None)]


def _create(stmt: Any, default_db: str | None) -> Change:
    from sqlglot import exp

    table = stmt.find(exp.Table)
    schema = stmt.this if isinstance(stmt.this, exp.Schema) else None
    names = [c.name for c in schema.expressions if isinstance(c, exp.ColumnDef)] if schema is not None else None
    if stmt.args.get("expression") is not None or not names:
        names = None  # CREATE TABLE ... LIKE / AS SELECT: the columns are the leader's
    return Change("create", table.db or default_db, table.name, columns=names,
                  if_not_exists=bool(stmt.args.get("exists")))


def _alter(stmt: Any, default_db: str | None) -> Change:
    from sqlglot import exp

    table = stmt.this
    db, name = table.db or default_db, table.name
    added: list[AddedColumn] = []
    for action in stmt.args.get("actions") or []:
        if isinstance(action, exp.ColumnDef):
            added.append(_added(action))
        elif type(action).__name__ in NO_ROW_CHANGE or (
                isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() in KEY_KINDS):
            continue
        elif isinstance(action, exp.AlterColumn) and {k for k, v in action.args.items() if v is not None} <= {
                "this", "default", "drop"}:
            continue  # ALTER COLUMN c SET/DROP DEFAULT: later inserts carry their values
        else:
            return Change("unsupported", db, name, reason=f"{type(action).__name__} cannot be followed")
    if stmt.args.get("options") and not added and not stmt.args.get("actions"):
        return Change("none", db, name)  # ENGINE=..., comments, row format
    return Change("add_columns" if added else "none", db, name, added=added)


def _added(col: Any) -> AddedColumn:
    from sqlglot import exp

    default: str | None = None
    nullable, problem, has_default = True, None, False
    for constraint in col.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, exp.DefaultColumnConstraint):
            has_default = True
            value = kind.this
            if isinstance(value, exp.Null):
                default = None
            elif isinstance(value, exp.Literal):
                default = value.this
            elif isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal) and not value.this.is_string:
                default = "-" + value.this.this
            else:
                problem = f"its default {value.sql(dialect='mysql')} is an expression"
        elif isinstance(kind, (exp.AutoIncrementColumnConstraint, exp.ComputedColumnConstraint,
                               exp.GeneratedAsIdentityColumnConstraint)):
            problem = "its values are generated by the server"
    if not has_default and not nullable and problem is None:
        default = ""  # NOT NULL without DEFAULT: the type's implicit default (0, '')
    return AddedColumn(col.name, default, nullable, problem)
