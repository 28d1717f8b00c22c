"""Every change to, and every private access of, python-mysql-replication (1.0.17, pinned), in one place.

Importing this module applies the patches; cdc_producer.binlog imports it before any stream opens.
Each entry says what it changes and why; upgrading the library means re-checking this file only.

Patches (applied at import):
1. `row_event.find_charset` keeps the id of a collation the library does not know (MariaDB's
   uca1400 collations, ids 2048+) as "#<id>" in the column's collation name. The library drops
   it, and the column's charset (hence how its text is decoded) would be unknown.
2. `TableMapEvent._read_type_values` keeps ENUM/SET labels that are not UTF-8 (a latin1 'é'):
   the library turns them into "". They are kept as surrogate-escaped text, so the column's own
   charset decodes them (cdc_producer/decode.py).
3. `binlogstream.MYSQL_EXPECTED_ERROR_CODES` is emptied: on 2006/2013 the library reconnects by
   itself, but from the position it was created with (on MariaDB it never updates its GTID),
   which would publish old transactions again. The producer reconnects itself, from the last
   transaction it published (cdc_producer/run.py).

Private accesses (read-only):
- `row_image_bytes`: a rows event's row images, read from the packet's buffer without copying
  them through the library's per-value parser (which loses zero dates, BINARY padding...).
- `binlog_socket`: the binlog connection's socket, to see whether the next event is already
  there (the producer appends what it queued before waiting on an idle leader).
"""

from __future__ import annotations

import socket
from typing import Any

from pymysqlreplication import binlogstream
from pymysqlreplication import row_event as _row_event
from pymysqlreplication.row_event import RowsEvent

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
