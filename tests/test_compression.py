"""Compressed binlog events -> plain events (cdc_producer/compression.py), on recorded bytes.

MariaDB: tests/data/mariadb-10.11-compressed.000001, recorded here from MariaDB 10.11 with
log_bin_compress=ON (its statements are in tests/data/README.md). MySQL 8: the recorded
transaction payloads of tests/data/mysql8 and the payload bodies of mysql-binlog-connector-java's
and go-mysql's tests.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from mysql8_binlog import events, fixture, library_events, query_text
from pymysqlreplication.row_event import RowsEvent

from cdc_producer import compression
from cdc_producer.decode import table_decoder
from cdc_producer.library_patches import row_image_bytes
from cdc_stream.errors import DataError

MARIADB = (Path(__file__).with_name("data") / "mariadb-10.11-compressed.000001").read_bytes()


def crc_ok(event: bytes) -> bool:
    return struct.unpack("<I", event[-4:])[0] == zlib.crc32(event[:-4])


def header(event: bytes) -> tuple[int, int, int]:
    """(type, size, log_pos)"""
    return event[4], *struct.unpack_from("<II", event, 9)


def mariadb_format() -> compression.StreamFormat:
    fmt = compression.StreamFormat(checksum=True)
    fmt.post_header_len = compression.read_format_description(next(e for _, e in events(MARIADB)))
    return fmt


def test_mariadb_compressed_events_become_the_plain_ones():
    fmt = mariadb_format()
    compressed = [e for _, e in events(MARIADB) if compression.is_compressed(e)]
    assert sorted({e[4] for e in compressed}) == [165, 166, 167, 168]
    for event in compressed:
        plain = compression.uncompress_mariadb_event(event, fmt)
        assert plain[4] == compression.MARIADB_COMPRESSED[event[4]]
        assert plain[:4] == event[:4] and plain[5:9] == event[5:9] and plain[13:19] == event[13:19]  # same header
        assert header(plain)[1] == len(plain) and crc_ok(plain)
    # Every compressed statement of the recording (tests/data/README.md: the server's set-up, then the
    # CREATE TABLE; CREATE DATABASE d1 was logged as a plain QUERY_EVENT).
    texts = [query_text(compression.uncompress_mariadb_event(e, fmt)) for e in compressed if e[4] == 165]
    assert texts == [
        b"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
        b"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
        b"CREATE USER IF NOT EXISTS 'fluvio'@'%' IDENTIFIED BY 'fluvio4cdc!'",
        b"CREATE USER IF NOT EXISTS 'fluvio'@'localhost' IDENTIFIED BY 'fluvio4cdc!'",
        b"GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'fluvio'@'%', 'fluvio'@'localhost'",
        b"GRANT ALL PRIVILEGES ON `flvDb%`.* TO 'fluvio'@'%', 'fluvio'@'localhost'",
        b"GRANT ALL PRIVILEGES ON `mysql_cdc`.* TO 'fluvio'@'%', 'fluvio'@'localhost'",
        b"FLUSH PRIVILEGES",
        b"CREATE TABLE d1.t (id INT PRIMARY KEY, v VARCHAR(100), j JSON)",
    ]
    assert [query_text(e) for _, e in events(MARIADB) if e[4] == 2] == [b"CREATE DATABASE d1"]


def test_mariadb_compressed_rows_decode_to_the_recorded_rows():
    got = []
    for ev in library_events(MARIADB):
        if isinstance(ev, RowsEvent) and ev.table == "t":
            decoder = table_decoder(ev.table_map[ev.table_id])
            data = row_image_bytes(ev)
            got.append(decoder.row_pairs(data) if ev.event_type == 24 else decoder.rows(data))
    # INSERT (1,'hello hello hello','{"a":1}'),(2,'x','[]'); UPDATE id 1; DELETE id 2 (tests/data/README.md)
    one = [{"SignedInteger": 1}, {"String": "hello hello hello"}, {"String": '{"a":1}'}]
    two = [{"SignedInteger": 2}, {"String": "x"}, {"String": "[]"}]
    one_after = [{"SignedInteger": 1}, {"String": "changed value here"}, {"String": '{"a":1}'}]
    assert got == [[one, two], [(one, one_after)], [two]]


def test_mariadb_v2_compressed_rows_skip_their_extra_header():
    """MariaDB can also log v2 row events (with an extra header) compressed: types 169-171."""
    fmt = mariadb_format()
    v1 = next(e for _, e in events(MARIADB) if e[4] == 166)
    extra = struct.pack("<H", 2)  # the extra header's own length, no extra data
    v2 = bytearray(v1[:27] + extra + v1[27:])
    v2[4] = 169
    struct.pack_into("<I", v2, 9, len(v2))
    v2 = bytes(v2[:-4]) + struct.pack("<I", zlib.crc32(bytes(v2[:-4])))
    post = list(fmt.post_header_len)
    post[169 - 1] = 10
    plain_v2 = compression.uncompress_mariadb_event(v2, compression.StreamFormat(True, tuple(post)))
    plain_v1 = compression.uncompress_mariadb_event(v1, fmt)
    assert plain_v2[4] == 30 and crc_ok(plain_v2)
    assert plain_v2[27:29] == extra and plain_v2[29:-4] == plain_v1[27:-4]


def test_mariadb_unknown_algorithm_and_corruption_are_refused():
    fmt = mariadb_format()
    event = bytearray(next(e for _, e in events(MARIADB) if e[4] == 166))
    start = 19 + 8 + 1 + 1  # post-header, column count, one bitmap byte (3 columns)
    assert event[start] & 0xF0 == 0x80
    event[start] |= 0x10  # algorithm 1
    with pytest.raises(DataError) as e:
        compression.uncompress_mariadb_event(bytes(event), fmt)
    assert str(e.value) == ("a MariaDB compressed row event uses compression algorithm 1, which cdc-producer cannot "
                            "decode (only zlib, 0): SET GLOBAL log_bin_compress=OFF on the leader")
    event[start] &= 0x8F
    event[-8] ^= 0xFF  # a byte of the zlib stream
    with pytest.raises(DataError) as e:
        compression.uncompress_mariadb_event(bytes(event), fmt)
    assert str(e.value) == ("a MariaDB compressed row event does not uncompress (Error -3 while decompressing data: "
                            "incorrect data check): the binlog is corrupt")


@pytest.mark.parametrize("name, outer_end, inner", [
    # (type, size) of each event inside; sizes without checksum as listed by the research (+4 here)
    ("transaction_compression.000001", 431, [(2, 71), (19, 45), (30, 36), (16, 27)]),
    ("mysql-bin.compressed", 724, [(2, 76), (19, 82), (31, 775), (16, 27)]),
])
def test_transaction_payload_inner_events(name, outer_end, inner):
    fmt = compression.StreamFormat(checksum=True)
    payload = next(e for _, e in events(fixture(name)) if e[4] == compression.TRANSACTION_PAYLOAD_EVENT)
    out = list(compression.expand(payload, fmt))
    assert [header(e) for e in out] == [(t, size + 4, outer_end) for t, size in inner]
    assert all(crc_ok(e) for e in out)
    no_checksum = compression.StreamFormat(checksum=False)
    bare = payload[:9] + struct.pack("<I", len(payload) - 4) + payload[13:-4]
    assert [header(e) for e in compression.expand(bare, no_checksum)] == [(t, s, outer_end) for t, s in inner]


def _payload_event(body: bytes, end: int = 1000) -> bytes:
    event = struct.pack("<IBIIIH", 1, 40, 1, 19 + len(body) + 4, end, 0) + body
    return event + struct.pack("<I", zlib.crc32(event))


def test_payload_header_of_the_java_test_and_the_go_frame():
    # mysql-binlog-connector-java TransactionPayloadEventDataDeserializerTest: compression 0, payload 451, 960 bytes
    java = (Path(__file__).with_name("data") / "mysql8" / "java_txpayload_event_data.bin").read_bytes()
    event = _payload_event(java)
    head = compression.read_payload_header(event)
    assert (head.compression_type, head.payload_size, head.uncompressed_size) == (0, 451, 960)
    assert [e[4] for e in compression.expand(event, compression.StreamFormat(True))] == [2, 19, 31, 16]
    # go-mysql transaction_payload_event_test.go: a bare zstd frame of 8.0.27 holding 2442 bytes of events
    frame = (Path(__file__).with_name("data") / "mysql8" / "gomysql_txpayload_zstd_8.0.27.bin").read_bytes()
    body = b"\x02\x01\x00" + b"\x03\x03\xfc" + struct.pack("<H", 2442) + b"\x01\x03\xfc" + struct.pack(
        "<H", len(frame)) + b"\x00" + frame
    inner = list(compression.expand(_payload_event(body), compression.StreamFormat(False)))
    assert [e[4] for e in inner] == [2, 19, 30, 19, 31, 19, 32, 16]
    assert sum(len(e) for e in inner) == 2442


def test_uncompressed_payload_and_unknown_compression_type():
    events_inside = [struct.pack("<IBIIIH", 7, 16, 1, 27, 0, 0) + struct.pack("<Q", 42)]
    data = b"".join(events_inside)
    plain = b"\x02\x03\xfc\xff\x00" + b"\x01\x01" + bytes([len(data)]) + b"\x00" + data  # NONE (255, packed)
    out = list(compression.expand(_payload_event(plain, 555), compression.StreamFormat(True)))
    assert [header(e) for e in out] == [(16, 31, 555)] and out[0][19:27] == struct.pack("<Q", 42)
    lz4 = b"\x02\x01\x01" + b"\x01\x01" + bytes([len(data)]) + b"\x00" + data
    with pytest.raises(DataError) as e:
        list(compression.expand(_payload_event(lz4), compression.StreamFormat(True)))
    assert str(e.value) == (
        "a MySQL transaction payload is compressed with type 1, which cdc-producer cannot decode "
        "(only ZSTD (0), NONE (255)): SET GLOBAL binlog_transaction_compression=OFF on the leader")
    truncated = b"\x02\x03\xfc\xff\x00" + b"\x01\x01" + bytes([len(data) - 3]) + b"\x00" + data[:-3]
    with pytest.raises(DataError, match="ends inside an event"):
        list(compression.expand(_payload_event(truncated), compression.StreamFormat(True)))


def test_table_map_metadata_without_checksum_keeps_its_last_field():
    """python-mysql-replication reads table-map metadata as if 4 checksum bytes followed; without them
    (binlog_checksum=NONE) its last field was dropped: here COLUMN_VISIBILITY (a primary key elsewhere)."""
    from pymysqlreplication.row_event import TableMapEvent

    from cdc_producer import library_patches

    data = fixture("binlog-invisible-columns.000001")
    with_crc = [e for e in library_events(data) if isinstance(e, TableMapEvent)]
    without = [e for e in library_events(data, checksum=False) if isinstance(e, TableMapEvent)]
    visibility = [False, False, True, True, True, False]  # f1, f2, f6 INVISIBLE (the recorded CREATE TABLE)
    assert with_crc[0].optional_metadata.visibility_list == visibility
    assert without[0].optional_metadata.visibility_list == visibility
    assert [c.name for c in without[0].columns] == ["f1", "f2", "f3", "f4", "f5", "f6"]
    TableMapEvent._get_optional_meta_data = library_patches._library_optional_meta_data
    try:
        unpatched = [e for e in library_events(data, checksum=False, patch=False) if isinstance(e, TableMapEvent)]
    finally:
        library_patches.apply()
    assert unpatched[0].optional_metadata.visibility_list == []


def test_tagged_gtid_events_are_refused():
    """MySQL 8.3+ logs a transaction with a tagged GTID as GTID_TAGGED_LOG_EVENT (42), which python-mysql-replication
    skips: the transaction would look GTID-less and the resume point would lose it."""
    from cdc_producer.library_patches import refuse_undecoded

    tagged = next(e for _, e in events(fixture("binlog_transaction_with_GTID_TAG.000001")) if e[4] == 42)
    with pytest.raises(DataError) as e:
        refuse_undecoded(tagged)
    assert str(e.value) == (
        "the leader logged a transaction with a tagged GTID (MySQL 8.3+ GTID_TAGGED_LOG_EVENT, from SET "
        "gtid_next='AUTOMATIC:<tag>' or '<uuid>:<tag>:<n>'), which cdc-producer cannot decode: its GTID would be "
        "lost; do not use tagged GTIDs on the leader")
    for _, event in events(fixture("binlog-invisible-columns.000001")):
        refuse_undecoded(event)  # untagged GTIDs and everything else pass
