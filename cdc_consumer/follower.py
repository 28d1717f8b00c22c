"""The follower server, as the Replayer sees it: a session that runs statements in order.

`Follower` is the small interface the Replayer (cdc_consumer/replayer.py) needs; `MySqlFollower`
implements it on a PyMySQL connection and a writer thread; tests implement it with a fake that
records what was committed. `connect_follower` opens the session every statement assumes.
"""

from __future__ import annotations

from typing import Protocol

import pymysql
from pymysql.constants import CLIENT

from cdc_consumer.batch import Origin
from cdc_consumer.writer import Writer
from cdc_stream.mysql import connect
from cdc_stream.profile import FollowerDatabase

# The follower session: values arrive in UTC and exactly as on the leader, whatever
# the follower's defaults; strict mode turns a mismatched schema into an error
# instead of silently truncated data; NO_AUTO_VALUE_ON_ZERO keeps an id of 0 as 0;
# ALLOW_INVALID_DATES accepts the dates a leader in that mode stored ('2021-02-30');
# the mode leaves out NO_ZERO_DATE/NO_ZERO_IN_DATE (zero dates replicate) and
# NO_BACKSLASH_ESCAPES/ANSI_QUOTES/PAD_CHAR_TO_FULL_LENGTH/EMPTY_STRING_IS_NULL,
# whatever the follower's global mode says (literals.py escapes with backslashes).
# apply.RELAXED_SQL_MODE is this mode without STRICT_ALL_TABLES.
SESSION_SQL = [
    "SET time_zone = '+00:00'",
    "SET NAMES utf8mb4",
    "SET sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES'",
]


class Follower(Protocol):
    """What the Replayer needs of the follower: one session, statements run in submission order."""

    def submit(self, statements: list[str], origins: list[Origin]) -> None:
        """Run statements after those submitted before (possibly later, in another thread); raises
        batch.StatementFailed for a statement of an earlier batch that failed."""

    def wait(self) -> None:
        """Block until every submitted statement ran; raises batch.StatementFailed."""

    def execute(self, sql: str) -> None:
        """Run one statement now (after wait()); raises PyMySQL's error."""

    def use(self, database: str) -> None:
        """Make `database` the session's default schema; raises PyMySQL's error."""

    def rollback(self) -> None:
        """Roll back the open transaction; raises PyMySQL's error when the connection is gone."""

    def close(self) -> None:
        """Stop running statements (the connection stays open)."""


def connect_follower(db: FollowerDatabase) -> pymysql.Connection:
    """A connection to the follower with the consumer's session settings.

    Many statements per round trip (cdc_consumer/writer.py); every value in them is an escaped literal."""
    conn = connect(db, "follower", autocommit=False, client_flag=CLIENT.MULTI_STATEMENTS)
    with conn.cursor() as cur:
        for sql in SESSION_SQL:
            cur.execute(sql)
    return conn


class MySqlFollower:
    """A Follower on a PyMySQL connection: submitted batches run in a writer thread."""

    def __init__(self, conn: pymysql.Connection):
        self.conn = conn
        self._writer = Writer(conn)

    def submit(self, statements: list[str], origins: list[Origin]) -> None:
        self._writer.submit(statements, origins)

    def wait(self) -> None:
        self._writer.wait()

    def execute(self, sql: str) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql)

    def use(self, database: str) -> None:
        self.conn.select_db(database)

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self._writer.close()
