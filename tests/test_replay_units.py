"""Pure parts of the consumer's replay: statement kinds, the leader's session, BINLOG events, the row
path policy, follower table facts and per-statement modifiers (no server)."""

from __future__ import annotations

import base64
import threading
from typing import ClassVar

import pymysql
import pytest

from cdc_consumer import apply, statements
from cdc_consumer.batch import Origin, SqlBatch, StatementFailed
from cdc_consumer.binlog_replay import FollowerFacts, LeaderFormat, RowPolicy, split_format
from cdc_consumer.catalog import TableInfo, table_info
from cdc_consumer.session import ansi_quotes, leader_session
from cdc_stream.errors import DataError, SetupError
from cdc_stream.events import QuerySession, RowChecks, UserVar


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- statements


def test_replicated_events_are_created_and_altered_disable_on_slave():
    d = statements.disabled_on_slave
    assert d("CREATE DEFINER=`root`@`localhost` EVENT ticker ON SCHEDULE EVERY 1 SECOND STARTS '2020-01-01 00:00:00' "
             "DO INSERT INTO tick (src) VALUES ('event')") == (
        "CREATE DEFINER=`root`@`localhost` EVENT ticker ON SCHEDULE EVERY 1 SECOND STARTS '2020-01-01 00:00:00' "
        "DISABLE ON SLAVE DO INSERT INTO tick (src) VALUES ('event')")
    assert d("CREATE OR REPLACE DEFINER = 'a b'@'%' EVENT IF NOT EXISTS db.`e``x` ON SCHEDULE AT NOW() ON COMPLETION "
             "PRESERVE ENABLE COMMENT 'x DO y' DO SELECT 'ENABLE'") == (
        "CREATE OR REPLACE DEFINER = 'a b'@'%' EVENT IF NOT EXISTS db.`e``x` ON SCHEDULE AT NOW() ON COMPLETION "
        "PRESERVE DISABLE ON SLAVE COMMENT 'x DO y' DO SELECT 'ENABLE'")
    assert d("CREATE EVENT e ON SCHEDULE AT NOW() DISABLE DO SELECT 1") == (
        "CREATE EVENT e ON SCHEDULE AT NOW() DISABLE ON SLAVE DO SELECT 1")
    assert d('CREATE EVENT "q" ON SCHEDULE AT NOW() COMMENT "c" DO SELECT 1', True) == (
        'CREATE EVENT "q" ON SCHEDULE AT NOW() DISABLE ON SLAVE COMMENT "c" DO SELECT 1')
    assert d("ALTER EVENT e ENABLE") == "ALTER EVENT e DISABLE ON SLAVE"
    assert d("ALTER DEFINER=CURRENT_USER() EVENT e ON SCHEDULE EVERY 2 DAY DISABLE COMMENT 'c'") == (
        "ALTER DEFINER=CURRENT_USER() EVENT e ON SCHEDULE EVERY 2 DAY DISABLE ON SLAVE COMMENT 'c'")
    assert d("ALTER EVENT e1 RENAME TO e2") is None  # no status clause: the copy stays disabled
    # mysqldump's form: executable comments are code
    assert d("/*!50106 CREATE*/ /*!50117 DEFINER=`u`@`%`*/ /*!50106 EVENT IF NOT EXISTS `ev` ON SCHEDULE AT "
             "NOW() DO SELECT 1 */") == (
        "/*!50106 CREATE*/ /*!50117 DEFINER=`u`@`%`*/ /*!50106 EVENT IF NOT EXISTS `ev` ON SCHEDULE AT NOW() "
        "DISABLE ON SLAVE DO SELECT 1 */")
    for other in ("CREATE TABLE event (id INT)", "DROP EVENT e", "CREATE PROCEDURE p() SELECT 1"):
        assert d(other) is None


def test_secrets_are_redacted_from_messages():
    assert statements.redact("near 'IDENTIFIED BY PASSWORD '*14E65567' WITH' at line 1") == (
        "near 'IDENTIFIED BY PASSWORD '<redacted>' WITH' at line 1")
    assert statements.redact("IDENTIFIED VIA ed25519 USING PASSWORD('s3cr''et')") == (
        "IDENTIFIED VIA ed25519 USING PASSWORD('<redacted>')")
    assert statements.redact("IDENTIFIED BY 'pw'") == "IDENTIFIED BY '<redacted>'"


