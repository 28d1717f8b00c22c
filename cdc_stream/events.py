"""The event contract: one change event = one JSON line on the topic.

Compatible with the Fluvio MySQL CDC tutorial's records and extended with what
exactly-once replay needs (gtid, txn, pk). docs/events.md documents every field;
this module is the only place that builds or parses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote, unquote

import msgspec

from cdc_stream import typed_rows
from cdc_stream.errors import MalformedEvent
from cdc_stream.positions import (
    BinlogFile,
    Copying,
    Position,
    SnapshotChunk,
    SnapshotProgress,
    SnapshotTag,
    TxnEnd,
    Windows,
    XaPending,
    typed_markers,
)

if TYPE_CHECKING:
    from cdc_stream.classify import Statement

__all__ = [
    "OPERATIONS",
    "REMOVED_PASSWORD",
    "BinlogFile",
    "ChangeEvent",
    "MalformedEvent",
    "Operation",
    "Txn",
    "decode_event",
    "encode_event",
    "make_uri",
    "parse_uri",
]

Operation = Literal["Query", "Add", "Update", "Delete"]
OPERATIONS: tuple[Operation, ...] = ("Query", "Add", "Update", "Delete")
# Put by cdc-producer where an account statement's clear-text password was (one it cannot turn into
# the hash the follower would store): `PASSWORD(/* password removed by cdc-producer */)`.
REMOVED_PASSWORD = b"/* password removed by cdc-producer */"
T = TypeVar("T")
_URI_PREFIX = "flv://"


@dataclass(slots=True)
class Txn:
    """The event's place in its source transaction; the consumer commits on `last`."""

    id: str
    index: int
    last: bool


UserVarKind = Literal["string", "real", "int", "decimal"]


class UserVar(msgspec.Struct, omit_defaults=True, frozen=True):
    """A user variable the statement uses, as the leader logged it before the statement (a USER_VAR
    event: mariadb-binlog prints `SET @name:=...`).

    `kind` None is NULL. `value`: for a string, base64 of its bytes (in the charset of `collation`,
    an id as the server numbers it); for a real, the double as exact text (Python's repr); for an
    int and a decimal, the number as text (a decimal with its scale's digits). `unsigned`: an int
    the leader's variable held as BIGINT UNSIGNED."""

    name: str
    kind: UserVarKind | None = None
    value: str | None = None
    collation: int | None = None
    unsigned: bool = False


class QuerySession(msgspec.Struct, omit_defaults=True, frozen=True):
    """The leader session a statement ran in, as its Query event logged it: what a native replica
    sets before running the statement (mariadb-binlog prints the same as SET statements).

    Collations and charsets are numbered as the server numbers them (SET @@character_set_client=33
    works); booleans appear only when the leader's session had them off (or, for the last three,
    on), the rest only when logged. The last five are the statement's context, logged in events of
    their own before it when the statement was logged as a statement that needs them (INTVAR, RAND
    and USER_VAR events: statement-format DML, or DDL such as CREATE EVENT ... EVERY @s SECOND)."""

    sql_mode: int | None = None
    character_set_client: int | None = None  # a collation id, as MySQL logs it
    collation_connection: int | None = None
    collation_server: int | None = None
    collation_database: int | None = None
    time_zone: str | None = None
    lc_time_names: int | None = None
    auto_increment_increment: int | None = None
    auto_increment_offset: int | None = None
    foreign_key_checks: bool | None = None
    unique_checks: bool | None = None
    check_constraint_checks: bool | None = None
    sql_auto_is_null: bool | None = None
    sql_if_exists: bool | None = None
    explicit_defaults_for_timestamp: bool | None = None
    system_versioning_insert_history: bool | None = None
    timestamp_us: int | None = None  # the statement's NOW(), microseconds since the epoch
    insert_id: int | None = None  # the first auto-increment value it used (SET INSERT_ID)
    last_insert_id: int | None = None  # what LAST_INSERT_ID() returned in it (SET LAST_INSERT_ID)
    rand_seed1: int | None = None  # RAND()'s seeds (SET @@RAND_SEED1, @@RAND_SEED2)
    rand_seed2: int | None = None
    user_vars: tuple[UserVar, ...] = ()  # in the leader's order


