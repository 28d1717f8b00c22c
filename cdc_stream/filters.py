"""Which databases and tables flow: the same rules in producer and consumer.

A table passes when its database passes include_dbs/exclude_dbs AND "db.table"
passes include_tables/exclude_tables (shell globs, case-sensitive like MySQL on
Linux). DDL passes when any database or table it names passes; the names come
from a real SQL parser (sqlglot), not from regular expressions.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_stream.profile import Filters

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # unparsed DDL falls back quietly


@dataclass(frozen=True)
class TableFilter:
    """The [filters] section of a profile, as a predicate."""

    include_dbs: tuple[str, ...] = ()
    exclude_dbs: tuple[str, ...] = ()
    include_tables: tuple[str, ...] = ()
    exclude_tables: tuple[str, ...] = ()
    _cache: dict[tuple[str | None, str], bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_profile(cls, filters: Filters) -> TableFilter:
        """Build from a profile's Filters section."""
        return cls(
            tuple(filters.include_dbs), tuple(filters.exclude_dbs),
            tuple(filters.include_tables), tuple(filters.exclude_tables),
        )

    def allows_db(self, db: str | None) -> bool:
        """Whether anything of this database can flow."""
        if db is None:
            return not self.include_dbs and not self.include_tables
        if self.include_dbs and not _any(db, self.include_dbs):
            return False
        if _any(db, self.exclude_dbs):
            return False
        return not self.include_tables or any(fnmatchcase(db, p.split(".", 1)[0]) for p in self.include_tables)

    def allows_table(self, db: str | None, table: str) -> bool:
        """Whether row changes of db.table flow."""
        key = (db, table)
        hit = self._cache.get(key)
        if hit is None:
            name = f"{db}.{table}"
            hit = (
                self.allows_db(db)
                and (not self.include_tables or _any(name, self.include_tables))
                and not _any(name, self.exclude_tables)
            )
            self._cache[key] = hit
        return hit

    def allows_query(self, sql: str, default_db: str | None) -> bool:
        """Whether a DDL statement flows: any database or table it names passes."""
        targets = ddl_targets(sql, default_db)
        return any(self.allows_db(db) if table is None else self.allows_table(db, table) for db, table in targets)


