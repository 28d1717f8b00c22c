"""The producer's middle without a server: binlog handler calls -> Assembler -> Outbox -> an in-memory topic.

Each test feeds the calls cdc_producer/binlog.dispatch would make for a real binlog and
asserts the exact records on the topic (both layouts), and where a restart resumes.
"""

from __future__ import annotations

import base64
import json

import msgspec
import pytest

from cdc_producer.assemble import RereadTransaction
from cdc_producer.binlog import BinlogQuery, LeaderInfo, RowChange, XaGtid
from cdc_producer.context import InsertId, RandSeeds, Unreadable
from cdc_producer.publish import Publisher
from cdc_producer.resume import ResumePoint, ResumeState, tail_of
from cdc_stream.errors import DataError
from cdc_stream.events import QuerySession, UserVar
from cdc_stream.filters import TableFilter
from cdc_stream.layout import Layout
from cdc_stream.positions import BinlogFile, Position, PreparedXa, SnapshotWindow
from cdc_stream.topics.memory import MemoryStream

MARIADB = LeaderInfo("mariadb", "10.11.19-MariaDB", 1, None, True)
MYSQL_NO_GTID = LeaderInfo("mysql", "8.0.36", 1, "3e11fa47-71ca-11e1-9e33-c80aa9429562", False)
COLUMNS = ["id", "v"]


def row(i: int, v: str) -> list:
    return [{"SignedInteger": i}, {"String": v}]


def rows_event(table: str, op: str, rows: list, end: int, size: int = 100, db: str = "shop", flags: int = 0,
               binlog: bytes | None = None) -> RowChange:
    """A rows event as dispatch() hands it on; decoding gives `rows` (pairs for an Update); `binlog`:
    its raw table map + rows event."""

    def decode(as_json: bool) -> tuple[list[str], list]:
        if not as_json:
            return COLUMNS, rows
        if op == "Update":
            return COLUMNS, [msgspec.json.encode({"before_cols": b, "after_cols": a}) for b, a in rows]
        return COLUMNS, [msgspec.json.encode({"cols": r}) for r in rows]

    return RowChange(db, table, op, end, size, 1700000000, decode, lambda: ["id"], flags,
                     None if binlog is None else lambda: binlog)


def query(sql: str, end: int, db: str | None = "shop", size: int = 50, **fields) -> BinlogQuery:
    return BinlogQuery(sql, db, end - size, end, size, 1700000000, **fields)


class Rig:
    """A publisher over an in-memory stream, and what it wrote."""

    def __init__(self, layout: Layout = Layout("cdc"), info: LeaderInfo = MARIADB, start: str = "0-1-4,1-2-3",
                 filters: TableFilter = TableFilter(), chunk_bytes: int = 1 << 20, tmp_path=None, windows=None,
                 binlog: bool = True):
        self.stream, self.layout = MemoryStream(), layout
        state = ResumeState.beside(str(tmp_path), self.stream.identity, layout.log_topic) if tmp_path else None
        position = Position(gtid_set=start) if info.gtid_mode else Position(binlog=BinlogFile("binlog.000001", 4))
        self.publisher = Publisher(layout.writer(self.stream), "src", filters, info, 0, position, state, windows,
                                   chunk_bytes=chunk_bytes, binlog=binlog)
        self.binlog = self.publisher.assembler
        self.binlog.on_rotate("binlog.000001")

    def records(self, topic: str | None = None) -> list[dict]:
        self.publisher.flush()
        t = self.stream.topic(topic or self.layout.log_topic)
        return [json.loads(r.value) for r in t.read(0, max_records=10_000)]

    def events(self) -> list[dict]:
        """The change events in source order, read through the layout as a consumer does."""
        self.publisher.flush()
        reader = self.layout.reader(self.stream)
        return [json.loads(msgspec.json.encode(e.to_dict())) for r in reader.read(0, max_records=10_000)
                for e in r.events()]

    def tail(self):
        self.publisher.flush()
        return tail_of(self.layout.reader(self.stream).tail(), self.layout.log_topic)


def summary(events: list[dict]) -> list[tuple]:
    """(sequence, txn id, index, last, operation) of each event."""
    return [(e["sequence"], e["txn"]["id"], e["txn"]["index"], e["txn"]["last"], next(iter(e["operation"])))
            for e in events]


def test_transactions_become_numbered_records_carrying_the_position_after_them():
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)  # MariaDB: the GTID event is the BEGIN
    b.on_rows(rows_event("t", "Add", [row(1, "a"), row(2, "b")], 300))
    b.on_rows(rows_event("t", "Update", [(row(1, "a"), row(1, "z"))], 400))
    b.on_xid(450)
    b.on_gtid("1-2-4", False, 460)  # standalone: DDL
    b.on_query(query("CREATE TABLE u (id INT PRIMARY KEY)", 560))
    events = rig.events()
    assert summary(events) == [(0, "0-1-5", 0, False, "Add"), (1, "0-1-5", 1, True, "Update"),
                               (2, "1-2-4", 0, True, "Query")]
    first, last, ddl = events
    assert first["uri"] == "flv://src/shop/t" and first["gtid"] == "0-1-5" and "gtid_set" not in first
    assert first["operation"] == {"Add": {"rows": [{"cols": row(1, "a")}, {"cols": row(2, "b")}]}}
    assert first["bn_file"] == {"fileName": "binlog.000001", "offset": 300}
    assert last["bn_file"] == {"fileName": "binlog.000001", "offset": 450}  # the commit's end
    assert last["gtid_set"] == "0-1-5,1-2-3"  # merged into the state it started from
    assert ddl["gtid_set"] == "0-1-5,1-2-4" and ddl["database"] == "shop"
    assert ddl["operation"] == {"Query": "CREATE TABLE u (id INT PRIMARY KEY)"}
    assert rig.publisher.stats.transactions == 2 and rig.publisher.stats.rows == 3
    tail = rig.tail()
    assert (tail.next_sequence, tail.position) == (3, Position(gtid_set="0-1-5,1-2-4"))


