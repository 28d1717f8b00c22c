"""Rows as parameters of MariaDB's bulk execution (cdc_consumer.parameters, cdc_stream.mysql.BulkConnection).

The oracle is the text path: every tag stored through a Bulk statement must be the same bytes on the server
as stored through its literal (cdc_consumer.literals), and a bad value is refused the same way.
"""

from __future__ import annotations

import pymysql
import pytest
from pymysql.constants import CLIENT
from test_literals import HOSTILE, SAMPLES, as_float32

from cdc_consumer import apply as apply_module
from cdc_consumer import batch, parameters, writer
from cdc_consumer.apply import RowsSql, event_sql
from cdc_consumer.binlog_replay import RowPolicy
from cdc_consumer.failures import apply_error
from cdc_consumer.follower import SESSION_SQL, probe
from cdc_stream.events import ChangeEvent, RowChecks, decode_event, encode_event
from cdc_stream.mysql import BulkConnection, SharedTlsConnection, extended_capabilities, prepare, read_result, send_bulk
from cdc_stream.values import BadValue

# (column type, values stored in it): every tag of the contract, the edges test_literals uses.
COLUMNS: list[tuple[str, list]] = [
    ("BIGINT", [{"SignedInteger": -9223372036854775808}, {"SignedInteger": 9223372036854775807}]),
    ("BIGINT UNSIGNED", [{"UnsignedInteger": 18446744073709551615}, {"UnsignedInteger": 0}]),
    ("YEAR", [{"Year": 0}, {"Year": 2155}]),
    ("BIT(64)", [{"Bit": 5}, {"Bit": 18446744073709551615}]),
    ("FLOAT", [{"Float": 1.5}, {"Float": as_float32(0.1)}, {"Float": -0.0}, {"Float": as_float32(3.4028234663852886e38)}]),
    ("FLOAT(30,0)", [{"Float": as_float32(1e30)}, {"Float": as_float32(-1e29)}]),
    ("DOUBLE", [{"Double": -2.5e-300}, {"Double": 1e16}, {"Double": 0.1}, {"Double": 1 / 3}]),
    ("DECIMAL(65,30)", [{"Decimal": "-0.000000000000000000000000000001"}, {"Decimal": "12345678901234567890.12"}]),
    ("DATE", [{"Date": {"year": 0, "month": 0, "day": 0}}, {"Date": {"year": 2024, "month": 2, "day": 30}}]),
    ("DATETIME(6)", [{"DateTime": {"year": 2020, "month": 1, "day": 2, "hour": 3, "minute": 4, "second": 5,
                                   "subsecond": 60}},
                     {"DateTime": {"year": 0, "month": 0, "day": 0, "hour": 0, "minute": 0, "second": 0,
                                   "subsecond": 0}},
                     {"DateTime": {"year": 2024, "month": 2, "day": 30, "hour": 23, "minute": 59, "second": 59,
                                   "subsecond": 999999}},
                     {"DateTime": {"year": 9999, "month": 12, "day": 31, "hour": 0, "minute": 0, "second": 0,
                                   "subsecond": 1}},
                     {"DateTime": {"year": 2020, "month": 0, "day": 0, "hour": 0, "minute": 0, "second": 0,
                                   "subsecond": 0}}]),
    ("TIMESTAMP(6) NULL", [{"Timestamp": {"unix_time": 0, "subsecond": 0}},
                           {"Timestamp": {"unix_time": 2147483647, "subsecond": 999999}}]),
    ("TIME(6)", [{"Time": {"hours": 838, "minutes": 59, "seconds": 59, "subseconds": 0, "negative": True}},
                 {"Time": {"hours": 0, "minutes": 0, "seconds": 1, "subseconds": 5}}]),
    ("ENUM('a','b''c')", [{"Enum": "b'c"}, {"Enum": "a"}]),
    ("ENUM('a')", [{"Enum": ""}, {"Enum": "a"}]),  # the error value: a statement with the relaxed sql_mode
    ("SET('a','b''c')", [{"Set": []}, {"Set": ["a", "b'c"]}]),
    ("JSON", [{"Json": {"k": ["v", 1, None, "'"]}}, {"Json": "\u00e9\\"}]),
    ("LONGBLOB", [v for v in SAMPLES if "Blob" in v]),
    ("GEOMETRY", [v for v in SAMPLES if "Geometry" in v] * 2),
    ("LONGTEXT CHARACTER SET utf8mb4", [{"String": s} for s in HOSTILE]),
    ("VARCHAR(10) CHARACTER SET latin1", [{"String": "\u00e9'\\"}, {"String": ""}]),
    ("VARCHAR(10) CHARACTER SET binary", [{"String": "a\0b"}, {"Blob": "/wA="}]),
]


