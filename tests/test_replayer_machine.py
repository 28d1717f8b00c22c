"""The consumer's Replayer without a server: events in, against a fake follower that keeps what a
transactional server would (commits, rollbacks, savepoints, DDL's implicit commit).

Each test asserts the exact statements the follower ends up with, and the checkpoint.
"""

from __future__ import annotations

import re

import pymysql
import pytest

from cdc_consumer import replayer as replayer_module
from cdc_consumer.batch import Origin, StatementFailed
from cdc_consumer.checkpoint import Checkpoint
from cdc_consumer.replayer import Replayer
from cdc_stream.errors import DataError, LostConnection
from cdc_stream.events import BinlogFile, ChangeEvent, Txn
from cdc_stream.filters import TableFilter


class FakeFollower:
    """A Follower that runs statements as a transactional server would and remembers what it committed."""

    def __init__(self, fail: dict[str, pymysql.err.MySQLError] | None = None):
        self.fail = fail or {}  # a statement containing the key fails with the error
        self.committed: list[str] = []
        self.commits = 0
        self.open: list[str] = []
        self.savepoints: dict[str, int] = {}
        self.database: str | None = None
        self._failure: StatementFailed | None = None
        self.closed = False

    def _run(self, sql: str) -> None:
        for part, error in self.fail.items():
            if part in sql:
                raise error
        if sql == "COMMIT":
            self.committed += self.open
            self.open, self.savepoints = [], {}
            self.commits += 1
        elif m := re.fullmatch(r"SAVEPOINT (\w+)", sql):
            self.savepoints[m.group(1)] = len(self.open)
        elif m := re.fullmatch(r"ROLLBACK TO SAVEPOINT (\w+)", sql):
            del self.open[self.savepoints[m.group(1)]:]
        elif sql.startswith(("INSERT", "UPDATE", "DELETE")):
            self.open.append(sql)
        else:  # DDL: MySQL commits the open transaction first, and the statement itself
            self.committed += self.open + [sql]
            self.open, self.savepoints = [], {}

    def submit(self, statements: list[str], origins: list[Origin]) -> None:
        self._raise()
        for sql, origin in zip(statements, origins):
            try:
                self._run(sql)
            except pymysql.err.MySQLError as e:  # the writer thread keeps it for the next call
                self._failure = StatementFailed(e, origin)
                return

    def wait(self) -> None:
        self._raise()

    def _raise(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def execute(self, sql: str) -> None:
        self._run(sql)

    def use(self, database: str) -> None:
        self.database = database

    def rollback(self) -> None:
        self.open, self.savepoints = [], {}

    def close(self) -> None:
        self.closed = True

    def rows(self) -> list[str]:
        """The committed data statements, checkpoints left out."""
        return [s for s in self.committed if "mysql_cdc" not in s]


def add(offset_id: int, txn: str, index: int, last: bool, *ids: int, table: str = "t", gtid: str | None = None,
        op: str = "Add") -> ChangeEvent:
    gtid = gtid or txn
    rows = [[{"SignedInteger": i}] for i in ids]
    ev = ChangeEvent(uri=f"flv://src/shop/{table}", sequence=offset_id, operation=op,  # type: ignore[arg-type]
                     rows=rows, columns=["id"], pk=["id"], gtid=gtid, txn=Txn(txn, index, last))
    if last:
        ev.gtid_set = gtid
    return ev


def ddl(seq: int, txn: str, sql: str) -> ChangeEvent:
    return ChangeEvent(uri="flv://src/shop", sequence=seq, operation="Query", query=sql, database="shop", gtid=txn,
                       gtid_set=txn, txn=Txn(txn, 0, True))


def replayer(follower: FakeFollower, saved: Checkpoint | None = None) -> Replayer:
    return Replayer(follower, "cdc", "stream-1", TableFilter(), saved)


INSERT = "INSERT INTO `shop`.`t` (`id`) VALUES "


def test_whole_transactions_share_one_follower_commit_with_the_checkpoint_of_the_last():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2))
    r.apply(2, add(2, "0-1-2", 1, True, 3))
    r.apply(3, add(3, "0-1-3", 0, True, 4))
    assert f.commits == 0 and r.pending
    assert r.idle() is None  # nothing more at hand: commit
    assert f.commits == 1
    # Inserts of one transaction share a statement; a savepoint starts each later one in the group.
    assert f.rows() == [INSERT + "(1)", INSERT + "(2),(3)", INSERT + "(4)"]
    assert (r.saved.next_offset, r.saved.sequence, r.saved.txn_id, r.saved.position) == (4, 3, "0-1-3", "0-1-3")
    assert r.applied_transactions == 3 and r.applied_rows == 4


def test_a_transaction_republished_inside_a_group_keeps_only_its_complete_copy():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2))  # the producer died here ...
    r.apply(2, add(2, "0-1-2", 0, False, 2))  # ... and published the transaction again, whole
    r.apply(3, add(3, "0-1-2", 1, True, 3, table="u"))
    r.idle()
    assert f.rows() == [INSERT + "(1)", INSERT + "(2)", "INSERT INTO `shop`.`u` (`id`) VALUES (3)"]
    assert r.saved.next_offset == 4


def test_a_partial_transaction_at_the_end_is_rolled_back_and_read_again():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2))  # its producer is slow, or died mid-publish
    assert r.idle() == 1  # the whole transaction commits; the open one is read again from offset 1
    assert f.rows() == [INSERT + "(1)"] and r.saved.next_offset == 1
    assert not r.in_transaction


