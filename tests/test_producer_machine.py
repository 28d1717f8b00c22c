"""The producer's middle without a server: binlog handler calls -> Assembler -> Outbox -> an in-memory topic.

Each test feeds the calls cdc_producer/binlog.dispatch would make for a real binlog and
asserts the exact records on the topic (both layouts), and where a restart resumes.
"""

from __future__ import annotations

import json

import msgspec

from cdc_producer.binlog import BinlogQuery, LeaderInfo, RowChange
from cdc_producer.publish import Publisher
from cdc_producer.resume import ResumeState, tail_of
from cdc_stream.filters import TableFilter
from cdc_stream.layout import Layout
from cdc_stream.positions import Position, SnapshotWindow
from cdc_stream.topics.memory import MemoryStream

MARIADB = LeaderInfo("mariadb", "10.11.19-MariaDB", 1, None, True)
MYSQL_NO_GTID = LeaderInfo("mysql", "8.0.36", 1, "3e11fa47-71ca-11e1-9e33-c80aa9429562", False)
COLUMNS = ["id", "v"]


def row(i: int, v: str) -> list:
    return [{"SignedInteger": i}, {"String": v}]


def rows_event(table: str, op: str, rows: list, end: int, size: int = 100, db: str = "shop") -> RowChange:
    """A rows event as dispatch() hands it on; decoding gives `rows` (pairs for an Update)."""

    def decode(as_json: bool) -> tuple[list[str], list]:
        if not as_json:
            return COLUMNS, rows
        if op == "Update":
            return COLUMNS, [msgspec.json.encode({"before_cols": b, "after_cols": a}) for b, a in rows]
        return COLUMNS, [msgspec.json.encode({"cols": r}) for r in rows]

    return RowChange(db, table, op, end, size, 1700000000, decode, lambda: ["id"])


def query(sql: str, end: int, db: str | None = "shop", size: int = 50) -> BinlogQuery:
    return BinlogQuery(sql, db, end - size, end, size, 1700000000)


class Rig:
    """A publisher over an in-memory stream, and what it wrote."""

    def __init__(self, layout: Layout = Layout("cdc"), info: LeaderInfo = MARIADB, start: str = "0-1-4,1-2-3",
                 filters: TableFilter = TableFilter(), chunk_bytes: int = 1 << 20, tmp_path=None, windows=None):
        self.stream, self.layout = MemoryStream(), layout
        state = ResumeState.beside(str(tmp_path), self.stream.identity, layout.log_topic) if tmp_path else None
        position = Position(gtid_set=start) if info.gtid_mode else Position(file="binlog.000001", pos=4)
        self.publisher = Publisher(layout.writer(self.stream), "src", filters, info, 0, position, state, windows,
                                   chunk_bytes=chunk_bytes)
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
    assert rig.tail().position == Position(file="binlog.000001", pos=331, server_uuid=MYSQL_NO_GTID.server_uuid)


def test_a_ddl_inside_a_gtid_group_stays_in_its_transaction():
    """CREATE TABLE ... SELECT: MariaDB logs the DDL and the rows in one group, committed by its XID."""
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_query(query("CREATE TABLE t2 SELECT * FROM t", 200))
    b.on_rows(rows_event("t2", "Add", [row(1, "a")], 300))
    b.on_xid(330)
    assert summary(rig.events()) == [(0, "0-1-5", 0, False, "Query"), (1, "0-1-5", 1, True, "Add")]


def test_savepoint_statements_are_not_events():
    rig = Rig()
    b = rig.binlog
    b.on_gtid("0-1-5", True, 100)
    b.on_query(query("SAVEPOINT `s`", 150))
    b.on_rows(rows_event("t", "Add", [row(1, "a")], 300))
    b.on_query(query("ROLLBACK TO `s`", 350))
    b.on_query(query("COMMIT", 400))
    assert summary(rig.events()) == [(0, "0-1-5", 0, True, "Add")]


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
    assert state.load(tail) == Position(gtid_set="0-1-6,1-2-3")  # past the dropped one
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