@pytest.fixture(autouse=True)
def every_event_in_bulk(monkeypatch):
    monkeypatch.setattr(apply_module, "BULK_MIN_ROWS", 1)


def event(operation: str, db: str, columns: list[str], rows: list, pk: list[str] | None = None) -> ChangeEvent:
    return ChangeEvent(uri=f"flv://test/{db}/t", sequence=0, operation=operation, rows=rows,  # type: ignore[arg-type]
                       columns=columns, pk=pk or ["id"], schema=db, table="t")


def origin(offset: int) -> batch.Origin:
    return batch.Origin(offset, f"t{offset}", None)


# ---------------------------------------------------------------------------
# Without a server


def test_every_row_of_the_samples_is_written_with_its_types():
    for sql_type, vals in COLUMNS:
        for v in vals:
            types, data = parameters.param_row([{"SignedInteger": 1}, v, "Null"])
            assert types[0] == parameters.LONGLONG and types[2] is None, sql_type
            assert data.startswith(b"\x00" + (1).to_bytes(8, "little", signed=True) + b"\x00") and data.endswith(b"\x01")
    assert parameters.param_row([{"String": "\u00e9"}, {"Blob": "/wA="}]) == (
        (parameters.VAR_STRING, parameters.BLOB), b"\x00\x02\xc3\xa9\x00\x02\xff\x00")
    assert parameters.param_row([{"Decimal": "-1.50"}, {"Bit": 5}]) == (
        (parameters.NEWDECIMAL, parameters.ULONGLONG), b"\x00\x05-1.50\x00" + (5).to_bytes(8, "little"))


@pytest.mark.parametrize("n", [0, 250, 251, 65535, 65536, (1 << 24) - 1, 1 << 24])
def test_lengths_are_the_protocols_length_encoded_integers(n):
    raw = bytes(n)
    encoded = parameters.lenenc(raw)
    head = encoded[: len(encoded) - n]
    expected = (bytes([n]) if n < 251 else b"\xfc" + n.to_bytes(2, "little") if n < 1 << 16
                else b"\xfd" + n.to_bytes(3, "little") if n < 1 << 24 else b"\xfe" + n.to_bytes(8, "little"))
    assert head == expected and encoded[len(head):] == raw


@pytest.mark.parametrize("row", [[{}, {"String": "a", "Blob": ""}], ["Nope"], [{"N": 1}], [["SignedInteger"]],
                                 [{"SignedInteger": 1, "String": "x"}], [{"SignedInteger": 1}, {}],
                                 [{"SignedInteger": 1}, 5], [{"Nope": 1}], [None, []], [{"SignedInteger": True}],
                                 [{"Decimal": "1; DROP"}], [{"Float": float("nan")}], [{"Blob": "***"}],
                                 [{"UnsignedInteger": -1}], [{"String": None}], [{"String": 5}], [{"Enum": 1}],
                                 [{"Year": -1}], [{"Bit": "1"}], [{"Decimal": 1.5}], [{"SignedInteger": 1.0}],
                                 [{"DateTime": {"year": 2020}}]])
def test_bad_rows_are_refused_as_the_text_path_refuses_them(row):
    with pytest.raises(BadValue) as text:
        from cdc_consumer.literals import row_literal
        row_literal(row)
    with pytest.raises(BadValue) as params:
        parameters.param_row(row)
    assert str(params.value) == str(text.value)


def test_rows_of_several_signatures_are_each_written_by_their_own_writer():
    rows = [[{"SignedInteger": 1}, {"String": "a"}], [{"SignedInteger": 2}, "Null"], [{"SignedInteger": 3}, "Null"],
            [{"SignedInteger": 4}, {"Blob": "eQ=="}], [{"SignedInteger": 5}, {"String": "b"}]]
    singles = [parameters.param_row(r) for r in rows]
    assert parameters.param_rows(rows) == ([t for t, _ in singles], [d for _, d in singles])
    for bad in ([{"SignedInteger": 6}, {"String": 7}], [{"SignedInteger": 6}, {"String": "x", "Blob": ""}],
                [{"SignedInteger": True}, {"String": "x"}]):
        with pytest.raises(BadValue) as one:
            parameters.param_row(bad)
        with pytest.raises(BadValue) as many:
            parameters.param_rows(rows + [bad])
        assert str(many.value) == str(one.value)


