"""MySQL binary JSON (cdc_producer/mysql_json.py) and partial JSON updates (cdc_producer/partial_json.py).

Semantics from MySQL's sql/json_diff.cc (apply_json_diffs) and json_binary.cc; recorded bytes from
json.binlog.000001 (MySQL 8.0.22) and mysql-binlog-connector-java's JsonPartialUpdateParseTest.
"""

from __future__ import annotations

import json
import struct
from base64 import b64decode
from pathlib import Path

import msgspec
import pytest
from mysql8_binlog import events, fixture, library_events
from pymysqlreplication.row_event import PartialUpdateRowsEvent, UpdateRowsEvent

from cdc_producer import mysql_json, partial_json
from cdc_producer.decode import encode_rows, table_decoder
from cdc_producer.library_patches import row_image_bytes
from cdc_producer.partial_json import INSERT, REMOVE, REPLACE
from cdc_stream.errors import DataError

DATA = Path(__file__).with_name("data") / "mysql8"


# -- a small MySQL binary JSON writer for the hand-made diffs (json_binary.cc, small containers only)
def jbin(value) -> bytes:
    """type byte + value."""
    kind, body = _jvalue(value)
    return bytes([kind]) + body


def _jvalue(value) -> tuple[int, bytes]:
    if value is None or isinstance(value, bool):
        return 0x4, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, int):
        return 0x5, struct.pack("<h", value)
    if isinstance(value, str):
        raw = value.encode()
        assert len(raw) < 128
        return 0xC, bytes([len(raw)]) + raw
    is_object = isinstance(value, dict)
    items = list(value.items()) if is_object else [(None, v) for v in value]
    count = len(items)
    header = 4 + count * (4 if is_object else 0) + count * 3
    keys = b"".join(k.encode() for k, _ in items) if is_object else b""
    key_entries, value_entries, payload = b"", b"", b""
    key_at = header
    value_at = header + len(keys)
    for k, v in items:
        if is_object:
            key_entries += struct.pack("<HH", key_at, len(k.encode()))
            key_at += len(k.encode())
        kind, body = _jvalue(v)
        if kind in (0x4, 0x5):
            value_entries += bytes([kind]) + body.ljust(2, b"\0")
        else:
            value_entries += bytes([kind]) + struct.pack("<H", value_at + len(payload))
            payload += body
    body = key_entries + value_entries + keys + payload
    size = 4 + len(body)
    return (0x0 if is_object else 0x2), struct.pack("<HH", count, size) + body


def diff(op: int, path: str, value=None) -> bytes:
    raw = path.encode()
    out = bytes([op, len(raw)]) + raw
    if op != REMOVE:
        encoded = jbin(value)
        out += bytes([len(encoded)]) + encoded
    return out


# -- the JSON decoder


def test_full_documents_of_the_java_test_including_mysql_8s_sparse_one():
    """JSON_REMOVE(custom_fields, '$."17fc9889..."') of the document in JsonPartialUpdateParseTest: MySQL 5.7
    logs the new document compactly, 8.0 in place with holes; both read as the same document."""
    usd = {"currency": "USD"}
    expected = {
        "1f3a2ea5bc1f60258df20521bee9ac636df69a3a": usd,
        "4f4d99a438f334d7dbf83a1816015b361b848b3b": usd,
        "9021162291be72f5a8025480f44bf44d5d81d07c": "test_field_for_remove_fields_behaviour_3_will_be_removed",
        "9b0ed11532efea688fdf12b28f142b9eb08a80c5": usd,
        "e65ad0762c259b05b4866f7249eabecabadbe577": "test_field_for_remove_fields_behaviour_1_updated",
        "ff2c07edcaa3e987c23fb5cc4fe860bb52becf00": usd,
    }
    for name in ("java_json_BINLOG_UPDATE_57.bin", "java_json_BINLOG_UPDATE_80.bin"):
        doc = mysql_json.decode((DATA / name).read_bytes())
        assert doc == expected and list(doc) == list(expected)


