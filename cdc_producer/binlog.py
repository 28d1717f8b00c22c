"""The leader side: connecting, reading its position, preflight checks, the binlog stream.

python-mysql-replication does the protocol; this module wraps its pitfalls:
on MariaDB it positions only by GTID (so we always give it one, an empty state
meaning "from the oldest binlog"), and its errors become CdcErrors naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.gtid import Gtid, GtidSet
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from cdc_producer import library_patches
from cdc_stream.errors import SetupError, UnreachableError
from cdc_stream.profile import LeaderDatabase

STREAM_EVENTS = [
    MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
    WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent,
]


@dataclass(frozen=True)
class Position:
    """Where to resume reading: a GTID state/set when GTIDs are on, else file:pos."""

    gtid_set: str | None = None
    file: str | None = None
    pos: int | None = None
    server_uuid: str | None = None  # file:pos is meaningful only on the server that wrote it

    def __str__(self) -> str:
        if self.gtid_set is not None:
            return f"gtid {self.gtid_set or '(empty: oldest binlog)'}"
        return f"{self.file}:{self.pos}"

    def text(self) -> str:
        """The compact form stored in events: a GTID state/set, or file:pos[@server_uuid]."""
        if self.gtid_set is not None:
            return self.gtid_set
        return f"{self.file}:{self.pos}" + (f"@{self.server_uuid}" if self.server_uuid else "")


def parse_position(text: str) -> Position:
    """The inverse of Position.text()."""
    head, _, uuid = text.partition("@")
    file, sep, pos = head.rpartition(":")
    if sep and pos.isdigit() and not (len(file) == 36 and file.count("-") == 4):
        return Position(file=file, pos=int(pos), server_uuid=uuid or None)
    return Position(gtid_set=text)


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
        version, server_id = cur.fetchone()
        if "mariadb" in version.lower():
            return LeaderInfo("mariadb", version, int(server_id), None, True)
        cur.execute("SELECT @@server_uuid, @@gtid_mode")
        uuid, gtid_mode = cur.fetchone()
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
        user, _, host = cur.fetchone()[0].partition("@")
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
            return Position(gtid_set=cur.fetchone()[0] or "")
        if info.gtid_mode:
            cur.execute("SELECT @@global.gtid_executed")
            return Position(gtid_set=cur.fetchone()[0].replace("\n", ""))
        try:
            cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.2+
        except pymysql.err.ProgrammingError:
            cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if row is None:
            raise SetupError("binary logging is off on the leader: set log-bin in my.cnf and restart it")
        return Position(file=row[0], pos=int(row[1]), server_uuid=info.server_uuid)


def merge_gtid(flavor: str, gtid_set: str, gtid: str) -> str:
    """The GTID state after `gtid` committed: what to resume from after it."""
    if flavor == "mariadb":
        domain = gtid.split("-", 1)[0]
        parts = [p for p in gtid_set.split(",") if p and p.split("-", 1)[0] != domain]
        parts.append(gtid)
        return ",".join(sorted(parts, key=lambda p: int(p.split("-", 1)[0])))
    merged = GtidSet(gtid_set) if gtid_set else GtidSet(None)
    merged.merge_gtid(Gtid(gtid))
    return str(merged)


def open_binlog(db: LeaderDatabase, info: LeaderInfo, start: Position, heartbeat: float = 1.0) -> BinLogStreamReader:
    """A blocking binlog stream from `start` (exclusive: the first event is the one after it)."""
    settings = {
        "host": db.ip_or_host, "port": db.port, "user": db.user, "password": db.password,
        "connect_timeout": db.connect_timeout,
        # Heartbeats come every `heartbeat` seconds when idle, so a read that waits
        # much longer means the connection is dead (half-open), not an idle leader.
        "read_timeout": max(10, int(heartbeat * 10)),
    }
    library_patches.apply()
    kwargs = dict(
        connection_settings=settings, server_id=db.server_id, blocking=True,
        only_events=STREAM_EVENTS, slave_heartbeat=heartbeat, freeze_schema=True,
        # SharedTlsConnection (one TLS context per process) that also expands compressed events
        pymysql_wrapper=library_patches.BinlogStreamConnection,
    )
    if info.flavor == "mariadb":
        # The library positions MariaDB only by GTID; "" = from the oldest binlog,
        # which is right when the server has never logged a transaction.
        return BinLogStreamReader(is_mariadb=True, auto_position=start.gtid_set or "", **kwargs)
    if start.gtid_set is not None:
        return BinLogStreamReader(auto_position=start.gtid_set, **kwargs)
    return BinLogStreamReader(log_file=start.file, log_pos=start.pos, resume_stream=True, **kwargs)


def stream_error(e: pymysql.err.MySQLError, start: Position) -> Exception:
    """Translate an error of the binlog connection into a one-line error with the fix."""
    code = e.args[0] if e.args else 0
    text = str(e.args[1]) if len(e.args) > 1 else str(e)
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
            oldest = cur.fetchone()[0] or ""
            mine = {p.split("-")[0]: int(p.split("-")[2]) for p in start.gtid_set.split(",") if p.count("-") == 2}
            for entry in filter(None, oldest.split(",")):
                domain, _, seq = entry.split("-")
                if mine.get(domain, 0) < int(seq):
                    gone = f"the oldest binlog {files[0]} starts after {entry}"
        elif start.gtid_set is not None:
            cur.execute("SELECT @@global.gtid_purged")
            purged = (cur.fetchone()[0] or "").replace("\n", "")
            if purged and not GtidSet(purged) in GtidSet(start.gtid_set or None):
                gone = f"gtid_purged is {purged}"
        elif start.file is not None and start.file not in files:
            gone = f"{start.file} is not among the leader's binlogs (oldest: {files[0]})"
    if gone is None:
        return None
    return (
        f"the leader no longer has the binlog at {start} (purged: {gone}): the changes since then are lost to CDC; "
        "re-create the follower from a fresh copy of the leader and start with an empty topic "
        "(or run cdc-producer PROFILE --snapshot to copy the tables again)"
    )