class RowChecks(msgspec.Struct, omit_defaults=True, frozen=True):
    """Checks the leader's session had off when it wrote a row batch (only those that were off appear)."""

    foreign_keys: bool = True
    unique: bool = True
    check_constraints: bool = True


@dataclass(slots=True)
class ChangeEvent:
    """One DDL statement (`Query`) or one batch of row changes of one table.

    `uri` names the event's source, database and table on the topic (make_uri); `schema` and
    `table` are that database and table, parsed once when the event is decoded (or given with
    the uri when it is made), so readers never parse the uri."""

    uri: str
    sequence: int
    operation: Operation
    query: str | None = None  # Query: the statement
    database: str | None = None  # Query: the statement's default schema
    # Add/Delete: [[v, ...], ...]; Update: [([before...], [after...]), ...]
    rows: list[Any] = field(default_factory=list)
    columns: list[str] | None = None
    pk: list[str] | None = None
    bn_file: BinlogFile | None = None
    gtid: str | None = None
    ts: int | None = None
    txn: Txn | None = None
    gtid_set: str | None = None  # on a transaction's last event: resume after it from here
    server_uuid: str | None = None  # with GTIDs off: the server whose file:pos bn_file names
    snapshot: SnapshotTag | SnapshotProgress | SnapshotChunk | None = None  # rows read by a snapshot, its progress
    windows: Windows | None = None  # tables whose older binlog changes a snapshot already holds
    copying: Copying | None = None  # on a transaction's last event: live copies in progress
    xa_pending: XaPending | None = None  # on a transaction's last event: XA transactions prepared, held by the producer
    # `rows` holds each row's JSON object, not values (bytes): the producer's fast path; a consumer's
    # event with binlog events before load_rows() (decode_event(lazy_rows=True))
    rows_json: bool = False
    # `rows` holds each image's JSON array (msgspec.Raw), not values: the lake's read
    # (decode_event(raw_images=True)), which keeps an image as its JSON and never needs most values
    images_raw: bool = False
    # `rows` holds an insert's typed rows (cdc_stream.typed_rows), not lists of tagged values: the consumer's
    # SQL path sending them in bulk (decode_event(typed_inserts=N)) until load_rows()
    rows_typed: bool = False
    session: QuerySession | None = None  # Query: the leader session it ran in
    error_code: int | None = None  # Query: the error the leader's statement ended with (executed in part)
    query_b64: str | None = None  # Query: the statement's exact bytes, when `query` (text) is not exact
    checks: RowChecks | None = None  # rows: checks the leader's session had off
    binlog: str | None = None  # rows: base64 of the binlog events a follower of the same kind replays
    schema: str | None = None  # the database named in the uri
    table: str | None = None  # the table named in the uri (None for Query events)
    # Query: what the statement is (cdc_stream.classify), read once and carried in memory, never on the topic
    statement: Statement | None = field(default=None, compare=False, repr=False)

    def end_at(self, position: Position) -> None:
        """Stamp the resume fields of a transaction's last event: the binlog continues at `position`
        (its GTID state/set; with GTIDs off its file:pos, which becomes the event's `bn_file`)."""
        self.gtid_set = position.gtid_set
        if position.binlog is not None:
            self.bn_file, self.server_uuid = position.binlog, position.server_uuid

    def load_rows(self) -> None:
        """Decode and check rows that decode_event(lazy_rows=True) left as JSON, and give typed rows
        (decode_event(typed_inserts=N)) their tagged form; raises MalformedEvent."""
        if self.rows_json and self.columns is not None:
            self.rows, self.rows_json = _checked_rows(self.operation, _raw_rows(self.rows), len(self.columns)), False
        elif self.rows_typed:
            self.rows, self.rows_typed = typed_rows.tagged(self.rows), False

    def txn_end(self) -> TxnEnd:
        """The resume fields of this event, the last of its source transaction."""
        return TxnEnd(self.sequence, self.txn.id if self.txn else "", self.gtid_set, self.bn_file, self.server_uuid,
                      self.snapshot, self.windows, self.xa_pending, self.copying)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the contract, fields in the documented order."""
        d: dict[str, Any] = {"uri": self.uri, "sequence": self.sequence}
        if self.bn_file is not None:
            d["bn_file"] = self.bn_file  # {"fileName": ..., "offset": ...}
        if self.gtid is not None:
            d["gtid"] = self.gtid
        if self.gtid_set is not None:
            d["gtid_set"] = self.gtid_set
        if self.server_uuid is not None:
            d["server_uuid"] = self.server_uuid
        if self.ts is not None:
            d["ts"] = self.ts
        if self.txn is not None:
            d["txn"] = {"id": self.txn.id, "index": self.txn.index, "last": self.txn.last}
        if self.snapshot is not None:
            d["snapshot"] = self.snapshot
        if self.windows is not None:
            d["windows"] = self.windows
        if self.copying:
            d["copying"] = self.copying
        if self.xa_pending:
            d["xa_pending"] = self.xa_pending
        if self.operation == "Query":
            if self.database is not None:
                d["database"] = self.database
            if self.session is not None:
                d["session"] = self.session
            if self.error_code:
                d["error_code"] = self.error_code
            if self.query_b64 is not None:
                d["query_b64"] = self.query_b64
            d["operation"] = {"Query": self.query}
            return d
        d["columns"] = self.columns
        d["pk"] = self.pk or []
        rows: msgspec.Raw | list[dict[str, Any]]
        if self.rows_json:
            rows = msgspec.Raw(b"[" + b",".join(self.rows) + b"]")
        elif self.operation == "Update":
            rows = [{"before_cols": b, "after_cols": a} for b, a in self.rows]
        else:
            rows = [{"cols": r} for r in (typed_rows.tagged(self.rows) if self.rows_typed else self.rows)]
        if self.checks is not None:
            d["checks"] = self.checks
        d["operation"] = {self.operation: {"rows": rows}}
        if self.binlog is not None:
            d["binlog"] = self.binlog
        return d


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def encode_event(event: ChangeEvent) -> bytes:
    """One compact JSON line (no newline)."""
    return _encoder.encode(event.to_dict())


class _TxnRecord(msgspec.Struct):
    id: str
    index: int
    last: bool


class _RowRecord(msgspec.Struct):
    cols: list[Any] | None = None
    before_cols: list[Any] | None = None
    after_cols: list[Any] | None = None


class _RowsRecord(msgspec.Struct):
    rows: list[_RowRecord]


class _RawRowsRecord(msgspec.Struct):
    rows: list[msgspec.Raw]  # each row's JSON, checked only as JSON


class _TypedRowsRecord(msgspec.Struct):
    rows: list[Any]  # typed rows (cdc_stream.typed_rows), decoded with the record by _typed_insert


class _ArrayRowsRecord(msgspec.Struct):
    rows: msgspec.Raw  # the rows' JSON array, decoded as _array_rows chooses


class _ImagesRowRecord(msgspec.Struct):
    cols: msgspec.Raw = msgspec.Raw()  # (msgspec takes no Raw in a union: empty is missing)
    before_cols: msgspec.Raw = msgspec.Raw()
    after_cols: msgspec.Raw = msgspec.Raw()


class _ImagesRowsRecord(msgspec.Struct):
    rows: list[_ImagesRowRecord]


class _EventRecord(msgspec.Struct):
    """The contract's JSON object, as msgspec validates it in C (the consumer's fast path)."""

    uri: str
    sequence: int
    operation: dict[str, _RowsRecord | str]
    bn_file: BinlogFile | None = None
    gtid: Any = None
    gtid_set: Any = None
    server_uuid: Any = None
    ts: Any = None
    txn: _TxnRecord | None = None
    snapshot: Any = None
    windows: Any = None
    xa_pending: Any = None
    copying: Any = None
    database: Any = None
    columns: list[str] | None = None
    pk: list[str] | None = None
    session: QuerySession | None = None
    error_code: int | None = None
    query_b64: str | None = None
    checks: RowChecks | None = None
    binlog: str | None = None


class _LazyEventRecord(_EventRecord):
    """_EventRecord whose rows stay JSON until needed."""

    operation: dict[str, _RawRowsRecord | str]  # type: ignore[assignment]


class _ArrayEventRecord(_EventRecord):
    """_EventRecord whose rows stay one JSON array until _array_rows."""

    operation: dict[str, _ArrayRowsRecord | str]  # type: ignore[assignment]


class _ImagesEventRecord(_EventRecord):
    """_EventRecord whose rows' images stay JSON arrays."""

    operation: dict[str, _ImagesRowsRecord | str]  # type: ignore[assignment]