def test_mysql_without_gtids_names_transactions_by_their_begin_and_resumes_by_file_position():
    rig = Rig(info=MYSQL_NO_GTID)
    b = rig.binlog
    b.on_query(query("BEGIN", 200))
    b.on_rows(rows_event("t", "Delete", [row(1, "a")], 300))
    b.on_xid(331)
    (event,) = rig.events()
    assert event["txn"] == {"id": "binlog.000001:150", "index": 0, "last": True}
    assert event["server_uuid"] == MYSQL_NO_GTID.server_uuid and "gtid" not in event
    assert rig.tail().position == Position(binlog=BinlogFile("binlog.000001", 331), server_uuid=MYSQL_NO_GTID.server_uuid)


def test_a_ddl_inside_a_gtid_group_stays_in_its_transaction():
    """CREATE TABLE ... SELECT: MariaDB logs the DDL and the rows in one group, committed by its XID."""
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_query(query("CREATE TABLE t2 SELECT * FROM t", 200))
    b.on_rows(rows_event("t2", "Add", [row(1, "a")], 300))
    b.on_xid(330)
    assert summary(rig.events()) == [(0, "0-1-5", 0, False, "Query"), (1, "0-1-5", 1, True, "Add")]


def test_savepoint_statements_are_not_events_and_rows_rolled_back_to_one_are_dropped():
    """MariaDB logs SAVEPOINT / ROLLBACK TO once the transaction wrote a non-transactional table: the
    rows between them are undone on the leader (and by a native replica's InnoDB)."""
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_rows(rows_event("t", "Add", [row(1, "kept")], 120))
    b.on_query(query("SAVEPOINT `s`", 150))
    b.on_rows(rows_event("t", "Add", [row(2, "rolled back")], 300))
    b.on_rows(rows_event("u", "Delete", [row(3, "rolled back")], 320))
    b.on_query(query("ROLLBACK TO `s`", 350))
    b.on_rows(rows_event("t", "Add", [row(4, "after")], 370))
    b.on_query(query("SAVEPOINT `S`", 380))  # names are case-insensitive: the same savepoint, taken again
    b.on_rows(rows_event("t", "Add", [row(5, "kept: released")], 390))
    b.on_query(query("RELEASE SAVEPOINT s", 395))
    b.on_query(query("COMMIT", 400))
    events = rig.events()
    assert summary(events) == [(0, "0-1-5", 0, False, "Add"), (1, "0-1-5", 1, False, "Add"),
                               (2, "0-1-5", 2, True, "Add")]
    assert [e["operation"]["Add"]["rows"][0]["cols"] for e in events] == [row(1, "kept"), row(4, "after"),
                                                                           row(5, "kept: released")]


def test_nested_savepoints_roll_back_to_the_named_one():
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_query(query("SAVEPOINT `a`", 110))
    b.on_rows(rows_event("t", "Add", [row(1, "after a")], 120))
    b.on_query(query("SAVEPOINT `b`", 130))
    b.on_rows(rows_event("t", "Add", [row(2, "after b")], 140))
    b.on_query(query("ROLLBACK TO `b`", 150))
    b.on_rows(rows_event("t", "Add", [row(3, "after b again")], 160))
    b.on_query(query("ROLLBACK TO `a`", 170))  # also undoes b, which is gone now
    b.on_query(query("ROLLBACK TO `b`", 175))  # (the leader refuses this: never logged; changes nothing)
    b.on_rows(rows_event("t", "Add", [row(4, "last")], 180))
    b.on_xid(200)
    assert [e["operation"]["Add"]["rows"][0]["cols"] for e in rig.events()] == [row(4, "last")]


def test_a_transaction_logged_with_rollback_publishes_nothing():
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_rows(rows_event("t", "Add", [row(1, "a")], 200))
    b.on_query(query("ROLLBACK", 250))
    b.on_gtid("0-1-6", True, 260)
    b.on_rows(rows_event("t", "Add", [row(2, "b")], 300))
    b.on_xid(330)
    assert summary(rig.events()) == [(0, "0-1-6", 0, True, "Add")]
    assert rig.tail().position == Position(gtid_set="0-1-6,1-2-3")