def test_scalars_large_containers_and_corrupt_values():
    assert mysql_json.decode(b"") is None
    assert mysql_json.decode(jbin([1, -2, "é", None, True, False, {"k": []}])) == [1, -2, "é", None, True, False,
                                                                                   {"k": []}]
    assert mysql_json.decode(b"\x0b" + struct.pack("<d", 1.5)) == 1.5
    assert mysql_json.decode(b"\x0a" + struct.pack("<Q", 2**64 - 1)) == 2**64 - 1
    # A large array (4-byte counts and offsets) with an inlined INT32.
    large = b"\x03" + struct.pack("<II", 1, 4 + 4 + 5) + b"\x07" + struct.pack("<i", -70000)
    assert mysql_json.decode(large) == [-70000]
    # An opaque DECIMAL(5,2) 2.00: field type 246, 5 bytes (precision, scale, 3 bytes of MySQL's decimal form).
    assert msgspec.json.encode(mysql_json.decode(b"\x0f\xf6\x05\x05\x02\x80\x02\x00")) == b"2.00"
    with pytest.raises(DataError) as e:
        mysql_json.decode(b"\x0c\x05ab")
    assert str(e.value) == "a MySQL JSON value could not be decoded (string past the end): the binlog is corrupt"


# -- paths and diffs


@pytest.mark.parametrize("text, legs", [
    ("$.age", ("age",)),
    ("$[1]", (1,)),
    ('$."a b".c[last]', ("a b", "c", ("last", 0))),
    ('$.a[last-2]."x\\"y"', ("a", ("last", 2), 'x"y')),
    ("$.ключ[0]", ("ключ", 0)),
])
def test_paths(text, legs):
    assert partial_json.parse_path(text) == legs


@pytest.mark.parametrize("text", ["age", "$.*", "$[1 to 3]", "$**.a"])
def test_paths_that_are_not_diff_paths(text):
    with pytest.raises(ValueError):
        partial_json.parse_path(text)


DOC = {"a": 1, "b": [1, 2, 3], "c": {"d": "x"}, "long key": True}


def test_every_diff_of_a_vector_is_applied_in_order():
    vector = b"".join([
        diff(REPLACE, "$.a", "one"),
        diff(INSERT, "$.b[1]", 9),           # JSON_ARRAY_INSERT: before the old [1]
        diff(INSERT, "$.b[10]", 99),         # past the end: appended
        diff(REMOVE, "$.b[0]"),
        diff(INSERT, "$.c.e", None),         # a new member, MySQL's order: d, e
        diff(REMOVE, '$."long key"'),
        diff(REPLACE, "$.b[last]", False),
        diff(INSERT, "$.aa", [1]),           # root members by length, then bytes: a, b, c, aa
    ])
    diffs = partial_json.read_diffs(vector)
    assert [(d.operation, d.path_text) for d in diffs] == [
        (REPLACE, "$.a"), (INSERT, "$.b[1]"), (INSERT, "$.b[10]"), (REMOVE, "$.b[0]"), (INSERT, "$.c.e"),
        (REMOVE, '$."long key"'), (REPLACE, "$.b[last]"), (INSERT, "$.aa")]
    after = partial_json.apply_diffs(DOC, diffs)
    assert after == {"a": "one", "b": [9, 2, 3, False], "c": {"d": "x", "e": None}, "aa": [1]}
    assert list(after) == ["a", "b", "c", "aa"] and list(after["c"]) == ["d", "e"]
    assert DOC == {"a": 1, "b": [1, 2, 3], "c": {"d": "x"}, "long key": True}  # the before-image is untouched


