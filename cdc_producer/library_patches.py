"""Every change to, and every private access of, python-mysql-replication (1.0.17, pinned) and PyMySQL.

Importing this module applies the patches; cdc_producer.binlog imports it before any stream opens.
Each entry says what it changes and why (each is a python-mysql-replication defect worth fixing
upstream); upgrading either library means re-checking this file only.

Patches (applied at import):
1. `row_event.find_charset` keeps the id of a collation the library does not know (MariaDB's
   uca1400 collations, ids 2048+) as "#<id>" in the column's collation name. The library drops
   it, and the column's charset (hence how its text is decoded) would be unknown.
2. `TableMapEvent._read_type_values` keeps ENUM/SET labels that are not UTF-8 (a latin1 'é'):
   the library turns them into "". They are kept as surrogate-escaped text, so the column's own
   charset decodes them (cdc_producer/columns.py).
3. `binlogstream.MYSQL_EXPECTED_ERROR_CODES` is emptied: on 2006/2013 the library reconnects by
   itself, but from the position it was created with (on MariaDB it never updates its GTID),
   which would publish old transactions again. The producer reconnects itself, from the last
   transaction it published (cdc_producer/run.py).

4. `Column.__parse_column_definition` reads the table-map metadata of MariaDB's COMPRESSED
   columns (types 140 BLOB_COMPRESSED: 1 byte like BLOB; 141 VARCHAR_COMPRESSED: 2 bytes like
   VARCHAR), and `TableMapEvent._is_character_column` counts them as text columns (MariaDB lists
   their charsets). The library read no metadata for them, so the rest of the table map was read
   at the wrong offset ("0 is not a valid MetadataFieldType"). A type the library has no reader
   for raises instead of silently misreading the table map (UnreadableTableMap).
5. `TableMapEvent.__init__` (wrapped): any exception the library raises on a table map becomes
   one DataError naming the table and the cause; a table map of a table the filters exclude is
   skipped instead (its rows events are then skipped by the library too), so such a table never
   stops the producer. The filters come through the reader's `ignored_schemas`
   (`ExcludedSchemas`, which also lets the library skip whole excluded databases before parsing).
   The wrapper also keeps each table map's raw bytes on its `Table` (`table_map_bytes`).
6. `QueryEvent.__init__` (wrapped) keeps the statement's exact bytes as `query_bytes`: the
   library decodes them as UTF-8 with backslashreplace, which is lossy for latin1 and others and
   ambiguous with a literal backslash.
7. `TableMapEvent._get_optional_meta_data` reads metadata fields `while bytes_to_read() > 4`,
   i.e. as if a 4-byte checksum always followed. Without one (binlog_checksum=NONE) the last
   field (often SIMPLE_PRIMARY_KEY, or COLUMN_VISIBILITY) was silently dropped, and the primary
   key with it. `_optional_meta_data_to_event_end` bounds it by the event's own end.
8. `BinlogStreamConnection` (the binlog stream's `pymysql_wrapper`): the library maps MariaDB's
   *_COMPRESSED_EVENT(_V1) types and MySQL 8's TRANSACTION_PAYLOAD_EVENT (40) to
   NotImplementedEvent and skips them, so a leader with `log_bin_compress=ON` or
   `binlog_transaction_compression=ON` lost every change inside without a word. This connection
   hands the library, packet by packet, the plain events a compressed event stands for
   (cdc_producer/compression.py): same table maps, row images, XIDs; the inner events of a
   payload end at the payload's end position. It overrides PyMySQL's private `_read_packet` and
   `_write_bytes` (to know when the dump starts) and watches `query` for
   `SET @master_binlog_checksum` (sent exactly when the server is asked for CRC32 checksums).
   It also refuses, at the event, event types that change what a transaction is and that the
   library cannot decode (`refuse_undecoded`): MySQL 8.3+'s GTID_TAGGED_LOG_EVENT, whose
   transaction the library would take as one without a GTID (losing the resume point).
   Its `_rfile` (what PyMySQL reads packets from) is a `SocketReader` instead of the socket's
   8 KiB BufferedReader: it receives up to 64 KiB per call and says how many bytes it holds, so
   `has_data` knows the next event is already read without asking the socket (the BufferedReader
   hid what it held: with events waiting in it, the socket looked idle and the producer appended
   after nearly every transaction of a stream of small ones, and a `select` ran per event).
9. PARTIAL_UPDATE_ROWS_EVENT: the library's `read_binary_json` keeps only the first diff of a
   column's diff vector. cdc-producer never uses the library's row values: partial rows are read
   from the raw row images by cdc_producer/partial_json.py (every diff applied), so nothing is
   patched for it; the event class is only listened to (binlog.STREAM_EVENTS).

10. INTVAR, RAND and USER_VAR events (the INSERT_ID/LAST_INSERT_ID, RAND() seeds and user
   variables a statement logged as a statement runs with) map to `StatementContextEvent`, which
   reads its body with cdc_producer/context.py (`context`): the library's UserVarEvent decodes every
   string value as UTF-8 (a latin1 or binary value raises) and reads a flags byte that only INT
   values have (taking the checksum's first byte for it otherwise); its IntvarEvent and RandEvent
   would do, but one reader for the three keeps them alike.
11. `Table.data` (the table's public attributes, which `RowsEvent.__init__` reads one key of for
   every rows event) is a view of the attributes instead of a dict built at every access: ~3% of
   the producer's CPU on small transactions (bench/README.md, issue 26). Equality and lookups are
   the same (a Mapping).

Private accesses (read-only):
- `row_image_bytes`: a rows event's row images, read from the packet's buffer without copying
  them through the library's per-value parser (which loses zero dates, BINARY padding...).
- `binlog_socket`, `binlog_buffered`: the binlog connection's socket and the bytes its reader
  holds, to see whether the next event is already there (the producer appends what it queued
  before waiting on an idle leader).
- `event_bytes`: a binlog event exactly as the leader wrote it (header, body, checksum), from the
  packet the library parsed it from (the `binlog` field of row events).
- PyMySQL, for the consumer (cdc_stream/mysql.py `send_query`, `read_result`, `more_results`): a query is
  sent with `_execute_command` and its answer read later with `_read_query_result`, restoring `_next_seq_id`
  (the answer's first sequence number) and checking `_result.has_next`: the follower's writer keeps several
  BINLOG row statements in flight (writer.PIPELINE).
- PyMySQL, for the consumer's bulk rows (cdc_stream/mysql.py `BulkConnection`, `prepare`, `send_bulk`,
  `close_statement`): PyMySQL has no prepared statements, so COM_STMT_PREPARE, COM_STMT_BULK_EXECUTE and
  COM_STMT_CLOSE go out with `_execute_command` and the prepare's answer is read with `_read_packet`.
  MariaDB runs bulk execution only for a client that announced it, in the handshake response PyMySQL
  writes: `BulkConnection` wraps `_get_server_information` (its `_read_packet`, to keep the greeting and
  read the server's extended capabilities from it) and `_request_authentication` (its `write_packet`, to
  clear CLIENT_MYSQL and put MARIADB_CLIENT_STMT_BULK_OPERATIONS in the response's filler).
- `ctl_connection`: the library's control connection to the leader (autocommit, information_schema as its
  default database), which every event keeps: old_temporals.py reads a table's definition through it.
- `mariadb_gtid_xa`: the XA xid a MariaDB GTID event carries after its flags (FL_PREPARED_XA /
  FL_COMPLETED_XA), which the library does not read.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysql.protocol import MysqlPacket
from pymysqlreplication import binlogstream
from pymysqlreplication import row_event as _row_event
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.constants.BINLOG import BINLOG_CHECKSUM_LEN, INTVAR_EVENT, RAND_EVENT, USER_VAR_EVENT
from pymysqlreplication.event import BinLogEvent, MariadbGtidEvent, NotImplementedEvent, QueryEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent, TableMapEvent
from pymysqlreplication.table import Table

from cdc_producer import compression, context
from cdc_stream.errors import DataError
from cdc_stream.mysql import SharedTlsConnection, qualified

# 1 --------------------------------------------------------------------------------------------
_library_find_charset = _row_event.find_charset


def _find_charset_keeping_id(charset_id: int, dbms: str = "mysql") -> tuple[Any, Any, Any]:
    encode_name, collation_name, charset_name = _library_find_charset(charset_id, dbms)
    if collation_name is None:
        collation_name = f"#{charset_id}"
    return encode_name, collation_name, charset_name


_row_event.find_charset = _find_charset_keeping_id


# 2 --------------------------------------------------------------------------------------------
def _read_type_values_keeping_bytes(self: Any, length: int) -> list[list[str]] | None:
    result = []
    read_until = self.packet.read_bytes + length
    if self.packet.read_bytes >= read_until:
        return None
    while self.packet.read_bytes < read_until:
        count = self.packet.read_length_coded_binary()
        result.append([
            self.packet.read_variable_length_string().decode("utf-8", "surrogateescape") for _ in range(count)
        ])
    return result


_row_event.TableMapEvent._read_type_values = _read_type_values_keeping_bytes

# 3 --------------------------------------------------------------------------------------------
binlogstream.MYSQL_EXPECTED_ERROR_CODES.clear()


# 4 --------------------------------------------------------------------------------------------
BLOB_COMPRESSED = 140  # MariaDB's MYSQL_TYPE_BLOB_COMPRESSED (BLOB/TEXT ... COMPRESSED)
VARCHAR_COMPRESSED = 141  # MariaDB's MYSQL_TYPE_VARCHAR_COMPRESSED (VARCHAR/VARBINARY ... COMPRESSED)
_METADATA_AS = {BLOB_COMPRESSED: FIELD_TYPE.BLOB, VARCHAR_COMPRESSED: FIELD_TYPE.VARCHAR}
# Types whose table-map metadata the library reads, or that have none (MySQL's and MariaDB's
# log_event.cc: the types a table map carries).
_READABLE_TYPES = frozenset({
    FIELD_TYPE.DECIMAL, FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.LONG, FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE,
    FIELD_TYPE.NULL, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.LONGLONG, FIELD_TYPE.INT24, FIELD_TYPE.DATE, FIELD_TYPE.TIME,
    FIELD_TYPE.DATETIME, FIELD_TYPE.YEAR, FIELD_TYPE.NEWDATE, FIELD_TYPE.VARCHAR, FIELD_TYPE.BIT,
    FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIME2, FIELD_TYPE.JSON, FIELD_TYPE.NEWDECIMAL,
    FIELD_TYPE.ENUM, FIELD_TYPE.SET, FIELD_TYPE.BLOB, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.GEOMETRY,
})


class UnreadableTableMap(ValueError):
    """A table map holds a column type whose metadata python-mysql-replication cannot read."""


_library_parse_column = Column._Column__parse_column_definition


def _parse_column_definition(self: Any, column_type: int, packet: Any) -> None:
    like = _METADATA_AS.get(column_type)
    if like is not None:
        _library_parse_column(self, like, packet)
        self.type = column_type
        return
    if column_type not in _READABLE_TYPES:
        raise UnreadableTableMap(f"column type {column_type} is not one python-mysql-replication can read")
    _library_parse_column(self, column_type, packet)


Column._Column__parse_column_definition = _parse_column_definition
_library_is_character_column = TableMapEvent._is_character_column
TableMapEvent._is_character_column = staticmethod(
    lambda column_type, dbms="mysql": column_type in _METADATA_AS or _library_is_character_column(column_type, dbms))


# 5 --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExcludedSchemas:
    """The reader's `ignored_schemas`: `db in it` when the filters exclude the whole database (the
    library then skips its table maps and rows events unparsed); `table_excluded` for patch 5."""

    schema_excluded: Callable[[str], bool]
    table_excluded: Callable[[str, str], bool]

    def __contains__(self, schema: object) -> bool:
        return isinstance(schema, str) and self.schema_excluded(schema)

    def __bool__(self) -> bool:
        return True


_library_table_map_init = TableMapEvent.__init__


def _table_map_init(self: Any, from_packet: Any, event_size: int, table_map: dict[int, Any], ctl_connection: Any,
                    **kwargs: Any) -> None:
    try:
        _library_table_map_init(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    except Exception as e:  # whatever the library raised: one line, or nothing for an excluded table
        schema, table = getattr(self, "schema", None), getattr(self, "table", None)
        table_map.pop(getattr(self, "table_id", -1), None)  # its rows events are then skipped
        excluded = kwargs.get("ignored_schemas")
        if isinstance(excluded, ExcludedSchemas) and schema is not None and table is not None \
                and excluded.table_excluded(schema, table):
            self._processed = False
            return
        raise DataError(
            f"the leader's table map of {qualified(str(schema), str(table))} cannot be read ({type(e).__name__}: {e}): "
            "a column type python-mysql-replication does not know; exclude the table in [filters] "
            "exclude_tables if its changes need not flow, or change the column's type on the leader"
        ) from e
    # The Table the reader will keep: the new one (get_table()), or, when the library kept the
    # table's earlier map (freeze_schema), that one.
    table = getattr(self, "table_obj", None) if self._processed else table_map.get(self.table_id)
    if table is not None:
        table.cdc_table_map_bytes = event_bytes(self)


TableMapEvent.__init__ = _table_map_init


# 6 --------------------------------------------------------------------------------------------
_library_query_init = QueryEvent.__init__


def _query_init(self: Any, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any,
                **kwargs: Any) -> None:
    _library_query_init(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    # The statement is the event's last field: after the post-header, the status variables, the
    # schema and its NUL, up to the end of the body (event_size excludes header and checksum).
    packet = from_packet.packet
    header = 1 + 19  # PyMySQL's OK byte, then the event header
    start = header + self._declared_post_header_len(13) + self.status_vars_length + self.schema_length + 1
    self.query_bytes = bytes(packet._data[start:header + event_size])


QueryEvent.__init__ = _query_init


# 7 --------------------------------------------------------------------------------------------
_library_optional_meta_data = _row_event.TableMapEvent._get_optional_meta_data


def _optional_meta_data_to_event_end(self: Any) -> Any:
    """The library's reader, bounded by the event's end instead of 'a checksum follows'."""
    wrapper = self.packet
    left_in_event = self.event_size - wrapper.read_bytes  # event_size excludes the checksum, if any
    missing = BINLOG_CHECKSUM_LEN - (BinLogPacketWrapper.bytes_to_read(wrapper) - left_in_event)
    if missing <= 0:
        return _library_optional_meta_data(self)
    # No checksum after this event: make the loop's `bytes_to_read() > 4` see one.
    wrapper.bytes_to_read = lambda: BinLogPacketWrapper.bytes_to_read(wrapper) + missing
    try:
        return _library_optional_meta_data(self)
    finally:
        del wrapper.bytes_to_read


def apply() -> None:
    """Install the patch of 7 (idempotent; done at import; the other patches are installed where
    they are defined)."""
    _row_event.TableMapEvent._get_optional_meta_data = _optional_meta_data_to_event_end


apply()

# 8 --------------------------------------------------------------------------------------------
COM_BINLOG_DUMP_GTID = 0x1E
_DUMP_COMMANDS = (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID)
GTID_TAGGED_LOG_EVENT = 42
_UNDECODED = {
    GTID_TAGGED_LOG_EVENT: (
        "the leader logged a transaction with a tagged GTID (MySQL 8.3+ GTID_TAGGED_LOG_EVENT, from SET gtid_next="
        "'AUTOMATIC:<tag>' or '<uuid>:<tag>:<n>'), which cdc-producer cannot decode: its GTID would be lost; "
        "do not use tagged GTIDs on the leader"
    ),
}


def refuse_undecoded(event: bytes) -> None:
    """DataError for an event type whose loss would go unnoticed (see _UNDECODED)."""
    why = _UNDECODED.get(event[4])
    if why is not None:
        raise DataError(why)


class BinlogStreamConnection(SharedTlsConnection):
    """The binlog connection python-mysql-replication reads (patch 8)."""

    _dumping = False
    _format: compression.StreamFormat | None = None
    _pending: Iterator[bytes] | None = None

    def stream_format(self) -> compression.StreamFormat:
        """What the stream's format description event and checksum setting say so far."""
        if self._format is None:
            self._format = compression.StreamFormat()
        return self._format

    def query(self, sql: Any, unbuffered: bool = False) -> int:
        if isinstance(sql, str) and sql.lstrip()[:28].upper() == "SET @MASTER_BINLOG_CHECKSUM=":
            self.stream_format().checksum = True
        return int(super().query(sql, unbuffered))

    def _write_bytes(self, data: bytes) -> None:
        # The dump command's packet: 3-byte length, sequence id, then the command byte.
        if len(data) > 4 and data[4] in _DUMP_COMMANDS:
            self._dumping = True
        super()._write_bytes(data)  # type: ignore[misc]  # PyMySQL's, untyped in its stubs

    @property
    def _rfile(self) -> SocketReader | None:
        return self.__dict__.get("_reader")

    @_rfile.setter
    def _rfile(self, value: Any) -> None:
        # PyMySQL sets sock.makefile("rb") right after (re)placing self._sock (connect, TLS), and None
        # when it closes; the makefile object is closed at once (the socket stays open: its reference).
        if value is not None:
            value.close()
            value = SocketReader(self._sock)  # type: ignore[attr-defined]  # PyMySQL's, untyped in its stubs
        self.__dict__["_reader"] = value

    def _read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        while self._pending is not None:
            event = next(self._pending, None)
            if event is not None:
                return packet_type(b"\0" + event, self.encoding)
            self._pending = None
        packet = super()._read_packet(packet_type)  # type: ignore[no-untyped-call]
        if not self._dumping:
            return packet
        data = packet.get_all_data()
        if len(data) < 1 + compression.HEADER_LEN or data[0] != 0:
            return packet  # EOF, or not an event
        if data[5] == compression.FORMAT_DESCRIPTION_EVENT:
            self.stream_format().post_header_len = compression.read_format_description(data[1:])
        elif data[5] in _UNDECODED:
            refuse_undecoded(data[1:])
        elif compression.is_compressed(data[1:]):
            self._pending = compression.expand(data[1:], self.stream_format())
            return self._read_packet(packet_type)
        return packet