_typed_decoder = msgspec.json.Decoder(_EventRecord)
_lazy_decoder = msgspec.json.Decoder(_LazyEventRecord)
_images_decoder = msgspec.json.Decoder(_ImagesEventRecord)
_array_decoder = msgspec.json.Decoder(_ArrayEventRecord)
_rows_decoder = msgspec.json.Decoder(list[_RowRecord])


def decode_event(data: bytes | str, lazy_rows: bool = False, raw_images: bool = False,
                 typed_inserts: int = 0) -> ChangeEvent:
    """Parse and validate one record; raises MalformedEvent saying what is wrong.

    lazy_rows: the rows of an event that carries binlog events stay JSON (`rows_json`; their number
    is known) until `load_rows()`: a consumer replaying the binlog events never needs their values,
    and decoding them was most of the cost of reading such an event.
    raw_images: every row's images stay JSON arrays (`images_raw`; checked as JSON, their widths
    not): the lake's read, which stores an image as its JSON and reads only its key's values.
    typed_inserts: the rows of an Add event of at least this many rows (0: none) decode into typed rows where
    they fit (`rows_typed`, checked as the default decoding checks them; cdc_stream.typed_rows) until
    `load_rows()`: the consumer's SQL path sending them in bulk, which needs neither a dict per value nor
    each value's checks again (not with lazy_rows or raw_images, which keep their own form)."""
    if typed_inserts and not (lazy_rows or raw_images):
        ev = _typed_insert(data, typed_inserts)
        if ev is not None:
            return ev
    try:
        record = (_images_decoder if raw_images else _lazy_decoder if lazy_rows else _array_decoder if typed_inserts
                  else _typed_decoder).decode(data)
    except msgspec.DecodeError:
        return _decode_generic(data)  # it fails too, with the message a user can act on
    try:
        return _from_record(record, typed_inserts)
    except _RowsNotDecoded:  # (typed_inserts) as the default decoding's, whose rows would not have decoded
        return _decode_generic(data)


