"""The consumer's Replayer without a server: events in, against a fake follower that keeps what a
transactional server would (commits, rollbacks, DDL's implicit commit, non-transactional tables
that keep their rows, matched-row counts, BINLOG statements and the session's format description).

Each test asserts the exact statements the follower ends up with, and the checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pymysql
import pytest

from cdc_consumer import replayer as replayer_module
from cdc_consumer.batch import Origin, StatementFailed
from cdc_consumer.binlog_replay import FollowerFacts, RowPolicy
from cdc_consumer.catalog import TableInfo
from cdc_consumer.checkpoint import Checkpoint
from cdc_consumer.replayer import Replayer, ReplayOptions
from cdc_consumer.schedule import KeyCollector, TableKeys
from cdc_consumer.session import Collation
from cdc_stream.errors import DataError, LostConnection
from cdc_stream.events import BinlogFile, ChangeEvent, Txn
from cdc_stream.filters import TableFilter
from cdc_stream.positions import Position, SnapshotTag

_DATA = re.compile(r"(/\*M! SET STATEMENT [^*]* FOR \*/ )?(INSERT|UPDATE|DELETE|BINLOG)\b")


# A few of MariaDB 10.11's collations (information_schema.COLLATIONS): id -> name, charset.
COLLATIONS = {8: ("latin1_swedish_ci", "latin1"), 33: ("utf8mb3_general_ci", "utf8mb3"),
              35: ("ucs2_general_ci", "ucs2"), 45: ("utf8mb4_general_ci", "utf8mb4"),
              224: ("utf8mb4_unicode_ci", "utf8mb4"), 2503: ("utf8mb4_uca1400_croatian_nopad_as_cs", "utf8mb4")}


class FakeFollower:
    """A Follower that runs statements as a transactional server would and remembers what it committed.

    `fail`: a statement containing the key fails with the error. `found`: a statement containing the
    key matches that many rows (any other matches what its Origin expects). `tables`: what describe()
    says (default: an InnoDB table); rows of a non-transactional one stay when the transaction rolls back."""

    def __init__(self, fail: dict[str, pymysql.err.MySQLError] | None = None, found: dict[str, int] | None = None,
                 tables: dict[tuple[str, str], TableInfo] | None = None):
        self.fail = fail or {}
        self.found = found or {}
        self.tables = tables or {}
        self.committed: list[str] = []
        self.commits = 0
        self.open: list[str] = []
        self.kept: list[str] = []  # rows of non-transactional tables: never rolled back
        self.session: list[str] = []  # SET statements, in order
        self.described: list[tuple[str, str]] = []
        self.database: str | None = None
        self._failure: StatementFailed | None = None
        self.closed = False
        self.origins: list[Origin] = []  # of every statement submitted

    def _run(self, sql: str) -> None:
        for part, error in self.fail.items():
            if part in sql:
                raise error
        if sql == "COMMIT":
            self.committed += self.open
            self.open = []
            self.commits += 1
        elif sql.startswith("SET "):
            self.session.append(sql)
        elif _DATA.match(sql):
            if any(not info.transactional and f"`{db}`.`{t}`" in sql for (db, t), info in self.tables.items()):
                self.kept.append(sql)
            self.open.append(sql)
        else:  # DDL: MySQL commits the open transaction first, and the statement itself
            self.committed += self.open + [sql]
            self.open = []

    def _count(self, sql: str, origin: Origin) -> None:
        if origin.expect is None:
            return
        found = next((n for part, n in self.found.items() if part in sql), origin.expect)
        if found != origin.expect:
            raise pymysql.err.OperationalError(1032, f"affected {found}, not {origin.expect}")

    def submit(self, statements: list[str], origins: list[Origin], durable: Callable[[], None] | None = None) -> None:
        self._raise()
        self.origins += origins
        for sql, origin in zip(statements, origins):
            if durable is not None and not origin.overlap:  # (as writer.Execution)
                durable()
                durable = None
            self.sending(origin)
            try:
                self._run(sql)
                self._count(sql, origin)
            except pymysql.err.MySQLError as e:  # the writer thread keeps it for the next call
                self._failure = StatementFailed(e, origin)
                return

    def sending(self, origin: Origin) -> None:
        """Called as each statement is sent (after durable() where it must wait for it)."""

    def wait(self) -> None:
        self._raise()

    def _raise(self) -> None:  # as writer.Writer: a failure stops it for good
        if self._failure is not None:
            raise self._failure

    def execute(self, sql: str | bytes) -> None:
        self._run(sql.decode("latin1") if isinstance(sql, bytes) else sql)

    def use(self, database: str) -> None:
        self.database = database

    def describe(self, database: str, table: str) -> TableInfo:
        self.described.append((database, table))
        return self.tables.get((database, table), TableInfo())

    def encode(self, text: str, collation_id: int) -> bytes:
        return text.encode("latin1" if collation_id == 8 else "utf-8")

    def collation(self, collation_id: int) -> Collation | None:
        known = COLLATIONS.get(collation_id)
        return Collation(collation_id, *known) if known else None

    def rollback(self) -> None:
        self.open = []

    def close(self) -> None:
        self.closed = True

    def rows(self) -> list[str]:
        """The committed data statements, checkpoints left out."""
        return [s for s in self.committed if "mysql_cdc" not in s]

    def statements(self) -> list[str]:
        """Everything committed or still open, checkpoints left out."""
        return [s for s in self.committed + self.open if "mysql_cdc" not in s]


def add(offset_id: int, txn: str, index: int, last: bool, *ids: int, table: str = "t", gtid: str | None = None,
        op: str = "Add") -> ChangeEvent:
    gtid = gtid or txn
    rows = [[{"SignedInteger": i}] for i in ids]
    ev = ChangeEvent(uri=f"flv://src/shop/{table}", schema="shop", table=table, sequence=offset_id, operation=op,  # type: ignore[arg-type]
                     rows=rows, columns=["id"], pk=["id"], gtid=gtid, txn=Txn(txn, index, last))
    if last:
        ev.gtid_set = gtid
    return ev


def ddl(seq: int, txn: str, sql: str) -> ChangeEvent:
    return ChangeEvent(uri="flv://src/shop", schema="shop", sequence=seq, operation="Query", query=sql, database="shop", gtid=txn,
                       gtid_set=txn, txn=Txn(txn, 0, True))


_CHECKPOINT = re.compile(r"INSERT INTO `mysql_cdc`.`consumer_offsets` \(topic, stream_id, next_offset, sequence, txn_id, "
                         r"position, ddl_offset\)\s+VALUES (\(.*\))\s+ON DUPLICATE KEY UPDATE stream_id=VALUES\(stream_id\), "
                         r"next_offset=VALUES\(next_offset\),\s+sequence=VALUES\(sequence\), txn_id=VALUES\(txn_id\), "
                         r"position=VALUES\(position\),\s+ddl_offset=VALUES\(ddl_offset\)")


def checkpoints_shown(statements: list[str]) -> list[str]:
    """The statements, each checkpoint write (the whole statement matched) shown as `checkpoint (its values)`."""
    return [f"checkpoint {m.group(1)}" if (m := _CHECKPOINT.fullmatch(s)) else s for s in statements]


def drift(what: str) -> str:
    """The consumer's error for an update or delete that found fewer rows than the leader had."""
    return (f"{what} on the follower as the leader had it: the follower has drifted from the leader (a native "
            "replica stops here too, error 1032); nothing of the transaction was applied")


# The follower these tests assume unless one says otherwise: MariaDB whose user may run BINLOG.
FOLLOWER = FollowerFacts("10.11-MariaDB", "'cdc'@'%'", True)


def options(rows: RowPolicy | None = None, **settings) -> ReplayOptions:
    """[replay] options against FOLLOWER (rows "auto"), with `settings` changed."""
    return ReplayOptions(rows or RowPolicy("auto", FOLLOWER), **settings)


