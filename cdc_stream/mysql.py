"""Connecting to MySQL/MariaDB servers (leader and follower) with errors that name the fix."""

from __future__ import annotations

import pymysql

from cdc_stream.errors import ConfigError, SetupError, UnreachableError
from cdc_stream.profile import FollowerDatabase, LeaderDatabase


def connect(db: LeaderDatabase | FollowerDatabase, role: str, **kwargs) -> pymysql.Connection:
    """A pymysql connection, or a CdcError naming the server and the fix."""
    try:
        return pymysql.connect(
            host=db.ip_or_host, port=db.port, user=db.user, password=db.password,
            connect_timeout=db.connect_timeout, charset="utf8mb4", **kwargs,
        )
    except pymysql.err.OperationalError as e:
        raise connection_error(e, db, role) from None


def connection_error(e: pymysql.err.MySQLError, db, role: str) -> Exception:
    """Translate a connection failure into a one-line error with the fix."""
    code = e.args[0] if e.args else 0
    where = f"{db.ip_or_host}:{db.port}"
    if code == 1045:
        return ConfigError(f"the {role} at {where} refused user '{db.user}' (access denied): check [database] user and password")
    if code == 1044 or code == 1227:
        return SetupError(f"the {role} at {where} refused user '{db.user}': {e.args[1]}")
    reason = str(e.args[1]) if len(e.args) > 1 else str(e)
    if "Connection refused" in reason:
        reason = "connection refused"
    elif "timed out" in reason:
        reason = "connection timed out"
    return UnreachableError(
        f"cannot reach the {role} at {where}: {reason}; check that it is running and [database] ip_or_host/port"
    )