# -- the leader's session


def test_no_session_logged_means_only_autocommit():
    change = leader_session(None, True, False, ["SET NAMES utf8mb4"])
    assert change.enter == ["SET @@session.autocommit=1"]
    assert change.leave == ["SET NAMES utf8mb4", "SET @@session.autocommit=0"]


COMMON = ("@@session.lc_time_names=0, @@session.auto_increment_increment=1, @@session.auto_increment_offset=1, "
          "@@session.foreign_key_checks=1, @@session.unique_checks=1, @@session.sql_auto_is_null=0, "
          "@@session.explicit_defaults_for_timestamp=0")
# On a MariaDB follower the leader's check_constraint_checks is always set: the consumer's own session has it off.
CHECKS = "@@session.check_constraint_checks=1"
COMMON_BACK = ("SET @@session.lc_time_names=DEFAULT, @@session.auto_increment_increment=DEFAULT, "
               "@@session.auto_increment_offset=DEFAULT, @@session.foreign_key_checks=DEFAULT, "
               "@@session.unique_checks=DEFAULT, @@session.sql_auto_is_null=DEFAULT, "
               "@@session.explicit_defaults_for_timestamp=DEFAULT")


def test_mariadb_only_variables_are_set_only_when_away_from_their_default():
    s = QuerySession(sql_mode=0, check_constraint_checks=False, sql_if_exists=True,
                     system_versioning_insert_history=True)
    # (no time zone logged: the server's own)
    mariadb = leader_session(s, True, False, [])
    assert mariadb.enter == [
        f"SET @@session.autocommit=1, @@session.sql_mode=0, @@session.time_zone=@@global.time_zone, {COMMON}, "
        "@@session.check_constraint_checks=0, @@session.sql_if_exists=1, @@session.system_versioning_insert_history=1"]
    # (check_constraint_checks is set again by the consumer's session, `consumer_session`)
    assert mariadb.leave == [
        f"{COMMON_BACK}, @@session.sql_if_exists=DEFAULT, "
        "@@session.system_versioning_insert_history=DEFAULT", "SET @@session.autocommit=0"]
    mysql = leader_session(s, False, True, [])
    assert mysql.enter == [
        f"SET @@session.autocommit=1, @@session.sql_mode=0, @@session.time_zone=@@global.time_zone, {COMMON}"]
    assert mysql.leave == [COMMON_BACK, "SET @@session.autocommit=0"]
    drop = leader_session(QuerySession(sql_mode=0), True, True, [])
    assert drop.enter == [
        f"SET @@session.autocommit=1, @@session.sql_mode=0, @@session.time_zone=@@global.time_zone, {COMMON}, "
        f"{CHECKS}, @@session.sql_if_exists=1"]
    assert drop.leave == [f"{COMMON_BACK}, @@session.sql_if_exists=DEFAULT", "SET @@session.autocommit=0"]


def test_time_zone_names_are_quoted_and_ansi_quotes_is_read_from_sql_mode():
    s = QuerySession(sql_mode=4 | 1, time_zone="Europe/Paris'x")
    assert leader_session(s, True, False, []).enter == [
        f"SET @@session.autocommit=1, @@session.sql_mode=5, @@session.time_zone='Europe/Paris\\'x', {COMMON}, {CHECKS}"]
    assert ansi_quotes(s) and not ansi_quotes(QuerySession(sql_mode=2)) and not ansi_quotes(None)