def replayer(follower: FakeFollower, saved: Checkpoint | None = None) -> Replayer:
    return Replayer(follower, "cdc", "stream-1", TableFilter(), saved, options())


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
    # Whole transactions join the group: their inserts share one statement, and no SAVEPOINT is needed.
    assert f.rows() == [INSERT + "(1),(2),(3),(4)"]
    assert (r.saved.next_offset, r.saved.sequence, r.saved.txn_id, r.saved.position) == (4, 3, "0-1-3", Position(gtid_set="0-1-3"))
    assert r.applied_transactions == 3 and r.applied_rows == 4


def test_a_transaction_republished_inside_a_group_keeps_only_its_complete_copy():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2))  # the producer died here ...
    r.apply(2, add(2, "0-1-2", 0, False, 2))  # ... and published the transaction again, whole
    r.apply(3, add(3, "0-1-2", 1, True, 3, table="u"))
    r.idle()
    # (Looking up table u, new to the consumer, sent the statement queued before.)
    assert f.rows() == [INSERT + "(1)", INSERT + "(2)", "INSERT INTO `shop`.`u` (`id`) VALUES (3)"]
    assert r.saved.next_offset == 4


def test_a_transaction_not_yet_whole_waits_while_the_whole_ones_before_it_commit():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2))  # its producer is slow, or died mid-publish
    r.idle()  # the whole transaction commits; the open one waits (nothing of it was sent)
    assert f.rows() == [INSERT + "(1)"] and f.open == [] and r.saved.next_offset == 1
    assert r.in_transaction and r.pending  # the reader goes on reading without waiting
    r.apply(2, add(2, "0-1-2", 1, True, 3))
    r.idle()
    assert f.rows() == [INSERT + "(1)", INSERT + "(2),(3)"] and r.saved.next_offset == 3


def test_a_copy_of_an_applied_transaction_only_moves_the_checkpoint():
    f = FakeFollower()
    r = replayer(f, Checkpoint("cdc", "stream-1", 5, 4, "0-1-7", Position(gtid_set="0-1-7")))
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
    assert checkpoints_shown(f.committed) == [
        INSERT + "(1)",
        "checkpoint ('cdc', 'stream-1', 1, 0, '0-1-1', '0-1-1', NULL)",  # the group's checkpoint
        "checkpoint ('cdc', 'stream-1', 1, 1, '0-1-2', '0-1-1', 1)",  # "DDL at offset 1 may have run"
        "ALTER TABLE t ADD c INT",
        "checkpoint ('cdc', 'stream-1', 2, 1, '0-1-2', '0-1-2', NULL)",  # past it
    ]
    assert f.commits == 3 and r.saved.next_offset == 2 and r.saved.ddl_offset is None


def test_a_ddl_replayed_after_a_crash_around_it_is_recognised_as_applied():
    f = FakeFollower(fail={"CREATE TABLE": pymysql.err.OperationalError(1050, "Table 'v' already exists")})
    r = replayer(f, Checkpoint("cdc", "stream-1", 3, 2, "0-1-3", Position(gtid_set="0-1-3"), ddl_offset=3))
    r.apply(3, ddl(3, "0-1-4", "CREATE TABLE v (id INT)"))
    assert r.saved.next_offset == 4 and r.saved.position == Position(gtid_set="0-1-4")
    other = FakeFollower(fail={"CREATE TABLE": pymysql.err.OperationalError(1050, "Table 'v' already exists")})
    with pytest.raises(DataError, match=r"DDL failed at offset 3, transaction 0-1-4: Table 'v' already exists "
                                        r"\(MySQL error 1050\); nothing of the transaction was applied"):
        replayer(other, Checkpoint("cdc", "stream-1", 3, 2, "0-1-3", Position(gtid_set="0-1-3"))).apply(3, ddl(3, "0-1-4", "CREATE TABLE v (id INT)"))


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
    r = Replayer(f, "cdc", "stream-1", TableFilter(exclude_tables=("shop.u",)), None, options())
    r.apply(0, add(0, "0-1-1", 0, False, 1, table="u"))
    r.apply(1, add(1, "0-1-1", 1, True, 2))
    r.idle()
    assert f.rows() == [INSERT + "(2)"] and r.saved.next_offset == 2


def test_without_gtids_the_checkpoint_keeps_the_commits_file_position():
    f = FakeFollower()
    r = replayer(f)
    ev = ChangeEvent(uri="flv://src/shop/t", schema="shop", table="t", sequence=0, operation="Delete", rows=[[{"SignedInteger": 1}]],
                     columns=["id"], pk=["id"], bn_file=BinlogFile("binlog.000003", 880), txn=Txn("binlog.000003:700", 0, True))
    r.apply(0, ev)
    r.idle()
    assert f.rows() == ["DELETE FROM `shop`.`t` WHERE `id` IN (1)"] and r.saved.position == Position(binlog=BinlogFile("binlog.000003", 880))


# ---------------------------------------------------------------------------
# Grouping without savepoints; transactions applied alone


def test_no_savepoint_is_ever_taken():
    f = FakeFollower()
    r = replayer(f)
    for i in range(6):
        r.apply(i, add(i, f"0-1-{i + 1}", 0, True, i + 1, table="tu"[i % 2]))
    r.idle()
    assert checkpoints_shown(f.committed) == [  # no SAVEPOINT anywhere: the rows in order, one checkpoint
        *[f"INSERT INTO `shop`.`{'tu'[n % 2]}` (`id`) VALUES ({n + 1})" for n in range(6)],
        "checkpoint ('cdc', 'stream-1', 6, 5, '0-1-6', '0-1-6', NULL)"]
    assert f.commits == 1 and r.saved.next_offset == 6


def test_a_transaction_on_a_non_transactional_table_commits_alone_with_its_checkpoint():
    aria = TableInfo(engine="Aria", transactional=False)
    f = FakeFollower(tables={("shop", "ar"): aria})
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, True, 2, table="ar"))
    # The group before it committed first, then it with its own checkpoint.
    assert f.commits == 2 and r.saved.next_offset == 2 and r.saved.txn_id == "0-1-2"
    r.apply(2, add(2, "0-1-3", 0, True, 3))
    r.idle()
    assert f.commits == 3
    assert f.rows() == [INSERT + "(1)", "INSERT INTO `shop`.`ar` (`id`) VALUES (2)", INSERT + "(3)"]


def test_a_failure_after_a_non_transactional_write_says_that_part_may_be_applied():
    aria = TableInfo(engine="Aria", transactional=False)
    f = FakeFollower(tables={("shop", "ar"): aria},
                     fail={"(9)": pymysql.err.IntegrityError(1062, "Duplicate entry '9' for key 'PRIMARY'")})
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, False, 1, table="ar"))
    with pytest.raises(DataError) as e:
        r.apply(1, add(1, "0-1-1", 1, True, 9))  # its commit waits for the follower: the failure is its own
    assert str(e.value) == (
        "Add on shop.t failed at offset 1, transaction 0-1-1: Duplicate entry '9' for key 'PRIMARY' (MySQL error 1062); "
        "its changes to non-transactional tables (shop.ar (Aria)) may have been applied (they cannot be rolled back; "
        "a native replica has the same limit), the rest was not")
    assert f.kept == ["INSERT INTO `shop`.`ar` (`id`) VALUES (1)"] and f.committed == []


