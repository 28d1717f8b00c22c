"""cdc_spark.reading over the in-memory topics: ranges own whole transactions, both layouts (no Spark)."""

from __future__ import annotations

import pytest

from cdc_spark.reading import complete_end, transactions
from cdc_spark.rows import RowBuilder, record_batches
from cdc_spark.source import plan
from cdc_stream.events import BinlogFile, ChangeEvent, Txn, encode_event
from cdc_stream.layout import Layout
from cdc_stream.profile import Stream
from cdc_stream.topics.memory import MemoryStream


def event(seq: int, gtid: str, index: int, last: bool, table: str = "pet", key: int = 0) -> ChangeEvent:
    return ChangeEvent(uri=f"flv://r/db/{table}", schema="db", table=table, sequence=seq, operation="Add", rows=[[{"SignedInteger": key}]],
                       columns=["id"], pk=["id"], txn=Txn(gtid, index, last), gtid=gtid,
                       gtid_set=gtid if last else None, ts=1_700_000_000_000, bn_file=BinlogFile("binlog.000001", seq))


def single_topic(events: list[ChangeEvent]):
    stream = MemoryStream()
    stream.create("t")
    stream.topic("t").append([(None, encode_event(e)) for e in events])
    return Layout.of(Stream(topic="t")).reader(stream)


# Offsets: 0 txn 1; 1-2 a partial txn 2 (a producer crashed); 3-5 txn 2 again, whole; 6 txn 3;
# 7 a repeat of txn 3 (a retried append); 8-9 txn 4 still being published (no last event yet).
LOG = [
    event(0, "0-1-1", 0, True, key=1),
    event(1, "0-1-2", 0, False, key=2), event(2, "0-1-2", 1, False, key=3),
    event(3, "0-1-2", 0, False, key=2), event(4, "0-1-2", 1, False, key=3), event(5, "0-1-2", 2, True, key=4),
    event(6, "0-1-3", 0, True, key=5),
    event(7, "0-1-3", 0, True, key=5),
    event(8, "0-1-4", 0, False, key=6), event(9, "0-1-4", 1, False, key=7),
]
WHOLE = [[0], [3, 4, 5], [6]]  # sequences of the complete, first copies


def sequences(txns) -> list[list[int]]:
    return [[loc.event.sequence for loc in t] for t in txns]


def test_ranges_anywhere_give_each_transaction_once():
    reader = single_topic(LOG)
    end = complete_end(reader, per_table=False)
    assert end == 8  # txn 4 is not complete: ranges end before it
    assert sequences(transactions(reader, 0, end, False)) == WHOLE
    for size in (1, 2, 3, 5):  # every way of cutting [0, 8) into partitions
        parts = plan(0, end, size)
        got = [t for p in parts for t in sequences(transactions(reader, p.start, p.end, False))]
        assert got == WHOLE, size
    # A micro-batch cut inside txn 2 (ReadMaxRows): the first batch finishes it, the next skips its rest.
    assert sequences(transactions(reader, 0, 4, False)) == [[0], [3, 4, 5]]
    assert sequences(transactions(reader, 4, 8, False)) == [[6]]


def test_a_transaction_incomplete_at_the_tail_is_not_read():
    reader = single_topic(LOG)
    assert sequences(transactions(reader, 6, 10, False)) == [[6]]


def test_per_table_layout_reads_transactions_in_source_order():
    stream = MemoryStream()
    layout = Layout.of(Stream(topic="{database}_{table}"))
    writer = layout.writer(stream)
    txns = [[event(0, "0-1-1", 0, False, "a", 1), event(1, "0-1-1", 1, False, "b", 2),
             event(2, "0-1-1", 2, True, "a", 3)], [event(3, "0-1-2", 0, True, "b", 4)]]
    for txn in txns:
        writer.add(txn, [encode_event(e) for e in txn], txn[0].txn.id.encode(), complete=True)
        assert writer.stage() is None
    reader = layout.reader(stream)
    assert complete_end(reader, per_table=True) == 2
    assert sequences(transactions(reader, 0, 2, True)) == [[0, 1, 2], [3]]
    assert sequences(transactions(reader, 1, 2, True)) == [[3]]
    builder = RowBuilder((("db", "a"),))
    (batch,) = record_batches(transactions(reader, 0, 2, True), builder)
    rows = batch.to_pylist()
    assert [(r["offset"], r["row_index"], r["table"], r["after"]) for r in rows] == [
        (0, 0, "a", [("id", '{"SignedInteger":1}')]), (0, 1, "a", [("id", '{"SignedInteger":3}')])]


