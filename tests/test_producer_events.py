"""What the real cdc-producer publishes for what a native replica needs beside the rows: the leader's own
binlog events and checks on row events, the leader session, error code and exact bytes on Query
events (passwords hashed), XA transactions held from XA PREPARE to XA COMMIT (also across a restart),
rows rolled back to a savepoint, and MariaDB's COMPRESSED columns. Real MariaDB, the real CLI, the
exact events on the topic (the unit tests of the same logic are in tests/test_producer_machine.py and
tests/test_statements.py; the compatibility matrix runs the whole pipeline against a native replica).
"""

from __future__ import annotations

import base64
import hashlib
import re
import sqlite3
import zlib

import pymysql
import pytest
from harness import Cli, run_cli, wait_for
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import QueryEvent
from pymysqlreplication.row_event import WriteRowsEvent

from cdc_consumer.binlog_replay import ending_statement, rows_statement, split_format
from cdc_producer import library_patches
from cdc_stream.errors import DataError

DB = "pe"
FORMAT_DESCRIPTION, TABLE_MAP, WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS = 15, 19, 23, 24, 25


def binlog_events(field: str) -> list[bytes]:
    """The binlog events a row event's `binlog` field holds, each as the leader wrote it."""
    data = base64.b64decode(field)
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 9:pos + 13], "little")
        out.append(data[pos:pos + size])
        pos += size
    assert pos == len(data)
    return out


def checksum_ok(event: bytes) -> bool:
    return zlib.crc32(event[:-4]).to_bytes(4, "little") == event[-4:]


def rows_of(events: list[dict], db: str = DB) -> list[dict]:
    return [e for e in events if f"/{db}/" in e["uri"] and "Query" not in e["operation"]]


def queries(events: list[dict]) -> list[dict]:
    return [e for e in events if "Query" in e["operation"]]


def close_rolling_back_prepared(leader, conn) -> None:
    """Close an XA session; an XA transaction a failed test left prepared is rolled back (it would outlive the
    session and hold its locks, failing the next tests' clean-up)."""
    conn.close()
    for fmt, gtrid_len, _bqual_len, data in leader.query("XA RECOVER"):
        leader.execute(f"XA ROLLBACK X'{data[:gtrid_len].hex()}',X'{data[gtrid_len:].hex()}',{fmt}")


@pytest.fixture
def producer(pipeline):
    pipeline.leader.execute(f"DROP DATABASE IF EXISTS {DB}")
    profile = pipeline.producer_profile(filters=f'include_dbs = ["{DB}"]')
    pipeline.start_producer(profile)
    return pipeline


