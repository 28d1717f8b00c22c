"""TLS in PyMySQL's PREFERRED mode (no TLS options in the profile): one shared context, built only when used.

cdc_stream.mysql.SharedTlsConnection defers PyMySQL's default context to the first TLS
handshake and shares it; these tests check that a TLS leader still gets TLS on every
connection (the plain ones and the binlog stream's), with PyMySQL's own settings, and that
a server without TLS makes no context at all.
"""

from __future__ import annotations

import ssl
import subprocess

import pymysql
import pytest
from harness import Server

from cdc_producer.binlog import Position, leader_info, open_binlog
from cdc_stream.mysql import SharedTlsConnection, connect
from cdc_stream.profile import LeaderDatabase


@pytest.fixture(scope="module")
def tls_leader(tmp_path_factory):
    base = tmp_path_factory.mktemp("tls-leader")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=cdc-test",
         "-keyout", str(base / "key.pem"), "-out", str(base / "cert.pem")],
        check=True, capture_output=True,
    )
    with pytest.MonkeyPatch.context() as mp:  # only this server: docker/install.sh passes these to mariadbd
        mp.setenv("CDC_MARIADB_ARGS", f"--ssl-cert={base / 'cert.pem'} --ssl-key={base / 'key.pem'}")
        server = Server("tls-leader", base / "server").start()
    yield server
    server.stop()


def _db(server: Server) -> LeaderDatabase:
    return LeaderDatabase(ip_or_host="127.0.0.1", port=server.port, user="root", password="", server_id=5499)


def _cipher(conn: pymysql.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        return cur.fetchone()[1]


def test_tls_leader_gets_tls_on_every_connection_with_one_context(tls_leader):
    a = connect(_db(tls_leader), "leader")
    b = connect(_db(tls_leader), "leader", autocommit=True)
    try:
        assert _cipher(a) and _cipher(b)
        assert isinstance(a._sock, ssl.SSLSocket) and a.ctx is b.ctx is SharedTlsConnection._preferred
        # PyMySQL's PREFERRED-mode settings, unchanged: no verification without a CA.
        assert a.ctx.verify_mode == ssl.CERT_NONE and a.ctx.check_hostname is False
        assert a.ctx.options & ssl.OP_NO_SSLv3
        info = leader_info(a)
    finally:
        a.close()
        b.close()
    tls_leader.execute("CREATE DATABASE IF NOT EXISTS tlsdb", "CREATE TABLE IF NOT EXISTS tlsdb.t (id INT PRIMARY KEY)")
    start = Position(gtid_set=tls_leader.gtid())
    tls_leader.execute("INSERT INTO tlsdb.t VALUES (1)")
    binlog = open_binlog(_db(tls_leader), info, start)
    try:
        while (ev := binlog.fetchone()) is not None and type(ev).__name__ != "WriteRowsEvent":
            pass
        assert ev is not None
        for conn in (binlog._stream_connection, binlog._ctl_connection):
            assert isinstance(conn._sock, ssl.SSLSocket) and conn.ctx is SharedTlsConnection._preferred
    finally:
        binlog.close()


def test_producer_streams_from_a_tls_leader(tls_leader, tmp_path):
    from conftest import Pipeline

    tls_leader.execute("DROP DATABASE IF EXISTS flvDb")
    p = Pipeline(tmp_path, tls_leader, tls_leader)
    try:
        p.start_producer()
        tls_leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.t (id INT PRIMARY KEY, s VARCHAR(10))",
                           "INSERT INTO flvDb.t VALUES (1, 'tls')")
        p.wait_published()
        adds = [e["operation"]["Add"]["rows"] for e in p.events() if "Add" in e["operation"]]
        assert adds == [[{"cols": [{"SignedInteger": 1}, {"String": "tls"}]}]]
    finally:
        p.close()


def test_server_without_tls_builds_no_context(leader):
    conn = connect(_db(leader), "leader")
    try:
        assert not _cipher(conn)
        assert conn.__dict__["_ctx"] is SharedTlsConnection._LAZY  # never needed, never built
    finally:
        conn.close()


def test_a_tls_follower_session_announces_bulk_execution_and_runs_it(tls_leader):
    """The follower's connection announces bulk operations in the handshake response, which PREFERRED mode
    sends after a TLS request repeating its first 32 bytes: both carry the capability, and the session runs
    a bulk INSERT over TLS."""
    from cdc_consumer.follower import connect_follower, probe
    from cdc_consumer.parameters import LONGLONG, param_row
    from cdc_stream.mysql import prepare, read_result, send_bulk
    from cdc_stream.profile import FollowerDatabase

    conn = connect_follower(FollowerDatabase(ip_or_host="127.0.0.1", port=tls_leader.port, user="root", password=""))
    try:
        assert _cipher(conn) and isinstance(conn._sock, ssl.SSLSocket)
        assert conn.bulk_operations is True and probe(conn).bulk is True
        with conn.cursor() as cur:
            cur.execute("CREATE OR REPLACE DATABASE tls_bulk")
            cur.execute("CREATE TABLE tls_bulk.t (id BIGINT PRIMARY KEY)")
        stmt_id, _ = prepare(conn, "INSERT INTO tls_bulk.t VALUES (?)")
        rows = [param_row([{"SignedInteger": i}])[1] for i in range(5)]
        assert read_result(conn, send_bulk(conn, stmt_id, LONGLONG, rows)) == 5
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM tls_bulk.t")
            assert cur.fetchall() == ((5,),)
            cur.execute("DROP DATABASE tls_bulk")
    finally:
        conn.close()
