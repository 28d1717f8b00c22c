"""The consumer commits several source transactions at once: the checkpoint must still be exact.

Topics are written by hand (cdc-topic produce) so that every case sits inside one
read batch, i.e. inside one follower transaction.
"""

from __future__ import annotations

import json

from harness import run_cli, wait_for
from test_errors import one_line_error, produce

URI = "flv://mysql-srv1/flvDb/pet"


def event(seq: int, txn: str, index: int, last: bool, *values, op: str = "Add") -> str:
    rows = [{"cols": [v if isinstance(v, dict) else {"SignedInteger": v}]} for v in values]
    return json.dumps({"uri": URI, "sequence": seq, "gtid": f"0-1-{txn}", "txn": {"id": f"0-1-{txn}", "index": index,
                       "last": last}, "columns": ["id"], "pk": [], "operation": {op: {"rows": rows}}})


def consume(pipeline):
    return run_cli("cdc-consumer", str(pipeline.consumer_profile()))


def test_a_partial_transaction_inside_a_group_is_dropped_alone(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT)")  # no key: a double apply shows
    produce(pipeline, [
        event(0, "1", 0, True, 1),
        event(1, "2", 0, False, 2, 2),  # the producer died here and published transaction 2 again, whole
        event(2, "2", 0, False, 2, 2),
        event(3, "2", 1, True, 3),
        event(4, "3", 0, True, 4),
        event(5, "4", 0, False, 5),  # a partial tail: never applied
    ])
    consumer = pipeline.start_consumer()
    wait_for(lambda: pipeline.checkpoint() == 5, 30, "the consumer to apply transaction 3")
    assert sorted(pipeline.follower.rows("flvDb", "pet")) == [(1,), (2,), (2,), (3,), (4,)]
    assert consumer.stop() == 0
    assert "applied 3 transactions (5 rows)" in consumer.stderr
    assert sorted(pipeline.follower.rows("flvDb", "pet")) == [(1,), (2,), (2,), (3,), (4,)]


def test_a_bad_value_keeps_the_whole_transactions_before_it(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT)")
    produce(pipeline, [
        event(0, "1", 0, True, 1),
        event(1, "2", 0, False, 2),
        event(2, "2", 1, True, {"SignedInteger": "3"}),
    ])
    result = consume(pipeline)
    assert result.returncode == 5
    assert one_line_error(result) == (
        "error: offset 2 (transaction 0-1-2) holds a bad value: bad SignedInteger value '3': expected an integer; "
        "nothing of the transaction was applied")
    assert pipeline.follower.rows("flvDb", "pet") == [(1,)]
    assert pipeline.checkpoint() == 1


def test_a_failed_statement_rolls_back_its_group_and_a_restart_applies_it_once(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY)")
    ghost = event(3, "3", 1, True, 3).replace("/flvDb/pet", "/flvDb/ghost")
    produce(pipeline, [event(0, "1", 0, True, 1), event(1, "2", 0, True, 2), event(2, "3", 0, False, 5), ghost,
                       event(4, "4", 0, True, 4)])
    result = consume(pipeline)
    assert result.returncode == 5
    assert one_line_error(result) == (
        "error: table `flvDb`.`ghost` does not exist on the follower (offset 3, transaction 0-1-3); "
        "create it there or exclude it with [filters]; nothing of the transaction was applied")
    # Transactions 1 and 2 shared the follower commit the failure rolled back: the checkpoint is before them.
    assert pipeline.follower.rows("flvDb", "pet") == []
    assert pipeline.checkpoint() is None
    pipeline.follower.execute("CREATE TABLE flvDb.ghost (id INT PRIMARY KEY)")
    consumer = pipeline.start_consumer()
    wait_for(lambda: pipeline.checkpoint() == 5, 30, "the consumer to apply every transaction")
    assert consumer.stop() == 0
    assert pipeline.follower.rows("flvDb", "pet") == [(1,), (2,), (4,), (5,)]
    assert pipeline.follower.rows("flvDb", "ghost") == [(3,)]
