"""cdc_spark.lake without Spark: micro-batches as the source gives them, applied to Delta tables (delta-rs)."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from cdc_spark.lake import Lake, LakeError, apply_batch
from cdc_spark.schema import ColumnType, TableSchema

SCHEMAS = {
    ("shop", "t"): TableSchema("shop", "t", (ColumnType("id", "int"), ColumnType("note", "varchar"))),
    ("shop", "bag"): TableSchema("shop", "bag", (ColumnType("v", "int"),)),
}


def row(offset: int, op: str, table: str = "t", before=None, after=None, ddl=None, pk=("id",), index=0) -> dict:
    def image(values):
        if values is None:
            return None
        names = [c.name for c in SCHEMAS[("shop", table)].columns]
        return [(n, json.dumps(v, separators=(",", ":"))) for n, v in zip(names, values)]

    return {"offset": offset, "row_index": index, "sequence": offset, "ts": None, "database": "shop", "table": table,
            "op": op, "txn_id": f"0-1-{offset}", "txn_index": 0, "txn_last": True, "position": None,
            "pk": list(pk), "before": image(before), "after": image(after), "ddl": ddl}


def i(v):
    return {"SignedInteger": v}


def s(v):
    return {"String": v}


def state(lake, table="t") -> list[dict]:
    return sorted(DeltaTable(str(lake / "state" / "shop" / table)).to_pyarrow_table().to_pylist(), key=repr)


def test_a_replayed_batch_is_skipped_and_key_changes_merge(tmp_path):
    lake = Lake(tmp_path, lambda db, t: SCHEMAS.get((db, t)))
    batch = [row(0, "ddl", ddl="CREATE TABLE shop.t (id INT PRIMARY KEY, note VARCHAR(9))", pk=()),
             row(1, "insert", after=[i(1), s("a")]), row(1, "insert", after=[i(2), s("b")], index=1),
             row(2, "update", before=[i(1), s("a")], after=[i(3), s("a")]),  # a key change
             row(3, "delete", before=[i(2), s("b")]), row(4, "insert", after=[i(2), s("B")])]
    apply_batch(lake, "q", 0, batch)
    made = lake.commits
    assert state(tmp_path) == [{"id": 2, "note": "B", "_cdc_raw": None}, {"id": 3, "note": "a", "_cdc_raw": None}]
    again = Lake(tmp_path, lambda db, t: SCHEMAS.get((db, t)))  # a restarted job replays batch 0
    apply_batch(again, "q", 0, batch)
    assert again.commits == 0 and made == 4  # create, its change-log row, MERGE, change log
    log = DeltaTable(str(tmp_path / "changelog" / "shop" / "t")).to_pyarrow_table().to_pylist()
    image = lambda id_, note: {"id": id_, "note": note, "_cdc_raw": None}
    assert sorted((r["offset"], r["row_index"], r["op"], r["before"], r["after"]) for r in log) == [  # once each
        (0, 0, "ddl", None, None), (1, 0, "insert", None, image(1, "a")), (1, 1, "insert", None, image(2, "b")),
        (2, 0, "update", image(1, "a"), image(3, "a")), (3, 0, "delete", image(2, "b"), None),
        (4, 0, "insert", None, image(2, "B"))]
    apply_batch(again, "q", 1, [row(5, "update", before=[i(3), s("a")], after=[i(3), s("c")])])
    assert state(tmp_path) == [image(2, "B"), image(3, "c")] and again.commits == 2


def test_tables_without_a_key_are_multisets(tmp_path):
    lake = Lake(tmp_path, lambda db, t: SCHEMAS.get((db, t)))
    v = [row(0, "insert", "bag", after=[i(1)], pk=(), index=n) for n in range(3)]
    apply_batch(lake, "q", 0, [*v, row(1, "insert", "bag", after=[i(2)], pk=())])
    apply_batch(lake, "q", 1, [row(2, "delete", "bag", before=[i(1)], pk=()),
                               row(3, "update", "bag", before=[i(2)], after=[i(1)], pk=())])
    assert [r["v"] for r in state(tmp_path, "bag")] == [1, 1, 1]


def test_what_the_lake_cannot_follow_stops_it_at_the_offset(tmp_path):
    lake = Lake(tmp_path, lambda db, t: SCHEMAS.get((db, t)))
    apply_batch(lake, "q", 0, [row(0, "insert", after=[i(1), s("a")])])
    with pytest.raises(LakeError) as e:
        apply_batch(lake, "q", 1, [row(7, "ddl", ddl="ALTER TABLE shop.t DROP COLUMN note", pk=())])
    assert str(e.value) == (
        "offset 7: the lake cannot follow `ALTER TABLE shop.t DROP COLUMN note` on shop.t (Drop cannot be followed); "
        "only new tables, ADD COLUMN, DROP and TRUNCATE are followed: rebuild the lake from a new snapshot "
        "(new --lake and --checkpoint directories)")
    assert e.value.exit_code == 5
    with pytest.raises(LakeError, match=r"offset 8: the lake cannot add column made to shop\.t: its default"):
        apply_batch(lake, "q", 2, [row(8, "ddl", ddl="ALTER TABLE shop.t ADD COLUMN made DATETIME DEFAULT NOW()",
                                       pk=())])
