"""cdc_spark.lake without Spark: micro-batches as the source gives them, written in-process (LocalEngine) and
committed to Delta tables (delta-rs) exactly as the Spark job does."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from cdc_spark.lake import TAG_COLUMNS, Lake, LakeError, apply_batch
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


def state(lake, table="t", columns=("id", "note")) -> list[tuple]:
    rows = DeltaTable(str(lake / "state" / "shop" / table)).to_pyarrow_table().to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def changelog(lake, table="t") -> list[tuple]:
    log = DeltaTable(str(lake / "changelog" / "shop" / table)).to_pyarrow_table().to_pylist()
    return sorted((r["offset"], r["row_index"], r["op"]) for r in log)


def new_lake(path) -> Lake:
    return Lake(path, lambda db, t: SCHEMAS.get((db, t)))


BATCH = [row(0, "ddl", ddl="CREATE TABLE shop.t (id INT PRIMARY KEY, note VARCHAR(9))", pk=()),
         row(1, "insert", after=[i(1), s("a")]), row(1, "insert", after=[i(2), s("b")], index=1),
         row(2, "update", before=[i(1), s("a")], after=[i(3), s("a")]),  # a key change
         row(3, "delete", before=[i(2), s("b")]), row(4, "insert", after=[i(2), s("B")])]
LOG = [(0, 0, "ddl"), (1, 0, "insert"), (1, 1, "insert"), (2, 0, "update"), (3, 0, "delete"), (4, 0, "insert")]


def test_a_replayed_batch_is_skipped_and_key_changes_merge(tmp_path):
    lake = new_lake(tmp_path)
    apply_batch(lake, "q", 0, BATCH)
    assert state(tmp_path) == [(2, "B"), (3, "a")]
    assert lake.commits == 4  # create, the CREATE's change-log row, the state's files, the change log's files
    again = new_lake(tmp_path)  # a restarted job replays batch 0
    apply_batch(again, "q", 0, BATCH)
    assert again.commits == 0 and changelog(tmp_path) == LOG
    apply_batch(again, "q", 1, [row(5, "update", before=[i(3), s("a")], after=[i(3), s("c")])])
    assert state(tmp_path) == [(2, "B"), (3, "c")] and again.commits == 2
    # each state row keeps where its change came from
    rows = DeltaTable(str(tmp_path / "state" / "shop" / "t")).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["_cdc_offset"], r["_cdc_row_index"], r["_cdc_sequence"]) for r in rows) == [
        (2, 4, 0, 4), (3, 5, 0, 5)]


def test_a_change_older_than_the_row_does_not_apply(tmp_path):
    """A new query (new app id) over a lake already past offset 5: its older changes leave the rows alone."""
    lake = new_lake(tmp_path)
    apply_batch(lake, "q", 0, BATCH + [row(5, "update", before=[i(3), s("a")], after=[i(3), s("c")])])
    other = new_lake(tmp_path)
    apply_batch(other, "another query", 0, [row(2, "update", before=[i(1), s("a")], after=[i(3), s("old")])])
    assert state(tmp_path) == [(2, "B"), (3, "c")]


def test_foreign_commits_between_batches_lose_nothing(tmp_path):
    """OPTIMIZE, VACUUM and a checkpoint by someone else between (and inside) replays: the job's application
    transaction still says what is done, its column types are still found, nothing is applied twice or lost."""
    lake = new_lake(tmp_path)
    apply_batch(lake, "q", 0, BATCH)
    for table in ("state", "changelog"):
        dt = DeltaTable(str(tmp_path / table / "shop" / "t"))
        dt.optimize.compact()
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        dt.alter.set_table_properties({"delta.checkpointInterval": "3"})  # a foreign commit, whatever else did
        dt.create_checkpoint()
        latest = DeltaTable(str(tmp_path / table / "shop" / "t")).history(1)[0]
        assert latest["operation"] == "SET TBLPROPERTIES" and TAG_COLUMNS not in latest
    again = new_lake(tmp_path)
    assert again.table("shop", "t").schema == SCHEMAS[("shop", "t")] and again.table("shop", "t").key == ("id",)
    apply_batch(again, "q", 0, BATCH)  # the replay
    assert again.commits == 0
    apply_batch(again, "q", 1, [row(5, "delete", before=[i(3), s("a")]), row(6, "insert", after=[i(7), s("x")])])
    assert state(tmp_path) == [(2, "B"), (7, "x")]
    assert changelog(tmp_path) == LOG + [(5, 0, "delete"), (6, 0, "insert")]


def test_tables_without_a_key_are_multisets(tmp_path):
    lake = new_lake(tmp_path)
    v = [row(0, "insert", "bag", after=[i(1)], pk=(), index=n) for n in range(3)]
    apply_batch(lake, "q", 0, [*v, row(1, "insert", "bag", after=[i(2)], pk=())])
    apply_batch(lake, "q", 1, [row(2, "delete", "bag", before=[i(1)], pk=()),
                               row(3, "update", "bag", before=[i(2)], after=[i(1)], pk=())])
    assert state(tmp_path, "bag", ("v",)) == [(1,), (1,), (1,)]


def test_add_column_fills_existing_files_and_a_replay_adds_it_once(tmp_path):
    schemas = dict(SCHEMAS)
    lake = Lake(tmp_path, lambda db, t: schemas.get((db, t)))
    apply_batch(lake, "q", 0, [row(n, "insert", after=[i(n), s("x")]) for n in range(20)])
    schemas[("shop", "t")] = TableSchema("shop", "t", (*SCHEMAS[("shop", "t")].columns, ColumnType("qty", "int")))
    add = [row(20, "ddl", ddl="ALTER TABLE shop.t ADD COLUMN qty INT NOT NULL DEFAULT 5", pk=())]
    apply_batch(lake, "q", 1, add)
    apply_batch(Lake(tmp_path, lambda db, t: schemas.get((db, t))), "q", 1, add)  # a replay
    assert state(tmp_path, columns=("id", "qty")) == sorted(((n, 5) for n in range(20)), key=repr)
    assert [f.name for f in DeltaTable(str(tmp_path / "state" / "shop" / "t")).schema().fields].count("qty") == 1


def test_what_the_lake_cannot_follow_stops_it_at_the_offset(tmp_path):
    lake = new_lake(tmp_path)
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
    with pytest.raises(LakeError) as e:
        apply_batch(lake, "q", 3, [row(9, "insert", after=[i(2), s("b")], pk=("note",))])
    assert str(e.value) == ("offset 9: the primary key of shop.t is now (note), the lake's table was built on (id); "
                            "the lake cannot follow: rebuild it (new --lake and --checkpoint directories)")


def test_maintenance_between_batches_compacts_and_vacuums_without_losing_a_change(tmp_path):
    from cdc_spark.maintain import maintain

    lake = new_lake(tmp_path)
    for n in range(4):  # four batches: several files per bucket
        apply_batch(lake, "q", n, [row(10 * n + k, "insert", after=[i(10 * n + k), s("x")]) for k in range(10)])
    orphan = tmp_path / "state" / "shop" / "t" / "_cdc_bucket=0" / "part-orphan.snappy.parquet"
    orphan.write_bytes(b"a file a killed batch wrote and never committed")
    done = {m.path: m for m in maintain(tmp_path, 0)}
    state_m = done[str(tmp_path / "state" / "shop" / "t")]
    assert state_m.compacted > state_m.added > 0 and not orphan.exists()
    again = new_lake(tmp_path)
    apply_batch(again, "q", 3, [row(30 + k, "insert", after=[i(30 + k), s("x")]) for k in range(10)])  # a replay
    apply_batch(again, "q", 4, [row(40, "update", before=[i(1), s("x")], after=[i(1), s("y")]),
                                row(41, "delete", before=[i(2), s("x")])])
    assert again.commits == 2
    assert state(tmp_path) == sorted([(n, "y" if n == 1 else "x") for n in range(40) if n != 2], key=repr)


def test_a_missing_module_of_the_spark_extra_names_the_extra():
    """pyspark alone used to fail as `No module named 'pyarrow'` inside spark-submit spark/verify_replica.py."""
    from cdc_spark import missing_extra

    assert missing_extra() is None  # this venv has the extra
    assert missing_extra(("pyarrow", "no_such_module", "nor_this")) == (
        "no_such_module, nor_this are not installed: the Spark jobs need the project's spark extra: "
        "pip install 'mysql-cdc[spark]' (from a checkout: pip install -e '.[spark]')")


def test_a_float_key_matches_the_row_the_file_holds(tmp_path):
    """FLOAT is 32 bits in the file: 0.1 there is 0.10000000149011612, the change's key 0.1 must still find it."""
    schemas = {("shop", "f"): TableSchema("shop", "f", (ColumnType("k", "float"), ColumnType("v", "int")))}
    lake = Lake(tmp_path, lambda db, t: schemas.get((db, t)))

    def frow(offset, op, before=None, after=None):
        image = lambda vals: None if vals is None else [("k", json.dumps(vals[0])), ("v", json.dumps(vals[1]))]
        return {**row(offset, op, pk=("k",)), "table": "f", "before": image(before), "after": image(after)}

    apply_batch(lake, "q", 0, [frow(0, "insert", after=[{"Float": 0.1}, i(1)])])
    apply_batch(lake, "q", 1, [frow(1, "update", before=[{"Float": 0.1}, i(1)], after=[{"Float": 0.1}, i(2)])])
    rows = DeltaTable(str(tmp_path / "state" / "shop" / "f")).to_pyarrow_table().to_pylist()
    assert [(round(r["k"], 6), r["v"]) for r in rows] == [(0.1, 2)]