def _any(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def ddl_targets(sql: str, default_db: str | None) -> list[tuple[str | None, str | None]]:
    """(database, table) pairs a statement names; (db, None) for database-level DDL.

    Falls back to [(database, None)] when the statement cannot be parsed: the database that
    qualifies the object it creates, alters or drops (`CREATE TRIGGER pe.t_ai ... ON pe.t`,
    `ALTER EVENT pe.e`), else the default database.
    """
    import sqlglot  # imported on the first DDL: it costs 0.4 s of every program's start
    from sqlglot import exp

    try:
        statements = sqlglot.parse(sql, read="mysql")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return _table_statement_targets(sql, default_db) or [(_object_db(sql) or default_db, None)]
    targets: list[tuple[str | None, str | None]] = []
    for stmt in statements:
        if stmt is None:
            continue
        kind = str(stmt.args.get("kind") or "").upper()
        if isinstance(stmt, (exp.Create, exp.Drop)) and kind in ("DATABASE", "SCHEMA"):
            for node in stmt.find_all(exp.Table):
                targets.append((node.name or node.db or default_db, None))
            continue
        if isinstance(stmt, exp.Command) and str(stmt.this).upper() == "RENAME":
            targets += _rename_targets(stmt.expression.name, default_db)
            continue
        for table in stmt.find_all(exp.Table):
            if table.name:
                targets.append((table.db or default_db, table.name))
    return targets or _table_statement_targets(sql, default_db) or [(_object_db(sql) or default_db, None)]


_NAME = re.compile(r"[\w$]+")
_TABLE_HEADS = ("CREATE", "ALTER", "DROP", "TRUNCATE", "OPTIMIZE", "ANALYZE", "REPAIR", "CHECK")


def _table_statement_targets(sql: str, default_db: str | None) -> list[tuple[str | None, str | None]]:
    """The tables of a `<verb> ... TABLE [IF [NOT] EXISTS] name[, name...]` statement sqlglot cannot
    parse (MariaDB syntax it lacks, such as COMPRESSED columns): [] for other statements."""
    import sqlglot

    try:
        tokens = sqlglot.tokenize(sql, read="mysql")
    except sqlglot.errors.TokenError:
        return []
    words = [t.text.upper() for t in tokens[:8]]
    if not words or words[0] not in _TABLE_HEADS or "TABLE" not in words:
        return []
    i = words.index("TABLE") + 1
    while i < len(tokens) and tokens[i].text.upper() in ("IF", "NOT", "EXISTS"):
        i += 1
    targets: list[tuple[str | None, str | None]] = []
    parts: list[str] = []
    dot = True  # a name part may come next
    for tok in [*tokens[i:], None]:
        if tok is not None and dot and (tok.token_type.name == "IDENTIFIER" or _NAME.fullmatch(tok.text)):
            parts.append(tok.text)  # the identifier's name (unquoted by the tokenizer)
            dot = False
        elif tok is not None and not dot and tok.token_type.name == "DOT":
            dot = True
        else:
            if len(parts) in (1, 2):
                targets.append((parts[0], parts[1]) if len(parts) == 2 else (default_db, parts[0]))
            parts, dot = [], True
            if tok is None or tok.text != "," or words[0] != "DROP":
                break
    return targets


_OBJECT_KINDS = ("TRIGGER", "EVENT", "PROCEDURE", "FUNCTION", "VIEW", "SEQUENCE", "PACKAGE")


def _object_db(sql: str) -> str | None:
    """The database qualifying the object a `CREATE/ALTER/DROP ... <kind> [IF [NOT] EXISTS] db.name`
    statement names (for a trigger also its `ON db.table`): None when it is not qualified.

    Without it a statement sqlglot cannot parse would be filtered by the session's default
    database alone, and a schema-qualified one sent with no default database (or another one)
    would be dropped as belonging to no included database."""
    import sqlglot

    try:
        tokens = sqlglot.tokenize(sql, read="mysql")
    except sqlglot.errors.TokenError:
        return None
    words = [t.text.upper() if t.token_type.name != "IDENTIFIER" else "" for t in tokens]
    if not words or words[0] not in ("CREATE", "ALTER", "DROP"):
        return None
    kind = next((i for i, w in enumerate(words[:24]) if w in _OBJECT_KINDS), None)
    if kind is None:
        return None
    i = kind + 1
    while i < len(words) and words[i] in ("IF", "NOT", "EXISTS"):
        i += 1
    if i + 2 < len(tokens) and tokens[i + 1].token_type.name == "DOT":
        return str(tokens[i].text)
    if words[kind] == "TRIGGER" and "ON" in words[i:]:
        on = words.index("ON", i) + 1
        if on + 2 < len(tokens) and tokens[on + 1].token_type.name == "DOT":
            return str(tokens[on].text)
    return None


def _rename_targets(text: str, default_db: str | None) -> list[tuple[str | None, str | None]]:
    """Tables of 'TABLE a TO b, c TO d' (sqlglot keeps MySQL's RENAME TABLE unparsed)."""
    import sqlglot
    from sqlglot import exp

    body = text.strip()
    if not body.upper().startswith("TABLE"):
        return []
    tokens = sqlglot.tokenize(body[5:], read="mysql")
    targets: list[tuple[str | None, str | None]] = []
    side: list[Any] = []
    for tok in [*tokens, None]:
        if tok is None or tok.text == "," or tok.text.upper() == "TO":
            if side:
                text = " ".join(t.text if t.token_type.name != "IDENTIFIER" else f"`{t.text}`" for t in side)
                table = exp.to_table(text, dialect="mysql")
                targets.append((table.db or default_db, table.name))
            side = []
        else:
            side.append(tok)
    return targets