def test_a_transaction_longer_than_the_read_ahead_commits_the_group_and_streams_alone(monkeypatch):
    monkeypatch.setattr(replayer_module, "READ_AHEAD_EVENTS", 2)
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, False, 2))
    assert f.commits == 0
    r.apply(2, add(2, "0-1-2", 1, False, 3))  # two events and not whole: the group commits, this one streams
    assert f.commits == 1 and r.saved.next_offset == 1
    r.apply(3, add(3, "0-1-2", 2, False, 4))
    r.idle()  # sends what it has; it stays open
    assert f.open == [INSERT + "(2),(3),(4)"] and r.in_transaction
    r.apply(4, add(4, "0-1-2", 3, True, 5))  # its last event: its own commit
    assert f.commits == 2 and r.saved.next_offset == 5 and f.open == []


def test_a_streamed_transaction_published_again_is_rolled_back_and_applied_whole(monkeypatch):
    monkeypatch.setattr(replayer_module, "READ_AHEAD_EVENTS", 1)
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-2", 0, False, 2))
    r.apply(1, add(1, "0-1-2", 1, False, 3))  # the producer died here, and published it again:
    r.apply(2, add(2, "0-1-2", 0, False, 2))
    r.apply(3, add(3, "0-1-2", 1, True, 3))
    assert f.rows() == [INSERT + "(2),(3)"] and r.saved.next_offset == 4


# ---------------------------------------------------------------------------
# BINLOG replay

# Real events of MariaDB 10.11.19 (`CREATE TABLE y.a (id INT PRIMARY KEY, v INT)`), read from its binlog file:
# the FORMAT_DESCRIPTION, then TABLE_MAP + WRITE_ROWS (1,1),(2,2) / UPDATE_ROWS (2,2)->(2,20) / DELETE_ROWS (1,1).
FDE = ("c+4Daw/+hQAA/AAAAAABAAABAAQAMTAuMTEuMTktTWFyaWFEQi0wK2RlYjEydTEtbG9nAAAAAAAAAAAAAAAAAAAAAAAAAABz7gNrEzgN"
       "AAgAEgAEBAQEEgAA5AAEGggAAAAICAgCAAAACgoKAAAAAAAACgoKAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
       "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
       "AAAEEwQADQgICAoKCgEMWz2J")
WRITE = ("wu4DaxP+hQAANwAAABIJAAAAABIAAAAAAAEAAXkAAWEAAgMDAAIBAQAEBQJpZAF2CAEAePJus8LuA2sX/oUAADMAAABFCQAAAAASAAAA"
         "AAABAAID/AEAAAABAAAA/AIAAAACAAAAdiTI4g==")
UPDATE = ("wu4DaxP+hQAANwAAAPoJAAAAABIAAAAAAAEAAXkAAWEAAgMDAAIBAQAEBQJpZAF2CAEAraeDosLuA2sY/oUAADQAAAAuCgAAAAASAAAA"
          "AAABAAIDA/wCAAAAAgAAAPwCAAAAFAAAAMYugf0=")
DELETE = ("wu4DaxP+hQAANwAAAN8KAAAAABIAAAAAAAEAAXkAAWEAAgMDAAIBAQAEBQJpZAF2CAEA/3jOnsLuA2sZ/oUAACoAAAAJCwAAAAASAAAA"
          "AAABAAID/AEAAAABAAAA/KfBrg==")


def with_binlog(ev: ChangeEvent, events: str, fde: bool) -> ChangeEvent:
    ev.binlog = FDE + events if fde else events
    return ev


def test_rows_with_binlog_events_are_replayed_by_binlog_statements_the_format_description_once_per_session():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, with_binlog(add(0, "0-1-1", 0, False, 1, 2), WRITE, fde=True))
    r.apply(1, with_binlog(add(1, "0-1-1", 1, True, 2, op="Update"), UPDATE, fde=False))
    r.apply(2, with_binlog(add(2, "0-1-2", 0, True, 1, op="Delete"), DELETE, fde=True))  # the same FDE again
    r.idle()
    # consecutive row events share one BINLOG statement (one round trip), each event's binlog events a chunk of it
    assert f.rows() == [f"BINLOG '{FDE}'", f"BINLOG '{WRITE}\n{UPDATE}\n{DELETE}'"]
    assert f.described == [("shop", "t")]  # once, for its engine: the follower's own row applier does the rest
    # A new session (after a reconnect, a new Replayer) gets the format description again.
    f2 = FakeFollower()
    r2 = replayer(f2, r.saved)
    r2.apply(3, with_binlog(add(3, "0-1-3", 0, True, 5), WRITE, fde=True))
    r2.idle()
    assert f2.rows() == [f"BINLOG '{FDE}'", f"BINLOG '{WRITE}'"]


def test_binlog_statements_hold_few_events_where_the_follower_session_annotates_them(monkeypatch):
    """A session that logs each statement's text before its rows (it may not turn that off) would log a BINLOG
    statement's whole base64 once per event in it: there a statement holds up to MAX_BINLOG characters of
    events, elsewhere up to QUIET_MAX_BINLOG."""
    from cdc_consumer import batch

    def statements(annotates: bool) -> list[str]:
        f = FakeFollower()
        facts = FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", True, annotates=annotates)
        r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(RowPolicy("auto", facts)))
        for i, txn in enumerate(["0-1-1", "0-1-2", "0-1-3"]):
            r.apply(i, with_binlog(add(i, txn, 0, True, i + 1), WRITE, fde=i == 0))
        r.idle()
        return [sql for sql in f.rows() if sql != f"BINLOG '{FDE}'"]

    # (room for two of the events' chunks where the session annotates, for all three where it does not)
    monkeypatch.setattr(batch, "MAX_BINLOG", 2 * (len(WRITE) + 1) + 9)
    monkeypatch.setattr(replayer_module, "MAX_BINLOG", batch.MAX_BINLOG)
    assert statements(annotates=True) == [f"BINLOG '{WRITE}\n{WRITE}'", f"BINLOG '{WRITE}'"]
    assert statements(annotates=False) == [f"BINLOG '{WRITE}\n{WRITE}\n{WRITE}'"]
    assert batch.SqlBatch().max_binlog == batch.QUIET_MAX_BINLOG > batch.MAX_BINLOG


def test_the_format_description_of_a_filtered_out_event_still_reaches_the_session():
    f = FakeFollower()
    r = Replayer(f, "cdc", "stream-1", TableFilter(exclude_tables=("shop.u",)), None, options())
    r.apply(0, with_binlog(add(0, "0-1-1", 0, False, 1, table="u"), WRITE, fde=True))
    r.apply(1, with_binlog(add(1, "0-1-1", 1, True, 2), WRITE, fde=False))
    r.idle()
    assert f.rows() == [f"BINLOG '{FDE}'", f"BINLOG '{WRITE}'"]


def test_binlog_rows_overlap_only_for_transactional_tables_on_a_follower_whose_triggers_ignore_them():
    def overlaps(facts: FollowerFacts, engine_transactional: bool) -> list[tuple[str, bool]]:
        f = FakeFollower(tables={("shop", "t"): TableInfo(transactional=engine_transactional)})
        r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(RowPolicy("auto", facts)))
        r.apply(0, with_binlog(add(0, "0-1-1", 0, True, 1), WRITE, fde=True))
        r.idle()
        return [(sql[:12], o.overlap) for sql, o in zip(f.rows(), f.origins)]

    plain = FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", True)
    firing = FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", True, row_triggers=True)
    assert overlaps(plain, True) == [(f"BINLOG '{FDE}"[:12], False), (f"BINLOG '{WRITE}"[:12], True)]
    # A follower trigger fired by the rows may write a MyISAM table, which the rollback after a failure in
    # front of them would not undo; and rows of a non-transactional table stay whatever follows.
    assert overlaps(firing, True) == [(f"BINLOG '{FDE}"[:12], False), (f"BINLOG '{WRITE}"[:12], False)]
    assert overlaps(plain, False) == [(f"BINLOG '{FDE}"[:12], False), (f"BINLOG '{WRITE}"[:12], False)]


