"""BINLOG replay: the leader's own row events applied by the follower's row applier (pure).

A row event may carry `binlog`: base64 of the leader's TABLE_MAP and ROWS events for its batch, the
first such event of each source transaction preceded by the FORMAT_DESCRIPTION event (docs/events.md).
`BINLOG '<base64>'` runs them in the consumer's session, inside its transaction, exactly as a native
replica applies rows: the follower's triggers do not fire, generated columns, long-unique hashes and
system-versioning history are computed as the leader's were, the leader's foreign-key/unique/CHECK
flags are honoured, and a row that is missing stops with error 1032. A session needs a
FORMAT_DESCRIPTION before its first ROWS event (error 1609 otherwise); it keeps it until it ends.

`RowPolicy` decides, per event, between that path and the SQL one (cdc_consumer/apply.py), from the
profile's `[replay] rows` and what the follower is and allows.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Literal

from cdc_stream.errors import DataError, SetupError

FORMAT_DESCRIPTION_EVENT = 15
_HEADER = 19  # timestamp 4, type 1, server_id 4, event_size 4, log_pos 4, flags 2
_VERSION_AT, _VERSION_LEN = _HEADER + 2, 50  # after the binlog version: the server version, NUL-padded
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")

RowsMode = Literal["auto", "binlog", "sql"]
Path = Literal["binlog", "sql"]


@dataclass(frozen=True)
class LeaderFormat:
    """A leader's FORMAT_DESCRIPTION event: what a session needs before BINLOG rows, and who wrote it."""

    event: bytes

    @property
    def server_version(self) -> str:
        """The leader's version string, e.g. '10.11.19-MariaDB-log'."""
        return self.event[_VERSION_AT:_VERSION_AT + _VERSION_LEN].split(b"\0", 1)[0].decode("ascii", "replace")

    @property
    def mariadb(self) -> bool:
        """Whether the leader is MariaDB (its version says so), else MySQL."""
        return "mariadb" in self.server_version.lower()

    def statement(self) -> str:
        """The BINLOG statement that gives a session this format description."""
        return "BINLOG '" + base64.b64encode(self.event).decode("ascii") + "'"


def split_format(binlog: str) -> tuple[LeaderFormat | None, str]:
    """(the FORMAT_DESCRIPTION event the field starts with, or None; base64 of the events after it).

    Raises DataError when the field is not base64 of binlog events (it goes into SQL text as it is)."""
    if not _BASE64.fullmatch(binlog) or len(binlog) % 4:
        raise DataError("its 'binlog' field is not base64")
    try:
        head = base64.b64decode(binlog[:24])  # 18 bytes: up to the event size
    except binascii.Error:
        raise DataError("its 'binlog' field is not base64") from None
    if len(head) < 13 or head[4] != FORMAT_DESCRIPTION_EVENT:
        return None, binlog
    size = int.from_bytes(head[9:13], "little")
    if size % 3 == 0:  # the next event starts on a base64 boundary: no need to re-encode the rest
        cut = size // 3 * 4
        return LeaderFormat(base64.b64decode(binlog[:cut])), binlog[cut:]
    raw = base64.b64decode(binlog)
    return LeaderFormat(raw[:size]), base64.b64encode(raw[size:]).decode("ascii")


def rows_statement(events: str) -> str:
    """`BINLOG '...'` for base64 binlog events (checked by split_format)."""
    return "BINLOG '" + events + "'"


@dataclass(frozen=True)
class FollowerFacts:
    """What the consumer learns about the follower at its start."""

    version: str  # SELECT VERSION()
    user: str  # CURRENT_USER(), as 'user'@'host'
    may_binlog: bool  # the user may run BINLOG (MariaDB: BINLOG REPLAY or SUPER)

    @property
    def mariadb(self) -> bool:
        """Whether the follower is MariaDB."""
        return "mariadb" in self.version.lower()

    @property
    def kind(self) -> str:
        return "MariaDB" if self.mariadb else "MySQL"

    def grant(self) -> str:
        """The statement giving the consumer's user what BINLOG replay needs."""
        privilege = "BINLOG REPLAY" if self.mariadb else "BINLOG_ADMIN"
        return f"GRANT {privilege} ON *.* TO {self.user}"