def test_charsets_are_set_from_the_followers_collations_the_client_by_its_charsets_name():
    from cdc_consumer.session import Collation, collation_ids

    s = QuerySession(character_set_client=224, collation_connection=35, collation_server=8, collation_database=2503,
                     time_zone="Europe/Berlin")
    assert collation_ids(s) == {"character_set_client": 224, "collation_connection": 35, "collation_server": 8,
                                "collation_database": 2503}
    assert collation_ids(None) == {} and collation_ids(QuerySession(sql_mode=0)) == {}
    known = {224: Collation(224, "utf8mb4_unicode_ci", "utf8mb4"), 35: Collation(35, "ucs2_general_ci", "ucs2"),
             8: Collation(8, "latin1_swedish_ci", "latin1"), 2503: Collation(2503, "x", "utf8mb4")}
    change = leader_session(s, True, False, ["SET NAMES utf8mb4"], known)
    # The time zone literal is read in the consumer's session (the SET is parsed before it runs).
    assert change.enter == [
        "SET @@session.autocommit=1, @@session.time_zone='Europe/Berlin', @@session.character_set_client=utf8mb4, "
        f"@@session.collation_connection=35, @@session.collation_server=8, @@session.collation_database=2503, {COMMON}, "
        f"{CHECKS}"]
    assert change.leave == [
        f"SET @@session.collation_server=DEFAULT, @@session.collation_database=DEFAULT, {COMMON_BACK[4:]}",
        "SET NAMES utf8mb4", "SET @@session.autocommit=0"]
    # A charset no server reads statements in (ucs2 as character_set_client) is sent as utf8mb4.
    ucs2_client = leader_session(QuerySession(character_set_client=35), True, False, [], known)
    assert "@@session.character_set_client=utf8mb4," in ucs2_client.enter[0]
    latin1_client = leader_session(QuerySession(character_set_client=8), True, False, [], known)
    assert "@@session.character_set_client=latin1," in latin1_client.enter[0]
    with pytest.raises(KeyError):
        leader_session(QuerySession(character_set_client=255), True, False, [], known)


def test_a_statements_context_is_set_first_as_mariadb_binlog_prints_it():
    """INSERT_ID, LAST_INSERT_ID, RAND()'s seeds and user variables, in one SET parsed in the consumer's session,
    before the session's own (whose character_set_client may be latin1: a variable's name is utf8mb4 there)."""
    from cdc_consumer.follower import SESSION_SQL
    from cdc_consumer.session import Collation, collation_ids

    latin1, binary = Collation(8, "latin1_swedish_ci", "latin1"), Collation(63, "binary", "binary")
    s = QuerySession(sql_mode=0, character_set_client=8, insert_id=7, last_insert_id=0, rand_seed1=184293166,
                     rand_seed2=105433091, user_vars=(
                         UserVar("s", "string", b64(b"\xe9\xff\x00'"), 8), UserVar("b`é", "string", "", 63),
                         UserVar("n"), UserVar("i", "int", "-9223372036854775808"),
                         UserVar("u", "int", "18446744073709551615", unsigned=True),
                         UserVar("u7", "int", "7", unsigned=True), UserVar("r", "real", "0.1"),
                         UserVar("big", "real", "-1.5e+300"), UserVar("d", "decimal", "-12345678901.123456789012"),
                         UserVar("d0", "decimal", "5"), UserVar("cdc_consumer", "int", "0")))
    assert collation_ids(s) == {"character_set_client": 8, "user variable @`s`": 8, "user variable @`b``é`": 63}
    change = leader_session(s, True, False, SESSION_SQL, {8: latin1, 63: binary})
    assert change.enter == [
        "SET @@session.insert_id=7, @@session.last_insert_id=0, @@RAND_SEED1=184293166, @@RAND_SEED2=105433091, "
        "@`s`:=_latin1 X'e9ff0027' COLLATE `latin1_swedish_ci`, @`b``é`:=_binary X'' COLLATE `binary`, @`n`:=NULL, "
        "@`i`:=-9223372036854775808, @`u`:=CAST(18446744073709551615 AS UNSIGNED), @`u7`:=CAST(7 AS UNSIGNED), "
        "@`r`:=0.1e0, @`big`:=-1.5e+300, @`d`:=-12345678901.123456789012, @`d0`:=5., @`cdc_consumer`:=0",
        "SET @@session.autocommit=1, @@session.sql_mode=0, @@session.time_zone=@@global.time_zone, "
        f"@@session.character_set_client=latin1, {COMMON}, {CHECKS}"]
    # Nothing undoes it (as on a native replica); leaving sets the consumer's guard variable again.
    assert change.leave == [COMMON_BACK, *SESSION_SQL, "SET @@session.autocommit=0"]
    assert "SET @cdc_consumer = 1" in SESSION_SQL
    assert leader_session(QuerySession(insert_id=1), True, False, []).enter[0] == "SET @@session.insert_id=1"
    assert len(leader_session(QuerySession(sql_mode=0), True, False, []).enter) == 1


