"""What kind of statement a Query event holds, read from its leading tokens (pure).

The consumer treats a few statements the way a native replica does: DROP TABLE runs with IF EXISTS
semantics (slave_ddl_exec_mode=IDEMPOTENT), a created or altered event is then set DISABLE ON SLAVE,
and account statements follow `[replay] accounts`. sqlglot keeps these statements as opaque
commands, so a small lexer reads just enough of them: words, quoted identifiers and strings,
comments skipped, executable comments (`/*!50106 CREATE*/`, as mysqldump writes them) read as code.

Statements are lexed as text whose characters stand for the statement's bytes one to one
(`bytes.decode("latin1")`), so a slice of it, encoded back, is the exact bytes of that part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WORD, QUOTED, STRING, PUNCT = "word", "quoted", "string", "punct"
ANSI_QUOTES = 4  # the sql_mode bit: "x" is an identifier, not a string

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[0-9A-Za-z_$\x80-\U0010ffff]+")
_VERSIONED_COMMENT = re.compile(r"/\*M?!\d*")


@dataclass(frozen=True, slots=True)
class Token:
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


def _words(toks: list[Token], n: int) -> list[str]:
    return [t.upper for t in toks[:n]]


def is_drop_table(sql: str) -> bool:
    """DROP [TEMPORARY] TABLE[S] ...: what a native replica runs as DROP TABLE IF EXISTS."""
    w = _words(tokens(sql, limit=3), 3)
    if w[:1] != ["DROP"]:
        return False
    return w[1:2] in (["TABLE"], ["TABLES"]) or (w[1:2] == ["TEMPORARY"] and w[2:3] in (["TABLE"], ["TABLES"]))


def disabled_on_slave(sql: str, ansi_quotes: bool = False) -> str | None:
    """CREATE/ALTER EVENT rewritten to leave the event DISABLE ON SLAVE (None: not such a statement, or
    one that leaves the status alone).

    A native replica's copy of every event is SLAVESIDE_DISABLED: the leader's runs already replicate
    as rows. Replacing the statement's ENABLE/DISABLE clause (or adding one, before COMMENT or DO)
    disables the copy in the statement that creates it, before the follower's scheduler could run it."""
    toks = tokens(sql, ansi_quotes, limit=4096)
    if not toks or toks[0].upper not in ("CREATE", "ALTER"):
        return None
    creating = toks[0].upper == "CREATE"
    i = 1
    if creating and _words(toks[i:], 2) == ["OR", "REPLACE"]:
        i += 2
    if i < len(toks) and toks[i].upper == "DEFINER":
        i = _skip_user(toks, i + 1)
    if i >= len(toks) or toks[i].upper != "EVENT":
        return None
    i += 1
    if creating and _words(toks[i:], 3) == ["IF", "NOT", "EXISTS"]:
        i += 3
    name, i = _qualified_name(toks, i)
    if name is None:
        return None
    cut: list[tuple[int, int]] = []  # the leader's ENABLE/DISABLE clause
    insert_at = None
    while i < len(toks):
        word = toks[i].upper
        if word in ("DO", "COMMENT"):
            insert_at = toks[i].start
            break
        if word == "ENABLE":
            cut.append((toks[i].start, toks[i].end))
        elif word == "DISABLE":
            end = toks[i + 2].end if _words(toks[i + 1:], 2) == ["ON", "SLAVE"] else toks[i].end
            cut.append((toks[i].start, end))
        i += 1
    if cut:
        insert_at = cut[0][0]  # the clause's place
    elif not creating or insert_at is None:
        return None  # ALTER EVENT without ENABLE/DISABLE keeps the copy's status
    out, pos = [], 0
    for start, end in cut:
        out.append(sql[pos:start])
        pos = end
    out.append(sql[pos:])
    text = "".join(out)
    shift = sum(end - start for start, end in cut if start < insert_at)
    at = insert_at - shift
    return text[:at] + "DISABLE ON SLAVE" + ("" if cut else " ") + text[at:]