def test_a_value_no_parameter_holds_is_refused():
    with pytest.raises(BadValue, match="cannot be sent as a parameter"):
        parameters.param_row([{"SignedInteger": 1 << 63}])  # outside BIGINT: the text would reach the server


def test_types_of_rows_with_nulls_merge_and_other_types_do_not():
    types: list[bytes | None] = [None, None]
    assert parameters.compatible(types, (parameters.LONGLONG, None))
    assert parameters.compatible(types, (None, parameters.VAR_STRING))
    assert types == [parameters.LONGLONG, parameters.VAR_STRING]
    assert not parameters.compatible(types, (parameters.LONGLONG, parameters.BLOB))  # text that travelled as Blob
    assert not parameters.compatible(types, (parameters.LONGLONG,))
    assert parameters.type_list([parameters.LONGLONG, None]) == parameters.LONGLONG + parameters.VAR_STRING


def bulk_rows(rows: list[list], keys: list[str] | None = None) -> RowsSql:
    encoded = [parameters.param_row(r) for r in rows]
    return RowsSql(("bulk", "I"), "INSERT (?,?)", "", [d for _, d in encoded], keys, types=[t for t, _ in encoded])


def test_bulk_rows_merge_into_one_statement_until_a_type_or_a_key_differs():
    one, two = {"SignedInteger": 1}, {"SignedInteger": 2}
    b = batch.SqlBatch()
    b.add([bulk_rows([[one, "Null"], [two, {"String": "x"}]], ["1", "2"])], origin(0))
    b.add([bulk_rows([[{"SignedInteger": 3}, {"String": "y"}]], ["3"])], origin(1))
    b.add([bulk_rows([[{"SignedInteger": 4}, {"Blob": "eQ=="}]], ["4"])], origin(2))  # BLOB: a statement of its own
    b.add([bulk_rows([[one, "Null"]], ["1"])], origin(3))  # BLOB or NULL: joins
    b.add([bulk_rows([[one, "Null"]], ["1"])], origin(4))  # key 1 again: a new statement
    statements, origins = b.take()
    assert [type(s) for s in statements] == [batch.Bulk] * 3
    assert [len(s.rows) for s in statements] == [3, 2, 1]  # type: ignore[union-attr]
    assert [s.types for s in statements] == [  # type: ignore[union-attr]
        parameters.LONGLONG + parameters.VAR_STRING, parameters.LONGLONG + parameters.BLOB,
        parameters.LONGLONG + parameters.VAR_STRING]
    assert [o.where() for o in origins] == ["offsets 0..1, transaction t0", "offsets 2..3, transaction t2",
                                            "offset 4, transaction t4"]


def test_inserts_and_upserts_are_parameters_only_for_a_bulk_follower():
    add = event("Add", "d", ["id", "v"], [[{"SignedInteger": 1}, {"String": "a"}]])
    text, = event_sql(add)
    params, = event_sql(add, bulk=True)
    assert isinstance(text, RowsSql) and text.parts == ["(1,'a')"] and text.types is None
    assert isinstance(params, RowsSql) and params.head == "INSERT INTO `d`.`t` (`id`, `v`) VALUES (?,?)"
    assert params.types == [(parameters.LONGLONG, parameters.VAR_STRING)]
    update = event("Update", "d", ["id", "v"], [([{"SignedInteger": 1}, {"String": "a"}],
                                                   [{"SignedInteger": 1}, {"String": "b"}])])
    upsert, = event_sql(update, bulk=True)
    assert isinstance(upsert, RowsSql) and upsert.expect_each == 2 and upsert.keys == ["1"]
    assert upsert.head == ("INSERT INTO `d`.`t` (`id`, `v`) VALUES (?,?) ON DUPLICATE KEY UPDATE `v`=VALUES(`v`)")
    delete = event("Delete", "d", ["id", "v"], [[{"SignedInteger": 1}, {"String": "b"}]])
    assert event_sql(delete, bulk=True) == event_sql(delete)  # keys in an IN list: text either way