def test_python_mysql_replication_keeps_only_the_first_diff():
    """The library's read_binary_json (1.0.17) returns one JsonDiff for a vector of several."""
    from pymysqlreplication.packet import BinLogPacketWrapper

    vector = diff(REPLACE, "$.a", 2) + diff(REMOVE, "$.c") + diff(INSERT, "$.z", 1)

    class Bytes:
        def __init__(self, data: bytes) -> None:
            self.data, self.pos = data, 0

        def read(self, n):
            self.pos += n
            return self.data[self.pos - n:self.pos]

        def read_uint_by_size(self, size):
            return int.from_bytes(self.read(size), "little")

    library = BinLogPacketWrapper.read_binary_json(Bytes(struct.pack("<I", len(vector)) + vector), 4, True)
    assert (library.op.value, library.path) == (REPLACE, b"$.a")  # and nothing of the other two
    assert [(d.operation, d.path_text, d.value) for d in partial_json.read_diffs(vector)] == [
        (REPLACE, "$.a", 2), (REMOVE, "$.c", None), (INSERT, "$.z", 1)]


@pytest.mark.parametrize("vector, message", [
    (diff(REPLACE, "$.missing", 1), "REPLACE '$.missing'"),
    (diff(INSERT, "$.a", 1), "INSERT '$.a'"),
    (diff(REMOVE, "$.b[3]"), "REMOVE '$.b[3]'"),
    (diff(INSERT, "$.a.x", 1), "INSERT '$.a.x'"),
])
def test_diffs_that_do_not_apply_are_refused(vector, message):
    with pytest.raises(partial_json.PartialJsonError) as e:
        partial_json.apply_diffs(DOC, partial_json.read_diffs(vector))
    assert str(e.value) == (f"the JSON diff {message} does not apply to the before-image's document: the row on the "
                            "leader is not the one the binlog describes")


# -- row images


def _int_reader(data: bytes, pos: int):
    return {"SignedInteger": struct.unpack_from("<i", data, pos)[0]}, pos + 4


def _json_reader(data: bytes, pos: int):
    size = struct.unpack_from("<I", data, pos)[0]
    return {"Json": mysql_json.decode(data[pos + 4:pos + 4 + size])}, pos + 4 + size


COLUMNS = [partial_json.PartialColumn("id", _int_reader, False, 4),
           partial_json.PartialColumn("j", _json_reader, True, 4),
           partial_json.PartialColumn("k", _json_reader, True, 4)]


def _image(*parts: bytes, nulls: int = 0) -> bytes:
    return bytes([nulls]) + b"".join(parts)


def _json_value(value) -> bytes:
    raw = jbin(value)
    return struct.pack("<I", len(raw)) + raw


def test_partial_rows_with_a_full_before_image():
    vector = diff(REPLACE, "$.a", 5) + diff(INSERT, "$.n", "new")
    before = _image(struct.pack("<i", 7), _json_value({"a": 1}), _json_value([1]))
    after = (b"\x01" + b"\x01"  # value_options PARTIAL_JSON_UPDATES; partial bits: j yes, k no
             + _image(struct.pack("<i", 7), struct.pack("<I", len(vector)) + vector, _json_value([2])))
    pairs = partial_json.partial_rows("db.t", COLUMNS, b"\x07", b"\x07", before + after)
    assert pairs == [(
        [{"SignedInteger": 7}, {"Json": {"a": 1}}, {"Json": [1]}],
        [{"SignedInteger": 7}, {"Json": {"a": 5, "n": "new"}}, {"Json": [2]}],
    )]
    assert json.loads(partial_json.pair_json(pairs[0])) == {
        "before_cols": [{"SignedInteger": 7}, {"Json": {"a": 1}}, {"Json": [1]}],
        "after_cols": [{"SignedInteger": 7}, {"Json": {"a": 5, "n": "new"}}, {"Json": [2]}]}
    # value_options 0: a plain after-image, as in UPDATE_ROWS
    plain = b"\x00" + _image(struct.pack("<i", 7), _json_value({"b": 2}), _json_value([2]))
    assert partial_json.partial_rows("db.t", COLUMNS, b"\x07", b"\x07", before + plain)[0][1][1] == {
        "Json": {"b": 2}}


