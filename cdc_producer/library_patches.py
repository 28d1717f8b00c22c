"""Every place cdc-producer changes or reaches into python-mysql-replication (1.0.17) or PyMySQL.

Each patch says what it changes and why (each is a python-mysql-replication defect worth fixing upstream).

1. `BinlogStreamConnection` (the `pymysql_wrapper` of the binlog stream, binlog.open_binlog):
   python-mysql-replication maps MariaDB's *_COMPRESSED_EVENT(_V1) types and MySQL 8's
   TRANSACTION_PAYLOAD_EVENT (40) to NotImplementedEvent and skips them, so a leader with
   `log_bin_compress=ON` or `binlog_transaction_compression=ON` lost every change inside
   without a word. This connection hands the library, packet by packet, the plain events a
   compressed event stands for (cdc_producer/compression.py), so the library and the
   publisher see exactly the events an uncompressed binlog would have carried: same table
   maps, row images, XIDs; inner events of a payload end at the payload's end position.
   It overrides PyMySQL's private `_read_packet` and `_write_bytes` (to know when the dump
   starts) and watches `query` for `SET @master_binlog_checksum` (python-mysql-replication
   sends it exactly when the server is asked for CRC32-checksummed events).
2. `TableMapEvent._get_optional_meta_data` reads metadata fields `while bytes_to_read() > 4`,
   i.e. as if a 4-byte checksum always followed. Without one (binlog_checksum=NONE) the last
   field (often SIMPLE_PRIMARY_KEY, or COLUMN_VISIBILITY) was silently dropped, and the
   primary key with it. `_optional_meta_data_to_event_end` makes the bound the event's own
   end, with or without a checksum.
   It also refuses, at the event, event types that change what a transaction is and that the
   library cannot decode (`refuse_undecoded`): MySQL 8.3+'s GTID_TAGGED_LOG_EVENT, whose
   transaction the library would take as one without a GTID (losing the resume point).
3. PARTIAL_UPDATE_ROWS_EVENT: the library's `read_binary_json` keeps only the first diff of a
   column's diff vector. cdc-producer never uses the library's row values: partial rows are
   read from the raw row images by cdc_producer/partial_json.py (every diff applied), so
   nothing is patched for it here; the event class is only listened to (binlog.STREAM_EVENTS).

`apply()` installs the class-level patch (2); it is idempotent and called by
binlog.open_binlog before a stream is opened. (decode.py still holds two patches of its own,
applied at its import: the charset-id and ENUM/SET-label readers; see there.)
"""

from __future__ import annotations

from collections.abc import Iterator

from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysql.protocol import MysqlPacket
from pymysqlreplication import row_event as _row_event
from pymysqlreplication.constants.BINLOG import BINLOG_CHECKSUM_LEN
from pymysqlreplication.packet import BinLogPacketWrapper

from cdc_producer import compression
from cdc_stream.errors import DataError
from cdc_stream.mysql import SharedTlsConnection

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
    """The binlog connection python-mysql-replication reads (patch 1 in the module docstring)."""

    _dumping = False
    _format: compression.StreamFormat | None = None
    _pending: Iterator[bytes] | None = None

    def stream_format(self) -> compression.StreamFormat:
        """What the stream's format description event and checksum setting say so far."""
        if self._format is None:
            self._format = compression.StreamFormat()
        return self._format

    def query(self, sql, unbuffered=False):
        if isinstance(sql, str) and sql.lstrip()[:28].upper() == "SET @MASTER_BINLOG_CHECKSUM=":
            self.stream_format().checksum = True
        return super().query(sql, unbuffered)

    def _write_bytes(self, data) -> None:
        # The dump command's packet: 3-byte length, sequence id, then the command byte.
        if len(data) > 4 and data[4] in _DUMP_COMMANDS:
            self._dumping = True
        super()._write_bytes(data)

    def _read_packet(self, packet_type=MysqlPacket):
        while self._pending is not None:
            event = next(self._pending, None)
            if event is not None:
                return packet_type(b"\0" + event, self.encoding)
            self._pending = None
        packet = super()._read_packet(packet_type)
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


_library_optional_meta_data = _row_event.TableMapEvent._get_optional_meta_data


def _optional_meta_data_to_event_end(self):
    """The library's reader, bounded by the event's end instead of 'a checksum follows' (patch 2)."""
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
    """Install the class-level patches (idempotent)."""
    _row_event.TableMapEvent._get_optional_meta_data = _optional_meta_data_to_event_end


__all__ = ["BinlogStreamConnection", "apply", "refuse_undecoded"]
