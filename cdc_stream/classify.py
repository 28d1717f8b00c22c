"""What a SQL statement is: the one reader of statements the leader logged, and the only module importing sqlglot.

`classify(text, default_db)` says what a Query event's statement is (`Statement.kind`: BEGIN, COMMIT,
ROLLBACK, XA, SAVEPOINT, an account statement, DDL with its verb and object kind, DML, other), which
objects it creates, changes or drops (`writes`) and which it only reads (`reads`), every name it
mentions (`targets`), in which database (`database`), and for the lake what it does to tables
(`table_effects`). The producer (assemble, accounts, windows), the topic layout, the filters, the
consumer and Spark all ask it. Rewriting a statement (clear-text passwords, DISABLE ON SLAVE, trigger
guards, definers) stays with its owner, which finds its way in the statement with this module's lexer.

Each statement is read once: a `Statement` computes what is asked of it once and keeps it, the
producer carries it on the event it makes (`ChangeEvent.statement`, in memory only: never on the
topic), and `classify` keeps the last statements it read (by text, default database and ANSI_QUOTES),
so the callers holding only the text (the lake's driver, the audit) find the same one.

Two readers: a small lexer of our own (words, quoted identifiers and strings, comments skipped,
executable comments `/*!50106 CREATE*/` read as code), which costs no import, for a statement's head, its
kind and accounts, and for the objects a DDL statement creates, changes or drops (`writes`: a name in a
fixed place after the head, which is what the producer and the consumer filter by); every other name it
mentions (`targets`: a view's tables, a foreign key's parent, a routine's body) and what it does to columns
(`table_effects`) come from the tree of a real SQL parser (sqlglot, imported when first needed: 0.1-0.2 s,
which a stream of plain CREATE/ALTER/DROP TABLE never pays), not from regular expressions. Over the 38,745
DDL statements of MariaDB's mysql-test files the lexer's `writes` equal those read from sqlglot's tokens
wherever sqlglot tokenizes the statement, and also read the 18 it does not (executable comments, sjis names).

Statements are lexed as text whose characters may stand for the statement's bytes one to one
(`bytes.decode("latin1")`), so a slice of it, encoded back, is the exact bytes of that part.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from cdc_stream.mysql import quote_ident

if TYPE_CHECKING:
    from sqlglot import Token as SqlglotToken

    from cdc_stream.events import ChangeEvent

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # unparsed DDL falls back quietly

Written = tuple[str | None, str | None]  # (database, table or view or sequence) a statement names; see Statement.writes

# Statement.kind
BEGIN, COMMIT, ROLLBACK, XA, SAVEPOINT = "begin", "commit", "rollback", "xa", "savepoint"
ACCOUNT, DDL, DML, OTHER = "account", "ddl", "dml", "other"

ANSI_QUOTES = 4  # the sql_mode bit: "x" is an identifier, not a string

# -- the lexer -------------------------------------------------------------------------------------------------

WORD, QUOTED, STRING, PUNCT = "word", "quoted", "string", "punct"

_SPACE = re.compile(r"\s+")
# A word: ASCII letters, digits, _ and $, and any character from U+0080 up. Written as what it is not: the
# positive class [0-9A-Za-z_$\x80-\U0010ffff] is the same set and costs 10 ms to compile at every start.
_WORD = re.compile(r"[^\x00-\x23\x25-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]+")
_VERSIONED_COMMENT = re.compile(r"/\*M?!\d*")


@dataclass(frozen=True, slots=True)
class Token:
    """A word, quoted identifier, string or punctuation character of a statement, and where it is."""

    kind: str
    text: str  # as written (quotes included)
    start: int
    end: int

    @property
    def upper(self) -> str:
        """A word in upper case ('' for anything else)."""
        return self.text.upper() if self.kind == WORD else ""

    @property
    def name(self) -> str:
        """An identifier, string or word without its quotes."""
        if self.kind in (QUOTED, STRING):
            q = self.text[0]
            return self.text[1:-1].replace(q + q, q)
        return self.text


def tokens(sql: str, ansi_quotes: bool = False, limit: int = 1 << 30) -> list[Token]:
    """The first `limit` tokens of `sql`; comments and whitespace left out."""
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n and len(out) < limit:
        c = sql[i]
        if c.isspace():
            i = _SPACE.match(sql, i).end()  # type: ignore[union-attr]
        elif sql.startswith("/*", i):
            if m := _VERSIONED_COMMENT.match(sql, i):
                i = m.end()  # executable comment: its content is code
            else:
                end = sql.find("*/", i + 2)
                i = n if end < 0 else end + 2
        elif sql.startswith("*/", i):
            i += 2  # the end of an executable comment
        elif c == "#" or sql.startswith("-- ", i) or sql.startswith("--\t", i) or sql.startswith("--\n", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif c in "`'\"":
            end = _closing_quote(sql, i)
            kind = QUOTED if c == "`" or (c == '"' and ansi_quotes) else STRING
            out.append(Token(kind, sql[i:end], i, end))
            i = end
        elif m := _WORD.match(sql, i):
            out.append(Token(WORD, m.group(), i, m.end()))
            i = m.end()
        else:
            out.append(Token(PUNCT, c, i, i + 1))
            i += 1
    return out


def _closing_quote(sql: str, start: int) -> int:
    """The index after the quote closing the one at `start` (a doubled quote is part of the text)."""
    q, i = sql[start], start + 1
    while i < len(sql):
        c = sql[i]
        if c == "\\" and q != "`":
            i += 2
        elif c == q:
            if sql.startswith(q, i + 1):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return len(sql)


def words(toks: list[Token], n: int) -> list[str]:
    """The first `n` tokens as upper-case words ('' for what is not a word)."""
    return [t.upper for t in toks[:n]]


def texts(toks: list[Token], n: int) -> list[str]:
    """The first `n` tokens as written."""
    return [t.text for t in toks[:n]]


def skip_user(toks: list[Token], i: int) -> int:
    """After DEFINER: `= user@host`, `= CURRENT_USER[()]`, `= role`; the index after it."""
    if i < len(toks) and toks[i].text == "=":
        i += 1
    if i < len(toks) and toks[i].upper in ("CURRENT_USER", "CURRENT_ROLE"):
        i += 1
        if texts(toks[i:], 2) == ["(", ")"]:
            i += 2
        return i
    i += 1  # the user (or role) name
    if i < len(toks) and toks[i].text == "@":
        i += 2
    return i


# -- XA and savepoint statements ------------------------------------------------------------------------------

_XA_PART = r"(?:[Xx]'([0-9A-Fa-f]*)'|'((?:[^'\\]|''|\\.)*)')"
_XA_STATEMENT = re.compile(rf"XA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\b\s*(?:{_XA_PART}(?:\s*,\s*{_XA_PART}"
                           r"(?:\s*,\s*(\d+))?)?)?", re.IGNORECASE)


def xid_text(format_id: int, gtrid: bytes, bqual: bytes) -> str:
    """An xid as the leader logs it (`XA COMMIT X'7831',X'',1`): the key held XA groups are found by."""
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


@dataclass(frozen=True, slots=True)
class XaStatement:
    """A logged XA statement: its verb and, when the statement names it in the logged form, its xid."""

    verb: str  # START, END, PREPARE, COMMIT, ROLLBACK (BEGIN is read as START)
    xid: str | None


def _xa_statement(sql: str) -> XaStatement | None:
    match = _XA_STATEMENT.match(sql)
    if match is None:
        return None
    verb, gtrid_hex, gtrid_text, bqual_hex, bqual_text, format_id = match.groups()
    xid = None
    if gtrid_hex is not None or gtrid_text is not None:
        xid = xid_text(int(format_id or 1), _xid_part(gtrid_hex, gtrid_text), _xid_part(bqual_hex, bqual_text))
    return XaStatement("START" if verb.upper() == "BEGIN" else verb.upper(), xid)


def _xid_part(hex_digits: str | None, text: str | None) -> bytes:
    if hex_digits is not None:
        return bytes.fromhex(hex_digits)
    return (text or "").replace("''", "'").encode()


_IDENT = r"(?:`((?:[^`]|``)*)`|\"((?:[^\"]|\"\")*)\"|([^\s`\";]+))"
_SAVEPOINT_STATEMENT = re.compile(
    rf"(SAVEPOINT|ROLLBACK(?:\s+WORK)?\s+TO(?:\s+SAVEPOINT)?|RELEASE\s+SAVEPOINT)\s+{_IDENT}\s*;?\s*$",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SavepointStatement:
    """SAVEPOINT / ROLLBACK TO / RELEASE of the savepoint `name` (case-folded: names are case-insensitive)."""

    verb: str  # "SAVEPOINT", "ROLLBACK TO" or "RELEASE"
    name: str


def _savepoint_statement(sql: str) -> SavepointStatement | None:
    match = _SAVEPOINT_STATEMENT.match(sql.strip())
    if match is None:
        return None
    head = match.group(1).upper()
    backquoted, double_quoted, bare = match.group(2), match.group(3), match.group(4)
    if backquoted is not None:
        name = backquoted.replace("``", "`")
    elif double_quoted is not None:
        name = double_quoted.replace('""', '"')
    else:
        name = bare
    verb = "SAVEPOINT" if head == "SAVEPOINT" else "RELEASE" if head.startswith("RELEASE") else "ROLLBACK TO"
    return SavepointStatement(verb, name.casefold())


# -- account statements ----------------------------------------------------------------------------------------

# (leading words) -> what the status line calls them.
_ACCOUNT_VERBS: tuple[tuple[str, ...], ...] = (
    ("CREATE", "USER"), ("CREATE", "ROLE"), ("ALTER", "USER"), ("DROP", "USER"), ("DROP", "ROLE"),
    ("RENAME", "USER"), ("GRANT",), ("REVOKE",), ("SET", "PASSWORD"), ("SET", "DEFAULT", "ROLE"),
)
# Where a list of accounts starts: right after the verb (USER/ROLE statements), or after one of these.
_LIST_AFTER = {("GRANT",): ("TO",), ("REVOKE",): ("FROM",), ("RENAME", "USER"): ("TO",),
               ("SET", "PASSWORD"): ("FOR",), ("SET", "DEFAULT", "ROLE"): ("FOR",)}
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)\b")
_ACCOUNT_HEADS = frozenset(v[0] for v in _ACCOUNT_VERBS)  # an account statement's first word


@dataclass(frozen=True)
class AccountStatement:
    """A statement that changes accounts; `verb` and `accounts` are what may be shown (never a password)."""

    verb: str
    accounts: tuple[str, ...]

    def describe(self) -> str:
        """`CREATE USER 'u'@'%'`: the verb and the accounts it names, nothing else of the statement."""
        return " ".join((self.verb, ", ".join(self.accounts))).strip()


def _account_verb(toks: list[Token]) -> tuple[str, ...] | None:
    head = words(toks, 5)
    if head[:1] == ["CREATE"] and head[1:3] == ["OR", "REPLACE"]:
        head = head[:1] + head[3:]
    return next((v for v in _ACCOUNT_VERBS if tuple(head[:len(v)]) == v), None)


def account_verb(sql: str) -> str | None:
    """The verb of an account statement (`CREATE USER`, `GRANT`, ...), None for any other statement: what the
    producer asks before it looks for clear-text passwords, without reading the rest of the statement."""
    first = _FIRST_WORD.match(sql)
    if first is not None and first.group(1).upper() not in _ACCOUNT_HEADS:
        return None  # BEGIN, COMMIT, INSERT...: every Query event comes here, most are not account statements
    verb = _account_verb(tokens(sql, limit=5))
    return " ".join(verb) if verb is not None else None



def _accounts(toks: list[Token], verb: tuple[str, ...]) -> list[str]:
    """The accounts a statement names, as 'user'@'host' (a bare name is 'name'@'%', a role 'name'):
    the names that open its account list and each one after a comma of that list."""
    names = (WORD, QUOTED, STRING)
    starts = _LIST_AFTER.get(verb, ())
    i = len(verb) + (2 if toks and toks[0].upper == "CREATE" and texts(toks[1:], 1) == ["OR"] else 0)
    while i < len(toks) and toks[i].upper in ("IF", "NOT", "EXISTS"):
        i += 1
    expect = not starts or verb == ("RENAME", "USER")  # the next name is an account
    role = verb in (("CREATE", "ROLE"), ("DROP", "ROLE"))
    depth, out = 0, list[str]()
    while i < len(toks):
        tok = toks[i]
        if tok.text in "()" and tok.kind == PUNCT:
            depth += 1 if tok.text == "(" else -1
        elif depth == 0 and (tok.upper in starts or (tok.text == "," and tok.kind == PUNCT and bool(out))):
            expect = True  # the list starts, or goes on after an account
        elif expect and tok.kind in names and tok.upper not in ("CURRENT_USER", "CURRENT_ROLE", "PUBLIC"):
            if texts(toks[i + 1:], 1) == ["@"] and i + 2 < len(toks) and toks[i + 2].kind in names:
                out.append(f"'{_show(tok.name)}'@'{_show(toks[i + 2].name)}'")
                i += 2
            else:
                out.append(f"'{_show(tok.name)}'" + ("" if role else "@'%'"))
            expect = False
        else:
            expect = False
        i += 1
    return out


def _show(name: str) -> str:
    return name.replace("\\", "\\\\").replace("'", "\\'")


# -- the statement -----------------------------------------------------------------------------------------------

_DDL_VERBS = frozenset({"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"})
_DML_VERBS = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "CALL", "DO", "HANDLER", "SELECT", "WITH"})
# The object kinds `CREATE/ALTER/DROP <kind>` may name (the first of them in the head is the statement's).
_OBJECTS = frozenset({"TABLE", "TABLES", "VIEW", "SEQUENCE", "DATABASE", "SCHEMA", "PROCEDURE", "FUNCTION", "EVENT",
                      "PACKAGE", "TRIGGER", "INDEX", "USER", "ROLE", "SERVER", "TABLESPACE", "LOGFILE"})
_HEAD_TOKENS = 32


class Statement:
    """One statement and what it is; each part is read when first asked for, then kept."""

    def __init__(self, text: str, default_db: str | None = None, ansi_quotes: bool = False):
        self.text = text
        self.default_db = default_db
        self.ansi_quotes = ansi_quotes
        self.xa: XaStatement | None = None  # an XA statement
        self.savepoint: SavepointStatement | None = None  # SAVEPOINT, ROLLBACK TO, RELEASE SAVEPOINT
        sql = text.strip()
        head = sql[:20].upper()
        self.kind: str
        if head in ("BEGIN", "COMMIT", "ROLLBACK"):  # what the server logs around a transaction, exactly
            self.kind = {"BEGIN": BEGIN, "COMMIT": COMMIT, "ROLLBACK": ROLLBACK}[head]
        elif head.startswith("XA") and (xa := _xa_statement(sql)) is not None:
            self.kind, self.xa = XA, xa
        elif head.startswith(("SAVEPOINT", "ROLLBACK", "RELEASE")) and (sp := _savepoint_statement(sql)) is not None:
            self.kind, self.savepoint = SAVEPOINT, sp
        elif self._account_verb is not None:
            self.kind = ACCOUNT
        elif self.verb in _DDL_VERBS:
            self.kind = DDL
        elif self.verb in _DML_VERBS:
            self.kind = DML
        else:
            self.kind = OTHER

    def __repr__(self) -> str:
        return f"Statement({self.text!r}, {self.default_db!r}, kind={self.kind!r})"

    @cached_property
    def _head(self) -> list[Token]:
        return tokens(self.text, self.ansi_quotes, limit=_HEAD_TOKENS)

    @cached_property
    def _tokens(self) -> list[Token]:
        """Every token of the statement (the lexer's: no import), for the names `writes` reads."""
        return tokens(self.text, self.ansi_quotes)

    @cached_property
    def _account_verb(self) -> tuple[str, ...] | None:
        return _account_verb(self._head)

    @cached_property
    def verb(self) -> str:
        """The statement's first word, upper case (CREATE, ALTER, INSERT, SET, ...; '' when it has none)."""
        return self._head[0].upper if self._head else ""

    @cached_property
    def object(self) -> str | None:
        """What CREATE/ALTER/DROP/RENAME/TRUNCATE acts on: TABLE, VIEW, TRIGGER, PROCEDURE, FUNCTION, EVENT,
        SEQUENCE, INDEX, DATABASE, PACKAGE, USER, ROLE, ... (SCHEMA is read as DATABASE, TABLES as TABLE);
        None for other statements, and for one whose head names no such kind."""
        if self.verb not in _DDL_VERBS:
            return None
        toks, i = self._head, 1
        while i < len(toks):
            word = toks[i].upper
            if word == "DEFINER" and texts(toks[i + 1:], 1) == ["="]:
                i = skip_user(toks, i + 1)  # the user may be named like a kind: DEFINER=event@h
                continue
            if word == "SQL" and words(toks[i + 1:], 1) == ["SECURITY"]:
                i += 3  # SQL SECURITY DEFINER | INVOKER
                continue
            if word in _OBJECTS:
                return {"SCHEMA": "DATABASE", "TABLES": "TABLE"}.get(word, word)
            i += 1
        return "TABLE" if self.verb == "TRUNCATE" else None  # TRUNCATE t

    @property
    def is_ddl(self) -> bool:
        """CREATE, ALTER, DROP, RENAME or TRUNCATE of a database object (account statements are not)."""
        return self.kind == DDL

    @cached_property
    def drop_table(self) -> bool:
        """DROP [TEMPORARY] TABLE[S] ...: what a native replica runs as DROP TABLE IF EXISTS."""
        w = words(self._head, 3)
        if w[:1] != ["DROP"]:
            return False
        return w[1:2] in (["TABLE"], ["TABLES"]) or (w[1:2] == ["TEMPORARY"] and w[2:3] in (["TABLE"], ["TABLES"]))

    @property
    def event_definition(self) -> bool:
        """CREATE or ALTER EVENT (what a native replica leaves DISABLE ON SLAVE)."""
        return self.verb in ("CREATE", "ALTER") and self.object == "EVENT"

    @cached_property
    def account(self) -> AccountStatement | None:
        """What an account statement (CREATE/ALTER/DROP/RENAME USER, roles, GRANT, REVOKE, SET PASSWORD)
        changes; None for any other statement."""
        verb = self._account_verb
        if verb is None:
            return None
        toks = tokens(self.text, self.ansi_quotes, limit=256)
        return AccountStatement(" ".join(verb), tuple(dict.fromkeys(_accounts(toks, verb))))

    # -- names (sqlglot) ---------------------------------------------------------------------------------------

    @cached_property
    def _sqlglot_tokens(self) -> list[SqlglotToken] | None:
        """sqlglot's tokens of the statement (None: it cannot be tokenized); the tree is parsed from them."""
        import sqlglot  # imported when first needed: see the module docstring

        try:
            return sqlglot.tokenize(self.text, read="mysql")
        except sqlglot.errors.TokenError:
            return None

    @cached_property
    def _tree(self) -> list[Any] | None:
        """sqlglot's statements (None: they cannot be parsed)."""
        import sqlglot
        from sqlglot.dialects.dialect import Dialect

        if self._sqlglot_tokens is None:
            return None
        try:
            return Dialect.get_or_raise("mysql").parser().parse(self._sqlglot_tokens, self.text)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            return None

    def _against(self, default_db: str | None) -> Statement:
        """The same statement under another default database (its tokens and tree read once)."""
        other = Statement(self.text, default_db, self.ansi_quotes)
        for name in ("_head", "_tokens", "_sqlglot_tokens", "_tree"):
            if name in self.__dict__:
                other.__dict__[name] = self.__dict__[name]
        return other

    @cached_property
    def writes(self) -> tuple[Written, ...] | None:
        """The objects the statement creates, alters, drops, renames or truncates, as (database, name) resolved
        against the default database; what it only reads (a view's tables, LIKE's source, a trigger's body)
        is not among them.

        name is the table, view or sequence (they share one namespace); for a trigger, the table it is on
        (MySQL keeps a trigger in its table's database); None for a database itself and for objects known
        by their database alone (routines, events, packages, a trigger dropped by name). Both names of a
        RENAME are written. None when the statement changes no database object (GRANT, CREATE USER, SET,
        OPTIMIZE/ANALYZE/REPAIR TABLE, ...) or its head cannot be read: callers then go by every name it
        mentions (`targets`).
        """
        found = _writes(self, self.default_db)
        return tuple(found) if found is not None else None

    @cached_property
    def targets(self) -> tuple[Written, ...]:
        """Every (database, table) the statement names, resolved against the default database; (db, None)
        for database-level DDL.

        Falls back to [(database, None)] when the statement cannot be parsed: the database that qualifies
        the object it creates, alters or drops (`CREATE TRIGGER pe.t_ai ... ON pe.t`, `ALTER EVENT pe.e`),
        else the default database."""
        return tuple(_targets(self, self.default_db))

    @property
    def reads(self) -> tuple[Written, ...]:
        """The tables (views, sequences) a DDL statement names without changing them: a view's tables, LIKE's
        source, a foreign key's parent, the tables a routine's body uses. () when `writes` is None (DML, GRANT,
        ...: `targets` holds every name, written or read)."""
        if self.writes is None or self.verb == "DROP" or self.object == "INDEX":
            return ()  # a DROP reads nothing (sqlglot reads DROP TRIGGER/INDEX x's name as a table's)
        named = self.targets
        if self.object in ("PROCEDURE", "FUNCTION", "EVENT", "PACKAGE"):
            named = named[1:]  # the routine's own name, which sqlglot reads as a table's
        written = set(self.writes)
        return tuple(dict.fromkeys(t for t in named if t[1] is not None and t not in written))

    @property
    def tables(self) -> tuple[tuple[str | None, str], ...]:
        """The tables (views, sequences) among `targets`, each once."""
        return tuple(dict.fromkeys((d, t) for d, t in self.targets if t is not None))

    @property
    def database(self) -> str | None:
        """The database the statement belongs to: that of the first object it changes, else of the first it
        names, else the default database."""
        for db, _ in (*(self.writes or ()), *self.targets):
            if db is not None:
                return db
        return self.default_db

    @cached_property
    def qualified_only(self) -> bool:
        """Whether every database and table the statement names comes with its database, so that it means
        the same under any default database (False when that cannot be told)."""
        bare = self if self.default_db is None else self._against(None)
        if bare.writes is None:  # GRANT and the like: by the tables they name, as before `writes` existed
            return all(table is None for _, table in bare.targets)
        if self.object == "DATABASE":
            # It names only the database it writes (and the server logs CREATE DATABASE x with x as its default
            # database, which the consumer's follower lacks: the question every stream's first DDL asks).
            return all(db is not None for db, _ in bare.writes)
        return all(db is not None for db, _ in bare.writes) and all(db is not None for db, _ in bare.targets)

    @cached_property
    def table_effects(self) -> tuple[TableEffect, ...]:
        """What the statement does to tables' columns and rows, for the lake (cdc_spark/ddl.py)."""
        return tuple(_table_effects(self))


@lru_cache(maxsize=256)
def classify(text: str, default_db: str | None = None, ansi_quotes: bool = False) -> Statement:
    """The statement `text` run with `default_db` as the session's database (the last 256 kept: one read
    each, whoever asks)."""
    return Statement(text, default_db, ansi_quotes)


def read(text: str, default_db: str | None, sql_mode: int | None = None) -> Statement:
    """The statement `text`, run with `default_db` as the session's database and the session's `sql_mode`, read
    for a caller that carries it along (not kept by `classify`)."""
    return Statement(text, default_db, sql_mode is not None and bool(sql_mode & ANSI_QUOTES))


def statement_of(event: ChangeEvent) -> Statement:
    """The statement of a Query event: the one it carries (`ChangeEvent.statement`), else read now and kept
    on it."""
    stmt = event.statement
    if stmt is None:
        stmt = event.statement = read(event.query or "", event.database,
                                      event.session.sql_mode if event.session is not None else None)
    return stmt


def ddl_writes(sql: str, default_db: str | None) -> list[Written] | None:
    """`Statement.writes` of `sql` (a list)."""
    writes = classify(sql, default_db).writes
    return list(writes) if writes is not None else None


def ddl_targets(sql: str, default_db: str | None) -> list[Written]:
    """`Statement.targets` of `sql` (a list)."""
    return list(classify(sql, default_db).targets)


# -- every name a statement mentions -----------------------------------------------------------------------------

def _targets(stmt: Statement, default_db: str | None) -> list[Written]:
    from sqlglot import exp

    statements = stmt._tree
    if statements is None:
        return _table_statement_targets(stmt, default_db) or [(_object_db(stmt) or default_db, None)]
    targets: list[Written] = []
    for node in statements:
        if node is None:
            continue
        kind = str(node.args.get("kind") or "").upper()
        if isinstance(node, (exp.Create, exp.Drop)) and kind in ("DATABASE", "SCHEMA"):
            for table in node.find_all(exp.Table):
                targets.append((table.name or table.db or default_db, None))
            continue
        if isinstance(node, exp.Command) and str(node.this).upper() == "RENAME":
            targets += _rename_targets(node.expression.name, default_db)
            continue
        for table in node.find_all(exp.Table):
            if table.name:
                targets.append((table.db or default_db, table.name))
    return targets or _table_statement_targets(stmt, default_db) or [(_object_db(stmt) or default_db, None)]


_NAME = re.compile(r"[\w$]+")
_TABLE_HEADS = ("CREATE", "ALTER", "DROP", "TRUNCATE", "OPTIMIZE", "ANALYZE", "REPAIR", "CHECK")


def _table_statement_targets(stmt: Statement, default_db: str | None) -> list[Written]:
    """The tables of a `<verb> ... TABLE [IF [NOT] EXISTS] name[, name...]` statement sqlglot cannot
    parse (MariaDB syntax it lacks, such as COMPRESSED columns): [] for other statements."""
    tokens = stmt._sqlglot_tokens
    if tokens is None:
        return []
    words = [t.text.upper() for t in tokens[:8]]
    if not words or words[0] not in _TABLE_HEADS or "TABLE" not in words:
        return []
    i = words.index("TABLE") + 1
    while i < len(tokens) and tokens[i].text.upper() in ("IF", "NOT", "EXISTS"):
        i += 1
    targets: list[Written] = []
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


def _object_db(stmt: Statement) -> str | None:
    """The database qualifying the object a `CREATE/ALTER/DROP ... <kind> [IF [NOT] EXISTS] db.name`
    statement names (for a trigger also its `ON db.table`): None when it is not qualified.

    Without it a statement sqlglot cannot parse would be filtered by the session's default
    database alone, and a schema-qualified one sent with no default database (or another one)
    would be dropped as belonging to no included database."""
    tokens = stmt._sqlglot_tokens
    if tokens is None:
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


def _rename_targets(text: str, default_db: str | None) -> list[Written]:
    """Tables of 'TABLE a TO b, c TO d' (sqlglot keeps MySQL's RENAME TABLE unparsed)."""
    import sqlglot
    from sqlglot import exp

    body = text.strip()
    if not body.upper().startswith("TABLE"):
        return []
    tokens = sqlglot.tokenize(body[5:], read="mysql")
    targets: list[Written] = []
    side: list[Any] = []
    for tok in [*tokens, None]:
        if tok is None or tok.text == "," or tok.text.upper() == "TO":
            if side:
                text = " ".join(t.text if t.token_type.name != "IDENTIFIER" else quote_ident(t.text) for t in side)
                table = exp.to_table(text, dialect="mysql")
                targets.append((table.db or default_db, table.name))
            side = []
        else:
            side.append(tok)
    return targets


# -- the objects a statement changes -----------------------------------------------------------------------------

# What `CREATE/ALTER/DROP <kind>` changes: a table-namespace object (tables, views and sequences share
# one), a database, an object the filters know by its database alone, or one they know by its table.
_WRITE_KINDS = {
    "TABLE": "table", "VIEW": "table", "SEQUENCE": "table", "DATABASE": "database", "SCHEMA": "database",
    "PROCEDURE": "routine", "FUNCTION": "routine", "EVENT": "routine", "PACKAGE": "routine",
    "TRIGGER": "trigger", "INDEX": "index",
}
# CREATE/ALTER/DROP of these changes no database object: not `writes`' business (account statements
# have their own handling, in the consumer).
_NOT_OBJECTS = frozenset({"USER", "ROLE", "SERVER", "TABLESPACE", "LOGFILE"})
_ALTER_DATABASE_OPTIONS = frozenset({"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "UPGRADE"})


def _writes(stmt: Statement, default_db: str | None) -> list[Written] | None:
    toks = stmt._tokens
    words = [t.upper for t in toks]
    if not words:
        return None
    head = words[0]
    if head == "TRUNCATE":
        i = 2 if words[1:2] == ["TABLE"] else 1
        return _name_list(toks, i, default_db, many=False)
    if head == "RENAME":
        if words[1:2] not in (["TABLE"], ["TABLES"]):
            return None  # RENAME USER
        return _rename_list(toks, words, 2, default_db)
    if head not in ("CREATE", "ALTER", "DROP"):
        return None
    at = next((i for i, w in enumerate(words[:32]) if w in _WRITE_KINDS or w in _NOT_OBJECTS), None)
    if at is None or words[at] in _NOT_OBJECTS:
        return None
    kind, i = _WRITE_KINDS[words[at]], _skip_if_exists(words, at + 1)
    if words[at] == "PACKAGE" and words[i:i + 1] == ["BODY"]:
        i = _skip_if_exists(words, i + 1)
    if kind == "database":
        name, _ = _name(toks, i)
        if head == "ALTER" and (not name or words[i] in _ALTER_DATABASE_OPTIONS):
            return [(default_db, None)]  # ALTER DATABASE CHARACTER SET ...: the default database
        return [(name[-1], None)] if len(name) == 1 else None
    if kind == "table":
        writes = _name_list(toks, i, default_db, many=head == "DROP")
        if writes is not None and head == "ALTER" and words[at] == "TABLE":
            writes += _alter_table_moves(toks, words, i, default_db)
        return writes
    if kind == "routine":
        name, j = _name(toks, i)
        if not name:
            return None
        writes = [(_resolve(name, default_db)[0], None)]
        rename = _word_at_depth0(toks, words, "RENAME", j) if head == "ALTER" and words[at] == "EVENT" else None
        if rename is not None and words[rename + 1:rename + 2] == ["TO"]:  # ALTER EVENT a.e RENAME TO x.e
            new, _ = _name(toks, rename + 2)
            writes += [(_resolve(new, default_db)[0], None)] if new else []
        return writes
    if kind == "index":  # CREATE [UNIQUE ...] INDEX i ON t (...), DROP INDEX i ON t
        on = _word_at_depth0(toks, words, "ON", i)
        return _name_list(toks, on + 1, default_db, many=False) if on is not None else None
    # trigger
    name, j = _name(toks, i)
    if not name:
        return None
    trigger_db = _resolve(name, default_db)[0]
    on = _word_at_depth0(toks, words, "ON", j) if head == "CREATE" else None
    if on is None:
        return [(trigger_db, None)]  # DROP TRIGGER db.name: its table is not named
    table, _ = _name(toks, on + 1)
    if not table:
        return None
    # an unqualified table is in the trigger's database (MySQL keeps them together)
    return [(table[0] if len(table) == 2 else trigger_db, table[-1])]


def _skip_if_exists(words: list[str], i: int) -> int:
    while i < len(words) and words[i] in ("IF", "NOT", "EXISTS"):
        i += 1
    return i


def _is_name(tok: Token) -> bool:
    return tok.kind == QUOTED or (tok.kind == WORD and bool(_NAME.fullmatch(tok.text)))


def _name(toks: list[Token], i: int) -> tuple[list[str], int]:
    """A name of one or two parts at toks[i] (`db`.`t`, t): its parts and the index after it."""
    parts: list[str] = []
    while i < len(toks) and len(parts) < 2 and _is_name(toks[i]):
        parts.append(toks[i].name)
        i += 1
        if i < len(toks) and toks[i].text == ".":
            i += 1
        else:
            break
    return parts, i


def _resolve(parts: list[str], default_db: str | None) -> Written:
    return (parts[0], parts[1]) if len(parts) == 2 else (default_db, parts[-1])


def _name_list(toks: list[Token], i: int, default_db: str | None, many: bool = True) -> list[Written] | None:
    """The name at toks[i] (and those after it, comma-separated, when `many`)."""
    out: list[Written] = []
    while True:
        parts, i = _name(toks, i)
        if not parts:
            return None
        out.append(_resolve(parts, default_db))
        if not many or i >= len(toks) or toks[i].text != ",":
            return out
        i += 1


def _rename_list(toks: list[Token], words: list[str], i: int, default_db: str | None) -> list[Written] | None:
    """`a TO b [, c TO d ...]`: every name, both sides."""
    out: list[Written] = []
    while True:
        old, i = _name(toks, i)
        if not old or words[i:i + 1] != ["TO"]:
            return None
        new, i = _name(toks, i + 1)
        if not new:
            return None
        out += [_resolve(old, default_db), _resolve(new, default_db)]
        if i >= len(toks) or toks[i].text != ",":
            return out
        i += 1


def _depths(toks: list[Token], i: int) -> Iterator[tuple[int, int]]:
    """(index, parenthesis depth after it) of toks[i:]; a quoted ( or ) is not punctuation."""
    depth = 0
    for j in range(i, len(toks)):
        tok = toks[j]
        if tok.kind == PUNCT:
            depth += (tok.text == "(") - (tok.text == ")")
        yield j, depth


def _word_at_depth0(toks: list[Token], words: list[str], word: str, i: int) -> int | None:
    return next((j for j, depth in _depths(toks, i) if depth == 0 and words[j] == word), None)


def _alter_table_moves(toks: list[Token], words: list[str], i: int, default_db: str | None) -> list[Written]:
    """The other tables an ALTER TABLE changes: its new name (RENAME [TO | AS] db.t) and the table whose
    rows it swaps (EXCHANGE PARTITION p WITH TABLE db.t)."""
    out: list[Written] = []
    for j, depth in _depths(toks, i):
        if depth:
            continue
        k = None
        if words[j] == "RENAME" and words[j + 1:j + 2] not in (["COLUMN"], ["INDEX"], ["KEY"], ["CONSTRAINT"]):
            k = j + 2 if words[j + 1:j + 2] in (["TO"], ["AS"]) else j + 1
        elif words[j] == "WITH" and words[j + 1:j + 2] == ["TABLE"] and "EXCHANGE" in words[i:j]:
            k = j + 2
        if k is not None:
            parts, _ = _name(toks, k)
            if parts:
                out.append(_resolve(parts, default_db))
    return out


# -- what a DDL does to tables' columns and rows -----------------------------------------------------------------

_KEY_KINDS = ("INDEX", "KEY", "CONSTRAINT", "PRIMARY KEY", "FOREIGN KEY", "CHECK")
_NO_ROW_CHANGE = ("AddConstraint", "AlterIndex", "Comment", "DropPrimaryKey")


@dataclass(frozen=True)
class AddedColumn:
    """ADD COLUMN: its name and what existing rows hold in it."""

    name: str
    default: str | None  # the literal's text (None: NULL)
    nullable: bool = True
    problem: str | None = None  # why the value of existing rows cannot be known


@dataclass(frozen=True)
class TableEffect:
    """What one statement does to one table (or, with `table` None, to a database's tables).

    kind: "create" (columns: the names in order; None for CREATE ... LIKE/SELECT; `fractions`: each
    TIME/DATETIME/TIMESTAMP column's fractional-second precision, 0 where none is written; None without any),
    "alter" (`added` columns, and `other`: the first change other than adding columns or changing keys, constraints,
    comments, options or a column's default: sqlglot's name for it), "drop", "truncate", "unread" (the
    statement cannot be parsed), "unknown" (a RENAME, or an ALTER sqlglot keeps unparsed), "none"
    (no table's columns or rows change: databases, views, indexes, triggers, routines, events, grants)."""

    kind: str
    database: str | None
    table: str | None
    columns: list[str] | None = None
    added: list[AddedColumn] = field(default_factory=list)
    other: str | None = None
    if_not_exists: bool = False
    fractions: tuple[tuple[str, int], ...] | None = None


def _table_effects(stmt: Statement) -> list[TableEffect]:
    from sqlglot import exp

    default_db = stmt.default_db
    statements = stmt._tree
    if statements is None:
        return [TableEffect("unread", default_db, None)]
    out: list[TableEffect] = []
    for node in statements:
        if node is None:
            continue
        kind = str(node.args.get("kind") or "").upper()
        if isinstance(node, exp.Create):
            if kind == "TABLE":
                out.append(_created(node, default_db))
            continue
        if isinstance(node, exp.Drop):
            if kind == "TABLE":
                out += [TableEffect("drop", t.db or default_db, t.name) for t in node.find_all(exp.Table)]
            elif kind in ("DATABASE", "SCHEMA"):
                out += [TableEffect("drop", t.name or t.db or default_db, None) for t in node.find_all(exp.Table)]
            continue
        if isinstance(node, exp.TruncateTable):
            out += [TableEffect("truncate", t.db or default_db, t.name) for t in node.expressions]
            continue
        if isinstance(node, exp.Alter) and kind == "TABLE":
            out.append(_altered(node, default_db))
            continue
        if isinstance(node, exp.Command) and str(node.this).upper() in ("RENAME", "ALTER"):
            out += [TableEffect("unknown", db, table) for db, table in stmt.targets]
    return out or [TableEffect("none", default_db, None)]


def _created(node: Any, default_db: str | None) -> TableEffect:
    from sqlglot import exp

    table = node.find(exp.Table)
    schema = node.this if isinstance(node.this, exp.Schema) else None
    names = [c.name for c in schema.expressions if isinstance(c, exp.ColumnDef)] if schema is not None else None
    fractions = None
    if node.args.get("expression") is not None or not names:
        names = None  # CREATE TABLE ... LIKE / AS SELECT: the columns are the leader's
    elif schema is not None:
        fractions = tuple((c.name, dec) for c in schema.expressions
                          if isinstance(c, exp.ColumnDef) and (dec := _fraction(c)) is not None) or None
    return TableEffect("create", table.db or default_db, table.name, columns=names,
                       if_not_exists=bool(node.args.get("exists")), fractions=fractions)


def _fraction(col: Any) -> int | None:
    """A TIME/DATETIME/TIMESTAMP column's fractional-second precision (None: another type)."""
    from sqlglot import exp

    kind = col.args.get("kind")
    if not isinstance(kind, exp.DataType) or kind.this not in (
            exp.DataType.Type.TIME, exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMP,
            exp.DataType.Type.TIMESTAMPTZ):
        return None
    params = kind.expressions
    try:
        return int(params[0].sql()) if params else 0
    except ValueError:
        return None


def _altered(node: Any, default_db: str | None) -> TableEffect:
    from sqlglot import exp

    table = node.this
    db, name = table.db or default_db, table.name
    added: list[AddedColumn] = []
    for action in node.args.get("actions") or []:
        if isinstance(action, exp.ColumnDef):
            added.append(_added(action))
        elif type(action).__name__ in _NO_ROW_CHANGE or (
                isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() in _KEY_KINDS):
            continue
        elif isinstance(action, exp.AlterColumn) and {k for k, v in action.args.items() if v is not None} <= {
                "this", "default", "drop"}:
            continue  # ALTER COLUMN c SET/DROP DEFAULT: later inserts carry their values
        else:
            return TableEffect("alter", db, name, other=type(action).__name__)
    return TableEffect("alter", db, name, added=added)


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
