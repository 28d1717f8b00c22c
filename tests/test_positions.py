"""Positions: GTID merging, resume points from the topic's tail, and the MySQL-only paths.

Only MariaDB can be installed here, so the MySQL code paths (GTID sets, file:pos with the
server UUID, SHOW BINARY LOG STATUS) are checked as units.
"""

from __future__ import annotations

import pymysql
import pytest

from cdc_consumer.checkpoint import Checkpoint, save_sql
from cdc_producer.binlog import LeaderInfo, current_position, open_binlog
from cdc_producer.resume import check_same_server, tail_of
from cdc_stream.consumer_offsets import already_applied, position_after
from cdc_stream.errors import DataError, SetupError
from cdc_stream.events import BinlogFile, ChangeEvent, Txn, decode_event, encode_event, make_uri
from cdc_stream.layout import LogReader
from cdc_stream.positions import Position, merge_gtid
from cdc_stream.profile import LeaderDatabase
from cdc_stream.topics.embedded import EmbeddedStream

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
OTHER = "8f3c5a1e-0000-11e1-9e33-c80aa9429562"
MYSQL = LeaderInfo("mysql", "8.0.36", 1, UUID, True)
MYSQL_NO_GTID = LeaderInfo("mysql", "8.0.36", 1, UUID, False)
MARIADB = LeaderInfo("mariadb", "10.11.19-MariaDB", 1, None, True)


def test_merge_gtid_mariadb_keeps_one_entry_per_domain():
    assert merge_gtid("mariadb", "", "0-1-5") == "0-1-5"
    assert merge_gtid("mariadb", "0-1-5", "0-1-6") == "0-1-6"
    assert merge_gtid("mariadb", "0-1-5,2-3-9", "1-2-1") == "0-1-5,1-2-1,2-3-9"
    assert merge_gtid("mariadb", "0-1-5,10-3-9", "0-2-7") == "0-2-7,10-3-9"


def test_merge_gtid_mysql_extends_the_set():
    assert merge_gtid("mysql", f"{UUID}:1-5", f"{UUID}:6") == f"{UUID}:1-6"
    merged = merge_gtid("mysql", f"{UUID}:1-5", f"{OTHER}:1")
    assert sorted(merged.split(",")) == sorted([f"{UUID}:1-5", f"{OTHER}:1"])
    assert merge_gtid("mysql", "", f"{UUID}:1") == f"{UUID}:1"


def test_open_binlog_positions_each_flavor():
    db = LeaderDatabase(user="u")
    mariadb = open_binlog(db, MARIADB, Position(gtid_set=""))
    assert (mariadb.is_mariadb, mariadb.auto_position) == (True, "")  # empty state, never None
    gtid = open_binlog(db, MYSQL, Position(gtid_set=f"{UUID}:1-9"))
    assert (gtid.is_mariadb, gtid.auto_position) == (False, f"{UUID}:1-9")
    filepos = open_binlog(db, MYSQL_NO_GTID, Position(binlog=BinlogFile("binlog.000007", 1234)))
    assert (filepos.auto_position, filepos.log_file, filepos.log_pos) == (None, "binlog.000007", 1234)


class FakeCursor:
    """Answers the statements current_position sends, as a MySQL server would."""

    def __init__(self, answers):
        self.answers, self.row = answers, None

    def execute(self, sql):
        answer = self.answers[sql]
        if isinstance(answer, Exception):
            raise answer
        self.row = answer

    def fetchone(self):
        return self.row

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeConnection:
    def __init__(self, answers):
        self.answers = answers

    def cursor(self):
        return FakeCursor(self.answers)


