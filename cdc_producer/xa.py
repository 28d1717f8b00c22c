"""XA transactions: what the leader logs of them, and the prepared groups the producer holds.

MariaDB logs `XA START .. XA END; XA PREPARE` as one event group (a GTID event with
FL_PREPARED_XA and the xid, the rows, `XA END`, an XA_PREPARE event) and its outcome later as a
group of its own (a GTID event with FL_COMPLETED_XA and the xid, then `XA COMMIT xid` or
`XA ROLLBACK xid`). MySQL logs the prepared group as `XA START xid`, rows, `XA END`, XA_PREPARE,
and the outcome as a Query `XA COMMIT xid` / `XA ROLLBACK xid` in its own GTID. Between the two,
other transactions commit. `XA COMMIT ... ONE PHASE` is an ordinary transaction (MySQL ends it with
an XA_PREPARE event marked one-phase).

The producer holds a prepared group's events (`PreparedGroups`) until its outcome: published
whole as the transaction of its XA COMMIT, or dropped at its XA ROLLBACK. The leader logs the XA
COMMIT before its engines commit (MariaDB's ha_commit_or_rollback_by_xid completes the binlog first;
in the preparing session, as any commit: binlog, then the engines), so the rows become visible to
other sessions' reads only after the XA COMMIT's place in the binlog: for a live copy (chunks.py)
they are changes made there, not at the XA PREPARE. The statements are read by cdc_stream.classify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cdc_stream.events import ChangeEvent
from cdc_stream.positions import Position, PreparedXa

_XID = re.compile(r"X'([0-9A-Fa-f]*)'\s*,\s*X'([0-9A-Fa-f]*)'\s*,\s*(\d+)")  # the logged form (classify.xid_text)


def readable(xid: str) -> str:
    """An xid for a message: its gtrid (and bqual) as text when printable, else as logged."""
    match = _XID.fullmatch(xid)
    if match is None:
        return xid
    try:
        gtrid, bqual = bytes.fromhex(match.group(1)).decode(), bytes.fromhex(match.group(2)).decode()
    except UnicodeDecodeError:
        return xid
    if not (gtrid + bqual).isprintable():
        return xid
    return f"'{gtrid}'" + (f",'{bqual}'" if bqual or match.group(3) != "1" else "") + \
        (f",{match.group(3)}" if match.group(3) != "1" else "")


@dataclass
class HeldGroup:
    """The events of one prepared XA transaction (rows as tagged values, `binlog` fields not set yet:
    the leader's binlog events of each are in `binlog`, the format description they follow in `format`)."""

    xid: str
    gtid: str | None
    resume_from: Position  # before its XA PREPARE group: where a restart reads it again
    events: list[ChangeEvent]
    binlog: list[bytes | None] = field(default_factory=list)  # per event: its table map + rows event, raw
    format: bytes | None = None


@dataclass
class PreparedGroups:
    """The XA transactions prepared and not completed yet, by xid, oldest prepare first."""

    _held: dict[str, HeldGroup] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, group: HeldGroup) -> None:
        """Keep a prepared group until its XA COMMIT or XA ROLLBACK (a second prepare of the same
        xid, read again after a restart, replaces the first)."""
        self._held.pop(group.xid, None)
        self._held[group.xid] = group

    def take(self, xid: str) -> HeldGroup | None:
        """The held group of `xid`, no longer held (None: its prepare was not read)."""
        return self._held.pop(xid, None)

    def pending(self) -> list[PreparedXa]:
        """What a transaction's last record carries (positions.PreparedXa), oldest prepare first."""
        return [PreparedXa(g.xid, g.resume_from.text(), g.gtid) for g in self._held.values()]

    def rows(self) -> int:
        """Rows held, for status lines."""
        return sum(len(e.rows) for g in self._held.values() for e in g.events)