def chunk(offset: int, after, upto, rows, table="t", pk=("id",), where=None, append=False) -> list[dict]:
    """A live copy's chunk as the source gives it: its copy_range row, then its rows."""
    marker = {"id": "c", "after": after, "upto": upto, "first": after is None, "done": upto is None, "recopy": True,
              "append": append, "where": where}
    return [{**row(offset, "copy_range", table, pk=pk), "copy": marker}] + [
        {**row(offset, "copy", table, after=r, pk=pk, index=n + 1), "copy": marker} for n, r in enumerate(rows)]


def test_a_chunk_replaces_its_key_range_as_the_consumer_does(tmp_path):
    """A re-copy's chunk: the lake's rows of its range that the chunk does not carry disappear (every bucket)."""
    lake = new_lake(tmp_path)
    apply_batch(lake, "q", 0, [BATCH[0]] + [row(1, "insert", after=[i(k), s(f"v{k}")], index=k) for k in range(1, 13)])
    # The leader no longer has 3..5, and 6 changed: the chunk (2, 8] says so; a change after it stays.
    apply_batch(lake, "q", 1, chunk(2, [2], [8], [[i(6), s("new")], [i(7), s("v7")], [i(8), s("v8")]])
                + [row(3, "insert", after=[i(4), s("later")])])
    assert state(tmp_path) == sorted([(1, "v1"), (2, "v2"), (4, "later"), (6, "new"), (7, "v7"), (8, "v8"), (9, "v9"),
                                      (10, "v10"), (11, "v11"), (12, "v12")], key=repr)
    # A copy with a condition (leader SQL the lake cannot evaluate): its rows are upserts, nothing else goes.
    apply_batch(lake, "q", 2, chunk(4, [8], None, [[i(9), s("w")]], where="note = 'w'"))
    assert [r for r in state(tmp_path) if r[0] > 8] == sorted([(9, "w"), (10, "v10"), (11, "v11"), (12, "v12")], key=repr)
    # The last chunk (no upto) replaces every key above its after; within one batch, a change before the
    # chunk is replaced by it, one after it stays.
    apply_batch(lake, "q", 3, [row(5, "insert", after=[i(30), s("gone")])] + chunk(6, [10], None, [[i(11), s("x")]])
                + [row(7, "insert", after=[i(35), s("kept")])])
    assert [r for r in state(tmp_path) if r[0] > 8] == sorted([(9, "w"), (10, "v10"), (11, "x"), (35, "kept")], key=repr)
    # The first chunk of a copy (no after, no upto: a table copied whole) replaces every row.
    apply_batch(lake, "q", 4, chunk(8, None, None, [[i(1), s("only")]]))
    assert state(tmp_path) == [(1, "only")]