def test_events_of_fewer_rows_stay_text_which_shares_round_trips(monkeypatch):
    monkeypatch.setattr(apply_module, "BULK_MIN_ROWS", 3)
    rows = [[{"SignedInteger": i}, "Null"] for i in range(3)]
    small, = event_sql(event("Add", "d", ["id", "v"], rows[:2]), bulk=True)
    large, = event_sql(event("Add", "d", ["id", "v"], rows), bulk=True)
    assert isinstance(small, RowsSql) and small.types is None and small.parts == ["(0,NULL)", "(1,NULL)"]
    assert isinstance(large, RowsSql) and large.types is not None and len(large.parts) == 3


# ---------------------------------------------------------------------------
# On a server


def consumer_session(server, cls=BulkConnection) -> pymysql.Connection:
    conn = cls(host="127.0.0.1", port=server.port, user="root", password="", autocommit=False, charset="utf8mb4",
               client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.FOUND_ROWS)
    with conn.cursor() as cur:
        for sql in SESSION_SQL:
            cur.execute(sql)
    return conn


@pytest.fixture(scope="module")
def session(follower):
    conn = consumer_session(follower)
    yield conn
    conn.close()


def apply(conn: pymysql.Connection, events: list[ChangeEvent], bulk: bool, checked: bool = True) -> None:
    """Apply the events' statements and COMMIT; `checked`: some went in bulk if and only if `bulk`."""
    b = batch.SqlBatch()
    for n, ev in enumerate(events):
        b.add(event_sql(ev, bulk=bulk), origin(n))
    statements, origins = b.take()
    assert not checked or any(isinstance(s, batch.Bulk) for s in statements) == bulk
    writer.execute(conn, statements + ["COMMIT"], origins + [origin(len(events))], 1 << 24)


def failed_bulk(conn: pymysql.Connection, ev: ChangeEvent, offset: int, txn: str) -> batch.StatementFailed:
    """What running one event's statements in bulk, then COMMIT, on `conn` raises (the test expects a failure)."""
    b = batch.SqlBatch()
    b.add(event_sql(ev, bulk=True), batch.Origin(offset, txn, ev))
    statements, origins = b.take()
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(conn, statements + ["COMMIT"], origins + [origin(offset + 1)], 1 << 20)
    return e.value


def greeting(version: bytes, extended: int) -> bytes:
    """A protocol-10 greeting as MariaDB 10.2+ writes it, its extended capabilities in the reserved bytes."""
    return (b"\x0a" + version + b"\0" + (7).to_bytes(4, "little") + b"12345678\0" + b"\xff\xf7"
            + b"\x2d" + b"\x02\x00" + b"\xff\x81" + b"\x15" + bytes(6) + extended.to_bytes(4, "little")
            + b"123456789012\0" + b"mysql_native_password\0")


def test_the_extended_capabilities_are_read_from_the_greeting_and_a_short_one_has_none():
    assert extended_capabilities(greeting(b"5.5.5-10.11.6-MariaDB", 0x1D)) == 0x1D
    assert extended_capabilities(greeting(b"8.0.36", 0)) == 0
    whole = greeting(b"5.5.5-10.11.6-MariaDB", 0x1D)
    cut = whole[: whole.index(b"123456789012")]  # just the reserved bytes' end
    assert extended_capabilities(cut) == 0x1D and extended_capabilities(cut[:-1]) == 0
    assert extended_capabilities(b"\x0a5.5.5-10.11.6-MariaDB" + bytes(40).replace(b"\0", b"x")) == 0  # no version end


