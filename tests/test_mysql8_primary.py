"""Recorded MySQL 8 binlogs through the real cdc-producer, served by tests/mysql8_primary.py.

No MySQL 8 server can run here, so these are MySQL 8's own bytes (tests/data/mysql8/README.md:
files from rust_mysql_common's and mysql-binlog-connector-java's test data), streamed over the
MySQL protocol to the unmodified python-mysql-replication inside the real CLI. Expected values
come from the origin projects' tests (rust_mysql_common src/binlog/mod.rs asserts the ENUM/SET,
BIT and JSON values) or, where the origin only parses a file, from MariaDB's mariadb-binlog, an
independent decoder, and the CREATE TABLE recorded in the same file (noted at each expectation).
"""

from __future__ import annotations

import base64
import json
import signal
import struct
from pathlib import Path

import pytest
from harness import Cli, run_cli, wait_for
from mysql8_binlog import compress_transactions, events, fixture
from mysql8_primary import Mysql8PrimaryProcess

from cdc_stream.topics.embedded import EmbeddedStream

DATA = Path(__file__).with_name("data") / "mysql8"
TOPIC = "rust-mysql-cdc"
FILE = "binlog.000001"
INVISIBLE_UUID = "97c7af02-4c50-11ec-acd8-681842034964"
ENUM_UUID = "93e95066-a2f4-11ec-9b69-9657f0ae95e2"
BIT_UUID = "fbda2ad0-7c46-11ec-ae30-4ef7efc81a2a"
ANONYMOUS_UUID = "00000000-0000-0000-0000-000000000001"  # the test primary's @@server_uuid for server_id 1
DIGITS = "0123456789" * 10
# f2 / f5 of mysql-enum-string-set, as rust_mysql_common's test spells them (298 characters)
LONG = ("0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
        "0123456789012345678901234567801234567890123456789012345678901234567890123456789012345678901234567890"
        "12345678901234567890123456789012345678901234567890123456780123456789012345678901234567890123456789")


class Lab:
    """Test primaries, producers and the topic of one test."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.stream = tmp / "stream"
        self.primaries: list[Mysql8PrimaryProcess] = []
        self.recorded: list[bytes] = []  # the recorded binlog files the primaries serve
        self.procs: list[Cli] = []

    def primary(self, binlog: Path | bytes, *args: str, recorded: bytes | None = None) -> Mysql8PrimaryProcess:
        """A test primary serving `binlog`; `recorded`: the recorded file its events come from, when
        `binlog` is a rewrite of it (compressed transactions)."""
        if isinstance(binlog, bytes):
            path = self.tmp / f"served-{len(self.primaries)}.bin"
            path.write_bytes(binlog)
            binlog = path
        self.recorded.append(recorded if recorded is not None else Path(binlog).read_bytes())
        primary = Mysql8PrimaryProcess(binlog, self.tmp, *args)
        self.primaries.append(primary)
        return primary

    def profile(self, primary: Mysql8PrimaryProcess, db: str, password: str = "fluvio4cdc!") -> Path:
        path = self.tmp / "producer.toml"
        path.write_text(f"""mysql_resource_name = "mysql-srv1"
