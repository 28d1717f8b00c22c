"""The differential harness's comparison (pure): equal snapshots give no diff, each kind of
difference gives a line naming the object or table and the rows."""

from __future__ import annotations

from differential import DbSnapshot, TableData, compare, documented_only, show


def _table(rows, create="CREATE TABLE `t` (...)", checksum=1):
    return TableData(create, checksum, ["id", "v"], [0], sorted(rows))


def _db(rows=((b"1", b"a"),), objects=None, **table):
    return DbSnapshot(True, "CREATE DATABASE `d`", dict(objects or {"table t": "BASE TABLE"}),
                      {"t": _table(list(rows), **table)})


def test_equal_snapshots_have_no_diff():
    assert compare("d", _db(), _db()) == []


def test_a_missing_database_is_named():
    assert compare("d", _db(), DbSnapshot(False)) == ["database d: exists on the replica only"]


def test_rows_are_paired_by_primary_key_and_the_rest_listed():
    replica = _db([(b"1", b"a"), (b"2", b"b")])
    follower = _db([(b"1", b"A"), (b"3", b"\xff\x00")])
    [diff] = compare("d", replica, follower)
    assert diff.splitlines() == [
        "table d.t: rows differ (replica 2 rows, follower 2; 2 only on the replica, 2 only on the follower)",
        "  key (\"'1'\",): v: replica 'a' / follower 'A'",
        "  replica only: (id='2', v='b')",
        "  follower only: (id='3', v=0xff00)",
    ]


def test_duplicate_rows_count():
    [diff] = compare("d", _db([(b"1", b"a")]), _db([(b"1", b"a"), (b"1", b"a")]))
    assert diff.splitlines() == [
        "table d.t: rows differ (replica 1 rows, follower 2; 0 only on the replica, 1 only on the follower)",
        "  follower only: (id='1', v='a')",
    ]


def test_objects_and_definitions():
    replica = _db(objects={"table t": "BASE TABLE", "event e": "STATUS=SLAVESIDE_DISABLED"})
    follower = _db(objects={"table t": "BASE TABLE", "event e": "STATUS=ENABLED", "trigger x": "..."})
    assert compare("d", replica, follower) == [
        "d: event e differs\n  replica:  STATUS=SLAVESIDE_DISABLED\n  follower: STATUS=ENABLED",
        "d: trigger x exists on the follower only: ...",
    ]


def test_create_table_and_hidden_differences():
    assert compare("d", _db(create="A", checksum=1), _db(create="B", checksum=2)) == [
        "table d.t: SHOW CREATE TABLE differs\n  replica:  A\n  follower: B",
        "table d.t: CHECKSUM TABLE differs (replica 1, follower 2) although the selectable rows are equal "
        "(hidden columns?)",
    ]


def test_values_shown_as_text_or_hex():
    assert (show(None), show(b"x y"), show(b"\xe9"), show(b"a\nb")) == ("NULL", "'x y'", "0xe9", "0x610a62")


def test_a_documented_difference_is_only_rows_changed_exactly_so():
    documented = "v: replica 'a' / follower 'A'"
    one = compare("d", _db([(b"1", b"a"), (b"2", b"a")]), _db([(b"1", b"A"), (b"2", b"A")]))
    assert documented_only(one, documented)
    assert not documented_only([], documented)  # equal copies: the documented difference is missing
    assert not documented_only(compare("d", _db([(b"1", b"a")]), _db([(b"1", b"B")])), documented)
    # the documented change and anything else: a row only on one side, another table, a definition
    assert not documented_only(compare("d", _db([(b"1", b"a")]), _db([(b"1", b"A"), (b"3", b"x")])), documented)
    assert not documented_only(one + ["d: trigger x exists on the follower only: ..."], documented)
    assert not documented_only(compare("d", _db([(b"1", b"a")], create="A"), _db([(b"1", b"A")], create="B")),
                               documented)