def test_row_events_carry_the_leaders_binlog_events_and_checks(producer, follower):
    leader = producer.leader
    leader.execute(f"CREATE DATABASE {DB}",
                   f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(20), CHECK (v <> 'bad'))",
                   f"CREATE TABLE {DB}.c (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES {DB}.t (id))")
    conn = leader.connect(DB)
    with conn.cursor() as cur:
        for sql in ("BEGIN", "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
                    "SET foreign_key_checks = 0, check_constraint_checks = 0",
                    "INSERT INTO c VALUES (10, 99)", "UPDATE t SET v = 'bad' WHERE id = 1", "COMMIT"):
            cur.execute(sql)
    conn.close()
    leader.execute(f"DELETE FROM {DB}.t WHERE id = 2")
    producer.wait_published()
    add_t, add_c, update_t, delete_t = rows_of(producer.events())
    assert [next(iter(e["operation"])) for e in (add_t, add_c, update_t, delete_t)] == ["Add", "Add", "Update",
                                                                                      "Delete"]
    assert "checks" not in add_t and "checks" not in delete_t
    assert add_c["checks"] == update_t["checks"] == {"foreign_keys": False, "check_constraints": False}

    binlog = (leader.dir / "data" / add_t["bn_file"]["fileName"]).read_bytes()
    for event, first in ((add_t, True), (add_c, False), (update_t, False), (delete_t, True)):
        parts = binlog_events(event["binlog"])
        assert [p[4] for p in parts] == ([FORMAT_DESCRIPTION] if first else []) + [TABLE_MAP, {
            "Add": WRITE_ROWS, "Update": UPDATE_ROWS, "Delete": DELETE_ROWS}[next(iter(event["operation"]))]]
        assert all(checksum_ok(p) for p in parts)
        table_map, rows = parts[-2:]
        end = event["bn_file"]["offset"]
        if event["txn"]["last"]:  # its bn_file is the commit's end: the rows event ends before the XID event
            end = binlog.index(table_map + rows) + len(table_map + rows)
            xid_size = int.from_bytes(binlog[end + 9:end + 13], "little")
            assert binlog[end + 4] == 16 and end + xid_size == event["bn_file"]["offset"]  # XID_EVENT
        assert binlog[end - len(rows) - len(table_map):end] == table_map + rows  # byte for byte
        if first:  # the dump's copy of the binlog's format description: the same, but for its `created` time
            file_fde = binlog[4:4 + int.from_bytes(binlog[4 + 9:4 + 13], "little")]
            assert len(parts[0]) == len(file_fde) and parts[0][19:19 + 52] == file_fde[19:19 + 52]
            assert parts[0][19 + 56:-4] == file_fde[19 + 56:-4]  # (version, post-header lengths, checksum kind)

    # A follower of the same kind replays them as cdc-consumer does (cdc_consumer/replayer.py): the leader's
    # format description, then each record's events in a BINLOG statement that ends the leader's statement.
    follower.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}",
                     f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(20), CHECK (v <> 'bad'))",
                     f"CREATE TABLE {DB}.c (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES {DB}.t (id))")
    conn = follower.connect()
    leader_format = None
    with conn.cursor() as cur:
        for batch in ((add_t, add_c, update_t), (delete_t,)):
            cur.execute("BEGIN")
            for event in batch:
                carried, events = split_format(event["binlog"])
                if carried is not None:
                    leader_format = carried
                    cur.execute(leader_format.statement())
                assert leader_format is not None  # the first record of a transaction carries it
                cur.execute(rows_statement(ending_statement(events, leader_format)).sql)
            cur.execute("COMMIT")
    conn.close()
    for table in ("t", "c"):
        assert follower.rows(DB, table) == leader.rows(DB, table)


def test_query_events_carry_the_leader_session_error_code_and_exact_bytes(producer):
    leader = producer.leader
    leader.execute(f"CREATE DATABASE {DB}")
    latin1 = pymysql.connect(host="127.0.0.1", port=leader.port, user="root", password="", database=DB,
                             autocommit=True, charset="latin1")
    with latin1.cursor() as cur:
        cur.execute("CREATE TABLE l1 (s VARCHAR(10) CHARACTER SET latin1 DEFAULT 'é') COMMENT 'Grüße'")
        cur.execute("SET character_set_client = binary")
        latin1.query(b"CREATE TABLE b1 (s VARBINARY(4) DEFAULT '\xff\x00')")  # not text in any charset
    latin1.close()
    conn = leader.connect(DB)
    with conn.cursor() as cur:
        for sql in ("SET sql_mode = 'ANSI_QUOTES'", 'CREATE TABLE "q" ("id" INT)', "SET sql_mode = DEFAULT",
                    "SET time_zone = '+05:00', auto_increment_increment = 5, foreign_key_checks = 0, "
                    "unique_checks = 0, check_constraint_checks = 0, sql_auto_is_null = 1",
                    "SET TIMESTAMP = 1000000000",
                    "CREATE TABLE tz (ts TIMESTAMP DEFAULT '2020-01-01 00:00:00')",
                    "SET TIMESTAMP = DEFAULT", "CREATE VIEW v2 AS SELECT 1 AS one"):
            cur.execute(sql)
        with pytest.raises(pymysql.err.OperationalError) as partial:
            cur.execute("DROP VIEW v1, v2")
        assert partial.value.args[0] == 4092
    conn.close()
    producer.wait_published()
    by_text = {q["operation"]["Query"]: q for q in queries(producer.events())}

    l1 = by_text["CREATE TABLE l1 (s VARCHAR(10) CHARACTER SET latin1 DEFAULT 'é') COMMENT 'Grüße'"]
    assert (l1["session"]["character_set_client"], l1["session"]["collation_connection"]) == (8, 8)
    assert "query_b64" not in l1 and "error_code" not in l1
    (b1,) = [q for q in by_text.values() if q["operation"]["Query"].startswith("CREATE TABLE b1")]
    assert base64.b64decode(b1["query_b64"]) == b"CREATE TABLE b1 (s VARBINARY(4) DEFAULT '\xff\x00')"
    assert b1["session"]["character_set_client"] == 63
    assert by_text['CREATE TABLE "q" ("id" INT)']["session"]["sql_mode"] == 4  # ANSI_QUOTES alone
    tz = by_text["CREATE TABLE tz (ts TIMESTAMP DEFAULT '2020-01-01 00:00:00')"]["session"]
    assert {k: tz[k] for k in tz if k not in ("sql_mode", "collation_server")} == {
        "character_set_client": 45, "collation_connection": 45, "time_zone": "+05:00", "auto_increment_increment": 5,
        "auto_increment_offset": 1, "foreign_key_checks": False, "unique_checks": False,
        "check_constraint_checks": False, "sql_auto_is_null": True, "explicit_defaults_for_timestamp": True,
        "timestamp_us": 1000000000000000}
    (drop,) = [q for text, q in by_text.items() if text.startswith("DROP VIEW")]
    assert drop["error_code"] == 4092


