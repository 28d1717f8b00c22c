"""Type fidelity end to end: every column type at its extremes, through the real producer and consumer.

The leader gets a type matrix (every MySQL/MariaDB column type, rows at each
type's minimum, maximum, zero/special values and NULL), plus text in several
charsets and a 16 MB BLOB; rows are inserted, updated (primary key included)
and deleted. The follower runs with hostile session defaults (time zone +05:00,
an sql_mode full of options that change values) to show the consumer does not
depend on them. Then the follower must equal the leader value by value
(SELECT *) and byte by byte (CHECKSUM TABLE), and a few tagged values on the
topic are checked exactly. decode.py is also compared with
python-mysql-replication's own decoding of the same binlog events: equal
everywhere, except where the library is known to lose information.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import time
from pathlib import Path

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import HeartbeatLogEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_producer import charsets, decode
from cdc_producer.library_patches import row_image_bytes
from cdc_stream import column_types, values

DB = "cdc_types"
FILTERS = f'include_dbs = ["{DB}"]'
SYNC_TIMEOUT = 180.0  # other engineers' tests share the 2 cores

# ---------------------------------------------------------------------------
# The type matrix: column -> SQL type, and rows as column -> SQL literal (missing = NULL).

MATRIX_COLUMNS = {
    "id": "INT NOT NULL PRIMARY KEY",
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT", "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED",
    "bi": "BIGINT", "biu": "BIGINT UNSIGNED",
    "d65": "DECIMAL(65,30)", "d10": "DECIMAL(10,2)", "d55": "DECIMAL(5,5)", "d30u": "DECIMAL(30,0) UNSIGNED",
    "f": "FLOAT", "dbl": "DOUBLE",
    "b1": "BIT(1)", "b10": "BIT(10)", "b64": "BIT(64)",
    "dt": "DATE", "dtm0": "DATETIME", "dtm3": "DATETIME(3)", "dtm6": "DATETIME(6)",
    "ts0": "TIMESTAMP NULL DEFAULT NULL", "ts2": "TIMESTAMP(2) NULL DEFAULT NULL",
    "ts6": "TIMESTAMP(6) NULL DEFAULT NULL",
    "tm0": "TIME", "tm1": "TIME(1)", "tm3": "TIME(3)", "tm5": "TIME(5)", "tm6": "TIME(6)",
    "yr": "YEAR",
    "c": "CHAR(10)", "vc": "VARCHAR(300)", "tt": "TINYTEXT", "tx": "TEXT", "ltx": "LONGTEXT",
    "lat": "VARCHAR(300) CHARACTER SET latin1", "cyr": "VARCHAR(20) CHARACTER SET cp1251",
    "bn": "BINARY(8)", "vb": "VARBINARY(300)", "bl": "BLOB",
    "en": "ENUM('a','b','é')", "st": "SET('x','y','z')", "st2": "SET('b','a')",
    "js": "JSON", "g": "GEOMETRY", "pt": "POINT",
}
ALL_BYTES = "X'" + bytes(range(256)).hex() + "'"
WKB_POINT = struct.pack("<BIdd", 1, 1, -1.5, 1e300)
JSON_TEXT = '{"k": [1, 2.50, "é😀"], "n": null,  "s": "a\\"b"}'

ROW_MIN = {
    "id": "1", "ti": "-128", "tiu": "0", "si": "-32768", "siu": "0", "mi": "-8388608", "miu": "0",
    "i": "-2147483648", "iu": "0", "bi": "-9223372036854775808", "biu": "0",
    "d65": "-" + "9" * 35 + "." + "9" * 30, "d10": "-99999999.99", "d55": "-0.99999", "d30u": "0",
    "f": "-3.402823466e38", "dbl": "-1.7976931348623157e308", "b1": "0", "b10": "0", "b64": "0",
    "dt": "'0000-00-00'", "dtm0": "'0000-00-00 00:00:00'", "dtm3": "'0000-00-00 00:00:00.000'",
    "dtm6": "'1000-01-01 00:00:00.000000'", "ts0": "'1970-01-01 00:00:01'", "ts2": "'1970-01-01 00:00:01.01'",
    "ts6": "'1970-01-01 00:00:01.000001'",
    "tm0": "'-838:59:59'", "tm1": "'-838:59:58.9'", "tm3": "'-838:59:58.999'", "tm5": "'-838:59:58.99999'",
    "tm6": "'-838:59:58.999999'", "yr": "1901",
    "c": "''", "vc": "''", "tt": "''", "tx": "''", "ltx": "''", "lat": "''", "cyr": "''",
    "bn": "''", "vb": "''", "bl": "''", "en": "'a'", "st": "''", "st2": "''", "js": "'[]'",
    "g": "ST_GeomFromText('POINT(0 0)')", "pt": "ST_GeomFromText('POINT(0 0)')",
}
ROW_MAX = {
    "id": "2", "ti": "127", "tiu": "255", "si": "32767", "siu": "65535", "mi": "8388607", "miu": "16777215",
    "i": "2147483647", "iu": "4294967295", "bi": "9223372036854775807", "biu": "18446744073709551615",
    "d65": "9" * 35 + "." + "9" * 30, "d10": "99999999.99", "d55": "0.99999", "d30u": "9" * 30,
    "f": "3.402823466e38", "dbl": "1.7976931348623157e308", "b1": "1", "b10": "1023", "b64": "18446744073709551615",
    "dt": "'9999-12-31'", "dtm0": "'9999-12-31 23:59:59'", "dtm3": "'9999-12-31 23:59:59.999'",
    "dtm6": "'9999-12-31 23:59:59.999999'", "ts0": "'2038-01-19 03:14:07'", "ts2": "'2038-01-19 03:14:07.99'",
    "ts6": "'2038-01-19 03:14:07.999999'",
    "tm0": "'838:59:59'", "tm1": "'838:59:58.9'", "tm3": "'838:59:58.999'", "tm5": "'838:59:58.99999'",
    "tm6": "'838:59:58.999999'", "yr": "2155",
    "c": "'😀é0123456'", "vc": "REPEAT('😀', 300)", "tt": "REPEAT('x', 255)", "tx": "REPEAT('ü', 30000)",
    "ltx": "REPEAT('😀ab', 100000)", "lat": ALL_BYTES, "cyr": "'Жёлтый'",
    "bn": "X'00FF00FF00FF0000'", "vb": ALL_BYTES, "bl": ALL_BYTES, "en": "'é'", "st": "'x,y,z'", "st2": "'a,b'",
    "js": "'" + JSON_TEXT.replace("\\", "\\\\") + "'",
    "g": "ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0),(1 1,2 1,2 2,1 1))', 4326)",
    "pt": f"ST_GeomFromWKB(X'{WKB_POINT.hex()}')",
}
ROW_NULL = {"id": "3"}
ROW_SPECIAL = {  # zero and odd values, NULLs between them
    "id": "4", "ti": "0", "tiu": "1", "i": "-1", "biu": "9223372036854775808", "bi": "-1",
    "d65": "0.000000000000000000000000000001", "d10": "0.00", "d55": "0.00001", "d30u": "1",
    "f": "1.17549435e-38", "dbl": "4.9406564584124654e-324", "b10": "512", "b64": "9223372036854775808",
    "dt": "'2020-00-00'", "dtm0": "'2021-02-30 01:02:03'", "dtm3": "'2020-01-00 00:00:00.001'",
    "dtm6": "'0000-00-00 00:00:00.000000'", "ts0": "'0000-00-00 00:00:00'", "ts6": "'2001-02-03 04:05:06.5'",
    "tm0": "'-00:00:01'", "tm1": "'-12:34:56.7'", "tm3": "'-00:00:01.001'", "tm5": "'-00:00:00.00001'",
    "tm6": "'-00:00:00.000001'", "yr": "0",
    "c": "'a  '", "vc": "'a '", "tt": "'x\\0y\\\\z''\"'", "lat": "'café ß'", "cyr": "X'C6E5EBF2FBE9'",
    "bn": "'ab'", "vb": "X'00'", "bl": "X'0000'", "en": "'not-a-label'", "st": "''", "st2": "'b'",
    "js": "'\"just a string\"'", "pt": "ST_GeomFromText('POINT(-0 -1e-300)')",
}
ROWS = [ROW_MIN, ROW_MAX, ROW_NULL, ROW_SPECIAL]

# Text in more charsets: String when the charset maps to Unicode exactly, Blob (exact bytes) otherwise.
CHARSET_COLUMNS = {
    "id": "INT NOT NULL PRIMARY KEY",
    "u8": "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci",
    "u3": "VARCHAR(20) CHARACTER SET utf8mb3",
    "ucs": "VARCHAR(20) CHARACTER SET ucs2 COLLATE ucs2_uca1400_ai_ci",
    "u16": "CHAR(5) CHARACTER SET utf16", "u16le": "VARCHAR(5) CHARACTER SET utf16le",
    "u32": "TEXT CHARACTER SET utf32", "koi": "VARCHAR(10) CHARACTER SET koi8r",
    "greek": "VARCHAR(10) CHARACTER SET greek", "sjis": "VARCHAR(10) CHARACTER SET sjis",
    "l1en": "ENUM('é','b') CHARACTER SET latin1", "l1set": "SET('ü','x') CHARACTER SET latin1",
    "asc": "VARCHAR(10) CHARACTER SET ascii",
}
CHARSET_ROWS = [
    {"id": "1", "u8": "'Ünï😀 '", "u3": "'€uro'", "ucs": "'ĀĒĪ '", "u16": "'😀x'", "u16le": "'😀y'",
     "u32": "'😀z\\0'", "koi": "'Привет'", "greek": "'αβγ'", "sjis": "'日本語'", "l1en": "'é'",
     "l1set": "'ü,x'", "asc": "'plain'"},
    {"id": "2"},
]

OLD_FORMAT_COLUMNS = {"id": "INT NOT NULL PRIMARY KEY", "t": "TIME", "d": "DATETIME", "ts": "TIMESTAMP NULL DEFAULT NULL"}
OLD_FORMAT_ROWS = [
    {"id": "1", "t": "'-838:59:59'", "d": "'0000-00-00 00:00:00'", "ts": "'2038-01-19 03:14:07'"},
    {"id": "2", "t": "'838:59:59'", "d": "'2020-00-03 01:02:03'", "ts": "'0000-00-00 00:00:00'"},
    {"id": "3"},
]


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


MYSQL_LATIN1 = "".join(
    bytes([b]).decode("cp1252") if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else chr(b) for b in range(256)
)

# (table, row id, column) -> the exact tagged value on the topic (in the row's first INSERT).
EXPECTED_TAGS = {
    ("matrix", 1, "bi"): {"SignedInteger": -9223372036854775808},
    ("matrix", 2, "biu"): {"UnsignedInteger": 18446744073709551615},
    ("matrix", 1, "mi"): {"SignedInteger": -8388608},
    ("matrix", 2, "miu"): {"UnsignedInteger": 16777215},
    ("matrix", 1, "d65"): {"Decimal": "-" + "9" * 35 + "." + "9" * 30},
    ("matrix", 4, "d65"): {"Decimal": "0.000000000000000000000000000001"},
    ("matrix", 4, "d10"): {"Decimal": "0.00"},
    ("matrix", 1, "d55"): {"Decimal": "-0.99999"},
    ("matrix", 2, "f"): {"Float": 3.4028234663852886e38},
    ("matrix", 2, "dbl"): {"Double": 1.7976931348623157e308},
    ("matrix", 4, "dbl"): {"Double": 5e-324},
    ("matrix", 2, "b64"): {"Bit": 18446744073709551615},
    ("matrix", 4, "b10"): {"Bit": 512},
    ("matrix", 1, "dt"): {"Date": {"year": 0, "month": 0, "day": 0}},
    ("matrix", 4, "dt"): {"Date": {"year": 2020, "month": 0, "day": 0}},
    ("matrix", 4, "dtm0"): {"DateTime": {"year": 2021, "month": 2, "day": 30, "hour": 1, "minute": 2, "second": 3,
                                         "subsecond": 0}},
    ("matrix", 2, "dtm6"): {"DateTime": {"year": 9999, "month": 12, "day": 31, "hour": 23, "minute": 59,
                                         "second": 59, "subsecond": 999999}},
    ("matrix", 2, "ts6"): {"Timestamp": {"unix_time": 2147483647, "subsecond": 999999}},
    ("matrix", 1, "ts2"): {"Timestamp": {"unix_time": 1, "subsecond": 10000}},
    ("matrix", 4, "ts0"): {"Timestamp": {"unix_time": 0, "subsecond": 0}},
    ("matrix", 1, "tm0"): {"Time": {"hours": 838, "minutes": 59, "seconds": 59, "subseconds": 0, "negative": True}},
    ("matrix", 4, "tm1"): {"Time": {"hours": 12, "minutes": 34, "seconds": 56, "subseconds": 700000, "negative": True}},
    ("matrix", 4, "tm6"): {"Time": {"hours": 0, "minutes": 0, "seconds": 0, "subseconds": 1, "negative": True}},
    ("matrix", 2, "tm6"): {"Time": {"hours": 838, "minutes": 59, "seconds": 58, "subseconds": 999999}},
    ("matrix", 4, "yr"): {"Year": 0},
    ("matrix", 2, "yr"): {"Year": 2155},
    ("matrix", 2, "c"): {"String": "😀é0123456"},
    ("matrix", 4, "c"): {"String": "a"},
    ("matrix", 4, "vc"): {"String": "a "},
    ("matrix", 4, "tt"): {"String": "x\0y\\z'\""},
    ("matrix", 2, "lat"): {"String": MYSQL_LATIN1},
    ("matrix", 2, "cyr"): {"String": "Жёлтый"},
    ("matrix", 4, "cyr"): {"String": "Желтый"},
    ("matrix", 2, "bn"): {"Blob": b64(bytes.fromhex("00FF00FF00FF0000"))},
    ("matrix", 4, "bn"): {"Blob": b64(b"ab\0\0\0\0\0\0")},
    ("matrix", 2, "bl"): {"Blob": b64(bytes(range(256)))},
    ("matrix", 2, "en"): {"Enum": "é"},
    ("matrix", 4, "en"): {"Enum": ""},
    ("matrix", 2, "st"): {"Set": ["x", "y", "z"]},
    ("matrix", 2, "st2"): {"Set": ["b", "a"]},
    ("matrix", 4, "st"): {"Set": []},
    ("matrix", 2, "js"): {"String": JSON_TEXT},
    ("matrix", 2, "pt"): {"Geometry": {"srid": 0, "wkb": b64(WKB_POINT)}},
    ("matrix", 3, "f"): "Null",
    ("charsets", 1, "u8"): {"String": "Ünï😀 "},
    ("charsets", 1, "ucs"): {"String": "ĀĒĪ "},
    ("charsets", 1, "u16"): {"String": "😀x"},
    ("charsets", 1, "u32"): {"String": "😀z\0"},
    ("charsets", 1, "koi"): {"String": "Привет"},
    ("charsets", 1, "sjis"): {"Blob": b64("日本語".encode("shift_jis"))},
    ("charsets", 1, "l1en"): {"Enum": "é"},
    ("charsets", 1, "l1set"): {"Set": ["ü", "x"]},
    ("old_format", 1, "t"): {"Time": {"hours": 838, "minutes": 59, "seconds": 59, "subseconds": 0, "negative": True}},
    ("old_format", 1, "d"): {"DateTime": {"year": 0, "month": 0, "day": 0, "hour": 0, "minute": 0, "second": 0,
                                          "subsecond": 0}},
    ("old_format", 2, "d"): {"DateTime": {"year": 2020, "month": 0, "day": 3, "hour": 1, "minute": 2, "second": 3,
                                          "subsecond": 0}},
    ("old_format", 1, "ts"): {"Timestamp": {"unix_time": 2147483647, "subsecond": 0}},
}

# The follower's hostile defaults for the test (restored afterwards).
HOSTILE_GLOBALS = {
    "time_zone": "'+05:00'",
    "sql_mode": "'ANSI_QUOTES,NO_BACKSLASH_ESCAPES,PAD_CHAR_TO_FULL_LENGTH,EMPTY_STRING_IS_NULL,"
                "NO_ZERO_DATE,NO_ZERO_IN_DATE,STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,TIME_ROUND_FRACTIONAL'",
    "character_set_client": "latin1", "character_set_connection": "latin1", "character_set_results": "latin1",
}


def create_sql(table: str, columns: dict[str, str]) -> str:
    return f"CREATE TABLE `{table}` (" + ", ".join(f"`{c}` {t}" for c, t in columns.items()) + ")"


def insert_sql(table: str, columns: dict[str, str], row: dict[str, str], row_id: int | None = None) -> str:
    vals = [row.get(c, "NULL") for c in columns]
    if row_id is not None:
        vals[0] = str(row_id)
    return f"INSERT INTO `{table}` VALUES (" + ", ".join(vals) + ")"


def update_sql(table: str, columns: dict[str, str], row: dict[str, str], where_id: int) -> str:
    sets = ", ".join(f"`{c}` = {row.get(c, 'NULL')}" for c in columns if c != "id")
    return f"UPDATE `{table}` SET {sets} WHERE id = {where_id}"


def leader_session(leader) -> pymysql.Connection:
    """A leader connection that may write zero dates, invalid dates and ENUM error values."""
    conn = leader.connect()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET sql_mode = 'ALLOW_INVALID_DATES'")
    return conn


def run(conn: pymysql.Connection, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def matrix_workload(conn: pymysql.Connection, leader) -> None:
    """Create, insert, update (every column, and the primary key) and delete across the matrix."""
    run(conn, f"CREATE DATABASE `{DB}` CHARACTER SET utf8mb4", f"USE `{DB}`",
        create_sql("matrix", MATRIX_COLUMNS), create_sql("charsets", CHARSET_COLUMNS))
    # A table in the pre-MySQL-5.6 temporal format (MariaDB still reads and writes it).
    run(conn, "SET GLOBAL mysql56_temporal_format = OFF")
    try:
        run(conn, create_sql("old_format", OLD_FORMAT_COLUMNS))
    finally:
        run(conn, "SET GLOBAL mysql56_temporal_format = ON")
    for row in ROWS:
        run(conn, insert_sql("matrix", MATRIX_COLUMNS, row))
    run(conn, *[insert_sql("charsets", CHARSET_COLUMNS, r) for r in CHARSET_ROWS])
    run(conn, *[insert_sql("old_format", OLD_FORMAT_COLUMNS, r) for r in OLD_FORMAT_ROWS])
    # Updates: min -> special, NULL -> max, special -> NULL, then copies of every
    # variant under new ids, a primary-key change and a delete, in one transaction.
    run(conn, "BEGIN",
        update_sql("matrix", MATRIX_COLUMNS, ROW_SPECIAL, 1),
        update_sql("matrix", MATRIX_COLUMNS, ROW_MAX, 3),
        update_sql("matrix", MATRIX_COLUMNS, ROW_NULL, 4),
        *[insert_sql("matrix", MATRIX_COLUMNS, row, 10 + n) for n, row in enumerate(ROWS)],
        "UPDATE matrix SET id = 100 WHERE id = 2",
        "DELETE FROM matrix WHERE id = 12",
        "COMMIT")
    run(conn, "UPDATE charsets SET u8 = 'x', ucs = 'y', u16 = 'z', sjis = 'カ', l1en = 'b', l1set = 'ü' WHERE id = 1",
        "UPDATE old_format SET t = '-00:00:01', d = '2021-02-30 00:00:00' WHERE id = 2")


def set_globals(server, settings: dict[str, str]) -> dict[str, str]:
    """SET GLOBAL each setting; returns the previous values (quoted) for restoring."""
    names = list(settings)
    old = server.query("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in names))[0]
    server.execute(*[f"SET GLOBAL {n} = {v}" for n, v in settings.items()])
    return {n: pymysql.converters.escape_str(str(v)) for n, v in zip(names, old)}


def table_checksum(server, table: str) -> int:
    return server.query(f"CHECKSUM TABLE `{DB}`.`{table}`")[0][1]


def exact_rows(server, table: str) -> list[tuple]:
    """SELECT * plus, for FLOAT/DOUBLE, the exact double (text results round FLOAT to 6 digits)."""
    return server.query(f"SELECT *, HEX(CAST(f AS DOUBLE)), HEX(dbl), HEX(g), HEX(pt) FROM `{DB}`.`{table}` ORDER BY id"
                        if table == "matrix" else f"SELECT * FROM `{DB}`.`{table}` ORDER BY id")


def first_insert_values(events: list[dict]) -> dict[tuple[str, int, str], object]:
    """(table, id, column) -> tagged value, from the first Add event of each row."""
    seen: dict = {}
    for ev in events:
        add = ev["operation"].get("Add")
        if not add:
            continue
        table = ev["uri"].rsplit("/", 1)[1]
        for row in add["rows"]:
            cols = dict(zip(ev["columns"], row["cols"]))
            row_id = cols["id"]["SignedInteger"]
            for name, value in cols.items():
                seen.setdefault((table, row_id, name), value)
    return seen


@pytest.mark.parametrize("rows", ["sql", "binlog"])
def test_type_matrix(pipeline, rows):
    """Every type, through the SQL path (literals.py) and through BINLOG replay (the follower's row applier)."""
    leader, follower = pipeline.leader, pipeline.follower
    restore = set_globals(follower, HOSTILE_GLOBALS)
    try:
        producer = pipeline.start_producer(pipeline.producer_profile(filters=FILTERS))
        consumer = pipeline.start_consumer(pipeline.consumer_profile(filters=FILTERS, extra=f'[replay]\nrows = "{rows}"'))
        start_gtid = leader.gtid()
        conn = leader_session(leader)
        try:
            matrix_workload(conn, leader)
        finally:
            conn.close()
        pipeline.wait_synced(timeout=SYNC_TIMEOUT)
    finally:
        follower.execute(*[f"SET GLOBAL {n} = {v}" for n, v in restore.items()])

    assert producer.stop() == 0 and consumer.stop() == 0, producer.stderr + consumer.stderr
    assert "Traceback" not in producer.stderr + consumer.stderr
    for table in ("matrix", "charsets"):
        assert exact_rows(follower, table) == exact_rows(leader, table), table
    old_format = exact_rows(leader, "old_format")
    if rows == "binlog":
        # The follower creates old_format in the current format, as a native replica does, and the row
        # applier converting the leader's old-format rows zeroes the invalid date, as a native replica's
        # does (docs/compatibility.md, old_temporal_format); the SQL path writes the leader's value.
        assert old_format[1][2] == "2021-02-30 00:00:00"
        old_format[1] = (*old_format[1][:2], "0000-00-00 00:00:00", *old_format[1][3:])
    assert exact_rows(follower, "old_format") == old_format
    assert [r[0] for r in exact_rows(follower, "matrix")] == [1, 3, 4, 10, 11, 13, 100]
    for table in ("matrix", "charsets"):  # old_format is rebuilt in the new format on the follower
        assert table_checksum(follower, table) == table_checksum(leader, table), table

    events = pipeline.events()
    tags = first_insert_values(events)
    for key, expected in EXPECTED_TAGS.items():
        assert tags[key] == expected, key
    pk_change = [e for e in events if "Update" in e["operation"] and e["uri"].endswith("/matrix")
                 and any(r["after_cols"][0] == {"SignedInteger": 100} for r in e["operation"]["Update"]["rows"])]
    assert len(pk_change) == 1 and pk_change[0]["pk"] == ["id"]

    validate_events(events)
    check_against_library(leader, start_gtid)


def validate_events(events: list[dict]) -> None:
    """Every event against cdc_stream/event.schema.json."""
    import jsonschema

    schema = json.loads((Path(values.__file__).parent / "event.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for ev in events:
        errors = sorted(validator.iter_errors(ev), key=str)
        assert not errors, f"{ev['sequence']}: {errors[0].message}"


# ---------------------------------------------------------------------------
# decode.py vs python-mysql-replication on the same binlog events


def library_loss(column, ours, theirs) -> str | None:
    """Why python-mysql-replication's value differs from ours, if it is a known loss of the library."""
    t = column.type
    tag = values.tag_of(ours)
    if theirs == "Null" and tag in ("Date", "DateTime"):
        return "zero or invalid date parts read as None"
    if tag == "Set" and theirs == "Null" and ours["Set"] == []:
        return "empty SET read as None"
    if tag == "Set" and isinstance(theirs, dict) and theirs.get("Set") == sorted(ours["Set"]):
        return "SET labels lose their definition order (a Python set)"
    if tag == "Year" and ours["Year"] == 0:
        return "YEAR 0000 read as 1900"
    if tag == "Time" and t == FIELD_TYPE.TIME2 and ours["Time"].get("negative"):
        return "negative TIME(1..5) misread"
    if tag == "Time" and t == FIELD_TYPE.TIME:
        return "old-format negative TIME misread"
    if tag == "Blob" and t == FIELD_TYPE.STRING and theirs == values.blob_tag(base64.b64decode(ours["Blob"]).rstrip(b"\0")):
        return "BINARY(n) loses its trailing zero bytes"
    charset = charsets.charset_of(column)
    if tag == "Blob" and charset not in column_types.EXACT_CHARSETS | {"binary"}:
        return "our choice: text without an exact Unicode mapping travels as its bytes"
    if charset == "latin1" and tag == "String":
        return "latin1 read as cp1252, undefined bytes dropped"
    if charset in ("ucs2", "utf16", "utf16le", "utf32", "utf8mb4") and tag in ("String", "Blob"):
        return f"{charset} text misdecoded (BOM-guessing codec or unknown uca1400 collation)"
    if tag in ("Enum", "Set") and charset == "latin1":
        return "non-UTF-8 ENUM/SET labels lost"
    return None


_INTS = {FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.LONG, FIELD_TYPE.INT24, FIELD_TYPE.LONGLONG}
_TEXT = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB}
_KINDS = {
    FIELD_TYPE.FLOAT: "float", FIELD_TYPE.DOUBLE: "double", FIELD_TYPE.NEWDECIMAL: "decimal", FIELD_TYPE.DATE: "date",
    FIELD_TYPE.DATETIME: "datetime", FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.TIME: "time",
    FIELD_TYPE.TIME2: "time", FIELD_TYPE.TIMESTAMP: "timestamp", FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.YEAR: "year", FIELD_TYPE.ENUM: "enum", FIELD_TYPE.SET: "set", FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.JSON: "json", FIELD_TYPE.GEOMETRY: "geometry",
}


def column_kind(column) -> str:
    """The values.encode kind of a table-map column: how to tag the library's Python value for it."""
    if column.type in _INTS:
        return "unsigned" if column.unsigned else "signed"
    if column.type in _TEXT:
        return "binary" if charsets.charset_of(column) == "binary" else "string"
    return _KINDS.get(column.type, "")


def compare_event(ev, losses: set[str]) -> int:
    """Compare our decoding of one rows event with the library's; returns the values compared."""
    table = ev.table_map[ev.table_id]
    dec = decode.table_decoder(table)
    data = row_image_bytes(ev, consume=False)
    if isinstance(ev, UpdateRowsEvent):
        images = [image for pair in dec.row_pairs(data) for image in pair]
    else:
        images = dec.rows(data)
    try:
        lib_images = [r[k] for r in ev.rows for k in ("before_values", "after_values", "values") if k in r]
    except ValueError as e:  # e.g. "day is out of range for month" on an old-format DATETIME
        losses.add(f"library raises {type(e).__name__}")
        return 0
    assert len(images) == len(lib_images)
    compared = 0
    for mine, lib in zip(images, lib_images):
        for col, value in zip(table.columns, mine):
            theirs = values.encode(lib[col.name], column_kind(col))
            compared += 1
            if theirs != value:
                reason = library_loss(col, value, theirs)
                assert reason, f"{ev.table}.{col.name}: ours {value} vs library {theirs}"
                losses.add(reason)
    return compared


def check_against_library(leader, start_gtid: str) -> None:
    """Read the test's binlog again in-process and compare both decodings of every rows event."""
    end_file, end_pos = leader.query("SHOW MASTER STATUS")[0][:2]
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": leader.port, "user": "root", "password": ""},
        server_id=7777, is_mariadb=True, auto_position=start_gtid, ignore_decode_errors=True, only_schemas=[DB],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent, HeartbeatLogEvent],
        # Blocking: a non-blocking MariaDB dump resets the connection before large
        # events, and the library then reconnects from the start, forever.
        blocking=True, slave_heartbeat=1,
    )
    compared, losses = 0, set()
    deadline = time.monotonic() + 60
    try:
        for ev in stream:  # until the end position (a blocking stream never ends by itself)
            assert time.monotonic() < deadline, f"reading the leader's binlog took over 60 s (at {stream.log_pos})"
            if isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                compared += compare_event(ev, losses)
            if stream.log_file == end_file and stream.log_pos >= end_pos:
                break
    finally:
        stream.close()
    assert compared > 500
    assert losses >= {
        "zero or invalid date parts read as None", "empty SET read as None", "YEAR 0000 read as 1900",
        "negative TIME(1..5) misread", "old-format negative TIME misread", "BINARY(n) loses its trailing zero bytes",
        "latin1 read as cp1252, undefined bytes dropped", "non-UTF-8 ENUM/SET labels lost",
        "library raises ValueError",
    }, losses