NO_BINLOG_EVENTS = "a producer with [events] binlog = false, or rows a resumed snapshot trimmed"


@dataclass(frozen=True)
class RowPolicy:
    """`[replay] rows` against the follower: which path each row event takes, and why."""

    mode: RowsMode
    follower: FollowerFacts

    @classmethod
    def of(cls, mode: RowsMode, follower: FollowerFacts) -> RowPolicy:
        """The policy; "binlog" without the privilege is a SetupError naming the GRANT."""
        if mode == "binlog" and not follower.may_binlog:
            raise SetupError(
                f'[replay] rows = "binlog", but the follower user {follower.user} may not run BINLOG statements: '
                f"{follower.grant()} on the follower (or set rows = \"auto\" to fall back to SQL)")
        return cls(mode, follower)

    def describe(self) -> str:
        """For the start line: which path rows take, and why."""
        f = self.follower
        if self.mode == "sql":
            return 'rows as SQL ([replay] rows = "sql")'
        if not f.may_binlog:
            return (f"rows as SQL (the follower user {f.user} may not run BINLOG; {f.grant()} for exact replay "
                    "of tables with triggers or system versioning)")
        return (f'rows by BINLOG replay of a {f.kind} leader\'s events ([replay] rows = "{self.mode}", follower '
                f"{f.kind} {f.version.split('-')[0]}, {f.user} may run BINLOG); as SQL where an event has none")

    def path(self, has_binlog: bool, leader: LeaderFormat | None, snapshot: bool = False) -> tuple[Path, str]:
        """(the path of a row event, why it is not BINLOG replay: '' when it is).

        `snapshot`: the event holds rows a snapshot read (they never carry binlog events); other events
        without them come from a producer with [events] binlog = false (or a snapshot window trimmed them).
        Raises DataError in "binlog" mode for an event of a leader of the other kind."""
        f = self.follower
        if not has_binlog:
            if snapshot:
                return "sql", "the event carries no binlog events (snapshot rows)"
            return "sql", f"the event carries no binlog events ({NO_BINLOG_EVENTS})"
        if self.mode == "sql":
            return "sql", '[replay] rows = "sql"'
        if not f.may_binlog:
            return "sql", f"the follower user {f.user} may not run BINLOG"
        if leader is None:
            raise DataError("it carries binlog events, but no format description event came before them in its "
                            "source transaction; was the topic written by cdc-producer?")
        if leader.mariadb != f.mariadb:
            why = f"the leader is {'MariaDB' if leader.mariadb else 'MySQL'} and the follower {f.kind}"
            if self.mode == "binlog":
                raise DataError(f'[replay] rows = "binlog", but {why}: BINLOG replay needs a follower of the '
                                'same kind; set rows = "auto" to apply such rows as SQL')
            return "sql", why
        return "binlog", ""

    def sql_fix(self, why: str) -> str:
        """How to get a refused SQL-path event applied by BINLOG replay instead."""
        f = self.follower
        if self.mode == "sql" and why.startswith("[replay]"):
            return 'set [replay] rows = "auto" (the event carries the leader\'s binlog events)'
        if NO_BINLOG_EVENTS in why:
            return ("if the producer's profile says [events] binlog = false, set it to true so that later row events "
                    "carry them; for this one, drop what the SQL path cannot reproduce on the follower")
        if not f.may_binlog and "BINLOG" in why:
            return f"{self.follower.grant()} on the follower and restart the consumer"
        return "no BINLOG replay is possible for it; drop what the SQL path cannot reproduce on the follower"