class _RowsNotDecoded(Exception):
    """typed_inserts: rows kept as JSON at first fail to decode as the default decoding types them."""


def _from_record(r: _EventRecord, typed_inserts: int = 0) -> ChangeEvent:
    if len(r.operation) != 1 or next(iter(r.operation)) not in OPERATIONS:
        raise MalformedEvent(f"operation must be one of {', '.join(OPERATIONS)}, got {list(r.operation)}")
    ((kind, body),) = r.operation.items()
    _, schema, table = _parsed_uri(r.uri)
    ev = ChangeEvent(uri=r.uri, sequence=r.sequence, operation=_operation(kind), bn_file=r.bn_file, gtid=r.gtid,
                     ts=r.ts, gtid_set=r.gtid_set, server_uuid=r.server_uuid, schema=schema, table=table)
    if r.snapshot is not None or r.windows is not None or r.xa_pending is not None or r.copying is not None:
        _snapshot_fields(ev, r.snapshot, r.windows, r.xa_pending, r.copying)
    if r.txn is not None:
        ev.txn = Txn(r.txn.id, r.txn.index, r.txn.last)
    if kind == "Query":
        if not isinstance(body, str):
            raise MalformedEvent("Query operation must hold the SQL text")
        ev.query, ev.database = body, r.database
        ev.session, ev.error_code, ev.query_b64 = r.session, r.error_code, r.query_b64
        return ev
    ev.checks, ev.binlog = r.checks, r.binlog
    if table is None:
        raise MalformedEvent(f"{kind} event needs a table in its uri, got {r.uri}")
    if r.columns is None:
        raise MalformedEvent("missing field 'columns'")
    if isinstance(body, str):
        raise MalformedEvent(f"{kind} operation must hold rows")
    ev.columns, ev.pk = r.columns, r.pk or []
    if isinstance(body, _ImagesRowsRecord):
        ev.rows, ev.images_raw = _images(ev.operation, body.rows), True
    elif isinstance(body, _RawRowsRecord):
        if r.binlog is None:  # the rows are what will be applied: decode them now
            ev.rows = _checked_rows(ev.operation, _raw_rows(body.rows), len(r.columns))
        else:
            ev.rows, ev.rows_json = list(body.rows), True
    elif isinstance(body, _TypedRowsRecord):
        ev.rows, ev.rows_typed = body.rows, True
    elif isinstance(body, _ArrayRowsRecord):
        ev.rows, ev.rows_typed = _array_rows(ev.operation, body.rows, r.uri, len(r.columns), typed_inserts)
    else:
        ev.rows = _checked_rows(ev.operation, body.rows, len(r.columns))
    if not set(ev.pk) <= set(ev.columns):
        raise MalformedEvent(f"pk {ev.pk} names columns not in {ev.columns}")
    return ev