# 10 -------------------------------------------------------------------------------------------
_CONTEXT_TYPES = (INTVAR_EVENT, RAND_EVENT, USER_VAR_EVENT)


class StatementContextEvent(NotImplementedEvent):  # type: ignore[misc]  # the library is untyped
    """An INTVAR, RAND or USER_VAR event (patch 10); `context` is what it holds."""

    def __init__(self, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kwargs: Any):
        super().__init__(from_packet, event_size, table_map, ctl_connection, **kwargs)
        # The library's event_size leaves out the header, and the checksum exactly when it asked the
        # leader for checksums (the stream_format().checksum of BinlogStreamConnection), as in patch 6.
        self.context: context.StatementContext = context.read_context(
            self.event_type, event_bytes(self)[compression.HEADER_LEN:compression.HEADER_LEN + event_size])


for _type in _CONTEXT_TYPES:
    BinLogPacketWrapper._BinLogPacketWrapper__event_map[_type] = StatementContextEvent


# 11 -------------------------------------------------------------------------------------------
class _PublicAttributes(Mapping[str, Any]):
    """What `Table.data` returns (patch 11): the object's attributes not starting with "_", read live."""

    __slots__ = ("_of",)

    def __init__(self, of: object):
        self._of = of

    def __getitem__(self, key: str) -> Any:
        if key.startswith("_") or key not in self._of.__dict__:
            raise KeyError(key)
        return self._of.__dict__[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k in self._of.__dict__ if not k.startswith("_"))

    def __len__(self) -> int:
        return sum(1 for _ in self)


