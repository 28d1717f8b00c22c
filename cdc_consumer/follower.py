"""The follower server, as the Replayer sees it: a session that runs statements in order.

`Follower` is the small interface the Replayer (cdc_consumer/replayer.py) needs; `MySqlFollower`
implements it on a PyMySQL connection and a writer thread; tests implement it with a fake that
records what was committed. `connect_follower` opens the session every statement assumes, and
`probe` finds out what the follower is and whether its user may run BINLOG statements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pymysql
from pymysql.constants import CLIENT

from cdc_consumer import catalog
from cdc_consumer.batch import Origin, Statement
from cdc_consumer.binlog_replay import FollowerFacts
from cdc_consumer.catalog import TableInfo
from cdc_consumer.definitions import SESSION_MARK
from cdc_consumer.failures import ACCESS_DENIED, UNKNOWN_SYSTEM_VARIABLE
from cdc_consumer.session import Collation
from cdc_consumer.writer import Writer
from cdc_stream.errors import DataError, mysql_code
from cdc_stream.mysql import connect, one_row
from cdc_stream.profile import FollowerDatabase

# The follower session: values arrive in UTC and exactly as on the leader, whatever
# the follower's defaults; strict mode turns a mismatched schema into an error
# instead of silently truncated data; NO_AUTO_VALUE_ON_ZERO keeps an id of 0 as 0;
# ALLOW_INVALID_DATES accepts the dates a leader in that mode stored ('2021-02-30');
# the mode leaves out NO_ZERO_DATE/NO_ZERO_IN_DATE (zero dates replicate) and
# NO_BACKSLASH_ESCAPES/ANSI_QUOTES/PAD_CHAR_TO_FULL_LENGTH/EMPTY_STRING_IS_NULL,
# whatever the follower's global mode says (literals.py escapes with backslashes).
# apply.RELAXED_SQL_MODE is this mode without STRICT_ALL_TABLES. SET NAMES comes first: these
# statements also end a replayed DDL's session (session.py), whose collation_connection (ucs2,
# utf32...) would misread the string literals after it.
# check_constraint_checks=0 (MariaDB's; MySQL skips the /*M! */ comment): a native replica's row
# applier writes rows through the handler and never evaluates CHECK constraints (the leader did), so
# the SQL path's rows are not checked either: a CHECK whose evaluation warns (a string compared with a
# DECIMAL) would fail in this strict session. DDL runs with the leader's own value (session.py).
SESSION_SQL = [
    "SET NAMES utf8mb4",
    "SET time_zone = '+00:00'",
    "SET sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES'"
    "/*M! , check_constraint_checks = 0 */",
    SESSION_MARK,  # guarded triggers do nothing in the consumer's sessions (definitions.py)
]
# MariaDB writes an Annotate_rows event holding the statement's text before the rows a statement logs
# (binlog_annotate_row_events, ON by default). For a BINLOG statement that text is its base64, and a
# statement holding several rows events each ending its statement (binlog_replay.py) logs it once per
# event: 2.3x the rows' own bytes in the follower's binary log for one event per statement, and a cost
# that grows with the square of the statement's size for several (bench/README.md, issue 26, fifteenth
# part). A BINLOG statement cannot carry the leader's own Annotate_rows event (error 1730), so the
# consumer's sessions log none, where the user may say so (SUPER or BINLOG ADMIN); rows applied as SQL
# then log none either, as a native replica with replicate_annotate_row_events=OFF.
QUIET_ANNOTATIONS_SQL = "SET SESSION binlog_annotate_row_events = OFF"
UNKNOWN_COLUMN = 1054  # ER_BAD_FIELD_ERROR


class Follower(Protocol):
    """What the Replayer needs of the follower: one session, statements run in submission order."""

    def submit(self, statements: list[Statement], origins: list[Origin],
               durable: Callable[[], None] | None = None) -> None:
        """Run statements after those submitted before (possibly later, in another thread); raises
        batch.StatementFailed for a statement of an earlier batch that failed (or whose row count
        differs from its Origin's `expect`). `durable` (the topic's records the statements came from
        survive a crash once it returns; it may raise) is called before the first statement without
        Origin.overlap runs: writer.py."""

    def wait(self) -> None:
        """Block until every submitted statement ran; raises batch.StatementFailed."""

    def execute(self, sql: str | bytes) -> None:
        """Run one statement now (after wait()), bytes as they are; raises PyMySQL's error."""

    def use(self, database: str) -> None:
        """Make `database` the session's default schema; raises PyMySQL's error."""

    def describe(self, database: str, table: str) -> TableInfo:
        """What the follower's schema says about a table (after wait())."""

    def encode(self, text: str, collation_id: int) -> bytes:
        """`text` as bytes in the character set of collation `collation_id` (after wait());
        raises DataError when that charset cannot hold it exactly."""

    def collation(self, collation_id: int) -> Collation | None:
        """The follower's collation of that id (after wait()), None if it has none."""

    def rollback(self) -> None:
        """Roll back the open transaction; raises PyMySQL's error when the connection is gone."""

    def close(self) -> None:
        """Stop running statements (the connection stays open)."""


