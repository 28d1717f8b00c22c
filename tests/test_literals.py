"""The consumer's SQL literals (cdc_consumer.literals) and statement batching (cdc_consumer.batch).

Literals must be what PyMySQL's client-side parameters would have sent for the
value values.to_param returns, and must survive a real server unchanged, for
any text or bytes.
"""

from __future__ import annotations

import base64
import string
import struct

import pymysql
import pymysql.converters
import pytest
from harness import wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_consumer import batch, literals, writer
from cdc_consumer.apply import RowsSql
from cdc_stream import values
from cdc_stream.values import BadValue

settings.register_profile("cdc", max_examples=150, deadline=None)
settings.load_profile("cdc")

HOSTILE = ["", "'", "\\", "\\'", "''", "\"", "\0", "\n\r\x1a", "a'); DROP TABLE t; --", "%s", "%%", "`", "\u00e9\u20ac",
           "\U0001f600", "\\0", "x\\", "'\\'", "\t\b"]

SAMPLES = [
    {"SignedInteger": -9223372036854775808}, {"UnsignedInteger": 18446744073709551615}, {"Year": 0}, {"Bit": 5},
    {"Float": 1.5}, {"Double": -2.5e-300}, {"Double": 1e16}, {"Double": 0.1},
    {"Decimal": "-0.000000000000000000000000000001"}, {"Decimal": "12345678901234567890.12"},
    {"Date": {"year": 0, "month": 0, "day": 0}}, {"Date": {"year": 2024, "month": 2, "day": 30}},
    {"DateTime": {"year": 2020, "month": 1, "day": 2, "hour": 3, "minute": 4, "second": 5, "subsecond": 60}},
    {"Timestamp": {"unix_time": 0, "subsecond": 0}}, {"Timestamp": {"unix_time": 2147483647, "subsecond": 999999}},
    {"Time": {"hours": 838, "minutes": 59, "seconds": 59, "subseconds": 0, "negative": True}},
    {"Enum": ""}, {"Set": []}, {"Set": ["a", "b'c"]}, {"Json": {"k": ["v", 1, None, "'"]}},
    {"Blob": base64.b64encode(bytes(range(256))).decode()}, {"Blob": ""},
    {"Geometry": {"srid": 4326, "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA"}},
] + [{"String": s} for s in HOSTILE]


@pytest.mark.parametrize("tagged", SAMPLES, ids=[str(s)[:40] for s in SAMPLES])
def test_literal_is_what_pymysql_would_send(tagged):
    assert literals.literal(tagged) == pymysql.converters.escape_item(values.to_param(tagged), "utf8mb4")


@given(st.lists(st.sampled_from(SAMPLES + ["Null"]), max_size=12))
def test_compiled_row_writers_write_what_stored_literal_writes(row):
    assert literals.row_literal(row) == "(" + ",".join(literals.stored_literal(v) for v in row) + ")"


def as_float32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_a_stored_float_is_the_shortest_text_of_the_same_float(v):
    text = literals.stored_literal({"Float": v})
    assert as_float32(float(text)) == v and str(as_float32(float(text))) == str(v)  # -0.0 keeps its sign
    assert len(text.split("e")[0].lstrip("-").replace(".", "").lstrip("0")) <= 9
    assert literals.literal({"Float": v}) == literals.literal({"Double": v})  # matching keeps the exact double


def test_stored_float_samples():
    assert literals.stored_literal({"Float": as_float32(1e30)}) == "1e+30"
    assert literals.stored_literal({"Float": as_float32(0.1)}) == "0.1e0"
    assert literals.literal({"Float": as_float32(1e30)}) == "1.0000000150474662e+30"
    assert literals.stored_literal({"Float": 0.1}) == "0.1e0"  # a double that is no float32: as before
    assert literals.stored_literal({"Double": 1e30}) == literals.literal({"Double": 1e30})


