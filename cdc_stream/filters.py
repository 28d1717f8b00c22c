"""Which databases and tables flow: the same rules in producer and consumer.

A table passes when its database passes include_dbs/exclude_dbs AND "db.table"
passes include_tables/exclude_tables (shell globs, case-sensitive like MySQL on
Linux). DDL goes by the objects it creates, changes or drops (ddl_writes), never by
what it reads: a view in an excluded database over an included table is filtered,
and a statement changing objects on both sides of the filters stops the program
(CrossesFilters). Statements that change no database object (GRANT, SET, ...) pass
when any database or table they name passes (ddl_targets). Names come from the
tokens of a real SQL parser (sqlglot), not from regular expressions.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from cdc_stream.errors import DataError
from cdc_stream.mysql import quote_ident

if TYPE_CHECKING:
    from sqlglot import Token

    from cdc_stream.profile import Filters

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # unparsed DDL falls back quietly

Written = tuple[str | None, str | None]  # (database, table or view or sequence) a statement changes; see ddl_writes


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
        """Whether a statement flows: every object it creates, changes or drops passes (False when none
        does). A statement changing objects on both sides raises CrossesFilters: neither the whole of it
        nor a part can make the follower what the leader's included objects are. A statement changing no
        database object (GRANT, SET, ...) flows when any database or table it names passes."""
        writes = ddl_writes(sql, default_db)
        if writes is None:
            targets = ddl_targets(sql, default_db)
            return any(self._allows(db, name) for db, name in targets)
        passes = [self._allows(db, name) for db, name in writes]
        if all(passes):
            return True
        if any(passes):
            raise CrossesFilters(sql, [w for w, ok in zip(writes, passes) if ok],
                                 [w for w, ok in zip(writes, passes) if not ok])
        return False

    def _allows(self, db: str | None, name: str | None) -> bool:
        return self.allows_db(db) if name is None else self.allows_table(db, name)


class CrossesFilters(DataError):
    """A statement changes objects the filters let through and objects they exclude.

    `detail` and `fix` are the two halves of the message, for callers that place the event between them."""

    def __init__(self, sql: str, included: list[Written], excluded: list[Written]):
        shown = " ".join(sql.split())
        shown = shown if len(shown) <= 200 else shown[:197] + "..."
        self.detail = (
            f"the statement {shown!r} changes objects on both sides of [filters]: {_names(included)} "
            f"(included) and {_names(excluded)} (excluded); run whole it would change what the filters "
            "exclude, run in part the follower would no longer hold what the leader holds"
        )
        tables = [f"{db}.{name}" for db, name in dict.fromkeys(included) if name is not None]
        dbs = [db for db, name in dict.fromkeys(included) if name is None and db is not None]
        rules = " and ".join(f"{key} = {json.dumps(values)}" for key, values in
                             (("exclude_dbs", dbs), ("exclude_tables", tables)) if values)
        self.fix = (
            f"put all of them on one side of [filters] in both profiles and restart: exclude the included ones "
            f"too (add {rules or 'them'}), then do by hand on the follower what the statement did to them on "
            "the leader (such as dropping a table it renamed or dropped away); or include the excluded ones, "
            "which must then exist on the follower (create them, or cdc-producer PROFILE --snapshot db.table)"
        )
        super().__init__(f"{self.detail}; fix: {self.fix}")


def _names(objects: list[Written]) -> str:
    def one(db: str | None, name: str | None) -> str:
        if name is None:
            return f"database {quote_ident(db or '?')}"
        return f"{quote_ident(db)}.{quote_ident(name)}" if db is not None else quote_ident(name)

    return ", ".join(one(db, name) for db, name in dict.fromkeys(objects))


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


def qualified_only(sql: str) -> bool:
    """Whether every database and table the statement names comes with its database, so that it means
    the same under any default database (False when that cannot be told)."""
    targets = ddl_targets(sql, None)
    writes = ddl_writes(sql, None)
    if writes is None:  # GRANT and the like: by the tables they name, as before ddl_writes existed
        return all(table is None for _, table in targets)
    return all(db is not None for db, _ in writes) and all(db is not None for db, _ in targets)


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


# What `CREATE/ALTER/DROP <kind>` changes: a table-namespace object (tables, views and sequences share
# one), a database, an object the filters know by its database alone, or one they know by its table.
_WRITE_KINDS = {
    "TABLE": "table", "VIEW": "table", "SEQUENCE": "table", "DATABASE": "database", "SCHEMA": "database",
    "PROCEDURE": "routine", "FUNCTION": "routine", "EVENT": "routine", "PACKAGE": "routine",
    "TRIGGER": "trigger", "INDEX": "index",
}
# CREATE/ALTER/DROP of these changes no database object: not ddl_writes' business (account statements
# have their own handling, in the consumer).
_NOT_OBJECTS = frozenset({"USER", "ROLE", "SERVER", "TABLESPACE", "LOGFILE"})
_ALTER_DATABASE_OPTIONS = frozenset({"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "UPGRADE"})

def ddl_writes(sql: str, default_db: str | None) -> list[Written] | None:
    """The objects a statement creates, alters, drops, renames or truncates, as (database, name) resolved
    against the default database; what it only reads (a view's tables, LIKE's source, a trigger's body)
    is not among them.

    name is the table, view or sequence (they share one namespace); for a trigger, the table it is on
    (MySQL keeps a trigger in its table's database); None for a database itself and for objects known
    by their database alone (routines, events, packages, a trigger dropped by name). Both names of a
    RENAME are written. None when the statement changes no database object (GRANT, CREATE USER, SET,
    OPTIMIZE/ANALYZE/REPAIR TABLE, ...) or its head cannot be read: callers then go by every name it
    mentions (ddl_targets).
    """
    import sqlglot

    try:
        tokens = sqlglot.tokenize(sql, read="mysql")
        if len(tokens) == 2 and tokens[0].token_type.name in ("RENAME", "COMMAND") and _word(tokens[1]) == "":
            # RENAME: the tokenizer keeps the rest of the statement as one string
            tokens = [tokens[0], *sqlglot.tokenize(tokens[1].text, read="mysql")]
    except sqlglot.errors.TokenError:
        return None
    words = [_word(t) for t in tokens]
    if not words:
        return None
    head = words[0]
    if head == "TRUNCATE":
        i = 2 if words[1:2] == ["TABLE"] else 1
        return _name_list(tokens, words, i, default_db, many=False)
    if head == "RENAME":
        if words[1:2] not in (["TABLE"], ["TABLES"]):
            return None  # RENAME USER
        return _rename_list(tokens, words, 2, default_db)
    if head not in ("CREATE", "ALTER", "DROP"):
        return None
    at = next((i for i, w in enumerate(words[:32]) if w in _WRITE_KINDS or w in _NOT_OBJECTS), None)
    if at is None or words[at] in _NOT_OBJECTS:
        return None
    kind, i = _WRITE_KINDS[words[at]], _skip_if_exists(words, at + 1)
    if words[at] == "PACKAGE" and words[i:i + 1] == ["BODY"]:
        i = _skip_if_exists(words, i + 1)
    if kind == "database":
        name, _ = _name(tokens, i)
        if head == "ALTER" and (not name or words[i] in _ALTER_DATABASE_OPTIONS):
            return [(default_db, None)]  # ALTER DATABASE CHARACTER SET ...: the default database
        return [(name[-1], None)] if len(name) == 1 else None
    if kind == "table":
        writes = _name_list(tokens, words, i, default_db, many=head == "DROP")
        if writes is not None and head == "ALTER" and words[at] == "TABLE":
            writes += _alter_table_moves(tokens, words, i, default_db)
        return writes
    if kind == "routine":
        name, j = _name(tokens, i)
        if not name:
            return None
        writes = [(_resolve(name, default_db)[0], None)]
        rename = _word_at_depth0(words, tokens, "RENAME", j) if head == "ALTER" and words[at] == "EVENT" else None
        if rename is not None and words[rename + 1:rename + 2] == ["TO"]:  # ALTER EVENT a.e RENAME TO x.e
            new, _ = _name(tokens, rename + 2)
            writes += [(_resolve(new, default_db)[0], None)] if new else []
        return writes
    if kind == "index":  # CREATE [UNIQUE ...] INDEX i ON t (...), DROP INDEX i ON t
        on = _word_at_depth0(words, tokens, "ON", i)
        return _name_list(tokens, words, on + 1, default_db, many=False) if on is not None else None
    # trigger
    name, j = _name(tokens, i)
    if not name:
        return None
    trigger_db = _resolve(name, default_db)[0]
    on = _word_at_depth0(words, tokens, "ON", j) if head == "CREATE" else None
    if on is None:
        return [(trigger_db, None)]  # DROP TRIGGER db.name: its table is not named
    table, _ = _name(tokens, on + 1)
    if not table:
        return None
    # an unqualified table is in the trigger's database (MySQL keeps them together)
    return [(table[0] if len(table) == 2 else trigger_db, table[-1])]


def _word(tok: Token) -> str:
    """A keyword's (or unquoted name's) text in capitals; '' for quoted names and strings."""
    return "" if tok.token_type.name in ("IDENTIFIER", "STRING") else str(tok.text).upper()


def _skip_if_exists(words: list[str], i: int) -> int:
    while i < len(words) and words[i] in ("IF", "NOT", "EXISTS"):
        i += 1
    return i


def _is_name(tok: Token) -> bool:
    return tok.token_type.name == "IDENTIFIER" or (tok.token_type.name != "STRING" and bool(_NAME.fullmatch(tok.text)))


def _name(tokens: list[Token], i: int) -> tuple[list[str], int]:
    """A name of one or two parts at tokens[i] (`db`.`t`, t): its parts and the index after it."""
    parts: list[str] = []
    while i < len(tokens) and len(parts) < 2 and _is_name(tokens[i]):
        parts.append(str(tokens[i].text))
        i += 1
        if i < len(tokens) and tokens[i].token_type.name == "DOT":
            i += 1
        else:
            break
    return parts, i


def _resolve(parts: list[str], default_db: str | None) -> Written:
    return (parts[0], parts[1]) if len(parts) == 2 else (default_db, parts[-1])


def _name_list(tokens: list[Token], words: list[str], i: int, default_db: str | None,
               many: bool = True) -> list[Written] | None:
    """The name at tokens[i] (and those after it, comma-separated, when `many`)."""
    out: list[Written] = []
    while True:
        parts, i = _name(tokens, i)
        if not parts:
            return None
        out.append(_resolve(parts, default_db))
        if not many or i >= len(tokens) or tokens[i].token_type.name != "COMMA":
            return out
        i += 1


def _rename_list(tokens: list[Token], words: list[str], i: int, default_db: str | None) -> list[Written] | None:
    """`a TO b [, c TO d ...]`: every name, both sides."""
    out: list[Written] = []
    while True:
        old, i = _name(tokens, i)
        if not old or words[i:i + 1] != ["TO"]:
            return None
        new, i = _name(tokens, i + 1)
        if not new:
            return None
        out += [_resolve(old, default_db), _resolve(new, default_db)]
        if i >= len(tokens) or tokens[i].token_type.name != "COMMA":
            return out
        i += 1


def _word_at_depth0(words: list[str], tokens: list[Token], word: str, i: int) -> int | None:
    depth = 0
    for j in range(i, len(tokens)):
        kind = tokens[j].token_type.name
        depth += (kind == "L_PAREN") - (kind == "R_PAREN")
        if depth == 0 and words[j] == word:
            return j
    return None


def _alter_table_moves(tokens: list[Token], words: list[str], i: int, default_db: str | None) -> list[Written]:
    """The other tables an ALTER TABLE changes: its new name (RENAME [TO | AS] db.t) and the table whose
    rows it swaps (EXCHANGE PARTITION p WITH TABLE db.t)."""
    out: list[Written] = []
    depth = 0
    for j in range(i, len(tokens)):
        kind = tokens[j].token_type.name
        depth += (kind == "L_PAREN") - (kind == "R_PAREN")
        if depth:
            continue
        k = None
        if words[j] == "RENAME" and words[j + 1:j + 2] not in (["COLUMN"], ["INDEX"], ["KEY"], ["CONSTRAINT"]):
            k = j + 2 if words[j + 1:j + 2] in (["TO"], ["AS"]) else j + 1
        elif words[j] == "WITH" and words[j + 1:j + 2] == ["TABLE"] and "EXCHANGE" in words[i:j]:
            k = j + 2
        if k is not None:
            parts, _ = _name(tokens, k)
            if parts:
                out.append(_resolve(parts, default_db))
    return out