def test_a_transactions_rows_keep_distinct_positions_across_the_builders_batches():
    """With per-table topics a log record (the transaction's) holds several events: the row index goes on counting
    where the builder hands out a batch between them (it started again at 0, giving two rows one position)."""
    stream = MemoryStream()
    layout = Layout.of(Stream(topic="{database}_{table}"))
    writer = layout.writer(stream)
    txn = [event(k, "0-1-1", k, k == 2, "a") for k in range(3)]
    for k, e in enumerate(txn):
        e.rows = [[{"SignedInteger": k * 10_000 + j}] for j in range(3000)]
    writer.add(txn, [encode_event(e) for e in txn], b"0-1-1", complete=True)
    assert writer.stage() is None
    batches = list(record_batches(transactions(layout.reader(stream), 0, 1, True), RowBuilder(None)))
    assert [b.num_rows for b in batches] == [6000, 3000]  # handed out after the event that passed 4096 rows
    assert [(r["offset"], r["row_index"]) for b in batches for r in b.to_pylist()] == [(0, i) for i in range(9000)]


def test_out_of_order_log_is_refused():
    reader = single_topic([event(0, "0-1-1", 0, False), event(1, "0-1-2", 1, True)])
    with pytest.raises(Exception, match="offset 1 continues transaction 0-1-2 whose start was not seen"):
        list(transactions(reader, 0, 2, False))


def test_partitions_by_bytes_where_the_topic_knows_its_records_sizes(tmp_path):
    """Records of very different sizes (a 1,000-row event beside one-row events): partitions of about equal bytes,
    at most recordsPerPartition records each, a record bigger than the limit alone; without sizes, by records."""
    sizes = [10, 10, 10, 1000, 10, 10, 400, 400, 10]
    assert [(p.start, p.end) for p in plan(5, 14, 4, sizes, 500)] == [(5, 8), (8, 9), (9, 12), (12, 14)]
    assert [(p.start, p.end) for p in plan(5, 14, 2, sizes, 10_000)] == [(5, 7), (7, 9), (9, 11), (11, 13), (13, 14)]
    assert [(p.start, p.end) for p in plan(5, 14, 4)] == [(5, 8), (8, 11), (11, 14)]
    assert single_topic(LOG).value_sizes(0, 3) is None  # the memory backend cannot tell
    from cdc_stream.topics.embedded import EmbeddedStream

    with EmbeddedStream(tmp_path) as stream:
        stream.create("t")
        stream.topic("t").append([(None, b"x" * n) for n in (3, 1000, 7)])
        reader = Layout.of(Stream(topic="t", path=str(tmp_path))).reader(stream)
        assert reader.value_sizes(0, 3) == [3, 1000, 7] and reader.value_sizes(1, 2) == [1000]


