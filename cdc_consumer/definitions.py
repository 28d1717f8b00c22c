"""Stored objects' DDL for a follower user without SUPER: trigger guards and definers (pure).

On the SQL row path the consumer's own INSERT/UPDATE/DELETE would fire the follower's triggers,
although the leader's row events already hold what its triggers did. `guard_trigger` wraps a
replicated trigger's body so that it does nothing in the consumer's sessions:

    CREATE ... TRIGGER t BEFORE INSERT ON x FOR EACH ROW <body>
 -> CREATE ... TRIGGER t BEFORE INSERT ON x FOR EACH ROW IF @cdc_consumer IS NULL THEN <body>; END IF

Every consumer session sets `@cdc_consumer = 1` (follower.SESSION_SQL): a user variable, so no
privilege is needed, and every other session (the follower's applications) runs the trigger as the
leader's. A body may be any single statement: `BEGIN ... END`, a labelled block, a compound IF.

`with_definer` replaces the DEFINER clause of CREATE/ALTER VIEW, TRIGGER, EVENT, PROCEDURE, FUNCTION
and PACKAGE: DEFINER=`root`@`localhost` needs SET USER (or SUPER) unless it is the user's own
account, which managed services do not grant (`[replay] definer = "consumer"`).

Statements are handled as text whose characters stand for their bytes one to one (as in
cdc_stream/classify.py): only ASCII is inserted, the rest of the bytes is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_stream.classify import QUOTED, WORD, tokens
from cdc_stream.classify import skip_user as _skip_user
from cdc_stream.classify import words as _words

GUARD_VARIABLE = "@cdc_consumer"
SESSION_MARK = f"SET {GUARD_VARIABLE} = 1"  # run by every consumer session (follower.SESSION_SQL)
SESSION_UNMARK = f"SET {GUARD_VARIABLE} = NULL"  # around a replayed statement (its triggers fire as on a replica)
GUARD_PREFIX = f"IF {GUARD_VARIABLE} IS NULL THEN "
GUARD_SUFFIX = "; END IF"
CONSUMER_DEFINER = "DEFINER=CURRENT_USER"
OBJECT_KINDS = ("VIEW", "TRIGGER", "EVENT", "PROCEDURE", "FUNCTION", "PACKAGE")
_HEADER_TOKENS = 64  # more than any header up to the kind keyword holds


@dataclass(frozen=True)
class StoredObject:
    """The header of a CREATE/ALTER statement of a stored object."""

    verb: str  # CREATE | ALTER
    kind: str  # one of OBJECT_KINDS
    definer: tuple[int, int] | None  # where the DEFINER clause is in the text (None: it has none)
    after_kind: int  # the index of the token after the kind keyword

    def definer_text(self, sql: str) -> str:
        """The DEFINER clause as written ('' without one)."""
        return sql[self.definer[0]:self.definer[1]] if self.definer else ""


def stored_object(sql: str, ansi_quotes: bool = False) -> StoredObject | None:
    """What CREATE/ALTER statement of a stored object `sql` is (None: another statement).

    The header is `CREATE [OR REPLACE] [ALGORITHM=x] [DEFINER=user] [SQL SECURITY x] [AGGREGATE] kind`
    (executable comments read as code, as mysqldump writes `/*!50017 DEFINER=...*/`)."""
    toks = tokens(sql, ansi_quotes, limit=_HEADER_TOKENS)
    if not toks or toks[0].upper not in ("CREATE", "ALTER"):
        return None
    i, definer = 1, None
    if toks[0].upper == "CREATE" and _words(toks[i:], 2) == ["OR", "REPLACE"]:
        i += 2
    while i < len(toks):
        word = toks[i].upper
        if word == "ALGORITHM":
            i += 3 if i + 1 < len(toks) and toks[i + 1].text == "=" else 2
        elif word == "DEFINER":
            end = _skip_user(toks, i + 1)
            if end > len(toks):
                return None
            definer = (toks[i].start, toks[end - 1].end)
            i = end
        elif word == "SQL" and _words(toks[i + 1:], 1) == ["SECURITY"]:
            i += 3
        elif word in ("AGGREGATE", "NONEDITIONABLE", "EDITIONABLE"):
            i += 1
        elif word in OBJECT_KINDS:
            return StoredObject(toks[0].upper, word, definer, i + 1)
        else:
            return None
    return None


def with_definer(sql: str, definer: str = CONSUMER_DEFINER, ansi_quotes: bool = False) -> str:
    """`sql` with its DEFINER clause replaced by `definer` (unchanged: not a stored object's DDL, or no
    DEFINER clause: the server then uses the current user)."""
    obj = stored_object(sql, ansi_quotes)
    if obj is None or obj.definer is None:
        return sql
    start, end = obj.definer
    return sql[:start] + definer + sql[end:]


def guard_trigger(sql: str, ansi_quotes: bool = False) -> str | None:
    """CREATE TRIGGER with its body wrapped in `IF @cdc_consumer IS NULL THEN ... END IF` (None: not a
    CREATE TRIGGER, or one already guarded).

    The body is what follows `FOR EACH ROW [FOLLOWS|PRECEDES name]`, up to its last token: a trailing
    `;`, comment or the end of an executable comment stays after the inserted `END IF`."""
    obj = stored_object(sql, ansi_quotes)
    if obj is None or obj.verb != "CREATE" or obj.kind != "TRIGGER":
        return None
    toks, i = tokens(sql, ansi_quotes), obj.after_kind  # the whole statement: the body ends at its last token
    while i + 2 < len(toks) and _words(toks[i:], 3) != ["FOR", "EACH", "ROW"]:
        i += 1
    i += 3
    if _words(toks[i:], 1) in (["FOLLOWS"], ["PRECEDES"]):
        i += 2
        if i < len(toks) and toks[i].text == "." and i + 1 < len(toks) and toks[i + 1].kind in (WORD, QUOTED):
            i += 2  # a qualified name
    last = len(toks) - 1
    while last >= i and toks[last].text == ";":
        last -= 1
    if last < i:
        return None  # no body: let the server say what is wrong
    start, end = toks[i].start, toks[last].end
    if is_guarded(sql[start:end]):
        return None
    return sql[:start] + GUARD_PREFIX + sql[start:end] + GUARD_SUFFIX + sql[end:]


def is_guarded(body: str) -> bool:
    """Whether a trigger body (information_schema.TRIGGERS.ACTION_STATEMENT, which keeps a trailing
    comment) is guard_trigger's."""
    if not body.lstrip().startswith(GUARD_PREFIX):
        return False
    toks = tokens(body)
    return len(toks) > 2 and [t.text for t in toks[-3:]] == [";", "END", "IF"]


def guard_fix(triggers: str) -> str:
    """How to guard triggers that exist on the follower without the guard."""
    return (f"recreate {triggers} on the follower with the body wrapped as `{GUARD_PREFIX}<body>{GUARD_SUFFIX}` "
            "(as cdc-consumer writes the triggers it replays with [replay] triggers = \"guarded\", the default "
            "when rows take SQL)")
