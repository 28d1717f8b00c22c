"""Compressed binlog events -> the plain events they stand for.

Two servers compress differently, and python-mysql-replication 1.0.17 decodes neither
(it skips them as not implemented, so every change inside was silently lost):

- MariaDB `log_bin_compress=ON` compresses single events (zlib): QUERY_COMPRESSED_EVENT
  and WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT(_V1). Each is turned back into the plain
  event MariaDB's own replica writes to its relay log (sql/log_event.cc
  query_event_uncompress / row_log_event_uncompress): same header and post-header, the
  body uncompressed, the type and length set to the plain event's, a new CRC32.
- MySQL 8 `binlog_transaction_compression=ON` logs a whole transaction as one
  TRANSACTION_PAYLOAD_EVENT (zstd, or NONE). Its payload is a concatenation of complete
  events without checksum and with log_pos 0 (libs/mysql/binlog/event/codecs/binary.cpp
  Transaction_payload). Each inner event is given the outer event's end position (the
  transaction ends there: it is where a reader resumes after it) and, when the stream
  carries checksums, a CRC32, so it reads exactly like an event of the stream itself.

Everything here is a pure function of event bytes; the stream plumbing that calls it
lives in library_patches.BinlogStreamConnection.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cdc_producer.unpack import packed_int
from cdc_stream.errors import DataError

HEADER_LEN = 19
CHECKSUM_LEN = 4
FORMAT_DESCRIPTION_EVENT = 15
TRANSACTION_PAYLOAD_EVENT = 40

# MariaDB's compressed event types and the plain type each stands for.
QUERY_COMPRESSED_EVENT = 165
MARIADB_COMPRESSED = {
    QUERY_COMPRESSED_EVENT: 2,  # QUERY_EVENT
    166: 23, 167: 24, 168: 25,  # WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT_V1 -> *_ROWS_EVENT_V1
    169: 30, 170: 31, 171: 32,  # WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT -> *_ROWS_EVENT (v2)
}
_UPDATE_TYPES = {167, 170}
# Post-header lengths when no format description event said otherwise.
_QUERY_HEADER_LEN = 13
_ROWS_HEADER_LEN_V1, _ROWS_HEADER_LEN_V2 = 8, 10

# TRANSACTION_PAYLOAD header fields (TLV) and compression types.
_PAYLOAD_END_MARK, _PAYLOAD_SIZE, _COMPRESSION_TYPE, _UNCOMPRESSED_SIZE = 0, 1, 2, 3
ZSTD, NONE = 0, 255
_COMPRESSION_NAMES = {ZSTD: "ZSTD", NONE: "NONE"}

_COMPRESSION_FIX = "SET GLOBAL binlog_transaction_compression=OFF on the leader"
_MARIADB_FIX = "SET GLOBAL log_bin_compress=OFF on the leader"


@dataclass
class StreamFormat:
    """What decoding the stream's events needs beyond their own bytes."""

    checksum: bool = False  # events end with a CRC32 (the client asked for it: @master_binlog_checksum)
    post_header_len: tuple[int, ...] = field(default_factory=tuple)  # from the format description event

    def post_header(self, event_type: int, default: int) -> int:
        """The post-header length of `event_type` (the FDE's, else MySQL/MariaDB's fixed one)."""
        if 0 < event_type <= len(self.post_header_len):
            return self.post_header_len[event_type - 1]
        return default


def event_type(event: bytes) -> int:
    """The type code in an event's common header."""
    return event[4]


def is_compressed(event: bytes) -> bool:
    """Whether expand() turns this event into other events."""
    return event[4] in MARIADB_COMPRESSED or event[4] == TRANSACTION_PAYLOAD_EVENT


def read_format_description(event: bytes) -> tuple[int, ...]:
    """The post-header lengths (index = event type - 1) of a format description event.

    Its body is binlog version (2), server version (50), create time (4), header length (1),
    the lengths, then the checksum algorithm (1) and a checksum field (4) that checksum-aware
    servers always write (as python-mysql-replication also assumes)."""
    body = event[HEADER_LEN:]
    count = len(body) - 57 - 1 - CHECKSUM_LEN
    return tuple(body[57:57 + max(count, 0)])


