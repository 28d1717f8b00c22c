"""The leader side: its identity and position, preflight checks, and the binlog stream.

python-mysql-replication does the protocol; this module wraps its pitfalls: on MariaDB
it positions only by GTID (so we always give it one, an empty state meaning "from the
oldest binlog"), and its errors become CdcErrors naming the fix. `dispatch` is the one
place that turns the library's event classes into calls on a `BinlogHandler`
(cdc_producer/assemble.py), as go-mysql's canal separates following the binlog from
acting on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from cdc_producer import library_patches
from cdc_producer.context import StatementContext
from cdc_producer.decode import encode_rows, primary_key
from cdc_producer.statements import query_session, statement_text
from cdc_stream.classify import xid_text
from cdc_stream.errors import SetupError, UnreachableError, mysql_code, mysql_message
from cdc_stream.events import Operation, QuerySession
from cdc_stream.filters import TableFilter
from cdc_stream.mysql import one_row
from cdc_stream.positions import BinlogFile, Position
from cdc_stream.profile import LeaderDatabase

STREAM_EVENTS = [
    MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
    WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent,
    FormatDescriptionEvent, XAPrepareEvent, library_patches.StatementContextEvent,
]


@dataclass(frozen=True)
class LeaderInfo:
    """What the producer needs to know about the server it follows."""

    flavor: str  # "mariadb" or "mysql"
    version: str
    server_id: int
    server_uuid: str | None  # MySQL only
    gtid_mode: bool  # MariaDB always logs GTIDs; MySQL when gtid_mode=ON


def leader_info(conn: pymysql.Connection) -> LeaderInfo:
    """Flavor, version, ids and GTID mode of the connected server."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@server_id")
        version, server_id = one_row(cur)
        if "mariadb" in version.lower():
            return LeaderInfo("mariadb", version, int(server_id), None, True)
        cur.execute("SELECT @@server_uuid, @@gtid_mode")
        uuid, gtid_mode = one_row(cur)
        return LeaderInfo("mysql", version, int(server_id), uuid, str(gtid_mode).upper() == "ON")


def _variables(conn: pymysql.Connection, names: list[str]) -> dict[str, str]:
    # SHOW, not information_schema.GLOBAL_VARIABLES: MySQL 8.0 removed that table (error 1109).
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN %s", ([n.lower() for n in names],))
        return {name.lower(): str(value) for name, value in cur.fetchall()}


# (variable, required value, the fix as a config line)
_REQUIRED_SETTINGS = [
    ("log_bin", "ON", "log-bin (in [mysqld] of my.cnf, then restart)"),
    ("binlog_format", "ROW", "binlog-format=ROW (or SET GLOBAL binlog_format='ROW')"),
    ("binlog_row_image", "FULL", "binlog-row-image=FULL (or SET GLOBAL binlog_row_image='FULL')"),
    ("binlog_row_metadata", "FULL", "binlog-row-metadata=FULL (or SET GLOBAL binlog_row_metadata='FULL')"),
]


# Settings that change the binlog's events in a way cdc-producer does not decode, refused with the
# fix (docs/compatibility.md "Binlog settings" lists every setting and its status). Compressed
# binlogs (log_bin_compress, binlog_transaction_compression) and binlog_row_value_options=PARTIAL_JSON
# are decoded; a compression type the producer cannot decode is refused at its event (compression.py).
_REFUSED_SETTINGS = [
    ("binlog_alter_two_phase", {"ON", "1"},
     ("ALTER TABLE is logged twice (START ALTER, then COMMIT ALTER), which the follower would run twice; "
      "SET GLOBAL binlog_alter_two_phase=OFF")),
    ("gtid_mode", {"OFF_PERMISSIVE", "ON_PERMISSIVE"},
     ("a transition mode whose binlog mixes GTID and anonymous transactions, from which cdc-producer can resume "
      "neither by GTID set nor by file:position; finish the change: SET GLOBAL gtid_mode=ON (or OFF)")),
]


