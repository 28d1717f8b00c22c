"""An insert's rows decoded as typed rows (cdc_stream.typed_rows, decode_event(typed_inserts=N)) and written as
bulk parameters from them (parameters.typed_param_rows). The oracle is the default decoding: the same rows
once given their tagged form, the same statements (types and bytes), the same refusals with the same
messages. No server: tests/test_parameters.py stores typed rows on one.
"""

from __future__ import annotations

import pytest
from test_parameters import COLUMNS

from cdc_consumer.apply import BULK_MIN_ROWS, event_sql
from cdc_consumer.catalog import TableInfo
from cdc_stream import typed_rows
from cdc_stream.events import ChangeEvent, MalformedEvent, decode_event, encode_event
from cdc_stream.positions import SnapshotChunk
from cdc_stream.values import BadValue

N = BULK_MIN_ROWS


def add(rows: list, table: str = "t", columns: list[str] | None = None) -> bytes:
    ev = ChangeEvent(uri=f"flv://src/db/{table}", schema="db", table=table, sequence=1, operation="Add", rows=rows,
                     columns=columns or [f"c{i}" for i in range(len(rows[0]))], pk=["c0"])
    return encode_event(ev)


def both(data: bytes) -> tuple[ChangeEvent, ChangeEvent]:
    """The event decoded as typed rows where they fit (after a first decode taught their types), and by default."""
    decode_event(data, typed_inserts=N)
    return decode_event(data, typed_inserts=N), decode_event(data)


def outcome(ev: ChangeEvent, **kw) -> object:
    try:
        return event_sql(ev, **kw)
    except BadValue as e:
        return f"BadValue: {e}"


@pytest.fixture(autouse=True)
def forget_types():
    typed_rows.forget()


@pytest.mark.parametrize("sql_type, vals", COLUMNS, ids=[t for t, _ in COLUMNS])
def test_every_tag_gives_the_rows_and_the_statements_of_the_default_decoding(sql_type, vals):
    rows = [[{"SignedInteger": i}, v] for i, v in enumerate((vals + ["Null"]) * N)]
    typed, plain = both(add(rows))
    one_tag = len({next(iter(v)) for v in vals}) == 1  # (text that travelled as Blob beside String: default)
    assert typed.rows_typed == one_tag and not plain.rows_typed
    assert outcome(typed, bulk=True) == outcome(plain, bulk=True)
    typed.load_rows()
    assert typed.rows == plain.rows == rows and not typed.rows_typed


def test_rows_of_several_tags_nulls_and_a_table_of_many_columns():
    row = [v for _, vals in COLUMNS for v in vals[:1]]
    rows = [[{"SignedInteger": i}] + [("Null" if (i + j) % 3 == 0 else v) for j, v in enumerate(row)]
            for i in range(3 * N)]
    rows[0][1:] = ["Null"] * len(row)  # the first row NULL everywhere: the types come from the last one
    rows[-1][1:] = row
    typed, plain = both(add(rows))
    assert typed.rows_typed
    assert typed.rows[0].signature[1:] == tuple(next(iter(v)) for v in row)
    assert outcome(typed, bulk=True) == outcome(plain, bulk=True)
    assert typed_rows.tagged(typed.rows) == plain.rows


def test_a_column_takes_its_type_from_the_first_row_not_null_there_and_null_only_stays_null():
    rows = [[{"SignedInteger": i}, "Null" if i in (0, N - 1) else {"String": "x"}, "Null"] for i in range(N)]
    typed, plain = both(add(rows))
    assert typed.rows_typed and typed.rows[0].signature == ("SignedInteger", "String", "Null")
    assert outcome(typed, bulk=True) == outcome(plain, bulk=True)
    other = [[{"SignedInteger": i}, {"String": "y"}, {"String": "z"} if i == 3 else "Null"] for i in range(N)]
    first, second = decode_event(add(other), typed_inserts=N), decode_event(add(other), typed_inserts=N)
    assert not first.rows_typed and second.rows_typed  # the first did not fit, and taught the second
    assert first.rows == typed_rows.tagged(second.rows) == other


def test_what_is_not_a_large_insert_is_decoded_as_by_default():
    rows = [[{"SignedInteger": i}, {"String": "x"}] for i in range(N)]
    decode_event(add(rows), typed_inserts=N)
    small = add(rows[: N - 1])
    assert not decode_event(small, typed_inserts=N).rows_typed
    assert decode_event(small, typed_inserts=N) == decode_event(small)
    assert not decode_event(add(rows), typed_inserts=0).rows_typed
    assert decode_event(add(rows, table="u"), typed_inserts=N).rows_typed  # another table of the same types
    other = [[{"SignedInteger": i}, {"Decimal": "1.5"}] for i in range(N)]
    assert not decode_event(add(other, table="v"), typed_inserts=N).rows_typed  # of others: not taught yet
    assert decode_event(add(other, table="v"), typed_inserts=N).rows_typed
    back = decode_event(add(rows), typed_inserts=N)  # t again: not v's types, but those t's rows had
    assert back.rows_typed and back.rows[0].signature == ("SignedInteger", "String")
    ev = decode_event(add(rows), lazy_rows=True, typed_inserts=N)  # a reader of binlog events keeps its way
    assert not ev.rows_typed and ev.rows == rows