def test_no_clear_text_password_reaches_the_topic(pipeline):
    leader = pipeline.leader
    account = "pe_account"
    leader.execute(f"DROP USER IF EXISTS '{account}'@'%'")
    pipeline.start_producer(pipeline.producer_profile(filters=""))
    try:
        leader.execute(f"CREATE USER '{account}'@'%' IDENTIFIED BY 'sup3r-secret'",
                       f"ALTER USER '{account}'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('0ther-secret')")
        pipeline.wait_published()
        create, alter = [q["operation"]["Query"] for q in queries(pipeline.events()) if account in q["operation"]["Query"]]
    finally:
        leader.execute(f"DROP USER IF EXISTS '{account}'@'%'")
    native = "*" + hashlib.sha1(hashlib.sha1(b"sup3r-secret").digest()).hexdigest().upper()
    assert create == f"CREATE USER '{account}'@'%' IDENTIFIED BY PASSWORD '{native}'"
    assert alter == (f"ALTER USER '{account}'@'%' IDENTIFIED VIA mysql_native_password USING "
                     f"'*{hashlib.sha1(hashlib.sha1(b'0ther-secret').digest()).hexdigest().upper()}'")
    db = sqlite3.connect(pipeline.stream_path / "stream.db")
    try:
        everything = b"".join(bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode()
                              for table, in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                              for row in db.execute(f'SELECT * FROM "{table}"') for v in row)
    finally:
        db.close()
    assert b"secret" not in everything


def test_an_xa_transaction_is_held_until_its_commit_also_across_a_producer_restart(pipeline):
    leader = pipeline.leader
    leader.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}",
                   f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v INT)")
    profile = pipeline.producer_profile(filters=f'include_dbs = ["{DB}"]')
    producer = pipeline.start_producer(profile)
    xa = leader.connect(DB)
    before_prepare = leader.gtid()
    try:
        with xa.cursor() as cur:
            for sql in ("XA START 'r1'", "INSERT INTO t VALUES (1, 1)", "UPDATE t SET v = 2 WHERE id = 1",
                        "XA END 'r1'", "XA PREPARE 'r1'"):
                cur.execute(sql)
        prepare_gtid = leader.gtid()
        leader.execute(f"INSERT INTO {DB}.t VALUES (2, 2)")
        pipeline.wait_published()
        assert producer.stop() == 0
        # It says where a restart resumes, and why: the binlog again from before the held XA PREPARE.
        assert re.fullmatch(
            rf"stopped: published \d+ transactions \(\d+ events\); resume at gtid {leader.gtid()} \(reading again "
            rf"from {before_prepare} for 1 prepared XA transaction\(s\)\)", producer.lines[-1]), producer.lines[-1]
        producer = pipeline.start_producer(profile)
        with xa.cursor() as cur:
            cur.execute("XA COMMIT 'r1'")
        commit_gtid = leader.gtid()
        pipeline.wait_published()
    finally:
        close_rolling_back_prepared(leader, xa)
    plain, xa_insert, xa_update = rows_of(pipeline.events())
    assert plain["operation"]["Add"]["rows"] == [{"cols": [{"SignedInteger": 2}, {"SignedInteger": 2}]}]
    (held,) = plain["xa_pending"]
    assert (held["xid"], held["gtid"]) == ("X'7231',X'',1", prepare_gtid)
    assert [e["gtid"] for e in (xa_insert, xa_update)] == [commit_gtid, commit_gtid]
    assert [e["txn"] for e in (xa_insert, xa_update)] == [{"id": commit_gtid, "index": 0, "last": False},
                                                          {"id": commit_gtid, "index": 1, "last": True}]
    assert xa_update["gtid_set"] == commit_gtid and "xa_pending" not in xa_update
    assert [e["sequence"] for e in pipeline.events()] == list(range(len(pipeline.events())))  # nothing twice
    assert [p[4] for p in binlog_events(xa_insert["binlog"])] == [FORMAT_DESCRIPTION, TABLE_MAP, WRITE_ROWS]