def test_transactions_the_filters_drop_advance_only_the_state_file(tmp_path):
    rig = Rig(filters=TableFilter(include_dbs=("shop",)), tmp_path=tmp_path)
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_rows(rows_event("t", "Add", [row(1, "a")], 300))
    b.on_xid(330)
    b.on_gtid("0-1-6", True, 340)
    b.on_rows(rows_event("t", "Add", [row(2, "b")], 400, db="other"))
    b.on_xid(430)
    rig.publisher.flush()
    rig.publisher.flush_state(force=True)
    assert summary(rig.events()) == [(0, "0-1-5", 0, True, "Add")]
    assert rig.publisher.stats.skipped_transactions == 1
    state = ResumeState.beside(str(tmp_path), rig.stream.identity, "cdc")
    tail = rig.tail()
    assert tail.position == Position(gtid_set="0-1-5,1-2-3")  # the topic's last transaction
    assert state.load(tail) == ResumePoint(Position(gtid_set="0-1-6,1-2-3"))  # past the dropped one
    b.on_gtid("0-1-7", True, 440)
    b.on_rows(rows_event("t", "Add", [row(3, "c")], 500))
    b.on_xid(530)
    assert state.load(rig.tail()) is None  # written against another tail: not used


def test_a_big_transaction_goes_out_in_chunks_and_a_dropped_connection_republishes_it_whole():
    rig = Rig(chunk_bytes=250)
    b = rig.binlog
    b.on_gtid("0-1-5", False, 50)
    b.on_query(query("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)", 90))
    b.on_gtid("0-1-6", True, 100)
    for i in range(5):  # 100 bytes each: a chunk of 2 events is handed on at the 3rd and 5th event
        b.on_rows(rows_event("t", "Add", [row(i, "x")], 200 + 100 * i))
    rig.publisher.discard_partial()  # the connection dropped before the commit
    assert summary(rig.records()) == [(0, "0-1-5", 0, True, "Query"), (1, "0-1-6", 0, False, "Add"),
                                      (2, "0-1-6", 1, False, "Add"), (3, "0-1-6", 2, False, "Add"),
                                      (4, "0-1-6", 3, False, "Add")]
    tail = rig.tail()  # before the partial transaction; its numbers are not used again
    assert (tail.position, tail.next_sequence) == (Position(gtid_set="0-1-5,1-2-3"), 5)
    b.on_gtid("0-1-6", True, 100)  # read again from its start
    for i in range(5):
        b.on_rows(rows_event("t", "Add", [row(i, "x")], 200 + 100 * i))
    b.on_xid(700)
    assert summary(rig.records())[5:] == [(5, "0-1-6", 0, False, "Add"), (6, "0-1-6", 1, False, "Add"),
                                          (7, "0-1-6", 2, False, "Add"), (8, "0-1-6", 3, False, "Add"),
                                          (9, "0-1-6", 4, True, "Add")]
    assert rig.tail().position == Position(gtid_set="0-1-6,1-2-3")


def test_per_table_topics_name_only_the_complete_copy_of_a_republished_transaction():
    rig = Rig(layout=Layout("{database}_{table}", "txns"), chunk_bytes=250)
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    for i in range(3):
        b.on_rows(rows_event("a" if i % 2 else "b", "Add", [row(i, "x")], 200 + 100 * i))
    rig.publisher.discard_partial()
    b.on_gtid("0-1-5", True, 100)
    for i in range(3):
        b.on_rows(rows_event("a" if i % 2 else "b", "Add", [row(i, "x")], 200 + 100 * i))
    b.on_xid(600)
    b.on_gtid("0-1-6", False, 610)
    b.on_query(query("ALTER TABLE a ADD c INT", 700))
    (txn, ddl) = rig.records("txns")
    # The partial copy left events 0-1 in shop_b and shop_a... at offsets no record names.
    assert txn["topics"] == {"shop_b": [1, 2], "shop_a": [1, 1]} and txn["sequence"] == [2, 4]
    assert ddl["topics"] == {"shop_a": [2, 1]}  # the DDL of one table goes with its rows
    assert [e["sequence"] for e in rig.events()] == [2, 3, 4, 5]
    assert [r["txn"]["last"] for r in rig.records("shop_b")] == [False, False, True]
    assert rig.tail().position == Position(gtid_set="0-1-6,1-2-3")


def test_snapshot_windows_drop_what_the_snapshot_holds_until_the_stream_passes_them():
    windows = {"shop.t": SnapshotWindow("0-1-10", [5]), "shop.u": SnapshotWindow("0-1-10", None)}
    rig = Rig(windows=windows)
    b = rig.binlog
    b.on_gtid("0-1-8", True, 100)
    b.on_rows(rows_event("t", "Add", [row(3, "kept"), row(7, "copied later")], 200))
    b.on_rows(rows_event("u", "Add", [row(1, "copied later")], 300))
    b.on_xid(330)
    b.on_gtid("0-1-9", False, 340)
    b.on_query(query("ALTER TABLE u ADD c INT", 400))  # the snapshot's CREATE TABLE has it already
    b.on_gtid("0-1-11", True, 410)
    b.on_rows(rows_event("u", "Add", [row(2, "after the window")], 500))
    b.on_xid(530)
    first, second = rig.events()
    assert first["operation"]["Add"]["rows"] == [{"cols": row(3, "kept")}]
    assert first["windows"] == {"shop.t": {"until": "0-1-10", "key_after": [5]},
                                "shop.u": {"until": "0-1-10", "key_after": None}}
    assert second["operation"]["Add"]["rows"] == [{"cols": row(2, "after the window")}]
    assert "windows" not in second  # the stream passed 0-1-10: closed
    assert rig.tail().windows == {}