@pytest.mark.parametrize("row", [[{}, {"String": "a", "Blob": ""}], ["Nope"], [{"N": 1}], [["SignedInteger"]],
                                 [{"SignedInteger": 1, "String": "x"}], [{"SignedInteger": 1}, {}], [{"SignedInteger": 1}, 5], [{"Nope": 1}], [None, []]])
def test_bad_rows_are_refused(row):
    with pytest.raises(BadValue):
        literals.row_literal(row)


def test_null_and_binary():
    assert literals.literal("Null") == "NULL"
    assert literals.literal({"Blob": base64.b64encode(b"\x00'\\x").decode()}) == "_binary X'00275c78'"
    assert literals.literal({"Blob": ""}) == "_binary X''"
    assert literals.literal({"Geometry": {"srid": 4326, "wkb": "AQ=="}}) == "_binary X'e610000001'"


@pytest.mark.parametrize("bad", [
    {"SignedInteger": True}, {"SignedInteger": 1.0}, {"SignedInteger": "1"}, {"UnsignedInteger": -1},
    {"Decimal": "1e5"}, {"Decimal": "1; DROP"}, {"Decimal": 1}, {"Float": float("nan")}, {"String": 1},
    {"String": None}, {"Blob": "***"}, {"DateTime": {"year": 2020}}, {"Nope": 1}, {"String": "a", "Blob": ""},
    [1], 5, "null", {"DateTime": {"year": "2020", "month": 1, "day": 1, "hour": 0, "minute": 0, "second": 0,
                                   "subsecond": 0}},
    {"DateTime": {"year": 2020, "month": 1, "day": 1, "hour": 0, "minute": 0, "second": 0, "subsecond": 10**6}},
])
def test_bad_values_are_refused_as_to_param_refuses_them(bad):
    with pytest.raises(BadValue):
        literals.literal(bad)
    with pytest.raises(BadValue):
        values.to_param(bad)


@given(st.text())
def test_any_text_is_escaped_as_pymysql_escapes_it(text):
    assert literals.quote_text(text) == pymysql.converters.escape_item(text, "utf8mb4")


@pytest.fixture(scope="module")
def conn(follower):
    c = follower.connect()
    with c.cursor() as cur:
        cur.execute("SET NAMES utf8mb4")
        cur.execute("SET sql_mode = 'STRICT_ALL_TABLES'")
    yield c
    c.close()


def test_hostile_text_and_bytes_survive_a_server(conn):
    texts = HOSTILE + ["".join(chr(c) for c in range(1, 0x2000) if not 0xD800 <= c < 0xE000)]
    blobs = [bytes(range(256)), b"", b"'\\\x00", "\u20ac".encode()]
    with conn.cursor() as cur:
        cur.execute("SELECT " + ", ".join(literals.literal({"String": t}) for t in texts))
        assert list(cur.fetchone()) == texts
        cur.execute("SELECT " + ", ".join(literals.literal(values.blob_tag(b)) for b in blobs))
        assert list(cur.fetchone()) == blobs


@settings(max_examples=60)
@given(st.lists(st.text(alphabet=string.printable + "\0\x1a\u00e9\U0001f600", max_size=30), min_size=1, max_size=8))
def test_random_text_survives_a_server(conn, texts):
    with conn.cursor() as cur:
        cur.execute("SELECT " + ", ".join(literals.literal({"String": t}) for t in texts))
        assert list(cur.fetchone()) == texts


