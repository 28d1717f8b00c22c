"""Recorded binlog files, read without a server: their events as bytes, and as python-mysql-replication
events (the same classes the producer gets from a stream), for fast tests of the decoding.

Also `compress_transactions`, which rewrites a recorded binlog as MySQL 8 writes it with
binlog_transaction_compression=ON: each transaction's events (checksums dropped, log_pos 0)
become one TRANSACTION_PAYLOAD_EVENT (MySQL's codecs/binary.cpp layout), every later log_pos
and CRC32 recomputed."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from mysql8_primary import lenenc, query_text, with_crc
from pymysql.protocol import MysqlPacket
from pymysqlreplication.packet import BinLogPacketWrapper

from cdc_producer import library_patches
from cdc_producer.binlog import STREAM_EVENTS

DATA = Path(__file__).with_name("data") / "mysql8"
MAGIC = b"\xfebin"
HEADER = 19
FORMAT_DESCRIPTION, GTID, ANONYMOUS_GTID, QUERY, XID, TRANSACTION_PAYLOAD = 15, 33, 34, 2, 16, 40
BINLOG_IN_USE = 0x1


def events(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(position, event bytes) of every event of a binlog file's bytes."""
    assert data[:4] == MAGIC, "not a binlog file"
    pos = 4
    while pos + HEADER <= len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        yield pos, data[pos:pos + size]
        pos += size


def fixture(name: str) -> bytes:
    return (DATA / name).read_bytes()


def clear_in_use(event: bytes) -> bytes:
    """A format description event as a server sends it: LOG_EVENT_BINLOG_IN_USE_F cleared, CRC32 recomputed
    (rpl_binlog_sender.cc; files copied while their server had them open carry the flag)."""
    out = bytearray(event)
    out[17] &= ~BINLOG_IN_USE & 0xFF
    return with_crc(bytes(out))


def strip_checksum(event: bytes) -> bytes:
    """The event as a stream without checksums carries it."""
    out = bytearray(event[:-4])
    struct.pack_into("<I", out, 9, len(out))
    return bytes(out)


class _Control:
    """What python-mysql-replication's events ask of their control connection."""

    charset = "utf8mb4"

    def __init__(self, dbms: str) -> None:
        self.dbms = dbms

    def _get_dbms(self) -> str:
        return self.dbms


def library_events(data: bytes, checksum: bool = True, expand: bool = True, patch: bool = True) -> list:
    """The python-mysql-replication events (STREAM_EVENTS and table maps) of a binlog file's bytes, decoded
    as the producer's stream decodes them (library_patches applied, compressed events expanded)."""
    from pymysqlreplication.row_event import TableMapEvent

    from cdc_producer import compression

    if patch:
        library_patches.apply()
    control = _Control("mariadb" if b"MariaDB" in data[:200] else "mysql")
    allowed = frozenset(STREAM_EVENTS) | {TableMapEvent}
    table_map: dict = {}
    fmt = compression.StreamFormat(checksum=checksum)
    post_header = None
    version = (8, 0, 0)
    out = []
    for _, raw in events(data):
        if raw[4] == FORMAT_DESCRIPTION:
            raw = clear_in_use(raw)
            fmt.post_header_len = compression.read_format_description(raw)
        raw = raw if checksum else strip_checksum(raw)
        for event in compression.expand(raw, fmt) if expand else [raw]:
            wrapper = BinLogPacketWrapper(
                MysqlPacket(b"\0" + event, "utf8"), table_map, control, version, checksum, allowed,
                None, None, None, None, True, False, False, True, False, post_header_lengths=post_header,
            )
            if event[4] == FORMAT_DESCRIPTION:
                post_header = compression.read_format_description(event)
            if wrapper.event is not None:
                out.append(wrapper.event)
    return out


def compress_transactions(data: bytes, compression_type: int = 0) -> bytes:
    """The binlog file `data` as MySQL writes it with binlog_transaction_compression=ON (ZSTD = 0) or with an
    uncompressed payload (NONE = 255): each transaction after a GTID/ANONYMOUS_GTID event becomes one
    TRANSACTION_PAYLOAD_EVENT; DDL (a lone query) stays as it is, as in MySQL."""
    import zstandard

    out = bytearray(MAGIC)
    group: list[bytes] = []

    def put(event: bytes) -> None:
        ev = bytearray(event)
        struct.pack_into("<I", ev, 13, len(out) + len(ev))
        out.extend(with_crc(bytes(ev)))

    def flush_group() -> None:
        inner = b"".join(_inner(e) for e in group)
        body = zstandard.ZstdCompressor().compress(inner) if compression_type == 0 else inner
        fields = b""
        fields += _tlv(2, lenenc(compression_type))
        if compression_type != 255:
            fields += _tlv(3, lenenc(len(inner)))
        fields += _tlv(1, lenenc(len(body))) + b"\0"
        head = bytearray(group[0][:HEADER])
        head[4] = TRANSACTION_PAYLOAD
        head[17:19] = b"\0\0"
        struct.pack_into("<I", head, 9, HEADER + len(fields) + len(body) + 4)
        put(bytes(head) + fields + body + b"\0\0\0\0")
        group.clear()

    in_txn = False
    for _, event in events(data):
        kind = event[4]
        if kind == FORMAT_DESCRIPTION:
            event = clear_in_use(event)
        if in_txn:
            group.append(event)
            if kind == XID:
                flush_group()
                in_txn = False
            continue
        if kind == QUERY and query_text(event) == b"BEGIN":
            in_txn = True
            group.append(event)
            continue
        put(event)
    assert not group, "the file ends inside a transaction"
    return bytes(out)


def _inner(event: bytes) -> bytes:
    """An event as it sits inside a payload: no checksum, log_pos 0."""
    out = bytearray(event[:-4])
    struct.pack_into("<II", out, 9, len(out), 0)
    return bytes(out)


def _tlv(kind: int, value: bytes) -> bytes:
    return lenenc(kind) + lenenc(len(value)) + value
