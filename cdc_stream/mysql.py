"""Connecting to MySQL/MariaDB servers (leader and follower) with errors that name the fix."""

from __future__ import annotations

import threading
from typing import Any

import pymysql
from pymysql.constants import COMMAND, CR
from pymysql.cursors import Cursor

from cdc_stream.errors import ConfigError, SetupError, UnreachableError
from cdc_stream.profile import FollowerDatabase, LeaderDatabase


class SharedTlsConnection(pymysql.connections.Connection):
    """A PyMySQL connection whose default TLS context is built once per process, and only
    when a server offers TLS.

    Without TLS options PyMySQL connects in PREFERRED mode: TLS when the server offers it,
    with a context that verifies nothing (no CA given: CERT_NONE, no host check). It builds
    that context in every connection's constructor, which loads the system's CA bundle
    even for a server without TLS (bench/README.md, "Measurements behind the code"). Here the
    very same context (PyMySQL's own `_create_ssl_ctx({})`) is built on the first TLS handshake
    and shared by every later connection of the process (the leader's, the binlog stream's two,
    the follower's).
    Explicit TLS options (a dict or an SSLContext) go through PyMySQL unchanged."""

    _preferred: Any = None
    _lock = threading.Lock()
    _LAZY = object()

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if sslp != {}:
            return super()._create_ssl_ctx(sslp)  # type: ignore[misc]  # PyMySQL's, untyped in its stubs
        return SharedTlsConnection._LAZY

    @property
    def ctx(self) -> Any:
        ctx = self.__dict__["_ctx"]  # AttributeError when PyMySQL never set one (TLS disabled), as before
        if ctx is SharedTlsConnection._LAZY:
            with SharedTlsConnection._lock:
                if SharedTlsConnection._preferred is None:
                    SharedTlsConnection._preferred = super()._create_ssl_ctx({})  # type: ignore[misc]
            ctx = self.__dict__["_ctx"] = SharedTlsConnection._preferred
        return ctx

    @ctx.setter
    def ctx(self, value: Any) -> None:
        self.__dict__["_ctx"] = value


# Pipelined queries: the follower's writer sends a round trip before the previous one's answer has arrived, so
# the server finds the next statement waiting when it ends one instead of idling while an answer travels and
# the next query is sent (bench/README.md, issue 26). PyMySQL reads an answer only right after sending its
# query; these three use its private `_execute_command`, `_read_query_result`, `_next_seq_id` and `_result`
# (listed in cdc_producer/library_patches.py) to split the two. Answers come in the order the queries were
# sent; each starts at the sequence number send_query returns.


def send_query(conn: pymysql.Connection[Any], sql: str) -> int:
    """Send one COM_QUERY without reading its answer; returns the sequence number its answer starts at
    (1, or more when the query took several packets)."""
    conn._execute_command(COMMAND.COM_QUERY, sql)  # type: ignore[attr-defined]
    return int(conn._next_seq_id)  # type: ignore[attr-defined]


def read_result(conn: pymysql.Connection[Any], seq: int | None = None) -> int:
    """Read the next result of the oldest query sent and not read (`seq`: where its answer starts, for its
    first result): the rows it affected (matched, with CLIENT.FOUND_ROWS). A server error raises."""
    if not conn.open:  # closed by PyMySQL when the connection was lost
        raise pymysql.err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
    if seq is not None:
        conn._next_seq_id = seq  # type: ignore[attr-defined]
    conn._affected_rows = conn._read_query_result()  # type: ignore[attr-defined]
    return int(conn._affected_rows)  # type: ignore[attr-defined]


def more_results(conn: pymysql.Connection[Any]) -> bool:
    """Whether the query whose result was just read has another (a multi-statement round trip)."""
    result = conn._result  # type: ignore[attr-defined]
    return bool(result is not None and result.has_next)


def quote_ident(name: str) -> str:
    """`name` with embedded backticks doubled: safe for any identifier."""
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """`db`.`table`."""
    return f"{quote_ident(db)}.{quote_ident(table)}"


def one_row(cur: Cursor) -> tuple[Any, ...]:
    """The row a statement that always returns one (SELECT @@var, SHOW CREATE TABLE...) returned."""
    row = cur.fetchone()
    if row is None:
        raise UnreachableError("the server answered a statement that returns one row with no row; check the server")
    return tuple(row)


def connect(db: LeaderDatabase | FollowerDatabase, role: str, **kwargs: Any) -> pymysql.Connection[Any]:
    """A pymysql connection, or a CdcError naming the server and the fix."""
    try:
        return SharedTlsConnection(
            host=db.ip_or_host, port=db.port, user=db.user, password=db.password,
            connect_timeout=db.connect_timeout, charset="utf8mb4", **kwargs,
        )
    except pymysql.err.OperationalError as e:
        raise connection_error(e, db, role) from None


def connection_error(e: pymysql.err.MySQLError, db: LeaderDatabase | FollowerDatabase, role: str) -> Exception:
    """Translate a connection failure into a one-line error with the fix."""
    code = e.args[0] if e.args else 0
    where = f"{db.ip_or_host}:{db.port}"
    if code == 1045:
        return ConfigError(
            f"the {role} at {where} refused user '{db.user}' (access denied): check [database] user and password")
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