def test_rows_per_partition_estimates_the_rows_a_byte_holds_from_a_sample(tmp_path):
    """rowsPerPartition: 100-row events then one-row events; partitions hold about the rows asked for, whatever the
    rows per record (by records they would be 100 times apart)."""
    from cdc_spark.options import parse_options
    from cdc_spark.source import _Log, plan_log
    from cdc_stream.topics.embedded import EmbeddedStream

    events = []
    for i in range(30):
        rows = 100 if i < 10 else 1
        ev = event(i, f"0-1-{i}", 0, True, key=i)
        ev.rows = [[{"SignedInteger": i * 1000 + r}] for r in range(rows)]
        events.append(ev)
    with EmbeddedStream(tmp_path) as stream:
        stream.create("t")
        stream.topic("t").append([(None, encode_event(e)) for e in events])
    log = _Log(parse_options({"path": str(tmp_path), "topic": "t", "rowsPerPartition": "250"}))
    try:
        parts = plan_log(log, 0, 30)
        rows = [sum(len(b) for b in record_batches(transactions(log.reader, p.start, p.end, False), RowBuilder(None)))
                for p in parts]
    finally:
        log.close()
    assert sum(rows) == 1020
    # two 100-row records a partition (a third would pass 250), then two with ten one-row records, then the rest
    assert [(p.start, p.end) for p in parts] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 20), (20, 30)]
    assert rows == [200, 200, 200, 200, 210, 10]


def test_stream_offsets_of_either_form_resume_at_their_log_offset():
    from cdc_spark.options import parse_options
    from cdc_spark.source import StreamReader

    base = {"path": "/nonexistent", "topic": "{database}_{table}", "transactionTopic": "txns"}
    by_topic = StreamReader(parse_options({**base, "tables": "db.a"}), None)
    through_log = StreamReader(parse_options(base), None)
    for reader in (by_topic, through_log):
        assert reader._offset({"offset": 7}) == 7
        assert reader._offset({"txns": 9, "db_a": 4, "db": 1}) == 9
    with pytest.raises(Exception, match="names no log topic 'txns'"):
        by_topic._offset({"other": 3})


def test_the_lake_rows_carry_the_generic_rows_images_and_their_buckets():
    """images=lake (RowBuilder(lake=True)): per row the event's column list, each image as one JSON array of the
    same tagged values the generic map holds, and its bucket exactly as lakefiles.bucket_of gives it from the
    generic image (by the primary key; without one by every column); the same as lake_rows of the generic rows
    (LocalEngine's input). DDL and a live copy's range row carry no image and no bucket."""
    import json

    from cdc_spark.lakefiles import bucket_of
    from cdc_spark.rows import lake_rows
    from cdc_stream.positions import SnapshotChunk

    def ev(seq, op, rows, table="pet", columns=("id", "name", "at"), pk=("id",), **kw) -> ChangeEvent:
        return ChangeEvent(uri=f"flv://r/db/{table}", schema="db", table=table, sequence=seq, operation=op,
                           rows=rows, columns=list(columns), pk=list(pk), txn=Txn(f"0-1-{seq}", 0, True),
                           gtid=f"0-1-{seq}", gtid_set=f"0-1-{seq}", ts=1_700_000_000_000,
                           bn_file=BinlogFile("binlog.000001", seq), **kw)

    def pet(n, name="ü\u0001\"x"):
        return [{"SignedInteger": n}, {"String": name} if n % 3 else "Null",
                {"DateTime": {"year": 2026, "month": 1, "day": 1 + n % 28, "hour": 0, "minute": 0, "second": n % 60,
                              "subsecond": n}}]

    events = [
        ev(0, "Add", [pet(n) for n in range(40)]),
        ev(1, "Update", [(pet(n), pet(n + 100, "new")) for n in range(0, 40, 3)]),  # key changes
        ev(2, "Delete", [pet(n) for n in range(1, 40, 5)]),
        ev(3, "Add", [[{"SignedInteger": n % 4}, {"String": f"v{n}"}] for n in range(20)], table="bag",
           columns=("a", "b"), pk=()),
        ev(4, "Update", [([{"SignedInteger": 1}, {"String": "v1"}], [{"SignedInteger": 1}, {"String": "w"}])],
           table="bag", columns=("a", "b"), pk=()),
        ev(5, "Add", [pet(n, "copied") for n in range(3)],
           snapshot=SnapshotChunk(table="pet", copy="c1", after=[0], upto=[2])),
        ChangeEvent(uri="flv://r/db", schema="db", table=None, sequence=6, operation="Query",
                    query="ALTER TABLE db.pet ADD COLUMN x INT", database="db", txn=Txn("0-1-6", 0, True),
                    gtid="0-1-6", gtid_set="0-1-6", ts=1_700_000_000_000),
    ]
    reader = single_topic(events)
    generic = pa_table(record_batches(transactions(reader, 0, len(events), False), RowBuilder(None)))
    reader.raw_images = True  # as the source reads for images=lake
    lake = pa_table(record_batches(transactions(reader, 0, len(events), False), RowBuilder(None, lake=True),
                                   rows_per_batch=7))
    assert lake.equals(lake_rows(generic))
    checked = 0
    for g, r in zip(generic.to_pylist(), lake.to_pylist()):
        assert {k: g[k] for k in g if k not in ("before", "after")} == {k: r[k] for k in g if k not in
                                                                          ("before", "after")}
        image = g["after"] if g["after"] is not None else g["before"]
        assert r["cols"] == (None if image is None else json.dumps([k for k, _ in image], ensure_ascii=False,
                                                                   separators=(",", ":")))
        for name, bucket in (("before", "_bb"), ("after", "_ba")):
            texts = dict(g[name]) if g[name] is not None else None
            assert r[name] == (None if texts is None else ("[" + ",".join(texts.values()) + "]").encode())
            assert r[bucket] == bucket_of(texts, g["pk"] or list(texts or ()))
            checked += texts is not None
    assert checked == 40 + 2 * 14 + 8 + 20 + 2 + 3
    assert {r["op"] for r in lake.to_pylist() if r["cols"] is None} == {"ddl", "copy_range"}


