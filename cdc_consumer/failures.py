"""Failure messages of the replay: a statement or event the follower cannot take -> the one error line
naming its cause and fix (a `DataError`, or `LostConnection` when the connection went).

`EventProblem` is the Replayer's control flow for an event that cannot be applied as it is (raised by
its steps, turned into the `DataError` by `Replayer._guarded`); `apply_error` words what the follower
refused; `privilege_problem`, `sql_refusal` and `refusal_fix` say why a stored object's DDL or a table's
rows cannot be applied, and how to get them applied.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pymysql

from cdc_consumer import definitions
from cdc_consumer.batch import Origin
from cdc_consumer.catalog import TableInfo
from cdc_consumer.literals import literal
from cdc_consumer.writer import MISSING_ROW, PACKET_TOO_LARGE
from cdc_stream.errors import DataError, LostConnection, is_retriable, mysql_code, mysql_message
from cdc_stream.events import ChangeEvent, MalformedEvent
from cdc_stream.mysql import quote_ident
from cdc_stream.values import BadValue

if TYPE_CHECKING:
    from cdc_consumer.replayer import ReplayOptions

# ER_SPECIFIC_ACCESS_DENIED_ERROR: a DEFINER naming another account without SET USER, BINLOG without BINLOG REPLAY
ACCESS_DENIED = 1227
UNKNOWN_SYSTEM_VARIABLE = 1193  # ER_UNKNOWN_SYSTEM_VARIABLE: a MariaDB variable asked of MySQL, or the reverse
NEED_SUPER = 1419  # ER_BINLOG_CREATE_ROUTINE_NEED_SUPER: a trigger or routine, binary log on, no SUPER
TABLE_ACCESS_DENIED = 1142  # ER_TABLEACCESS_DENIED_ERROR: "TRIGGER command denied" names a trigger's definer
NO_SUCH_DEFINER = 1449  # ER_NO_SUCH_USER: a trigger's definer that does not exist
# A bulk statement's prepare or execute refused: the server's prepared statements are all taken
# (ER_MAX_PREPARED_STMT_COUNT_REACHED, counted over every session), or bulk execution is not there (ER_UNSUPPORTED_PS)
BULK_REFUSED = (1461, 1295)
_SHOWN_KEYS = 5


class EventProblem(Exception):
    """An event that cannot be applied as it is (a bad value, a refusal): the Replayer's DataError says
    `offset N (transaction T) <detail>; <what was applied>[; fix: <fix>]`."""

    def __init__(self, offset: int, event: ChangeEvent, detail: str, fix: str = ""):
        super().__init__(detail)
        self.offset, self.event, self.detail, self.fix = offset, event, detail, fix


def privilege_problem(text: str, code: int, ansi: bool, options: ReplayOptions) -> str | None:
    """The fix for a stored object's DDL the follower user may not run (None: not such a statement)."""
    obj = definitions.stored_object(text, ansi)
    if obj is None:
        return None
    if code == NEED_SUPER:
        return ("the follower has binary logging on and its user lacks SUPER: SET GLOBAL "
                "log_bin_trust_function_creators = ON on the follower (and in its my.cnf or parameter group), then "
                "restart the consumer")
    if obj.definer is not None and options.definer == "leader":
        return (f"its {obj.definer_text(text)} names another account, which needs SET USER (or SUPER) on the "
                'follower: set [replay] definer = "consumer" to create it with the consumer\'s user as definer, or '
                "GRANT SET USER ON *.* TO the consumer's user; then restart the consumer")
    return None


def refusal_fix(table: TableInfo, binlog_fix: str) -> str:
    """How to get a refused SQL-path event applied: guard the triggers, or replay it by BINLOG."""
    if table.triggers:
        names = ", ".join(table.triggers)
        return f"{definitions.guard_fix(names)}; or {binlog_fix}"
    return binlog_fix


def sql_refusal(table: TableInfo) -> str:
    """Why rows of this follower table cannot be applied as SQL exactly ('' if they can)."""
    if table.triggers:
        return (f"has triggers ({', '.join(table.triggers)}) without cdc-consumer's guard, which SQL would fire "
                "again on replicated rows (the leader's row events already hold what its triggers did; a native "
                "replica does not fire them)")
    return ""


def _event_keys(ev: ChangeEvent) -> list[str]:
    """The keys of a row event's rows (before-images), as literals, for messages."""
    try:
        ev.load_rows()
    except MalformedEvent:
        return []
    columns, pk = ev.columns or [], ev.pk or []
    idx = [columns.index(k) for k in pk] if pk else list(range(len(columns)))
    out = []
    for row in ev.rows[:_SHOWN_KEYS + 1]:
        image = row[0] if ev.operation == "Update" else row
        try:
            lits = [literal(image[i]) for i in idx]
        except BadValue:
            continue
        text = lits[0] if len(lits) == 1 else "(" + ",".join(lits) + ")"
        out.append(text if len(text) <= 200 else text[:200] + "...")
    return out


