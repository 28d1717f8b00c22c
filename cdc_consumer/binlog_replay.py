"""BINLOG replay: the leader's own row events applied by the follower's row applier (pure).

A row event may carry `binlog`: base64 of the leader's TABLE_MAP and ROWS events for its batch, the
first such event of each source transaction preceded by the FORMAT_DESCRIPTION event (docs/events.md).
`BINLOG '<base64>'` runs them in the consumer's session, inside its transaction, exactly as a native
replica applies rows: the follower's triggers do not fire, generated columns, long-unique hashes and
system-versioning history are computed as the leader's were, the leader's foreign-key/unique/CHECK
flags are honoured, and a row that is missing stops with error 1032. A session needs a
FORMAT_DESCRIPTION before its first ROWS event (error 1609 otherwise); it keeps it until it ends.

Every BINLOG statement ends a statement (`ending_statement`). The leader cuts one statement's rows into
rows events of about 8 KiB (binlog_row_event_max_size) and marks only the last with STMT_END_F; a record
holds one of them. A BINLOG statement whose last rows event lacks the flag leaves the statement open on
the follower, and the next one then crashes MariaDB 10.11 (signal 11 in ha_write_row under
mysql_client_binlog_statement) when that statement began InnoDB's bulk insert into an empty table, which
the leader's unique_checks=0 and foreign_key_checks=0 switch on (every mariadb-dump/mysqldump file does
this): docs/compatibility.md. A statement's rows are then applied as consecutive statements of the same
transaction, each with the leader's flags: the same rows, the same checks, the same errors.

`RowPolicy` decides, per event, between that path and the SQL one (cdc_consumer/apply.py), from the
profile's `[replay] rows` and what the follower is and allows.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from cdc_stream.errors import DataError, SetupError

FORMAT_DESCRIPTION_EVENT = 15
_HEADER = 19  # timestamp 4, type 1, server_id 4, event_size 4, log_pos 4, flags 2
_VERSION_AT, _VERSION_LEN = _HEADER + 2, 50  # after the binlog version: the server version, NUL-padded
_SIZE_AT = 9  # the event size in the common header
_CHECKSUM_LEN = 4
_CRC32 = 1  # BINLOG_CHECKSUM_ALG_CRC32
# WRITE/UPDATE/DELETE_ROWS v1 (MariaDB) and v2 (MySQL), MySQL's PARTIAL_UPDATE_ROWS: after the header a
# 6-byte table id, then the 2-byte flags.
_ROWS_EVENTS = frozenset({23, 24, 25, 30, 31, 32, 39})
_FLAGS_AT = _HEADER + 6
STMT_END_F = 0x0001

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

    @property
    def checksum(self) -> bool:
        """Whether the leader's events end with a CRC32: the algorithm byte before the format
        description's own checksum field (which servers write whatever the algorithm)."""
        return len(self.event) > _VERSION_AT + _CHECKSUM_LEN and self.event[-_CHECKSUM_LEN - 1] == _CRC32

    def statement(self) -> str:
        """The BINLOG statement that gives a session this format description."""
        return "BINLOG '" + base64.b64encode(self.event).decode("ascii") + "'"


def split_format(binlog: str) -> tuple[LeaderFormat | None, str]:
    """(the FORMAT_DESCRIPTION event the field starts with, or None; base64 of the events after it).

    Raises DataError when the field is not base64 of binlog events (it goes into SQL text as it is)."""
    _check_base64(binlog)
    head = _bytes_at(binlog, 0, 13)  # up to the event size
    if len(head) < 13 or head[4] != FORMAT_DESCRIPTION_EVENT:
        return None, binlog
    size = int.from_bytes(head[9:13], "little")
    if size % 3 == 0:  # the next event starts on a base64 boundary: no need to re-encode the rest
        cut = size // 3 * 4
        return LeaderFormat(base64.b64decode(binlog[:cut])), binlog[cut:]
    raw = base64.b64decode(binlog)
    return LeaderFormat(raw[:size]), base64.b64encode(raw[size:]).decode("ascii")


def ending_statement(events: str, leader: LeaderFormat) -> str:
    """Base64 binlog events (checked by split_format) whose last rows event ends its statement:
    STMT_END_F set, its CRC32 updated when the leader writes one (see the module's docstring).

    Events whose last rows event has the flag come back as they are. Raises DataError when the
    events' sizes do not add up (the field is not what cdc-producer writes).

    Only the bytes it reads or changes are decoded: the events' headers, the flags, the checksum
    (decoding and encoding a whole record's events cost the consumer ~100 µs a record)."""
    total = _decoded_size(events)
    at, last = 0, None
    while at < total:
        if total - at < _HEADER:
            raise DataError("its 'binlog' field ends inside an event header")
        header = _bytes_at(events, at, _HEADER)
        size = int.from_bytes(header[_SIZE_AT:_SIZE_AT + 4], "little")
        if size < _HEADER or at + size > total:
            raise DataError(f"its 'binlog' field holds an event of {size} bytes where {total - at} are left")
        if header[4] in _ROWS_EVENTS:
            last = (at, size)
        at += size
    if last is None:
        return events
    start, size = last
    if size < _FLAGS_AT + 2:
        raise DataError(f"its 'binlog' field holds a rows event of {size} bytes, too short for its flags")
    flags = int.from_bytes(_bytes_at(events, start + _FLAGS_AT, 2), "little")
    if flags & STMT_END_F:
        return events
    events = _patched(events, start + _FLAGS_AT, (flags | STMT_END_F).to_bytes(2, "little"))
    if leader.checksum:
        end = start + size - _CHECKSUM_LEN
        crc = int.from_bytes(_bytes_at(events, end, _CHECKSUM_LEN), "little") ^ _one_bit_crc(end - start - _FLAGS_AT)
        events = _patched(events, end, crc.to_bytes(_CHECKSUM_LEN, "little"))
    return events