def test_a_heartbeat_appends_what_is_queued():
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_rows(rows_event("t", "Add", [row(1, "a")], 200))
    b.on_xid(230)
    topic = rig.stream.topic("cdc")
    assert topic.end_offset() == 0 and rig.publisher.queued  # batched while the binlog has more
    b.on_heartbeat()
    assert topic.end_offset() == 1 and not rig.publisher.outbox.unflushed


# -- what a native replica applies the rows with: the leader's binlog events and checks ----------------

FDE = b"FDE:format-description"


def raw(n: int) -> bytes:
    """Stand-in bytes of a table map + rows event (the assembler only carries them)."""
    return f"TM{n}+ROWS{n}".encode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_row_events_carry_the_leaders_binlog_events_the_format_description_first_in_each_transaction():
    rig = Rig(windows={"shop.w": SnapshotWindow("0-1-6", [5])})
    b = rig.binlog
    b.on_format(FDE)
    b.on_gtid("0-1-5", True, 100)
    b.on_rows(rows_event("w", "Add", [row(3, "kept"), row(7, "trimmed")], 150, binlog=raw(0)))  # a window trims it
    b.on_rows(rows_event("t", "Add", [row(1, "a")], 200, binlog=raw(1), flags=0x01))  # STMT_END_F: no check off
    b.on_rows(rows_event("t", "Update", [(row(1, "a"), row(1, "b"))], 300, binlog=raw(2), flags=0x02 | 0x04 | 0x80))
    b.on_xid(330)
    b.on_gtid("0-1-7", True, 340)
    b.on_query(query("CREATE TABLE x (id INT)", 380))  # a DDL inside the group carries no binlog
    b.on_rows(rows_event("t", "Delete", [row(1, "b")], 400, binlog=raw(3), flags=0x80))
    b.on_xid(430)
    trimmed, first, second, ddl, delete = rig.events()
    assert "binlog" not in trimmed and "checks" not in trimmed  # its rows no longer match the leader's event
    assert first["binlog"] == b64(FDE + raw(1)) and "checks" not in first
    assert second["binlog"] == b64(raw(2))
    assert second["checks"] == {"foreign_keys": False, "unique": False, "check_constraints": False}
    assert "binlog" not in ddl
    assert delete["binlog"] == b64(FDE + raw(3))  # the next transaction's first: the format description again
    assert delete["checks"] == {"check_constraints": False}


def test_with_events_binlog_off_row_events_carry_no_binlog_events():
    """[events] binlog = false: rows and checks as ever, no `binlog` (the bytes are not even read)."""
    rig = Rig(binlog=False)
    b = rig.binlog
    b.on_format(FDE)
    b.on_gtid("0-1-5", True, 100)
    read: list[int] = []
    change = rows_event("t", "Add", [row(1, "a")], 200, flags=0x02)
    change.binlog = lambda: read.append(1) or raw(1)
    b.on_rows(change)
    b.on_xid(230)
    (event,) = rig.events()
    assert "binlog" not in event and event["checks"] == {"foreign_keys": False} and read == []
    assert event["operation"] == {"Add": {"rows": [{"cols": row(1, "a")}]}}


def test_a_chunked_transaction_carries_the_format_description_once_and_without_it_no_binlog():
    rig = Rig(chunk_bytes=250)
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_rows(rows_event("t", "Add", [row(0, "x")], 150, binlog=raw(0)))  # no format description read yet
    b.on_xid(160)
    b.on_format(FDE)
    b.on_gtid("0-1-6", True, 170)
    for i in range(5):
        b.on_rows(rows_event("t", "Add", [row(i, "x")], 200 + 100 * i, binlog=raw(i)))
    b.on_xid(700)
    events = rig.events()
    assert "binlog" not in events[0]
    assert [e["binlog"] for e in events[1:]] == [b64(FDE + raw(0))] + [b64(raw(i)) for i in range(1, 5)]
    assert [e["txn"]["index"] for e in events[1:]] == [0, 1, 2, 3, 4]


def test_query_events_carry_the_leaders_session_error_code_and_exact_bytes():
    rig = Rig()
    b = rig.binlog
    session = QuerySession(sql_mode=4, character_set_client=8, collation_connection=8, collation_server=45,
                           time_zone="+05:00", foreign_key_checks=False, timestamp_us=1700000000123456)
    b.on_gtid("0-1-5", False, 100)
    b.on_query(query("DROP VIEW v1, v2", 200, session=session, error_code=4092))
    b.on_gtid("0-1-6", False, 210)
    b.on_query(query("CREATE TABLE l1 (s VARCHAR(3) DEFAULT '?')", 300, session=session,
                     query_b64=b64(b"CREATE TABLE l1 (s VARCHAR(3) DEFAULT '\x81\x40')")))
    drop, create = rig.events()
    assert drop["session"] == {"sql_mode": 4, "character_set_client": 8, "collation_connection": 8,
                               "collation_server": 45, "time_zone": "+05:00", "foreign_key_checks": False,
                               "timestamp_us": 1700000000123456}
    assert drop["error_code"] == 4092 and "query_b64" not in drop
    assert "error_code" not in create
    assert base64.b64decode(create["query_b64"]) == b"CREATE TABLE l1 (s VARCHAR(3) DEFAULT '\x81\x40')"


