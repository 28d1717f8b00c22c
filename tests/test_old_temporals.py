"""MariaDB's pre-10.1 TIME/DATETIME/TIMESTAMP formats (mysql56_temporal_format=OFF): the readers of their
fractional forms, and where the producer finds a column's precision, which the table map leaves out
(tests/compat_scenarios.py's old_temporal_fractions compares them with a native replica on real servers)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from cdc_producer.old_temporals import UNREAD_LIMIT, Precisions
from cdc_producer.unpack import old_datetime_reader, old_time_reader, old_timestamp_reader
from cdc_stream import values
from cdc_stream.classify import read
from cdc_stream.errors import DataError


def test_old_time_with_fractions_is_offset_by_its_zero_point_in_units_of_its_precision():
    # TIME(3) '-01:02:03.123': -3723123 ms + (838:59:59 + 1 s) in ms, 5 bytes big-endian (Field_time_hires)
    raw = (-3_723_123 + 3_020_400_000).to_bytes(5, "big")
    assert old_time_reader(3)(b"x" + raw, 1) == (values.time_tag(True, 1, 2, 3, 123_000), 6)
    top = (3_020_399_999_999 + 3_020_400_000_000).to_bytes(6, "big")  # TIME(6) '838:59:59.999999'
    assert old_time_reader(6)(top, 0) == (values.time_tag(False, 838, 59, 59, 999_999), 6)
    assert old_time_reader(1)((30_204_000 - 5).to_bytes(4, "big"), 0) == (values.time_tag(True, 0, 0, 0, 500_000), 4)
    assert old_time_reader(0) is not old_time_reader(1)  # TIME(0): the 3-byte HHMMSS of time_reader
    assert old_time_reader(0)((-10203).to_bytes(3, "little", signed=True), 0) == (values.time_tag(True, 1, 2, 3, 0), 3)


def test_old_datetime_with_fractions_is_pack_time_in_units_of_its_precision():
    packed = ((((2024 * 13 + 2) * 32 + 29) * 24 + 12) * 60 + 34) * 60 + 56
    raw = (packed * 100 + 78).to_bytes(6, "big")  # DATETIME(2) '2024-02-29 12:34:56.78'
    assert old_datetime_reader(2)(raw, 0) == (values.datetime_tag(2024, 2, 29, 12, 34, 56, 780_000), 6)
    assert old_datetime_reader(6)(bytes(8), 0) == (values.datetime_tag(0, 0, 0, 0, 0, 0, 0), 8)


def test_old_timestamp_with_fractions_is_big_endian_seconds_then_the_fraction():
    raw = (1_000_000_000).to_bytes(4, "big") + (5).to_bytes(1, "big")  # TIMESTAMP(1) ... .5
    assert old_timestamp_reader(1)(raw, 0) == (values.timestamp_tag(1_000_000_000, 500_000), 5)
    raw = (1).to_bytes(4, "big") + (999_999).to_bytes(3, "big")
    assert old_timestamp_reader(6)(raw, 0) == (values.timestamp_tag(1, 999_999), 7)


def _table(*columns: tuple[str, int], schema: str = "db", name: str = "t") -> SimpleNamespace:
    return SimpleNamespace(schema=schema, table=name,
                           columns=[SimpleNamespace(name=n, type=t) for n, t in columns])


TABLE = _table(("id", FIELD_TYPE.LONG), ("T1", FIELD_TYPE.TIME), ("d", FIELD_TYPE.DATETIME),
               ("s", FIELD_TYPE.TIMESTAMP), ("n", FIELD_TYPE.TIME2))


class Leader:
    """A leader connection whose information_schema holds `rows` (COLUMN_NAME, DATETIME_PRECISION)."""

    def __init__(self, rows: list[tuple[str, int | None]]) -> None:
        self.rows, self.asked = rows, 0

    def cursor(self, _cls: object = None) -> Leader:
        return self

    def __enter__(self) -> Leader:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def execute(self, _sql: str, _args: object) -> None:
        self.asked += 1

    def fetchall(self) -> list[tuple[str, int | None]]:
        return self.rows


def test_the_precision_is_learnt_from_the_create_table_the_binlog_carried():
    p = Precisions()
    p.saw(read("CREATE OR REPLACE TABLE t (id INT, t1 TIME(1), d DATETIME(6), s TIMESTAMP(3) NULL, n TIME(2))", "db"))
    leader = Leader([])
    assert p.of(TABLE, leader) == [None, 1, 6, 3, None]
    assert leader.asked == 0  # (the table may be gone already: the binlog's definition is the rows')
    # Any other DDL naming the table forgets it: the leader's definition is read then.
    p.saw(read("ALTER TABLE t MODIFY t1 TIME(2)", "db"))
    leader = Leader([("id", None), ("t1", 2), ("d", 6), ("s", 3), ("n", 2)])
    assert p.of(TABLE, leader) == [None, 2, 6, 3, None] and leader.asked == 1
    # CREATE TABLE IF NOT EXISTS may have left an older table: nothing learnt.
    p.saw(read("CREATE TABLE IF NOT EXISTS t (id INT, t1 TIME(4), d DATETIME, s TIMESTAMP, n TIME)", "db"))
    assert p.of(TABLE, leader) == [None, 2, 6, 3, None]
    # Without a leader (MySQL's pre-5.6 tables have no fractions): 0.
    assert p.of(TABLE, None) == [None, 0, 0, 0, None]


def test_a_table_changed_or_gone_on_the_leader_stops_naming_the_fix():
    p = Precisions()
    for rows in ([], [("id", None), ("t1", 1), ("d", 6), ("s", 3)]):
        with pytest.raises(DataError, match=r"^db\.t has TIME/DATETIME/TIMESTAMP columns in MariaDB's pre-10\.1 "
                                            r"format .* ALTER TABLE \.\.\. FORCE"):
            p.of(TABLE, Leader(rows))


def test_ddl_is_read_only_when_a_table_map_asks_in_binlog_order():
    p = Precisions()
    create = read("CREATE TABLE t (id INT, t1 TIME(1), d DATETIME(6), s TIMESTAMP(3) NULL, n TIME(2))", "db")
    alter = read("ALTER TABLE t MODIFY t1 TIME(2)", "db")
    p.saw(create)
    p.saw(alter)
    # Not parsed yet: most streams carry no old-format column, and parsing is sqlglot's first import.
    assert "targets" not in create.__dict__ and "table_effects" not in create.__dict__
    assert "targets" not in alter.__dict__
    # Read in the binlog's order when asked: the CREATE taught, the ALTER made it forget.
    leader = Leader([("id", None), ("t1", 2), ("d", 6), ("s", 3), ("n", 2)])
    assert p.of(TABLE, leader) == [None, 2, 6, 3, None] and leader.asked == 1


def test_unread_ddl_is_bounded():
    p = Precisions()
    statements = [read(f"CREATE TABLE t{i} (id INT)", "db") for i in range(UNREAD_LIMIT)]
    for stmt in statements[:-1]:
        p.saw(stmt)
    assert not any("targets" in s.__dict__ for s in statements)
    p.saw(statements[-1])
    assert all("targets" in s.__dict__ for s in statements)
