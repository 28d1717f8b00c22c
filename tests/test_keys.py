"""Keys end to end: how the consumer finds the row an UPDATE or DELETE changes.

Tables without a primary key (duplicates, values that compare equal under a
collation or only approximately as numbers), composite primary keys, updates
of the primary key and of unique secondary keys, and identifiers that need
quoting (backticks, quotes, unicode, %, reserved words, '/' and '.') in the
database, table and column names. The follower must end up exactly equal to
the leader.
"""

from __future__ import annotations

import json

import pytest

DB = "cdc_keys"
ODD_DB = "odd`db 'q' \"dq\" ünï %s 100%"
SYNC_TIMEOUT = 180.0


def filters(*dbs: str) -> str:
    # JSON strings are valid TOML basic strings (quotes, backticks, \u escapes).
    return "include_dbs = [" + ", ".join(json.dumps(d) for d in dbs) + "]"


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@pytest.fixture
def synced(pipeline):
    """Start producer and consumer on the test databases; yields a function running SQL on the leader."""
    f = filters(DB, ODD_DB)
    producer = pipeline.start_producer(pipeline.producer_profile(filters=f))
    consumer = pipeline.start_consumer(pipeline.consumer_profile(filters=f))
    conn = pipeline.leader.connect()

    def run(*statements: str) -> None:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)

    try:
        yield run
        assert producer.stop() == 0 and consumer.stop() == 0, producer.stderr + consumer.stderr
        assert "Traceback" not in producer.stderr + consumer.stderr
    finally:
        conn.close()
        # harness.Server.reset() does not quote backticks: drop the odd database here.
        for server in (pipeline.leader, pipeline.follower):
            server.execute(f"DROP DATABASE IF EXISTS {q(ODD_DB)}")


def exact(server, db: str, table: str) -> list[tuple]:
    """Every row with its columns' exact bytes (HEX), duplicates kept, sorted."""
    cols = [c for (c,) in server.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
        "ORDER BY ORDINAL_POSITION", (db, table))]
    hexed = ", ".join(f"HEX({q(c)})" for c in cols)
    return sorted(server.query(f"SELECT {hexed} FROM {q(db)}.{q(table)}"), key=repr)


def assert_same(pipeline, db: str, *tables: str) -> None:
    pipeline.wait_synced(timeout=SYNC_TIMEOUT)
    for table in tables:
        leader_rows = exact(pipeline.leader, db, table)
        assert exact(pipeline.follower, db, table) == leader_rows, table
        assert rows(pipeline.follower, db, table) == rows(pipeline.leader, db, table), table


def rows(server, db: str, table: str) -> list[tuple]:
    """SELECT * (any identifier), sorted, duplicates kept."""
    return sorted(server.query(f"SELECT * FROM {q(db)}.{q(table)}"), key=repr)


def test_tables_without_primary_key(pipeline, synced):
    synced(
        f"CREATE DATABASE {DB}", f"USE {DB}",
        # Collation-equal texts ('a', 'A', 'a '), FLOAT/DOUBLE that are not exact
        # decimals, JSON, BLOB and TEXT, NULLs: the whole before-image is the key.
        "CREATE TABLE nokey (v VARCHAR(10), t TEXT CHARACTER SET latin1, f FLOAT, d DOUBLE, j JSON, b BLOB, "
        "n INT, dec1 DECIMAL(40,20))",
        # Decoys first: a LIMIT 1 match that is too loose finds them before the real row.
        "INSERT INTO nokey VALUES ('a ', 'x ', 0.1, 1/3, '{\"k\": [1, 2]}', X'00FF', NULL, 0.1), "
        "('A', 'X', 0.1, 1/3, '{\"k\": [1, 2]}', X'00FF', NULL, 0.1), "
        "('a', 'x', 0.1, 1/3, '{\"k\": [1, 2]}', X'00FF', NULL, 0.1), "
        "('a', 'x', 0.1, 1/3, '{\"k\": [1, 2]}', X'00FF', NULL, 0.1), "
        "('é', 'é', 3.4e38, -1e-300, '[]', X'', 1, 0.10000000000000000001), "
        "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        # One of two identical rows changes, then one of the other two goes.
        "UPDATE nokey SET n = 7 WHERE v = 'a' AND v = BINARY 'a' LIMIT 1",
        "DELETE FROM nokey WHERE v = BINARY 'a' AND n IS NULL LIMIT 1",
        # Rows equal to others under the collation but not byte for byte.
        "UPDATE nokey SET n = 8 WHERE v = BINARY 'A'",
        "UPDATE nokey SET f = 0.2, d = 2/3 WHERE v = BINARY 'a '",
        "UPDATE nokey SET j = '{\"k\": [2, 1]}', b = X'FF00' WHERE v = BINARY 'A'",
        "UPDATE nokey SET dec1 = 1 WHERE dec1 = 0.10000000000000000001",
        "DELETE FROM nokey WHERE v IS NULL LIMIT 1",
        "UPDATE nokey SET n = 9 WHERE v IS NULL",
        # Deleting or changing one of several collation-equal rows: a match that
        # is not exact would take the first of them (insertion order), a decoy.
        "CREATE TABLE ci_nokey (v VARCHAR(5), l VARCHAR(5) CHARACTER SET latin1)",
        "INSERT INTO ci_nokey VALUES ('a ', 'é '), ('A', 'É'), ('a', 'é')",
        "DELETE FROM ci_nokey WHERE v = BINARY 'a'",
        "UPDATE ci_nokey SET v = 'b' WHERE v = BINARY 'A'",
        # A unique NOT NULL key without a primary key.
        "CREATE TABLE uniq_only (u VARCHAR(5) NOT NULL, v INT, UNIQUE KEY (u))",
        "INSERT INTO uniq_only VALUES ('a', 1), ('b', 2)",
        "UPDATE uniq_only SET u = 'c' WHERE u = 'a'",
        "DELETE FROM uniq_only WHERE u = 'b'",
        # Rows equal as doubles but not as DECIMAL, and DOUBLEs one ulp apart.
        "CREATE TABLE num_nokey (dec1 DECIMAL(40,20), d DOUBLE)",
        "INSERT INTO num_nokey VALUES (0.1, 0.1), (0.10000000000000000001, 0.1), (0.2, 0.1), (0.2, 0.10000000000000002)",
        "DELETE FROM num_nokey WHERE dec1 = 0.10000000000000000001",
        "UPDATE num_nokey SET dec1 = 0.3 WHERE d = 0.10000000000000002",
    )
    assert_same(pipeline, DB, "nokey", "ci_nokey", "uniq_only", "num_nokey")
    assert rows(pipeline.follower, DB, "ci_nokey") == [("a ", "é "), ("b", "É")]
    assert len(rows(pipeline.follower, DB, "nokey")) == 5