def test_an_xa_commit_prepared_before_the_producer_started_stops_it_and_a_snapshot_is_the_fix(pipeline):
    leader = pipeline.leader
    leader.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}",
                   f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v INT)")
    xa = leader.connect(DB)
    try:
        with xa.cursor() as cur:
            for sql in ("XA START 'early'", "INSERT INTO t VALUES (1, 1)", "XA END 'early'", "XA PREPARE 'early'"):
                cur.execute(sql)
        profile = pipeline.producer_profile(filters=f'include_dbs = ["{DB}"]', extra="")
        producer = pipeline.start_producer(profile)
        start = leader.gtid()
        with xa.cursor() as cur:
            cur.execute("XA COMMIT 'early'")
    finally:
        close_rolling_back_prepared(leader, xa)
    wait_for(lambda: producer.exit_code() is not None, 30, "the producer to stop")
    assert producer.exit_code() == 5
    assert producer.lines[-1] == (
        f"error: XA COMMIT of 'early' (GTID {leader.gtid()}) commits a transaction prepared before the position this "
        f"producer started reading at (gtid {start}): its rows are not in the binlog it reads, so they would be lost "
        "to the follower. Re-snapshot the tables that transaction wrote (cdc-producer PROFILE --snapshot "
        "db.table ...): the stream then goes on past this XA COMMIT")
    # Only the initial snapshot (its table, not yet the prepared row) is on the topic: nothing past the commit.
    assert [("snapshot" in e, "Query" in e["operation"]) for e in pipeline.events()] == [(True, True)] * 3
    again = run_cli("cdc-producer", str(profile), "--check")
    assert again.returncode == 0
    fixed = Cli(["cdc-producer", str(profile), "--snapshot", f"{DB}.t"])
    pipeline.procs.append(fixed)
    fixed.wait_line("streaming from")
    leader.execute(f"INSERT INTO {DB}.t VALUES (2, 2)")
    pipeline.wait_published()
    rows = [r["cols"] for e in rows_of(pipeline.events()) for r in e["operation"]["Add"]["rows"]]
    assert rows == [[{"SignedInteger": 1}, {"SignedInteger": 1}], [{"SignedInteger": 2}, {"SignedInteger": 2}]]


def test_rows_rolled_back_to_a_savepoint_are_dropped_also_from_a_chunk_already_handed_on(pipeline):
    leader = pipeline.leader
    leader.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}",
                   f"CREATE TABLE {DB}.i (id INT PRIMARY KEY, v VARCHAR(60)) ENGINE=InnoDB",
                   f"CREATE TABLE {DB}.m (id INT PRIMARY KEY) ENGINE=MyISAM")
    producer = pipeline.start_producer(pipeline.producer_profile(filters=f'include_dbs = ["{DB}"]'))
    consumer = pipeline.start_consumer(pipeline.consumer_profile(filters=f'include_dbs = ["{DB}"]'))
    conn = leader.connect(DB)
    with conn.cursor() as cur:
        for sql in ("BEGIN", "INSERT INTO i VALUES (1, 'kept')", "SAVEPOINT s", "INSERT INTO m VALUES (1)",
                    # ~2.5 MB of rows: handed on in chunks before the ROLLBACK TO is read
                    "INSERT INTO i SELECT seq, REPEAT('x', 60) FROM seq_2_to_40000",
                    "ROLLBACK TO s", "INSERT INTO i VALUES (40001, 'kept')", "SAVEPOINT s2",
                    "INSERT INTO i VALUES (40002, 'rolled back, in memory')", "INSERT INTO m VALUES (2)",
                    "ROLLBACK TO SAVEPOINT s2", "COMMIT"):
            cur.execute(sql)
    conn.close()
    pipeline.wait_synced(timeout=120)
    # The leader logged the MyISAM rows as transactions of their own, before the InnoDB one: its GTID is the last.
    domain_server, last = leader.gtid().rsplit("-", 1)
    before = f"{domain_server}-{int(last) - 1}"
    assert (f"ROLLBACK TO s undid rows already handed on: reading the transaction again from gtid {before} without "
            "them") in producer.lines, [line for line in producer.lines if "undid" in line]
    events = rows_of(pipeline.events())
    txn = events[-1]["txn"]["id"]
    starts = [i for i, e in enumerate(events) if e["txn"]["id"] == txn and e["txn"]["index"] == 0]
    assert len(starts) == 2  # a partial copy (abandoned: the consumer drops it), then the whole transaction
    assert not any(e["txn"]["last"] for e in events[starts[0]:starts[1]])
    complete = events[starts[1]:]
    assert [r["cols"][0] for e in complete for r in e["operation"]["Add"]["rows"]] == [
        {"SignedInteger": 1}, {"SignedInteger": 40001}]
    assert pipeline.follower.rows(DB, "i") == leader.rows(DB, "i") == [(1, "kept"), (40001, "kept")]
    assert pipeline.follower.rows(DB, "m") == leader.rows(DB, "m") == [(1,), (2,)]
    assert consumer.exit_code() is None