[database]
ip_or_host = "127.0.0.1"
port = {primary.port}
user = "cdc"
password = "{password}"
server_id = 5401
[data]
base_path = "{self.tmp}/producer"
[filters]
include_dbs = ["{db}"]
[stream]
path = "{self.stream}"
[snapshot]
mode = "never"
""")
        return path

    def producer(self, primary: Mysql8PrimaryProcess, db: str) -> Cli:
        cli = Cli(["cdc-producer", str(self.profile(primary, db))])
        self.procs.append(cli)
        return cli

    def records(self) -> list[bytes]:
        if not self.stream.exists():
            return []
        with EmbeddedStream(self.stream) as stream:
            if not stream.exists(TOPIC):
                return []
            topic = stream.topic(TOPIC)
            values = [r.value for r in topic.read(0, max_records=10_000)]
            topic.close()
        return values

    def events(self) -> list[dict]:
        """The events on the topic, each row event's `binlog` checked against the recorded file
        (check_binlog) and then left out, so the rest compares exactly with the expected events."""
        events = [json.loads(v) for v in self.records()]
        for event in events:
            if "binlog" in event:
                check_binlog(event, event.pop("binlog"), self.recorded)
        return events

    def wait_events(self, count: int, producer: Cli, timeout: float = 30.0) -> list[dict]:
        def enough():
            if producer.proc.poll() is not None:
                raise AssertionError(f"cdc-producer exited {producer.proc.returncode}: {producer.stderr}")
            return len(self.records()) >= count

        wait_for(enough, timeout, f"{count} events on the topic")
        return self.events()

    def close(self) -> None:
        for cli in self.procs:
            if cli.proc.poll() is None:
                cli.kill()
        for primary in self.primaries:
            primary.stop()


@pytest.fixture
def lab(tmp_path):
    lab = Lab(tmp_path)
    yield lab
    lab.close()


def stop(producer: Cli) -> None:
    assert producer.stop(signal.SIGTERM) == 0, producer.stderr
    assert "Traceback" not in producer.stderr


def refusal(result) -> str:
    return result.stderr.decode().strip()


ROWS_EVENTS = {23, 24, 25, 30, 31, 32, 39}  # write/update/delete v1 and v2, partial update


def check_binlog(event: dict, encoded: str, recorded: list[bytes]) -> None:
    """A row event's `binlog` field holds the leader's own events for it: [the format description,]
    its table map naming the event's table, and its rows event of the event's kind, each body byte for
    byte as in the recorded binlog file (bodies: a header's position and a checksum may be rewritten
    by a server streaming them, and are for events a compressed transaction carried)."""
    data, pos, found = base64.b64decode(encoded), 0, []
    while pos < len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        found.append(data[pos:pos + size])
        pos += size
    assert pos == len(data), "the binlog field's events do not end at its end"
    kinds = [e[4] for e in found]
    if kinds[0] == 15:  # the format description: the recorded server's version
        version = found.pop(0)[19 + 2:19 + 52].rstrip(b"\0")
        assert any(version in r[4 + 19:4 + 19 + 60] for r in recorded), version
        kinds = kinds[1:]
    assert kinds[0] == 19 and kinds[1] in ROWS_EVENTS and len(kinds) == 2, kinds
    table_map, rows = found
    db_len = table_map[19 + 8]
    db = table_map[19 + 9:19 + 9 + db_len].decode()
    table_len = table_map[19 + 9 + db_len + 1]
    table = table_map[19 + 9 + db_len + 2:19 + 9 + db_len + 2 + table_len].decode()
    assert event["uri"].endswith(f"/{db}/{table}"), (event["uri"], db, table)
    op = next(iter(event["operation"]))
    assert {"Add": (23, 30), "Update": (24, 31, 39), "Delete": (25, 32)}[op].count(rows[4]) == 1, (op, rows[4])
    for raw in (table_map, rows):
        body = raw[19:-4]  # the checksum (the recorded files have CRC32) left out
        assert any(body in r for r in recorded), f"event type {raw[4]} is not in the recorded binlog"


def row_event(uri: str, seq: int, offset: int, txn: str, op: str, rows: list, columns: list[str], ts: int,
              gtid: str | None = None, gtid_set: str | None = None, index: int = 0, last: bool = True,
              server_uuid: str | None = None, pk: list | None = None) -> dict:
    """The exact JSON object of one row event, fields in the contract's order."""
    event: dict = {"uri": uri, "sequence": seq, "bn_file": {"fileName": FILE, "offset": offset}}
    if gtid is not None:
        event["gtid"] = gtid
    if gtid_set is not None:
        event["gtid_set"] = gtid_set
    if server_uuid is not None:
        event["server_uuid"] = server_uuid
    event["ts"] = ts
    event["txn"] = {"id": txn, "index": index, "last": last}
    event["columns"] = columns
    event["pk"] = pk or []
    key = "cols" if op != "Update" else None
    event["operation"] = {op: {"rows": [{key: r} if key else {"before_cols": r[0], "after_cols": r[1]} for r in rows]}}
    return event


