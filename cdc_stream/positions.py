"""Source positions: the one owner of where the producer is in the leader's binlog.

A position is a MariaDB GTID state ("0-1-42,1-2-7": one GTID per domain), a MySQL GTID set
("uuid:1-42"), or a binlog file and offset when the leader logs no GTIDs. This module parses,
prints, merges and compares them, and holds the typed records that carry positions on the
topic: where a record came from (`BinlogFile`), the resume fields of a transaction's last
record (`TxnEnd`), a snapshot's progress marker and its windows. Nothing else parses GTID text.

Producer and consumer hold a `Position` from the binlog (or the topic) to where it is written
(the topic's `gtid_set`/`bn_file` fields, the state file, the checkpoint row): its GTID text is
parsed at most once (and never after a merge, which keeps the parsed form), so following the
binlog never turns a position into text to parse it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from pymysqlreplication.gtid import Gtid, GtidSet


def _mysql_gtids() -> tuple[type[Gtid], type[GtidSet]]:
    """python-mysql-replication's MySQL GTID types, imported when a MySQL GTID is first met: importing the
    package costs a MariaDB consumer's start ~10-20 ms for nothing."""
    from pymysqlreplication.gtid import Gtid, GtidSet

    return Gtid, GtidSet


class BinlogFile(msgspec.Struct, frozen=True, gc=False, rename={"file_name": "fileName"}):
    """A place in the leader's binlog: a file and an offset in it (where an event ends, or where
    reading resumes). On the topic it is the `bn_file` field, {"fileName": ..., "offset": ...}."""

    file_name: str
    offset: int | None = None

    def text(self) -> str:
        """file:offset, as positions and the Spark source print it."""
        return f"{self.file_name}:{self.offset}"

    def key(self) -> tuple[str, int | str, int]:
        """What orders places: the file's stem, its number, the offset (an offset None counts as 0)."""
        stem, _, number = self.file_name.rpartition(".")
        return (stem, int(number) if number.isdigit() else number, self.offset or 0)


MariadbState = dict[int, tuple[int, int]]  # domain -> (server_id, seq_no)


@dataclass(frozen=True, slots=True)
class Position:
    """Where to resume reading: a GTID state/set (`gtid_set`) when GTIDs are on, else a binlog
    file and offset (`binlog`) of the server `server_uuid` (file:pos means something only there)."""

    gtid_set: str | None = None
    binlog: BinlogFile | None = None
    server_uuid: str | None = None
    # The parsed forms of gtid_set, made when first needed (or kept from a merge).
    _mariadb: MariadbState | None = field(default=None, compare=False, repr=False)
    _mysql: GtidSet | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        if self.gtid_set is not None:
            return f"gtid {self.gtid_set or '(empty: oldest binlog)'}"
        return self._file_pos()

    def _file_pos(self) -> str:
        return self.binlog.text() if self.binlog is not None else "None:None"

    def text(self) -> str:
        """The compact form stored on the topic and in the checkpoint: a GTID state/set, or
        file:pos[@server_uuid]."""
        if self.gtid_set is not None:
            return self.gtid_set
        return self._file_pos() + (f"@{self.server_uuid}" if self.server_uuid else "")

    @classmethod
    def parse(cls, text: str) -> Position:
        """The inverse of text()."""
        if not is_mysql_gtid(text):
            head, _, uuid = text.partition("@")
            file, sep, pos = head.rpartition(":")
            if sep and pos.isdigit():
                return cls(binlog=BinlogFile(file, int(pos)), server_uuid=uuid or None)
        return cls(gtid_set=text)

    @classmethod
    def after_record(cls, gtid_set: str | None, bn_file: BinlogFile | None, server_uuid: str | None = None
                     ) -> Position | None:
        """Where the binlog continues after a transaction whose last record carries these resume
        fields: its GTID state/set, else the file:pos of its commit (None: the record has neither)."""
        if gtid_set is not None:
            return cls(gtid_set=gtid_set)
        if bn_file is not None and bn_file.offset is not None:
            return cls(binlog=bn_file, server_uuid=server_uuid)
        return None

    # -- the parsed GTID state ---------------------------------------------------------------

    def mariadb_state(self) -> MariadbState:
        """domain -> (server_id, seq_no) of a MariaDB GTID state (parsed once; do not change it)."""
        state = self._mariadb
        if state is None:
            state = mariadb_state(self.gtid_set or "")
            object.__setattr__(self, "_mariadb", state)
        return state

    def mysql_set(self) -> GtidSet:
        """The MySQL GTID set (parsed once; do not change it). Raises ValueError when malformed."""
        gtids = self._mysql
        if gtids is None:
            gtids = _mysql_gtids()[1](self.gtid_set or None)
            object.__setattr__(self, "_mysql", gtids)
        return gtids

    def after(self, flavor: str, gtid: str) -> Position:
        """The GTID state (MariaDB) or set (MySQL) after `gtid` committed: what to resume from after it."""
        if flavor == "mariadb":
            state = dict(self.mariadb_state())
            state.update(mariadb_state(gtid))
            return Position(gtid_set=mariadb_text(state), _mariadb=state)
        merged = self.mysql_set() + _mysql_gtids()[0](gtid)  # a new set: this one's stays as it is
        return Position(gtid_set=str(merged), _mysql=merged)

    # -- comparing --------------------------------------------------------------------------

    def covers(self, gtid: str | None, binlog: BinlogFile | None = None) -> bool:
        """Whether the transaction with `gtid` (or, with GTIDs off, ending at `binlog`) lies at or
        before this position. The consumer uses it to drop a transaction republished after a
        producer crash; the producer to drop binlog changes a snapshot already holds."""
        if self.gtid_set == "":
            return False  # the empty state: before everything
        if gtid:
            if self.gtid_set is None:
                return False
            if not is_mysql_gtid(gtid):  # MariaDB: sequence numbers grow within a domain
                return _mariadb_covers(self.mariadb_state(), mariadb_state(gtid))
            try:
                return _mysql_gtids()[0](gtid) in self.mysql_set()
            except ValueError:
                return False
        if binlog is not None and self.binlog is not None:
            return binlog.key() <= self.binlog.key()
        return False

    def passed(self, until: Position) -> bool:
        """Whether this position is at or beyond `until` (every later transaction comes after `until`)."""
        if self.gtid_set == "":
            return False
        if until.gtid_set is not None and is_mysql_gtid(until.gtid_set):
            if self.gtid_set is None:
                return False
            try:
                mine, gtid_of = self.mysql_set(), _mysql_gtids()[0]
                return all(gtid_of(g) in mine for g in _last_of_each_interval(until.gtid_set))
            except ValueError:
                return False
        if until.binlog is not None:
            return self.covers(None, until.binlog)
        if self.gtid_set is None:
            return not until.mariadb_state()  # (every domain of an empty state is passed)
        state = self.mariadb_state()
        return all(_mariadb_covers(state, {d: sn}) for d, sn in until.mariadb_state().items())