def test_sql_rows_overlap_only_for_transactional_tables():
    def overlaps(table: TableInfo, facts: FollowerFacts = FOLLOWER) -> list[tuple[str, bool]]:
        f = FakeFollower(tables={("shop", "t"): table})
        r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(RowPolicy("sql", facts)))
        r.apply(0, add(0, "0-1-1", 0, False, 1))
        r.apply(1, add(1, "0-1-1", 1, False, 2, op="Delete"))
        r.apply(2, add(2, "0-1-1", 2, True, 3))
        r.idle()
        return [(sql.split(" ")[0], o.overlap) for sql, o in zip(f.statements(), f.origins) if "mysql_cdc" not in sql]

    statements = ["INSERT", "DELETE", "INSERT"]
    firing = FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", True, row_triggers=True)  # (BINLOG rows only)
    assert overlaps(TableInfo()) == overlaps(TableInfo(), firing) == [(s, True) for s in statements]
    # Rows of a non-transactional table stay whatever follows. (SQL rows never reach a table with triggers
    # that would fire: the Replayer refuses it, and the follower's own triggers for BINLOG rows do not matter.)
    assert overlaps(TableInfo(transactional=False, engine="Aria")) == [(s, False) for s in statements]


def test_the_sql_path_where_binlog_replay_is_not_possible_or_not_wanted():
    from cdc_consumer.binlog_replay import FollowerFacts, RowPolicy

    def run(policy: RowPolicy) -> list[str]:
        f = FakeFollower()
        r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(policy))
        r.apply(0, with_binlog(add(0, "0-1-1", 0, True, 1), WRITE, fde=True))
        r.idle()
        return f.rows()

    mariadb = FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", True)
    assert run(RowPolicy("auto", mariadb)) == [f"BINLOG '{FDE}'", f"BINLOG '{WRITE}'"]
    assert run(RowPolicy("sql", mariadb)) == [INSERT + "(1)"]
    assert run(RowPolicy("auto", FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", False))) == [INSERT + "(1)"]
    mysql = FollowerFacts("8.0.36", "'cdc'@'%'", True)
    assert run(RowPolicy("auto", mysql)) == [INSERT + "(1)"]  # a MariaDB leader's events: not for MySQL
    with pytest.raises(DataError, match=r'offset 0 \(transaction 0-1-1\) cannot be applied: \[replay\] rows = "binlog", '
                                        r"but the leader is MariaDB and the follower MySQL: BINLOG replay needs a "
                                        r"follower of the same kind"):
        run(RowPolicy("binlog", mysql))


def test_binlog_events_without_a_format_description_before_them_are_refused():
    f = FakeFollower()
    r = replayer(f)
    with pytest.raises(DataError, match=r"offset 0 \(transaction 0-1-1\) cannot be applied: it carries binlog events, "
                                        r"but no format description event came before them"):
        r.apply(0, with_binlog(add(0, "0-1-1", 0, True, 1), WRITE, fde=False))
    bad = add(1, "0-1-2", 0, True, 1)
    bad.binlog = "x'; DROP DATABASE shop; -- "
    with pytest.raises(DataError, match=r"offset 1 \(transaction 0-1-2\) cannot be applied: its 'binlog' field is "
                                        r"not base64; nothing of the transaction was applied"):
        r.apply(1, bad)
    assert f.statements() == []


def test_a_missing_row_in_binlog_replay_names_the_key():
    f = FakeFollower(fail={UPDATE: pymysql.err.OperationalError(1032, "Can't find record in 'a'")})
    r = replayer(f)
    ev = ChangeEvent(uri="flv://src/shop/t", schema="shop", table="t", sequence=0, operation="Update", rows=[([i(2)], [i(20)])], columns=["id"],
                     pk=["id"], gtid="0-1-1", gtid_set="0-1-1", txn=Txn("0-1-1", 0, True))
    r.apply(0, with_binlog(ev, UPDATE, fde=True))
    with pytest.raises(DataError) as e:
        r.idle()
    assert str(e.value) == drift("Update on shop.t at offset 0, transaction 0-1-1 found no row for key 2")


def test_a_missing_row_in_a_binlog_statement_of_several_events_names_their_range_and_the_keys_it_can_be():
    f = FakeFollower(fail={UPDATE: pymysql.err.OperationalError(1032, "Can't find record in 't'")})
    r = replayer(f)
    write = ChangeEvent(uri="flv://src/shop/t", schema="shop", table="t", sequence=0, operation="Add",
                        rows=[[i(1)], [i(2)]], columns=["id"], pk=["id"], gtid="0-1-1", txn=Txn("0-1-1", 0, False))
    update = ChangeEvent(uri="flv://src/shop/t", schema="shop", table="t", sequence=1, operation="Update",
                         rows=[([i(2)], [i(20)])], columns=["id"], pk=["id"], gtid="0-1-1", gtid_set="0-1-1",
                         txn=Txn("0-1-1", 1, True))
    r.apply(0, with_binlog(write, WRITE, fde=True))
    r.apply(1, with_binlog(update, UPDATE, fde=False))
    with pytest.raises(DataError) as e:
        r.idle()
    # the server does not say which event of the statement failed: the missing row is the update's
    assert str(e.value) == drift("Update on shop.t at offsets 0..1, transaction 0-1-1 found no row for key 2")
    assert f.committed == []


# ---------------------------------------------------------------------------
# The SQL path made safe


def row(offset: int, op: str, columns: list[str], pk: list[str], rows: list, txn: str | None = None) -> ChangeEvent:
    txn = txn or f"0-1-{offset + 1}"
    return ChangeEvent(uri="flv://src/shop/g", schema="shop", table="g", sequence=offset, operation=op, rows=rows,  # type: ignore[arg-type]
                       columns=columns, pk=pk, gtid=txn, gtid_set=txn, txn=Txn(txn, 0, True))


def i(v: int) -> dict:
    return {"SignedInteger": v}


def test_rows_of_a_table_with_triggers_or_versioning_are_refused_on_the_sql_path():
    guard = ("recreate g_ai on the follower with the body wrapped as `IF @cdc_consumer IS NULL THEN <body>; END IF` "
             "(as cdc-consumer writes the triggers it replays with [replay] triggers = \"guarded\", the default when "
             "rows take SQL); or ")
    for info, what, fix in (
            (TableInfo(triggers=("g_ai",)), "has triggers (g_ai) without cdc-consumer's guard, which SQL would fire "
             "again on replicated rows (the leader's row events already hold what its triggers did; a native replica "
             "does not fire them)", guard),
            (TableInfo(versioned=True), "is system-versioned, but the event lacks its row_start/row_end columns (rows "
             "a snapshot read, or a leader not logging them): SQL would stamp its history with the follower's clock",
             "")):
        f = FakeFollower(tables={("shop", "g"): info})
        r = replayer(f)
        with pytest.raises(DataError) as e:
            r.apply(0, row(0, "Add", ["id"], ["id"], [[i(1)]]))
        assert str(e.value) == (
            f"offset 0 (transaction 0-1-1) cannot be applied: Add on shop.g: the follower's table {what}; its rows go "
            "through SQL because the event carries no binlog events (a producer with [events] binlog = false, or rows "
            f"a resumed snapshot trimmed); nothing of the transaction was applied; fix: {fix}if the producer's profile "
            "says [events] binlog = false, set it to true so that later row events carry them; for this one, drop "
            "what the SQL path cannot reproduce on the follower")
        assert f.statements() == []
        snapshot = row(0, "Add", ["id"], ["id"], [[i(1)]])
        snapshot.snapshot = SnapshotTag("shop.g")  # rows a snapshot read: never with binlog events
        with pytest.raises(DataError) as e:
            replayer(f).apply(0, snapshot)
        assert str(e.value) == (
            f"offset 0 (transaction 0-1-1) cannot be applied: Add on shop.g: the follower's table {what}; its rows go "
            "through SQL because the event carries no binlog events (snapshot rows); nothing of the transaction was "
            f"applied; fix: {fix}no BINLOG replay is possible for it; drop what the SQL path cannot reproduce on the "
            "follower")


def test_a_refusal_names_the_grant_when_the_user_may_not_run_binlog():
    from cdc_consumer.binlog_replay import FollowerFacts, RowPolicy

    f = FakeFollower(tables={("shop", "t"): TableInfo(triggers=("t_ai",))})
    policy = RowPolicy("auto", FollowerFacts("10.11.19-MariaDB", "'cdc'@'%'", False))
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(policy))
    with pytest.raises(DataError, match=r"because the follower user 'cdc'@'%' may not run BINLOG; nothing of the "
                                        r"transaction was applied; fix: recreate t_ai .*; or GRANT BINLOG REPLAY ON "
                                        r"\*\.\* TO 'cdc'@'%' on the follower and restart the consumer$"):
        r.apply(0, with_binlog(add(0, "0-1-1", 0, True, 1), WRITE, fde=True))


def test_generated_and_hidden_hash_columns_are_not_written():
    info = TableInfo(columns=frozenset({"id", "a", "b", "c"}), generated=frozenset({"b", "c"}))
    f = FakeFollower(tables={("shop", "g"): info})
    r = replayer(f)
    cols = ["id", "a", "b", "c", "DB_ROW_HASH_1"]
    r.apply(0, row(0, "Add", cols, ["id"], [[i(1), i(1), i(2), i(3), i(77)]]))
    r.apply(1, row(1, "Update", cols, ["id"], [([i(1), i(1), i(2), i(3), i(77)], [i(1), i(5), i(10), i(15), i(78)])]))
    r.idle()
    assert f.rows() == [
        "INSERT INTO `shop`.`g` (`id`, `a`) VALUES (1,1)",
        "INSERT INTO `shop`.`g` (`id`, `a`) VALUES (1,5) ON DUPLICATE KEY UPDATE `a`=VALUES(`a`)",
    ]


def test_without_overlaps_tables_get_one_update_per_row():
    f = FakeFollower(tables={("shop", "g"): TableInfo(without_overlaps=True)})
    r = replayer(f)
    r.apply(0, row(0, "Update", ["id", "v"], ["id"], [([i(1), i(1)], [i(1), i(2)]), ([i(2), i(1)], [i(2), i(3)])]))
    r.idle()
    assert f.rows() == ["UPDATE `shop`.`g` SET `id`=1, `v`=2 WHERE `id` <=> 1",
                        "UPDATE `shop`.`g` SET `id`=2, `v`=3 WHERE `id` <=> 2"]


def test_checks_the_leader_had_off_are_off_for_the_event_alone():
    from cdc_stream.events import RowChecks

    f = FakeFollower()
    r = replayer(f)
    off = row(0, "Add", ["id"], ["id"], [[i(1)]], txn="0-1-1")
    off.checks = RowChecks(foreign_keys=False, check_constraints=False)
    r.apply(0, off)
    r.apply(1, row(1, "Add", ["id"], ["id"], [[i(2)]], txn="0-1-2"))
    r.idle()
    assert f.rows() == [
        "/*M! SET STATEMENT foreign_key_checks=0, check_constraint_checks=0 FOR */ INSERT "
        "/*+ SET_VAR(foreign_key_checks=OFF) */ INTO `shop`.`g` (`id`) VALUES (1)",
        "INSERT INTO `shop`.`g` (`id`) VALUES (2)",  # other checks: never the same statement
    ]


def test_an_update_or_delete_that_finds_no_row_stops_naming_the_key():
    f = FakeFollower(found={"DELETE": 1})
    r = replayer(f)
    r.apply(0, row(0, "Delete", ["id", "v"], ["id"], [[i(1), i(1)], [i(2), i(2)]]))
    with pytest.raises(DataError) as e:
        r.idle()
    assert str(e.value) == drift("Delete on shop.g at offset 0, transaction 0-1-1 found no row for one of the keys 1, 2")
    f = FakeFollower(found={"UPDATE": 0})
    r = replayer(f)
    r.apply(0, row(0, "Update", ["id", "v"], [], [([i(2), i(2)], [i(2), i(20)])]))
    with pytest.raises(DataError) as e:
        r.idle()
    assert str(e.value) == drift("Update on shop.g at offset 0, transaction 0-1-1 found no row for key (2,2)")


def test_an_upsert_counts_two_per_updated_row_so_an_inserted_one_is_caught():
    f = FakeFollower(found={"ON DUPLICATE KEY": 3})  # one of the two rows was inserted
    r = replayer(f)
    r.apply(0, row(0, "Update", ["id", "v"], ["id"], [([i(1), i(1)], [i(1), i(2)]), ([i(2), i(1)], [i(2), i(3)])]))
    with pytest.raises(DataError) as e:
        r.idle()
    assert str(e.value) == drift("Update on shop.g at offset 0, transaction 0-1-1 found no row for one of the keys 1, 2")


# ---------------------------------------------------------------------------
# DDL under the leader's session, events, accounts


def query(seq: int, sql: str, **fields) -> ChangeEvent:
    ev = ddl(seq, f"0-1-{seq + 1}", sql)
    for k, v in fields.items():
        setattr(ev, k, v)
    return ev


def test_ddl_runs_under_the_leaders_session_then_the_consumers_is_back():
    from cdc_stream.events import QuerySession

    f = FakeFollower()
    r = replayer(f)
    session = QuerySession(sql_mode=4, character_set_client=8, collation_connection=8, collation_server=8,
                           time_zone="+05:00", auto_increment_increment=5, auto_increment_offset=3,
                           foreign_key_checks=False, timestamp_us=1_000_000_000_123_456)
    r.apply(0, query(0, 'CREATE TABLE "q" (v VARCHAR(3) DEFAULT \'é\')', session=session))
    assert f.committed[-2] == 'CREATE TABLE "q" (v VARCHAR(3) DEFAULT \'\xe9\')'  # latin1 bytes (0xE9)
    assert f.session == [
        "SET @@session.autocommit=1, @@session.sql_mode=4, @@session.time_zone='+05:00', "
        "@@session.character_set_client=latin1, @@session.collation_connection=8, @@session.collation_server=8, "
        "@@session.lc_time_names=0, @@session.auto_increment_increment=5, @@session.auto_increment_offset=3, "
        "@@session.foreign_key_checks=0, @@session.unique_checks=1, @@session.sql_auto_is_null=0, "
        "@@session.explicit_defaults_for_timestamp=0, @@session.check_constraint_checks=1, "
        "@@session.timestamp=1000000000.123456",
        "SET @cdc_consumer = NULL",  # a statement the leader logged fires the follower's triggers
        "SET @@session.collation_server=DEFAULT, @@session.lc_time_names=DEFAULT, "
        "@@session.auto_increment_increment=DEFAULT, @@session.auto_increment_offset=DEFAULT, "
        "@@session.foreign_key_checks=DEFAULT, @@session.unique_checks=DEFAULT, @@session.sql_auto_is_null=DEFAULT, "
        "@@session.explicit_defaults_for_timestamp=DEFAULT, @@session.timestamp=DEFAULT",
        "SET NAMES utf8mb4", "SET time_zone = '+00:00'",
        "SET sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES'"
        "/*M! , check_constraint_checks = 0 */",  # rows: as a native replica's applier, no CHECK evaluated
        "SET @cdc_consumer = 1",
        "SET @@session.autocommit=0",
    ]


def test_a_client_collation_that_is_no_charsets_default_is_set_by_its_charsets_name():
    from cdc_stream.events import QuerySession

    f = FakeFollower()
    r = replayer(f)
    # SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci: the leader logs 224 as character_set_client, which
    # SET @@session.character_set_client=224 refuses ("Unknown character set: '224'").
    session = QuerySession(character_set_client=224, collation_connection=224, collation_server=2503,
                           collation_database=224)
    r.apply(0, query(0, "CREATE TABLE t (v VARCHAR(3) DEFAULT 'é')", session=session))
    assert f.committed[-2] == "CREATE TABLE t (v VARCHAR(3) DEFAULT 'é')".encode().decode("latin1")  # UTF-8 bytes
    assert f.session[0].startswith(
        "SET @@session.autocommit=1, @@session.time_zone=@@global.time_zone, @@session.character_set_client=utf8mb4, "
        "@@session.collation_connection=224, @@session.collation_server=2503, @@session.collation_database=224, ")
    assert f.session[1] == "SET @cdc_consumer = NULL"
    assert f.session[2].startswith("SET @@session.collation_server=DEFAULT, @@session.collation_database=DEFAULT, ")
    assert f.session[3] == "SET NAMES utf8mb4"


def test_a_charset_no_server_reads_statements_in_sends_the_statement_as_utf8mb4():
    import base64

    from cdc_stream.events import QuerySession

    f = FakeFollower()
    r = replayer(f)
    session = QuerySession(character_set_client=35, collation_connection=35)
    r.apply(0, query(0, "CREATE TABLE t (v VARCHAR(3) DEFAULT 'é')", session=session))
    assert f.committed[-2] == "CREATE TABLE t (v VARCHAR(3) DEFAULT 'é')".encode().decode("latin1")  # UTF-8 bytes
    assert "@@session.character_set_client=utf8mb4, @@session.collation_connection=35," in f.session[0]
    # Its exact bytes (not text) cannot be sent in another charset: a loud stop.
    raw = "CREATE TABLE u (v INT)".encode("utf-16-be")
    with pytest.raises(DataError, match="exact bytes are in the leader's character_set_client ucs2, which no server "
                                        "reads statements in; nothing of the transaction was applied"):
        r.apply(1, query(1, "CREATE TABLE u (v INT)", session=session, query_b64=base64.b64encode(raw).decode()))


def test_a_collation_the_follower_lacks_stops_before_the_statement():
    from cdc_stream.events import QuerySession

    f = FakeFollower()
    r = replayer(f)
    session = QuerySession(character_set_client=45, collation_connection=255)  # MySQL 8's utf8mb4_0900_ai_ci
    with pytest.raises(DataError, match=r"offset 0 \(transaction 0-1-1\) cannot be applied: the follower knows no "
                                        r"collation 255 \(the leader session's collation_connection; a native replica "
                                        r"stops here too\); nothing of the transaction was applied; fix: use a "
                                        r"follower server that has that collation"):
        r.apply(0, query(0, "CREATE TABLE t (v INT)", session=session))
    assert not any("CREATE TABLE" in s for s in f.committed)
    assert f.session == []  # the session was never changed


def test_a_named_time_zone_the_follower_lacks_is_a_clear_stop():
    from cdc_stream.events import QuerySession

    f = FakeFollower(fail={"Europe/Berlin": pymysql.err.OperationalError(
        1298, "Unknown or incorrect time zone: 'Europe/Berlin'")})
    r = replayer(f)
    with pytest.raises(DataError, match=r"cannot be applied: the follower has no time zone 'Europe/Berlin', which "
                                        r"the leader's session used \(Unknown or incorrect time zone: "
                                        r"'Europe/Berlin', MySQL error 1298; a native replica stops here too\); "
                                        r"nothing of the transaction was applied; fix: load the follower's time zone "
                                        r"tables \(mariadb-tzinfo-to-sql /usr/share/zoneinfo \| mariadb -u root "
                                        r"mysql\) and restart cdc-consumer"):
        r.apply(0, query(0, "CREATE TABLE t (ts TIMESTAMP)", session=QuerySession(time_zone="Europe/Berlin")))
    assert not any("CREATE TABLE" in s for s in f.committed)
    assert f.session[-5:-3] == ["SET NAMES utf8mb4", "SET time_zone = '+00:00'"]  # the consumer's session again


def test_the_exact_bytes_of_a_statement_are_sent():
    import base64

    f = FakeFollower()
    r = replayer(f)
    raw = "CREATE TABLE t (s VARCHAR(3) DEFAULT 'ü')".encode("cp1252")
    r.apply(0, query(0, "CREATE TABLE t (s VARCHAR(3) DEFAULT '\\xfc')", query_b64=base64.b64encode(raw).decode()))
    assert f.committed[-2] == raw.decode("latin1")


def test_drop_table_is_idempotent_and_an_error_the_leader_had_is_success():
    f = FakeFollower(fail={"DROP VIEW": pymysql.err.OperationalError(4092, "Unknown VIEW: 'shop.v1'")})
    r = replayer(f)
    r.apply(0, query(0, "DROP TABLE `t1`,`t2` /* generated by server */"))
    assert f.session[:3] == ["SET @@session.autocommit=1, @@session.sql_if_exists=1", "SET @cdc_consumer = NULL",
                             "SET @@session.sql_if_exists=DEFAULT"]
    r.apply(1, query(1, "DROP VIEW v1, v2", error_code=4092))
    assert r.saved.next_offset == 2
    other = FakeFollower(fail={"DROP VIEW": pymysql.err.OperationalError(1051, "Unknown table")})
    with pytest.raises(DataError, match=r"DDL failed at offset 0, transaction 0-1-1: Unknown table \(MySQL error "
                                        r"1051\); the leader's statement ended with error 4092 \(the errors differ\)"):
        replayer(other).apply(0, query(0, "DROP VIEW v1, v2", error_code=4092))
    with pytest.raises(DataError, match=r"DDL at offset 0, transaction 0-1-1 succeeded on the follower, but the "
                                        r"leader's ended with error 4092"):
        replayer(FakeFollower()).apply(0, query(0, "DROP VIEW v1, v2", error_code=4092))


def test_a_replicated_event_is_created_disabled_on_the_follower():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, query(0, "CREATE DEFINER=`root`@`localhost` EVENT `shop`.`e1` ON SCHEDULE EVERY 1 DAY DO DELETE FROM t"))
    r.apply(1, query(1, "ALTER EVENT e2 ON SCHEDULE EVERY 2 DAY RENAME TO e3 ENABLE DO DELETE FROM t"))
    assert f.rows() == [
        "CREATE DEFINER=`root`@`localhost` EVENT `shop`.`e1` ON SCHEDULE EVERY 1 DAY DISABLE ON SLAVE DO DELETE FROM t",
        "ALTER EVENT e2 ON SCHEDULE EVERY 2 DAY RENAME TO e3 DISABLE ON SLAVE DO DELETE FROM t",
    ]