Table.data = property(_PublicAttributes)


# private accesses -------------------------------------------------------------------------------
def event_bytes(event: BinLogEvent) -> bytes:
    """The binlog event exactly as the leader wrote it: header, body and checksum (if any)."""
    wrapper = event.packet
    return bytes(wrapper.packet._data[1:1 + wrapper.event_size])  # [0] is the packet's OK byte


def ctl_connection(event: BinLogEvent) -> Any:
    """The library's control connection to the leader (a PyMySQL connection whose default cursor gives dicts)."""
    return event._ctl_connection


def table_map_bytes(event: RowsEvent) -> bytes:
    """The raw bytes of the table map a rows event refers to (the last one the leader wrote for it)."""
    return event.table_map[event.table_id].cdc_table_map_bytes  # type: ignore[no-any-return]


_FL_GROUP_COMMIT_ID = 0x02
_FL_PREPARED_XA, _FL_COMPLETED_XA = 0x40, 0x80


def mariadb_gtid_xa(event: MariadbGtidEvent) -> tuple[int, bytes, bytes] | None:
    """(formatID, gtrid, bqual) of the XA transaction a MariaDB GTID event names (its XA PREPARE
    group, or the XA COMMIT/ROLLBACK that completes it), None for other GTID events.

    MariaDB's Gtid_log_event: seq_no u64, domain u32, flags u8, [commit_id u64 when
    FL_GROUP_COMMIT_ID], [formatID u32, gtrid length u8, bqual length u8, data when FL_PREPARED_XA
    or FL_COMPLETED_XA]."""
    flags = event.flags
    if not flags & (_FL_PREPARED_XA | _FL_COMPLETED_XA):
        return None
    body = event_bytes(event)[19:]
    pos = 13 + (8 if flags & _FL_GROUP_COMMIT_ID else 0)
    format_id = int.from_bytes(body[pos:pos + 4], "little")
    gtrid_len, bqual_len = body[pos + 4], body[pos + 5]
    data = body[pos + 6:pos + 6 + gtrid_len + bqual_len]
    return format_id, data[:gtrid_len], data[gtrid_len:]


