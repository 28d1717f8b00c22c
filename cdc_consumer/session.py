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
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_consumer.literals import quote_text
from cdc_consumer.statements import ANSI_QUOTES
from cdc_stream.events import QuerySession


@dataclass(frozen=True)
class SessionChange:
    """SET statements run before a statement, and those undoing them after it."""

    enter: list[str]
    leave: list[str]


def leader_session(s: QuerySession | None, mariadb: bool, drop_if_exists: bool, consumer_session: list[str]
                   ) -> SessionChange:
    """The follower session for a statement the leader ran under `s` (None: not logged, e.g. a snapshot's
    DDL: only autocommit). `drop_if_exists`: run it with sql_if_exists=1 (MariaDB's IDEMPOTENT DROP TABLE).
    `consumer_session`: the statements that set the consumer's own session again."""
    assignments: list[tuple[str, str]] = [("autocommit", "1")]
    restore: list[str] = []  # variables set back to their global value afterwards
    if s is not None:
        if s.sql_mode is not None:
            assignments.append(("sql_mode", str(s.sql_mode)))
        for name in ("character_set_client", "collation_connection", "collation_server", "collation_database"):
            value = getattr(s, name)
            if value is not None:
                assignments.append((name, str(value)))
                if name in ("collation_server", "collation_database"):
                    restore.append(name)
        assignments.append(("time_zone", quote_text(s.time_zone) if s.time_zone is not None else "@@global.time_zone"))
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
        # 10.11): set only when the leader's session had them away from their default.
        if mariadb:
            for name, value in (("check_constraint_checks", s.check_constraint_checks is False),
                                ("sql_if_exists", bool(s.sql_if_exists)),
                                ("system_versioning_insert_history", bool(s.system_versioning_insert_history))):
                if value:
                    assignments.append((name, "0" if name == "check_constraint_checks" else "1"))
                    restore.append(name)
        if s.timestamp_us is not None:
            seconds, micros = divmod(s.timestamp_us, 1_000_000)
            assignments.append(("timestamp", f"{seconds}.{micros:06d}"))
            restore.append("timestamp")
    if drop_if_exists and mariadb and "sql_if_exists" not in restore:
        assignments.append(("sql_if_exists", "1"))
        restore.append("sql_if_exists")
    enter = ["SET " + ", ".join(f"@@session.{name}={value}" for name, value in assignments)]
    leave = []
    if restore:
        leave.append("SET " + ", ".join(f"@@session.{name}=DEFAULT" for name in restore))
    leave += consumer_session
    leave.append("SET @@session.autocommit=0")
    return SessionChange(enter, leave)


def _flag(value: bool | None, default: bool) -> str:
    return "1" if (default if value is None else value) else "0"


def ansi_quotes(s: QuerySession | None) -> bool:
    """Whether the statement's sql_mode reads "x" as an identifier."""
    return s is not None and s.sql_mode is not None and bool(s.sql_mode & ANSI_QUOTES)