def test_composite_changed_and_unique_keys(pipeline, synced):
    synced(
        f"CREATE DATABASE {DB}", f"USE {DB}",
        "CREATE TABLE comp (a INT, b VARCHAR(10), c TEXT, PRIMARY KEY (b, a))",
        "INSERT INTO comp VALUES (1, 'x', 'one'), (2, 'x', 'two'), (1, 'y', 'three')",
        "UPDATE comp SET a = 3 WHERE a = 1 AND b = 'x'",  # part of the key changes
        "UPDATE comp SET b = 'z', c = 'moved' WHERE a = 1 AND b = 'y'",
        "DELETE FROM comp WHERE a = 2 AND b = 'x'",
        # Shifting the primary key over itself: only the leader's order (DESC) works row by row.
        "CREATE TABLE shift (id INT PRIMARY KEY, u INT NOT NULL, v VARCHAR(5), UNIQUE KEY (u))",
        "INSERT INTO shift VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')",
        "UPDATE shift SET id = id + 1 ORDER BY id DESC",
        "UPDATE shift SET u = u + 10 ORDER BY u DESC",
        # Swapping two unique values through a free one, in one transaction.
        "BEGIN",
        "UPDATE shift SET u = 0 WHERE id = 2",
        "UPDATE shift SET u = 20 WHERE id = 3",
        "UPDATE shift SET u = 30 WHERE id = 2",
        "COMMIT",
        "DELETE FROM shift WHERE u = 40",
        "INSERT INTO shift VALUES (4, 40, 'd')",
        # A primary key on a prefix of a column: the library does not report it, the whole row matches.
        "CREATE TABLE prefix (t VARCHAR(20) NOT NULL, v INT, PRIMARY KEY (t(3)))",
        "INSERT INTO prefix VALUES ('abcdef', 1), ('abd', 2)",
        "UPDATE prefix SET v = 3 WHERE t = 'abcdef'",
        "DELETE FROM prefix WHERE t = 'abd'",
    )
    assert_same(pipeline, DB, "comp", "shift", "prefix")
    assert rows(pipeline.follower, DB, "shift") == [(2, 30, "a"), (3, 20, "b"), (4, 40, "d")]
    pks = {e["uri"].rsplit("/", 1)[1]: e["pk"] for e in pipeline.events() if "Query" not in e["operation"]}
    assert sorted(pks["comp"]) == ["a", "b"] and pks["shift"] == ["id"]


ODD_TABLES = ["select", "tbl`x/y.z", "ünï cödé 'q' \"dq\"", "100%s"]
ODD_COLUMNS = ["from", "a`b", "c'd", "e\"f", "ünï", "%s", "100%", "key", "ORDER", "x y"]


def test_odd_identifiers(pipeline, synced):
    cols = ", ".join(f"{q(c)} VARCHAR(20)" for c in ODD_COLUMNS)
    col_list = ", ".join(q(c) for c in ODD_COLUMNS)
    quote_col = "c'd"
    statements = [f"CREATE DATABASE {q(ODD_DB)}", f"USE {q(ODD_DB)}"]
    for n, table in enumerate(ODD_TABLES):
        key = f", PRIMARY KEY ({q('key')}, {q('a`b')})" if n % 2 == 0 else ""  # with and without a key
        statements += [
            f"CREATE TABLE {q(table)} ({cols}{key})",
            f"INSERT INTO {q(table)} ({col_list}) VALUES " + ", ".join(
                "(" + ", ".join(f"'{r}{i}'" for i in range(len(ODD_COLUMNS))) + ")" for r in ("r", "s", "t")),
            f"UPDATE {q(table)} SET {q('key')} = 'k', {q('%s')} = '%d%s' WHERE {q('from')} = 's0'",
            f"DELETE FROM {q(table)} WHERE {q(quote_col)} = 't2'",
        ]
    synced(*statements)
    assert_same(pipeline, ODD_DB, *ODD_TABLES)
    assert sorted(pipeline.follower.query(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (ODD_DB,))) == sorted(
        (t,) for t in ODD_TABLES)
    for table in ODD_TABLES:
        assert len(rows(pipeline.follower, ODD_DB, table)) == 2