# -- XA: held from XA PREPARE to XA COMMIT (published then) or XA ROLLBACK (dropped) -----------------------

XA1, XA2, XA3 = "X'7831',X'',1", "X'7832',X'',1", "X'7833',X'6271',7"


def xa_prepare(b, gtid: str, xid: str, start: int, rows: list, table: str = "t") -> None:
    """MariaDB's XA PREPARE group: GTID (FL_PREPARED_XA + xid), rows, XA END, XA_PREPARE."""
    b.on_gtid(gtid, True, start, XaGtid(xid, prepared=True))
    for i, r in enumerate(rows):
        b.on_rows(rows_event(table, "Add", [r], start + 50 + 10 * i, binlog=raw(r[0]["SignedInteger"])))
    b.on_query(query(f"XA END {xid}", start + 90))
    b.on_xa_prepare(xid, False, start + 99)


def test_a_live_copy_splits_an_xa_transactions_rows_at_its_commit_and_a_rollback_leaves_no_trace():
    """The rows of an XA PREPARE group become visible to a chunk's read at the XA COMMIT (the leader logs it
    before its engines commit): the copy's cursor splits them there, a chunk in flight takes their images there."""
    from cdc_producer.chunks import LiveCopy, _Chunk
    from cdc_producer.snapshot import TableInfo
    from cdc_stream.positions import CopyCursor

    copy = LiveCopy(None, MARIADB, "src", 100, {"shop.t": CopyCursor(copy="c1", after=[5])})  # type: ignore[arg-type]
    copy._tables["shop.t"] = TableInfo("shop", "t", COLUMNS, ["signed", "string"], ["id"], int_pk=True)
    rig = Rig(start="0-1-4")
    b = rig.binlog
    b.on_format(FDE)
    b.copy = copy
    xa_prepare(b, "0-1-5", XA1, 100, [row(7, "xa"), row(3, "xa")])  # 7: above the cursor, 3: copied already
    copy._chunk = _Chunk("shop.t", (5,), (10,), Position(gtid_set="0-1-9"))  # read while the XA is prepared
    xa_prepare(b, "0-1-6", XA2, 200, [row(8, "gone"), row(2, "gone")])
    assert rig.events() == [] and copy._chunk.overrides == {}  # nothing is visible to a read at a prepare
    xa_outcome(b, "0-1-7", XA1, "COMMIT", 300)
    xa_outcome(b, "0-1-8", XA2, "ROLLBACK", 400)
    (event,) = rig.events()
    assert summary([event]) == [(0, "0-1-7", 0, True, "Add")]
    assert event["operation"] == {"Add": {"rows": [{"cols": row(3, "xa")}]}}
    assert event["binlog"] == b64(FDE + raw(3))  # the format description moves to the first event kept
    assert copy._chunk.overrides == {(7,): row(7, "xa")}  # the chunk publishes row 7 as the XA COMMIT left it
    assert b.position == Position(gtid_set="0-1-8") and not b.prepared


def test_a_live_copy_splits_mysqls_one_phase_xa_commit_as_it_commits():
    """MySQL's XA COMMIT ... ONE PHASE: XA START, rows, XA END, an XA_PREPARE event marked one-phase: an
    ordinary commit, whose rows of a table being copied are split against the cursor there."""
    from cdc_producer.chunks import LiveCopy
    from cdc_producer.snapshot import TableInfo
    from cdc_stream.positions import CopyCursor

    copy = LiveCopy(None, MYSQL_NO_GTID, "src", 100, {"shop.t": CopyCursor(copy="c1", after=[5])})  # type: ignore[arg-type]
    copy._tables["shop.t"] = TableInfo("shop", "t", COLUMNS, ["signed", "string"], ["id"], int_pk=True)
    rig = Rig(info=MYSQL_NO_GTID)
    b = rig.binlog
    b.on_format(FDE)
    b.copy = copy
    b.on_query(query("XA START X'7831',X'',1", 150))
    b.on_rows(rows_event("t", "Add", [row(9, "above")], 200, binlog=raw(9)))
    b.on_rows(rows_event("t", "Add", [row(2, "copied")], 250, binlog=raw(2)))
    b.on_query(query("XA END X'7831',X'',1", 300))
    b.on_xa_prepare(XA1, True, 350)
    (event,) = rig.events()
    assert event["operation"] == {"Add": {"rows": [{"cols": row(2, "copied")}]}}
    assert event["binlog"] == b64(FDE + raw(2)) and event["txn"]["last"]


def xa_outcome(b, gtid: str, xid: str, verb: str, start: int) -> None:
    """MariaDB's XA COMMIT/ROLLBACK group: GTID (FL_STANDALONE|FL_COMPLETED_XA + xid), the statement."""
    b.on_gtid(gtid, False, start, XaGtid(xid, prepared=False))
    b.on_query(query(f"XA {verb} {xid}", start + 90))


def insert(b, gtid: str, i: int, start: int) -> None:
    b.on_gtid(gtid, True, start)
    b.on_rows(rows_event("t", "Add", [row(i, "plain")], start + 50, binlog=raw(i)))
    b.on_xid(start + 90)