# -- binlog-invisible-columns.000001 (MySQL 8.0.26, GTIDs, binlog_row_metadata=FULL with COLUMN_VISIBILITY):
# CREATE TABLE t1 (f1 INT UNSIGNED INVISIBLE, f2 INT UNSIGNED INVISIBLE, f3 INT, f4 TEXT, f5 BLOB,
# f6 BIGINT UNSIGNED INVISIBLE) in database `mysql`; the rows as mariadb-binlog -vv decodes them:
# (1, 2, -3, '4', '\x05', 6000000000), (NULL, NULL, -33, '44', 'U', NULL), then that row updated to
# (111, 222, -333, '444', 'U', NULL).
T1 = ["f1", "f2", "f3", "f4", "f5", "f6"]
ROW1 = [{"UnsignedInteger": 1}, {"UnsignedInteger": 2}, {"SignedInteger": -3}, {"String": "4"}, {"Blob": "BQ=="},
        {"UnsignedInteger": 6000000000}]
ROW2 = ["Null", "Null", {"SignedInteger": -33}, {"String": "44"}, {"Blob": "VQ=="}, "Null"]
ROW2_AFTER = [{"UnsignedInteger": 111}, {"UnsignedInteger": 222}, {"SignedInteger": -333}, {"String": "444"},
              {"Blob": "VQ=="}, "Null"]


def invisible_events() -> list[dict]:
    uri = "flv://mysql-srv1/mysql/t1"
    g = [f"{INVISIBLE_UUID}:{n}" for n in (3, 4, 5)]
    return [
        row_event(uri, 0, 1120, g[0], "Add", [ROW1], T1, 1637667166000, g[0], f"{INVISIBLE_UUID}:1-3"),
        row_event(uri, 1, 1438, g[1], "Add", [ROW2], T1, 1637667198000, g[1], f"{INVISIBLE_UUID}:1-4"),
        row_event(uri, 2, 1787, g[2], "Update", [(ROW2, ROW2_AFTER)], T1, 1637667258000, g[2],
                  f"{INVISIBLE_UUID}:1-5"),
    ]


def test_gtid_start_restart_and_purge(lab):
    """Start by GTID set (the server is at :1-2), stop after one transaction, restart after the server
    wrote two more: each transaction exactly once. Then a server that purged :1-4 is refused."""
    binlog = DATA / "binlog-invisible-columns.000001"
    first = lab.primary(binlog, "--status-pos", "787", "--limit", "1120")
    producer = lab.producer(first, "mysql")
    assert producer.wait_line("streaming from") == (
        f"streaming from gtid {INVISIBLE_UUID}:1-2 of mysql 8.0.26 at 127.0.0.1:{first.port} to topic '{TOPIC}' "
        f"(embedded stream {lab.stream}), next sequence 0")
    assert lab.wait_events(1, producer) == invisible_events()[:1]
    stop(producer)
    dumps = [r for r in first.requests() if r.startswith("binlog_dump")]
    assert dumps == [f"binlog_dump_gtid gtids={INVISIBLE_UUID}:1-2 flags=4 server_id=5401"]
    first.stop()

    second = lab.primary(binlog)  # the same server, two transactions later
    producer = lab.producer(second, "mysql")
    assert producer.wait_line("streaming from") == (
        f"streaming from gtid {INVISIBLE_UUID}:1-3 of mysql 8.0.26 at 127.0.0.1:{second.port} to topic '{TOPIC}' "
        f"(embedded stream {lab.stream}), next sequence 1")
    assert lab.wait_events(3, producer) == invisible_events()
    # Caught up: the server only sends heartbeats now, and nothing more reaches the topic.
    wait_for(lambda: second.requests().count("heartbeat") >= 2, 10, "two heartbeats")
    assert lab.events() == invisible_events()
    stop(producer)
    assert [r for r in second.requests() if r.startswith("binlog_dump")] == [
        f"binlog_dump_gtid gtids={INVISIBLE_UUID}:1-3 flags=4 server_id=5401"]
    second.stop()

    purged = lab.primary(binlog, "--gtid-purged", f"{INVISIBLE_UUID}:1-4")
    check = run_cli("cdc-producer", "--check", str(lab.profile(purged, "mysql")))
    assert check.returncode == 4
    assert refusal(check) == (
        f"FAIL the leader no longer has the binlog at gtid {INVISIBLE_UUID}:1-5 (purged: gtid_purged is "
        f"{INVISIBLE_UUID}:1-4): the changes since then are lost to CDC; re-create the follower from a fresh copy "
        "of the leader and start with an empty topic (or run cdc-producer PROFILE --snapshot to copy the tables again)"
    )


