"""Parallel apply: the Follower of `[replay] workers` > 1, groups on several sessions, commits in order.

The Replayer hands over each group of whole source transactions at its commit (`submit_group`: its
statements, its checkpoint and COMMIT, its keys from schedule.KeyCollector). Worker threads, one
follower session each (the consumer's session setup, plus a short innodb_lock_wait_timeout), take the
groups in order when schedule.Scheduler says they conflict with no earlier group not yet committed, run
their statements, then wait for their turn: the checkpoint and COMMIT of group k are sent only once
group k-1 committed. So the follower's state is always a prefix of the leader's history, and the one
checkpoint row per topic is written by one group at a time (never a lock queue on it). A failure rolls
back every later group and stops the workers once the earlier ones committed; the checkpoint is then
the last in-order commit's.

What the Replayer does outside groups (DDL, table descriptions, a transaction too large to wait for)
runs on the first session after every group committed (`wait`): such work is a barrier. The keys of a
table are read on a session of its own (`lookup`), so a table seen for the first time stops nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from cdc_consumer import catalog
from cdc_consumer.batch import Origin, Statement, StatementFailed
from cdc_consumer.catalog import TableInfo
from cdc_consumer.follower import MySqlFollower
from cdc_consumer.schedule import LOCK_ERRORS, GroupKeys, Scheduled, Scheduler, TableKeys
from cdc_consumer.writer import execute, max_allowed_packet
from cdc_stream.errors import is_retriable, mysql_code, mysql_message

# Seconds a worker waits for a row lock before its group is rolled back and run again in order: the
# only locks worth waiting for long are other sessions'; a lock held by a later group waiting for its
# turn is never released (InnoDB cannot see that wait), so it must time out soon.
LOCK_WAIT_TIMEOUT = 2
WORKER_SQL = f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT}"
# Characters of a group's statements kept in memory before it runs: a larger group (a transaction
# too large to wait for) runs as a barrier on the first session, its statements sent as they come.
MAX_HELD = 16 << 20
# Groups queued or in flight per worker before submit_group blocks (the reader runs that far ahead).
AHEAD = 2


@dataclass
class _Group:
    statements: list[Statement]
    origins: list[Origin]
    tail: list[Statement]  # the checkpoint and COMMIT: sent at the group's turn
    tail_origins: list[Origin]


class ParallelFollower(MySqlFollower):
    """A Follower on several sessions (`conns[0]` also runs everything outside groups)."""

    def __init__(self, conns: list[pymysql.Connection], lookup: pymysql.Connection,
                 say: Callable[[str], None] = lambda line: None):
        self.say = say  # a status line when groups run again in order
        self.lookup = lookup  # reads the follower's catalog while the workers run (table_keys)
        self.conn = conns[0]
        self.conns = conns
        self._collations = None
        self.max_packet = max_allowed_packet(self.conn)
        for conn in conns:
            with conn.cursor() as cur:
                cur.execute(WORKER_SQL)
        # One lock; a worker waiting for a group, one waiting for its turn to commit, and the Replayer's thread
        # each wait on a condition of their own (fewer wake-ups than one condition for all).
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._turns = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._scheduler: Scheduler[_Group] = Scheduler()
        self._held: list[Statement] = []  # the open group's statements (not run yet)
        self._held_origins: list[Origin] = []
        self._held_size = 0
        self._direct = False  # the open group outgrew MAX_HELD: it runs on conns[0] as it comes
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, args=(conn,), name=f"follower-worker-{i}", daemon=True)
                         for i, conn in enumerate(conns)]
        for thread in self._threads:
            thread.start()

    @property
    def retries(self) -> int:
        """Groups rolled back to run again in order (a conflict their keys did not show)."""
        return self._scheduler.retries

    def describe(self, database: str, table: str) -> TableInfo:
        """catalog.describe, on the lookup session (the workers may be running)."""
        return catalog.describe(self.lookup, database, table)

    def table_keys(self, database: str, table: str) -> TableKeys:
        """catalog.table_keys, on the lookup session: a table seen for the first time makes nothing wait."""
        return catalog.table_keys(self.lookup, database, table)

    def submit(self, statements: list[Statement], origins: list[Origin],
               durable: Callable[[], None] | None = None) -> None:
        """Statements of the open group: held until the group is whole, or run at once on the first
        session (after every earlier group committed) once the group is too large to hold. `durable`
        is called at once (the group's commit waits for it anyway: Replayer._send_group)."""
        self._raise_failure()
        if durable is not None:
            durable()
        if self._direct:
            execute(self.conn, statements, origins, self.max_packet)
            return
        self._held += statements
        self._held_origins += origins
        self._held_size += sum(len(s) for s in statements)
        if self._held_size > MAX_HELD:
            self._go_direct()

    def execute(self, sql: str | bytes) -> None:
        """One statement on the first session (after wait()): statements held of the open group run
        there first, and the rest of the group follows them there (the statement may be DDL)."""
        self._go_direct()
        super().execute(sql)

    def use(self, database: str) -> None:
        """The first session's default schema (after wait()), once held statements ran there."""
        self._go_direct()
        super().use(database)

    def _go_direct(self) -> None:
        if self._held and not self._direct:
            self.wait()
            self._direct = True
            held, held_origins = self._take_held()
            execute(self.conn, held, held_origins, self.max_packet)

    def submit_group(self, statements: list[Statement], origins: list[Origin], tail: list[Statement],
                     tail_origins: list[Origin], keys: GroupKeys) -> None:
        """The open group is whole: `tail` (its checkpoint and COMMIT) runs once every earlier group committed."""
        self.submit(statements, origins)
        if self._direct:
            self._direct = False
            execute(self.conn, tail, tail_origins, self.max_packet)
            return
        held, held_origins = self._take_held()
        with self._lock:
            while (len(self._scheduler.groups) >= AHEAD * len(self.conns) and self._scheduler.failure is None):
                self._progress.wait()
            self._raise_failure_locked()
            self._scheduler.add(keys, _Group(held, held_origins, tail, tail_origins))
            self._idle.notify()

    def wait(self) -> None:
        """Block until every group committed; raises the failure that stopped them."""
        with self._lock:
            while not self._scheduler.settled:
                self._progress.wait()
            self._raise_failure_locked()

    def rollback(self) -> None:
        """Drop the open group and what was not committed (the workers are idle: wait() ran)."""
        self._take_held()
        self._direct = False
        with self._lock:
            while self._scheduler.in_flight:
                self._progress.wait()
            self._scheduler.clear()
        for conn in self.conns:
            conn.rollback()

    def close(self) -> None:
        """Stop the workers (what they hold uncommitted is rolled back) and close the extra sessions."""
        with self._lock:
            self._stopping = True
            self._changed()
        for thread in self._threads:
            thread.join()
        for conn in [*self.conns[1:], self.lookup]:
            try:
                conn.close()
            except Exception:  # already gone: nothing to release
                pass

    def _changed(self) -> None:
        """Groups committed, rolled back or failed, or the workers stop: everyone looks again (lock held)."""
        self._idle.notify_all()
        self._turns.notify_all()
        self._progress.notify_all()

    def _take_held(self) -> tuple[list[Statement], list[Origin]]:
        out = self._held, self._held_origins
        self._held, self._held_origins, self._held_size = [], [], 0
        return out

    def _raise_failure(self) -> None:
        with self._lock:
            self._raise_failure_locked()

    def _raise_failure_locked(self) -> None:
        """Raise a failure once the groups before it committed and those after it rolled back (lock held)."""
        if self._scheduler.failure is None:
            return
        while self._scheduler.in_flight:
            self._progress.wait()
        failure = self._scheduler.failure
        self._scheduler.clear()  # every group after it was rolled back: the restart reads them again
        raise failure.error

    def _work(self, conn: pymysql.Connection) -> None:
        """One worker: take a group that may start, run it, commit it at its turn."""
        while True:
            with self._lock:
                group = None
                while not self._stopping and (group := self._scheduler.next_ready()) is None:
                    self._idle.wait()
                if group is None:
                    return
                self._idle.notify()  # (the next group may start beside it)
            self._run(conn, group)

    def _run(self, conn: pymysql.Connection, group: Scheduled[_Group]) -> None:
        g = group.payload
        try:
            execute(conn, g.statements, g.origins, self.max_packet)
            with self._lock:
                while not self._scheduler.may_commit(group.seq) and not self._scheduler.abandoned(group.seq) \
                        and not self._stopping:
                    self._turns.wait()
                commit = self._scheduler.may_commit(group.seq) and not self._stopping
            if commit:
                execute(conn, g.tail, g.tail_origins, self.max_packet)
                with self._lock:
                    self._scheduler.committed(group.seq)
                    self._changed()
                return
            _rollback(conn)
            with self._lock:
                self._scheduler.rolled_back(group.seq)
                self._changed()
        except BaseException as e:  # handed to the Replayer's thread, which reports it
            _rollback(conn)
            error = e.error if isinstance(e, StatementFailed) else e
            code = error.args[0] if isinstance(error, pymysql.err.MySQLError) and error.args else 0
            with self._lock:
                retries = self._scheduler.retries
                self._scheduler.failed(group.seq, e, lock=code in LOCK_ERRORS,
                                       lost=is_retriable(error) or not isinstance(e, StatementFailed))
                again = self._scheduler.retries > retries
                self._changed()
            if again and isinstance(error, pymysql.err.MySQLError):
                self.say(_retry_line(g, error))


def _retry_line(g: _Group, error: pymysql.err.MySQLError) -> str:
    first = g.origins[0].offset if g.origins else g.tail_origins[0].offset
    why = (f"waited over {LOCK_WAIT_TIMEOUT}s for a row lock" if mysql_code(error) == 1205 else
           "met a deadlock" if mysql_code(error) == 1213 else "failed beside an earlier group not yet committed")
    return (f"the group of offsets {first}-{g.tail_origins[0].offset} {why} ({mysql_message(error)}, MariaDB error "
            f"{mysql_code(error)}): rolled back with the groups after it, which run again one at a time in order")


def _rollback(conn: pymysql.Connection) -> None:
    try:
        conn.rollback()
    except Exception:  # the connection is gone: the server rolled back
        pass


__all__ = ["LOCK_WAIT_TIMEOUT", "ParallelFollower"]