def test_an_xa_transaction_is_published_whole_at_its_commit_with_the_commits_gtid():
    rig = Rig(start="0-1-4")
    b = rig.binlog
    b.on_format(FDE)
    xa_prepare(b, "0-1-5", XA1, 100, [row(1, "xa"), row(2, "xa")])
    insert(b, "0-1-6", 3, 200)
    assert rig.binlog.position == Position(gtid_set="0-1-6")  # past the prepare: its events are held
    xa_outcome(b, "0-1-7", XA1, "COMMIT", 300)
    plain, xa_first, xa_last = rig.events()
    assert summary([plain, xa_first, xa_last]) == [(0, "0-1-6", 0, True, "Add"), (1, "0-1-7", 0, False, "Add"),
                                                   (2, "0-1-7", 1, True, "Add")]
    assert plain["xa_pending"] == [{"xid": XA1, "resume_from": "0-1-4", "gtid": "0-1-5"}]
    assert xa_first["gtid"] == xa_last["gtid"] == "0-1-7" and xa_last["gtid_set"] == "0-1-7"
    assert xa_first["bn_file"] == {"fileName": "binlog.000001", "offset": 150}  # where its rows are
    assert xa_last["bn_file"] == {"fileName": "binlog.000001", "offset": 390}  # the XA COMMIT's end
    assert "xa_pending" not in xa_last
    assert [e["binlog"] for e in (plain, xa_first, xa_last)] == [b64(FDE + raw(3)), b64(FDE + raw(1)), b64(raw(2))]
    assert [e["operation"]["Add"]["rows"][0]["cols"] for e in (xa_first, xa_last)] == [row(1, "xa"), row(2, "xa")]
    tail = rig.tail()
    assert (tail.position, tail.xa_pending) == (Position(gtid_set="0-1-7"), [])


def test_interleaved_xa_transactions_commit_and_roll_back_independently():
    rig = Rig(start="0-1-4")
    b = rig.binlog
    xa_prepare(b, "0-1-5", XA2, 100, [row(2, "b")])
    xa_prepare(b, "0-1-6", XA1, 200, [row(1, "a"), row(10, "a")])
    xa_prepare(b, "0-1-7", XA3, 300, [row(3, "c")])
    insert(b, "0-1-8", 4, 400)
    xa_outcome(b, "0-1-9", XA2, "COMMIT", 500)
    xa_outcome(b, "0-1-10", XA1, "ROLLBACK", 600)
    xa_outcome(b, "0-1-11", XA3, "COMMIT", 700)
    events = rig.events()
    assert summary(events) == [(0, "0-1-8", 0, True, "Add"), (1, "0-1-9", 0, True, "Add"),
                               (2, "0-1-11", 0, True, "Add")]
    assert [e["operation"]["Add"]["rows"][0]["cols"] for e in events] == [row(4, "plain"), row(2, "b"), row(3, "c")]
    assert [x["xid"] for x in events[0]["xa_pending"]] == [XA2, XA1, XA3]  # oldest prepare first
    assert [x["resume_from"] for x in events[0]["xa_pending"]] == ["0-1-4", "0-1-5", "0-1-6"]
    assert [x["xid"] for x in events[1]["xa_pending"]] == [XA1, XA3]  # XA2 committed, XA1 rolls back later
    assert "xa_pending" not in events[2]
    assert rig.binlog.position == Position(gtid_set="0-1-11") and not rig.binlog.prepared


def test_mysql_xa_groups_and_one_phase_commits():
    """MySQL: XA START opens the prepared group; XA_PREPARE ends it (or, one-phase, commits it);
    the outcome is a Query naming the xid."""
    rig = Rig(info=MYSQL_NO_GTID)
    b = rig.binlog
    b.on_query(query("XA START X'7831',X'',1", 120))
    b.on_rows(rows_event("t", "Add", [row(1, "two-phase")], 200))
    b.on_query(query("XA END X'7831',X'',1", 220))
    b.on_xa_prepare(XA1, False, 260)
    b.on_query(query("XA START X'7832',X'',1", 320))
    b.on_rows(rows_event("t", "Add", [row(2, "one phase")], 400))
    b.on_query(query("XA END X'7832',X'',1", 420))
    b.on_xa_prepare(XA2, True, 460)
    b.on_query(query("XA COMMIT X'7831',X'',1", 520))
    one_phase, committed = rig.events()
    assert (one_phase["txn"]["id"], one_phase["bn_file"]["offset"]) == ("binlog.000001:270", 460)
    assert one_phase["xa_pending"] == [{"xid": XA1, "resume_from": "binlog.000001:4"}]
    assert (committed["txn"]["id"], committed["bn_file"]["offset"]) == ("binlog.000001:520", 520)
    assert committed["operation"]["Add"]["rows"][0]["cols"] == row(1, "two-phase")
    assert rig.tail().position == Position(binlog=BinlogFile("binlog.000001", 520), server_uuid=MYSQL_NO_GTID.server_uuid)