def test_current_position_mysql():
    gtid = FakeConnection({"SELECT @@global.gtid_executed": (f"{UUID}:1-3,\n{OTHER}:1",)})
    assert current_position(gtid, MYSQL) == Position(gtid_set=f"{UUID}:1-3,{OTHER}:1")
    # MySQL 8.4 removed SHOW MASTER STATUS; older servers lack SHOW BINARY LOG STATUS.
    new = FakeConnection({"SHOW BINARY LOG STATUS": ("binlog.000003", 157, "", "", "")})
    assert current_position(new, MYSQL_NO_GTID) == Position(binlog=BinlogFile("binlog.000003", 157), server_uuid=UUID)
    old = FakeConnection({"SHOW BINARY LOG STATUS": pymysql.err.ProgrammingError(1064, "syntax"),
                          "SHOW MASTER STATUS": ("binlog.000004", 4, "", "")})
    assert current_position(old, MYSQL_NO_GTID) == Position(binlog=BinlogFile("binlog.000004", 4), server_uuid=UUID)
    off = FakeConnection({"SHOW BINARY LOG STATUS": None})
    with pytest.raises(SetupError, match="binary logging is off"):
        current_position(off, MYSQL_NO_GTID)


def event(seq, txn_index, last, **kw) -> ChangeEvent:
    return ChangeEvent(uri="flv://s/db/t", schema="db", table="t", sequence=seq, operation="Add", columns=["a"], pk=["a"],
                       rows=[[{"SignedInteger": seq}]], txn=Txn(f"t{seq - txn_index}", txn_index, last), **kw)


def read_tail(topic):
    """Where the producer resumes on this topic (one-topic layout)."""
    return tail_of(LogReader(topic).tail(), topic.name)


def topic_with(tmp_path, events):
    stream = EmbeddedStream(tmp_path)
    stream.create("t")
    topic = stream.topic("t")
    topic.append([(None, encode_event(e)) for e in events])
    return topic


def test_tail_skips_a_trailing_partial_transaction(tmp_path):
    topic = topic_with(tmp_path, [
        event(0, 0, True, gtid_set="0-1-1"),
        event(1, 0, False), event(2, 1, True, gtid_set="0-1-2"),
        event(3, 0, False), event(4, 1, False),  # partial: republished whole after a restart
    ])
    tail = read_tail(topic)
    assert (tail.next_sequence, tail.last_sequence, tail.position) == (5, 4, Position(gtid_set="0-1-2"))


def test_tail_file_position_carries_the_server_uuid(tmp_path):
    topic = topic_with(tmp_path, [event(0, 0, True, bn_file=BinlogFile("binlog.000009", 880), server_uuid=UUID)])
    tail = read_tail(topic)
    assert tail.position == Position(binlog=BinlogFile("binlog.000009", 880), server_uuid=UUID)
    check_same_server(tail.position, MYSQL_NO_GTID)  # same server: fine
    with pytest.raises(SetupError, match=f"written by server {UUID}, but the leader is now {OTHER}"):
        check_same_server(tail.position, LeaderInfo("mysql", "8.0", 2, OTHER, False))


def test_tail_of_a_foreign_record_is_a_clear_error(tmp_path):
    stream = EmbeddedStream(tmp_path)
    stream.create("t")
    stream.topic("t").append([(None, b"not json")])
    with pytest.raises(DataError, match="topic 't' offset 0 is not a change event"):
        read_tail(stream.topic("t"))


def test_already_applied_for_each_position_kind():
    def applied(ev: ChangeEvent, text: str | None) -> bool:
        return already_applied(ev, Position.parse(text) if text is not None else None)

    e = event(1, 0, False, gtid="0-1-5")
    assert applied(e, "0-1-5") and applied(e, "0-1-7,1-2-3")
    assert not applied(e, "0-1-4") and not applied(e, "1-2-9") and not applied(e, None) and not applied(e, "")
    m = event(1, 0, False, gtid=f"{UUID}:5")
    assert applied(m, f"{UUID}:1-5") and not applied(m, f"{UUID}:1-4")
    assert applied(m, f"{OTHER}:1-3,{UUID}:5") and not applied(m, f"{OTHER}:1-3,{UUID}:4")
    f = event(1, 0, False, bn_file=BinlogFile("binlog.000010", 500))
    assert applied(f, "binlog.000010:600") and applied(f, "binlog.000011:4")
    assert not applied(f, "binlog.000009:900") and not applied(f, "binlog.000010:400")


