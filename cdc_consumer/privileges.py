"""What the consumer's follower user needs for each kind of replicated statement (`cdc-consumer --check`).

A managed MySQL/MariaDB service gives its admin user DML and DDL privileges, never SUPER, SET USER or
BINLOG REPLAY. Such a user applies rows as SQL; triggers and stored functions then need the
follower's log_bin_trust_function_creators (error 1419 otherwise, when the follower logs binlogs), a
DEFINER naming another account needs SET USER (error 1227: `[replay] definer = "consumer"`), and each
kind of object its own privilege. `needs` says it before anything is applied (pure); `user_grants`
reads what the user has.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from cdc_consumer import checkpoint

# What each kind of replicated statement needs, in the order they are listed.
FEATURES: tuple[tuple[str, str], ...] = (
    ("SELECT", "rows"), ("INSERT", "rows"), ("UPDATE", "rows"), ("DELETE", "rows"),
    ("CREATE", "CREATE DATABASE/TABLE"), ("DROP", "DROP, TRUNCATE"), ("ALTER", "ALTER TABLE"),
    ("INDEX", "CREATE/DROP INDEX"),
    ("TRIGGER", "CREATE/DROP TRIGGER"),
    ("CREATE ROUTINE", "CREATE PROCEDURE/FUNCTION"),
    ("ALTER ROUTINE", "ALTER/DROP PROCEDURE/FUNCTION"),
    ("EVENT", "CREATE/ALTER/DROP EVENT"),
    ("CREATE VIEW", "CREATE VIEW"),
)
SUPERS = ("SUPER", "SET USER")  # either lets a DEFINER name another account


@dataclass(frozen=True)
class UserGrants:
    """The consumer's user on the follower: its privileges (global, or on some database) and the settings
    that decide what it may create."""

    user: str  # 'name'@'host'
    privileges: frozenset[str]  # upper case, e.g. "TRIGGER", "SUPER"
    log_bin: bool
    trust_function_creators: bool

    def has(self, privilege: str) -> bool:
        return "ALL PRIVILEGES" in self.privileges or privilege in self.privileges


def user_grants(conn: pymysql.Connection) -> UserGrants:
    """The current user's privileges (granted to the account itself: not through a role) and settings."""
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER(), @@log_bin, @@log_bin_trust_function_creators")
        row = cur.fetchone()
        assert row is not None
        user, log_bin, trust = row
        name, _, host = str(user).rpartition("@")
        account = f"'{name}'@'{host}'"
        # Global privileges, or on some database (not the checkpoint's, which every consumer has). A user
        # who may read mysql.* sees every account's rows: the GRANTEE says whose.
        cur.execute("SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s UNION "
                    "SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = %s "
                    "AND TABLE_SCHEMA <> %s", (account, account, checkpoint.SCHEMA))
        privileges = frozenset(str(p).upper() for (p,) in cur.fetchall())
    return UserGrants(account, privileges, bool(log_bin), bool(trust))


def needs(g: UserGrants, definer: str) -> list[str]:
    """What the user lacks, one line each, naming the statements it would stop at and the fix ([] = nothing).

    `definer`: the profile's [replay] definer ("leader" | "consumer")."""
    out = []
    supers = any(g.has(p) for p in SUPERS)
    if g.log_bin and not g.trust_function_creators and not g.has("SUPER"):
        out.append("CREATE TRIGGER and CREATE FUNCTION will fail (error 1419: the follower logs binlogs and "
                   f"{g.user} lacks SUPER): SET GLOBAL log_bin_trust_function_creators = ON on the follower (and in "
                   "its my.cnf or the service's parameter group)")
    if definer == "leader" and not supers:
        out.append(f"views, triggers, events and routines whose DEFINER is another account will fail (error 1227: "
                   f'{g.user} lacks SET USER and SUPER): set [replay] definer = "consumer", or GRANT SET USER ON *.* '
                   f"TO {g.user}")
    missing = [(p, what) for p, what in FEATURES if not g.has(p)]
    if missing:
        out.append(f"{g.user} lacks " + ", ".join(f"{p} (for {what})" for p, what in missing)
                   + f": GRANT {', '.join(p for p, _ in missing)} ON *.* TO {g.user} if the leader uses them")
    return out