def test_partial_rows_refusals():
    vector = diff(REPLACE, "$.a", 5)
    after = b"\x01\x01" + _image(struct.pack("<i", 7), struct.pack("<I", len(vector)) + vector, _json_value([2]))
    minimal_before = _image(struct.pack("<i", 7))  # binlog_row_image=MINIMAL: only the key
    with pytest.raises(DataError) as e:
        partial_json.partial_rows("db.t", COLUMNS, b"\x01", b"\x07", minimal_before + after)
    assert str(e.value) == (
        "a partial JSON update of db.t.j (binlog_row_value_options=PARTIAL_JSON) was logged without the column's old "
        "value in the before-image (binlog_row_image is not FULL in the session that wrote it): the new value cannot "
        "be known; SET GLOBAL binlog_row_image='FULL' on the leader and make sure no session overrides it")
    null_before = _image(struct.pack("<i", 7), _json_value([1]), nulls=0b010)
    with pytest.raises(partial_json.PartialJsonError) as null:
        partial_json.partial_rows("db.t", COLUMNS, b"\x07", b"\x07", null_before + after)
    assert str(null.value) == ("a partial JSON update of db.t.j applies to a NULL document: the row on the leader is "
                               "not the one the binlog describes")
    with pytest.raises(DataError, match="the binlog is corrupt"):
        partial_json.partial_rows("db.t", COLUMNS, b"\x07", b"\x07", _image(struct.pack("<i", 7)) + b"\x00")


def test_recorded_partial_update_of_json_binlog():
    """json.binlog.000001: CREATE TABLE t(id INT PRIMARY KEY AUTO_INCREMENT, json_col JSON, name VARCHAR(100)
    AS (json_col->>'$.name'), age INT AS (json_col->'$.age')); a full UPDATE, then a partial one logged with a
    MINIMAL row image. The partial after-images carry one diff each (REPLACE $.age) and MySQL's own generated
    columns computed from the new documents: applying each diff to the document of the full update's
    after-image (the row's value before the partial update) must give exactly those."""
    events = library_events(fixture("json.binlog.000001"))
    full = next(e for e in events if type(e) is UpdateRowsEvent)
    partial = next(e for e in events if isinstance(e, PartialUpdateRowsEvent))
    table = partial.table_map[partial.table_id]
    before_docs = {row[0][0]["SignedInteger"]: row[1][1]["Json"]
                   for row in table_decoder(full.table_map[full.table_id]).row_pairs(row_image_bytes(full))}
    assert before_docs[1] == {"age": 25, "data": "xxxxxxxxxx", "name": "Joe"}
    decoder = table_decoder(table)
    spec = [partial_json.PartialColumn(f"c{i}", r, c.type == 245, c.length_size if c.type == 245 else 0)
            for i, (r, c) in enumerate(zip(decoder.readers, table.columns))]
    rows = partial_json.read_rows(spec, partial.columns_present_bitmap, partial.columns_present_bitmap2,
                                  row_image_bytes(partial))
    assert len(rows) == 6
    for row in rows:
        row_id = row.before[0]["SignedInteger"]
        assert row.before[1:] == [partial_json.MISSING] * 3 and row.after[0] is partial_json.MISSING
        assert [(d.operation, d.path_text) for d in row.diffs[1]] == [(REPLACE, "$.age")]
        new = partial_json.apply_diffs(before_docs[row_id], row.diffs[1])
        # (no charset in a MINIMAL table map: the name travels as its bytes)
        assert new["age"] == row.after[3]["SignedInteger"] and new["name"] == b64decode(row.after[2]["Blob"]).decode()
        assert new == {**before_docs[row_id], "age": before_docs[row_id]["age"] + 1}
    # Through the producer's decoding the same event is refused, naming the fix.
    with pytest.raises(DataError) as e:
        encode_rows(partial)
    assert str(e.value) == (
        "a partial JSON update of mysql.t.column #2 (binlog_row_value_options=PARTIAL_JSON) was logged without the "
        "column's old value in the before-image (binlog_row_image is not FULL in the session that wrote it): the new "
        "value cannot be known; SET GLOBAL binlog_row_image='FULL' on the leader and make sure no session overrides it")