# ---------------------------------------------------------------------------


def test_16mb_blob(pipeline):
    leader, follower = pipeline.leader, pipeline.follower
    producer = pipeline.start_producer(pipeline.producer_profile(filters=FILTERS))
    consumer = pipeline.start_consumer(pipeline.consumer_profile(filters=FILTERS))
    blob = os.urandom(16 * 1024 * 1024 + 3)
    conn = leader.connect()
    try:
        run(conn, f"CREATE DATABASE `{DB}`", f"USE `{DB}`", "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)")
        with conn.cursor() as cur:
            cur.execute("INSERT INTO big VALUES (1, %s)", (blob,))
        run(conn, "UPDATE big SET b = INSERT(b, 5, 1, 'Z') WHERE id = 1", "INSERT INTO big SELECT 2, b FROM big")
    finally:
        conn.close()
    pipeline.wait_synced(timeout=SYNC_TIMEOUT)
    digest = "SELECT id, LENGTH(b), MD5(b) FROM `cdc_types`.big ORDER BY id"
    changed = blob[:4] + b"Z" + blob[5:]
    assert follower.query(digest) == leader.query(digest) == [
        (i, len(blob), hashlib.md5(changed).hexdigest()) for i in (1, 2)
    ]
    add = next(e for e in pipeline.events() if "Add" in e["operation"])
    assert base64.b64decode(add["operation"]["Add"]["rows"][0]["cols"][1]["Blob"]) == blob
    assert producer.stop() == 0 and consumer.stop() == 0


@pytest.mark.parametrize("charset", sorted(column_types.SINGLE_BYTE_CODECS) + ["latin1"])
def test_single_byte_charsets_match_the_server(leader, charset):
    """charsets.py sends text in these charsets as String: Python's codec (MySQL's latin1
    table for latin1) must map every byte it decodes as the server does, and the
    server must map that character back to the same byte."""
    select = ", ".join(
        f"HEX(CONVERT(CONVERT(X'{b:02x}' USING {charset}) USING utf8mb4)), "
        f"HEX(CONVERT(CONVERT(CONVERT(X'{b:02x}' USING {charset}) USING utf8mb4) USING {charset}))"
        for b in range(256)
    )
    row = leader.query("SELECT " + select)[0]
    tag = charsets.text_tagger(charset)
    for b in range(256):
        ours = tag(bytes([b]))
        if "Blob" in ours:
            continue  # bytes the codec rejects travel as Blob: exact anyway
        assert ours["String"].encode("utf-8").hex().upper() == row[2 * b], (charset, hex(b))
        assert row[2 * b + 1] == f"{b:02X}", (charset, hex(b))
