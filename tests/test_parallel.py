"""Parallel apply ([replay] workers > 1): the scheduler's decisions (pure), and the follower equal to a
native replica on a conflicting workload (real MariaDB servers, both row paths).

The SIGKILL tests with workers > 1 are in tests/test_faults.py."""

from __future__ import annotations

import msgspec
import pytest
from harness import wait_for

from cdc_consumer.catalog import foreign_key_family
from cdc_consumer.replayer import PARALLEL_GROUP_ROWS
from cdc_consumer.schedule import MAX_ATTEMPTS, GroupKeys, KeyCollector, Scheduler, TableKeys, fold_text, key_value
from cdc_stream.errors import DataError
from cdc_stream.events import ChangeEvent


def _keys(*rows: object, tables: tuple[str, ...] = (), barrier: bool = False) -> GroupKeys:
    keys = GroupKeys(barrier=barrier)
    for r in rows:
        keys.rows.add(("d", "t", 0, (r,)))
        keys.touched.add(("d", "t"))
    for t in tables:
        keys.tables.add(("d", t))
        keys.touched.add(("d", t))
    return keys


# -- keys


def _event(operation: str, rows: list, columns=("id", "u", "v"), table="t", json_rows=False, **kw) -> ChangeEvent:
    ev = ChangeEvent(uri="mysql://src/d/t", sequence=1, operation=operation, schema="d", table=table,
                     columns=list(columns), pk=["id"], **kw)
    if json_rows:  # as the reader leaves rows that may take the BINLOG path
        encoded = [msgspec.json.encode({"before_cols": b, "after_cols": a} if operation == "Update" else {"cols": r})
                   for r in rows for b, a in ([r] if operation == "Update" else [(None, None)])]
        ev.rows, ev.rows_json = encoded, True
    else:
        ev.rows = rows
    return ev


def _collector(**tables: TableKeys) -> KeyCollector:
    return KeyCollector(lambda schema, table: tables[table])


def _row(i: int, u: str, v: int = 0) -> list:
    return [{"Int": i}, {"String": u}, {"Int": v}]


UNIQUE = TableKeys(unique=(("id",), ("u",)))


@pytest.mark.parametrize("json_rows", [False, True], ids=["decoded", "json"])
def test_keys_are_every_unique_key_of_both_images(json_rows):
    keys = _collector(t=UNIQUE)
    keys.add(_event("Update", [(_row(1, "a"), _row(2, "B"))], json_rows=json_rows))
    got = keys.take()
    assert got.rows == {("d", "t", 0, (key_value({"Int": 1}),)), ("d", "t", 1, (("s", "a"),)),
                        ("d", "t", 0, (key_value({"Int": 2}),)), ("d", "t", 1, (("s", "b"),))}
    assert got.tables == set() and got.touched == {("d", "t")} and not got.barrier
    assert keys.take() == GroupKeys()  # the next group starts empty


def test_json_and_decoded_rows_give_the_same_keys():
    a, b = _collector(t=UNIQUE), _collector(t=UNIQUE)
    a.add(_event("Add", [_row(7, "x", 1)]))
    b.add(_event("Add", [_row(7, "x", 1)], json_rows=True))
    assert a.take() == b.take()


def test_collation_equal_text_meets():
    assert fold_text("Ärger  ") == fold_text("arger") == "arger"
    one, two = _collector(t=UNIQUE), _collector(t=UNIQUE)
    one.add(_event("Add", [_row(1, "É")]))
    two.add(_event("Delete", [_row(2, "e ")]))
    assert one.take().conflicts(two.take())


@pytest.mark.parametrize("info,columns,claim", [
    (TableKeys(), ("id", "u", "v"), "table"),  # no unique key: the whole table
    (TableKeys(unique=(("id",), ("w",))), ("id", "u", "v"), "table"),  # a key the image lacks
    (TableKeys(unique=(("id",),), whole=True), ("id", "u", "v"), "table"),  # a prefix key, WITHOUT OVERLAPS...
    (TableKeys(family=frozenset({("d", "t"), ("d", "p")})), ("id", "u", "v"), "family"),
    (TableKeys(barrier=True), ("id", "u", "v"), "barrier"),
])
def test_what_keys_cannot_name_is_claimed_whole(info, columns, claim):
    keys = _collector(t=info)
    keys.add(_event("Add", [_row(1, "a")], columns=columns))
    got = keys.take()
    if claim == "barrier":
        assert got.barrier
    else:
        assert not got.barrier and got.rows == set()
        assert got.tables == ({("d", "t")} if claim == "table" else {("d", "t"), ("d", "p")})