def test_account_statements_are_skipped_and_counted_never_showing_the_password():
    said: list[str] = []
    f = FakeFollower()
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(), say=said.append)
    r.apply(0, query(0, "CREATE USER 'app'@'%' IDENTIFIED BY PASSWORD '*14E65567ABDB5135D0CFD9A70B3032C179A49EE7'"))
    r.apply(1, query(1, "GRANT SELECT ON shop.* TO 'app'@'%'"))
    assert said == [
        "skipped account statement at offset 0: CREATE USER 'app'@'%' ([replay] accounts = \"skip\")",
        "skipped account statement at offset 1: GRANT 'app'@'%' ([replay] accounts = \"skip\")",
    ]
    assert r.skipped_accounts == 2 and f.rows() == [] and r.saved.next_offset == 2


def test_account_statements_applied_an_existing_account_is_logged_not_a_stop():

    said: list[str] = []
    f = FakeFollower(fail={"CREATE USER": pymysql.err.OperationalError(1396, "Operation CREATE USER failed for 'app'@'%'"),
                           "ALTER USER": pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax; "
                                                                           "near 'PASSWORD '*14E655'' at line 1")})
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(accounts="apply"), say=said.append)
    r.apply(0, query(0, "CREATE USER 'app'@'%' IDENTIFIED BY PASSWORD '*14E65567ABDB5135D0CFD9A70B3032C179A49EE7'"))
    assert said == ["account statement at offset 0: CREATE USER 'app'@'%' failed on the follower (Operation CREATE "
                    "USER failed for 'app'@'%', MySQL error 1396): the follower already has, or lacks, the account; "
                    "going on"]
    with pytest.raises(DataError) as e:
        r.apply(1, query(1, "ALTER USER 'app'@'%' IDENTIFIED BY PASSWORD '*14E65567ABDB5135D0CFD9A70B3032C179A49EE7'"))
    assert str(e.value) == ("DDL failed at offset 1, transaction 0-1-2: You have an error in your SQL syntax; near "
                            "'PASSWORD '<redacted>'' at line 1 (MySQL error 1064); nothing of the transaction was applied")