def test_floats_outside_their_declared_range_are_stored_and_matched_exactly(conn):
    """MariaDB's type_float test: FLOAT(30,0) holds 1e30 as 1.0000000150474662e30, which a strict session
    refuses as "Out of range" when written as the exact double; the stored literal gives the same bytes."""
    floats = [as_float32(x) for x in (1e30, -1e30, 1e29, 3.4028234663852886e38, 1.17549435e-38, 0.1, 1 / 3, -0.0)]
    with conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE `test`.`f30` (`i` INT PRIMARY KEY, `f1` FLOAT(30,0), `f2` FLOAT)")
        for i, f in enumerate(floats):
            lit = literals.stored_literal({"Float": f})
            cur.execute(f"INSERT INTO `test`.`f30` VALUES ({i}, {lit if abs(f) <= 1.0000000150474662e30 else 0}, {lit})")
        cur.execute("SELECT `f1` + 0e0, `f2` + 0e0 FROM `test`.`f30` ORDER BY `i`")  # the doubles they widen to
        got = cur.fetchall()
        assert [r[1] for r in got] == floats
        assert [r[0] for r in got[:3]] == floats[:3]
        for i, f in enumerate(floats):  # and a WHERE clause finds each row by its value
            cur.execute(f"SELECT `i` FROM `test`.`f30` WHERE `f2` <=> {literals.literal({'Float': f})}")
            assert cur.fetchall() == ((i,),)
        cur.execute("DROP TEMPORARY TABLE `test`.`f30`")


# ---------------------------------------------------------------------------
# Batching


def rows(shape: str, parts: list[str], keys: list[str] | None = None) -> RowsSql:
    return RowsSql((shape,), f"{shape} ", ";", parts, keys)


def origin(offset: int) -> batch.Origin:
    return batch.Origin(offset, f"t{offset}", None)


def test_same_shape_merges_other_shapes_and_statements_split():
    b = batch.SqlBatch()
    b.add([rows("A", ["1", "2"])], origin(0))
    b.add([rows("A", ["3"])], origin(1))
    b.add(["SAVEPOINT x"], origin(2))
    b.add([rows("A", ["4"]), rows("B", ["5"])], origin(3))
    statements, origins = b.take()
    assert statements == ["A 1,2,3;", "SAVEPOINT x", "A 4;", "B 5;"]
    assert [o.where() for o in origins] == [
        "offsets 0..1, transaction t0", "offset 2, transaction t2", "offset 3, transaction t3",
        "offset 3, transaction t3"]
    assert not b and b.take() == ([], [])


def test_no_key_twice_in_one_statement():
    b = batch.SqlBatch()
    b.add([rows("U", ["(1,'a')", "(2,'b')"], ["1", "2"])], origin(0))
    b.add([rows("U", ["(1,'c')", "(3,'d')"], ["1", "3"])], origin(1))
    assert b.take()[0] == ["U (1,'a'),(2,'b');", "U (1,'c'),(3,'d');"]


def test_statements_stay_under_the_size_limit():
    b = batch.SqlBatch(max_statement=20)
    b.add([rows("A", ["aaaaa"] * 7)], origin(0))
    statements, _ = b.take()
    assert statements == ["A aaaaa,aaaaa,aaaaa;", "A aaaaa,aaaaa,aaaaa;", "A aaaaa;"]
    assert all(len(s) <= 20 for s in statements)