def test_a_snapshot_chunk_claims_its_table():
    from cdc_stream.positions import SnapshotChunk
    keys = _collector(t=UNIQUE)
    keys.add(_event("Add", [_row(1, "a")], snapshot=SnapshotChunk(table="t", copy="c", upto=[10])))
    assert keys.take().tables == {("d", "t")}


def test_the_collector_describes_each_table_once_until_forget():
    asked = []
    keys = KeyCollector(lambda s, t: asked.append(t) or UNIQUE)
    assert not keys.knows("d", "t")
    keys.add(_event("Add", [_row(1, "a")]))
    keys.add(_event("Add", [_row(2, "b")]))
    assert keys.knows("d", "t") and asked == ["t"]
    keys.forget()
    keys.add(_event("Add", [_row(3, "c")]))
    assert asked == ["t", "t"]


def test_foreign_key_family_is_every_table_linked_directly_or_not():
    edges = [(("d", "c"), ("d", "p")), (("d", "g"), ("d", "c")), (("e", "x"), ("e", "y"))]
    assert foreign_key_family(("d", "p"), edges) == {("d", "p"), ("d", "c"), ("d", "g")}
    assert foreign_key_family(("d", "g"), edges) == {("d", "p"), ("d", "c"), ("d", "g")}
    assert foreign_key_family(("d", "alone"), edges) == frozenset()


# -- conflicts


def test_conflicts():
    assert _keys(1, 2).conflicts(_keys(2, 3))
    assert not _keys(1, 2).conflicts(_keys(3))
    assert _keys(1).conflicts(_keys(tables=("t",)))  # a table claimed whole meets any row of it
    assert not _keys(1).conflicts(_keys(tables=("other",)))
    assert _keys(1).conflicts(_keys(barrier=True)) and _keys(barrier=True).conflicts(GroupKeys())


# -- the scheduler


def test_groups_start_in_order_beside_those_they_do_not_conflict_with():
    s: Scheduler[str] = Scheduler()
    for rows in ((1,), (2,), (1, 3), (4,)):
        s.add(_keys(*rows), f"g{rows}")
    a, b = s.next_ready(), s.next_ready()
    assert (a.seq, b.seq) == (0, 1)
    assert s.next_ready() is None  # group 2 touches row 1 of group 0, in flight; group 3 waits behind it
    assert not s.may_commit(1) and s.may_commit(0)
    s.committed(0)
    c = s.next_ready()
    assert c.seq == 2 and s.next_ready().seq == 3
    assert [s.may_commit(n) for n in (1, 2, 3)] == [True, False, False]
    for n in (1, 2, 3):
        s.committed(n)
    assert s.settled and s.groups == {}


def test_a_barrier_runs_alone():
    s: Scheduler[None] = Scheduler()
    s.add(_keys(1), None)
    s.add(_keys(barrier=True), None)
    s.add(_keys(2), None)
    assert s.next_ready().seq == 0 and s.next_ready() is None
    s.committed(0)
    assert s.next_ready().seq == 1 and s.next_ready() is None  # nothing starts beside the barrier
    s.committed(1)
    assert s.next_ready().seq == 2


def test_commits_only_in_order():
    s: Scheduler[None] = Scheduler()
    s.add(_keys(1), None)
    s.add(_keys(2), None)
    s.next_ready(), s.next_ready()
    with pytest.raises(AssertionError, match="out of order"):
        s.committed(1)


def test_a_lock_timeout_runs_that_group_and_every_later_one_again_alone_in_order():
    s: Scheduler[None] = Scheduler()
    for n in range(4):
        s.add(_keys(n), None)
    for _ in range(3):
        s.next_ready()  # 0, 1, 2 in flight; 3 waits (not started)
    s.failed(1, RuntimeError("lock wait timeout"), lock=True)  # group 1 waited on a lock group 2 holds
    assert s.abandoned(2) and not s.abandoned(0)  # group 2 must roll back; group 0 goes on
    assert s.next_ready() is None  # group 1 runs again alone: after 0 committed and 2 rolled back
    s.committed(0)
    assert s.next_ready() is None
    s.rolled_back(2)
    g1 = s.next_ready()
    assert g1.seq == 1 and g1.serial and g1.attempts == 2 and s.next_ready() is None
    s.committed(1)
    g2 = s.next_ready()
    assert g2.seq == 2 and g2.serial and s.next_ready() is None  # 2 was in flight: alone too
    s.committed(2)
    g3 = s.next_ready()
    assert g3.seq == 3 and not g3.serial  # 3 never ran: back to parallel
    assert s.retries == 1 and s.failure is None