def preflight(conn: pymysql.Connection, info: LeaderInfo, server_id: int | None = None) -> list[str]:
    """Problems that stop CDC from working, each with its fix; [] when all is well."""
    values = _variables(conn, [name for name, _, _ in _REQUIRED_SETTINGS] + [name for name, _, _ in _REFUSED_SETTINGS])
    problems = missing_privileges(conn)
    if server_id is not None:
        problems += server_id_conflicts(conn, info, server_id)
    for name, wanted, fix in _REQUIRED_SETTINGS:
        have = values.get(name)
        if have is None:
            problems.append(f"{name} is not supported by {info.version}: MariaDB 10.5+ or MySQL 8.0.14+ is needed")
        elif have.upper() != wanted:
            problems.append(f"{name} is {have}, must be {wanted}: set {fix}")
    for name, refused, why in _REFUSED_SETTINGS:
        have = values.get(name)
        if have is not None and have.upper() in refused:
            problems.append(f"{name} is {have}: {why}")
    return problems


# Privileges on *.* the producer needs; REPLICATION CLIENT is called BINLOG MONITOR in MariaDB 10.5+.
_NEEDED_PRIVILEGES = [("REPLICATION SLAVE",), ("REPLICATION CLIENT", "BINLOG MONITOR"), ("SELECT",)]


def missing_privileges(conn: pymysql.Connection) -> list[str]:
    """The global privileges the producer's user lacks, as one problem with the GRANT to run."""
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        grants = [row[0] for row in cur.fetchall()]
        cur.execute("SELECT CURRENT_USER()")
        user, _, host = one_row(cur)[0].partition("@")
    held: set[str] = set()
    for grant in grants:
        head, sep, _ = grant.partition(" ON *.* TO ")
        if sep and head.startswith("GRANT "):
            held |= {p.strip().upper() for p in head[len("GRANT "):].split(",")}
    if "ALL PRIVILEGES" in held:
        return []
    missing = [names[0] for names in _NEEDED_PRIVILEGES if not held & set(names)]
    if not missing:
        return []
    return [
        f"user '{user}' lacks {', '.join(missing)}: GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* "
        f"TO '{user}'@'{host}'"
    ]


def server_id_conflicts(conn: pymysql.Connection, info: LeaderInfo, server_id: int) -> list[str]:
    """A replica id the leader or another replica already uses makes the leader drop one of the connections."""
    if server_id == info.server_id:
        return [f"[database] server_id = {server_id} is the leader's own server_id: choose another number"]
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE HOSTS")
            ids = {int(row[0]) for row in cur.fetchall()}
    except pymysql.err.MySQLError:
        return []  # needs REPLICATION MASTER ADMIN; the leader still refuses a duplicate at connect time
    if server_id in ids:
        return [
            f"[database] server_id = {server_id} is already used by another replica of this leader "
            f"(SHOW SLAVE HOSTS): choose a number not in {sorted(ids)}"
        ]
    return []


def current_position(conn: pymysql.Connection, info: LeaderInfo) -> Position:
    """The leader's position now: where a first start begins."""
    with conn.cursor() as cur:
        if info.flavor == "mariadb":
            cur.execute("SELECT @@global.gtid_binlog_pos")
            return Position(gtid_set=one_row(cur)[0] or "")
        if info.gtid_mode:
            cur.execute("SELECT @@global.gtid_executed")
            return Position(gtid_set=one_row(cur)[0].replace("\n", ""))
        try:
            cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.2+
        except pymysql.err.ProgrammingError:
            cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if row is None:
            raise SetupError("binary logging is off on the leader: set log-bin in my.cnf and restart it")
        return Position(binlog=BinlogFile(row[0], int(row[1])), server_uuid=info.server_uuid)


