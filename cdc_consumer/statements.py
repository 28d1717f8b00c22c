"""Statements the consumer rewrites the way a native replica runs them (pure).

A created or altered event is set DISABLE ON SLAVE (`disabled_on_slave`); messages quoting an account
statement lose its secrets (`redact`). What a statement is (DROP TABLE, CREATE/ALTER EVENT, an account
statement) is cdc_stream.classify's to say; this module only finds its way in a statement it was told
to rewrite, with classify's lexer.

Statements are lexed as text whose characters stand for the statement's bytes one to one
(`bytes.decode("latin1")`), so a slice of it, encoded back, is the exact bytes of that part.
"""

from __future__ import annotations

import re

from cdc_stream.classify import QUOTED, WORD, Token, skip_user, tokens, words


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
    if creating and words(toks[i:], 2) == ["OR", "REPLACE"]:
        i += 2
    if i < len(toks) and toks[i].upper == "DEFINER":
        i = skip_user(toks, i + 1)
    if i >= len(toks) or toks[i].upper != "EVENT":
        return None
    i += 1
    if creating and words(toks[i:], 3) == ["IF", "NOT", "EXISTS"]:
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
            end = toks[i + 2].end if words(toks[i + 1:], 2) == ["ON", "SLAVE"] else toks[i].end
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


def _qualified_name(toks: list[Token], i: int) -> tuple[slice | None, int]:
    if i >= len(toks) or toks[i].kind not in (WORD, QUOTED):
        return None, i
    start, end = toks[i].start, toks[i].end
    i += 1
    if i + 1 < len(toks) and toks[i].text == "." and toks[i + 1].kind in (WORD, QUOTED):
        end = toks[i + 1].end
        i += 2
    return slice(start, end), i


# The clear-text or hashed secrets an account statement may carry, for messages that must not show them.
_SECRET = re.compile(r"""(?is)\b(BY|PASSWORD|USING|AS)(\s*(\(\s*)?)('(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")""")


def redact(text: str) -> str:
    """`text` (a statement, or a server message quoting one) with every quoted value after BY, PASSWORD,
    USING or AS replaced by '<redacted>'."""
    return _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}'<redacted>'", text)