def test_a_failure_beside_an_earlier_group_is_retried_alone_and_final_when_it_repeats():
    s: Scheduler[None] = Scheduler()
    for n in range(3):
        s.add(_keys(n), None)
    s.next_ready(), s.next_ready(), s.next_ready()
    duplicate = RuntimeError("duplicate key")
    s.failed(1, duplicate)  # group 0 not committed yet: maybe a conflict the keys missed
    assert s.failure is None and s.abandoned(2)
    s.rolled_back(2)
    s.committed(0)
    assert s.next_ready().seq == 1
    s.failed(1, duplicate)  # alone, every earlier group committed: the follower refuses it
    assert s.failure is not None and s.failure.seq == 1 and s.failure.error is duplicate
    assert s.settled and s.next_ready() is None and s.abandoned(2)
    assert s.turn == 1  # the checkpoint stays at group 0's commit


def test_a_failure_alone_is_final_and_later_groups_roll_back():
    s: Scheduler[None] = Scheduler()
    for n in range(3):
        s.add(_keys(n), None)
    s.next_ready(), s.next_ready(), s.next_ready()
    s.committed(0)
    s.failed(1, RuntimeError("duplicate key"))
    assert s.failure.seq == 1 and not s.settled  # group 2 is still rolling back
    assert s.abandoned(2) and not s.may_commit(2)
    s.rolled_back(2)
    assert s.settled


def test_lock_timeouts_alone_stop_after_max_attempts():
    s: Scheduler[None] = Scheduler()
    s.add(_keys(1), None)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        g = s.next_ready()
        assert g.attempts == attempt
        s.failed(0, RuntimeError("lock wait timeout"), lock=True)
    assert s.failure is not None and s.failure.seq == 0


def test_a_lost_connection_is_final_at_once():
    s: Scheduler[None] = Scheduler()
    s.add(_keys(1), None)
    s.add(_keys(2), None)
    s.next_ready(), s.next_ready()
    s.failed(1, ConnectionError("gone"), lost=True)
    assert s.failure.seq == 1 and s.may_commit(0)  # group 0 still commits


# -- real servers: the follower equals a native replica (tests/differential.py)

WORK = """CREATE PROCEDURE work(first INT, last INT)
BEGIN
  DECLARE i INT DEFAULT first;
  WHILE i < last DO
    UPDATE h SET v = v + 1 WHERE id = (i * 7) % 40 + 1;
    START TRANSACTION;
      UPDATE h SET u = NULL WHERE u = i % 40;
      UPDATE h SET u = i % 40 WHERE id = (i * 13) % 40 + 1;
    COMMIT;
    START TRANSACTION;
      UPDATE h SET s = NULL WHERE s = CONCAT('k', i % 9);
      UPDATE h SET s = IF(i % 2, UPPER(CONCAT('k', i % 9)), CONCAT('k', i % 9, ' ')) WHERE id = (i * 11) % 40 + 1;
    COMMIT;
    UPDATE h SET id = id + 1000 WHERE id = (i * 3) % 40 + 1;
    UPDATE h SET id = id - 1000 WHERE id > 1000;
    DELETE FROM h WHERE id = (i * 17) % 40 + 1;
    INSERT INTO h (id, v) VALUES ((i * 17) % 40 + 1, i);
    INSERT INTO k VALUES (i, i % 3);
    DELETE FROM k WHERE a = i - 5 LIMIT 1;
    UPDATE k SET b = b + 1 WHERE b = i % 3 LIMIT 1;
    INSERT INTO p VALUES (i, 0);
    INSERT INTO c VALUES (i, i);
    UPDATE p SET id = id + 100000 WHERE id = i - 2;
    DELETE FROM p WHERE id = i - 4 + 100000;
    SET i = i + 1;
  END WHILE;
END"""


