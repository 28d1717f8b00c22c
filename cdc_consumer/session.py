"""The leader's session around a replayed statement (pure).

A native replica runs each Query event under the session values the event logged: sql_mode,
charsets and collations, time zone, lc_time_names, auto_increment_increment/offset, the
foreign-key/unique/CHECK flags and the others of `QuerySession`, and the statement's timestamp.
`leader_session` gives the SET statements that put the follower session there, and the ones that
bring it back to the consumer's own session (follower.SESSION_SQL) for the row batches after it.

What the event leaves out is set the way a native replica sets it: auto_increment 1/1, lc_time_names
en_US, the flags at their defaults (a flag appears in the event only when the leader's differs), the
time zone the server's global one. DDL always runs with autocommit on: some of it (EXCHANGE
PARTITION) waits forever on a lock of its own session's open read transaction otherwise.

Charsets and collations: a native replica sets its session's charset structs from the logged ids.
`SET` accepts any collation id for collation_connection/_server/_database, but character_set_client
only by the id of a charset's default collation (224, utf8mb4_unicode_ci, is refused: "Unknown
character set"), so the client is set by its charset's name, as mariadb-binlog prints it
(`Collation`, from the follower's information_schema: follower.MySqlFollower.collation). A charset no server accepts
as a client charset (ucs2, utf16, utf16le, utf32: not ASCII-compatible) cannot come from a real
client; should an event name one, the statement runs as utf8mb4 text (`client_charset`). A string
literal is read in the collation_connection in force when its statement is parsed: a leader's ucs2
or utf32 collation_connection makes `SET time_zone = '+00:00'` fail ("Unknown or incorrect time
zone"), so the one SET that enters the leader's session is parsed in the consumer's session, and
leaving it sets NAMES before any literal (follower.SESSION_SQL starts with SET NAMES).

A statement logged with context (INSERT_ID, LAST_INSERT_ID, RAND()'s seeds, user variables: the
session's last five fields, cdc_producer/context.py) runs after one more SET, as mariadb-binlog prints
it: `SET @@session.insert_id=.., @@session.last_insert_id=.., @@RAND_SEED1=.., @@RAND_SEED2=..,
@`name`:=..` (`context_sql`). It comes first, parsed in the consumer's utf8mb4 session (a variable's
name may not be ASCII; its string value is _charset X'hex' COLLATE `collation`, read the same in any
session). Nothing undoes it, as on a native replica: INSERT_ID is used by the statement, the rest is
read by the statement only; the user variables stay set, and the consumer's own guard variable
(@cdc_consumer, definitions.py) is set again by `leave` (it re-runs the consumer's session).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cdc_consumer.literals import quote_text
from cdc_stream.classify import ANSI_QUOTES
from cdc_stream.errors import DataError
from cdc_stream.events import QuerySession, UserVar
from cdc_stream.mysql import quote_ident

# Charsets a server refuses as character_set_client: their characters are not ASCII-compatible.
NOT_CLIENT_CHARSETS = frozenset({"ucs2", "utf16", "utf16le", "utf32"})
_COLLATION_VARIABLES = ("character_set_client", "collation_connection", "collation_server", "collation_database")


@dataclass(frozen=True)
class Collation:
    """A collation the follower knows: its id, name and charset (from its information_schema)."""

    id: int
    name: str
    charset: str


def client_charset(collation: Collation) -> str:
    """The charset a statement logged with this character_set_client is sent in."""
    return "utf8mb4" if collation.charset in NOT_CLIENT_CHARSETS else collation.charset


def collation_ids(s: QuerySession | None) -> dict[str, int]:
    """The collation ids the session logged, by variable (character_set_client is a collation id too;
    a user variable's string value's as "user variable @`name`")."""
    if s is None:
        return {}
    ids = {name: value for name in _COLLATION_VARIABLES if (value := getattr(s, name)) is not None}
    for var in s.user_vars:
        if var.collation is not None:
            ids[f"user variable @{quote_ident(var.name)}"] = var.collation
    return ids


@dataclass(frozen=True)
class SessionChange:
    """SET statements run before a statement, and those undoing them after it."""

    enter: list[str]
    leave: list[str]


def leader_session(s: QuerySession | None, mariadb: bool, drop_if_exists: bool, consumer_session: list[str],
                   collations: Mapping[int, Collation] | None = None) -> SessionChange:
    """The follower session for a statement the leader ran under `s` (None: not logged, e.g. a snapshot's
    DDL: only autocommit; its CREATE TABLE checks no rows). `drop_if_exists`: run it with sql_if_exists=1
    (MariaDB's IDEMPOTENT DROP TABLE).
    `consumer_session`: the statements that set the consumer's own session again, SET NAMES first.
    `collations`: the follower's collations, holding every id of `collation_ids(s)` (KeyError otherwise)."""
    assignments: list[tuple[str, str]] = [("autocommit", "1")]
    restore: list[str] = []  # variables set back to their global value afterwards
    if s is not None:
        if s.sql_mode is not None:
            assignments.append(("sql_mode", str(s.sql_mode)))
        assignments.append(("time_zone", quote_text(s.time_zone) if s.time_zone is not None else "@@global.time_zone"))
        for name in _COLLATION_VARIABLES:
            if (value := getattr(s, name)) is None:
                continue
            if name == "character_set_client":
                assignments.append((name, client_charset((collations or {})[value])))
            else:
                assignments.append((name, str(value)))
                if name != "collation_connection":  # SET NAMES sets that back
                    restore.append(name)
        assignments += [
            ("lc_time_names", str(s.lc_time_names or 0)),
            ("auto_increment_increment", str(s.auto_increment_increment or 1)),
            ("auto_increment_offset", str(s.auto_increment_offset or 1)),
            ("foreign_key_checks", _flag(s.foreign_key_checks, True)),
            ("unique_checks", _flag(s.unique_checks, True)),
            ("sql_auto_is_null", _flag(s.sql_auto_is_null, False)),
            ("explicit_defaults_for_timestamp", _flag(s.explicit_defaults_for_timestamp, False)),
        ]
        restore += ["lc_time_names", "auto_increment_increment", "auto_increment_offset", "foreign_key_checks",
                    "unique_checks", "sql_auto_is_null", "explicit_defaults_for_timestamp"]
        # MariaDB-only variables, some recent (sql_if_exists 10.5, system_versioning_insert_history
        # 10.11): set only when the leader's session had them away from their default. But
        # check_constraint_checks always: the consumer's own session has it off for rows
        # (follower.SESSION_SQL), which `consumer_session` sets again after the statement.
        if mariadb:
            assignments.append(("check_constraint_checks", _flag(s.check_constraint_checks, True)))
            for name, value in (("sql_if_exists", bool(s.sql_if_exists)),
                                ("system_versioning_insert_history", bool(s.system_versioning_insert_history))):
                if value:
                    assignments.append((name, "1"))
                    restore.append(name)
        if s.timestamp_us is not None:
            seconds, micros = divmod(s.timestamp_us, 1_000_000)
            assignments.append(("timestamp", f"{seconds}.{micros:06d}"))
            restore.append("timestamp")
    if drop_if_exists and mariadb and "sql_if_exists" not in restore:
        assignments.append(("sql_if_exists", "1"))
        restore.append("sql_if_exists")
    enter = context_sql(s, collations or {}) if s is not None else []
    enter.append("SET " + ", ".join(f"@@session.{name}={value}" for name, value in assignments))
    leave = []
    if restore:
        leave.append("SET " + ", ".join(f"@@session.{name}=DEFAULT" for name in restore))
    leave += consumer_session
    leave.append("SET @@session.autocommit=0")
    return SessionChange(enter, leave)


def context_sql(s: QuerySession, collations: Mapping[int, Collation]) -> list[str]:
    """The SET of the statement's context (none when it was logged without): INSERT_ID, LAST_INSERT_ID,
    RAND()'s seeds and user variables, each value an exact literal. `collations` holds every id of
    `collation_ids(s)`; a value the producer cannot have written is a DataError."""
    assignments = []
    if s.insert_id is not None:
        assignments.append(f"@@session.insert_id={int(s.insert_id)}")
    if s.last_insert_id is not None:
        assignments.append(f"@@session.last_insert_id={int(s.last_insert_id)}")
    if s.rand_seed1 is not None and s.rand_seed2 is not None:
        assignments.append(f"@@RAND_SEED1={int(s.rand_seed1)}, @@RAND_SEED2={int(s.rand_seed2)}")
    assignments += [f"@{quote_ident(var.name)}:={user_var_literal(var, collations)}" for var in s.user_vars]
    return ["SET " + ", ".join(assignments)] if assignments else []


_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def user_var_literal(var: UserVar, collations: Mapping[int, Collation]) -> str:
    """A user variable's value as the literal that gives the variable the leader's type and value:
    a string in its charset and collation, a REAL as a double (an exponent makes the literal one),
    an INT signed or UNSIGNED, a DECIMAL with its scale (`5.` for a scale of 0: `5` would be an INT)."""
    if var.kind is None:
        return "NULL"
    text = var.value or ""
    try:
        if var.kind == "string":
            if var.collation is None:
                raise ValueError("no collation")
            collation = collations[var.collation]
            raw = base64.b64decode(text, validate=True)
            return f"_{collation.charset} X'{raw.hex()}' COLLATE {quote_ident(collation.name)}"
        if var.kind == "real":
            real = float(text)
            if not math.isfinite(real):
                raise ValueError("not a finite number")  # (no user variable holds one)
            number = repr(real)
            return number if "e" in number else number + "e0"
        if var.kind == "int":
            value = int(text)
            return f"CAST({value} AS UNSIGNED)" if var.unsigned else str(value)
        if _DECIMAL.fullmatch(text) is None:
            raise ValueError("not a decimal number")
        return text if "." in text else text + "."
    except (ValueError, binascii.Error) as e:
        raise DataError(f"the leader's user variable @{quote_ident(var.name)} cannot be set: its {var.kind} value "
                        f"{text[:40]!r} is not one cdc-producer writes ({e}); the topic was not written by "
                        "cdc-producer, or was altered") from None


def _flag(value: bool | None, default: bool) -> str:
    return "1" if (default if value is None else value) else "0"


def ansi_quotes(s: QuerySession | None) -> bool:
    """Whether the statement's sql_mode reads "x" as an identifier."""
    return s is not None and s.sql_mode is not None and bool(s.sql_mode & ANSI_QUOTES)