def _typed_insert(data: bytes | str, typed_inserts: int) -> ChangeEvent | None:
    """decode_event(typed_inserts=N) of a record that is an Add event of N rows or more whose rows fit the types
    of the last large insert (typed_rows.current): its typed rows decoded with the record, in one pass; None
    for any other record (decoded then as _array_rows says)."""
    sig = typed_rows.current()
    if sig is None:
        return None
    decoder = _INSERT_DECODERS.get(sig)
    if decoder is None:
        rows = msgspec.defstruct("TypedRows", [("rows", list[typed_rows.row_type(sig)])])  # type: ignore[misc]
        add = msgspec.defstruct("AddOperation", [("Add", rows)], forbid_unknown_fields=True)
        record = msgspec.defstruct("InsertRecord", [("operation", add)], bases=(_EventRecord,))
        if len(_INSERT_DECODERS) >= 256:
            _INSERT_DECODERS.clear()
        decoder = _INSERT_DECODERS[sig] = msgspec.json.Decoder(record)
    try:
        r = decoder.decode(data)
    except msgspec.DecodeError:  # (a ValidationError is one: another operation, table or signature)
        return None
    typed = r.operation.Add.rows
    if r.columns is None or len(r.columns) != len(sig) or len(typed) < typed_inserts:
        return None
    r.operation = {"Add": _TypedRowsRecord(typed)}
    return _from_record(r, typed_inserts)


_INSERT_DECODERS: dict[tuple[str, ...], msgspec.json.Decoder[Any]] = {}


