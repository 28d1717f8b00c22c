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
        "bytesPerPartition, table, tables, typed, includeIncomplete (docs/lake.md)")
    assert error(includeIncomplete="yes") == "mysql_cdc: includeIncomplete must be true or false, got 'yes'"
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
