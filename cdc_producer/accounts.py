"""Account statements without clear-text passwords: what the producer puts on the topic instead.

MariaDB logs `CREATE USER u IDENTIFIED BY 'secret'` (and ALTER USER, GRANT ... IDENTIFIED BY,
`IDENTIFIED VIA plugin USING PASSWORD('secret')`) with the password in clear text; a topic must
never carry it. `hide_passwords` rewrites such a statement, before it becomes an event:

- `IDENTIFIED BY 'pw'` becomes `IDENTIFIED BY PASSWORD '<hash>'`, the mysql_native_password hash
  the leader stored (`'*' + SHA1(SHA1(pw))`, upper-case hex): a follower running it gets the same
  account as a native replica running the original.
- `USING PASSWORD('pw')` (or `AS PASSWORD('pw')`) of the plugin mysql_native_password becomes
  `USING '<hash>'`, the same thing.
- `PASSWORD('pw')` of any other plugin (ed25519, ...) cannot be turned into what that plugin
  stores here: it becomes `PASSWORD(/* password removed by cdc-producer */)`, which no server
  accepts (PASSWORD() needs an argument), so a follower never creates the account with another
  password; the consumer recognises REMOVED_PASSWORD and says why it does not apply it.

SET PASSWORD needs nothing: MariaDB logs it with the hash already (`SET PASSWORD FOR u='*...'`),
and MySQL 5.7+/8 log every account statement with the stored hash (`IDENTIFIED WITH ... AS ...`).
The statement is lexed as bytes (string literals, quoted identifiers and comments are skipped),
so the rest of it is left exactly as the leader logged it.
"""

from __future__ import annotations

import hashlib
import re

from cdc_stream.classify import account_verb
from cdc_stream.events import REMOVED_PASSWORD

__all__ = ["REMOVED_PASSWORD", "hide_passwords", "is_account_statement", "native_password_hash"]

SQL_MODE_ANSI_QUOTES = 1 << 2
SQL_MODE_NO_BACKSLASH_ESCAPES = 1 << 20
NATIVE_PLUGIN = b"mysql_native_password"

_MAY_CARRY_PASSWORDS = ("CREATE USER", "ALTER USER", "GRANT")  # what MariaDB logs with clear-text passwords
_WORD = re.compile(rb"[A-Za-z0-9_$\x80-\xff]+")
_SPACE = re.compile(rb"\s+")
_ESCAPES = {ord("0"): b"\0", ord("b"): b"\b", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("Z"): b"\x1a",
            ord("%"): b"\\%", ord("_"): b"\\_"}


def native_password_hash(password: bytes) -> str:
    """The mysql_native_password hash of a password, as the server stores and prints it."""
    return "*" + hashlib.sha1(hashlib.sha1(password).digest()).hexdigest().upper()


def is_account_statement(statement: bytes) -> bool:
    """Whether the statement is CREATE [OR REPLACE] USER, ALTER USER or GRANT (as cdc_stream.classify reads it)."""
    return account_verb(statement.decode("latin1")) in _MAY_CARRY_PASSWORDS


class _Token:
    __slots__ = ("end", "kind", "start", "value")

    def __init__(self, kind: str, start: int, end: int, value: bytes = b""):
        self.kind, self.start, self.end, self.value = kind, start, end, value  # value: a string's content


def _string(sql: bytes, pos: int, quote: int, backslash_escapes: bool) -> _Token:
    """The string literal starting at sql[pos] (its quote character), unescaped as the server does."""
    out = bytearray()
    i = pos + 1
    while i < len(sql):
        c = sql[i]
        if c == quote:
            if i + 1 < len(sql) and sql[i + 1] == quote:  # '' inside '...'
                out.append(quote)
                i += 2
                continue
            return _Token("string", pos, i + 1, bytes(out))
        if c == ord("\\") and backslash_escapes and i + 1 < len(sql):
            nxt = sql[i + 1]
            out += _ESCAPES.get(nxt, bytes([nxt]))
            i += 2
            continue
        out.append(c)
        i += 1
    return _Token("other", pos, len(sql))  # unterminated: the server would not have logged it


