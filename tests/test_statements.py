"""The producer's pure readers of what the leader logs: Query-event sessions, exact statement bytes,
account statements without passwords, XA and savepoint statements, COMPRESSED column values.

The real-server counterparts (the same statements logged by MariaDB and read by the real
cdc-producer) are in tests/test_producer_events.py."""

from __future__ import annotations

import base64
import zlib
from types import SimpleNamespace

import pytest

from cdc_producer.accounts import REMOVED_PASSWORD, hide_passwords, native_password_hash
from cdc_producer.columns import uncompress
from cdc_producer.statements import query_session, statement_text
from cdc_producer.xa import readable
from cdc_stream.classify import SavepointStatement, XaStatement, classify, xid_text
from cdc_stream.errors import DataError
from cdc_stream.events import QuerySession


def _xa(sql: str) -> XaStatement | None:
    return classify(sql).xa


def _savepoint(sql: str) -> SavepointStatement | None:
    return classify(sql).savepoint


def query_event(**status) -> SimpleNamespace:
    """A python-mysql-replication QueryEvent's attributes: status variables are present only when logged."""
    return SimpleNamespace(timestamp=1700000000, **status)


def test_the_query_events_status_variables_become_the_session():
    # What MariaDB 10.11 logged for CREATE TABLE after SET time_zone='+05:00', lc_time_names='de_DE',
    # auto_increment_increment=5, foreign_key_checks=0, unique_checks=0, check_constraint_checks=0,
    # sql_auto_is_null=1, system_versioning_insert_history=1 (tests/test_producer_events.py logs it for real).
    ev = query_event(flags2=1291894784, sql_mode=1411383296, auto_increment_increment=5, auto_increment_offset=1,
                     character_set_client=33, collation_connection=33, collation_server=45, time_zone=b"+05:00",
                     lc_time_names_number=4, xid=221)
    assert query_session(ev) == QuerySession(
        sql_mode=1411383296, character_set_client=33, collation_connection=33, collation_server=45,
        time_zone="+05:00", lc_time_names=4, auto_increment_increment=5, auto_increment_offset=1,
        foreign_key_checks=False, unique_checks=False, check_constraint_checks=False, sql_auto_is_null=True,
        explicit_defaults_for_timestamp=True, system_versioning_insert_history=True,
        timestamp_us=1700000000000000)
    # the defaults: checks on, switches off; only what was logged; MariaDB's hrnow gives the microseconds
    plain = query_event(flags2=0, sql_mode=0, character_set_client=45, collation_connection=45, collation_server=45,
                        charset_database_number=8, hrnow=123456)
    assert query_session(plain) == QuerySession(sql_mode=0, character_set_client=45, collation_connection=45,
                                                collation_server=45, collation_database=8,
                                                timestamp_us=1700000000123456)
    assert query_session(query_event(flags2=1 << 28)).sql_if_exists is True
    mysql = query_event(explicit_defaults_ts=2, microseconds=7)  # MySQL's own status variables
    assert (query_session(mysql).explicit_defaults_for_timestamp, query_session(mysql).timestamp_us) == (
        True, 1700000000000007)


LATIN1 = QuerySession(character_set_client=8, sql_mode=0)
UTF8MB4 = QuerySession(character_set_client=45, sql_mode=0)
SJIS = QuerySession(character_set_client=13, sql_mode=0)


def test_a_statement_is_text_when_its_bytes_decode_exactly_in_character_set_client():
    assert statement_text(b"CREATE TABLE l (s VARCHAR(3) DEFAULT '\xe9')", LATIN1).text == \
        "CREATE TABLE l (s VARCHAR(3) DEFAULT 'é')"
    assert statement_text("CREATE TABLE u (s VARCHAR(3) DEFAULT 'é😀')".encode(), UTF8MB4).exact_b64 is None
    # the same bytes are not UTF-8, a binary literal is not text, sjis has no exact Unicode form here
    for raw, session in ((b"CREATE TABLE l (s VARCHAR(3) DEFAULT '\xe9')", UTF8MB4),
                         (b"INSERT INTO b VALUES (_binary'\xff\x00')", UTF8MB4),
                         (b"CREATE TABLE s (v VARCHAR(3) DEFAULT '\x82\xa0')", SJIS),
                         (b"CREATE TABLE n (a INT)", QuerySession())):  # no charset logged: bytes, to be safe
        text = statement_text(raw, session)
        assert base64.b64decode(text.exact_b64 or "") == raw
        assert text.text == raw.decode("utf-8", "replace")