def test_a_table_without_a_key_copied_whole_replaces_the_multiset(tmp_path):
    lake = new_lake(tmp_path)
    create = row(0, "ddl", ddl="CREATE TABLE shop.bag (v INT)", pk=())
    apply_batch(lake, "q", 0, [create] + [row(1, "insert", "bag", after=[i(v)], pk=(), index=n) for n, v in
                                          enumerate([1, 1, 2])])
    apply_batch(lake, "q", 1, chunk(2, None, None, [[i(1)], [i(3)]], "bag", pk=())
                + chunk(3, None, None, [[i(3)]], "bag", pk=(), append=True))
    assert state(tmp_path, "bag", ("v",)) == [(1,), (3,), (3,)]


def test_the_executors_collector_is_the_jobs_only_where_the_user_set_none():
    """spark/lake.py gives its executors EXECUTOR_GC when spark.executor.extraJavaOptions is unset; never merged
    into a user's value, not with a collector among spark.executor.defaultJavaOptions, not for local masters."""
    from cdc_spark.session import EXECUTOR_GC, EXECUTOR_JAVA_OPTIONS, executor_settings

    def settings(**conf: str) -> dict:
        return executor_settings({k.replace("_", "."): v for k, v in conf.items()}.get)

    default = {EXECUTOR_JAVA_OPTIONS: EXECUTOR_GC}
    for master in ("local-cluster[1,1,1024]", "spark://host:7077", "yarn", "k8s://https://api:6443"):
        assert settings(spark_master=master) == default
    assert settings() == default  # no master in the settings: not a local one
    assert settings(spark_master="yarn", spark_executor_defaultJavaOptions="-Xlog:gc:file=gc.log") == default
    for master in ("local", "local[2]", "local[*]", "local[4,3]"):  # the executor is the driver's JVM
        assert settings(spark_master=master) == {}
    for user in ("-XX:+UseG1GC", "-Xss4m", ""):  # any value is the user's, even an empty one
        assert settings(spark_master="local-cluster[1,1,1024]", spark_executor_extraJavaOptions=user) == {}
    assert settings(spark_master="yarn", spark_executor_defaultJavaOptions="-Xlog:gc -XX:+UseG1GC") == {}
    assert settings(spark_master="yarn", spark_executor_defaultJavaOptions="-XX:+UseZGC") == {}


