"""versioning.py: rows of a system-versioned table as SQL carrying the leader's history (pure, no server)."""

from __future__ import annotations

import pytest

from cdc_consumer.apply import RowsSql, Single
from cdc_consumer.catalog import TableInfo
from cdc_consumer.versioning import History, Refused, event_sql
from cdc_stream.events import ChangeEvent, Txn

TABLE = TableInfo(versioned=True, columns=frozenset({"id", "v"}))
MAX = {"Timestamp": {"unix_time": 2147483647, "subsecond": 999999}}


def ts(seconds: int, micro: int) -> dict:
    return {"Timestamp": {"unix_time": seconds, "subsecond": micro}}


def i(v: int) -> dict:
    return {"SignedInteger": v}


def event(operation: str, rows: list, pk: list[str] | None = None) -> ChangeEvent:
    return ChangeEvent(uri="flv://src/shop/ver", schema="shop", table="ver", sequence=0, operation=operation,  # type: ignore[arg-type]
                       rows=rows, columns=["id", "v", "row_start", "row_end"], pk=["id"] if pk is None else pk,
                       txn=Txn("0-1-1", 0, True))


def test_an_update_runs_at_the_leaders_time_and_its_history_row_is_not_inserted_again():
    history = History()
    old = [i(1), i(1), ts(1000, 5), MAX]
    new = [i(1), i(10), ts(2000, 7), MAX]
    [update] = event_sql(event("Update", [(old, new)]), TABLE, history)
    assert isinstance(update, Single) and update.expect == 1
    assert update.sql == ("/*M! SET STATEMENT timestamp=2000.000007 FOR */ UPDATE `shop`.`ver` SET `id`=1, `v`=10 "
                          "WHERE `id` <=> 1")
    # The leader's history row of that UPDATE comes next: the follower's UPDATE wrote it already.
    inserted = [i(2), i(2), ts(1500, 0), MAX]
    [insert] = event_sql(event("Add", [[i(1), i(1), ts(1000, 5), ts(2000, 7)], inserted]), TABLE, history)
    assert isinstance(insert, RowsSql)
    assert insert.head == ("/*M! SET STATEMENT system_versioning_insert_history=1 FOR */ INSERT INTO `shop`.`ver` "
                           "(`id`, `v`, `row_start`, `row_end`) VALUES ")
    assert insert.parts == ["(2,2,'1970-01-01 00:25:00.000000','2038-01-19 03:14:07.999999')"]
    # A second history row equal to it is the leader's own (system_versioning_insert_history): inserted.
    [again] = event_sql(event("Add", [[i(1), i(1), ts(1000, 5), ts(2000, 7)]]), TABLE, history)
    assert isinstance(again, RowsSql) and len(again.parts) == 1


def test_a_delete_ends_the_row_at_the_leaders_row_end():
    row = [i(1), i(1), ts(1000, 5), MAX]
    [delete] = event_sql(event("Update", [(row, row[:3] + [ts(3000, 1)])]), TABLE, History())
    assert isinstance(delete, Single) and delete.expect == 1
    assert delete.sql == "/*M! SET STATEMENT timestamp=3000.000001 FOR */ DELETE FROM `shop`.`ver` WHERE `id` <=> 1"


@pytest.mark.parametrize("info, ev, why", [
    (TableInfo(versioned=True, trx_id_versioned=True, period=("ts", "te")),
     event("Add", [[i(1), i(1), i(5), i(6)]]), "is system-versioned by transaction id"),
    (TABLE, event("Delete", [[i(1), i(1), ts(1, 0), ts(2, 0)]]), "the leader removed rows from its history"),
    (TABLE, event("Update", [([i(1), i(1), ts(1, 0), MAX], [i(1), i(2), ts(2, 0), MAX])], pk=[]),
     "without a primary key"),
    (TABLE, event("Update", [([i(1), i(1), ts(1, 0), ts(2, 0)], [i(1), i(2), ts(1, 0), ts(2, 0)])]),
     "changed a history row"),
    (TABLE, ChangeEvent(uri="flv://src/shop/ver", schema="shop", table="ver", sequence=0, operation="Add", rows=[[i(1), i(1)]],
                        columns=["id", "v"], pk=["id"]), "lacks its row_start/row_end columns"),
])
def test_what_sql_cannot_write_exactly_is_refused(info, ev, why):
    with pytest.raises(Refused, match=why):
        event_sql(ev, info, History())