def test_an_account_statement_the_follower_user_may_not_run_stops_with_the_fix():
    """GRANT of privileges the follower user lacks (a managed service's admin user granting ALL ON *.*: MariaDB's
    main.opt_trace_security) is refused with 1045; the stop names the statement's accounts, not its text."""
    f = FakeFollower(fail={"GRANT ALL": pymysql.err.OperationalError(
        1045, "Access denied for user 'cdc_managed'@'%' (using password: YES)")})
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(accounts="apply"))
    with pytest.raises(DataError) as e:
        r.apply(0, query(0, "GRANT ALL ON *.* TO 'foo'@'localhost' WITH GRANT OPTION"))
    assert str(e.value) == (
        "offset 0 (transaction 0-1-1) cannot be applied: GRANT 'foo'@'localhost' was refused to the follower user "
        "(Access denied for user 'cdc_managed'@'%' (using password: YES), MySQL error 1045): it may not grant or "
        "change what the leader's statement does, which a native replica's applier may; nothing of the transaction "
        "was applied; fix: run the statement on the follower as a user who may, then restart with [replay] accounts "
        "= \"skip\" to move past it (or keep accounts = \"skip\" where the follower's accounts are managed apart)")
    assert r.saved.next_offset == 0 and r.saved.ddl_offset == 0  # the DDL mark only: the statement is not past


