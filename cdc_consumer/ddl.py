"""Running a Query event on the follower: DDL and account statements, each alone, under the leader's session.

The Replayer's part for statements (`DdlExecution`, a base of `replayer.Replayer`; its state stays the
Replayer's): a statement the filters let through commits the group before it and records "DDL at offset
N may have run" in a commit of its own (a restart that finds that mark takes the errors of a statement
that already ran as success: `checkpoint.ALREADY_APPLIED_DDL_ERRORS`), then runs with the leader's exact
bytes between the SET statements of its session (session.py). The error the leader's statement ended
with (`error_code`) is expected, DROP TABLE is idempotent (MariaDB's sql_if_exists), CREATE/ALTER EVENT
is rewritten DISABLE ON SLAVE (statements.py), stored objects get the trigger guard and the consumer's
definer when asked (definitions.py), account statements follow `[replay] accounts`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import TYPE_CHECKING

import pymysql

from cdc_consumer import checkpoint, definitions, statements
from cdc_consumer.catalog import TableInfo
from cdc_consumer.checkpoint import Checkpoint
from cdc_consumer.failures import ACCESS_DENIED, NEED_SUPER, TABLE_ACCESS_DENIED, EventProblem, privilege_problem
from cdc_consumer.follower import SESSION_SQL, Follower
from cdc_consumer.session import Collation, ansi_quotes, client_charset, collation_ids, leader_session
from cdc_stream.classify import AccountStatement, statement_of
from cdc_stream.errors import CrossesFilters, DataError, mysql_code, mysql_message
from cdc_stream.events import REMOVED_PASSWORD, ChangeEvent
from cdc_stream.filters import TableFilter

if TYPE_CHECKING:
    from cdc_consumer.replayer import ReplayOptions

CANNOT_USER = 1396  # ER_CANNOT_USER: CREATE USER of an existing account, DROP USER of a missing one
# The follower user may not run an account statement: ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR (GRANT
# of privileges the grantor lacks, e.g. ALL ON *.*), ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR,
# ER_SPECIFIC_ACCESS_DENIED_ERROR. A native replica's applier runs it with every privilege.
ACCOUNT_REFUSED = (1044, 1045, TABLE_ACCESS_DENIED, 1143, ACCESS_DENIED)
UNKNOWN_TIME_ZONE = 1298  # ER_UNKNOWN_TIME_ZONE: a named zone without the server's time zone tables


class DdlExecution:
    """The Replayer's steps for a Query event (what they use of the Replayer is declared here)."""

    follower: Follower
    topic: str
    stream_id: str
    filters: TableFilter
    saved: Checkpoint | None
    options: ReplayOptions
    say: Callable[[str], None]
    skipped_accounts: int
    _tables: dict[tuple[str, str], TableInfo]
    _current: tuple[int, ChangeEvent] | None

    if TYPE_CHECKING:
        def commit(self) -> None: ...
        def _settle(self) -> None: ...
        @staticmethod
        def _txn_of(ev: ChangeEvent, offset: int) -> str: ...

    def _query(self, offset: int, ev: ChangeEvent) -> None:
        try:
            if not self.filters.allows_statement(statement_of(ev)):
                return
        except CrossesFilters as e:
            raise EventProblem(offset, ev, f"cannot be applied: {e.detail}", e.fix) from None
        self._forget_tables(ev)
        text = ev.query or ""
        account = statement_of(ev).account
        if account is not None and self.options.accounts == "skip":
            self.skipped_accounts += 1
            self.say(f"skipped account statement at offset {offset}: {account.describe()} "
                     '([replay] accounts = "skip")')
            return
        if account is not None and REMOVED_PASSWORD.decode("ascii") in text:
            raise EventProblem(
                offset, ev, f"cannot be applied: {account.describe()} had its password removed by cdc-producer (its "
                "authentication plugin stores what only the leader can compute from the clear text)",
                'create the account on the follower yourself, and restart with [replay] accounts = "skip" to move '
                "past the statement")
        self._ddl(offset, ev, account)

    def _forget_tables(self, ev: ChangeEvent) -> None:
        """Forget the follower tables' descriptions the DDL may change: those of every database it writes (a
        trigger lives in its table's database), or all when it names no object it writes (GRANT, SET, a head
        that cannot be read). Kept otherwise: a workload of CREATE/DROP DATABASE between rows of a MyISAM
        table (MariaDB's ctype_collate_context) read the table's description again after every DDL."""
        writes = statement_of(ev).writes
        if not writes or any(db is None for db, _ in writes):
            self._tables.clear()
            return
        databases = {db.lower() for db, _ in writes if db is not None}
        for key in [key for key in self._tables if key[0].lower() in databases]:
            del self._tables[key]

    def _ddl(self, offset: int, ev: ChangeEvent, account: AccountStatement | None) -> None:
        # DDL commits implicitly: commit the group first, then record "DDL at `offset`
        # may have run" in a commit of its own. A checkpoint already holding that mark
        # means we crashed around this DDL last time.
        self.commit()
        self._settle()
        maybe_ran = self.saved is not None and self.saved.ddl_offset == offset
        mark = Checkpoint(self.topic, self.stream_id, self.saved.next_offset if self.saved else 0,
                          ev.sequence, ev.txn.id if ev.txn else f"offset {offset}",
                          self.saved.position if self.saved else None, offset)
        self.follower.execute(checkpoint.save_sql(mark))
        self.follower.execute("COMMIT")
        self.saved = mark
        if ev.database:
            try:
                self.follower.use(ev.database)
            except pymysql.err.OperationalError as e:
                if mysql_code(e) != 1049 or not statement_of(ev).qualified_only:
                    raise
                # The default schema is not on the follower but the statement does not use it: CREATE DATABASE x
                # logged with x as its default, or `USE x; CREATE TABLE y.t ...` with x excluded. Run it elsewhere.
                self.follower.use(checkpoint.SCHEMA)
        collations = self._collations(offset, ev)
        raw = self._statement_bytes(ev, collations)
        text = raw.decode("latin1")  # one character per byte: what is rewritten keeps the other bytes
        expected = ev.error_code or 0
        event_ddl = statement_of(ev).event_definition  # CREATE/ALTER EVENT
        if event_ddl and (disabled := statements.disabled_on_slave(text, ansi_quotes(ev.session))) is not None:
            raw = disabled.encode("latin1")  # a native replica's copy of an event is SLAVESIDE_DISABLED
        raw = self._stored_object(raw, ansi_quotes(ev.session))
        mariadb = self.options.rows.follower.mariadb
        change = leader_session(ev.session, mariadb, statement_of(ev).drop_table and not expected, SESSION_SQL,
                                collations)
        try:
            for sql in change.enter:
                self._enter(offset, ev, sql)
            # Unmarked: a DML statement the leader logged as such (its rows are not in the binlog, e.g. on a
            # table versioned by transaction id) fires the follower's triggers, as on a native replica.
            self.follower.execute(definitions.SESSION_UNMARK)
            self._run_statement(offset, ev, raw, expected, maybe_ran, account)
        except BaseException:
            for sql in change.leave:  # best effort: the consumer stops, or reconnects with a fresh session
                try:
                    self.follower.execute(sql)
                except Exception:  # the connection is gone: nothing to restore
                    break
            raise
        for sql in change.leave:
            self.follower.execute(sql)

    def _collations(self, offset: int, ev: ChangeEvent) -> dict[int, Collation]:
        """The follower's collations of the ids the statement's session logged: one it lacks stops here."""
        found = {}
        for name, collation_id in collation_ids(ev.session).items():
            collation = self.follower.collation(collation_id)
            if collation is None:
                raise EventProblem(
                    offset, ev, f"cannot be applied: the follower knows no collation {collation_id} (the leader "
                    f"session's {name}; a native replica stops here too)",
                    "use a follower server that has that collation (MySQL 8's ids from 255 up, utf8mb4_0900_ai_ci "
                    "and the other _0900_ collations, are unknown to MariaDB), or send the statement with another")
            found[collation_id] = collation
        return found

    def _enter(self, offset: int, ev: ChangeEvent, sql: str) -> None:
        """Run a SET of the leader's session; a named time zone the follower lacks is a clear stop."""
        try:
            self.follower.execute(sql)
        except pymysql.err.MySQLError as e:
            zone = ev.session.time_zone if ev.session is not None else None
            if mysql_code(e) != UNKNOWN_TIME_ZONE or zone is None:
                raise
            raise EventProblem(
                offset, ev, f"cannot be applied: the follower has no time zone {zone!r}, which the leader's session "
                f"used ({mysql_message(e)}, MySQL error {UNKNOWN_TIME_ZONE}; a native replica stops here too)",
                "load the follower's time zone tables (mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb -u root "
                "mysql) and restart cdc-consumer") from None

    def _stored_object(self, raw: bytes, ansi: bool) -> bytes:
        """A trigger's guard and the consumer's definer ([replay] triggers, definer), when asked for."""
        if not self.options.guard_triggers and self.options.definer != "consumer":
            return raw
        text = raw.decode("latin1")
        if self.options.definer == "consumer":
            text = definitions.with_definer(text, ansi_quotes=ansi)
        if self.options.guard_triggers:
            text = definitions.guard_trigger(text, ansi) or text
        return text.encode("latin1")

    def _run_statement(self, offset: int, ev: ChangeEvent, raw: bytes, expected: int, maybe_ran: bool,
                       account: AccountStatement | None) -> None:
        """Run the leader's statement. An error the leader had too is success."""
        try:
            self.follower.execute(raw)
        except pymysql.err.MySQLError as e:
            code = mysql_code(e)
            if expected and code == expected:
                return  # it did what it did on the leader
            if maybe_ran and code in checkpoint.ALREADY_APPLIED_DDL_ERRORS:
                return
            if account is not None and code == CANNOT_USER:
                self.say(f"account statement at offset {offset}: {account.describe()} failed on the follower "
                         f"({mysql_message(e)}, MySQL error {code}): the follower already has, or lacks, the "
                         "account; going on")
                return
            if account is not None and code in ACCOUNT_REFUSED:
                raise EventProblem(
                    offset, ev, f"cannot be applied: {account.describe()} was refused to the follower user "
                    f"({statements.redact(mysql_message(e))}, MySQL error {code}): it may not grant or change what the "
                    "leader's statement does, which a native replica's applier may",
                    "run the statement on the follower as a user who may, then restart with [replay] accounts = "
                    '"skip" to move past it (or keep accounts = "skip" where the follower\'s accounts are managed '
                    "apart)") from None
            if account is not None:  # a server message may quote the statement: never its secrets
                raise type(e)(code, statements.redact(mysql_message(e))) from None
            if code in (ACCESS_DENIED, NEED_SUPER):
                problem = privilege_problem(raw.decode("latin1"), code, ansi_quotes(ev.session), self.options)
                if problem is not None:
                    raise EventProblem(offset, ev, f"DDL failed on the follower: {mysql_message(e)} (MySQL error "
                                       f"{code})", problem) from None
            raise
        if expected:
            raise DataError(
                f"DDL at offset {offset}, transaction {self._txn_of(ev, offset)} succeeded on the follower, but the "
                f"leader's ended with error {expected} (it executed in part there): the follower now differs from "
                "the leader (a native replica stops here too); compare the objects it names")

    def _statement_bytes(self, ev: ChangeEvent, collations: dict[int, Collation]) -> bytes:
        """The statement exactly as the leader received it: `query_b64`, or the text in its client charset
        (in utf8mb4 for a charset no server reads statements in: session.client_charset)."""
        offset = self._current[0] if self._current else 0
        client = ev.session.character_set_client if ev.session is not None else None
        collation = collations[client] if client is not None else None
        readable = collation is None or client_charset(collation) == collation.charset
        if ev.query_b64 is not None:
            if collation is not None and not readable:
                raise EventProblem(offset, ev, "cannot be applied: its exact bytes are in the leader's "
                                   f"character_set_client {collation.charset}, which no server reads statements in")
            try:
                return base64.b64decode(ev.query_b64, validate=True)
            except binascii.Error:
                raise EventProblem(offset, ev, "cannot be applied: its 'query_b64' field is not base64") from None
        text = ev.query or ""
        if text.isascii():
            return text.encode("ascii")
        if client is None or not readable:
            return text.encode("utf-8", "surrogateescape")  # the consumer's session is utf8mb4
        try:
            return self.follower.encode(text, client)
        except DataError as e:
            raise EventProblem(offset, ev, f"cannot be applied: {e}") from None