def _array_rows(kind: Operation, array: msgspec.Raw, uri: str, width: int,
                typed_inserts: int) -> tuple[list[Any], bool]:
    """decode_event(typed_inserts=N)'s rows: typed rows where an Add event of N rows or more fits, else as the
    default decoding's (raises _RowsNotDecoded where they are not: decode_event then says why), and `True` if
    typed. An Add event of N rows or more whose rows do not fit teaches typed_rows the next one's types."""
    data = bytes(array)
    if kind == "Add" and typed_inserts > 0:
        typed = typed_rows.decode(data, uri, width)
        if typed is not None:
            if len(typed) >= typed_inserts:
                return typed, True
            return typed_rows.tagged(typed), False
    try:
        rows = _checked_rows(kind, _rows_decoder.decode(data), width)
    except msgspec.DecodeError:  # (a ValidationError is one)
        raise _RowsNotDecoded from None
    if kind == "Add" and typed_inserts > 0 and len(rows) >= typed_inserts:
        typed_rows.learn(uri, rows)
    return rows, False


def _raw_rows(rows: list[Any]) -> list[_RowRecord]:
    try:
        return _rows_decoder.decode(b"[" + b",".join(rows) + b"]")
    except msgspec.DecodeError as e:  # (a ValidationError is one)
        raise MalformedEvent(f"rows: {e}") from None


def _images(kind: Operation, rows: list[_ImagesRowRecord]) -> list[Any]:
    if kind == "Update":
        pairs = [(row.before_cols, row.after_cols) for row in rows]
        if any(not _array(b) or not _array(a) for b, a in pairs):
            raise MalformedEvent("every Update row needs before_cols and after_cols")
        return pairs
    images = [row.cols for row in rows]
    if any(not _array(c) for c in images):
        raise MalformedEvent(f"every {kind} row needs cols")
    return images


def _array(image: msgspec.Raw) -> bool:
    """Whether an image's JSON is an array (not missing, not null nor another value)."""
    return len(image) > 0 and memoryview(image)[0] == 0x5B  # "["


def _checked_rows(kind: Operation, rows: list[_RowRecord], width: int) -> list[Any]:
    if kind == "Update":
        pairs = [(row.before_cols, row.after_cols) for row in rows]
        if any(b is None or a is None or len(b) != width or len(a) != width for b, a in pairs):
            raise MalformedEvent(f"every Update row needs before_cols and after_cols of {width} values")
        return pairs
    images = [row.cols for row in rows]
    if any(c is None or len(c) != width for c in images):
        raise MalformedEvent(f"every {kind} row needs cols of {width} values")
    return images


@lru_cache(maxsize=4096)
def _parsed_uri(uri: str) -> tuple[str, str | None, str | None]:
    return parse_uri(uri)  # (the uris of a topic are few: parsed once each)