def test_a_copy_of_an_applied_transaction_only_moves_the_checkpoint():
    f = FakeFollower()
    r = replayer(f, Checkpoint("cdc", "stream-1", 5, 4, "0-1-7", "0-1-7"))
    r.apply(5, add(5, "0-1-7", 0, True, 1))  # republished after a producer crash: applied already
    r.apply(6, add(6, "0-1-8", 0, True, 2))
    r.idle()
    assert f.rows() == [INSERT + "(2)"]
    assert r.skipped_transactions == 1 and r.saved.next_offset == 7


def test_ddl_commits_the_group_then_records_that_it_may_run_then_runs():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, ddl(1, "0-1-2", "ALTER TABLE t ADD c INT"))
    assert f.database == "shop"
    assert f.committed[0] == INSERT + "(1)"
    mark, statement, final = f.committed[1:3], f.committed[3], f.committed[4:]
    assert "VALUES ('cdc', 'stream-1', 1, 0, '0-1-1', '0-1-1', NULL)" in mark[0]  # the group's checkpoint
    assert "VALUES ('cdc', 'stream-1', 1, 1, '0-1-2', '0-1-1', 1)" in mark[1]  # "DDL at offset 1 may have run"
    assert statement == "ALTER TABLE t ADD c INT"
    assert "VALUES ('cdc', 'stream-1', 2, 1, '0-1-2', '0-1-2', NULL)" in final[0]  # past it
    assert f.commits == 3 and r.saved.next_offset == 2 and r.saved.ddl_offset is None


def test_a_ddl_replayed_after_a_crash_around_it_is_recognised_as_applied():
    f = FakeFollower(fail={"CREATE TABLE": pymysql.err.OperationalError(1050, "Table 'v' already exists")})
    r = replayer(f, Checkpoint("cdc", "stream-1", 3, 2, "0-1-3", "0-1-3", ddl_offset=3))
    r.apply(3, ddl(3, "0-1-4", "CREATE TABLE v (id INT)"))
    assert r.saved.next_offset == 4 and r.saved.position == "0-1-4"
    other = FakeFollower(fail={"CREATE TABLE": pymysql.err.OperationalError(1050, "Table 'v' already exists")})
    with pytest.raises(DataError, match=r"DDL failed at offset 3, transaction 0-1-4: Table 'v' already exists "
                                        r"\(MySQL error 1050\); nothing of the transaction was applied"):
        replayer(other, Checkpoint("cdc", "stream-1", 3, 2, "0-1-3", "0-1-3")).apply(3, ddl(3, "0-1-4", "CREATE TABLE v (id INT)"))


def test_a_failed_statement_rolls_back_its_whole_group_for_the_restart_to_replay():
    f = FakeFollower(fail={"(3)": pymysql.err.IntegrityError(1062, "Duplicate entry '3' for key 'PRIMARY'")})
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2, table="u"))
    r.apply(2, add(2, "0-1-2", 1, True, 3))
    with pytest.raises(DataError) as e:
        r.idle()
    assert str(e.value) == ("Add on shop.t failed at offset 2, transaction 0-1-2: Duplicate entry '3' for key "
                            "'PRIMARY' (MySQL error 1062); nothing of the transaction was applied")
    assert f.committed == [] and f.open == []  # the restart reads from the stored checkpoint: before both


def test_a_bad_value_keeps_the_whole_transactions_before_it():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    bad = add(1, "0-1-2", 0, True, 2)
    bad.rows = [[{"SignedInteger": "2"}]]
    with pytest.raises(DataError, match=r"offset 1 \(transaction 0-1-2\) holds a bad value: bad SignedInteger value "
                                        r"'2': expected an integer; nothing of the transaction was applied"):
        r.apply(1, bad)
    assert f.rows() == [INSERT + "(1)"] and r.saved.next_offset == 1


def test_a_lost_connection_is_retriable_and_keeps_nothing_uncommitted():
    f = FakeFollower(fail={"COMMIT": pymysql.err.OperationalError(2013, "Lost connection to server during query")})
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    with pytest.raises(LostConnection, match="lost the follower connection at offset 0, transaction 0-1-1"):
        r.idle()
    assert f.committed == [] and f.open == []
    r.close()
    assert f.closed


def test_a_group_commits_once_it_holds_group_rows(monkeypatch):
    monkeypatch.setattr(replayer_module, "GROUP_ROWS", 3)
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1, 2))
    assert f.commits == 0
    r.apply(1, add(1, "0-1-2", 0, True, 3, 4))  # 4 rows: the group commits without waiting for idle
    assert f.commits == 1 and r.saved.next_offset == 2 and not r.pending


def test_filters_leave_tables_out_but_the_checkpoint_moves():
    f = FakeFollower()
    r = Replayer(f, "cdc", "stream-1", TableFilter(exclude_tables=("shop.u",)), None)
    r.apply(0, add(0, "0-1-1", 0, False, 1, table="u"))
    r.apply(1, add(1, "0-1-1", 1, True, 2))
    r.idle()
    assert f.rows() == [INSERT + "(2)"] and r.saved.next_offset == 2


def test_without_gtids_the_checkpoint_keeps_the_commits_file_position():
    f = FakeFollower()
    r = replayer(f)
    ev = ChangeEvent(uri="flv://src/shop/t", sequence=0, operation="Delete", rows=[[{"SignedInteger": 1}]],
                     columns=["id"], pk=["id"], bn_file=BinlogFile("binlog.000003", 880), txn=Txn("binlog.000003:700", 0, True))
    r.apply(0, ev)
    r.idle()
    assert f.rows() == ["DELETE FROM `shop`.`t` WHERE `id` IN (1)"] and r.saved.position == "binlog.000003:880"