def test_clear_text_passwords_become_the_hash_the_leader_stored():
    # hashes as MariaDB's PASSWORD() computes them
    assert native_password_hash(b"secret1") == "*7C67218EF7410F248763DC99AEDC705367393C4A"
    assert native_password_hash(b"p'w\\2") == "*3D9073D63BD5A5D489CC61E320CF689FCEB17CF5"
    cases = {
        b"CREATE USER 'u1'@'%' IDENTIFIED BY 'secret1', 'u2'@'localhost' IDENTIFIED BY PASSWORD '*0123'":
            b"CREATE USER 'u1'@'%' IDENTIFIED BY PASSWORD '*7C67218EF7410F248763DC99AEDC705367393C4A', "
            b"'u2'@'localhost' IDENTIFIED BY PASSWORD '*0123'",
        b"ALTER USER 'u1'@'%' IDENTIFIED BY 'p''w\\\\2'":
            b"ALTER USER 'u1'@'%' IDENTIFIED BY PASSWORD '*3D9073D63BD5A5D489CC61E320CF689FCEB17CF5'",
        b"GRANT SELECT ON *.* TO u6@'%' IDENTIFIED BY 'secret1' WITH GRANT OPTION":
            b"GRANT SELECT ON *.* TO u6@'%' IDENTIFIED BY PASSWORD '*7C67218EF7410F248763DC99AEDC705367393C4A' "
            b"WITH GRANT OPTION",
        b"create or replace user u7 identified via mysql_native_password using password('secret1') or unix_socket":
            b"create or replace user u7 identified via mysql_native_password using "
            b"'*7C67218EF7410F248763DC99AEDC705367393C4A' or unix_socket",
        b"CREATE USER u4 IDENTIFIED VIA ed25519 USING PASSWORD('secret1')":
            b"CREATE USER u4 IDENTIFIED VIA ed25519 USING PASSWORD(" + REMOVED_PASSWORD + b")",
        b'/* c */ CREATE USER `a``b` IDENTIFIED BY "secret1"':  # "..." is a string unless ANSI_QUOTES
            b"/* c */ CREATE USER `a``b` IDENTIFIED BY PASSWORD '*7C67218EF7410F248763DC99AEDC705367393C4A'",
    }
    for logged, published in cases.items():
        assert hide_passwords(logged) == published
    for untouched in (b"CREATE TABLE identified (`by` INT)", b"SET PASSWORD FOR 'u1'@'%'='*77B4A70CEFD76DB9415F36D2'",
                      b"CREATE USER u IDENTIFIED BY PASSWORD '*7C67218EF7410F248763DC99AEDC705367393C4A'",
                      b"INSERT INTO t VALUES ('IDENTIFIED BY x')"):
        assert hide_passwords(untouched) == untouched


def test_password_literals_are_read_as_the_leader_session_read_them():
    no_backslash_escapes = 1 << 20
    # With NO_BACKSLASH_ESCAPES the backslash is part of the password.
    assert hide_passwords(b"CREATE USER u IDENTIFIED BY 'a\\'", no_backslash_escapes) == \
        b"CREATE USER u IDENTIFIED BY PASSWORD '" + native_password_hash(b"a\\").encode() + b"'"
    assert hide_passwords(b"CREATE USER u IDENTIFIED BY 'a\\n'") == \
        b"CREATE USER u IDENTIFIED BY PASSWORD '" + native_password_hash(b"a\n").encode() + b"'"
    # With ANSI_QUOTES "u" is a name, not a string (and the password is still found).
    assert hide_passwords(b'CREATE USER "u" IDENTIFIED BY \'x\'', 4) == \
        b"CREATE USER \"u\" IDENTIFIED BY PASSWORD '" + native_password_hash(b"x").encode() + b"'"
    # A statement's text on the topic never holds the password, also when it is sent as bytes.
    text = statement_text(b"CREATE USER u IDENTIFIED BY 'secr\xe9t'", UTF8MB4)
    assert b"secr" not in base64.b64decode(text.exact_b64 or "") and "secr" not in text.text


