"""Replaying change events on the follower: one source transaction at a time, checkpoint included.

The `Replayer` is the consumer's state machine. It turns events into SQL (apply.py), merges
them into few statements (batch.py), and commits after whole source transactions only, with
the checkpoint in the same follower transaction (checkpoint.py). It talks to the follower
through the small `Follower` interface (follower.py), so it is tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pymysql

from cdc_consumer import checkpoint
from cdc_consumer.apply import event_sql
from cdc_consumer.batch import Origin, SqlBatch, StatementFailed
from cdc_consumer.checkpoint import Checkpoint, already_applied
from cdc_consumer.follower import Follower
from cdc_consumer.writer import PACKET_TOO_LARGE
from cdc_stream.errors import DataError, LostConnection, is_retriable, mysql_code, mysql_message
from cdc_stream.events import ChangeEvent
from cdc_stream.filters import TableFilter, ddl_targets
from cdc_stream.mysql import quote_ident
from cdc_stream.positions import checkpoint_position
from cdc_stream.values import BadValue

# A group of source transactions is committed once it holds this many rows (or
# when the reader has nothing more at hand); SQL is sent once this much is queued.
GROUP_ROWS = 20_000
FLUSH_CHARS = 256 << 10
_SAVEPOINT = "cdc_txn"


@dataclass
class Replayer:
    """Applies events in order and commits, with the checkpoint, after whole source transactions.

    Several source transactions can share one follower commit (a *group*): the
    checkpoint written with it names the last of them, so a crash loses the whole
    group and replays it, never part of one. A group is committed when the reader
    has nothing more at hand, when it reaches GROUP_ROWS rows, and around DDL.
    Statements wait in `batch` until FLUSH_CHARS of SQL are pending or a commit.
    """

    follower: Follower
    topic: str
    stream_id: str
    filters: TableFilter
    saved: Checkpoint | None  # the last committed checkpoint
    applied_transactions: int = 0
    applied_rows: int = 0
    skipped_transactions: int = 0
    skipped_records: int = 0
    batch: SqlBatch = field(default_factory=SqlBatch)
    _done: Checkpoint | None = None  # after the group's last whole transaction, not yet committed
    _group_rows: int = 0
    _done_rows: int = 0  # the group's rows in whole transactions
    _open_txn: str | None = None
    _open_first: int = 0  # the offset of the open transaction's first event
    _skipping: bool = False

    @property
    def last(self) -> Checkpoint | None:
        """The checkpoint after the last whole transaction applied (committed or not)."""
        return self._done or self.saved

    def apply(self, offset: int, ev: ChangeEvent) -> None:
        """Apply one event; a transaction's last event completes it (the group commits later)."""
        txn_id = ev.txn.id if ev.txn else f"offset {offset}"
        origin = Origin(offset, txn_id, ev)
        position = self.last.position if self.last else None
        if ev.txn is None or ev.txn.index == 0:
            if self._open_txn is not None:
                # The previous transaction never got its last event (a producer crashed
                # mid-publish and republished it whole): drop its partial copy.
                self._discard_open_txn()
            self._open_txn, self._open_first = txn_id, offset
            self._skipping = already_applied(ev, position)
            if self._done is not None and not self._skipping:
                self.batch.statement(f"SAVEPOINT {_SAVEPOINT}", origin)  # to drop this one alone if partial
        elif self._open_txn != txn_id:
            if self._open_txn is None and already_applied(ev, position):
                # Fluvio's client retried a request whose answer was lost: the end of a
                # committed transaction came again. Skip it; the last event moves the checkpoint.
                self._open_txn, self._skipping = txn_id, True
                return self.apply(offset, ev)
            raise DataError(
                f"offset {offset} continues transaction {txn_id} whose start was not seen; "
                "the topic is out of order (was it written by cdc-producer?)"
            )
        if self._skipping:  # a copy of a transaction applied before: only move the checkpoint past it
            if ev.txn is None or ev.txn.last:
                self._complete(offset, ev, txn_id, position=position)
                self.skipped_transactions += 1
            return
        try:
            if ev.operation == "Query":
                if self.filters.allows_query(ev.query or "", ev.database):
                    self._ddl(offset, ev)
            elif self.filters.allows_table(ev.schema, ev.table or ""):
                self.batch.add(event_sql(ev), origin)
                self._group_rows += len(ev.rows)
                if self.batch.size >= FLUSH_CHARS:
                    self._send()
        except BadValue as e:
            self.salvage(unsent_is_open_txn=False)
            raise DataError(
                f"offset {offset} (transaction {txn_id}) holds a bad value: {e}; nothing of the transaction was applied"
            ) from None
        except pymysql.err.MySQLError as e:
            self._abandon()
            raise _apply_error(e, origin) from None
        if ev.txn is None or ev.txn.last:
            self._complete(offset, ev, txn_id)
            if ev.operation == "Query":
                self.commit()  # keep the window in which a DDL may run twice to this one event

    def skip_record(self, offset: int) -> None:
        """Move past a record that is not a valid event (--skip-bad-records parked it elsewhere)."""
        self.skipped_records += 1
        if self._open_txn is None:  # outside a transaction: record the skip now
            self._done = self._checkpoint(offset + 1)
            self.commit()

    def _checkpoint(self, next_offset: int) -> Checkpoint:
        prev = self.last
        return Checkpoint(self.topic, self.stream_id, next_offset, prev.sequence if prev else None,
                          prev.txn_id if prev else None, prev.position if prev else None)

    @property
    def in_transaction(self) -> bool:
        """Whether a source transaction is open (stopping now would roll it back)."""
        return self._open_txn is not None

    @property
    def pending(self) -> bool:
        """Whether anything applied or queued is not committed yet."""
        return self._done is not None or bool(self.batch)

    def summary(self) -> str:
        """The closing status line."""
        return (
            f"stopped: applied {self.applied_transactions} transactions ({self.applied_rows} rows), "
            f"skipped {self.skipped_transactions} repeated; next offset {self.saved.next_offset if self.saved else 0}"
        )

    def idle(self) -> int | None:
        """Nothing more to read for now: commit the whole transactions, send the open one's SQL.

        If whole transactions wait behind an open one (its producer is slow, or died
        mid-publish), the open one is rolled back to let them commit, and the offset
        to read it again from is returned."""
        if self._open_txn is None:
            self.finish()
            return None
        if self._done is not None and not self._skipping:
            first = self._open_first
            self.salvage(unsent_is_open_txn=False)
            return first
        if self.batch:
            self._send()
        return None

    def commit(self) -> None:
        """Commit the group of whole transactions applied so far, with its checkpoint."""
        if self._done is None:
            return
        cp = self._done
        origin = Origin(cp.next_offset - 1, cp.txn_id or "", None)
        self.batch.statement(checkpoint.save_sql(cp), origin)
        self.batch.statement("COMMIT", origin)
        self._send()
        self.saved, self._done = cp, None
        self.applied_rows += self._group_rows
        self._group_rows = self._done_rows = 0

    def finish(self) -> None:
        """Commit the whole transactions and wait until the follower has them."""
        self.commit()
        self._settle()

    def close(self) -> None:
        """Roll back whatever is not committed and stop the follower's writer; never raises."""
        self._abandon()
        self.follower.close()

    def rollback(self) -> None:
        """Abandon everything not committed (its records will be read again on restart)."""
        self._forget()
        self._settle()
        self.follower.rollback()

    def _forget(self) -> None:
        self.batch.clear()
        self._open_txn, self._done = None, None
        self._group_rows = self._done_rows = 0

    def _abandon(self) -> None:
        """rollback() after a failure: the connection may be gone (then the server rolled back)."""
        self._forget()
        try:
            self.follower.wait()
        except Exception:  # the failure being handled, or one after it: the rollback covers both
            pass
        try:
            self.follower.rollback()
        except pymysql.err.MySQLError:
            pass

    def salvage(self, unsent_is_open_txn: bool) -> None:
        """After a failure inside the open transaction: drop it, commit the whole ones before it.

        `unsent_is_open_txn`: the SQL not sent yet belongs to the open transaction
        (a statement of it failed). Never raises: if the follower cannot take the
        commit, everything is rolled back and replayed on restart."""
        try:
            if self._open_txn is not None:
                if unsent_is_open_txn:
                    self.batch.clear()
                self._discard_open_txn()
            self.finish()
        except Exception:  # the follower is in no state to commit: keep nothing
            self._abandon()

    def _send(self) -> None:
        try:
            self.follower.submit(*self.batch.take())
        except StatementFailed as e:
            self._failed(e)

    def _settle(self) -> None:
        """Send what is queued and wait for the follower: afterwards its session is ours."""
        self._send()
        try:
            self.follower.wait()
        except StatementFailed as e:
            self._failed(e)

    def _failed(self, e: StatementFailed) -> None:
        if e.origin.event is not None and e.origin.txn_id == self._open_txn:
            self.salvage(unsent_is_open_txn=True)
        else:
            self._abandon()
        raise _apply_error(e.error, e.origin) from None

    def _discard_open_txn(self) -> None:
        if self._skipping:  # nothing of it was applied
            self._open_txn = None
            return
        if self._done is None:  # the partial transaction is all the follower transaction holds
            self.rollback()
            return
        # It started with SAVEPOINT (apply): keep the group's whole transactions.
        origin = Origin(self._open_first, self._open_txn or "", None)
        self.batch.statement(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}", origin)
        self._open_txn = None
        self._group_rows = self._done_rows

    def _complete(self, offset: int, ev: ChangeEvent, txn_id: str, position: str | None = None) -> None:
        self._done = Checkpoint(self.topic, self.stream_id, offset + 1, ev.sequence, txn_id,
                                position or checkpoint_position(ev.gtid_set, ev.bn_file)
                                or (self.last.position if self.last else None))
        self._open_txn, self._skipping = None, False
        self._done_rows = self._group_rows
        self.applied_transactions += 1
        if self._group_rows >= GROUP_ROWS:
            self.commit()

    def _ddl(self, offset: int, ev: ChangeEvent) -> None:
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
                if mysql_code(e) != 1049 or any(t is not None for _, t in ddl_targets(ev.query or "", ev.database)):
                    raise
                # CREATE DATABASE x logged with x as its default schema: run it elsewhere.
                self.follower.use(checkpoint.SCHEMA)
        try:
            self.follower.execute(ev.query or "")
        except pymysql.err.MySQLError as e:
            if not (maybe_ran and mysql_code(e) in checkpoint.ALREADY_APPLIED_DDL_ERRORS):
                raise


def _apply_error(e: pymysql.err.MySQLError, origin: Origin) -> Exception:
    """The one-line error of a statement the follower refused (or of the connection it lost)."""
    code = mysql_code(e)
    where, ev = origin.where(), origin.event
    if is_retriable(e):
        return LostConnection(f"lost the follower connection at {where}: {mysql_message(e)}")
    if ev is None:  # the checkpoint or COMMIT
        return DataError(f"commit failed at {where}: {mysql_message(e)} (MySQL error {code}); "
                         "nothing of it was applied")
    if code == 1146 and ev.operation != "Query":
        return DataError(
            f"table {quote_ident(ev.schema or '')}.{quote_ident(ev.table or '')} does not exist on the follower "
            f"({where}); create it there or exclude it with [filters]; nothing of the transaction was applied"
        )
    what = "DDL" if ev.operation == "Query" else f"{ev.operation} on {ev.schema}.{ev.table}"
    fix = ""
    if code == PACKET_TOO_LARGE:
        fix = "; raise max_allowed_packet on the follower (SET GLOBAL and its my.cnf) and restart"
    return DataError(f"{what} failed at {where}: {mysql_message(e)} (MySQL error {code}){fix}; "
                     "nothing of the transaction was applied")