def _tokens(sql: bytes, sql_mode: int) -> list[_Token]:
    backslash_escapes = not sql_mode & SQL_MODE_NO_BACKSLASH_ESCAPES
    double_quoted_strings = not sql_mode & SQL_MODE_ANSI_QUOTES
    tokens: list[_Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if (space := _SPACE.match(sql, i)) is not None:
            i = space.end()
        elif sql.startswith(b"/*", i):
            end = sql.find(b"*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == ord("#") or (sql.startswith(b"--", i) and (i + 2 >= n or sql[i + 2] in b" \t\r\n")):
            end = sql.find(b"\n", i)
            i = n if end < 0 else end + 1
        elif c == ord("'") or (c == ord('"') and double_quoted_strings):
            token = _string(sql, i, c, backslash_escapes)
            tokens.append(token)
            i = token.end
        elif c == ord("`") or c == ord('"'):  # a quoted identifier
            end = i + 1
            while True:
                end = sql.find(bytes([c]), end)
                if end < 0 or not sql.startswith(bytes([c]) * 2, end):
                    break
                end += 2
            end = n if end < 0 else end + 1
            tokens.append(_Token("ident", i, end, sql[i + 1:end - 1]))
            i = end
        elif (word := _WORD.match(sql, i)) is not None:
            tokens.append(_Token("word", i, word.end(), word.group().upper()))
            i = word.end()
        else:
            tokens.append(_Token("other", i, i + 1, bytes([c])))
            i += 1
    return tokens


def hide_passwords(statement: bytes, sql_mode: int = 0) -> bytes:
    """The statement with every clear-text password replaced (see the module docstring); the
    statement itself when it is not an account statement or holds no clear-text password.

    `sql_mode` is the leader session's (the Query event's): it says whether backslashes escape
    and whether "..." is a string or an identifier."""
    if not is_account_statement(statement):
        return statement
    tokens = _tokens(statement, sql_mode)
    edits: list[tuple[int, int, bytes]] = []  # (start, end, replacement)
    plugin = b""
    for i, tok in enumerate(tokens):
        if tok.kind != "word":
            continue
        if tok.value in (b"VIA", b"WITH", b"OR") and i + 1 < len(tokens):
            plugin = tokens[i + 1].value.lower() if tokens[i + 1].kind in ("word", "ident", "string") else b""
        nxt = tokens[i + 1:i + 5]
        words = [t.value if t.kind == "word" else None for t in nxt]
        if tok.value == b"IDENTIFIED" and words[:1] == [b"BY"] and len(nxt) > 1 and nxt[1].kind == "string":
            # IDENTIFIED BY 'pw' (IDENTIFIED BY PASSWORD '*hash' has the word PASSWORD there instead)
            hashed = native_password_hash(nxt[1].value).encode()
            edits.append((nxt[0].start, nxt[1].end, b"BY PASSWORD '" + hashed + b"'"))
        elif (tok.value in (b"USING", b"AS") and words[:1] == [b"PASSWORD"] and len(nxt) > 3
              and nxt[1].value == b"(" and nxt[2].kind == "string" and nxt[3].value == b")"):
            if plugin == NATIVE_PLUGIN:
                hashed = native_password_hash(nxt[2].value).encode()
                edits.append((nxt[0].start, nxt[3].end, b"'" + hashed + b"'"))
            else:
                edits.append((nxt[2].start, nxt[2].end, REMOVED_PASSWORD))
    if not edits:
        return statement
    out = bytearray()
    pos = 0
    for start, end, replacement in edits:
        out += statement[pos:start] + replacement
        pos = end
    out += statement[pos:]
    return bytes(out)