def connect_follower(db: FollowerDatabase) -> pymysql.Connection:
    """A connection to the follower with the consumer's session settings.

    Many statements per round trip (cdc_consumer/writer.py); every value in them is an escaped literal, or a
    parameter of MariaDB's bulk execution, which the connection announces when the server offers it.
    Row counts are matched rows (FOUND_ROWS), so an UPDATE that changes nothing still counts its row."""
    conn = connect(db, "follower", bulk=True, autocommit=False, client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.FOUND_ROWS)
    with conn.cursor() as cur:
        for sql in SESSION_SQL:
            cur.execute(sql)
        try:
            cur.execute(QUIET_ANNOTATIONS_SQL)
        except pymysql.err.MySQLError as e:  # a user without the privilege, or MySQL: the server's default stays
            if mysql_code(e) not in (ACCESS_DENIED, UNKNOWN_SYSTEM_VARIABLE):
                raise
    return conn


def probe(conn: pymysql.Connection, bulk: bool = True) -> FollowerFacts:
    """The follower's version, the consumer's account, whether it may run BINLOG statements, whether its
    triggers fire for their rows, and whether SQL-path rows may use bulk execution (the session announced
    it, and `bulk`: [replay] bulk).

    `annotates`: whether the session (connect_follower) logs each statement's text before its rows.
    `BINLOG ''` checks the privilege before anything else: refused with 1227 without it, else a
    harmless syntax error (nothing is run)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION(), CURRENT_USER()")
        version, user = one_row(cur)
        try:
            cur.execute("BINLOG ''")
            may_binlog = True
        except pymysql.err.MySQLError as e:
            may_binlog = mysql_code(e) != ACCESS_DENIED
        try:
            cur.execute("SELECT @@GLOBAL.slave_run_triggers_for_rbr, @@SESSION.binlog_annotate_row_events")
            triggers, annotations = one_row(cur)
            row_triggers = str(triggers).upper() != "NO"
            annotates = bool(int(annotations))
        except pymysql.err.MySQLError:  # MySQL: no such variables; its replicas never fire triggers for rows
            row_triggers = annotates = False
    conn.commit()
    name, _, host = str(user).rpartition("@")
    bulk = bulk and bool(getattr(conn, "bulk_operations", False))
    return FollowerFacts(str(version), f"'{name}'@'{host}'", may_binlog, row_triggers, bulk, annotates)


class MySqlFollower:
    """A Follower on a PyMySQL connection: submitted batches run in a writer thread."""

    def __init__(self, conn: pymysql.Connection):
        self.conn = conn
        self._writer = Writer(conn)
        self._collations: dict[int, Collation] | None = None  # read once, when first needed

    def submit(self, statements: list[Statement], origins: list[Origin],
               durable: Callable[[], None] | None = None) -> None:
        self._writer.submit(statements, origins, durable)

    def wait(self) -> None:
        self._writer.wait()

    def execute(self, sql: str | bytes) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql)  # type: ignore[arg-type]  # PyMySQL sends bytes unchanged

    def use(self, database: str) -> None:
        self.conn.select_db(database)

    def describe(self, database: str, table: str) -> TableInfo:
        return catalog.describe(self.conn, database, table)

    def encode(self, text: str, collation_id: int) -> bytes:
        collation = self.collation(collation_id)
        if collation is None:
            raise DataError(f"the follower knows no collation {collation_id} (the leader's character_set_client)")
        charset = collation.charset
        if charset in ("utf8mb4", "utf8mb3", "utf8"):
            return text.encode("utf-8", "surrogateescape")
        # The server's own conversion is the exact one; converting back must give the text again.
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT CAST(CONVERT(%s USING {charset}) AS BINARY), "
                        f"CONVERT(CONVERT(%s USING {charset}) USING utf8mb4) = %s COLLATE utf8mb4_bin",
                        (text, text, text))
            raw, exact = one_row(cur)
        if not exact:
            raise DataError(f"the statement's text has characters the leader's character set {charset} cannot hold")
        return bytes(raw)

    def collation(self, collation_id: int) -> Collation | None:
        if self._collations is None:
            self._collations = self._read_collations()
        return self._collations.get(collation_id)

    def _read_collations(self) -> dict[int, Collation]:
        # MariaDB 10.10+ lists its uca1400 collations (ids from 2048) with their full names and ids only
        # in COLLATION_CHARACTER_SET_APPLICABILITY (COLLATIONS has them without charset or id); older
        # servers and MySQL have neither column there (error 1054), but every id in COLLATIONS.
        with self.conn.cursor() as cur:
            try:
                cur.execute("SELECT ID, FULL_COLLATION_NAME, CHARACTER_SET_NAME "
                            "FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
            except pymysql.err.MySQLError as e:
                if mysql_code(e) != UNKNOWN_COLUMN:
                    raise
                cur.execute("SELECT ID, COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                            "WHERE ID IS NOT NULL")
            rows = cur.fetchall()
        found = {}
        for collation_id, name, charset in rows:
            # The names go into SQL unquoted: only plain identifiers (all the servers' are).
            if all(str(v).isidentifier() and str(v).isascii() for v in (name, charset)):
                found[int(collation_id)] = Collation(int(collation_id), str(name), str(charset))
        return found

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self._writer.close()