def test_typed_rows_that_cannot_go_as_they_are_take_their_tagged_form():
    rows = [[{"SignedInteger": i}, {"String": "x"}] for i in range(N)]
    cases = [
        ({"bulk": False}, None, None),  # a follower without bulk execution: text
        ({"bulk": True, "table": TableInfo(generated=frozenset({"c1"}))}, None, None),  # a column left out
        ({"bulk": True}, SnapshotChunk(table="t", copy="c", upto=[N]), None),  # a live copy's chunk
    ]
    for kw, chunk, _ in cases:
        typed, plain = both(add(rows))
        typed.snapshot = plain.snapshot = chunk
        assert typed.rows_typed
        assert outcome(typed, **kw) == outcome(plain, **kw)
        assert not typed.rows_typed and typed.rows == rows


DATETIME = {"year": 2020, "month": 1, "day": 1, "hour": 0, "minute": 0, "second": 0, "subsecond": 0}
# (a column's good value, that taught its types; a bad value in one row of the next insert)
BAD = [({"SignedInteger": 7}, {"SignedInteger": True}), ({"SignedInteger": 7}, {"SignedInteger": 1.0}),
       ({"SignedInteger": 7}, {"SignedInteger": 1 << 63}), ({"UnsignedInteger": 1}, {"UnsignedInteger": -1}),
       ({"Decimal": "1.5"}, {"Decimal": "1; DROP"}), ({"Decimal": "1.5"}, {"Decimal": 1.5}),
       ({"String": "s"}, {"String": 5}), ({"DateTime": DATETIME}, {"DateTime": {"year": 2020}}),
       ({"DateTime": DATETIME}, {"DateTime": {**DATETIME, "subsecond": 1_000_000}}),
       ({"Year": 1}, {"Year": -1}), ({"Bit": 1}, {"Bit": "1"}), ({"Enum": "a"}, {"Enum": 1}),
       ({"String": "s"}, {"Nope": 1}), ({"String": "s"}, {"String": "x", "Blob": ""}), ({"String": "s"}, {}),
       ({"String": "s"}, 5), ({"String": "s"}, None)]


@pytest.mark.parametrize("good, bad", BAD, ids=[repr(b) for _, b in BAD])
def test_a_bad_value_is_refused_as_the_default_decoding_refuses_it(good, bad):
    rows = [[{"SignedInteger": i}, good] for i in range(N)]
    decode_event(add(rows), typed_inserts=N)  # teaches the good rows' types
    rows[N // 2][1] = bad
    data = add(rows)
    try:
        plain = decode_event(data)
    except MalformedEvent as e:  # refused as a record: the same message either way
        with pytest.raises(MalformedEvent) as typed_error:
            decode_event(data, typed_inserts=N)
        assert str(typed_error.value) == str(e)
        return
    typed = decode_event(data, typed_inserts=N)
    refused = outcome(plain, bulk=True)
    assert str(refused).startswith("BadValue") and outcome(typed, bulk=True) == refused


def test_a_malformed_row_is_the_same_malformed_event():
    rows = [[{"SignedInteger": i}, {"String": "x"}] for i in range(N)]
    decode_event(add(rows), typed_inserts=N)
    for broken in (add(rows).replace(b'"cols":[{"SignedInteger":3},{"String":"x"}]', b'"cols":[{"SignedInteger":3}]'),
                   add(rows).replace(b'{"cols":[{"SignedInteger":3},', b'{"colz":[{"SignedInteger":3},'),
                   add(rows).replace(b'"rows":[', b'"rows":5,"x":[')):
        with pytest.raises(MalformedEvent) as plain:
            decode_event(broken)
        with pytest.raises(MalformedEvent) as typed:
            decode_event(broken, typed_inserts=N)
        assert str(typed.value) == str(plain.value)


def test_an_enum_error_value_in_typed_rows_relaxes_the_statement():
    rows = [[{"SignedInteger": i}, {"Enum": "a" if i else ""}] for i in range(N)]
    typed, plain = both(add(rows))
    assert typed.rows_typed and typed_rows.holds(typed.rows, "Enum", "")
    pieces = event_sql(typed, bulk=True)
    assert pieces == event_sql(plain, bulk=True) and pieces[0].shape[5] is True  # (shape: the relaxed flag)
    assert not typed_rows.holds(typed.rows[1:], "Enum", "")