def test_an_xa_commit_whose_prepare_was_never_read_stops_naming_the_fix():
    rig = Rig(start="0-1-4")
    with pytest.raises(DataError) as stop:
        xa_outcome(rig.binlog, "0-1-7", XA1, "COMMIT", 300)
    assert str(stop.value) == (
        "XA COMMIT of 'x1' (GTID 0-1-7) commits a transaction prepared before the position this producer started "
        "reading at (gtid 0-1-4): its rows are not in the binlog it reads, so they would be lost to the follower. "
        "Re-snapshot the tables that transaction wrote (cdc-producer PROFILE --snapshot db.table ...): the stream "
        "then goes on past this XA COMMIT")
    assert rig.records() == [] and rig.binlog.position == Position(gtid_set="0-1-4")
    rollback = Rig(start="0-1-4")  # a rollback of one: nothing was lost
    xa_outcome(rollback.binlog, "0-1-7", XA1, "ROLLBACK", 300)
    assert rollback.binlog.position == Position(gtid_set="0-1-7") and rollback.records() == []


def test_an_xa_commit_a_snapshot_window_covers_needs_no_prepare():
    """After `cdc-producer --snapshot db.t`, the tables were read after the commit: it goes on past it."""
    rig = Rig(start="0-1-4", windows={"shop.t": SnapshotWindow("0-1-9", None)})
    xa_outcome(rig.binlog, "0-1-7", XA1, "COMMIT", 300)
    insert(rig.binlog, "0-1-10", 1, 400)
    assert summary(rig.events()) == [(0, "0-1-10", 0, True, "Add")]


def test_a_restart_between_prepare_and_commit_reads_the_prepare_again_and_publishes_nothing_twice(tmp_path):
    rig = Rig(start="0-1-4", tmp_path=tmp_path, filters=TableFilter(include_dbs=("shop",)))
    b = rig.binlog
    b.on_format(FDE)
    insert(b, "0-1-5", 1, 100)
    xa_prepare(b, "0-1-6", XA1, 200, [row(2, "xa")])
    insert(b, "0-1-7", 3, 300)
    b.on_gtid("0-1-8", True, 400)  # filtered out: moves only the state file
    b.on_rows(rows_event("t", "Add", [row(9, "other")], 450, db="other"))
    b.on_xid(490)
    rig.publisher.flush()
    rig.publisher.flush_state(force=True)
    # The producer stops here. A new one starts from the topic's tail and the state file:
    state = ResumeState.beside(str(tmp_path), rig.stream.identity, "cdc")
    tail = rig.tail()
    assert tail.position == Position(gtid_set="0-1-7") and [x.xid for x in tail.xa_pending] == [XA1]
    resume = state.load(tail)
    assert resume == ResumePoint(Position(gtid_set="0-1-8"), (PreparedXa(XA1, "0-1-5", "0-1-6"),))
    assert (resume.read_from(), resume.replay_until()) == (Position(gtid_set="0-1-5"), Position(gtid_set="0-1-8"))
    again = Publisher(rig.layout.writer(rig.stream), "src", TableFilter(include_dbs=("shop",)), MARIADB,
                      tail.next_sequence, resume.read_from(), state, replay_until=resume.replay_until())
    b2 = again.assembler
    b2.on_rotate("binlog.000001")
    b2.on_format(FDE)
    xa_prepare(b2, "0-1-6", XA1, 200, [row(2, "xa")])  # the binlog from 0-1-5 on, as the leader sends it
    assert b2.replaying and again.flush_state(force=True) is None  # (saves nothing while replaying)
    insert(b2, "0-1-7", 3, 300)  # on the topic already
    b2.on_gtid("0-1-8", True, 400)
    b2.on_rows(rows_event("t", "Add", [row(9, "other")], 450, db="other"))
    b2.on_xid(490)
    assert not b2.replaying
    xa_outcome(b2, "0-1-9", XA1, "COMMIT", 500)
    again.flush()
    events = rig.events()
    assert summary(events) == [(0, "0-1-5", 0, True, "Add"), (1, "0-1-7", 0, True, "Add"),
                               (2, "0-1-9", 0, True, "Add")]
    assert events[2]["operation"]["Add"]["rows"][0]["cols"] == row(2, "xa")
    assert events[2]["binlog"] == b64(FDE + raw(2)) and events[2]["gtid_set"] == "0-1-9"


def test_rows_rolled_back_to_a_savepoint_in_a_chunk_already_handed_on_are_dropped_by_reading_again():
    """The chunk cannot be taken back: the transaction is abandoned (its partial copy is dropped by
    the consumer when it starts again) and read again, skipping the rolled-back range."""
    rig = Rig(chunk_bytes=250)
    b = rig.binlog

    def transaction():
        b.on_gtid("0-1-5", True, 100)
        b.on_rows(rows_event("t", "Add", [row(1, "kept")], 200))
        b.on_query(query("SAVEPOINT `s`", 250))
        for i in range(2, 6):  # handed on in chunks before the ROLLBACK TO comes
            b.on_rows(rows_event("t", "Add", [row(i, "rolled back")], 200 + 100 * i))
        b.on_query(query("ROLLBACK TO `s`", 750))
        b.on_rows(rows_event("t", "Add", [row(6, "kept")], 800))
        b.on_xid(850)

    with pytest.raises(RereadTransaction):
        transaction()
    assert rig.binlog.position == Position(gtid_set="0-1-4,1-2-3")  # still before the transaction
    transaction()  # the run loop reads it again from there
    records = rig.records()
    assert summary(records)[:4] == [(i, "0-1-5", i, False, "Add") for i in range(4)]  # abandoned
    assert summary(records)[4:] == [(4, "0-1-5", 0, False, "Add"), (5, "0-1-5", 1, True, "Add")]
    assert [r["operation"]["Add"]["rows"][0]["cols"] for r in records[4:]] == [row(1, "kept"), row(6, "kept")]
    assert rig.tail().position == Position(gtid_set="0-1-5,1-2-3")