def _skip_user(toks: list[Token], i: int) -> int:
    """After DEFINER: `= user@host`, `= CURRENT_USER[()]`, `= role`; the index after it."""
    if i < len(toks) and toks[i].text == "=":
        i += 1
    if i < len(toks) and toks[i].upper in ("CURRENT_USER", "CURRENT_ROLE"):
        i += 1
        if _texts(toks[i:], 2) == ["(", ")"]:
            i += 2
        return i
    i += 1  # the user (or role) name
    if i < len(toks) and toks[i].text == "@":
        i += 2
    return i


def _texts(toks: list[Token], n: int) -> list[str]:
    return [t.text for t in toks[:n]]


def _qualified_name(toks: list[Token], i: int) -> tuple[slice | None, int]:
    if i >= len(toks) or toks[i].kind not in (WORD, QUOTED):
        return None, i
    start, end = toks[i].start, toks[i].end
    i += 1
    if i + 1 < len(toks) and toks[i].text == "." and toks[i + 1].kind in (WORD, QUOTED):
        end = toks[i + 1].end
        i += 2
    return slice(start, end), i


# Account statements: (leading words) -> what the status line calls them.
_ACCOUNT_VERBS: tuple[tuple[str, ...], ...] = (
    ("CREATE", "USER"), ("CREATE", "ROLE"), ("ALTER", "USER"), ("DROP", "USER"), ("DROP", "ROLE"),
    ("RENAME", "USER"), ("GRANT",), ("REVOKE",), ("SET", "PASSWORD"), ("SET", "DEFAULT", "ROLE"),
)


@dataclass(frozen=True)
class AccountStatement:
    """A statement that changes accounts; `verb` and `accounts` are what may be shown (never a password)."""

    verb: str
    accounts: tuple[str, ...]

    def describe(self) -> str:
        """`CREATE USER 'u'@'%'`: the verb and the accounts it names, nothing else of the statement."""
        return " ".join((self.verb, ", ".join(self.accounts))).strip()


def account_statement(sql: str, ansi_quotes: bool = False) -> AccountStatement | None:
    """Whether `sql` changes accounts (CREATE/ALTER/DROP/RENAME USER, roles, GRANT, REVOKE, SET PASSWORD)."""
    toks = tokens(sql, ansi_quotes, limit=256)
    words = _words(toks, 5)
    if words[:1] == ["CREATE"] and words[1:3] == ["OR", "REPLACE"]:
        words = words[:1] + words[3:]
    verb = next((v for v in _ACCOUNT_VERBS if tuple(words[:len(v)]) == v), None)
    if verb is None:
        return None
    return AccountStatement(" ".join(verb), tuple(dict.fromkeys(_accounts(toks, verb))))


# Where a list of accounts starts: right after the verb (USER/ROLE statements), or after one of these.
_LIST_AFTER = {("GRANT",): ("TO",), ("REVOKE",): ("FROM",), ("RENAME", "USER"): ("TO",),
               ("SET", "PASSWORD"): ("FOR",), ("SET", "DEFAULT", "ROLE"): ("FOR",)}


def _accounts(toks: list[Token], verb: tuple[str, ...]) -> list[str]:
    """The accounts a statement names, as 'user'@'host' (a bare name is 'name'@'%', a role 'name'):
    the names that open its account list and each one after a comma of that list."""
    names = (WORD, QUOTED, STRING)
    starts = _LIST_AFTER.get(verb, ())
    i = len(verb) + (2 if toks and toks[0].upper == "CREATE" and _texts(toks[1:], 1) == ["OR"] else 0)
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
            if _texts(toks[i + 1:], 1) == ["@"] and i + 2 < len(toks) and toks[i + 2].kind in names:
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


# The clear-text or hashed secrets an account statement may carry, for messages that must not show them.
_SECRET = re.compile(r"""(?is)\b(BY|PASSWORD|USING|AS)(\s*(\(\s*)?)('(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")""")


def redact(text: str) -> str:
    """`text` (a statement, or a server message quoting one) with every quoted value after BY, PASSWORD,
    USING or AS replaced by '<redacted>'."""
    return _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}'<redacted>'", text)
