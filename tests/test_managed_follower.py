"""A follower user as managed services give it (no SUPER, SET USER or BINLOG REPLAY), end to end with the real
CLIs: a DEFINER it may not name and a trigger without log_bin_trust_function_creators stop the consumer naming
the fix; with [replay] definer = "consumer" and the setting on, triggers are created guarded, so the
consumer's rows do not fire them while the follower's own sessions do."""

from __future__ import annotations

from differential import MANAGED_GRANTS
from harness import run_cli

DB = "flvDb"
USER = "'mgd'@'%'"


def _error(result) -> str:
    err = result.stderr.decode()
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    return line


def test_a_managed_users_follower_names_each_fix_then_replicates_with_guarded_triggers(pipeline):
    f, leader = pipeline.follower, pipeline.leader
    f.execute("DROP USER IF EXISTS 'mgd'@'%'", f"CREATE USER {USER} IDENTIFIED BY 'pw'",
              f"GRANT {MANAGED_GRANTS} ON *.* TO {USER} WITH GRANT OPTION",
              "SET GLOBAL log_bin_trust_function_creators = OFF")
    pipeline.start_producer()
    leader.execute(f"CREATE DATABASE {DB}")
    leader.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                   "CREATE TABLE log (id INT AUTO_INCREMENT PRIMARY KEY, t_id INT)",
                   "CREATE VIEW tv AS SELECT id, v FROM t",
                   "CREATE TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW BEGIN\n"
                   "  INSERT INTO log (t_id) VALUES (NEW.id);\nEND",
                   "INSERT INTO t VALUES (1, 1), (2, 2)", db=DB)
    pipeline.wait_published()

    def consumer(definer: str):
        profile = pipeline.consumer_profile(extra=f'[replay]\ndefiner = "{definer}"')
        profile.write_text(profile.read_text().replace('user = "root"\npassword = ""', 'user = "mgd"\npassword = "pw"'))
        return profile

    refused = run_cli("cdc-consumer", str(consumer("leader")))
    assert refused.returncode == 5
    assert _error(refused).endswith(
        "DDL failed on the follower: Access denied; you need (at least one of) the SUPER, SET USER privilege(s) for "
        "this operation (MySQL error 1227); nothing of the transaction was applied; fix: its DEFINER=`root`@`localhost` "
        "names another account, which needs SET USER (or SUPER) on the follower: set [replay] definer = \"consumer\" "
        "to create it with the consumer's user as definer, or GRANT SET USER ON *.* TO the consumer's user; then "
        "restart the consumer")
    assert f.query("SELECT COUNT(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s", (DB,)) == [(0,)]

    refused = run_cli("cdc-consumer", str(consumer("consumer")))
    assert refused.returncode == 5
    assert _error(refused).endswith(
        "(MySQL error 1419); nothing of the transaction was applied; fix: the follower has binary logging on and its "
        "user lacks SUPER: SET GLOBAL log_bin_trust_function_creators = ON on the follower (and in its my.cnf or "
        "parameter group), then restart the consumer")

    f.execute("SET GLOBAL log_bin_trust_function_creators = ON")
    try:
        pipeline.start_consumer(consumer("consumer"))
        pipeline.wait_synced()
        assert f.rows(DB, "t") == leader.rows(DB, "t") == [(1, 1), (2, 2)]
        # The leader's trigger wrote log; the replicated rows carry that, and the guarded trigger did not fire again.
        assert f.rows(DB, "log") == leader.rows(DB, "log") == [(1, 1), (2, 2)]
        assert f.query("SELECT DEFINER FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s", (DB,)) == [("mgd@%",)]
        assert f.query("SELECT DEFINER, ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s",
                       (DB,)) == [("mgd@%", "IF @cdc_consumer IS NULL THEN BEGIN\n  INSERT INTO log (t_id) VALUES "
                                             "(NEW.id);\nEND; END IF")]
        # The follower's own sessions fire it, as the leader's do.
        f.execute("INSERT INTO t VALUES (3, 3)", db=DB)
        assert f.rows(DB, "log") == [(1, 1), (2, 2), (3, 3)]
    finally:
        f.execute("SET GLOBAL log_bin_trust_function_creators = OFF", "DROP USER IF EXISTS 'mgd'@'%'")



def test_rows_without_binlog_events_take_sql_and_do_not_fire_guarded_triggers(pipeline):
    """A follower user that may run BINLOG, but a producer with [events] binlog = false: rows carry no binlog
    events and take SQL. With the default triggers = "auto" (guarded only when every row takes SQL) they stop
    at the unguarded trigger (test_producer_events.py); with triggers = "guarded" they are applied, and the
    trigger does not fire again on them."""
    f, leader = pipeline.follower, pipeline.leader
    pipeline.start_producer(pipeline.producer_profile(extra="[events]\nbinlog = false"))
    leader.execute(f"CREATE DATABASE {DB}")
    leader.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                   "CREATE TABLE log (id INT AUTO_INCREMENT PRIMARY KEY, t_id INT)",
                   "CREATE TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW INSERT INTO log (t_id) VALUES (NEW.id)",
                   "INSERT INTO t VALUES (1, 1), (2, 2)", "UPDATE t SET v = 20 WHERE id = 2", db=DB)
    pipeline.wait_published()
    assert not [e for e in pipeline.events() if e.get("operation") == "Add" and "binlog" in e]
    consumer = pipeline.start_consumer(pipeline.consumer_profile(extra='[replay]\ntriggers = "guarded"'))
    assert "rows by BINLOG replay" in consumer.stderr  # the user may run BINLOG: only these events take SQL
    pipeline.wait_applied()
    assert f.rows(DB, "t") == leader.rows(DB, "t") == [(1, 1), (2, 20)]
    assert f.rows(DB, "log") == leader.rows(DB, "log") == [(1, 1), (2, 2)]
    [(body,)] = f.query("SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s", (DB,))
    assert body == "IF @cdc_consumer IS NULL THEN INSERT INTO log (t_id) VALUES (NEW.id); END IF"
    assert consumer.stop() == 0