def pa_table(batches):
    import pyarrow as pa

    return pa.Table.from_batches(list(batches))


def test_the_lake_read_refuses_an_image_of_another_width_naming_its_offset():
    """images=lake keeps the topic's JSON of each image (decode_event(raw_images=True)); the bucket's parse of the
    image checks its width, as the full decode does: an image of 2 values for 1 column stops the read at its
    offset, and an event without images is refused by the decoder."""
    from cdc_stream.errors import MalformedEvent

    good = event(1, "0-1-1", 0, True, key=1)
    bad = event(2, "0-1-2", 0, True, key=2)
    bad.rows = [[{"SignedInteger": 2}, {"SignedInteger": 3}]]
    reader = single_topic([good, bad])
    reader.raw_images = True
    with pytest.raises(MalformedEvent, match=r"^offset 1: rows: an image of 2 values for 1 columns$"):
        list(record_batches(transactions(reader, 0, 2, False), RowBuilder(None, lake=True)))
    first = list(record_batches(transactions(reader, 0, 1, False), RowBuilder(None, lake=True)))
    assert [r["after"] for b in first for r in b.to_pylist()] == [b'[{"SignedInteger":1}]']
    empty = encode_event(good).replace(b'"rows":[{"cols":[{"SignedInteger":1}]}]', b'"rows":[{}]')
    from cdc_stream.events import decode_event

    with pytest.raises(MalformedEvent, match="every Add row needs cols"):
        decode_event(empty, raw_images=True)


def test_a_batch_ends_only_after_records_made_durable(tmp_path, monkeypatch):
    """The end Spark gets for "latest" (a micro-batch's, a batch read's) is the complete end, made durable first
    (Topic.durable): an end on records a crash of the machine could take back would be kept in Spark's checkpoint."""
    from cdc_spark.options import parse_options
    from cdc_spark.source import _Log
    from cdc_stream.topics.embedded import EmbeddedStream, EmbeddedTopic

    with EmbeddedStream(tmp_path) as stream:
        stream.create("t")
        stream.topic("t").append([(None, encode_event(event(i, f"0-1-{i // 2}", i % 2, i % 2 == 1))) for i in range(5)])
    made_durable: list[int] = []
    monkeypatch.setattr(EmbeddedTopic, "durable", lambda self, end: made_durable.append(end))
    log = _Log(parse_options({"path": str(tmp_path), "topic": "t"}))
    try:
        assert log.resolve("latest") == 4  # (the fifth record's transaction is incomplete)
    finally:
        log.close()
    assert made_durable == [4]
