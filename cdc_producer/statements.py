"""A Query event -> what its change event carries: the leader session, the error code, the exact statement.

A native replica runs each logged statement under the session values its Query event carries
(mariadb-binlog prints them as SET statements before it): sql_mode, charsets and collations,
time zone, lc_time_names, auto_increment_increment/offset, the flags2 switches and the
statement's time. `query_session` maps what python-mysql-replication reads of them to the
contract's QuerySession. `statement_text` gives the statement as text when its bytes decode
exactly in the session's character_set_client (charsets.exact_text), else a readable form plus
the exact bytes; account statements lose their clear-text passwords first (accounts.py).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from cdc_producer.accounts import hide_passwords
from cdc_producer.charsets import charset_of_collation_id, exact_text
from cdc_stream.events import QuerySession

# Query-event flags2 bits (MariaDB 10.11 sql/sql_priv.h OPTION_*, as logged; MySQL logs the
# first four only). Checks appear when off, the others when on (QuerySession's convention).
_AUTO_IS_NULL = 1 << 14
_NO_CHECK_CONSTRAINT_CHECKS = 1 << 15
_EXPLICIT_DEFAULTS_FOR_TIMESTAMP = 1 << 24
_NO_FOREIGN_KEY_CHECKS = 1 << 26
_RELAXED_UNIQUE_CHECKS = 1 << 27
_IF_EXISTS = 1 << 28
_INSERT_HISTORY = 1 << 30
_MYSQL_EXPLICIT_DEFAULTS_ON = 2  # MySQL's Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP: 0 unset, 1 off, 2 on


def _off(flags2: int | None, bit: int) -> bool | None:
    return False if flags2 is not None and flags2 & bit else None


def _on(flags2: int | None, bit: int) -> bool | None:
    return True if flags2 is not None and flags2 & bit else None


def query_session(ev: Any) -> QuerySession:
    """The QuerySession of a python-mysql-replication QueryEvent (attributes present only when logged)."""
    flags2 = getattr(ev, "flags2", None)
    time_zone = getattr(ev, "time_zone", None)
    micro = getattr(ev, "hrnow", None)  # MariaDB: the statement's microseconds when it used them
    if micro is None:
        micro = getattr(ev, "microseconds", None)  # MySQL's Q_MICROSECONDS
    explicit_defaults = _on(flags2, _EXPLICIT_DEFAULTS_FOR_TIMESTAMP)
    if getattr(ev, "explicit_defaults_ts", None) == _MYSQL_EXPLICIT_DEFAULTS_ON:
        explicit_defaults = True
    return QuerySession(
        sql_mode=getattr(ev, "sql_mode", None),
        character_set_client=getattr(ev, "character_set_client", None),
        collation_connection=getattr(ev, "collation_connection", None),
        collation_server=getattr(ev, "collation_server", None),
        collation_database=getattr(ev, "charset_database_number", None),
        time_zone=time_zone.decode("ascii", "replace") if isinstance(time_zone, bytes) else time_zone,
        lc_time_names=getattr(ev, "lc_time_names_number", None),
        auto_increment_increment=getattr(ev, "auto_increment_increment", None),
        auto_increment_offset=getattr(ev, "auto_increment_offset", None),
        foreign_key_checks=_off(flags2, _NO_FOREIGN_KEY_CHECKS),
        unique_checks=_off(flags2, _RELAXED_UNIQUE_CHECKS),
        check_constraint_checks=_off(flags2, _NO_CHECK_CONSTRAINT_CHECKS),
        sql_auto_is_null=_on(flags2, _AUTO_IS_NULL),
        sql_if_exists=_on(flags2, _IF_EXISTS),
        explicit_defaults_for_timestamp=explicit_defaults,
        system_versioning_insert_history=_on(flags2, _INSERT_HISTORY),
        timestamp_us=ev.timestamp * 1_000_000 + (micro or 0),
    )


@dataclass(frozen=True, slots=True)
class StatementText:
    """A statement as the topic carries it: `text` (exact unless `exact_b64` is set: then readable
    only, and `exact_b64` holds the exact bytes, base64)."""

    text: str
    exact_b64: str | None


def statement_text(raw: bytes, session: QuerySession, dbms: str = "mariadb") -> StatementText:
    """The statement's text and, when the text is not exact, its bytes; clear-text passwords hidden."""
    raw = hide_passwords(raw, session.sql_mode or 0)
    text = exact_text(raw, charset_of_collation_id(session.character_set_client, dbms))
    if text is not None:
        return StatementText(text, None)
    return StatementText(raw.decode("utf-8", "replace"), base64.b64encode(raw).decode("ascii"))