def open_binlog(db: LeaderDatabase, info: LeaderInfo, start: Position, heartbeat: float = 1.0,
                filters: TableFilter | None = None) -> BinLogStreamReader:
    """A blocking binlog stream from `start` (exclusive: the first event is the one after it).

    `filters`: the library skips the table maps and rows of databases they exclude unread, and a
    table map it cannot read stops the stream only for a table they let through
    (library_patches.ExcludedSchemas)."""
    settings = {
        "host": db.ip_or_host, "port": db.port, "user": db.user, "password": db.password,
        "connect_timeout": db.connect_timeout,
        # Heartbeats come every `heartbeat` seconds when idle, so a read that waits
        # much longer means the connection is dead (half-open), not an idle leader.
        "read_timeout": max(10, int(heartbeat * 10)),
    }
    kwargs = dict(
        connection_settings=settings, server_id=db.server_id, blocking=True,
        only_events=STREAM_EVENTS, slave_heartbeat=heartbeat, freeze_schema=True,
        # SharedTlsConnection (one TLS context per process) that also expands compressed events
        pymysql_wrapper=library_patches.BinlogStreamConnection,
    )
    if filters is not None:
        kwargs["ignored_schemas"] = library_patches.ExcludedSchemas(
            lambda db: not filters.allows_db(db), lambda db, table: not filters.allows_table(db, table))
    if info.flavor == "mariadb":
        # The library positions MariaDB only by GTID; "" = from the oldest binlog,
        # which is right when the server has never logged a transaction.
        return BinLogStreamReader(is_mariadb=True, auto_position=start.gtid_set or "", **kwargs)
    if start.gtid_set is not None:
        return BinLogStreamReader(auto_position=start.gtid_set, **kwargs)
    binlog = start.binlog
    return BinLogStreamReader(log_file=binlog.file_name if binlog else None, log_pos=binlog.offset if binlog else None,
                              resume_stream=True, **kwargs)


def stream_error(e: pymysql.err.MySQLError, start: Position) -> Exception:
    """Translate an error of the binlog connection into a one-line error with the fix."""
    code, text = mysql_code(e), mysql_message(e)
    if code == 1236:
        if "purged" in text or "Could not find" in text or "not find first log" in text:
            return SetupError(
                f"the leader no longer has the binlog at {start} (purged): the changes since then are lost to CDC; "
                "re-create the follower from a fresh copy of the leader and start with an empty topic "
                f"(leader said: {text})"
            )
        return SetupError(f"the leader refused to stream from {start}: {text}")
    if code in (1045, 1227) or "REPLICATION SLAVE" in text:
        return SetupError(
            f"the leader refused the replication connection: {text}; "
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO the producer's user"
        )
    return UnreachableError(f"binlog connection failed: {text}")