def test_a_mariadb_follower_session_announces_bulk_execution_and_a_plain_one_is_refused_it(follower):
    bulk, plain = consumer_session(follower), consumer_session(follower, SharedTlsConnection)
    try:
        assert bulk.bulk_operations is True and not hasattr(plain, "bulk_operations")
        assert (probe(bulk).bulk, probe(bulk, bulk=False).bulk, probe(plain).bulk) == (True, False, False)
        assert RowPolicy("sql", probe(bulk)).describe() == 'rows as SQL, inserts in bulk ([replay] rows = "sql")'
        assert RowPolicy("sql", probe(bulk, bulk=False)).describe() == 'rows as SQL ([replay] rows = "sql")'
        with bulk.cursor() as cur:
            cur.execute("CREATE OR REPLACE DATABASE bp")
            cur.execute("CREATE TABLE bp.probe (id INT PRIMARY KEY)")
        stmt_id, params = prepare(bulk, "INSERT INTO bp.probe VALUES (?)")
        assert params == 1
        rows = [parameters.param_row([{"SignedInteger": i}])[1] for i in range(3)]
        assert read_result(bulk, send_bulk(bulk, stmt_id, parameters.LONGLONG, rows)) == 3
        bulk.commit()
        stmt_id, _ = prepare(plain, "INSERT INTO bp.probe VALUES (?)")
        with pytest.raises(pymysql.err.MySQLError) as e:  # why BulkConnection announces it
            read_result(plain, send_bulk(plain, stmt_id, parameters.LONGLONG, rows))
        assert e.value.args[0] == 1295
        with plain.cursor() as cur:  # the session goes on
            cur.execute("SELECT COUNT(*) FROM bp.probe")
            assert cur.fetchall() == ((3,),)
            cur.execute("DROP DATABASE bp")
    finally:
        bulk.close()
        plain.close()


def test_every_tag_stored_as_a_parameter_is_the_bytes_its_literal_stores(session):
    """Each COLUMNS entry in a table of its own, once through literals (database `lit`), once through a Bulk
    statement (`par`), once through a Bulk statement written from typed rows (`typ`: the event encoded, then
    decoded as the consumer's SQL path does, cdc_stream.typed_rows); then inserted rows updated (upserts)
    with the values of another row, each way. The rows are compared as the bytes of each column (HEX), so a
    converted charset or a rounded float shows."""
    with session.cursor() as cur:
        for db in ("lit", "par", "typ"):
            cur.execute(f"CREATE OR REPLACE DATABASE {db}")
            for n, (sql_type, _) in enumerate(COLUMNS):
                cur.execute(f"CREATE TABLE {db}.t{n} (id INT PRIMARY KEY, v {sql_type})")
    session.commit()
    for phase in ("Add", "Update"):  # each compared after it
        for n, (sql_type, vals) in enumerate(COLUMNS):
            rows = [[{"SignedInteger": i}, v] for i, v in enumerate(vals + ["Null"])]
            updates = [(row, [row[0], vals[(i + 1) % len(vals)]]) for i, row in enumerate(rows[:-1])]
            for db, bulk in (("lit", False), ("par", True), ("typ", True)):
                ev = event(phase, db, ["id", "v"], rows if phase == "Add" else updates)
                ev.table, ev.uri = f"t{n}", f"flv://test/{db}/t{n}"
                if db == "typ" and phase == "Add":
                    decode_event(encode_event(ev), typed_inserts=1)  # (teaches the rows' types)
                    ev = decode_event(encode_event(ev), typed_inserts=1)
                    assert ev.rows_typed == (len({next(iter(v)) for v in vals}) == 1), sql_type
                apply(session, [ev], bulk, checked=phase == "Add")  # (an update may be one UPDATE per row)
        with session.cursor() as cur:
            for n, (sql_type, vals) in enumerate(COLUMNS):
                got = []
                for db in ("lit", "par", "typ"):
                    cur.execute(f"SELECT id, HEX(v), v IS NULL FROM {db}.t{n} ORDER BY id")
                    got.append(cur.fetchall())
                assert got[0] == got[1] == got[2], (phase, sql_type)
                assert len(got[0]) == len(vals) + 1 and got[0][-1][2] == 1, sql_type
                cur.execute(f"SELECT COUNT(*) FROM lit.t{n} l JOIN par.t{n} p USING (id) WHERE l.v <=> p.v")
                assert cur.fetchall() == ((len(vals) + 1,),), sql_type
    with session.cursor() as cur:
        for db in ("lit", "par", "typ"):
            cur.execute(f"DROP DATABASE {db}")
    session.commit()