def _mariadb_covers(state: MariadbState, mine: MariadbState) -> bool:
    return bool(mine) and all(d in state and n <= state[d][1] for d, (_, n) in mine.items())


def _is_server_uuid(text: str) -> bool:
    return len(text) == 36 and text.count("-") == 4


def is_mysql_gtid(text: str) -> bool:
    """Whether a GTID or GTID set is MySQL's (uuid:n) rather than MariaDB's (domain-server-seq)."""
    return ":" in text and _is_server_uuid(text.split(":", 1)[0].strip())


def mariadb_state(text: str) -> MariadbState:
    """domain -> (server_id, seq_no) of a MariaDB GTID state such as "0-1-42,1-2-7".

    A single GTID is a state of one domain. Entries that are not domain-server-seq are ignored."""
    state: MariadbState = {}
    for part in text.split(","):
        fields = part.strip().split("-")
        if len(fields) == 3 and all(f.isdigit() for f in fields):
            state[int(fields[0])] = (int(fields[1]), int(fields[2]))
    return state


def mariadb_text(state: MariadbState) -> str:
    """The GTID state text of `state`, domains in ascending order (how MariaDB prints it)."""
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(state.items()))


def merge_gtid(flavor: str, gtid_set: str, gtid: str) -> str:
    """The GTID state (MariaDB) or set (MySQL) text after `gtid` committed (Position.after on text)."""
    merged = Position(gtid_set=gtid_set).after(flavor, gtid).gtid_set
    assert merged is not None
    return merged


def _last_of_each_interval(gtid_set: str) -> list[str]:
    """The last GTID of every interval: enough to test containment of a whole set."""
    out = []
    for part in gtid_set.split(","):
        uuid, *intervals = part.strip().split(":")
        out += [f"{uuid}:{iv.split('-')[-1]}" for iv in intervals]
    return out


# -- snapshots: what a snapshot's records carry ------------------------------------------------


class SnapshotTag(msgspec.Struct, frozen=True):
    """On every record a snapshot wrote: the table it copies (Debezium's "read" events)."""

    table: str


class SnapshotProgress(msgspec.Struct, kw_only=True):
    """On a snapshot transaction's last record: how far the snapshot got, to resume it after a crash."""

    stream_from: str  # Position.text() where the binlog follows once the snapshot is complete
    read_at: str  # Position.text() the rows were read at
    tables: list[str] | msgspec.UnsetType = msgspec.UNSET  # the tables of `--snapshot db.t ...`
    table: str  # the table being copied, db.name
    last_key: list[Any] | None = None  # the last primary key copied (integer keys only)
    table_done: bool = False
    complete: bool = False  # the snapshot's last record


class SnapshotWindow(msgspec.Struct):
    """A table whose binlog changes up to `until` a resumed snapshot already holds
    (rows with a key above `key_after`, or every row when it is None)."""

    until: str
    key_after: list[Any] | None = None


Windows = dict[str, SnapshotWindow]  # "db.table" -> its window