def test_a_statements_context_events_go_into_its_session_unless_the_filters_or_a_snapshot_drop_it():
    """A statement logged as a statement (statement-format DML, CREATE EVENT ... EVERY @s SECOND) comes after
    the INTVAR/RAND/USER_VAR events it ran with: they go into its Query event's session, where the consumer
    sets them as a native replica does; with a statement the filters or a snapshot drop, they are dropped."""
    rig = Rig(start="0-1-4", filters=TableFilter(exclude_dbs=("percona",)))
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_statement_context(UserVar("x", "int", "5"))
    b.on_query(query("INSERT INTO percona.t (v) VALUES (@x)", 200, db="percona"))  # excluded: dropped
    b.on_xid(230)
    b.on_gtid("0-1-6", True, 240)
    b.on_query(query("INSERT INTO t VALUES (1, 'a')", 300))  # no context
    b.on_xid(330)
    b.on_gtid("0-1-7", True, 340)
    b.on_statement_context(InsertId(True, 0))
    b.on_statement_context(InsertId(False, 7))
    b.on_statement_context(RandSeeds(184293166, 105433091))
    b.on_statement_context(UserVar("s", "string", b64(b"\xe9\xff\x00"), 8))
    b.on_statement_context(UserVar("n"))
    b.on_query(query("INSERT INTO t (v) VALUES (CONCAT(@s, @n, RAND()))", 400,
                     session=QuerySession(sql_mode=4, timestamp_us=1)))
    b.on_xid(430)
    events = rig.events()
    assert summary(events) == [(0, "0-1-6", 0, True, "Query"), (1, "0-1-7", 0, True, "Query")]
    assert "session" not in events[0]
    assert events[1]["session"] == {
        "sql_mode": 4, "timestamp_us": 1, "insert_id": 7, "last_insert_id": 0, "rand_seed1": 184293166,
        "rand_seed2": 105433091, "user_vars": [{"name": "s", "kind": "string", "value": "6f8A", "collation": 8},
                                                {"name": "n"}]}
    snapshotted = Rig(start="0-1-6", windows={"shop.t": SnapshotWindow("0-1-9", None)})
    snapshotted.binlog.on_gtid("0-1-7", True, 340)
    snapshotted.binlog.on_statement_context(UserVar("x", "int", "5"))
    snapshotted.binlog.on_query(query("INSERT INTO t (v) VALUES (@x)", 400))
    snapshotted.binlog.on_xid(430)
    assert snapshotted.events() == [] and snapshotted.binlog.position == Position(gtid_set="0-1-7")


def test_a_statement_with_a_context_event_the_producer_cannot_read_stops_there_unless_it_is_dropped():
    rig = Rig(start="0-1-4", filters=TableFilter(exclude_dbs=("percona",)))
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_statement_context(Unreadable("a user variable @r whose value has type 3, which cdc-producer cannot read"))
    b.on_query(query("INSERT INTO percona.t (v) VALUES (@r)", 200, db="percona"))  # excluded: dropped
    b.on_xid(230)
    b.on_gtid("0-1-7", True, 340)
    b.on_statement_context(InsertId(False, 7))
    b.on_statement_context(Unreadable("a user variable @r whose value has type 3, which cdc-producer cannot read"))
    with pytest.raises(DataError) as stop:
        b.on_query(query("INSERT INTO t (v) VALUES (@r)", 400))
    assert str(stop.value) == (
        "the statement at binlog.000001:350 (GTID 0-1-7) ('INSERT INTO t (v) VALUES (@r)') was logged with a user "
        "variable @r whose value has type 3, which cdc-producer cannot read: cdc-consumer could not run it as the "
        "leader did, so it is not published. Make the leader's sessions log in ROW format (SET GLOBAL "
        "binlog_format='ROW'; clients that set their own), then snapshot the tables it names (cdc-producer "
        "PROFILE --snapshot db.table ...): the stream then goes on past it")
    assert rig.events() == []


def test_a_ddl_is_read_once_on_its_way_through_filters_windows_and_the_per_table_layout(monkeypatch):
    """The Statement the assembler reads is carried on the event: windows and topic routing ask it again."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.parser import Parser

    calls: list[str] = []
    tokenize, parse = Dialect.tokenize, Parser.parse
    monkeypatch.setattr(Dialect, "tokenize", lambda *a, **k: calls.append("tokenize") or tokenize(*a, **k))
    monkeypatch.setattr(Parser, "parse", lambda *a, **k: calls.append("parse") or parse(*a, **k))
    rig = Rig(layout=Layout("cdc.{database}.{table}"), windows={"shop.w": SnapshotWindow("0-1-9", None)})
    rig.binlog.on_gtid("0-1-5", False, 100)
    rig.binlog.on_query(query("ALTER TABLE t ADD COLUMN c INT", 200))
    assert [e["operation"] for e in rig.records("cdc.shop.t")] == [{"Query": "ALTER TABLE t ADD COLUMN c INT"}]
    assert calls == ["tokenize", "parse"]