def _decode_generic(data: bytes | str) -> ChangeEvent:
    """decode_event's slow path: plain JSON, each field checked in Python with a precise message."""
    try:
        d = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise MalformedEvent(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise MalformedEvent("not a JSON object")
    try:
        return _from_dict(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, MalformedEvent):
            raise
        raise MalformedEvent(f"invalid event: {type(e).__name__}: {e}") from None


def _from_dict(d: dict[str, Any]) -> ChangeEvent:
    uri = _require(d, "uri", str)
    _, schema, table = parse_uri(uri)
    sequence = _require(d, "sequence", int)
    op = _require(d, "operation", dict)
    if len(op) != 1 or next(iter(op)) not in OPERATIONS:
        raise MalformedEvent(f"operation must be one of {', '.join(OPERATIONS)}, got {list(op)}")
    ((kind, body),) = op.items()
    ev = ChangeEvent(uri=uri, sequence=sequence, operation=_operation(kind), schema=schema, table=table)
    if (bn := d.get("bn_file")) is not None:
        ev.bn_file = BinlogFile(_require(bn, "fileName", str), bn.get("offset"))
    ev.gtid = d.get("gtid")
    ev.gtid_set = d.get("gtid_set")
    ev.server_uuid = d.get("server_uuid")
    if any(d.get(k) is not None for k in ("snapshot", "windows", "xa_pending", "copying")):
        _snapshot_fields(ev, d.get("snapshot"), d.get("windows"), d.get("xa_pending"), d.get("copying"))
    ev.ts = d.get("ts")
    if (t := d.get("txn")) is not None:
        ev.txn = Txn(_require(t, "id", str), _require(t, "index", int), bool(_require(t, "last", bool)))
    if kind == "Query":
        if not isinstance(body, str):
            raise MalformedEvent("Query operation must hold the SQL text")
        ev.query = body
        ev.database = d.get("database")
        ev.session = _typed(d.get("session"), QuerySession, "session")
        ev.error_code = _typed(d.get("error_code"), int, "error_code")
        ev.query_b64 = _typed(d.get("query_b64"), str, "query_b64")
        return ev
    ev.checks = _typed(d.get("checks"), RowChecks, "checks")
    ev.binlog = _typed(d.get("binlog"), str, "binlog")
    if table is None:
        raise MalformedEvent(f"{kind} event needs a table in its uri, got {uri}")
    ev.columns = _require(d, "columns", list)
    ev.pk = d.get("pk") or []
    rows = _require(body, "rows", list)
    width = len(ev.columns)
    if kind == "Update":
        ev.rows = [(_cols(r, "before_cols", width), _cols(r, "after_cols", width)) for r in rows]
    else:
        ev.rows = [_cols(r, "cols", width) for r in rows]
    if not set(ev.pk) <= set(ev.columns):
        raise MalformedEvent(f"pk {ev.pk} names columns not in {ev.columns}")
    return ev


def _typed(value: Any, kind: type[T], name: str) -> T | None:
    if value is None:
        return None
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as e:
        raise MalformedEvent(f"invalid field '{name}': {e}") from None


def _snapshot_fields(ev: ChangeEvent, snapshot: Any, windows: Any, xa_pending: Any = None,
                     copying: Any = None) -> None:
    try:
        ev.snapshot, ev.windows, ev.xa_pending, ev.copying = typed_markers(snapshot, windows, xa_pending, copying)
    except msgspec.ValidationError as e:
        raise MalformedEvent(f"invalid snapshot, windows, xa_pending or copying field: {e}") from None


def _operation(kind: str) -> Operation:
    for op in OPERATIONS:
        if kind == op:
            return op
    raise MalformedEvent(f"operation must be one of {', '.join(OPERATIONS)}, got {kind!r}")


def _cols(row: dict[str, Any], key: str, width: int) -> list[Any]:
    cols: list[Any] = _require(row, key, list)
    if len(cols) != width:
        raise MalformedEvent(f"row has {len(cols)} values for {width} columns")
    return cols


def _require(d: dict[str, Any], key: str, kind: type) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise MalformedEvent(f"missing field '{key}'")
    value = d[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedEvent(f"field '{key}' must be {kind.__name__}, got {type(value).__name__}")
    return value


def make_uri(resource: str, database: str | None, table: str | None = None) -> str:
    """flv://<resource>/<database>[/<table>], names percent-encoded only where needed."""
    parts = [resource] + [quote(p, safe="$-_.") for p in (database, table) if p is not None]
    return _URI_PREFIX + "/".join(parts)


def parse_uri(uri: str) -> tuple[str, str | None, str | None]:
    """(resource, database, table) of an event uri."""
    if not uri.startswith(_URI_PREFIX):
        raise MalformedEvent(f"uri must start with {_URI_PREFIX}: {uri!r}")
    parts = uri[len(_URI_PREFIX):].split("/")
    if len(parts) > 3 or not parts[0]:
        raise MalformedEvent(f"uri must be flv://resource/database[/table]: {uri!r}")
    db = parts[1] if len(parts) > 1 else None
    table = parts[2] if len(parts) > 2 else None
    return parts[0], unquote(db) if db else None, unquote(table) if table else None