class SnapshotChunk(msgspec.Struct, kw_only=True, omit_defaults=True):
    """On the rows of one chunk of a live (watermark) copy: the chunk replaces the table's rows whose
    primary key lies in (`after`, `upto`] (None: unbounded on that side) with the rows it carries.

    `copy` names the copy (one per table and request); `first` marks its first chunk, `done` its last
    (then `upto` is None). A table is being copied from a record with `first` up to one with `done`."""

    table: str
    copy: str
    after: list[Any] | None = None
    upto: list[Any] | None = None
    first: bool = False
    done: bool = False
    recopy: bool = False  # a copy of a live table (a signal or --snapshot while running), not an initial one
    append: bool = False  # more rows of a table read whole: added, nothing deleted (its first chunk cleared it)
    where: str | None = None  # a copy of the rows matching this leader SQL condition only (a signal's "where")


class CopyCursor(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A live copy in progress: its rows with a key up to `after` are on the topic (None: none yet).

    The producer drops the table's binlog changes to keys above `after` (the copy reads them later)
    until the copy is done; this rides on every transaction's last record (`copying`), so a restart
    continues the copy after `after`."""

    copy: str
    after: list[Any] | None = None
    recopy: bool = False
    where: str | None = None  # only rows matching this condition are copied; every change streams meanwhile


Copying = dict[str, CopyCursor]  # "db.table" -> its cursor


def copying_of(value: Any) -> Copying:
    """The typed `copying` field of a record (a JSON object); raises msgspec.ValidationError."""
    if isinstance(value, dict) and all(isinstance(c, CopyCursor) for c in value.values()):
        return value
    return msgspec.convert(value, Copying)


class PreparedXa(msgspec.Struct, frozen=True, omit_defaults=True):
    """An XA transaction the leader prepared (XA PREPARE) and has not committed or rolled back yet.

    The producer holds its events until its XA COMMIT (then they are published as that commit's
    transaction) or its XA ROLLBACK (then dropped). A transaction's last record lists the ones held
    after it (`xa_pending`), so a restarted producer reads each prepared group again from
    `resume_from` instead of losing it, and publishes nothing at or before the record's own position
    twice."""

    xid: str  # as the leader logs it: X'<gtrid hex>',X'<bqual hex>',<formatID>
    resume_from: str  # Position.text() just before the XA PREPARE group
    gtid: str | None = None  # the XA PREPARE group's GTID


XaPending = list[PreparedXa]  # oldest prepare first


def xa_pending_of(value: Any) -> XaPending:
    """The typed `xa_pending` field of a record (a JSON array); raises msgspec.ValidationError."""
    if isinstance(value, list) and all(isinstance(x, PreparedXa) for x in value):
        return value
    return msgspec.convert(value, XaPending)


def snapshot_marker(value: Any) -> SnapshotTag | SnapshotProgress | SnapshotChunk:
    """The typed `snapshot` field of a record (a JSON object); raises msgspec.ValidationError."""
    if isinstance(value, (SnapshotTag, SnapshotProgress, SnapshotChunk)):
        return value
    if isinstance(value, dict) and "copy" in value:
        return msgspec.convert(value, SnapshotChunk)
    if isinstance(value, dict) and "stream_from" in value:
        return msgspec.convert(value, SnapshotProgress)
    return msgspec.convert(value, SnapshotTag)


def windows_of(value: Any) -> Windows:
    """The typed `windows` field of a record (a JSON object); raises msgspec.ValidationError."""
    if isinstance(value, dict) and all(isinstance(w, SnapshotWindow) for w in value.values()):
        return value
    return msgspec.convert(value, Windows)


Marker = SnapshotTag | SnapshotProgress | SnapshotChunk


def typed_markers(snapshot: Any, windows: Any, xa_pending: Any, copying: Any
                  ) -> tuple[Marker | None, Windows | None, XaPending | None, Copying | None]:
    """The typed `snapshot`, `windows`, `xa_pending` and `copying` fields of a record (JSON values as
    decoded, or typed already; None where absent): what change events and transaction records both
    carry. Raises msgspec.ValidationError."""
    return (snapshot_marker(snapshot) if snapshot is not None else None,
            windows_of(windows) if windows is not None else None,
            xa_pending_of(xa_pending) if xa_pending is not None else None,
            copying_of(copying) if copying is not None else None)


@dataclass(frozen=True)
class TxnEnd:
    """The resume fields of a source transaction's last record (a change event or a transaction record)."""

    sequence: int  # of the transaction's last event
    txn_id: str
    gtid_set: str | None = None
    bn_file: BinlogFile | None = None
    server_uuid: str | None = None
    snapshot: Marker | None = None
    windows: Windows | None = None
    xa_pending: XaPending | None = None  # XA transactions prepared and held after this transaction
    copying: Copying | None = None  # live copies in progress after this transaction

    def position(self) -> Position | None:
        """Where the leader's binlog continues after this transaction (None: the record has no position)."""
        if isinstance(self.snapshot, SnapshotProgress):
            return Position.parse(self.snapshot.stream_from)
        return Position.after_record(self.gtid_set, self.bn_file, self.server_uuid)