def expand(event: bytes, fmt: StreamFormat) -> Iterator[bytes]:
    """The plain events a compressed event stands for (the event itself when it is not compressed)."""
    kind = event[4]
    if kind in MARIADB_COMPRESSED:
        yield uncompress_mariadb_event(event, fmt)
    elif kind == TRANSACTION_PAYLOAD_EVENT:
        yield from payload_events(event, fmt)
    else:
        yield event


# ---------------------------------------------------------------------------
# MariaDB


def _net_field_length(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return packed_int(data, pos)
    except ValueError as e:
        raise DataError(f"a binlog event holds an invalid packed integer ({e})") from None


def _mariadb_uncompress(data: bytes, what: str) -> bytes:
    """MariaDB's compressed buffer: 1 byte (0x80 | algorithm << 4 | length bytes), the
    uncompressed length (1-4 bytes, high byte first), then the zlib stream."""
    if not data or data[0] & 0x80 == 0:
        raise DataError(f"a MariaDB compressed {what} event has no compression header: the binlog is corrupt")
    algorithm, lenlen = (data[0] & 0x70) >> 4, data[0] & 0x07
    if algorithm != 0:
        raise DataError(
            f"a MariaDB compressed {what} event uses compression algorithm {algorithm}, which cdc-producer "
            f"cannot decode (only zlib, 0): {_MARIADB_FIX}"
        )
    if not 1 <= lenlen <= 4:
        raise DataError(f"a MariaDB compressed {what} event has an invalid length header: the binlog is corrupt")
    length = int.from_bytes(data[1:1 + lenlen], "big")
    try:
        plain = zlib.decompress(data[1 + lenlen:])
    except zlib.error as e:
        raise DataError(f"a MariaDB compressed {what} event does not uncompress ({e}): the binlog is corrupt") from None
    if len(plain) != length:
        raise DataError(
            f"a MariaDB compressed {what} event uncompressed to {len(plain)} bytes, its header says {length}: "
            "the binlog is corrupt"
        )
    return plain


def _with_header(head: bytes, body: bytes, new_type: int, log_pos: int | None, checksum: bool) -> bytes:
    """An event of `head` (its first 19+ bytes) and `body`, with its type, length, log_pos and CRC32 set."""
    size = len(head) + len(body) + (CHECKSUM_LEN if checksum else 0)
    out = bytearray(head)
    out[4] = new_type
    struct.pack_into("<I", out, 9, size)
    if log_pos is not None:
        struct.pack_into("<I", out, 13, log_pos)
    out += body
    if checksum:
        out += struct.pack("<I", zlib.crc32(out))
    return bytes(out)


def uncompress_mariadb_event(event: bytes, fmt: StreamFormat) -> bytes:
    """A MariaDB *_COMPRESSED_EVENT(_V1) as the plain event it stands for."""
    kind = event[4]
    end = len(event) - (CHECKSUM_LEN if fmt.checksum else 0)
    if kind == QUERY_COMPRESSED_EVENT:
        post = fmt.post_header(kind, _QUERY_HEADER_LEN)
        db_len = event[HEADER_LEN + 8]
        status_len = int.from_bytes(event[HEADER_LEN + 11:HEADER_LEN + 13], "little")
        start = HEADER_LEN + post + status_len + db_len + 1  # the query text follows the db name's NUL
        what = "query"
    else:
        post = fmt.post_header(kind, _ROWS_HEADER_LEN_V1 if kind <= 168 else _ROWS_HEADER_LEN_V2)
        pos = HEADER_LEN + _ROWS_HEADER_LEN_V1
        if post == _ROWS_HEADER_LEN_V2:  # a variable-length extra header, its length included
            pos += int.from_bytes(event[pos:pos + 2], "little")
        width, pos = _net_field_length(event, pos)
        bitmaps = 2 if kind in _UPDATE_TYPES else 1
        start = pos + bitmaps * ((width + 7) // 8)
        what = "row"
    if start >= end:
        raise DataError(f"a MariaDB compressed {what} event is shorter than its headers: the binlog is corrupt")
    body = _mariadb_uncompress(event[start:end], what)
    return _with_header(event[:start], body, MARIADB_COMPRESSED[kind], None, fmt.checksum)


# ---------------------------------------------------------------------------
# MySQL 8 TRANSACTION_PAYLOAD


@dataclass(frozen=True)
class PayloadHeader:
    """The TLV fields in front of a transaction payload."""

    compression_type: int
    payload_size: int
    uncompressed_size: int | None
    payload_start: int  # offset of the payload in the event


def read_payload_header(event: bytes) -> PayloadHeader:
    """Parse the header fields of a TRANSACTION_PAYLOAD_EVENT; unknown fields are skipped by their length.

    The fields start right after the common header: MySQL's format description event declares
    a post-header length of 40 for this type, but writes none (Transaction_payload_event reads
    its fields from the start of the data), so that length must not be skipped."""
    pos = HEADER_LEN
    fields: dict[int, int] = {}
    while True:
        kind, pos = _net_field_length(event, pos)
        if kind == _PAYLOAD_END_MARK:
            break
        length, pos = _net_field_length(event, pos)
        if kind in (_PAYLOAD_SIZE, _COMPRESSION_TYPE, _UNCOMPRESSED_SIZE):
            fields[kind] = _net_field_length(event, pos)[0]
        pos += length
    if _PAYLOAD_SIZE not in fields or _COMPRESSION_TYPE not in fields:
        raise DataError("a MySQL transaction payload event lacks its size or compression type: the binlog is corrupt")
    return PayloadHeader(fields[_COMPRESSION_TYPE], fields[_PAYLOAD_SIZE], fields.get(_UNCOMPRESSED_SIZE), pos)


class _Chunks:
    """Reads exact byte counts from a decompressor's output."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read, self._buffer = read, b""

    def take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            more = self._read(max(size - len(self._buffer), 1 << 16))
            if not more:
                break
            self._buffer += more
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


def _payload_reader(header: PayloadHeader, payload: bytes) -> Callable[[int], bytes]:
    if header.compression_type == NONE:
        offset = 0

        def read(size: int) -> bytes:
            nonlocal offset
            offset += size
            return payload[offset - size:offset]

        return read
    if header.compression_type == ZSTD:
        import zstandard  # only a leader with binlog_transaction_compression=ON needs it

        reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)

        def read_zstd(size: int) -> bytes:
            try:
                return reader.read(size)
            except zstandard.ZstdError as e:
                raise DataError(
                    f"a MySQL transaction payload does not decompress ({e}): the binlog is corrupt") from None

        return read_zstd
    raise DataError(
        f"a MySQL transaction payload is compressed with type {header.compression_type}, which cdc-producer cannot "
        f"decode (only {', '.join(f'{n} ({v})' for v, n in _COMPRESSION_NAMES.items())}): {_COMPRESSION_FIX}"
    )


def payload_events(event: bytes, fmt: StreamFormat) -> Iterator[bytes]:
    """The events inside a TRANSACTION_PAYLOAD_EVENT, one at a time (a large transaction is never held
    uncompressed whole), each ending at the outer event's end position and checksummed like the stream."""
    header = read_payload_header(event)
    end = header.payload_start + header.payload_size
    if end > len(event) - (CHECKSUM_LEN if fmt.checksum else 0):
        raise DataError("a MySQL transaction payload is longer than its event: the binlog is corrupt")
    outer_end = struct.unpack_from("<I", event, 13)[0]
    chunks = _Chunks(_payload_reader(header, event[header.payload_start:end]))
    total = 0
    ready: bytes | None = None  # one event of lookahead: the last one (the commit) goes out only once the
    while True:  # payload is known to be whole
        head = chunks.take(HEADER_LEN)
        if not head:
            break
        size = struct.unpack_from("<I", head, 9)[0] if len(head) == HEADER_LEN else 0
        body = chunks.take(size - HEADER_LEN) if size >= HEADER_LEN else b""
        if size < HEADER_LEN or len(body) != size - HEADER_LEN:
            raise DataError("a MySQL transaction payload ends inside an event: the binlog is corrupt")
        total += size
        if ready is not None:
            yield ready
        ready = _with_header(head, body, head[4], outer_end, fmt.checksum)
    if ready is None or (header.uncompressed_size is not None and total != header.uncompressed_size):
        raise DataError(
            f"a MySQL transaction payload held {total} bytes of events, its header says "
            f"{header.uncompressed_size}: the binlog is corrupt"
        )
    yield ready


__all__ = [
    "MARIADB_COMPRESSED",
    "TRANSACTION_PAYLOAD_EVENT",
    "PayloadHeader",
    "StreamFormat",
    "event_type",
    "expand",
    "is_compressed",
    "payload_events",
    "read_format_description",
    "read_payload_header",
    "uncompress_mariadb_event",
]