def test_bulk_statements_are_pipelined_and_a_failure_commits_nothing(session):
    """Bulk row statements of a transactional table (Origin.overlap) go out before the previous answer is read,
    except one whose statement the session has not prepared yet: its COM_STMT_PREPARE waits for every answer
    before it. A duplicate key in the first fails it; the one sent behind it ran in the open transaction (its
    row is there until the rollback), and the COMMIT was never sent."""
    with session.cursor() as cur:
        cur.execute("CREATE OR REPLACE DATABASE pp")
        for t in ("a", "b", "c"):
            cur.execute(f"CREATE TABLE pp.{t} (id INT PRIMARY KEY, v VARCHAR(5))")
    session.commit()

    def statements(*events: tuple[str, list[int]]) -> tuple[list, list[batch.Origin]]:
        b = batch.SqlBatch()
        for n, (table, ids) in enumerate(events):
            ev = event("Add", "pp", ["id", "v"], [[{"SignedInteger": i}, {"String": table}] for i in ids])
            ev.table = table
            b.add(event_sql(ev, bulk=True), batch.Origin(n, f"t{n}", ev, overlap=True))
        out, origins = b.take()
        assert [type(s) for s in out] == [batch.Bulk] * len(events) and all(o.overlap for o in origins)
        return out + ["COMMIT"], origins + [origin(len(events))]

    writer.execute(session, *statements(("a", [1]), ("b", [1]), ("a", [2]), ("b", [2])), 1 << 20)
    writer.execute(session, *statements(("a", [3]), ("c", [1]), ("b", [3])), 1 << 20)  # c: prepared between
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(session, *statements(("a", [4, 1]), ("b", [4])), 1 << 20)
    assert e.value.origin.offset == 0 and e.value.error.args[0] == 1062
    with session.cursor() as cur:  # b's row 4 ran behind the failure, in the open transaction
        cur.execute("SELECT COUNT(*) FROM pp.b WHERE id = 4")
        assert cur.fetchall() == ((1,),)
    session.rollback()
    with session.cursor() as cur:
        cur.execute("SELECT 'a', id FROM pp.a UNION ALL SELECT 'b', id FROM pp.b UNION ALL SELECT 'c', id FROM pp.c "
                    "ORDER BY 1, 2")
        assert cur.fetchall() == (("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3), ("c", 1))
        cur.execute("DROP DATABASE pp")
    session.commit()


def test_a_bulk_statement_fails_on_its_origin_and_counts_matched_rows(session):
    """A duplicate key in a bulk INSERT is pinned on its statement's origin; an upsert matching a row the
    follower lacks counts 1, not 2, and fails as MISSING_ROW; nothing of either is committed."""
    with session.cursor() as cur:
        cur.execute("CREATE OR REPLACE DATABASE bk")
        cur.execute("CREATE TABLE bk.t (id INT PRIMARY KEY, v VARCHAR(5))")
        cur.execute("INSERT INTO bk.t VALUES (1, 'a')")
    session.commit()
    one, two = {"SignedInteger": 1}, {"SignedInteger": 2}
    b = batch.SqlBatch()
    b.add(event_sql(event("Add", "bk", ["id", "v"], [[two, "Null"]]), bulk=True), origin(0))
    b.add(["SAVEPOINT s"], origin(1))
    b.add(event_sql(event("Add", "bk", ["id", "v"], [[one, "Null"]]), bulk=True), origin(2))
    statements, origins = b.take()
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(session, statements + ["COMMIT"], origins + [origin(3)], 1 << 20)
    assert e.value.origin.offset == 2 and e.value.error.args[0] == 1062
    session.rollback()
    update = [([one, {"String": "a"}], [one, {"String": "b"}]), ([two, {"String": "a"}], [two, {"String": "c"}])]
    b.add(event_sql(event("Update", "bk", ["id", "v"], update), bulk=True), origin(4))
    statements, origins = b.take()
    assert origins[0].expect == 4 and origins[0].keys == ["1", "2"]
    with pytest.raises(batch.StatementFailed) as e:
        writer.execute(session, statements + ["COMMIT"], origins + [origin(5)], 1 << 20)
    assert e.value.origin.offset == 4 and e.value.error.args == (
        1032, "the statement's affected-row count on the follower is 3, not 4")
    session.rollback()
    with session.cursor() as cur:
        cur.execute("SELECT id, v FROM bk.t")
        assert cur.fetchall() == ((1, "a"),)
        cur.execute("DROP DATABASE bk")
    session.commit()


def test_prepared_statements_are_reused_and_their_number_is_bounded(follower, monkeypatch):
    monkeypatch.setattr(writer, "PREPARED_KEPT", 3)
    conn = consumer_session(follower)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE OR REPLACE DATABASE pk")
            for n in range(5):
                cur.execute(f"CREATE TABLE pk.t{n} (id INT PRIMARY KEY)")

        def status(name: str) -> int:
            with conn.cursor() as cur:
                cur.execute(f"SHOW SESSION STATUS LIKE '{name}'")
                return int(cur.fetchall()[0][1])

        def insert(n: int, key: int) -> None:
            ev = event("Add", "pk", ["id"], [[{"SignedInteger": key}]])
            ev.table = f"t{n}"
            apply(conn, [ev], True)

        prepared, closed = status("Com_stmt_prepare"), status("Com_stmt_close")
        for key, n in enumerate((0, 1, 0, 1, 0, 1)):
            insert(n, key)
        assert status("Com_stmt_prepare") - prepared == 2  # each table's INSERT once
        for n in range(5):
            insert(n, 100)
        assert status("Com_stmt_prepare") - prepared == 5
        assert status("Com_stmt_close") - closed == 2  # the least recently used past PREPARED_KEPT
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM pk.t0")
            assert cur.fetchall() == ((4,),)
            cur.execute("DROP DATABASE pk")
        conn.commit()
    finally:
        conn.close()


def test_a_follower_out_of_prepared_statements_stops_the_consumer_with_the_fix(follower):
    """max_prepared_stmt_count counts every session's statements: a follower whose applications hold them all
    refuses the bulk statement's prepare (1461); the error names both fixes, and nothing is committed."""
    conn = consumer_session(follower)
    admin = follower.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE OR REPLACE DATABASE full_ps")
            cur.execute("CREATE TABLE full_ps.t (id INT PRIMARY KEY)")
        with admin.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.max_prepared_stmt_count")
            limit = cur.fetchall()[0][0]
            cur.execute("SET GLOBAL max_prepared_stmt_count = 0")
        try:
            failure = failed_bulk(conn, event("Add", "full_ps", ["id"], [[{"SignedInteger": 1}]]), 7, "t7")
        finally:
            with admin.cursor() as cur:
                cur.execute(f"SET GLOBAL max_prepared_stmt_count = {int(limit)}")
        assert failure.error.args[0] == 1461 and failure.origin.offset == 7
        conn.rollback()
        message = str(apply_error(failure.error, failure.origin))
        assert message.startswith("Add on full_ps.t failed at offset 7, transaction t7: Can't create more than "
                                  "max_prepared_stmt_count statements")
        assert message.endswith("(MySQL error 1461); the follower refused the prepared statement that carries these "
                                "rows as parameters ([replay] bulk): raise max_prepared_stmt_count on the follower "
                                "(SET GLOBAL and its my.cnf) if its sessions hold that many, or set [replay] bulk = "
                                "false to send rows as SQL text; then restart the consumer; nothing of the "
                                "transaction was applied")
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM full_ps.t")
            assert cur.fetchall() == ((0,),)
            cur.execute("DROP DATABASE full_ps")
        conn.commit()
    finally:
        conn.close()
        admin.close()


def test_a_bulk_statement_runs_every_row_with_the_leaders_checks_off(session):
    """Rows the leader wrote with foreign_key_checks = 0 carry it in their statement (MariaDB's SET STATEMENT
    prefix): a bulk statement applies it to every row, as the text statement does, and only to them."""
    with session.cursor() as cur:
        cur.execute("CREATE OR REPLACE DATABASE fk")
        cur.execute("CREATE TABLE fk.parent (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("CREATE TABLE fk.t (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES fk.parent (id)) "
                    "ENGINE=InnoDB")
    session.commit()
    orphans = event("Add", "fk", ["id", "p"], [[{"SignedInteger": i}, {"SignedInteger": 100 + i}] for i in range(3)])
    orphans.checks = RowChecks(foreign_keys=False)
    apply(session, [orphans], True)
    checked = event("Add", "fk", ["id", "p"], [[{"SignedInteger": 9}, {"SignedInteger": 109}]])
    assert failed_bulk(session, checked, 1, "t1").error.args[0] == 1452  # the checks are on again for the next one
    session.rollback()
    with session.cursor() as cur:
        cur.execute("SELECT id, p FROM fk.t ORDER BY id")
        assert cur.fetchall() == ((0, 100), (1, 101), (2, 102))
        cur.execute("SELECT @@foreign_key_checks")
        assert cur.fetchall() == ((1,),)
        cur.execute("DROP DATABASE fk")
    session.commit()