def purged_problem(conn: pymysql.Connection, info: LeaderInfo, start: Position) -> str | None:
    """Why `start` can no longer be streamed from (the binlogs it needs were purged), or None."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall()]
        if not files:
            return None
        gone = None
        if info.flavor == "mariadb" and start.gtid_set is not None:
            cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (files[0],))
            oldest = one_row(cur)[0] or ""
            mine = start.mariadb_state()
            for domain, (server, seq) in Position(gtid_set=oldest).mariadb_state().items():
                if mine.get(domain, (0, 0))[1] < seq:
                    gone = f"the oldest binlog {files[0]} starts after {domain}-{server}-{seq}"
        elif start.gtid_set is not None:
            cur.execute("SELECT @@global.gtid_purged")
            purged = (one_row(cur)[0] or "").replace("\n", "")
            if purged and Position(gtid_set=purged).mysql_set() not in start.mysql_set():
                gone = f"gtid_purged is {purged}"
        elif start.binlog is not None and start.binlog.file_name not in files:
            gone = f"{start.binlog.file_name} is not among the leader's binlogs (oldest: {files[0]})"
    if gone is None:
        return None
    return (
        f"the leader no longer has the binlog at {start} (purged: {gone}): the changes since then are lost to CDC; "
        "re-create the follower from a fresh copy of the leader and start with an empty topic "
        "(or run cdc-producer PROFILE --snapshot to copy the tables again)"
    )


# -- following the binlog: library events -> handler calls ---------------------------------------

_FL_STANDALONE = 0x01  # MariaDB GTID event flag: a group without BEGIN/COMMIT (DDL)
_ROW_OPERATIONS: dict[type, Operation] = {
    WriteRowsEvent: "Add", UpdateRowsEvent: "Update", DeleteRowsEvent: "Delete",
    PartialUpdateRowsEvent: "Update",  # MySQL binlog_row_value_options=PARTIAL_JSON: partial_json.py makes whole rows
}


@dataclass(slots=True)
class BinlogQuery:
    """A Query event: a statement (BEGIN, COMMIT, DDL...) and where it sits in the binlog."""

    sql: str  # the statement's text: exact unless query_b64 is set (then readable only)
    database: str | None  # the session's default schema
    start: int  # offset of the event in its binlog file
    end: int  # offset after it
    size: int
    timestamp: int  # seconds
    session: QuerySession | None = None  # the leader session the statement ran in (statements.query_session)
    error_code: int = 0  # the error the leader's statement ended with (executed in part)
    query_b64: str | None = None  # the statement's exact bytes, when `sql` is not exact


@dataclass(slots=True)
class RowChange:
    """A rows event of one table, not decoded yet (decoding costs: only tables the filters pass are)."""

    schema: str
    table: str
    operation: Operation
    end: int
    size: int  # bytes of the binlog event (the producer chunks large transactions by it)
    timestamp: int
    decode: Callable[[bool], tuple[list[str], list[Any]]]  # as_json -> (columns, rows): decode.encode_rows
    primary_key: Callable[[], list[str]]
    flags: int = 0  # the rows event's flags (0x02 no FK checks, 0x04 relaxed unique checks, 0x80 no CHECKs)
    binlog: Callable[[], bytes] | None = None  # the leader's table map + rows event, as written


@dataclass(frozen=True, slots=True)
class XaGtid:
    """What a MariaDB GTID event says of XA: it opens an XA PREPARE group (`prepared`) or the group
    of an XA COMMIT/ROLLBACK (not `prepared`) of the transaction `xid` (classify.xid_text)."""

    xid: str
    prepared: bool


class BinlogHandler(Protocol):
    """What follows the binlog: one call per event that matters."""

    def on_rotate(self, file: str) -> None:
        """The binlog continues in `file`."""

    def on_gtid(self, gtid: str, opens_group: bool, start: int, xa: XaGtid | None = None) -> None:
        """A transaction's GTID; `opens_group`: it is also its BEGIN (MariaDB's GTID event without
        the standalone flag: the group runs to its XID/COMMIT, even when it opens with DDL).
        `xa`: MariaDB's XA flags and xid."""

    def on_format(self, event: bytes) -> None:
        """The format description event of the binlog that follows (its raw bytes)."""

    def on_xa_prepare(self, xid: str, one_phase: bool, end: int) -> None:
        """An XA_PREPARE event: the XA transaction `xid` is prepared (or, `one_phase`, committed)."""

    def on_statement_context(self, context: StatementContext) -> None:
        """An INTVAR, RAND or USER_VAR event: the next statement was logged as a statement and runs
        with what it holds (cdc_producer/context.py)."""

    def on_query(self, query: BinlogQuery) -> None:
        """A statement."""

    def on_rows(self, rows: RowChange) -> None:
        """Row changes of one table."""

    def on_xid(self, end: int) -> None:
        """A transaction's commit."""

    def on_heartbeat(self, at: BinlogFile | None = None) -> None:
        """The leader has nothing more for now; `at`: the binlog file:pos it has sent up to."""