def test_xa_statements_as_the_leader_logs_them():
    assert _xa("XA COMMIT X'786131',X'',1") == XaStatement("COMMIT", "X'786131',X'',1")
    assert _xa("XA ROLLBACK X'786132',X'6271',7") == XaStatement("ROLLBACK", "X'786132',X'6271',7")
    assert _xa("XA END X'786131',X'',1") == XaStatement("END", "X'786131',X'',1")
    assert _xa("xa start 'x1'") == XaStatement("START", xid_text(1, b"x1", b""))
    assert _xa("XA BEGIN 'a','b',3") == XaStatement("START", "X'61',X'62',3")
    assert _xa("XAX") is None and _xa("INSERT INTO xa VALUES (1)") is None
    assert xid_text(7, b"xa2", b"bq") == "X'786132',X'6271',7"
    assert readable("X'786131',X'',1") == "'xa1'" and readable("X'786132',X'6271',7") == "'xa2','bq',7"
    assert readable("X'00ff',X'',1") == "X'00ff',X'',1"


def test_savepoint_statements_as_the_leader_logs_them():
    assert _savepoint("SAVEPOINT `s`") == SavepointStatement("SAVEPOINT", "s")
    assert _savepoint("ROLLBACK TO `My``Sp`") == SavepointStatement("ROLLBACK TO", "my`sp")
    assert _savepoint('ROLLBACK WORK TO SAVEPOINT "a b"') == SavepointStatement("ROLLBACK TO", "a b")
    assert _savepoint("RELEASE SAVEPOINT x;") == SavepointStatement("RELEASE", "x")
    assert _savepoint("ROLLBACK") is None and _savepoint("SAVEPOINTS x y") is None


def test_compressed_column_values():
    text = b"x" * 1000
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    deflated = raw_deflate.compress(text) + raw_deflate.flush()
    assert uncompress(b"\x8a\x03\xe8" + deflated, "b") == text  # 0x80 | raw deflate (8) | 2 length bytes
    assert uncompress(b"\x82\x03\xe8" + zlib.compress(text), "b") == text  # with the zlib wrapper
    assert uncompress(b"\x00hello", "v") == b"hello"  # below column_compression_threshold: stored as is
    assert uncompress(b"", "v") == b""
    with pytest.raises(DataError, match="'b' inflated to 1000 bytes, its header says 999"):
        uncompress(b"\x8a\x03\xe7" + deflated, "b")
    with pytest.raises(DataError, match="does not inflate"):
        uncompress(b"\x8a\x03\xe8" + deflated[:10], "b")
    with pytest.raises(DataError, match="method 9"):
        uncompress(b"\x91\x00", "b")


def test_the_xid_of_a_mariadb_gtid_event():
    """MariaDB's GTID event: seq u64, domain u32, flags u8, [commit_id u64], [formatID u32, gtrid and bqual
    lengths u8, data]: what library_patches.mariadb_gtid_xa reads (python-mysql-replication stops at the flags)."""
    from cdc_producer.library_patches import mariadb_gtid_xa

    def gtid_event(flags: int, tail: bytes) -> SimpleNamespace:
        body = (42).to_bytes(8, "little") + (0).to_bytes(4, "little") + bytes([flags]) + tail
        event = b"\0" * 19 + body + b"CRC!"
        return SimpleNamespace(flags=flags, packet=SimpleNamespace(event_size=len(event),
                                                                   packet=SimpleNamespace(_data=b"\0" + event)))

    xid = (7).to_bytes(4, "little") + bytes([3, 2]) + b"xa2bq"
    assert mariadb_gtid_xa(gtid_event(0x4c, xid + b"\x01\xff")) == (7, b"xa2", b"bq")  # FL_PREPARED_XA (+ extra)
    assert mariadb_gtid_xa(gtid_event(0x8d, xid)) == (7, b"xa2", b"bq")  # FL_COMPLETED_XA
    assert mariadb_gtid_xa(gtid_event(0x4e, (99).to_bytes(8, "little") + xid)) == (7, b"xa2", b"bq")  # + commit id
    assert mariadb_gtid_xa(gtid_event(0x0c, b"\0" * 6)) is None


def test_a_column_type_the_producer_cannot_decode_stops_it_with_the_right_hint():
    from cdc_producer.columns import column_codec

    with pytest.raises(DataError) as vector:
        column_codec(SimpleNamespace(type=242, name="embedding"), "shop.items")
    assert str(vector.value) == (
        "column 'embedding' of shop.items has binlog type 242, which cdc-producer cannot decode; exclude the table "
        "in [filters] exclude_tables if its changes need not flow, or change the column's type on the leader")
    with pytest.raises(DataError, match=r"pre-5\.0 DECIMAL format .* ALTER TABLE \.\.\. FORCE on the leader"):
        column_codec(SimpleNamespace(type=0, name="price"), "shop.old")