@pytest.mark.parametrize("text", ["", "0-1-5", "0-1-5,1-2-7", f"{UUID}:1-5", f"{UUID}:1-5,{OTHER}:3",
                                  "binlog.000003:880", f"binlog.000003:880@{UUID}"])
def test_position_text_round_trips(text):
    assert Position.parse(text).text() == text


def test_position_parse_tells_gtid_sets_from_file_positions():
    assert Position.parse(f"{UUID}:1-5,{OTHER}:3") == Position(gtid_set=f"{UUID}:1-5,{OTHER}:3")
    assert Position.parse(f"binlog.000003:880@{UUID}") == Position(binlog=BinlogFile("binlog.000003", 880),
                                                                   server_uuid=UUID)
    assert str(Position.parse("binlog.000003:880")) == "binlog.000003:880"


def test_position_after_keeps_the_parsed_state_and_leaves_the_old_one():
    start = Position(gtid_set="0-1-5,1-2-3")
    after = start.after("mariadb", "0-1-6")
    assert (after, start) == (Position(gtid_set="0-1-6,1-2-3"), Position(gtid_set="0-1-5,1-2-3"))
    assert after.mariadb_state() == {0: (1, 6), 1: (2, 3)} and start.mariadb_state() == {0: (1, 5), 1: (2, 3)}
    mysql = Position(gtid_set=f"{UUID}:1-5")
    assert mysql.after("mysql", f"{UUID}:6") == Position(gtid_set=f"{UUID}:1-6")
    assert mysql.text() == f"{UUID}:1-5" and str(mysql.mysql_set()) == f"{UUID}:1-5"


def test_passed_for_each_position_kind():
    assert Position(gtid_set="0-1-7,1-2-3").passed(Position(gtid_set="0-1-7"))
    assert not Position(gtid_set="0-1-6,1-2-3").passed(Position(gtid_set="0-1-7"))
    assert not Position(gtid_set="").passed(Position(gtid_set="0-1-1"))
    assert Position(gtid_set=f"{UUID}:1-9").passed(Position(gtid_set=f"{UUID}:1-5"))
    assert not Position(gtid_set=f"{UUID}:1-4").passed(Position(gtid_set=f"{UUID}:1-5"))
    at = Position(binlog=BinlogFile("binlog.000010", 500), server_uuid=UUID)
    assert at.passed(Position(binlog=BinlogFile("binlog.000009", 900)))
    assert not at.passed(Position(binlog=BinlogFile("binlog.000010", 501)))


def test_checkpoint_row_holds_the_position_text():
    for text in ("0-1-5,1-2-3", f"{UUID}:1-5", "binlog.000003:880"):
        assert f"'{text}'" in save_sql(Checkpoint("t", "s", 1, 0, "x", Position.parse(text)))
    assert position_after(event(1, 0, True, bn_file=BinlogFile("binlog.000003", 880), server_uuid=UUID)) == \
        Position(binlog=BinlogFile("binlog.000003", 880))  # file:pos alone, as the row has always held it


def test_decoded_events_carry_the_uri_database_and_table():
    ev = ChangeEvent(uri=make_uri("s", "d`b/x", "t%s"), schema="d`b/x", table="t%s", sequence=0, operation="Add",
                     columns=["a"], pk=["a"], rows=[[{"SignedInteger": 1}]])
    decoded = decode_event(encode_event(ev))
    assert (decoded.uri, decoded.schema, decoded.table) == ("flv://s/d%60b%2Fx/t%25s", "d`b/x", "t%s")
    ddl = decode_event(encode_event(ChangeEvent(uri=make_uri("s", "db"), schema="db", sequence=1, operation="Query",
                                                query="DROP TABLE t", database="db")))
    assert (ddl.schema, ddl.table, ddl.database) == ("db", None, "db")