def row_image_bytes(event: RowsEvent, consume: bool = False) -> bytes:
    """The event's row images (after the columns-present bitmaps, before the checksum).

    By default the bytes are only peeked at, so the library can still decode the same event
    (`event.rows`, which the tests compare with); consume=True reads them off the packet."""
    wrapper = event.packet
    size = event.event_size - wrapper.read_bytes
    packet = wrapper.packet
    buffered = getattr(wrapper, "_BinLogPacketWrapper__data_buffer", b"")
    data, start = getattr(packet, "_data", None), getattr(packet, "_position", None)
    if consume or data is None or start is None:  # (a PyMySQL without these internals: read them)
        return bytes(wrapper.read(size))
    return bytes(buffered) + bytes(data[start:start + size - len(buffered)])


def binlog_socket(reader: binlogstream.BinLogStreamReader) -> socket.socket | None:
    """The socket of the reader's binlog connection, None before it connected."""
    conn = getattr(reader, "_stream_connection", None)
    return getattr(conn, "_sock", None)


def binlog_buffered(reader: binlogstream.BinLogStreamReader) -> int:
    """Bytes the reader's binlog connection has received and not read yet (0 before it connected)."""
    conn = getattr(reader, "_stream_connection", None)
    rfile = getattr(conn, "_rfile", None)
    return rfile.buffered() if isinstance(rfile, SocketReader) else 0


class SocketReader:
    """PyMySQL's `_rfile` of the binlog connection (patch 8): `read(n)` returns n bytes, or fewer once
    the peer closed; it receives in calls of up to CHUNK bytes and tells what it holds (`buffered`)."""

    CHUNK = 64 << 10  # (below malloc's mmap threshold: a recv's buffer comes from the heap)

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._data = b""
        self._pos = 0

    def buffered(self) -> int:
        """Bytes received and not read yet."""
        return len(self._data) - self._pos

    def read(self, n: int) -> bytes:
        """The next n bytes (fewer: the connection closed first); OSError as the socket raises it."""
        end = self._pos + n
        if end <= len(self._data):
            out = self._data[self._pos:end]
            self._pos = end
            return out
        parts = [self._data[self._pos:]]
        have = len(parts[0])
        while have < n:
            chunk = self._sock.recv(max(self.CHUNK, n - have))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        self._data, self._pos = data, min(n, len(data))
        return data[:n]

    def close(self) -> None:
        """Drop what was received (PyMySQL closes the socket itself)."""
        self._data, self._pos = b"", 0