def test_an_account_statement_whose_password_was_removed_is_refused_when_applying_accounts():

    f = FakeFollower()
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(accounts="apply"))
    with pytest.raises(DataError) as e:
        r.apply(0, query(0, "CREATE USER 'e'@'%' IDENTIFIED VIA ed25519 USING PASSWORD(/* password removed by "
                            "cdc-producer */)"))
    assert str(e.value) == (
        "offset 0 (transaction 0-1-1) cannot be applied: CREATE USER 'e'@'%' had its password removed by cdc-producer "
        "(its authentication plugin stores what only the leader can compute from the clear text); nothing of the "
        "transaction was applied; fix: create the account on the follower yourself, and restart with [replay] "
        "accounts = \"skip\" to move past the statement")
    assert f.statements() == [] and r.saved is None


# ---------------------------------------------------------------------------
# A managed follower's user: guarded triggers, the consumer's definer (issue 23)

TRIGGER = "CREATE DEFINER=`root`@`localhost` TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW SET NEW.v = 1"


def test_triggers_are_created_guarded_and_with_the_consumers_definer_when_asked():

    for guard, definer, sent in (
            (False, "leader", TRIGGER),
            (True, "leader", "CREATE DEFINER=`root`@`localhost` TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW "
                             "IF @cdc_consumer IS NULL THEN SET NEW.v = 1; END IF"),
            (True, "consumer", "CREATE DEFINER=CURRENT_USER TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW "
                               "IF @cdc_consumer IS NULL THEN SET NEW.v = 1; END IF")):
        f = FakeFollower()
        r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(guard_triggers=guard, definer=definer))
        r.apply(0, ddl(0, "0-1-1", TRIGGER))
        r.apply(1, ddl(1, "0-1-2", "CREATE DEFINER=`root`@`localhost` SQL SECURITY INVOKER VIEW v AS SELECT 1"))
        r.finish()
        assert [s for s in f.committed if "TRIGGER" in s or "VIEW" in s] == [sent, (
            "CREATE DEFINER=CURRENT_USER SQL SECURITY INVOKER VIEW v AS SELECT 1" if definer == "consumer" else
            "CREATE DEFINER=`root`@`localhost` SQL SECURITY INVOKER VIEW v AS SELECT 1")]


def test_rows_of_a_table_whose_triggers_are_guarded_take_sql():
    f = FakeFollower(tables={("shop", "t"): TableInfo(triggers=())})  # its triggers all guarded
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.finish()
    assert f.rows() == [INSERT + "(1)"]


def test_a_definer_the_follower_refuses_names_the_option():

    denied = pymysql.err.OperationalError(1227, "Access denied; you need (at least one of) the SUPER, SET USER "
                                                "privilege(s) for this operation")
    f = FakeFollower(fail={"TRIGGER t_bi": denied})
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(guard_triggers=True))
    with pytest.raises(DataError) as e:
        r.apply(0, ddl(0, "0-1-1", TRIGGER))
    assert str(e.value) == (
        "offset 0 (transaction 0-1-1) DDL failed on the follower: Access denied; you need (at least one of) the "
        "SUPER, SET USER privilege(s) for this operation (MySQL error 1227); nothing of the transaction was applied; "
        "fix: its DEFINER=`root`@`localhost` names another account, which needs SET USER (or SUPER) on the follower: "
        "set [replay] definer = \"consumer\" to create it with the consumer's user as definer, or GRANT SET USER ON "
        "*.* TO the consumer's user; then restart the consumer")


def test_a_trigger_refused_for_lack_of_super_names_log_bin_trust_function_creators():

    need_super = pymysql.err.OperationalError(1419, "You do not have the SUPER privilege and binary logging is "
                                                    "enabled (you *might* want to use the less safe "
                                                    "log_bin_trust_function_creators variable)")
    f = FakeFollower(fail={"FUNCTION": need_super})
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(definer="consumer"))
    with pytest.raises(DataError, match=r"\(MySQL error 1419\); nothing of the transaction was applied; fix: the "
                                        r"follower has binary logging on and its user lacks SUPER: SET GLOBAL "
                                        r"log_bin_trust_function_creators = ON on the follower"):
        r.apply(0, ddl(0, "0-1-1", "CREATE DEFINER=`root`@`localhost` FUNCTION f() RETURNS INT RETURN 1"))


