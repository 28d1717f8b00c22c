"""A statement's context events (INTVAR, RAND, USER_VAR) -> the values its Query event's session carries.

Bodies are built by hand, and some are MariaDB 10.11's own (recorded from `SET @s = _latin1 X'E9FF00'`
... `INSERT ... VALUES (CONCAT(@s, ...), @r + RAND() + LAST_INSERT_ID())` in a STATEMENT-format session,
as mariadb-binlog printed them: see each case)."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from mysql8_binlog import MAGIC, library_events
from mysql8_primary import with_crc
from test_values import schema_validator

from cdc_producer import library_patches
from cdc_producer.context import (
    INTVAR_EVENT,
    RAND_EVENT,
    USER_VAR_EVENT,
    InsertId,
    RandSeeds,
    Unreadable,
    read_context,
    unreadable,
    with_context,
)
from cdc_stream.events import ChangeEvent, QuerySession, UserVar, decode_event, encode_event


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def user_var(name: bytes, kind: int | None = None, collation: int = 8, value: bytes = b"",
             flags: bytes = b"") -> bytes:
    """A USER_VAR body: NULL when `kind` is None."""
    head = struct.pack("<I", len(name)) + name
    if kind is None:
        return head + b"\x01"
    return head + b"\x00" + struct.pack("<BII", kind, collation, len(value)) + value + flags


# (body as MariaDB 10.11 wrote it, what mariadb-binlog printed, what it reads as)
RECORDED = [
    (INTVAR_EVENT, "010000000000000000", "SET LAST_INSERT_ID=0", InsertId(True, 0)),
    (INTVAR_EVENT, "020100000000000000", "SET INSERT_ID=1", InsertId(False, 1)),
    (RAND_EVENT, "2e17fc0a0000000003c8480600000000", "SET @@RAND_SEED1=184293166, @@RAND_SEED2=105433091",
     RandSeeds(184293166, 105433091)),
    (USER_VAR_EVENT, "010000007300000800000003000000e9ff00",
     "SET @`s`:=_latin1 X'E9FF00' COLLATE `latin1_swedish_ci`", UserVar("s", "string", b64(b"\xe9\xff\x00"), 8)),
    (USER_VAR_EVENT, "010000006900020800000008000000fbffffffffffffff00", "SET @`i`:=-5", UserVar("i", "int", "-5")),
    (USER_VAR_EVENT, "010000007500020800000008000000070000000000000001", "SET @`u`:=7 (CAST(7 AS UNSIGNED))",
     UserVar("u", "int", "7", unsigned=True)),
    (USER_VAR_EVENT, "010000006e01", "SET @`n`:=NULL", UserVar("n")),
    (USER_VAR_EVENT, "01000000640004080000000400000003028132", "SET @`d`:=1.50", UserVar("d", "decimal", "1.50")),
    (USER_VAR_EVENT, "02000000643000040800000006000000090080000005", "SET @`d0`:=5 (CAST(5 AS DECIMAL(10,0)))",
     UserVar("d0", "decimal", "5")),
    (USER_VAR_EVENT, "030000006e65670004080000000d000000170c73eb655bcaf8a432eafff3",
     "SET @`neg`:=-12345678901.123456789012", UserVar("neg", "decimal", "-12345678901.123456789012")),
    (USER_VAR_EVENT, "0100000072000108000000080000009a9999999999b93f", "SET @`r`:=0.1",
     UserVar("r", "real", "0.1")),
]


@pytest.mark.parametrize(("event_type", "body", "printed", "expected"), RECORDED, ids=[r[2] for r in RECORDED])
def test_mariadbs_own_context_events_read_as_mariadb_binlog_prints_them(event_type, body, printed, expected):
    assert read_context(event_type, bytes.fromhex(body)) == expected


def test_each_kind_of_user_variable_value():
    assert read_context(USER_VAR_EVENT, user_var(b"n")) == UserVar("n")
    assert read_context(USER_VAR_EVENT, user_var("é".encode(), 0, 33, "ü".encode())) == \
        UserVar("é", "string", b64("ü".encode()), 33)
    assert read_context(USER_VAR_EVENT, user_var(b"b", 0, 63, b"")) == UserVar("b", "string", "", 63)
    assert read_context(USER_VAR_EVENT, user_var(b"r", 1, 63, struct.pack("<d", -1.5e300))) == \
        UserVar("r", "real", "-1.5e+300")
    big = struct.pack("<Q", (1 << 64) - 1)
    assert read_context(USER_VAR_EVENT, user_var(b"i", 2, 63, big, b"\x00")) == UserVar("i", "int", "-1")
    assert read_context(USER_VAR_EVENT, user_var(b"i", 2, 63, big, b"\x01")) == \
        UserVar("i", "int", str((1 << 64) - 1), unsigned=True)
    assert read_context(USER_VAR_EVENT, user_var(b"i", 2, 63, big)) == UserVar("i", "int", "-1")  # no flags: signed
    # DECIMAL(20,10) -0.0000000001: precision, scale, then the binary form (negative: bits inverted)
    assert read_context(USER_VAR_EVENT, user_var(b"d", 4, 63, bytes([20, 10]) + bytes.fromhex("7ffffffffffffffffffe"))) \
        == UserVar("d", "decimal", "-0.0000000001")
    assert read_context(INTVAR_EVENT, b"\x02" + struct.pack("<Q", (1 << 64) - 1)) == InsertId(False, (1 << 64) - 1)


def test_what_cannot_be_read_is_named():
    assert read_context(USER_VAR_EVENT, user_var(b"row", 3, 63, b"x")) == \
        Unreadable("a user variable @row whose value has type 3, which cdc-producer cannot read")
    assert read_context(USER_VAR_EVENT, user_var(b"s", 0, 8, b"abc")[:-1]) == \
        Unreadable("a truncated event of type 14 (17 bytes)")
    assert read_context(RAND_EVENT, b"\0" * 15) == Unreadable("a truncated event of type 13 (15 bytes)")
    assert read_context(INTVAR_EVENT, b"\x03" + b"\0" * 8) == Unreadable("an INTVAR event of unknown type 3")
    assert read_context(USER_VAR_EVENT, user_var(b"d", 4, 63, bytes([70, 10]) + b"\0" * 4)) == \
        Unreadable("a user variable @d holding a DECIMAL(70,10) of 4 bytes, which cdc-producer cannot read")
    assert read_context(USER_VAR_EVENT, user_var(b"d", 4, 63, bytes([3, 2]) + b"\x81")) == \
        Unreadable("a user variable @d holding a DECIMAL(3,2) of 1 bytes, which cdc-producer cannot read")
    assert unreadable([InsertId(False, 1), Unreadable("x"), UserVar("n"), Unreadable("y")]) == ["x", "y"]


def test_the_context_goes_into_the_statements_session():
    session = QuerySession(sql_mode=4, timestamp_us=1)
    assert with_context(session, []) is session and with_context(None, []) is None
    context = [InsertId(True, 0), InsertId(False, 7), RandSeeds(1, 2), UserVar("s", "string", "6f8A", 8),
               UserVar("n")]
    assert with_context(session, context) == QuerySession(
        sql_mode=4, timestamp_us=1, insert_id=7, last_insert_id=0, rand_seed1=1, rand_seed2=2,
        user_vars=(UserVar("s", "string", "6f8A", 8), UserVar("n")))
    assert with_context(None, [UserVar("x", "int", "1")]) == QuerySession(user_vars=(UserVar("x", "int", "1"),))


def test_the_topic_carries_it_and_events_without_it_are_unchanged():
    plain = ChangeEvent(uri="flv://s/db", sequence=1, operation="Query", query="CREATE TABLE t (i INT)",
                        database="db", session=QuerySession(sql_mode=4))
    assert encode_event(plain) == (b'{"uri":"flv://s/db","sequence":1,"database":"db","session":{"sql_mode":4},'
                                   b'"operation":{"Query":"CREATE TABLE t (i INT)"}}')
    session = QuerySession(sql_mode=4, insert_id=7, rand_seed1=1, rand_seed2=2,
                           user_vars=(UserVar("s", "string", "6f8A", 8), UserVar("u", "int", "7", unsigned=True),
                                      UserVar("n")))
    ev = ChangeEvent(uri="flv://s/db", sequence=1, operation="Query", query="INSERT INTO t VALUES (@s)",
                     database="db", session=session)
    data = encode_event(ev)
    assert b'"session":{"sql_mode":4,"insert_id":7,"rand_seed1":1,"rand_seed2":2,"user_vars":[{"name":"s",' \
           b'"kind":"string","value":"6f8A","collation":8},{"name":"u","kind":"int","value":"7","unsigned":true},' \
           b'{"name":"n"}]}' in data
    assert decode_event(data).session == session
    schema_validator().validate(json.loads(data))


def _event(event_type: int, body: bytes) -> bytes:
    """A binlog event with a CRC32, as a server with binlog_checksum=CRC32 writes it."""
    size = 19 + len(body) + 4
    return with_crc(struct.pack("<IBIIIH", 1795712667, event_type, 1, size, 0, 0) + body + b"\0\0\0\0")


def test_the_producers_stream_reads_them_with_and_without_checksums():
    """The flags byte a USER_VAR event may end with is read only when it is there: never the checksum's first
    byte (the library's UserVarEvent reads one always)."""
    name = next(n for n in (b"v%d" % i for i in range(256))  # a checksum whose first byte says UNSIGNED
                if _event(USER_VAR_EVENT, user_var(n, 2, 63, struct.pack("<q", -5)))[-4] & 1)
    binlog = MAGIC + b"".join([
        _event(USER_VAR_EVENT, user_var(name, 2, 63, struct.pack("<q", -5))),  # signed, no flags byte
        _event(USER_VAR_EVENT, user_var(b"s", 0, 8, b"\xe9\xff\x00")),
        _event(USER_VAR_EVENT, user_var(b"n")),
        _event(INTVAR_EVENT, b"\x02" + struct.pack("<Q", 7)),
        _event(RAND_EVENT, struct.pack("<QQ", 1, 2)),
    ])
    expected = [UserVar(name.decode(), "int", "-5"), UserVar("s", "string", b64(b"\xe9\xff\x00"), 8), UserVar("n"),
                InsertId(False, 7), RandSeeds(1, 2)]
    for checksum in (True, False):
        events = library_events(binlog, checksum=checksum)
        assert all(isinstance(e, library_patches.StatementContextEvent) for e in events)
        assert [e.context for e in events] == expected


@pytest.mark.parametrize("checksum", ["NONE", "CRC32"])
def test_statement_format_dml_runs_with_its_context_through_the_pipeline(pipeline, checksum):
    """The real leader's events, with and without checksums: a signed INT (its flags byte last) and a latin1
    string that is not UTF-8 reach the follower's statement with the leader's values."""
    p = pipeline
    p.leader.execute(f"SET GLOBAL binlog_checksum = '{checksum}'")
    try:
        p.leader.execute("CREATE DATABASE flvDb",
                         "CREATE TABLE flvDb.t (id INT AUTO_INCREMENT PRIMARY KEY, i BIGINT, v VARBINARY(10), l INT)")
        producer, consumer = p.start_producer(), p.start_consumer()
        conn = p.leader.connect("flvDb")
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION binlog_format = 'STATEMENT'")
                cur.execute("SET @i = -5, @s = _latin1 X'E9FF00'")
                cur.execute("INSERT INTO t (i, v, l) VALUES (@i, @s, LAST_INSERT_ID())")
                cur.execute("INSERT INTO t (i, v, l) VALUES (@i - 1, NULL, LAST_INSERT_ID())")
        finally:
            conn.close()
        p.wait_synced()
        assert p.follower.rows("flvDb", "t") == p.leader.rows("flvDb", "t") == [
            (1, -5, b"\xe9\xff\x00", 0), (2, -6, None, 1)]
        sessions = [e["session"] for e in p.events() if e["operation"].get("Query", "").startswith("INSERT")]
        assert [{k: v for k, v in s.items() if k in ("insert_id", "last_insert_id", "user_vars")} for s in sessions] == [
            {"insert_id": 1, "last_insert_id": 0, "user_vars": [{"name": "i", "kind": "int", "value": "-5"},
                                                                {"name": "s", "kind": "string", "value": "6f8A",
                                                                 "collation": 8}]},
            {"insert_id": 2, "last_insert_id": 1, "user_vars": [{"name": "i", "kind": "int", "value": "-5"}]}]
        assert producer.stop() == 0 and consumer.stop() == 0
    finally:
        p.leader.execute("SET GLOBAL binlog_checksum = 'CRC32'")