# -- json-opaque.binlog (MySQL 9.0.1, GTIDs off, binlog_row_metadata=FULL): `create table test (a json)` in
# database foo, then one transaction of eight single-row inserts whose JSON values rust_mysql_common's test
# asserts (src/binlog/mod.rs, "json-opaque.binlog"): {"a": "base64:type15:VQ=="}, {"b": "2012-03-18"},
# {"c": "2012-03-18 11:30:45.000000"}, {"c": "87:31:46.654321"}, {"d": "123.456"}, {"e": "9.00"},
# {"e": [0, 1, true, false]}, {"e": null} (it renders decimals as strings; MySQL prints them as numbers).
OPAQUE = [{"a": "base64:type15:VQ=="}, {"b": "2012-03-18"}, {"c": "2012-03-18 11:30:45.000000"},
          {"c": "87:31:46.654321"}, {"d": 123.456}, {"e": 9.0}, {"e": [0, 1, True, False]}, {"e": None}]
OPAQUE_ENDS = [792, 909, 1026, 1143, 1258, 1374, 1497, 1635]  # each write event's end; the last = the XID's
OPAQUE_TS = [1727774189, 1727774238, 1727774286, 1727774378, 1727774748, 1727774773, 1727774902, 1727774941]


def test_file_position_start_restart_and_json_opaque_values(lab):
    binlog = DATA / "json-opaque.binlog"
    first = lab.primary(binlog, "--status-pos", "158", "--limit", "529")
    producer = lab.producer(first, "foo")
    assert producer.wait_line("streaming from") == (
        f"streaming from {FILE}:158 of mysql 9.0.1 at 127.0.0.1:{first.port} to topic '{TOPIC}' "
        f"(embedded stream {lab.stream}), next sequence 0")
    ddl = lab.wait_events(2, producer)
    stop(producer)
    assert [(e["operation"], e.get("database"), e["bn_file"], e["txn"]["id"], e.get("server_uuid")) for e in ddl] == [
        ({"Query": "CREATE DATABASE foo"}, "foo", {"fileName": FILE, "offset": 340}, f"{FILE}:258", ANONYMOUS_UUID),
        ({"Query": "create table test (a json)"}, "foo", {"fileName": FILE, "offset": 529}, f"{FILE}:440",
         ANONYMOUS_UUID),
    ]
    # 9.0 has no SHOW MASTER STATUS (removed in 8.4): the producer and the library ask SHOW BINARY LOG STATUS.
    requests = first.requests()
    assert "query SHOW BINARY LOG STATUS" in requests and "query SHOW MASTER STATUS" not in requests
    assert [r for r in requests if r.startswith("binlog_dump")] == [
        f"binlog_dump file={FILE} pos=158 flags=0 server_id=5401"]
    first.stop()

    second = lab.primary(binlog)
    producer = lab.producer(second, "foo")
    assert producer.wait_line("streaming from") == (
        f"streaming from {FILE}:529 of mysql 9.0.1 at 127.0.0.1:{second.port} to topic '{TOPIC}' "
        f"(embedded stream {lab.stream}), next sequence 2")
    events = lab.wait_events(10, producer)
    stop(producer)
    assert [r for r in second.requests() if r.startswith("binlog_dump")] == [
        f"binlog_dump file={FILE} pos=529 flags=0 server_id=5401"]
    assert events[:2] == ddl
    assert events[2:] == [
        row_event("flv://mysql-srv1/foo/test", 2 + i, end, f"{FILE}:631", "Add", [[{"Json": value}]], ["a"],
                  ts * 1000, index=i, last=i == 7, server_uuid=ANONYMOUS_UUID if i == 7 else None)
        for i, (value, end, ts) in enumerate(zip(OPAQUE, OPAQUE_ENDS, OPAQUE_TS))
    ]
    # The decimals keep their digits on the topic: MySQL prints 123.456 and 9.00.
    records = lab.records()
    assert b'{"Json":{"d":123.456}}' in records[6] and b'{"Json":{"e":9.00}}' in records[7]


# -- mysql-enum-string-set.000001 (MySQL 8.0.28, GTIDs): CREATE TABLE t(f1 CHAR(128), f2 VARCHAR(300),
# f3 ENUM('var1', 'variant2', 'foo'), f4 SET('one', 'two', 'three', 'four'), f5 TEXT); rust_mysql_common's
# test asserts the insert (DIGITS, LONG, enum index 1, set bits 0b0101, '0123456789'), the update to
# ('field1', 'field_2', index 2, bits 0b1010, LONG) and the delete of that row.
ENUM_COLUMNS = ["f1", "f2", "f3", "f4", "f5"]
ENUM_ROW = [{"String": DIGITS}, {"String": LONG}, {"Enum": "var1"}, {"Set": ["one", "three"]},
            {"String": "0123456789"}]
