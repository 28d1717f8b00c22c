"""The mysql_cdc source in a local SparkSession (one per module): typed streaming, limits, Fluvio + per-table."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from harness import wait_for

UTC = dt.UTC
ACCT = ("CREATE TABLE flvDb.acct (id BIGINT UNSIGNED PRIMARY KEY, bal DECIMAL(65,30), small DECIMAL(9,2), "
        "born DATE, seen DATETIME(6), at TIMESTAMP(3) NULL, dur TIME, tags SET('a','b'), raw BINARY(3))")


@pytest.fixture(scope="module")
def spark():
    from cdc_spark import register
    from cdc_spark.session import builder, prepare_local

    prepare_local("local[2]")
    session = builder("mysql-cdc tests", "local[2]", {"spark.sql.shuffle.partitions": "2"}).getOrCreate()
    register(session)
    yield session
    session.stop()


def test_typed_stream_with_read_limits_and_available_now(spark, pipeline, tmp_path):
    pipeline.start_producer()
    pipeline.leader.execute(
        "CREATE DATABASE flvDb",
        ACCT,
        "CREATE TABLE flvDb.other (id INT PRIMARY KEY)",
        "SET sql_mode = ''",
        "INSERT INTO flvDb.acct VALUES (18446744073709551615, 1.5, -12.34, '0000-00-00', '2024-02-29 23:59:59.999999', "
        "'2038-01-19 03:14:07.999', '-838:59:59', 'b,a', 0x01)",
        "INSERT INTO flvDb.other VALUES (1)",
        "UPDATE flvDb.acct SET small = 7 WHERE id = 18446744073709551615",
        "DELETE FROM flvDb.acct",
    )
    pipeline.wait_published(timeout=60)
    df = (spark.readStream.format("mysql_cdc").option("profile", str(pipeline.producer_profile()))
          .option("table", "flvDb.acct").option("maxRecordsPerBatch", "2").load())
    assert df.schema["after"].dataType.simpleString() == (
        "struct<id:decimal(20,0),bal:string,small:decimal(9,2),born:date,seen:timestamp_ntz,at:timestamp,"
        "dur:interval day to second,tags:array<string>,raw:binary,_cdc_raw:string>")
    query = (df.writeStream.format("memory").queryName("acct").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    # Once the first micro-batch ran, the target is fixed: a record published now is not read by this query.
    wait_for(lambda: query.recentProgress or not query.isActive, 60, "the first micro-batch")
    pipeline.leader.execute("INSERT INTO flvDb.other VALUES (2)")
    pipeline.wait_published(timeout=60)
    query.awaitTermination()
    assert pipeline.end_offset() == 8
    def offset(text: str | None) -> int:
        return (json.loads(text) or {"offset": 0})["offset"] if text else 0

    starts = [offset(p["sources"][0]["startOffset"]) for p in query.recentProgress]
    ends = [offset(p["sources"][0]["endOffset"]) for p in query.recentProgress]
    assert all(e - s <= 2 for s, e in zip(starts, ends))  # maxRecordsPerBatch
    assert ends[-1] == 7  # availableNow's target: the topic's end when the query started
    rows = spark.sql("SELECT * FROM acct ORDER BY offset, row_index").collect()
    assert [(r.op, r.table) for r in rows] == [("ddl", None), ("ddl", "acct"), ("insert", "acct"),
                                               ("update", "acct"), ("delete", "acct")]  # CREATE DATABASE too
    rows = rows[1:]
    assert rows[0].ddl == ACCT
    after = rows[1].after
    assert after.id == Decimal(2**64 - 1) and after.bal == "1.500000000000000000000000000000"
    assert after.small == Decimal("-12.34") and after.born is None
    assert after._cdc_raw == '{"born":{"Date":{"year":0,"month":0,"day":0}}}'
    assert after.seen == dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
    assert after.at == dt.datetime(2038, 1, 19, 3, 14, 7, 999000, tzinfo=UTC).astimezone().replace(tzinfo=None)
    assert after.dur == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert (after.tags, after.raw) == (["a", "b"], bytearray(b"\x01\0\0"))
    assert (rows[2].before.small, rows[2].after.small, rows[3].before.small) == (
        Decimal("-12.34"), Decimal("7.00"), Decimal("7.00"))
    assert rows[1].pk == ["id"] and rows[1].txn_last and rows[1].position.startswith("binlog.")


def test_batch_read_over_fluvio_with_per_table_topics(spark, pipeline, fluvio_endpoint):
    txns = f"txn-{id(pipeline)}"
    extra = f'topic = "{{database}}_{{table}}"\nfluvio_endpoint = "{fluvio_endpoint}"\ntransaction_topic = "{txns}"'
    text = pipeline.producer_profile().read_text()
    profile = pipeline.tmp / "fluvio.toml"
    profile.write_text(text[: text.index("[stream]")] + "[stream]\n" + extra + "\n")
    pipeline.start_producer(profile)
    pipeline.leader.execute(
        "CREATE DATABASE flvDb",
        "CREATE TABLE flvDb.orders (id INT PRIMARY KEY, total INT)",
        "CREATE TABLE flvDb.lines (order_id INT, n INT, PRIMARY KEY (order_id, n))",
    )
    conn = pipeline.leader.connect()
    with conn.cursor() as cur:
        for sql in ("BEGIN", "INSERT INTO flvDb.orders VALUES (1, 0)", "INSERT INTO flvDb.lines VALUES (1, 1), (1, 2)",
                    "UPDATE flvDb.orders SET total = 2 WHERE id = 1", "COMMIT"):
            cur.execute(sql)
    conn.close()

    def read():
        return (spark.read.format("mysql_cdc").option("profile", str(profile)).option("recordsPerPartition", "2")
                .load().orderBy("offset", "row_index").collect())

    rows = wait_for(lambda: (r := read()) and len(r) == 7 and r, 60, "4 transactions on Fluvio")
    assert [(r.offset, r.row_index, r.table, r.op) for r in rows] == [
        (0, 0, None, "ddl"), (1, 0, "orders", "ddl"), (2, 0, "lines", "ddl"),
        (3, 0, "orders", "insert"), (3, 1, "lines", "insert"), (3, 2, "lines", "insert"), (3, 3, "orders", "update")]
    assert rows[3].after == {"id": '{"SignedInteger":1}', "total": '{"SignedInteger":0}'}
    assert len({r.txn_id for r in rows[3:]}) == 1 and [r.txn_last for r in rows[3:]] == [False, False, False, True]
    # One table: only its topic (and its database's) is read, by table topic
    orders = (spark.read.format("mysql_cdc").option("profile", str(profile)).option("table", "flvDb.orders").load()
              .orderBy("offset", "sequence", "row_index").collect())
    assert [(r.offset, r.table, r.op, r.after and (r.after.id, r.after.total)) for r in orders] == [
        (0, None, "ddl", None), (1, "orders", "ddl", None), (3, "orders", "insert", (1, 0)),
        (3, "orders", "update", (1, 2))]  # typed: one table, and the profile has [database]
    from cdc_spark.options import parse_options
    from cdc_spark.source import BatchReader

    parts = BatchReader(parse_options({"profile": str(profile), "table": "flvDb.orders"}), None).partitions()
    assert sorted((p.topic, len(p.spans)) for p in parts) == [("flvdb", 1), ("flvdb-orders", 2)]  # Fluvio's names


def test_bad_options_are_one_error_naming_the_option_never_a_default_or_an_assertion(spark, pipeline):
    """A misspelled option used to be ignored (startingOffsets: read from the start), includeIncomplete=yes read as
    false, an endingOffset past the log blamed a truncated log, a startingOffset past the end failed an assert."""
    pipeline.start_producer()
    pipeline.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.t (id INT PRIMARY KEY)",
                            "INSERT INTO flvDb.t VALUES (1)")
    pipeline.wait_published()
    end = pipeline.end_offset()
    profile = str(pipeline.producer_profile())

    def error(**options: str) -> str:
        reader = spark.read.format("mysql_cdc").option("profile", profile)
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception) as e:
            reader.load().count()
        [line] = [l for l in str(e.value).splitlines() if "ConfigError: " in l]
        return line.split("ConfigError: ", 1)[1]

    assert error(startingOffsets="latest") == (
        "mysql_cdc: unknown option 'startingoffsets'; did you mean 'startingOffset'? the options are profile, path, "
        "endpoint, topic, transactionTopic, startingOffset, endingOffset, maxRecordsPerBatch, recordsPerPartition, "
        "bytesPerPartition, rowsPerPartition, table, tables, typed, images, includeIncomplete, spillPath (docs/lake.md)")
    assert error(includeIncomplete="yes") == "mysql_cdc: includeIncomplete must be true or false, got 'yes'"
    assert error(images="narrow") == "mysql_cdc: images must be generic or lake, got 'narrow'"
    assert error(images="lake", typed="true") == "mysql_cdc: images=lake carries the images untyped; drop typed=true"
    assert error(spillPath="/tmp/x") == "mysql_cdc: spillPath needs images=lake (it spills the lake job's rows)"
    assert error(maxRecordsPerBatch="0") == "mysql_cdc: maxRecordsPerBatch must be a positive number, got '0'"
    assert error(endingOffset="500") == (
        f"mysql_cdc: endingOffset 500 is past the end of the log ({end}); give an offset up to it, or \"latest\"")
    assert error(startingOffset="999") == (
        f"mysql_cdc: startingOffset 999 is past the last complete transaction's end ({end}); give a smaller "
        "startingOffset")
    assert error(startingOffset="2", endingOffset="1") == (
        "mysql_cdc: startingOffset 2 is past endingOffset (1); give a smaller startingOffset")
    empty = spark.read.format("mysql_cdc").option("profile", profile).option("startingOffset", str(end)).load()
    assert empty.count() == 0
    import socket

    elsewhere = pipeline.tmp / "on-another-host"
    with pytest.raises(Exception) as e:
        spark.read.format("mysql_cdc").option("path", str(elsewhere)).load().count()
    [line] = [l for l in str(e.value).splitlines() if "ConfigError: " in l]
    assert line.split("ConfigError: ", 1)[1] == (
        f"mysql_cdc: no embedded stream at {elsewhere}: check [stream] path (cdc-topic: --path), or start cdc-producer "
        f"first to create it (looked for on host {socket.gethostname()}, by the Spark driver); the embedded topic is a "
        "SQLite file that one host reads: run the driver and every executor on the host that holds it (master "
        "local[*], local-cluster, or a one-host standalone cluster), or publish to Fluvio")


def _shop_event(seq: int, gtid: str, index: int, last: bool, table: str | None, key: int = 0):
    from cdc_stream.events import BinlogFile, ChangeEvent, Txn

    txn = Txn(gtid, index, last)
    common = {"uri": "flv://r/shop" + (f"/{table}" if table else ""), "schema": "shop", "sequence": seq, "txn": txn,
              "gtid": gtid, "gtid_set": gtid if last else None, "ts": 1_700_000_000_000,
              "bn_file": BinlogFile("binlog.000001", seq)}
    if table is None:
        return ChangeEvent(operation="Query", query="CREATE DATABASE shop", database="shop", **common)
    return ChangeEvent(table=table, operation="Add", rows=[[{"SignedInteger": key}]], columns=["id"], pk=["id"],
                       **common)


class _ShopLog:
    """Per-table topics of tables shop.a, shop.b, shop.c (and shop's own DDL topic) in an embedded stream, written by
    the producer's writer: transaction g<n> inserts key n*10+i into the i-th table it names."""

    def __init__(self, path):
        from cdc_stream.layout import Layout
        from cdc_stream.profile import Stream
        from cdc_stream.topics import open_stream

        self.settings = Stream(backend="embedded", path=str(path), topic="{database}_{table}",
                               transaction_topic="shop-txns")
        self.stream = open_stream(self.settings)
        self.writer = Layout.of(self.settings).writer(self.stream)
        self.sequence = 0
        self.n = 0
        self.expected: list[tuple[int, int, str | None, int | None]] = []  # (offset, sequence, table, key) of a, b

    def txn(self, *tables: str | None, abandon_first: bool = False) -> None:
        from cdc_stream.events import encode_event

        self.n += 1
        gtid = f"0-1-{self.n}"
        events = [_shop_event(self.sequence + i, gtid, i, i == len(tables) - 1, t, self.n * 10 + i)
                  for i, t in enumerate(tables)]
        if abandon_first:  # a producer that crashes between chunks leaves events no transaction record names
            self.writer.add(events[:1], [encode_event(events[0])], gtid.encode(), complete=False)
            self.writer.abandon()
            assert self.writer.stage() is None
        self.writer.add(events, [encode_event(e) for e in events], gtid.encode(), complete=True)
        assert self.writer.stage() is None
        offset = self.n - 1  # the transaction record's offset
        self.expected += [(offset, e.sequence, e.table, e.rows[0][0]["SignedInteger"] if e.rows else None)
                          for e in events if e.table in ("a", "b", None)]
        self.sequence += len(tables)

    def close(self) -> None:
        self.writer.close()
        self.stream.close()


def _rows(df) -> list[tuple[int, int, str | None, int | None]]:
    import json as _json

    return [(r.offset, r.sequence, r.table,
             _json.loads(dict(r.after)["id"])["SignedInteger"] if r.after else None)
            for r in df.orderBy("offset", "sequence", "row_index").collect()]


def test_per_table_topics_of_chosen_tables_are_read_in_parallel_and_resume_exactly(spark, tmp_path):
    from cdc_spark.options import parse_options
    from cdc_spark.source import BatchReader, TopicRange

    log = _ShopLog(tmp_path / "stream")
    log.txn(None)  # CREATE DATABASE: shop's own topic, read with its tables
    for tables in (("a",), ("b", "c"), ("c",), ("a", "b", "a"), ("c", "a"), ("b",)):
        log.txn(*tables)
    log.txn("a", "c", abandon_first=True)
    options = {"path": str(tmp_path / "stream"), "topic": "{database}_{table}", "transactionTopic": "shop-txns",
               "tables": "shop.a,shop.b", "recordsPerPartition": "2"}

    parts = BatchReader(parse_options(options), None).partitions()
    assert all(isinstance(p, TopicRange) for p in parts)
    by_topic = {}
    for p in parts:
        by_topic.setdefault(p.topic, []).append([(s.log_offset, s.first, s.count) for s in p.spans])
    # shop_c is never read; shop_a's offset 5 holds the abandoned chunk's event, named by no record
    assert by_topic == {
        "shop": [[(0, 0, 1)]],
        "shop_a": [[(1, 0, 1)], [(4, 1, 2)], [(5, 3, 1), (7, 5, 1)]],
        "shop_b": [[(2, 0, 1), (4, 1, 1)], [(6, 2, 1)]],
    }
    df = spark.read.format("mysql_cdc").options(**options).load()
    assert df.rdd.getNumPartitions() == 6
    assert _rows(df) == sorted(log.expected)

    # Streaming: one log record a micro-batch, then a restart from the checkpoint after more transactions.
    check, out = tmp_path / "ck", tmp_path / "out"

    def run() -> None:
        query = (spark.readStream.format("mysql_cdc").options(**options).option("maxRecordsPerBatch", "3").load()
                 .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(check))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    run()
    first = list(log.expected)
    assert _rows(spark.read.parquet(str(out))) == sorted(first)
    offsets = sorted((p for p in (check / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert json.loads(offsets[-1].read_text().splitlines()[-1]) == {
        "shop-txns": 8, "shop": 1, "shop_a": 6, "shop_b": 3}
    log.txn("b", "c")
    log.txn("c")
    log.txn("a")
    run()
    assert _rows(spark.read.parquet(str(out))) == sorted(log.expected)
    assert len(log.expected) > len(first)

    # A checkpoint from before (the offset of a read through the log, {"offset": N}) resumes where it says.
    check, out = tmp_path / "ck-old", tmp_path / "out-old"
    (check / "offsets").mkdir(parents=True)
    (check / "commits").mkdir()
    (check / "metadata").write_text('{"id":"5f0d4c6e-0d3a-4a3f-9a0b-7c1f6d1f2e3a"}\n')
    batch_meta = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
    (check / "offsets" / "0").write_text(f'v1\n{batch_meta}\n{{"offset":8}}\n')
    (check / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "0").write_text("v1\n")  # the sink's batch 0: no files
    run()
    assert _rows(spark.read.parquet(str(out))) == sorted(r for r in log.expected if r[0] >= 8)
    log.close()