def conflicting_scenario(name: str):
    from differential import Scenario
    return Scenario(name, "hot rows, moved unique values, key changes, key-less and foreign-key tables, DDL", (
        "CREATE TABLE h (id INT PRIMARY KEY, u INT NULL UNIQUE, v INT NOT NULL, "
        "s VARCHAR(20) COLLATE utf8mb4_general_ci NULL UNIQUE)",
        "INSERT INTO h (id, v) SELECT seq, 0 FROM seq_1_to_40",
        "CREATE TABLE k (a INT, b INT)",
        "CREATE TABLE p (id INT PRIMARY KEY, n INT)",
        "CREATE TABLE c (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES p (id) "
        "ON DELETE CASCADE ON UPDATE CASCADE)",
        WORK,
        "CALL work(0, 300)",
        "ALTER TABLE h ADD COLUMN w INT NOT NULL DEFAULT 5",
        "CALL work(300, 600)",
    ), source="26", timeout=180)


@pytest.mark.server
@pytest.mark.parametrize("rows", ["auto", "sql"], ids=["binlog", "sql"])
def test_four_workers_equal_native_replication(tmp_path, rows):
    from differential import Differential
    with Differential(tmp_path, rows=rows, replay="workers = 4\n") as harness:
        outcome = harness.run(conflicting_scenario(f"par_{rows}"))
        assert outcome.ok, outcome.report()
        assert "4 workers" in harness.pipeline.consumer.stderr


# -- real servers: the retry path and a worker's failure (tests/conftest.py's pipeline)

# A consumer session whose BINLOG statement waits in the follower's row lookup: blocked on the holder's row lock.
# (Not INNODB_TRX: in about one run in five MariaDB 10.11 listed only the holder's transaction there while the
# consumer's session sat in this state until its lock wait timed out.)
BLOCKED_IN_FIND_ROW = ("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND ID <> %s "
                       "AND STATE = 'Update_rows_log_event::find_row()'")


def _parallel_pipeline(pipeline, workers: int = 2):
    producer = pipeline.start_producer()
    pipeline.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.a (id INT PRIMARY KEY, v INT NOT NULL)",
                            "CREATE TABLE flvDb.b (id INT PRIMARY KEY, v INT NOT NULL)",
                            "INSERT INTO flvDb.a VALUES (1, 0), (2, 0)", "INSERT INTO flvDb.b VALUES (1, 0), (2, 0)",
                            "CREATE TABLE flvDb.c (id INT PRIMARY KEY)")
    consumer = pipeline.start_consumer(pipeline.consumer_profile(extra=f"[replay]\nworkers = {workers}\n"))
    pipeline.wait_synced()
    return producer, consumer


def _holder(follower, sql: str):
    """A follower session of its own holding the lock of a row the consumer will want."""
    conn = follower.connect()
    conn.autocommit(False)
    with conn.cursor() as cur:
        cur.execute(sql)
        cur.execute("SELECT CONNECTION_ID()")
        own = cur.fetchone()[0]
    return conn, own


def _blocked_in_find_row(follower, holder_id: int) -> bool:
    return follower.query(BLOCKED_IN_FIND_ROW, (holder_id,)) == [(1,)]


# A source transaction of PARALLEL_GROUP_ROWS rows fills a group: the transaction after it, run on the
# leader right after, starts the next group (read in the same batch, or within the reader's wait).
FILL = f"INSERT INTO flvDb.c SELECT seq FROM mysql.seq_1_to_{PARALLEL_GROUP_ROWS}"


def _after_first_transaction(pipeline, start: int) -> int:
    """The offset after the first source transaction published at or after `start`."""
    events = pipeline.events()[start:]
    return start + next(i for i, e in enumerate(events) if e["txn"]["last"]) + 1