def test_a_versioned_tables_update_and_its_history_row_become_one_update_at_the_leaders_time():
    def ts(seconds: int) -> dict:
        return {"Timestamp": {"unix_time": seconds, "subsecond": 0}}

    end = {"Timestamp": {"unix_time": 2147483647, "subsecond": 999999}}
    cols = ["id", "v", "row_start", "row_end"]
    f = FakeFollower(tables={("shop", "ver"): TableInfo(versioned=True, columns=frozenset({"id", "v"}))})
    r = replayer(f)
    def ver(offset: int, op: str, rows: list, txn: str, index: int, last: bool) -> ChangeEvent:
        return ChangeEvent(uri="flv://src/shop/ver", schema="shop", table="ver", sequence=offset, operation=op,  # type: ignore[arg-type]
                           rows=rows, columns=cols, pk=["id"], gtid=txn, gtid_set=txn, txn=Txn(txn, index, last))

    r.apply(0, ver(0, "Update", [([i(1), i(1), ts(10), end], [i(1), i(2), ts(20), end])], "0-1-1", 0, False))
    r.apply(1, ver(1, "Add", [[i(1), i(1), ts(10), ts(20)]], "0-1-1", 1, True))  # its history row
    # The next transaction inserts the same history row itself (system_versioning_insert_history): kept.
    r.apply(2, ver(2, "Add", [[i(1), i(1), ts(10), ts(20)]], "0-1-2", 0, True))
    r.finish()
    assert f.session[-1] == "SET STATEMENT system_versioning_insert_history=1, timestamp=1000000000.000001 FOR SELECT 1"
    assert f.rows() == [
        "/*M! SET STATEMENT timestamp=20.000000 FOR */ UPDATE `shop`.`ver` SET `id`=1, `v`=2 WHERE `id` <=> 1",
        "/*M! SET STATEMENT system_versioning_insert_history=1 FOR */ INSERT INTO `shop`.`ver` (`id`, `v`, "
        "`row_start`, `row_end`) VALUES (1,1,'1970-01-01 00:00:10.000000','1970-01-01 00:00:20.000000')"]


def test_a_table_is_described_again_only_after_ddl_that_may_change_it():
    # MariaDB's ctype_collate_context: CREATE/DROP DATABASE between rows of a MyISAM table in another database.
    f = FakeFollower(tables={("shop", "t"): TableInfo(engine="MyISAM", transactional=False)})
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, ddl(1, "0-1-2", "CREATE DATABASE db1 CHARACTER SET latin1"))
    r.apply(2, add(2, "0-1-3", 0, True, 2))
    r.apply(3, ddl(3, "0-1-4", "DROP DATABASE IF EXISTS db1"))
    r.apply(4, add(4, "0-1-5", 0, True, 3))
    assert f.described == [("shop", "t")]
    r.apply(5, ddl(5, "0-1-6", "ALTER TABLE other ENGINE=InnoDB"))  # another table of the same database
    r.apply(6, add(6, "0-1-7", 0, True, 4))
    r.apply(7, ddl(7, "0-1-8", "GRANT SELECT ON *.* TO u"))  # no object it writes: every description goes
    r.apply(8, add(8, "0-1-9", 0, True, 5))
    r.apply(9, ddl(9, "0-1-10", "CREATE DATABASE SHOP2"))
    r.apply(10, add(10, "0-1-11", 0, True, 6))
    r.idle()
    assert f.described == [("shop", "t")] * 3
    assert [s for s in f.rows() if s.startswith("INSERT")] == [
        f"INSERT INTO `shop`.`t` (`id`) VALUES ({i})" for i in range(1, 7)]


class DurabilityLog(FakeFollower):
    """A FakeFollower that notes, in `log`, what reaches it: ("sent", the highest offset a statement that may
    last came from: one without Origin.overlap), ("rows", the same for the open transaction's rows) or ("run",
    a statement run at once); tests note ("durable", end) when the Replayer makes records durable.
    `submit_group` makes it a parallel follower (its tail runs at once: one worker)."""

    def __init__(self, log: list[tuple[str, object]]):
        super().__init__()
        self.log = log

    def sending(self, origin: Origin) -> None:
        self.log.append(("rows" if origin.overlap else "sent", origin.last_offset or origin.offset))

    def execute(self, sql: str | bytes) -> None:
        self.log.append(("run", sql.decode("latin1") if isinstance(sql, bytes) else sql))
        super().execute(sql)

    def submit_group(self, statements, origins, tail, tail_origins, keys) -> None:
        self.submit(statements + tail, origins + tail_origins)


def durable_before_sent(log: list[tuple[str, object]]) -> list[str]:
    """What reached the follower before the records it came from were durable (`run`: before any
    durable() of a record past the last one read)."""
    early, end = [], 0
    for kind, what in log:
        if kind == "durable":
            end = max(end, int(what))  # type: ignore[call-overload]
        elif kind == "sent" and int(what) >= end:  # type: ignore[call-overload]
            early.append(f"offset {what} sent with records durable below {end}")
        elif kind == "run" and end == 0:
            early.append(f"{what!r} run before any record was durable")
    return early


@pytest.mark.parametrize("parallel", [False, True], ids=["one session", "workers"])
def test_nothing_reaches_the_follower_before_the_records_read_are_durable(parallel):
    log: list[tuple[str, object]] = []
    f = DurabilityLog(log)
    conflicts = KeyCollector(lambda schema, table: TableKeys(unique=(("id",),))) if parallel else None
    r = Replayer(f, "cdc", "stream-1", TableFilter(), None, options(), conflicts=conflicts)

    def read(end: int) -> None:  # as run._follow after each read
        r.durable = lambda: log.append(("durable", end))

    read(2)
    r.apply(0, add(0, "0-1-1", 0, True, 1))
    r.apply(1, add(1, "0-1-2", 0, True, 2))
    r.idle(wait=False)
    read(4)
    r.apply(2, add(2, "0-1-3", 0, True, 3))
    r.apply(3, ddl(3, "0-1-4", "ALTER TABLE t ADD c INT"))  # commits the group, then runs
    r.idle()
    assert durable_before_sent(log) == []
    assert [kind for kind, _ in log].count("sent") >= 2 and ("run", "ALTER TABLE t ADD c INT") in log
    if not parallel:  # the rows of the open transaction went before the records were durable, the COMMIT after
        assert log[:4] == [("rows", 1), ("durable", 2), ("sent", 1), ("sent", 1)]  # (the checkpoint, COMMIT)
    assert r.saved.next_offset == 4 and f.rows() == [INSERT + "(1),(2)", INSERT + "(3)", "ALTER TABLE t ADD c INT"]
    # The check itself: without the Replayer's durable() calls, the same log is caught.
    assert durable_before_sent([entry for entry in log if entry[0] != "durable"]) != []


def test_the_consumer_loop_makes_each_read_durable_before_its_statements_go(monkeypatch):
    """run._follow, the real loop, over an in-memory topic read 2 records at a time: the records read are made
    durable (to the end of the last read) before anything of them that may last reaches the follower (here the
    checkpoint and COMMIT; the rows of the open transaction go before)."""
    from cdc_consumer import run
    from cdc_consumer.telemetry import ConsumerTelemetry
    from cdc_stream.events import encode_event
    from cdc_stream.layout import LogReader
    from cdc_stream.shutdown import Shutdown, StopSignal
    from cdc_stream.topics.memory import MemoryStream, MemoryTopic

    log: list[tuple[str, object]] = []
    stop = StopSignal()

    class Topic(MemoryTopic):
        def read(self, from_offset: int, wait: float = 0.0, max_records: int = 1000):
            records = super().read(from_offset, 0.0, max_records)
            stop.requested = stop.requested or not records  # all read: the loop ends
            return records

        def durable(self, end: int) -> None:
            log.append(("durable", end))

    stream = MemoryStream()
    stream.create("t")
    topic = Topic(stream, "t", stream.topic("t")._log)
    topic.append([(None, encode_event(add(i, f"0-1-{i}", 0, True, i))) for i in range(5)])
    monkeypatch.setattr(run, "FIRST_READ", 2)
    monkeypatch.setattr(run, "READ_BATCH", 2)
    f = DurabilityLog(log)
    r = replayer(f)
    with pytest.raises(Shutdown):  # (the stop came as it waited for more)
        run._follow(run._Topics(stream, LogReader(topic), None), r, 0, stop, ConsumerTelemetry())
    r.finish()
    # (the follower asks before the checkpoint: the records of every read before, here all five, one group)
    assert log == [("rows", 4), ("durable", 5), ("sent", 4), ("sent", 4)]
    assert r.saved.next_offset == 5 and f.rows() == [INSERT + "(0),(1),(2),(3),(4)"]