def test_compressed_columns_are_decoded(producer):
    leader = producer.leader
    leader.execute(f"CREATE DATABASE {DB}",
                   f"CREATE TABLE {DB}.cc (id INT PRIMARY KEY, v VARCHAR(30) COMPRESSED, b BLOB COMPRESSED, "
                   "t TEXT COMPRESSED CHARACTER SET latin1, vb VARBINARY(300) COMPRESSED)",
                   f"INSERT INTO {DB}.cc VALUES (1, 'hello', REPEAT('x', 1000), 'é', 'ab'), (2, '', NULL, NULL, ''),"
                   " (3, NULL, 'short', REPEAT('é', 200), REPEAT('z', 200))")
    producer.wait_published()
    (add,) = rows_of(producer.events())
    blob = lambda b: {"Blob": base64.b64encode(b).decode()}
    assert [r["cols"] for r in add["operation"]["Add"]["rows"]] == [
        [{"SignedInteger": 1}, {"String": "hello"}, blob(b"x" * 1000), {"String": "é"}, blob(b"ab")],
        [{"SignedInteger": 2}, {"String": ""}, "Null", "Null", blob(b"")],
        [{"SignedInteger": 3}, "Null", blob(b"short"), {"String": "é" * 200}, blob(b"z" * 200)],
    ]


def test_a_table_map_the_library_cannot_read_stops_the_stream_only_for_a_table_the_filters_let_through(
        leader, monkeypatch):
    """Read with the type of COMPRESSED columns unknown again (as before library_patches learned it):
    the excluded database's table map is skipped, the included one stops with one line naming it."""
    leader.execute(f"DROP DATABASE IF EXISTS {DB}", f"DROP DATABASE IF EXISTS {DB}_x")
    start = leader.gtid()
    leader.execute(f"CREATE DATABASE {DB}_x", f"CREATE TABLE {DB}_x.cc (id INT PRIMARY KEY, v BLOB COMPRESSED)",
                   f"INSERT INTO {DB}_x.cc VALUES (1, 'hidden')",
                   f"CREATE DATABASE {DB}", f"CREATE TABLE {DB}.plain (id INT PRIMARY KEY)",
                   f"INSERT INTO {DB}.plain VALUES (1)",
                   f"CREATE TABLE {DB}.cc (id INT PRIMARY KEY, v BLOB COMPRESSED)",
                   f"INSERT INTO {DB}.cc VALUES (1, 'seen')")
    monkeypatch.setattr(library_patches, "_METADATA_AS", {})

    def read(excluded: library_patches.ExcludedSchemas) -> list[str]:
        reader = BinLogStreamReader(
            connection_settings={"host": "127.0.0.1", "port": leader.port, "user": "root", "password": ""},
            server_id=5499, is_mariadb=True, auto_position=start, blocking=False, ignored_schemas=excluded,
            only_events=[WriteRowsEvent, QueryEvent])
        try:
            return [f"{ev.schema}.{ev.table}" for ev in reader if isinstance(ev, WriteRowsEvent)]
        finally:
            reader.close()

    db_excluded = library_patches.ExcludedSchemas(lambda db: db.endswith("_x"), lambda db, t: db.endswith("_x"))
    with pytest.raises(DataError) as stop:
        read(db_excluded)
    assert str(stop.value) == (
        f"the leader's table map of `{DB}`.`cc` cannot be read (UnreadableTableMap: column type 140 is not one "
        "python-mysql-replication can read): a column type python-mysql-replication does not know; exclude the "
        "table in [filters] exclude_tables if its changes need not flow, or change the column's type on the leader")
    tables_excluded = library_patches.ExcludedSchemas(lambda db: False, lambda db, t: t == "cc")
    assert read(tables_excluded) == [f"{DB}.plain"]


