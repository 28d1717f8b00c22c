"""Every change to, and every private access of, python-mysql-replication (1.0.17, pinned) and PyMySQL.

Importing this module applies the patches (cdc_producer/binlog.py imports it before any stream
opens). Each entry says what it changes and why; each is a python-mysql-replication defect worth
fixing upstream. Upgrading either library means re-checking this file only.

Patches:
1. `row_event.find_charset` keeps the id of a collation the library does not know (MariaDB's
   uca1400 collations, ids 2048+) as "#<id>" in the column's collation name. The library drops
   it, and the column's charset (hence how its text is decoded) would be unknown.
2. `TableMapEvent._read_type_values` keeps ENUM/SET labels that are not UTF-8 (a latin1 'é'):
   the library turns them into "". They are kept as surrogate-escaped text, so the column's own
   charset decodes them (cdc_producer/decode.py).
3. `TableMapEvent._get_optional_meta_data` reads metadata fields `while bytes_to_read() > 4`,
   i.e. as if a 4-byte checksum always followed. Without one (binlog_checksum=NONE) the last
   field (often SIMPLE_PRIMARY_KEY, or COLUMN_VISIBILITY) was silently dropped, and the primary
   key with it. `_optional_meta_data_to_event_end` bounds it by the event's own end.
4. `binlogstream.MYSQL_EXPECTED_ERROR_CODES` is emptied: on 2006/2013 the library reconnects by
   itself, but from the position it was created with (on MariaDB it never updates its GTID),
   which would publish old transactions again. The producer reconnects itself, from the last
   transaction it published (cdc_producer/run.py).
5. `BinlogStreamConnection` (the binlog stream's `pymysql_wrapper`): the library maps MariaDB's
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
6. PARTIAL_UPDATE_ROWS_EVENT: the library's `read_binary_json` keeps only the first diff of a
   column's diff vector. cdc-producer never uses the library's row values: partial rows are read
   from the raw row images by cdc_producer/partial_json.py (every diff applied), so nothing is
   patched for it; the event class is only listened to (binlog.STREAM_EVENTS).

Private accesses (read-only):
- `row_image_bytes`: a rows event's row images, read from the packet's buffer without copying
  them through the library's per-value parser (which loses zero dates, BINARY padding...).
- `binlog_socket`: the binlog connection's socket, to see whether the next event is already
  there (the producer appends what it queued before waiting on an idle leader).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysql.protocol import MysqlPacket
from pymysqlreplication import binlogstream
from pymysqlreplication import row_event as _row_event
from pymysqlreplication.constants.BINLOG import BINLOG_CHECKSUM_LEN
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent

from cdc_producer import compression
from cdc_stream.errors import DataError
from cdc_stream.mysql import SharedTlsConnection

# 1 --------------------------------------------------------------------------------------------
_library_find_charset = _row_event.find_charset


def _find_charset_keeping_id(charset_id: int, dbms: str = "mysql") -> tuple[Any, Any, Any]:
    encode_name, collation_name, charset_name = _library_find_charset(charset_id, dbms)
    if collation_name is None:
        collation_name = f"#{charset_id}"
    return encode_name, collation_name, charset_name


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


# 3 --------------------------------------------------------------------------------------------
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
    """Install the class- and module-level patches 1-4 (idempotent; done at import)."""
    _row_event.find_charset = _find_charset_keeping_id
    _row_event.TableMapEvent._read_type_values = _read_type_values_keeping_bytes
    _row_event.TableMapEvent._get_optional_meta_data = _optional_meta_data_to_event_end
    binlogstream.MYSQL_EXPECTED_ERROR_CODES.clear()


apply()

# 5 --------------------------------------------------------------------------------------------
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
    """The binlog connection python-mysql-replication reads (patch 5)."""

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


# private accesses -------------------------------------------------------------------------------
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


__all__ = ["BinlogStreamConnection", "apply", "binlog_socket", "refuse_undecoded", "row_image_bytes"]