def test_a_failing_statement_is_pinned_on_its_origin(conn):
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS lit")
        cur.execute("CREATE OR REPLACE TABLE lit.t (id INT PRIMARY KEY)")
    multi = pymysql.connect(host=conn.host, port=conn.port, user="root", autocommit=False,
                            client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
    try:
        statements = ["INSERT INTO lit.t VALUES (1)", "INSERT INTO lit.t VALUES (2)", "INSERT INTO lit.t VALUES (1)",
                      "INSERT INTO lit.t VALUES (3)"]
        with pytest.raises(batch.StatementFailed) as e:
            writer.execute(multi, statements, [origin(n) for n in range(4)], 1 << 20)
        assert e.value.origin.offset == 2 and e.value.error.args[0] == 1062
        multi.rollback()
        with pytest.raises(batch.StatementFailed) as e:  # refused before it is sent: nothing of it runs
            writer.execute(multi, ["INSERT INTO lit.t VALUES (5)", "INSERT INTO lit.t VALUES (6)" + " " * 300],
                          [origin(n) for n in range(2)], 256)
        assert e.value.origin.offset == 1 and e.value.error.args == (
            1153, "a statement of 328 bytes is over the follower's max_allowed_packet (256 bytes)")
        multi.rollback()
        writer.execute(multi, ["INSERT INTO lit.t VALUES (7)", "INSERT INTO lit.t VALUES (8)", "COMMIT"],
                      [origin(n) for n in range(3)], 1 << 20)
    finally:
        multi.close()
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM lit.t ORDER BY id")
        assert cur.fetchall() == ((7,), (8,))
        cur.execute("DROP DATABASE lit")


@pytest.fixture
def multi(conn):
    """A follower-like session (multi-statements, matched rows, no autocommit) and an InnoDB table y.a, the
    database and table of test_replayer_machine's recorded binlog events; both gone afterwards."""
    with conn.cursor() as cur:
        cur.execute("CREATE OR REPLACE DATABASE y")
        cur.execute("CREATE TABLE y.a (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    session = pymysql.connect(host=conn.host, port=conn.port, user="root", autocommit=False,
                              client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS | pymysql.constants.CLIENT.FOUND_ROWS)
    yield session
    session.close()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE y")


def overlapping(offset: int) -> batch.Origin:
    """origin(offset) of a row statement that may be pipelined (Origin.overlap)."""
    o = origin(offset)
    o.overlap = True
    return o


def test_binlog_statements_and_matched_row_counts_on_a_server(conn, multi, monkeypatch):
    """BINLOG statements share batches and round trips with SQL (MariaDB drops the "more results"
    flag after one: the rest is read by count), and a statement matching fewer rows than its Origin
    expects fails as error 1032."""
    from test_replayer_machine import DELETE, FDE, UPDATE, WRITE

    sent: list[str] = []
    send = writer.send_query
    monkeypatch.setattr(writer, "send_query", lambda c, sql: sent.append(sql) or send(c, sql))

    statements = [f"BINLOG '{FDE}'", f"BINLOG '{WRITE}'", "INSERT INTO y.a VALUES (5, 5)", f"BINLOG '{UPDATE}'",
                  "UPDATE y.a SET v = 5 WHERE id = 5", f"BINLOG '{DELETE}'", "SELECT 1", "COMMIT"]
    origins = [origin(n) for n in range(len(statements))]
    origins[4].expect = 1  # matched, though it changes nothing
    writer.execute(multi, statements, origins, 1 << 20)
    assert sent == [";\n".join(statements)]  # one round trip
    with multi.cursor() as cur:
        cur.execute("SELECT id, v FROM y.a ORDER BY id")
        assert cur.fetchall() == ((2, 20), (5, 5))
    with multi.cursor() as cur:  # a count short after a BINLOG statement: the answers behind it are read off
        cur.execute("DELETE FROM y.a")
    short = [origin(n) for n in range(3)]
    short[1].expect = 1
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(multi, [f"BINLOG '{WRITE}'", "UPDATE y.a SET v = 0 WHERE id = 10", f"BINLOG '{UPDATE}'"],
                       short, 1 << 20)
    assert e.value.origin.offset == 1 and e.value.error.args == (
        1032, "the statement's affected-row count on the follower is 0, not 1")
    with multi.cursor() as cur:  # the session's next command meets its own answer
        cur.execute("SELECT id, v FROM y.a ORDER BY id")
        assert cur.fetchall() == ((1, 1), (2, 20))
    multi.rollback()
    missing = [origin(0), origin(1)]
    missing[0].expect, missing[0].keys = 2, ["5", "7"]
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(multi, ["DELETE FROM y.a WHERE id IN (5, 7)", "INSERT INTO y.a VALUES (8, 8)"], missing, 1 << 20)
    assert e.value.origin.offset == 0 and e.value.error.args == (
        1032, "the statement's affected-row count on the follower is 1, not 2")
    multi.rollback()
    with pytest.raises(batch.StatementFailed) as e:  # the follower's own row applier: error 1032 by itself
        writer.execute(multi, [f"BINLOG '{DELETE}'"], [origin(3)], 1 << 20)
    assert e.value.origin.offset == 3 and e.value.error.args[0] == 1032
    multi.rollback()
    with multi.cursor() as cur:  # the session is usable afterwards
        cur.execute("SELECT COUNT(*) FROM y.a")
        assert cur.fetchall() == ((2,),)


def test_row_statements_are_pipelined_and_a_failure_commits_nothing(conn, multi):
    """BINLOG row statements of transactional tables (Origin.overlap) go out before the previous answer is read;
    anything else waits for every answer. When one fails, the server stops its round trip there; a statement
    already sent behind it in another round trip has run (read off, the session stays usable), and the COMMIT
    after them was never sent: the rollback leaves nothing."""
    from test_replayer_machine import DELETE, FDE, UPDATE, WRITE


    statements = [f"BINLOG '{FDE}'", f"BINLOG '{WRITE}'", f"BINLOG '{UPDATE}'", f"BINLOG '{DELETE}'", "COMMIT"]
    origins = [origin(0), overlapping(1), overlapping(2), overlapping(3), origin(4)]
    writer.execute(multi, statements, origins, 1 << 20)
    with conn.cursor() as cur:  # committed: another session sees it
        cur.execute("SELECT id, v FROM y.a ORDER BY id")
        assert cur.fetchall() == ((2, 20),)
        cur.execute("DELETE FROM y.a")
    conn.commit()
    with pytest.raises(batch.StatementFailed) as e:  # one round trip: the server stops at the failure
        writer.execute(multi, [f"BINLOG '{DELETE}'", f"BINLOG '{WRITE}'", "COMMIT"],
                       [overlapping(0), overlapping(1), origin(2)], 1 << 20)
    assert e.value.origin.offset == 0 and e.value.error.args[0] == 1032
    with multi.cursor() as cur:  # nothing after the DELETE ran
        cur.execute("SELECT COUNT(*) FROM y.a")
        assert cur.fetchall() == ((0,),)
    multi.rollback()
    # A round trip each (a follower whose max_allowed_packet holds one statement per round trip): row 1 is
    # not there, 1032; the WRITE behind it was sent before the DELETE's answer came.
    one_each = 4 * len(f"BINLOG '{DELETE}'") + 8
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(multi, [f"BINLOG '{DELETE}'", f"BINLOG '{WRITE}'", "COMMIT"],
                       [overlapping(0), overlapping(1), origin(2)], one_each)
    assert e.value.origin.offset == 0 and e.value.error.args[0] == 1032
    with multi.cursor() as cur:  # the WRITE ran in the open transaction, its answer read off
        cur.execute("SELECT id FROM y.a ORDER BY id")
        assert cur.fetchall() == ((1,), (2,))
    multi.rollback()
    with conn.cursor() as cur:  # the COMMIT never ran: nothing of it is on the server
        cur.execute("SELECT COUNT(*) FROM y.a")
        assert cur.fetchall() == ((0,),)
    # Server errors in the answers on their way (1032 is an OperationalError in PyMySQL, as a lost connection
    # is) are read off too, every one: the session's next command still meets its own answer.
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(multi, [f"BINLOG '{DELETE}'", f"BINLOG '{DELETE}'", f"BINLOG '{DELETE}'",
                               f"BINLOG '{WRITE}'", "COMMIT"],
                       [overlapping(0), overlapping(1), overlapping(2), overlapping(3), origin(4)], one_each)
    assert e.value.origin.offset == 0 and e.value.error.args[0] == 1032
    with multi.cursor() as cur:
        cur.execute("SELECT id FROM y.a ORDER BY id")
        assert cur.fetchall() == ((1,), (2,))
    multi.rollback()


def test_round_trips_sent_ahead_by_the_caller_end_where_an_answer_is_needed(conn, multi):
    """writer.Execution.send_ahead (the reader thread, while the writer thread is idle): it sends row round trips
    of a transactional table, not one that must wait for their answers (the COMMIT), nor past its budget;
    finish() (the writer thread) reads their answers and sends the rest. A failure of a round trip sent ahead
    is raised by finish(), once the answers on their way were read off, and the COMMIT never went."""
    from test_replayer_machine import DELETE, FDE, UPDATE, WRITE


    def rows() -> list[tuple[int, int]]:
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM y.a ORDER BY id")
            return list(cur.fetchall())

    one_each = 4 * len(f"BINLOG '{UPDATE}'") + 8  # a round trip per statement
    writer.execute(multi, [f"BINLOG '{FDE}'"], [origin(0)], 1 << 20)
    statements = [f"BINLOG '{WRITE}'", f"BINLOG '{UPDATE}'", "COMMIT"]
    run = writer.Execution(multi, statements, [overlapping(1), overlapping(2), origin(3)], one_each)
    run.send_ahead(len(statements[0]))  # the budget holds the first round trip only
    run.send_ahead(1 << 20)  # the second; not the COMMIT, which waits for their answers
    assert rows() == []  # (nothing committed yet)
    run.finish()
    assert rows() == [(1, 1), (2, 20)]
    with conn.cursor() as cur:
        cur.execute("DELETE FROM y.a")
    conn.commit()
    failing = writer.Execution(multi, [f"BINLOG '{DELETE}'", f"BINLOG '{WRITE}'", "COMMIT"],
                               [overlapping(4), overlapping(5), origin(6)], one_each)
    failing.send_ahead(1 << 20)  # row 1 is not there: 1032, in the answer not read yet
    with pytest.raises(batch.StatementFailed) as e:
        failing.finish()
    assert e.value.origin.offset == 4 and e.value.error.args[0] == 1032
    multi.rollback()
    assert rows() == []  # the COMMIT never went: the WRITE sent behind the failure is rolled back
    with multi.cursor() as cur:  # the session's answers were all read: it is usable
        cur.execute("SELECT COUNT(*) FROM y.a")
        assert cur.fetchall() == ((0,),)


def test_rows_go_before_the_records_are_durable_and_the_commit_after_them(conn, multi, request):
    """writer.Execution with `durable` (Topic.durable): the row round trips go at once; durable() runs while the
    follower applies them; then the round trip of what may last (here an insert standing for the checkpoint,
    and the COMMIT) goes before the rows' answers are read, behind the chain's guard. A failure in any row
    round trip stops the guard, so nothing commits; a failure of durable() itself commits nothing either, and
    in each case the session's answers are read off."""
    from test_replayer_machine import DELETE, FDE, UPDATE, WRITE

    from cdc_stream.topics import TopicError

    def committed() -> list[tuple[int, int]]:
        conn.rollback()  # (a fresh snapshot)
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM y.a ORDER BY id")
            return list(cur.fetchall())

    # Rows applied and not committed yet, as a READ UNCOMMITTED session sees them (information_schema.innodb_trx
    # is no witness: InnoDB refreshes it only when it was not read for 0.1 s, so a poll keeps it stale).
    dirty = pymysql.connect(host=conn.host, port=conn.port, user="root", autocommit=True)
    request.addfinalizer(dirty.close)  # (closed however the test ends)
    with dirty.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")

    def uncommitted() -> list[tuple[int, int]]:
        with dirty.cursor() as cur:
            cur.execute("SELECT id, v FROM y.a ORDER BY id")
            return list(cur.fetchall())

    writer.execute(multi, [f"BINLOG '{FDE}'"], [origin(0)], 1 << 20)
    per_trip = 4 * (len(f"BINLOG '{UPDATE}'") + writer.CHAIN_ROOM) + 8  # a round trip per row statement
    last = ["INSERT INTO y.a VALUES (9, 9)", "COMMIT"]
    seen: list[object] = []

    def durable() -> None:
        seen.append(wait_for(lambda: uncommitted() == [(1, 1), (2, 20)], 30, "the rows applied while durable() runs"))
        seen.append(committed())

    run = writer.Execution(multi, [f"BINLOG '{WRITE}'", f"BINLOG '{UPDATE}'", *last],
                           [overlapping(1), overlapping(2), origin(3), origin(3)], per_trip, durable)
    run.send_ahead(1 << 20)  # everything goes before any answer is read
    assert seen == [True, []]
    wait_for(lambda: committed() == [(1, 1), (2, 20), (9, 9)], 30, "the COMMIT, sent before finish() read an answer")
    run.finish()
    with conn.cursor() as cur:
        cur.execute("DELETE FROM y.a")
    conn.commit()

    calls: list[str] = []
    failing = writer.Execution(multi, [f"BINLOG '{DELETE}'", f"BINLOG '{WRITE}'", *last],
                               [overlapping(4), overlapping(5), origin(6), origin(6)], per_trip,
                               lambda: calls.append("durable"))
    failing.send_ahead(1 << 20)  # row 1 is not there: 1032; the WRITE's round trip runs after it, then the guard
    assert calls == ["durable"]  # (called right before the guard's round trip was sent)
    with pytest.raises(batch.StatementFailed) as e:
        failing.finish()
    assert e.value.origin.offset == 4 and e.value.error.args[0] == 1032
    with multi.cursor() as cur:  # the WRITE ran, and broke the chain; the insert and the COMMIT did not
        cur.execute("SELECT @cdc_chain IS NULL, id FROM y.a ORDER BY id")
        assert cur.fetchall() == ((1, 1), (1, 2))
    multi.rollback()
    assert committed() == []

    def broken() -> None:
        raise TopicError("cannot make the records of topic 't' durable")

    run = writer.Execution(multi, [f"BINLOG '{WRITE}'", *last], [overlapping(7), origin(8), origin(8)], per_trip, broken)
    run.send_ahead(1 << 20)
    with pytest.raises(TopicError):
        run.finish()
    multi.rollback()  # (the WRITE's answer was read off: the session is usable)
    assert committed() == []
    # Through the writer thread, as cdc-consumer runs it: the reader's next call raises the same error, which
    # the consumer reports as any storage error (one line, exit 1), and nothing was committed.
    thread = writer.Writer(multi)
    thread.submit([f"BINLOG '{WRITE}'", *last], [overlapping(9), origin(10), origin(10)], broken)
    with pytest.raises(TopicError, match=r"^cannot make the records of topic 't' durable$"):
        thread.wait()
    with pytest.raises(TopicError):  # for good: no later batch runs
        thread.submit(["COMMIT"], [origin(11)])
    thread.close()
    multi.rollback()
    assert committed() == []


def test_only_binlog_row_statements_of_transactional_tables_overlap():
    """A BINLOG statement overlaps when every event in it does; a plain statement (the format's BINLOG, the
    checkpoint) never does, whatever its origin says."""
    from cdc_consumer.binlog_replay import BinlogRows

    def o(offset: int, overlap: bool) -> batch.Origin:
        return batch.Origin(offset, "t", None, overlap=overlap)

    b = batch.SqlBatch()
    b.add(["BINLOG 'format'", BinlogRows("AAAA")], o(0, True))
    b.add([BinlogRows("BBBB")], o(1, True))
    statements, origins = b.take()
    assert statements == ["BINLOG 'format'", "BINLOG 'AAAA\nBBBB'"]
    assert [(x.offset, x.last_offset, x.overlap) for x in origins] == [(0, None, False), (0, 1, True)]
    b.add([BinlogRows("CCCC")], o(2, True))
    b.add([BinlogRows("DDDD")], o(3, False))  # a MyISAM table's rows join it: the statement no longer overlaps
    statements, origins = b.take()
    assert statements == ["BINLOG 'CCCC\nDDDD'"]
    assert [(x.offset, x.last_offset, x.overlap) for x in origins] == [(2, 3, False)]


def test_the_follower_says_whether_its_triggers_fire_for_replayed_rows(conn):
    """MariaDB's slave_run_triggers_for_rbr also fires a follower's triggers for the rows of a client's BINLOG
    statements (tried on 10.11), which then must not be pipelined: the probe reads it at the consumer's start."""
    from cdc_consumer.follower import probe

    assert probe(conn).row_triggers is False  # the server's default: NO
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL slave_run_triggers_for_rbr = YES")
    try:
        assert probe(conn).row_triggers is True
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL slave_run_triggers_for_rbr = NO")