_ONES = 0xFFFFFFFF
_ZEROS = bytes(1 << 16)


@lru_cache(maxsize=256)  # rows events of a table often have one size: the leader cuts them at about 8 KiB
def _one_bit_crc(n: int) -> int:
    """What setting bit 0 of the byte `n` bytes before a message's end does to its CRC-32.

    CRC-32 is affine: crc(a ^ d) = crc(a) ^ lin(d) for messages of one length, lin being the CRC without
    its initial value and final inversion (zlib.crc32 started from all ones, inverted). The event with
    STMT_END_F set is the event XOR that bit, so its checksum follows from the leader's without reading the
    event. lin of a bit followed by zeros: the register after the bit, then the zeros."""
    after_bit = ~zlib.crc32(b"\x01", _ONES) & _ONES
    zeros = memoryview(_ZEROS)[:n - 1] if n - 1 <= len(_ZEROS) else bytes(n - 1)
    return ~zlib.crc32(zeros, ~after_bit & _ONES) & _ONES


_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _check_base64(text: str) -> None:
    """DataError unless `text` is padded base64: it goes into a BINLOG statement's quotes as it is."""
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        raise DataError("its 'binlog' field is not base64") from None
    body = data.rstrip(b"=")
    if len(data) % 4 or len(data) - len(body) > 2 or body.translate(None, _ALPHABET):
        raise DataError("its 'binlog' field is not base64")


def _decoded_size(text: str) -> int:
    """The bytes that checked base64 text holds."""
    return len(text) // 4 * 3 - (2 if text.endswith("==") else 1 if text.endswith("=") else 0)


def _bytes_at(text: str, at: int, n: int) -> bytes:
    """Bytes [at, at + n) of checked base64 text (fewer where it ends), decoding only the groups holding them."""
    first = at // 3
    chunk = binascii.a2b_base64(text[first * 4:(at + n + 2) // 3 * 4])
    return chunk[at - first * 3:at - first * 3 + n]


def _patched(text: str, at: int, new: bytes) -> str:
    """Checked base64 text with its bytes [at, at + len(new)) replaced, re-encoding only the groups holding them."""
    first, stop = at // 3 * 4, (at + len(new) + 2) // 3 * 4
    chunk = bytearray(binascii.a2b_base64(text[first:stop]))
    offset = at - first // 4 * 3
    chunk[offset:offset + len(new)] = new
    return text[:first] + binascii.b2a_base64(chunk, newline=False).decode("ascii") + text[stop:]


@dataclass(frozen=True, slots=True)
class BinlogRows:
    """One row event's binlog events (base64, checked by split_format, its statement ended): a `BINLOG`
    statement of its own, or a chunk of one that also holds the next events' (batch.SqlBatch: the server
    decodes each base64 chunk and applies its events in order, as mysqlbinlog's output)."""

    events: str

    @property
    def sql(self) -> str:
        """The statement holding these events alone."""
        return "BINLOG '" + self.events + "'"


def rows_statement(events: str) -> BinlogRows:
    """The BINLOG rows of base64 binlog events (checked by split_format)."""
    return BinlogRows(events)


@dataclass(frozen=True)
class FollowerFacts:
    """What the consumer learns about the follower at its start."""

    version: str  # SELECT VERSION()
    user: str  # CURRENT_USER(), as 'user'@'host'
    may_binlog: bool  # the user may run BINLOG (MariaDB: BINLOG REPLAY or SUPER)
    # MariaDB's slave_run_triggers_for_rbr is not NO: the follower's triggers fire for the rows of BINLOG
    # statements too, and may write tables a rollback does not undo (read at start)
    row_triggers: bool = False
    # The session runs MariaDB's bulk execution (COM_STMT_BULK_EXECUTE, announced at connect:
    # cdc_stream.mysql.BulkConnection): the SQL path sends inserted and upserted rows as parameters
    bulk: bool = False
    # The session logs an Annotate_rows event with a statement's text before its rows (follower.py's
    # QUIET_ANNOTATIONS_SQL could not turn that off): BINLOG statements then hold few events (batch.py)
    annotates: bool = False

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

    @property
    def binlog_possible(self) -> bool:
        """Whether any row event may take the BINLOG path (else every row is applied as SQL)."""
        return self.mode != "sql" and self.follower.may_binlog

    def describe(self) -> str:
        """For the start line: which path rows take, and why."""
        f = self.follower
        sql = "rows as SQL, inserts in bulk" if f.bulk else "rows as SQL"
        if self.mode == "sql":
            return f'{sql} ([replay] rows = "sql")'
        if not f.may_binlog:
            return (f"{sql} (the follower user {f.user} may not run BINLOG; {f.grant()} for exact replay "
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