ENUM_AFTER = [{"String": "field1"}, {"String": "field_2"}, {"Enum": "variant2"}, {"Set": ["two", "four"]},
              {"String": LONG}]


def enum_events(ends: list[int]) -> list[dict]:
    uri = "flv://mysql-srv1/mysql/t"
    g = [f"{ENUM_UUID}:{n}" for n in (3, 4, 5)]
    return [
        row_event(uri, 0, ends[0], g[0], "Add", [ENUM_ROW], ENUM_COLUMNS, 1647193281000, g[0], f"{ENUM_UUID}:1-3"),
        row_event(uri, 1, ends[1], g[1], "Update", [(ENUM_ROW, ENUM_AFTER)], ENUM_COLUMNS, 1647193297000, g[1],
                  f"{ENUM_UUID}:1-4"),
        row_event(uri, 2, ends[2], g[2], "Delete", [ENUM_AFTER], ENUM_COLUMNS, 1647193306000, g[2],
                  f"{ENUM_UUID}:1-5"),
    ]


# -- mysql_type_bit.000001 (MySQL 8.0.26, GTIDs): CREATE TABLE foo(a BIT(3), b TEXT, c BIT(8)); rust_mysql_common
# asserts the one row (0b100, 'foo', 0b00100000).
def bit_events(end: int) -> list[dict]:
    g = f"{BIT_UUID}:3"
    return [row_event("flv://mysql-srv1/mysql/foo", 0, end, g, "Add", [[{"Bit": 4}, {"String": "foo"}, {"Bit": 32}]],
                      ["a", "b", "c"], 1642940552000, g, f"{BIT_UUID}:1-3")]


def test_enum_set_and_bit_with_both_authentication_plugins(lab):
    primary = lab.primary(DATA / "mysql-enum-string-set.000001", "--status-pos", "791")
    producer = lab.producer(primary, "mysql")
    assert lab.wait_events(3, producer) == enum_events([1560, 2659, 3331])
    stop(producer)
    assert "connect user=cdc" in primary.requests()

    lab.stream = lab.tmp / "stream-bit"
    primary = lab.primary(DATA / "mysql_type_bit.000001", "--status-pos", "702", "--auth", "mysql_native_password")
    producer = lab.producer(primary, "mysql")
    assert lab.wait_events(1, producer) == bit_events(1001)
    stop(producer)

    wrong = run_cli("cdc-producer", "--check", str(lab.profile(primary, "mysql", password="wrong")))
    assert wrong.returncode == 2
    assert refusal(wrong) == (f"error: the leader at 127.0.0.1:{primary.port} refused user 'cdc' (access denied): "
                              "check [database] user and password")


def test_compressed_transactions_read_as_the_uncompressed_ones(lab):
    """The same recorded transactions, written as MySQL writes them with binlog_transaction_compression=ON
    (zstd) and as uncompressed payloads (type NONE): the same events, ending at the payloads' positions."""
    zstd = compress_transactions(fixture("mysql-enum-string-set.000001"), 0)
    assert [e[4] for _, e in events(zstd)].count(40) == 3
    recorded = fixture("mysql-enum-string-set.000001")
    primary = lab.primary(zstd, "--status-pos", "791", "--limit", "1151",
                          "--set", "binlog_transaction_compression=ON", recorded=recorded)
    producer = lab.producer(primary, "mysql")
    assert lab.wait_events(1, producer) == enum_events([1151, 1536, 1903])[:1]
    stop(producer)
    primary.stop()
    primary = lab.primary(zstd, "--set", "binlog_transaction_compression=ON",  # restart mid-way: resume by GTID
                          recorded=recorded)
    producer = lab.producer(primary, "mysql")
    assert lab.wait_events(3, producer) == enum_events([1151, 1536, 1903])
    stop(producer)

    lab.stream = lab.tmp / "stream-none"
    primary = lab.primary(compress_transactions(fixture("mysql_type_bit.000001"), 255), "--status-pos", "702",
                          "--set", "binlog_transaction_compression=ON", recorded=fixture("mysql_type_bit.000001"))
    producer = lab.producer(primary, "mysql")
    assert lab.wait_events(1, producer) == bit_events(1017)
    stop(producer)