@pytest.mark.server
def test_a_group_waiting_on_a_lock_runs_again_in_order_and_later_groups_wait_for_its_commit(pipeline):
    """Group 0 blocks on a row lock; group 1 (another table) comes after it: it must not commit first.
    Group 0's lock wait times out: the groups roll back and run again in order."""
    _, consumer = _parallel_pipeline(pipeline)
    start = pipeline.checkpoint()
    holder, holder_id = _holder(pipeline.follower, "SELECT * FROM flvDb.a WHERE id = 1 FOR UPDATE")
    try:
        conn = pipeline.leader.connect()
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("UPDATE flvDb.a SET v = 1 WHERE id = 1")
            cur.execute(FILL)
            cur.execute("COMMIT")
            # Group 0 blocked at its first row: the reader then finds nothing more and closes the group, so the
            # next transaction starts group 1 whichever way the topic's records were cut (read together, the
            # two could share one group).
            wait_for(lambda: _blocked_in_find_row(pipeline.follower, holder_id), 30,
                     "group 0 to wait for the row lock")
            cur.execute("UPDATE flvDb.b SET v = 1 WHERE id = 2")
        conn.close()
        # Group 1 may run its row beside group 0 and wait for its turn (most runs here; not always: why is open),
        # but it never commits first: until group 0's lock wait times out, flvDb.b keeps its old row.
        consumer.wait_line("waited over 2s for a row lock", timeout=30)
        assert pipeline.checkpoint() == start
        assert pipeline.follower.query("SELECT v FROM flvDb.b WHERE id = 2") == [(0,)]
    finally:
        holder.rollback()
        holder.close()
    pipeline.wait_synced()
    for table in ("a", "b", "c"):
        assert pipeline.follower.rows("flvDb", table) == pipeline.leader.rows("flvDb", table)
    assert "rolled back with the groups after it, which run again one at a time in order" in consumer.stderr
    assert consumer.stop() == 0


@pytest.mark.server
def test_a_failing_group_stops_every_worker_with_the_checkpoint_at_the_last_commit_in_order(pipeline):
    """Group 1 meets a duplicate key on the follower while group 0 is still running: it runs again once
    group 0 committed, fails alone, and the consumer stops with group 0 committed and nothing after it."""
    _, consumer = _parallel_pipeline(pipeline)
    pipeline.follower.execute("INSERT INTO flvDb.a VALUES (50, -1)")  # the follower's own row: a duplicate to come
    start = pipeline.end_offset()
    holder, _ = _holder(pipeline.follower, "SELECT * FROM flvDb.b WHERE id = 1 FOR UPDATE")
    try:
        conn = pipeline.leader.connect()
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("UPDATE flvDb.b SET v = 7 WHERE id = 1")
            cur.execute(FILL)
            cur.execute("COMMIT")
            cur.execute("INSERT INTO flvDb.a VALUES (50, 50)")
            cur.execute("UPDATE flvDb.a SET v = 9 WHERE id = 2")  # later: never committed
        conn.close()
        consumer.wait_line("failed beside an earlier group not yet committed", timeout=30)
        pipeline.wait_published()
    finally:
        holder.rollback()
        holder.close()
    assert consumer.proc.wait(timeout=60) == DataError.exit_code, consumer.stderr
    after_group_0 = _after_first_transaction(pipeline, start)
    assert "Duplicate entry '50'" in consumer.stderr and f"at offsets {after_group_0}.." in consumer.stderr
    assert pipeline.checkpoint() == after_group_0
    assert pipeline.follower.rows("flvDb", "b") == [(1, 7), (2, 0)]  # group 0 committed
    assert pipeline.follower.query("SELECT COUNT(*) FROM flvDb.c") == [(PARALLEL_GROUP_ROWS,)]
    assert pipeline.follower.rows("flvDb", "a") == [(1, 0), (2, 0), (50, -1)]  # nothing of later groups


@pytest.mark.server
def test_workers_may_change_between_runs(pipeline):
    """One checkpoint row whatever `workers` is: each run resumes exactly where the previous one committed."""
    pipeline.start_producer()
    pipeline.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.a (id INT PRIMARY KEY, v INT NOT NULL)")
    for workers, first in ((1, 0), (3, 100), (1, 200), (2, 300)):
        consumer = pipeline.start_consumer(pipeline.consumer_profile(extra=f"[replay]\nworkers = {workers}\n"))
        pipeline.leader.execute(*[f"INSERT INTO flvDb.a VALUES ({i}, {i})" for i in range(first, first + 100)],
                                f"UPDATE flvDb.a SET v = v + 1 WHERE id < {first + 50}")
        pipeline.wait_synced()
        assert consumer.stop() == 0
        assert pipeline.follower.rows("flvDb", "a") == pipeline.leader.rows("flvDb", "a")
    assert pipeline.follower.query("SELECT COUNT(*) FROM mysql_cdc.consumer_offsets") == [(1,)]