@pytest.mark.parametrize("var", [UserVar("x", "int", "1; DROP TABLE t"), UserVar("x", "decimal", "1e5"),
                                 UserVar("x", "real", "inf"), UserVar("x", "string", "not base64!", 8),
                                 UserVar("x", "string", "", None), UserVar("x", "decimal", "1.5)")])
def test_a_user_variable_value_cdc_producer_never_writes_stops_the_statement(var):
    from cdc_consumer.session import Collation, user_var_literal

    with pytest.raises(DataError, match=r"^the leader's user variable @`x` cannot be set: its "):
        user_var_literal(var, {8: Collation(8, "latin1_swedish_ci", "latin1")})


def test_collations_come_from_collations_where_the_server_lists_no_ids_with_their_charsets():
    """MySQL (and MariaDB before 10.10) have no ID in COLLATION_CHARACTER_SET_APPLICABILITY (error 1054)."""
    import pymysql

    from cdc_consumer.follower import MySqlFollower
    from cdc_consumer.session import Collation

    class Cursor:
        def __init__(self) -> None:
            self.sql: list[str] = []

        def __enter__(self) -> Cursor:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def execute(self, sql: str) -> None:
            self.sql.append(sql)
            if "APPLICABILITY" in sql:
                raise pymysql.err.OperationalError(1054, "Unknown column 'ID' in 'field list'")

        def fetchall(self) -> list[tuple]:
            return [(8, "latin1_swedish_ci", "latin1"), (255, "utf8mb4_0900_ai_ci", "utf8mb4"), (7, "a b", "x")]

    class Stub:
        conn = type("Conn", (), {"cursor": lambda self: cursor})()

    cursor = Cursor()
    found = MySqlFollower._read_collations(Stub())  # type: ignore[arg-type]
    assert found == {8: Collation(8, "latin1_swedish_ci", "latin1"), 255: Collation(255, "utf8mb4_0900_ai_ci", "utf8mb4")}
    assert cursor.sql[1] == ("SELECT ID, COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                             "WHERE ID IS NOT NULL")


def test_the_consumers_session_sets_names_before_any_string_literal():
    from cdc_consumer.follower import SESSION_SQL

    # A DDL's collation_connection (ucs2, utf32) is still in force until SET NAMES: a literal read in it
    # makes SET time_zone = '+00:00' fail.
    assert SESSION_SQL[0] == "SET NAMES utf8mb4"


# -- BINLOG events and the row path


def fde(version: bytes, size: int) -> bytes:
    """A FORMAT_DESCRIPTION event of `size` bytes for a server `version` (what split_format reads)."""
    header = bytes(4) + bytes([15]) + bytes(4) + size.to_bytes(4, "little") + bytes(6)
    body = (4).to_bytes(2, "little") + version.ljust(50, b"\0")
    return (header + body).ljust(size, b"\x01")


def test_split_format_on_and_off_base64_boundaries():
    rest = b"\x07" * 40
    for size in (252, 253, 254):  # the rest starts on, or off, a 3-byte boundary
        event = fde(b"8.0.36", size)
        leader, events = split_format(base64.b64encode(event + rest).decode())
        assert leader is not None and leader.event == event
        assert base64.b64decode(events) == rest
        assert leader.server_version == "8.0.36" and not leader.mariadb
    assert LeaderFormat(fde(b"10.11.19-MariaDB-log", 252)).mariadb
    plain = base64.b64encode(b"\x00" * 4 + b"\x13" + b"\x00" * 30).decode()
    assert split_format(plain) == (None, plain)
    for bad in ("abc", "ab'c", "YWJj\n"):
        with pytest.raises(DataError, match="its 'binlog' field is not base64"):
            split_format(bad)


MARIADB = FollowerFacts("10.11.19-MariaDB-log", "'cdc'@'%'", True)
LEADER = LeaderFormat(fde(b"10.11.19-MariaDB-log", 252))


def test_the_row_path_and_why():
    auto = RowPolicy.of("auto", MARIADB)
    assert auto.path(True, LEADER) == ("binlog", "")
    assert auto.path(False, LEADER, snapshot=True) == ("sql", "the event carries no binlog events (snapshot rows)")
    assert auto.path(False, LEADER) == ("sql", "the event carries no binlog events (a producer with [events] "
                                               "binlog = false, or rows a resumed snapshot trimmed)")
    assert RowPolicy.of("sql", MARIADB).path(True, LEADER) == ("sql", '[replay] rows = "sql"')
    weak = FollowerFacts("10.11.19-MariaDB-log", "'cdc'@'%'", False)
    assert RowPolicy.of("auto", weak).path(True, LEADER) == ("sql", "the follower user 'cdc'@'%' may not run BINLOG")
    with pytest.raises(SetupError, match=r'\[replay\] rows = "binlog", but the follower user \'cdc\'@\'%\' may not '
                                         r"run BINLOG statements: GRANT BINLOG REPLAY ON \*\.\* TO 'cdc'@'%' on the "
                                         r"follower"):
        RowPolicy.of("binlog", weak)
    assert auto.describe() == ("rows by BINLOG replay of a MariaDB leader's events ([replay] rows = \"auto\", "
                               "follower MariaDB 10.11.19, 'cdc'@'%' may run BINLOG); as SQL where an event has none")
    assert RowPolicy.of("auto", weak).describe() == (
        "rows as SQL (the follower user 'cdc'@'%' may not run BINLOG; GRANT BINLOG REPLAY ON *.* TO 'cdc'@'%' for "
        "exact replay of tables with triggers or system versioning)")
    # the reader keeps rows JSON (lazy) only where some may take the BINLOG path
    assert [RowPolicy.of(m, f).binlog_possible for m, f in (("auto", MARIADB), ("binlog", MARIADB), ("sql", MARIADB),
                                                             ("auto", weak))] == [True, True, False, False]


# -- what the follower's schema says


def test_table_info_from_information_schema_rows():
    info = table_info(("g", "InnoDB", "BASE TABLE", "YES"),
                      [("g", "a", ""), ("g", "b", "VIRTUAL GENERATED"), ("g", "c", "STORED GENERATED"),
                       ("g", "d", "INVISIBLE"), ("g", "ts", "DEFAULT_GENERATED on update CURRENT_TIMESTAMP")],
                      (), "CREATE TABLE `g` (...)")
    assert info.transactional and not info.triggers and not info.versioned and not info.without_overlaps
    assert info.unwritten(["a", "B", "c", "d", "ts", "DB_ROW_HASH_1", "new_col"]) == [1, 2, 5]
    aria = table_info(("ar", "Aria", "BASE TABLE", "NO"), [], ("ar_bi",),
                      "CREATE TABLE `ap` (... UNIQUE KEY `id` (`id`,`p` WITHOUT OVERLAPS))")
    assert not aria.transactional and aria.triggers and aria.without_overlaps and aria.engine == "Aria"
    assert table_info(("v", "InnoDB", "SYSTEM VERSIONED", "YES"), [], (), "").versioned
    assert TableInfo().unwritten(["DB_ROW_HASH_1"]) == []  # nothing known: nothing left out


# -- statement modifiers and expectations


def test_modifiers_of_relaxed_mode_and_checks():
    assert apply.Modifiers.of(False, None) == apply.Modifiers()
    both = apply.Modifiers.of(True, RowChecks(unique=False))
    assert both.verb("DELETE") == (
        f"/*M! SET STATEMENT sql_mode='{apply.RELAXED_SQL_MODE}', unique_checks=0 FOR */ DELETE "
        f"/*+ SET_VAR(sql_mode='{apply.RELAXED_SQL_MODE}') SET_VAR(unique_checks=OFF) */ ")


def test_merged_statements_expect_the_rows_of_their_parts():
    b = SqlBatch()
    origin = Origin(0, "t0", None)
    b.add([apply.RowsSql(("d",), "DELETE IN (", ")", ["1", "2"], ["1", "2"], expect_each=1)], origin)
    b.add([apply.RowsSql(("d",), "DELETE IN (", ")", ["3"], ["3"], expect_each=1)], Origin(1, "t1", None))
    b.add([apply.RowsSql(("i",), "INSERT ", "", ["(1)"])], Origin(2, "t2", None))
    b.add([apply.Single("UPDATE x", 1, "7")], Origin(3, "t3", None))
    sqls, origins = b.take()
    assert sqls == ["DELETE IN (1,2,3)", "INSERT (1)", "UPDATE x"]
    assert [(o.expect, o.keys, o.where()) for o in origins] == [
        (3, ["1", "2", "3"], "offsets 0..1, transaction t0"), (None, None, "offset 2, transaction t2"),
        (1, ["7"], "offset 3, transaction t3")]


# -- the writer thread


class FakeExecution:
    """writer.Execution without a server: notes ("ahead" | "finish", statements, thread) in `log`; the batch
    ["hold"] waits for `release`, ["fails"] fails."""

    log: ClassVar[list[tuple[str, list[str], str]]] = []
    release: ClassVar[threading.Event] = threading.Event()

    def __init__(self, conn, statements, origins, max_packet, durable=None):
        self.statements, self.origins = statements, origins

    def send_ahead(self, budget: int) -> None:
        self.log.append(("ahead", self.statements, threading.current_thread().name))

    def finish(self) -> None:
        if self.statements == ["hold"]:
            self.release.wait(10)
        elif self.statements == ["fails"]:
            raise StatementFailed(pymysql.err.OperationalError(1032, "found 0 rows"), self.origins[0])
        self.log.append(("finish", self.statements, threading.current_thread().name))


@pytest.fixture
def fake_writer(monkeypatch):
    """A writer.Writer over FakeExecution (its log is `.log`)."""
    from cdc_consumer import writer as writer_module

    monkeypatch.setattr(FakeExecution, "log", [])
    monkeypatch.setattr(FakeExecution, "release", threading.Event())
    monkeypatch.setattr(writer_module, "Execution", FakeExecution)
    monkeypatch.setattr(writer_module, "max_allowed_packet", lambda conn: 1 << 24)
    w = writer_module.Writer(conn=None, depth=8)  # type: ignore[arg-type]
    yield w
    FakeExecution.release.set()
    w.close()


def test_after_a_failure_the_writer_runs_no_later_batch_and_every_call_raises_it(fake_writer):
    """writer.Writer: a failed batch stops it for good. In the consumer, the reader met the failure at a submit()
    while a batch it had queued earlier (the next transactions, their checkpoint and COMMIT) still waited; the
    failure was raised once and forgotten, so the rollback's wait() let that batch run and commit the failed
    transaction's earlier statements past the change that failed (seen once in CI: the SQL path's
    update_of_missing_row applied). Here: the failure is raised at wait(), then again at a later submit(), and the
    batches queued behind it and submitted after it never run."""
    w = fake_writer
    origin = Origin(0, "0-1-1", None)
    for batch in (["hold"], ["before"], ["fails"], ["queued behind", "COMMIT"]):
        w.submit(batch, [origin] * len(batch))
    FakeExecution.release.set()
    for _ in range(3):
        with pytest.raises(StatementFailed):
            w.wait()
    with pytest.raises(StatementFailed):
        w.submit(["after", "COMMIT"], [origin, origin])
    assert [statements for step, statements, _ in FakeExecution.log if step == "finish"] == [["hold"], ["before"]]


def test_an_idle_writer_has_the_caller_send_ahead_and_a_busy_one_sends_everything_itself(fake_writer):
    """Writer.submit: while the writer thread is idle, the caller sends the batch's first round trips itself
    (the thread wakes while the follower works); while it runs anything, the caller only queues (the connection
    is the thread's)."""
    w = fake_writer
    origin = Origin(0, "0-1-1", None)
    w.submit(["first"], [origin])
    w.wait()
    w.submit(["hold"], [origin])
    w.submit(["second"], [origin])
    FakeExecution.release.set()
    w.wait()
    me = threading.current_thread().name
    assert FakeExecution.log == [("ahead", ["first"], me), ("finish", ["first"], "follower-writer"),
                                 ("ahead", ["hold"], me), ("finish", ["hold"], "follower-writer"),
                                 ("finish", ["second"], "follower-writer")]