def dispatch(ev: Any, handler: BinlogHandler) -> None:
    """Hand one python-mysql-replication event to `handler`."""
    op = _ROW_OPERATIONS.get(type(ev))
    if op is not None:
        handler.on_rows(_row_change(ev, op))
    elif isinstance(ev, QueryEvent):
        handler.on_query(binlog_query(ev))
    elif isinstance(ev, XidEvent):
        handler.on_xid(ev.packet.log_pos)
    elif isinstance(ev, (MariadbGtidEvent, GtidEvent)):
        opens = isinstance(ev, MariadbGtidEvent) and not ev.flags & _FL_STANDALONE
        xa = None
        if isinstance(ev, MariadbGtidEvent) and (xid := library_patches.mariadb_gtid_xa(ev)) is not None:
            xa = XaGtid(xid_text(*xid), bool(ev.flags & _FL_PREPARED_XA))
        handler.on_gtid(ev.gtid, opens, ev.packet.log_pos - ev.event_size, xa)
    elif isinstance(ev, RotateEvent):
        handler.on_rotate(ev.next_binlog)
    elif isinstance(ev, HeartbeatLogEvent):
        handler.on_heartbeat(BinlogFile(ev.ident, ev.packet.log_pos) if ev.ident and ev.packet.log_pos else None)
    elif isinstance(ev, FormatDescriptionEvent):
        handler.on_format(library_patches.event_bytes(ev))
    elif isinstance(ev, library_patches.StatementContextEvent):
        handler.on_statement_context(ev.context)
    elif isinstance(ev, XAPrepareEvent):
        handler.on_xa_prepare(xid_text(ev.xid_format_id, ev.xid_gtrid, ev.xid_bqual), ev.one_phase, ev.packet.log_pos)


_FL_PREPARED_XA = 0x40
# Statements that only delimit transactions: they need no session, and they are most Query events.
_TRANSACTION_CONTROL = frozenset({b"BEGIN", b"COMMIT", b"ROLLBACK"})


def binlog_query(ev: QueryEvent) -> BinlogQuery:
    """A QueryEvent as the handler gets it: its exact statement (passwords hidden), session and error code."""
    db = ev.schema.decode("utf-8", "surrogateescape") if isinstance(ev.schema, bytes) else ev.schema
    start, end = ev.packet.log_pos - ev.event_size, ev.packet.log_pos
    raw: bytes = ev.query_bytes  # library_patches: the exact bytes
    if raw in _TRANSACTION_CONTROL:
        return BinlogQuery(raw.decode(), db or None, start, end, ev.event_size, ev.timestamp)
    session = query_session(ev)
    text = statement_text(raw, session, "mysql" if ev.dbms == "mysql" else "mariadb")
    return BinlogQuery(text.text, db or None, start, end, ev.event_size, ev.timestamp, session, ev.error_code,
                       text.exact_b64)


def _row_change(ev: RowsEvent, op: Operation) -> RowChange:
    return RowChange(ev.schema, ev.table, op, ev.packet.log_pos, ev.event_size, ev.timestamp,
                     lambda as_json: encode_rows(ev, as_json), lambda: primary_key(ev), ev.flags,
                     lambda: library_patches.table_map_bytes(ev) + library_patches.event_bytes(ev))


def has_data(binlog: BinLogStreamReader, timeout: float = 0.0) -> bool:
    """Whether the binlog connection has data to read now, or within `timeout` seconds (so the next
    event will not wait)."""
    if library_patches.binlog_buffered(binlog):
        return True  # received already (most of the time while catching up: no system call)
    sock = library_patches.binlog_socket(binlog)
    if sock is None:
        return False
    pending = getattr(sock, "pending", None)  # TLS: decrypted bytes not read yet
    if pending is not None and pending():
        return True
    try:
        import select

        return bool(select.select([sock], [], [], max(0.0, timeout))[0])
    except (OSError, ValueError):  # closed: the next read reports it
        return False