def test_a_table_without_a_key_after_add_column_finds_its_rows(tmp_path):
    """The source buckets a row of a table without a key by the event's columns; the lake's key is the columns the
    table was created with. After ADD COLUMN the events name one more column: their rows are bucketed again by
    the lake's key (lakefiles.rebucket), so a delete or update meets the row it changes."""
    k = TableSchema("shop", "k", (ColumnType("a", "int"), ColumnType("b", "varchar")))
    schemas = {("shop", "k"): k}
    lake = Lake(tmp_path, lambda db, t: schemas.get((db, t)))

    def krow(offset, op, before=None, after=None, ddl=None):
        names = ("a", "b", "c")
        image = (lambda vs: None if vs is None else [(n, json.dumps(v, separators=(",", ":")))
                                                     for n, v in zip(names, vs)])
        return {**row(offset, op, "bag", ddl=ddl, pk=()), "table": "k", "before": image(before),
                "after": image(after)}

    apply_batch(lake, "q", 0, [krow(0, "ddl", ddl="CREATE TABLE shop.k (a INT, b VARCHAR(9))")]
                + [krow(1, "insert", after=[i(n), s("x")]) | {"row_index": n} for n in range(20)])
    schemas[("shop", "k")] = TableSchema("shop", "k", (*k.columns, ColumnType("c", "int")))
    apply_batch(lake, "q", 1, [krow(2, "ddl", ddl="ALTER TABLE shop.k ADD COLUMN c INT NOT NULL DEFAULT 7")]
                + [krow(3, "delete", before=[i(n), s("x"), i(7)]) | {"row_index": n} for n in range(10)]
                + [krow(4, "update", before=[i(10), s("x"), i(7)], after=[i(10), s("y"), i(7)]),
                   krow(5, "insert", after=[i(99), s("z"), i(1)])])
    assert state(tmp_path, "k", ("a", "b", "c")) == sorted(
        [(10, "y", 7), *((n, "x", 7) for n in range(11, 20)), (99, "z", 1)], key=repr)