def test_events_binlog_off_publishes_rows_without_binlog_events_and_the_follower_gets_them_as_sql(pipeline):
    """[events] binlog = false: a smaller topic; the consumer applies those rows as SQL, exactly."""
    pipeline.leader.execute(f"DROP DATABASE IF EXISTS {DB}")
    filters = f'include_dbs = ["{DB}"]'
    pipeline.start_producer(pipeline.producer_profile(filters=filters, extra="[events]\nbinlog = false"))
    consumer = pipeline.start_consumer(pipeline.consumer_profile(filters=filters))
    pipeline.leader.execute(f"CREATE DATABASE {DB}", f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARBINARY(8))",
                            f"INSERT INTO {DB}.t VALUES (1, 0x00ff), (2, NULL)", f"UPDATE {DB}.t SET v = 0x61 WHERE id = 2",
                            f"DELETE FROM {DB}.t WHERE id = 1")
    pipeline.wait_synced()
    rows = rows_of(pipeline.events())
    assert [next(iter(e["operation"])) for e in rows] == ["Add", "Update", "Delete"]
    assert not [e for e in rows if "binlog" in e]
    assert pipeline.follower.rows(DB, "t") == pipeline.leader.rows(DB, "t") == [(2, b"a")]
    assert consumer.stop() == 0


def test_a_follower_table_with_triggers_stops_the_consumer_naming_events_binlog_when_the_producer_left_them_out(
        pipeline):
    """[events] binlog = false: rows of a table with triggers cannot go through SQL; the error says why (the
    producer's setting, not "snapshot rows") and the fix, and nothing is applied."""
    pipeline.leader.execute(f"DROP DATABASE IF EXISTS {DB}")
    filters = f'include_dbs = ["{DB}"]'
    pipeline.start_producer(pipeline.producer_profile(filters=filters, extra="[events]\nbinlog = false"))
    pipeline.leader.execute(f"CREATE DATABASE {DB}")
    pipeline.leader.execute("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE log (id INT)",
                            "CREATE TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW INSERT INTO log VALUES (NEW.id)",
                            "INSERT INTO t VALUES (1)", db=DB)
    pipeline.wait_published()
    offset = pipeline.end_offset() - 2  # the INSERT's transaction: its row on t, then the trigger's on log
    result = run_cli("cdc-consumer", str(pipeline.consumer_profile(filters=filters, extra='[replay]\nrows = "binlog"')))
    [line] = [l for l in result.stderr.decode().splitlines() if l.startswith("error:")]
    assert (result.returncode, line) == (5, (
        f"error: offset {offset} (transaction {pipeline.leader.gtid()}) cannot be applied: Add on {DB}.t: the follower's "
        "table has triggers (t_ai) without cdc-consumer's guard, which SQL would fire again on replicated rows (the "
        "leader's row events already hold what its triggers did; a native replica does not fire them); its rows go "
        "through SQL because the event carries no binlog events (a producer with [events] binlog = false, or rows a "
        "resumed snapshot trimmed); nothing of the transaction was applied; fix: recreate t_ai on the follower with "
        "the body wrapped as `IF @cdc_consumer IS NULL THEN <body>; END IF` (as cdc-consumer writes the triggers it "
        "replays with [replay] triggers = \"guarded\", the default when rows take SQL); or if the producer's profile "
        "says [events] binlog = false, set it to true so that later row events carry them; for this one, drop what "
        "the SQL path cannot reproduce on the follower"))
    assert "Traceback" not in result.stderr.decode()
    assert pipeline.follower.rows(DB, "t") == [] and pipeline.follower.rows(DB, "log") == []
    assert pipeline.checkpoint() == offset