@pytest.mark.parametrize("name, table", [("transaction_compression.000001", "test.tb1"),
                                         ("mysql-bin.compressed", "demo.movies")])
def test_recorded_compressed_files_are_refused_at_their_table_map(lab, name, table):
    """Both recorded compressed files were written with binlog_row_metadata=MINIMAL (no column names). A server
    that says so is refused at preflight; one that says FULL (changed since) is refused at the table map inside
    the payload: the compressed rows are read, not skipped (before issue 14 they vanished)."""
    honest = lab.primary(DATA / name, "--status-pos", "4", "--set", "binlog_row_metadata=MINIMAL",
                         "--set", "binlog_transaction_compression=ON")
    result = run_cli("cdc-producer", str(lab.profile(honest, table.split(".")[0])))
    assert result.returncode == 4
    assert refusal(result).splitlines() == [
        "error: the leader is not ready for CDC:",
        ("  - binlog_row_metadata is MINIMAL, must be FULL: set binlog-row-metadata=FULL (or SET GLOBAL "
         "binlog_row_metadata='FULL')"),
    ]
    changed = lab.primary(DATA / name, "--status-pos", "4", "--set", "binlog_transaction_compression=ON")
    result = run_cli("cdc-producer", str(lab.profile(changed, table.split(".")[0])))
    assert result.returncode == 5
    assert refusal(result).splitlines()[-1] == (
        f"error: the table map of {table} carries no column names (binlog_row_metadata was not FULL when it was "
        "logged): its rows cannot be replayed by name; SET GLOBAL binlog_row_metadata='FULL' on the leader (changes "
        "logged before that cannot be replayed: copy the table again with --snapshot)"
    )
    assert lab.records() == []


def test_partial_json_update_with_minimal_before_image_is_refused(lab):
    """json.binlog.000001 (MySQL 8.0.22): its last transaction is a PARTIAL_UPDATE_ROWS_EVENT (six rows, each
    `$.age` replaced) logged with binlog_row_image=MINIMAL: the before-image holds only the primary key, so the
    new documents cannot be known. The producer stops there, naming the fix; nothing is published."""
    binlog = DATA / "json.binlog.000001"
    honest = lab.primary(binlog, "--status-pos", "4", "--set", "binlog_row_metadata=MINIMAL",
                         "--set", "binlog_row_value_options=PARTIAL_JSON")
    result = run_cli("cdc-producer", str(lab.profile(honest, "mysql")))
    assert result.returncode == 4
    assert refusal(result).splitlines() == [
        "error: the leader is not ready for CDC:",
        ("  - binlog_row_metadata is MINIMAL, must be FULL: set binlog-row-metadata=FULL (or SET GLOBAL "
         "binlog_row_metadata='FULL')"),
    ]

    changed = lab.primary(binlog, "--status-pos", "3527", "--set", "binlog_row_value_options=PARTIAL_JSON")
    result = run_cli("cdc-producer", str(lab.profile(changed, "mysql")))
    assert result.returncode == 5
    assert refusal(result).splitlines()[-1] == (
        "error: a partial JSON update of mysql.t.column #2 (binlog_row_value_options=PARTIAL_JSON) was logged "
        "without the column's old value in the before-image (binlog_row_image is not FULL in the session that "
        "wrote it): the new value cannot be known; SET GLOBAL binlog_row_image='FULL' on the leader and make sure "
        "no session overrides it"
    )
    assert lab.records() == []
    requests = changed.requests()
    assert [r for r in requests if r.startswith("binlog_dump")] == [
        f"binlog_dump file={FILE} pos=3527 flags=0 server_id=5401"]
    # 8.0 does not know SHOW BINARY LOG STATUS (8.2+): the producer falls back to SHOW MASTER STATUS.
    at = requests.index("query SHOW BINARY LOG STATUS")
    assert requests[at + 1:at + 3] == [
        "error 1064 You have an error in your SQL syntax; check the manual that corresponds to your MySQL server "
        "version for the right syntax to use near 'BINARY LOG STATUS' at line 1",
        "query SHOW MASTER STATUS"]
