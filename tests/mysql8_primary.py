#!/usr/bin/env python3
"""A recorded-binlog MySQL 8 test primary: serves one recorded binlog file, byte for byte, over the
MySQL protocol, to the real python-mysql-replication and cdc-producer.

It exists because no MySQL 8 server can be installed where the tests run (as tests/fluvio_server.py
exists for Fluvio). It is a test fixture, not a product feature:

  python tests/mysql8_primary.py --binlog FILE [--name binlog.000001] [--port 0] [--limit POS]
      [--status-pos POS] [--auth caching_sha2_password|mysql_native_password] [--user U --password P]
      [--set VARIABLE=VALUE ...] [--gtid-purged SET] [--log FILE]

prints `mysql8-primary port=PORT` once it listens and serves until SIGTERM/SIGINT.

What a client sees (MySQL 8.0 behaviour, from sql/rpl_binlog_sender.cc and the protocol docs):
- the handshake of a MySQL server of the file's version (its format description event), with
  caching_sha2_password (fast path: the server "has the password cached") or mysql_native_password;
- answers to the queries python-mysql-replication and cdc-producer send (VERSION(), @@server_id,
  @@server_uuid, @@gtid_mode, SHOW GLOBAL VARIABLES, SHOW GRANTS, CURRENT_USER(), SHOW SLAVE HOSTS,
  @@global.gtid_executed/gtid_purged, SHOW MASTER STATUS before 8.2 and SHOW BINARY LOG STATUS from
  8.2, SHOW BINARY LOGS, the SET @master_* / @mariadb_slave_capability statements); what MySQL 8
  rejects is rejected the same way (information_schema.GLOBAL_VARIABLES does not exist in 8.0, a
  statement the version does not know is a parse error 1064), and anything else is refused with
  error 1064 and logged, so a test notices a query it did not expect;
- COM_REGISTER_SLAVE, COM_BINLOG_DUMP (file:pos) and COM_BINLOG_DUMP_GTID (the client's GTID set:
  transactions in it are skipped; gtid_mode OFF, purged or unknown GTIDs are refused with 1236);
- the dump: a fake ROTATE, the format description event (LOG_EVENT_BINLOG_IN_USE_F cleared, log_pos 0
  when starting past it, CRC32 recomputed, as the sender does), then the file's events unchanged, up to
  --limit (default: the end of the file's last transaction, so a trailing STOP/ROTATE is not sent and
  the server seems to keep writing this file); then heartbeats every @master_heartbeat_period, or EOF
  with BINLOG_DUMP_NON_BLOCK.

--status-pos is the server's "current position" when a client asks (SHOW MASTER STATUS, and
@@global.gtid_executed = the file's PREVIOUS_GTIDS plus every GTID committed before it): a
producer's first start begins there, and the transactions after it are "written" right after.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import signal
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

HEADER = 19
ROTATE, FORMAT_DESCRIPTION, XID, HEARTBEAT, GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS, STOP = 4, 15, 16, 27, 33, 34, 35, 3
TRANSACTION_PAYLOAD = 40
QUERY = 2
ARTIFICIAL = 0x20
BINLOG_IN_USE = 0x1
NON_BLOCK = 0x1
COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING, COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = (
    0x01, 0x02, 0x03, 0x0E, 0x12, 0x15, 0x1E)
# Capabilities: LONG_PASSWORD FOUND_ROWS LONG_FLAG CONNECT_WITH_DB PROTOCOL_41 TRANSACTIONS SECURE_CONNECTION
# MULTI_STATEMENTS MULTI_RESULTS PLUGIN_AUTH CONNECT_ATTRS PLUGIN_AUTH_LENENC_CLIENT_DATA (no SSL, no DEPRECATE_EOF)
CAPABILITIES = 0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x10000 | 0x20000 | 0x80000 | 0x100000 | 0x200000
CONNECT_WITH_DB, PLUGIN_AUTH_LENENC, PLUGIN_AUTH, CONNECT_ATTRS = 0x8, 0x200000, 0x80000, 0x100000
STATUS_AUTOCOMMIT = 0x2
UTF8MB4_0900_AI_CI = 255
T_VAR_STRING, T_LONGLONG = 253, 8


# ---------------------------------------------------------------- GTID sets
class GtidSet:
    """uuid -> sorted, merged [start, end) intervals; MySQL's text form."""

    def __init__(self, text: str = "") -> None:
        self.sets: dict[str, list[tuple[int, int]]] = {}
        for part in filter(None, (p.strip() for p in text.replace("\n", "").split(","))):
            uuid, *ranges = part.split(":")
            for r in ranges:
                lo, _, hi = r.partition("-")
                self.add(uuid, int(lo), int(hi or lo) + 1)

    def add(self, uuid: str, start: int, end: int) -> None:
        merged: list[tuple[int, int]] = []
        for a, b in sorted(self.sets.get(uuid.lower(), []) + [(start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        self.sets[uuid.lower()] = merged

    def __contains__(self, gtid: tuple[str, int]) -> bool:
        return any(a <= gtid[1] < b for a, b in self.sets.get(gtid[0], []))

    def issubset(self, other: GtidSet) -> bool:
        return all(all(any(c <= a and b <= d for c, d in other.sets.get(u, [])) for a, b in iv)
                   for u, iv in self.sets.items())

    def minus(self, other: GtidSet) -> GtidSet:
        out = GtidSet()
        for uuid, intervals in self.sets.items():
            for a, b in intervals:
                for n in range(a, b):
                    if (uuid, n) not in other:
                        out.add(uuid, n, n + 1)
        return out

    def __str__(self) -> str:
        return ",".join(uuid + "".join(f":{a}" if b == a + 1 else f":{a}-{b - 1}" for a, b in iv)
                        for uuid, iv in sorted(self.sets.items()))


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def decode_gtid_set(data: bytes) -> GtidSet:
    """The encoded set of PREVIOUS_GTIDS and COM_BINLOG_DUMP_GTID: n_sids, then sid + intervals [start, end)."""
    out = GtidSet()
    count, = struct.unpack_from("<Q", data, 0)
    pos = 8
    for _ in range(count):
        uuid = _uuid(data[pos:pos + 16])
        n, = struct.unpack_from("<Q", data, pos + 16)
        pos += 24
        for _ in range(n):
            start, end = struct.unpack_from("<QQ", data, pos)
            out.add(uuid, start, end)
            pos += 16
    return out


# ---------------------------------------------------------------- the recorded binlog
@dataclass
class Binlog:
    """One recorded binlog file and what the server says about it."""

    data: bytes
    name: str
    events: list[tuple[int, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.data[:4] == b"\xfebin", "not a binlog file"
        pos = 4
        while pos + HEADER <= len(self.data):
            size, = struct.unpack_from("<I", self.data, pos + 9)
            self.events.append((pos, self.data[pos:pos + size]))
            pos += size
        fde = self.events[0][1]
        assert fde[4] == FORMAT_DESCRIPTION, "the file does not start with a format description event"
        self.version = fde[HEADER + 2:HEADER + 52].rstrip(b"\0").decode()
        self.server_id, = struct.unpack_from("<I", fde, 5)
        self.checksum = fde[-5] == 1  # the FDE's checksum algorithm byte: 1 = CRC32

    @property
    def version_tuple(self) -> tuple[int, ...]:
        match = re.match(r"(\d+)\.(\d+)\.(\d+)", self.version)
        assert match is not None, f"server version {self.version!r}"
        return tuple(int(x) for x in match.groups())

    def default_limit(self) -> int:
        """The end of the last event that is not a trailing STOP/ROTATE."""
        end = len(self.data)
        for pos, event in reversed(self.events):
            if event[4] not in (STOP, ROTATE):
                break
            end = pos
        return end

    def gtid_mode(self) -> bool:
        return any(e[4] == GTID for _, e in self.events)

    def server_uuid(self) -> str:
        for _, e in self.events:
            if e[4] == GTID:
                return _uuid(e[HEADER + 1:HEADER + 17])
        return "00000000-0000-0000-0000-0000000000" + f"{self.server_id:02d}"[-2:]

    def executed_before(self, position: int) -> GtidSet:
        """PREVIOUS_GTIDS plus every GTID whose transaction committed before `position`."""
        done = GtidSet()
        pending: tuple[str, int] | None = None
        in_txn = False
        for pos, e in self.events:
            if pos >= position:
                break
            kind = e[4]
            if kind == PREVIOUS_GTIDS:
                for uuid, intervals in decode_gtid_set(e[HEADER:-4 if self.checksum else None]).sets.items():
                    for a, b in intervals:
                        done.add(uuid, a, b)
            elif kind == GTID:
                pending = (_uuid(e[HEADER + 1:HEADER + 17]), struct.unpack_from("<Q", e, HEADER + 17)[0])
            elif kind == QUERY and query_text(e) == b"BEGIN":
                in_txn = True
            elif kind in (XID, TRANSACTION_PAYLOAD) or (kind == QUERY and (not in_txn or query_text(e) == b"COMMIT")):
                if pending is not None:
                    done.add(pending[0], pending[1], pending[1] + 1)
                pending, in_txn = None, False
        return done


def query_text(event: bytes) -> bytes:
    """A QUERY event's statement (the event with its checksum)."""
    db_len = event[HEADER + 8]
    status_len, = struct.unpack_from("<H", event, HEADER + 11)
    return event[HEADER + 13 + status_len + db_len + 1:-4]


def with_crc(event: bytes) -> bytes:
    """The event (checksum included) with its CRC32 recomputed."""
    return event[:-4] + struct.pack("<I", zlib.crc32(event[:-4]))


# ---------------------------------------------------------------- packets
def lenenc(n: int) -> bytes:
    """A length-encoded integer (also the packed integers of a MySQL 8 transaction payload's header)."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenenc_str(value: bytes) -> bytes:
    return lenenc(len(value)) + value


def ok_packet() -> bytes:
    return b"\x00\x00\x00" + struct.pack("<HH", STATUS_AUTOCOMMIT, 0)


def eof_packet() -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, STATUS_AUTOCOMMIT)


def error_packet(code: int, message: str, state: str = "HY000") -> bytes:
    return b"\xff" + struct.pack("<H", code) + b"#" + state.encode() + message.encode()


class QueryError(Exception):
    def __init__(self, code: int, message: str, state: str = "HY000") -> None:
        super().__init__(message)
        self.code, self.message, self.state = code, message, state


def parse_error(sql: str, version: str) -> QueryError:
    near = sql.split(None, 1)[-1] if " " in sql else sql
    return QueryError(1064, f"You have an error in your SQL syntax; check the manual that corresponds to your MySQL "
                            f"server version for the right syntax to use near '{near[:80]}' at line 1", "42000")


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple]

    def packets(self) -> list[bytes]:
        out = [lenenc(len(self.columns))]
        for name in self.columns:
            out.append(b"".join(lenenc_str(x) for x in (b"def", b"", b"", b"", name.encode(), b""))
                       + b"\x0c" + struct.pack("<HIBHB", UTF8MB4_0900_AI_CI, 1024, T_VAR_STRING, 0, 0) + b"\0\0")
        out.append(eof_packet())
        for row in self.rows:
            out.append(b"".join(b"\xfb" if v is None else lenenc_str(str(v).encode()) for v in row))
        out.append(eof_packet())
        return out


# ---------------------------------------------------------------- the server
@dataclass
class Primary:
    binlog: Binlog
    limit: int
    status_pos: int
    user: str
    password: str
    auth: str
    variables: dict[str, str]
    gtid_purged: str
    log: Path | None
    next_connection: int = 1

    def note(self, line: str) -> None:
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(line + "\n")

    # -- queries
    def answer(self, sql: str, session: dict) -> Result | None:
        """The result of one statement (None: OK packet), or QueryError."""
        s = " ".join(sql.strip().rstrip(";").split())
        low = s.lower()
        v = self.binlog.version_tuple
        if low == "select version(), @@server_id":
            return Result(["VERSION()", "@@server_id"], [(self.binlog.version, self.variables["server_id"])])
        if low == "select @@server_uuid, @@gtid_mode":
            return Result(["@@server_uuid", "@@gtid_mode"], [(self.variables["server_uuid"], self.variables["gtid_mode"])])
        if "information_schema.global_variables" in low:  # removed in MySQL 8.0 (performance_schema has them)
            raise QueryError(1109, "Unknown table 'GLOBAL_VARIABLES' in information_schema", "42S02")
        m = re.fullmatch(r"show (?:global )?variables where variable_name in \((.*)\)", low)
        if m:
            names = [n.strip().strip("'\"") for n in m.group(1).split(",")]
            return Result(["Variable_name", "Value"],
                          [(n, self.variables[n]) for n in sorted(set(names)) if n in self.variables])
        m = re.fullmatch(r"show (global )?variables like '([a-z_%]+)'", low)
        if m:
            return Result(["Variable_name", "Value"],
                          [(n, self.variables[n]) for n in sorted(self.variables) if re.fullmatch(
                              m.group(2).replace("%", ".*"), n)])
        if low == "show grants":
            return Result([f"Grants for {self.user}@%"], [(
                f"GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `{self.user}`@`%`",)])
        if low == "select current_user()":
            return Result(["CURRENT_USER()"], [(f"{self.user}@%",)])
        if low == "show slave hosts":
            return Result(["Server_id", "Host", "Port", "Master_id", "Slave_UUID"], [])
        if low == "select @@global.gtid_executed":
            return Result(["@@global.gtid_executed"], [(self.gtid_executed(),)])
        if low == "select @@global.gtid_purged":
            return Result(["@@global.gtid_purged"], [(self.gtid_purged,)])
        if (low == "show master status" and v < (8, 4)) or (low == "show binary log status" and v >= (8, 2)):
            return Result(["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"],
                          [(self.binlog.name, self.status_pos, "", "", self.gtid_executed())])
        if low in ("show binary logs", "show master logs"):
            return Result(["Log_name", "File_size", "Encrypted"], [(self.binlog.name, self.limit, "No")])
        m = re.fullmatch(r"set @master_binlog_checksum ?= ?@@global.binlog_checksum", low)
        if m:
            session["checksum"] = self.variables["binlog_checksum"].upper() != "NONE"
            return None
        m = re.fullmatch(r"set @master_heartbeat_period ?= ?(\d+)", low)
        if m:
            session["heartbeat"] = int(m.group(1)) / 1e9
            return None
        if re.fullmatch(r"set (@mariadb_slave_capability|@slave_uuid|autocommit|names|@source_heartbeat_period)\b.*",
                        low):
            return None
        raise parse_error(s, self.binlog.version)

    def gtid_executed(self) -> str:
        return str(self.binlog.executed_before(self.status_pos)) if self.variables["gtid_mode"] == "ON" else ""

    # -- events
    def fake_rotate(self, position: int, checksum: bool) -> bytes:
        body = struct.pack("<Q", position) + self.binlog.name.encode()
        size = HEADER + len(body) + (4 if checksum else 0)
        event = struct.pack("<IBIIIH", 0, ROTATE, self.binlog.server_id, size, 0, ARTIFICIAL) + body
        return event + struct.pack("<I", zlib.crc32(event)) if checksum else event

    def format_description(self, start: int) -> bytes:
        event = bytearray(self.binlog.events[0][1])
        event[17] &= ~BINLOG_IN_USE & 0xFF
        if start > 4:
            struct.pack_into("<I", event, 13, 0)
        return with_crc(bytes(event))

    def heartbeat(self, position: int, checksum: bool) -> bytes:
        body = self.binlog.name.encode()
        size = HEADER + len(body) + (4 if checksum else 0)
        event = struct.pack("<IBIIIH", 0, HEARTBEAT, self.binlog.server_id, size, position, 0) + body
        return event + struct.pack("<I", zlib.crc32(event)) if checksum else event

    def dump_events(self, start: int, skip: GtidSet | None) -> list[bytes]:
        """The file's events from `start` up to the limit; with `skip`, transactions whose GTID is in it are left out."""
        out = []
        skipping = False
        for pos, event in self.binlog.events[1:]:
            if pos < start or pos >= self.limit:
                continue
            if skip is not None and event[4] in (GTID, ANONYMOUS_GTID):
                skipping = event[4] == GTID and (
                    _uuid(event[HEADER + 1:HEADER + 17]), struct.unpack_from("<Q", event, HEADER + 17)[0]) in skip
            if not skipping:
                out.append(event)
        return out


class Connection:
    def __init__(self, primary: Primary, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.p, self.reader, self.writer = primary, reader, writer
        self.seq = 0
        self.session: dict = {"checksum": False, "heartbeat": 0.0}
        self.id = primary.next_connection
        primary.next_connection += 1

    async def read_packet(self) -> bytes:
        head = await self.reader.readexactly(4)
        size = int.from_bytes(head[:3], "little")
        self.seq = (head[3] + 1) % 256
        return await self.reader.readexactly(size)

    def write(self, payload: bytes) -> None:
        while True:  # payloads of 16 MB and more go out in several packets
            chunk, payload = payload[:0xFFFFFF], payload[0xFFFFFF:]
            self.writer.write(len(chunk).to_bytes(3, "little") + bytes([self.seq]) + chunk)
            self.seq = (self.seq + 1) % 256
            if len(chunk) < 0xFFFFFF:
                return

    async def serve(self) -> None:
        try:
            if not await self.handshake():
                return
            while True:
                packet = await self.read_packet()
                command = packet[0]
                if command == COM_QUIT:
                    return
                if command == COM_QUERY:
                    sql = packet[1:].decode("utf-8", "replace")
                    self.p.note(f"query {sql}")
                    try:
                        result = self.p.answer(sql, self.session)
                    except QueryError as e:
                        self.p.note(f"error {e.code} {e.message}")
                        self.write(error_packet(e.code, e.message, e.state))
                    else:
                        for payload in result.packets() if result else [ok_packet()]:
                            self.write(payload)
                elif command in (COM_PING, COM_INIT_DB, COM_REGISTER_SLAVE):
                    self.p.note(f"command {command:#x}")
                    self.write(ok_packet())
                elif command == COM_BINLOG_DUMP:
                    await self.dump_file(packet)
                    return
                elif command == COM_BINLOG_DUMP_GTID:
                    await self.dump_gtid(packet)
                    return
                else:
                    self.write(error_packet(1047, "Unknown command", "08S01"))
                await self.writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.writer.close()

    async def handshake(self) -> bool:
        salt = bytes(b % 127 + 1 for b in os.urandom(20))  # no NUL bytes
        plugin = self.p.auth.encode()
        self.write(
            b"\x0a" + self.p.binlog.version.encode() + b"\0" + struct.pack("<I", self.id) + salt[:8] + b"\0"
            + struct.pack("<HBHHB", CAPABILITIES & 0xFFFF, UTF8MB4_0900_AI_CI, STATUS_AUTOCOMMIT,
                          CAPABILITIES >> 16, 21)
            + b"\0" * 10 + salt[8:] + b"\0" + plugin + b"\0"
        )
        await self.writer.drain()
        response = await self.read_packet()
        flags, = struct.unpack_from("<I", response, 0)
        pos = 32
        user_end = response.index(b"\0", pos)
        user = response[pos:user_end].decode()
        pos = user_end + 1
        if flags & PLUGIN_AUTH_LENENC:
            n = response[pos]  # (short scrambles only: < 251 bytes)
            auth, pos = response[pos + 1:pos + 1 + n], pos + 1 + n
        else:
            n = response[pos]
            auth, pos = response[pos + 1:pos + 1 + n], pos + 1 + n
        if flags & CONNECT_WITH_DB:
            end = response.index(b"\0", pos)
            self.p.note(f"connect user={user} db={response[pos:end].decode()}")
        else:
            self.p.note(f"connect user={user}")
        if user != self.p.user or not self.check_password(auth, salt):
            self.write(error_packet(1045, f"Access denied for user '{user}'@'127.0.0.1' (using password: "
                                          f"{'YES' if auth else 'NO'})", "28000"))
            await self.writer.drain()
            return False
        if self.p.auth == "caching_sha2_password" and auth:
            self.write(b"\x01\x03")  # fast authentication succeeded
        self.write(ok_packet())
        await self.writer.drain()
        return True

    def check_password(self, auth: bytes, salt: bytes) -> bool:
        password = self.p.password.encode()
        if not password:
            return auth == b""
        if self.p.auth == "mysql_native_password":
            stage1 = hashlib.sha1(password).digest()
            expected = bytes(a ^ b for a, b in zip(stage1, hashlib.sha1(salt + hashlib.sha1(stage1).digest()).digest()))
            return auth == expected
        p1 = hashlib.sha256(password).digest()
        p2 = hashlib.sha256(p1).digest()
        p3 = hashlib.sha256(p2 + salt).digest()
        return len(auth) == 32 and hashlib.sha256(bytes(a ^ b for a, b in zip(auth, p3))).digest() == p2

    def send_event(self, event: bytes) -> None:
        if not self.session["checksum"]:
            event = event[:-4]
            event = event[:9] + struct.pack("<I", len(event)) + event[13:]
        self.write(b"\0" + event)

    async def stream(self, start: int, skip: GtidSet | None, flags: int) -> None:
        checksum = self.session["checksum"]
        if self.p.binlog.checksum and not checksum:
            self.write(error_packet(1236, "Replica can not handle replication events with the checksum that source "
                                          "is configured to log; the first event 'binlog.000001' at 4, the last "
                                          "event read from 'binlog.000001' at 126"))
            return
        self.write(b"\0" + self.p.fake_rotate(start, checksum))
        self.send_event(self.p.format_description(start))
        for event in self.p.dump_events(start, skip):
            self.send_event(event)
        await self.writer.drain()
        if flags & NON_BLOCK:
            self.write(eof_packet())
            await self.writer.drain()
            return
        period = self.session["heartbeat"] or 30.0
        while not self.reader.at_eof():
            try:
                await asyncio.wait_for(self.reader.read(1), timeout=period)
                return  # the client closed the connection (or sent something it should not have)
            except TimeoutError:
                self.send_event(self.p.heartbeat(self.p.limit, True))
                self.p.note("heartbeat")
                await self.writer.drain()

    async def dump_file(self, packet: bytes) -> None:
        position, flags, server_id = struct.unpack_from("<IHI", packet, 1)
        name = packet[11:].decode()
        self.p.note(f"binlog_dump file={name} pos={position} flags={flags} server_id={server_id}")
        if name not in ("", self.p.binlog.name):
            self.write(error_packet(1236, "Could not find first log file name in binary log index file"))
            return
        if position > self.p.limit or position < 4:
            self.write(error_packet(1236, "Client requested source to start replication from position > file size"))
            return
        await self.stream(max(position, 4), None, flags)

    async def dump_gtid(self, packet: bytes) -> None:
        flags, server_id, name_size = struct.unpack_from("<HII", packet, 1)
        pos = 11 + name_size
        _position, data_size = struct.unpack_from("<QI", packet, pos)  # (4: MySQL ignores it with a GTID set)
        gtids = decode_gtid_set(packet[pos + 12:pos + 12 + data_size])
        self.p.note(f"binlog_dump_gtid gtids={gtids} flags={flags} server_id={server_id}")
        if self.p.variables["gtid_mode"] != "ON":
            self.write(error_packet(1236, "The replication sender thread cannot start in AUTO_POSITION mode: this "
                                          "server has GTID_MODE = OFF instead of ON."))
            return
        executed = self.p.binlog.executed_before(self.p.limit)
        purged = GtidSet(self.p.gtid_purged)
        missing = purged.minus(gtids)
        if str(missing):
            self.write(error_packet(1236, "Cannot replicate because the source purged required binary logs. Replicate "
                                          "the missing transactions from elsewhere, or provision a new replica from "
                                          f"backup. The GTID set sent by the replica is '{gtids}', and the missing "
                                          f"transactions are '{missing}'"))
            return
        if not gtids.issubset(executed):
            self.write(error_packet(1236, "Slave has more GTIDs than the master has, using the master's SERVER_UUID. "
                                          "This may indicate that the end of the binary log was truncated or that "
                                          "the last binary log file was lost, e.g., after a power or disk failure "
                                          "when sync_binlog != 1."))
            return
        await self.stream(4, gtids, flags)


async def main_async(args: argparse.Namespace) -> None:
    binlog = Binlog(Path(args.binlog).read_bytes(), args.name)
    limit = args.limit or binlog.default_limit()
    variables = {
        "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL", "log_bin": "ON",
        "binlog_checksum": "CRC32" if binlog.checksum else "NONE", "binlog_transaction_compression": "OFF",
        "binlog_row_value_options": "", "gtid_mode": "ON" if binlog.gtid_mode() else "OFF",
        "server_id": str(binlog.server_id), "server_uuid": binlog.server_uuid(), "version": binlog.version,
    }
    for item in args.set:
        name, _, value = item.partition("=")
        variables[name.lower()] = value
    primary = Primary(binlog, limit, args.status_pos or limit, args.user, args.password, args.auth, variables,
                      args.gtid_purged, Path(args.log) if args.log else None)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Connection(primary, reader, writer).serve()

    server = await asyncio.start_server(client, args.host, args.port)
    port = server.sockets[0].getsockname()[1]
    print(f"mysql8-primary port={port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binlog", required=True)
    parser.add_argument("--name", default="binlog.000001")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--status-pos", type=int, default=0)
    parser.add_argument("--user", default="cdc")
    parser.add_argument("--password", default="fluvio4cdc!")
    parser.add_argument("--auth", default="caching_sha2_password",
                        choices=["caching_sha2_password", "mysql_native_password"])
    parser.add_argument("--set", action="append", default=[], metavar="VARIABLE=VALUE")
    parser.add_argument("--gtid-purged", default="")
    parser.add_argument("--log")
    asyncio.run(main_async(parser.parse_args()))


class Mysql8PrimaryProcess:
    """One running test primary (a subprocess); `port` is where to connect, `log` what it was asked."""

    def __init__(self, binlog: Path, tmp: Path, *args: str, start_timeout: float = 15.0) -> None:
        import select
        import subprocess
        import time

        self.log = tmp / f"mysql8-primary-{os.getpid()}-{time.monotonic_ns()}.log"
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--binlog", str(binlog), "--log", str(self.log), *args],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + start_timeout
        line = ""
        while not line.startswith("mysql8-primary "):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"the MySQL 8 test primary did not start (exit code {self.process.returncode})")
            if select.select([self.process.stdout], [], [], remaining)[0]:
                line = self.process.stdout.readline()
        self.port = int(line.split("port=")[1])

    def requests(self) -> list[str]:
        """What clients sent, one line each (connect, query, binlog_dump...)."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self) -> None:
        import subprocess

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


if __name__ == "__main__":
    main()