def _missing_row(origin: Origin, tail: str) -> DataError:
    ev = origin.event
    assert ev is not None
    keys = origin.keys if origin.keys else _event_keys(ev)
    if len(keys) == 1:
        which = f"key {keys[0]}"
    else:
        shown = ", ".join(keys[:_SHOWN_KEYS]) + (", ..." if len(keys) > _SHOWN_KEYS else "")
        which = f"one of the keys {shown}"
    return DataError(
        f"{ev.operation} on {ev.schema}.{ev.table} at {origin.where()} found no row for {which} on the follower "
        f"as the leader had it: the follower has drifted from the leader (a native replica stops here too, "
        f"error 1032); {tail}")


def _merged_failure(origin: Origin, e: pymysql.err.MySQLError) -> Origin:
    """A BINLOG statement of several row events failed, and the server does not say at which event: the
    statement's range of offsets, and the events it can be (of the table its message names; for a
    missing row, the updates and deletes), their keys."""
    assert origin.events
    named = re.search(r"in '([^']*)'", mysql_message(e))
    events = [ev for ev in origin.events if named is None or ev.table == named.group(1)] or origin.events
    if mysql_code(e) == MISSING_ROW:
        events = [ev for ev in events if ev.operation in ("Update", "Delete")] or events
    keys = [key for ev in events for key in _event_keys(ev)]
    return Origin(origin.offset, origin.txn_id, events[0], origin.last_offset, keys=keys)


def _trigger_definer_refused(code: int, message: str) -> bool:
    """Whether a row statement failed on a trigger's definer (missing, or without TRIGGER on the table)."""
    return code == NO_SUCH_DEFINER or (code == TABLE_ACCESS_DENIED and message.startswith("TRIGGER command denied"))


def apply_error(e: pymysql.err.MySQLError, origin: Origin, tail: str = "nothing of the transaction was applied"
                 ) -> Exception:
    """The one-line error of a statement the follower refused (or of the connection it lost)."""
    code = mysql_code(e)
    if origin.events is not None and len(origin.events) > 1:
        origin = _merged_failure(origin, e)
    where, ev = origin.where(), origin.event
    if is_retriable(e):
        return LostConnection(f"lost the follower connection at {where}: {mysql_message(e)}")
    if ev is None:  # the checkpoint or COMMIT
        return DataError(f"commit failed at {where}: {mysql_message(e)} (MySQL error {code}); "
                         "nothing of it was applied")
    if code == 1146 and ev.operation != "Query":
        return DataError(
            f"table {quote_ident(ev.schema or '')}.{quote_ident(ev.table or '')} does not exist on the follower "
            f"({where}); create it there or exclude it with [filters]; {tail}"
        )
    if code == MISSING_ROW and ev.operation in ("Update", "Delete"):
        return _missing_row(origin, tail)
    what = "DDL" if ev.operation == "Query" else f"{ev.operation} on {ev.schema}.{ev.table}"
    fix = ""
    if ev.operation != "Query" and _trigger_definer_refused(code, mysql_message(e)):
        fix = ("; SQL fires the table's triggers, and the server checks each trigger's definer (that it exists and "
               "has TRIGGER on the table) before cdc-consumer's guard can skip the body, while a native replica's "
               "row applier fires none. The leader logs such a row when its own statement failed the same way after "
               "writing it to a non-transactional table (an AFTER trigger); fix: replay rows by BINLOG ([replay] "
               'rows = "auto", a follower user with BINLOG REPLAY), or give the definer what it lacks on the follower '
               "until the consumer has passed this transaction")
    if code == PACKET_TOO_LARGE:
        fix = "; raise max_allowed_packet on the follower (SET GLOBAL and its my.cnf) and restart"
    if code in BULK_REFUSED and ev.operation != "Query":
        fix = ("; the follower refused the prepared statement that carries these rows as parameters ([replay] bulk): "
               "raise max_prepared_stmt_count on the follower (SET GLOBAL and its my.cnf) if its sessions hold that "
               "many, or set [replay] bulk = false to send rows as SQL text; then restart the consumer")
    if ev.operation == "Query" and ev.error_code:
        fix += f"; the leader's statement ended with error {ev.error_code} (the errors differ)"
    return DataError(f"{what} failed at {where}: {mysql_message(e)} (MySQL error {code}){fix}; {tail}")