def _full_images(data: bytes) -> list[bytes]:
    """The row images of json.binlog's table t (id INT, json_col JSON, name VARCHAR(100) in utf8mb4, age INT)
    carrying all four columns: null bitmap, id, json (4-byte length), name (2-byte length), age."""
    out, pos = [], 0
    while pos < len(data):
        start = pos
        pos += 1 + 4
        pos += 4 + struct.unpack_from("<I", data, pos)[0]
        pos += 2 + struct.unpack_from("<H", data, pos)[0]
        pos += 4
        out.append(data[start:pos])
    assert pos == len(data)
    return out


def test_a_partial_update_with_full_images_through_the_library_event():
    """The recorded partial update of json.binlog, as MySQL logs it with binlog_row_image=FULL: each row's
    before-image is the recorded full update's after-image (the row's value before the partial update), its
    after-image the recorded diffs and generated columns plus the id. Read through python-mysql-replication's
    PartialUpdateRowsEvent (header, bitmaps) and event_rows: whole documents, as the generated columns say."""
    data = fixture("json.binlog.000001")
    raw = dict(events(data))
    full, partial = raw[2612], raw[3750]
    head = 19 + 10  # common header, post-header (table id, flags, extra-data length 2)
    assert full[head:head + 3] == b"\x04\xff\xff" and partial[head:head + 3] == b"\x04\x01\x0e"
    befores = _full_images(full[head + 3:-4])[1::2]  # the full update's after-images
    rows, pos, body = [], 0, partial[head + 3:-4]
    for before in befores:
        pos += 1 + 4  # the recorded before-image: null bitmap + id
        options = body[pos:pos + 2]  # value_options = PARTIAL_JSON_UPDATES, partial bitmap: json_col
        pos += 3  # ... and the null bitmap of json, name, age
        start = pos
        pos += 4 + struct.unpack_from("<I", body, pos)[0]
        pos += 2 + struct.unpack_from("<H", body, pos)[0]
        pos += 4
        rows.append(before + options + b"\x00" + before[1:5] + body[start:pos])
    assert pos == len(body) and options == b"\x01\x01"
    event = bytearray(partial[:head] + b"\x04\x0f\x0f" + b"".join(rows) + b"\0\0\0\0")  # (CRC not checked)
    struct.pack_into("<I", event, 9, len(event))
    partial_event = library_events(data[:3750] + bytes(event))[-1]
    assert isinstance(partial_event, PartialUpdateRowsEvent)
    table = partial_event.table_map[partial_event.table_id]
    pairs = partial_json.event_rows(partial_event, table.columns, table_decoder(table), row_image_bytes(partial_event))
    docs = [after[1]["Json"] for _, after in pairs]
    assert docs == [
        {"age": 26, "data": "xxxxxxxxxx", "name": "Joe"}, {"age": 34, "data": "yyyyyyyyyy", "name": "Sue"},
        {"age": 42, "data": "zzzzzzzzzz", "name": "Pete"}, {"age": 26, "data": "xxxxxxxxxx", "name": "Joe"},
        {"age": 34, "data": "yyyyyyyyyy", "name": "Sue"}, {"age": 42, "data": "zzzzzzzzzz", "name": "Pete"},
    ]
    assert [after[3] for _, after in pairs] == [{"SignedInteger": d["age"]} for d in docs]  # MySQL's generated age
    assert [before[1]["Json"]["age"] + 1 for before, _ in pairs] == [d["age"] for d in docs]
    assert [before[0] for before, _ in pairs] == [after[0] for _, after in pairs] == [
        {"SignedInteger": n} for n in range(1, 7)]