def test_the_drivers_jit_is_the_jobs_only_where_the_user_chose_none():
    """spark/lake.py excludes its driver's C2 (session.driver_c1) only when no JVM argument is a JIT option."""
    from cdc_spark.session import driver_c1_wanted

    for arguments in ([], ["-Xmx1g", "-Dlog4j2.configurationFile=file:/x", "-XX:+UseG1GC", "-Xlog:gc:file=gc.log"]):
        assert driver_c1_wanted(arguments)
    for jit in ("-XX:TieredStopAtLevel=4", "-XX:TieredStopAtLevel=1", "-XX:-TieredCompilation",
                "-XX:+TieredCompilation", "-XX:+UseJVMCICompiler", "-XX:CompileThreshold=1000"):
        assert not driver_c1_wanted(["-Xmx1g", jit])


def test_a_tasks_exception_is_reported_as_what_the_task_raised():
    """task_errors.task_error: a CdcError raised in a Spark task keeps its message and exit code; a task's OSError
    is one line naming it; anything else stays Spark's exception."""
    from pyspark.errors.exceptions.base import PythonException

    from cdc_spark.task_errors import task_error
    from cdc_stream.errors import CdcError

    def from_worker(*last: str) -> PythonException:
        return PythonException(message="\n".join([
            "An exception was thrown from the Python worker:", "Traceback (most recent call last):",
            '  File "/work/cdc_spark/rows.py", line 264, in record_batches',
            '    raise MalformedEvent(f"offset {loc.offset}: {e}") from None', *last]))

    malformed = task_error(from_worker("cdc_stream.errors.MalformedEvent: offset 7: rows: an image of 2 values for "
                                       "1 columns", " SQLSTATE: 38000"))
    assert isinstance(malformed, CdcError) and malformed.exit_code == 5
    assert str(malformed) == "offset 7: rows: an image of 2 values for 1 columns"
    config = task_error(from_worker("cdc_stream.errors.ConfigError: mysql_cdc: option 'x'", "  on two lines"))
    assert isinstance(config, CdcError) and config.exit_code == 2 and str(config) == "mysql_cdc: option 'x'\n  on two lines"
    full = task_error(from_worker("OSError: [Errno 28] No space left on device: '/lake/_spill/3.arrow'"), "then this")
    assert isinstance(full, CdcError) and full.exit_code == 1
    assert str(full) == ("OSError in a Spark task on an executor: [Errno 28] No space left on device: "
                         "'/lake/_spill/3.arrow'; then this")
    assert str(task_error(from_worker("PermissionError: [Errno 13] Permission denied: '/l'"))) == (
        "PermissionError in a Spark task on an executor: [Errno 13] Permission denied: '/l'; fix the cause and run "
        "the job again")
    for last in ("ValueError: a bug", "numpy.Oops: x", "cdc_stream.errors.RETRIABLE_SERVER_ERRORS: x",
                 "other.errors.MalformedEvent: x", "no exception line"):
        spark_own = from_worker(last)
        assert task_error(spark_own) is spark_own
    driver_own = RuntimeError("cdc_stream.errors.MalformedEvent: x")
    assert task_error(driver_own) is driver_own
