"""Connecting to MySQL/MariaDB servers (leader and follower) with errors that name the fix."""

from __future__ import annotations

import struct
import threading
from typing import Any

import pymysql
from pymysql.constants import CLIENT, COMMAND, CR
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


# MariaDB's extended capabilities (10.2+), the bits above 32: a server lists its own in the last 4 of the
# greeting's 10 reserved bytes and clears CLIENT_MYSQL (bit 0); a client announces its own in the last 4 of
# the handshake response's 23-byte filler, with bit 0 clear. PyMySQL knows neither.
MARIADB_BULK_OPERATIONS = 1 << 2  # MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32: COM_STMT_BULK_EXECUTE
_RESPONSE_PREFIX = struct.pack("<I", 2**24 - 1)  # PyMySQL's max packet size in every handshake response


class BulkConnection(SharedTlsConnection):
    """A follower connection that also announces MariaDB's bulk operations when the server offers them:
    then `bulk_operations` is True and the session may run COM_STMT_BULK_EXECUTE (`send_bulk`), which a
    server refuses (1295) to a client that did not announce it.

    PyMySQL writes the handshake response itself; this class reads the server's extended capabilities
    from the greeting PyMySQL reads, and sets the client's in the response PyMySQL writes (listed in
    cdc_producer/library_patches.py)."""

    bulk_operations = False
    _server_extended = 0

    def _get_server_information(self) -> None:
        read = self._read_packet
        greeting: list[bytes] = []

        def keep(*args: Any, **kwargs: Any) -> Any:
            packet = read(*args, **kwargs)  # type: ignore[no-untyped-call]
            greeting.append(packet.get_all_data())
            return packet

        self._read_packet = keep  # type: ignore[method-assign]
        try:
            super()._get_server_information()  # type: ignore[misc]
        finally:
            del self._read_packet
        self._server_extended = extended_capabilities(greeting[0]) if greeting else 0

    def _request_authentication(self) -> None:
        server: int = self.server_capabilities  # type: ignore[attr-defined]
        offered = not server & CLIENT.LONG_PASSWORD and self._server_extended & MARIADB_BULK_OPERATIONS
        if not offered:
            super()._request_authentication()  # type: ignore[misc]
            return
        write = self.write_packet

        def announce(payload: bytes) -> None:
            # The handshake response, and the TLS request before it, which repeats its first 32 bytes.
            if len(payload) >= 32 and payload[4:8] == _RESPONSE_PREFIX and payload[9:32] == bytes(23):
                flags = struct.unpack_from("<I", payload)[0] & ~CLIENT.LONG_PASSWORD  # CLIENT_MYSQL off
                payload = struct.pack("<I", flags) + payload[4:28] + struct.pack("<I", MARIADB_BULK_OPERATIONS) \
                    + payload[32:]
            write(payload)

        self.write_packet = announce  # type: ignore[method-assign]
        try:
            super()._request_authentication()  # type: ignore[misc]
        finally:
            del self.write_packet
        self.bulk_operations = True


def extended_capabilities(greeting: bytes) -> int:
    """MariaDB's extended server capabilities (>> 32) in a server greeting; 0 if it has none."""
    end = greeting.find(b"\0", 1)  # the server version's end
    if end < 0:
        return 0
    i = end + 1 + 4 + 9 + 2  # thread id, salt + filler, capabilities
    i += 6 + 6  # charset, status, upper capabilities, salt length; 6 reserved bytes
    if len(greeting) < i + 4:
        return 0
    return int(struct.unpack_from("<I", greeting, i)[0])


COM_STMT_PREPARE = 0x16
COM_STMT_CLOSE = 0x19
COM_STMT_BULK_EXECUTE = 0xFA
_SEND_TYPES = 128  # STMT_BULK_FLAG_CLIENT_SEND_TYPES


def prepare(conn: pymysql.Connection[Any], sql: str) -> tuple[int, int]:
    """COM_STMT_PREPARE: the statement's id and number of parameters; a server error raises."""
    conn._execute_command(COM_STMT_PREPARE, sql)  # type: ignore[attr-defined]
    data = conn._read_packet().get_all_data()  # type: ignore[no-untyped-call]  # an error packet raises
    stmt_id, columns, params = struct.unpack_from("<xIHH", data)
    # The parameters' and the columns' definitions, each list ended by an EOF packet (PyMySQL does not
    # announce CLIENT_DEPRECATE_EOF).
    for _ in range(params + (params > 0) + columns + (columns > 0)):
        conn._read_packet()  # type: ignore[no-untyped-call]
    return int(stmt_id), int(params)


def close_statement(conn: pymysql.Connection[Any], stmt_id: int) -> None:
    """COM_STMT_CLOSE (the server sends no answer)."""
    conn._execute_command(COM_STMT_CLOSE, struct.pack("<I", stmt_id))  # type: ignore[attr-defined]


def send_bulk(conn: pymysql.Connection[Any], stmt_id: int, types: bytes, rows: list[bytes]) -> int:
    """Send COM_STMT_BULK_EXECUTE of a prepared statement with these parameter rows (`types`: each
    parameter's 2 bytes; a row: per parameter an indicator byte and its value) without reading its
    answer, which is one OK packet counting every row's affected rows (`read_result`); returns the
    sequence number the answer starts at."""
    payload = struct.pack("<IH", stmt_id, _SEND_TYPES) + types + b"".join(rows)
    conn._execute_command(COM_STMT_BULK_EXECUTE, payload)  # type: ignore[attr-defined]
    return int(conn._next_seq_id)  # type: ignore[attr-defined]


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


def connect(db: LeaderDatabase | FollowerDatabase, role: str, bulk: bool = False,
            **kwargs: Any) -> pymysql.Connection[Any]:
    """A pymysql connection, or a CdcError naming the server and the fix; `bulk`: a BulkConnection."""
    try:
        return (BulkConnection if bulk else SharedTlsConnection)(
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
