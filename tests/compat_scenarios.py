"""The compatibility matrix: one scenario per server feature that writes rows or objects.

Each scenario runs on the leader in its own database (`{db}`) and must end with the follower
equal to a native replica of the same leader (tests/differential.py), or be refused loudly
(`refusal`). Issues 17 and 18 list the features; `source` says which one asks for a scenario.
The SQL is minimal: enough to exercise the feature the way applications and dumps use it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from differential import (
    Call,
    Close,
    Context,
    CopyAgain,
    NewPipeline,
    RestartProducer,
    Scenario,
    Sql,
    Step,
    Wait,
    WaitFollower,
    write_file,
)
from harness import wait_for

S = Scenario
# What the SQL path ([replay] rows = "sql", or no BINLOG replay possible) refuses, loudly, at the event.
# (Tables with triggers are not refused there: the consumer creates them guarded; system-versioned tables
# are written with the leader's history where SQL can: docs/compatibility.md.)


def _load_time_zone(zone: str, logged: bool = True) -> Callable[[Context], None]:
    """A Call step's function loading one zone of the system's zoneinfo into the leader's mysql tables
    (`logged`: into its binlog too, so the copies get it as a native replica does)."""

    def load(ctx: Context) -> None:
        sql = subprocess.run(["mariadb-tzinfo-to-sql", f"/usr/share/zoneinfo/{zone}", zone],
                             check=True, capture_output=True).stdout
        if not logged:
            sql = b"SET sql_log_bin = 0;\n" + sql
        subprocess.run(["mariadb", "-h", "127.0.0.1", "-P", str(ctx.leader.port), "-u", "root", "mysql"],
                       input=sql, check=True, capture_output=True)

    return load


def _old_temporal_format(tables: tuple[str, ...]) -> tuple[Step, ...]:
    """Steps creating `tables` (CREATE TABLE statements) in MariaDB's pre-10.1 TIME/DATETIME/TIMESTAMP formats on
    the leader and both copies, as servers configured alike do (mysql56_temporal_format=OFF on each while the
    CREATE runs there; set back once both copies have the tables)."""

    def turn(on: bool) -> Call:
        def set_format(ctx: Context) -> None:
            if on:  # both copies must have run the CREATEs under OFF first
                for copy in ctx.copies:
                    wait_for(lambda c=copy: c.query(
                        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                        (ctx.scenario.db,))[0][0] == len(tables), 60, f"the tables on {copy.name}")
            for server in (ctx.leader, *ctx.copies):
                server.execute(f"SET GLOBAL mysql56_temporal_format = {'ON' if on else 'OFF'}")
        return Call(set_format, f"mysql56_temporal_format={'ON' if on else 'OFF'} on the three servers")

    return (turn(False), *tables, turn(True))


def _many(template: str, n: int, session: str = "a") -> tuple[Sql, ...]:
    return tuple(Sql(template.format(i=i), session) for i in range(1, n + 1))


SCENARIOS: list[Scenario] = [
    # --- triggers: the row events already hold what the leader's triggers did
    S("trigger_after_insert_other_table", "AFTER INSERT trigger writing another table", (
        "CREATE TABLE a (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE audit_log (id INT AUTO_INCREMENT PRIMARY KEY, a_id INT, what VARCHAR(10))",
        "CREATE TRIGGER a_ins AFTER INSERT ON a FOR EACH ROW INSERT INTO audit_log (a_id, what) VALUES (NEW.id, 'ins')",
        "INSERT INTO a VALUES (1, 1), (2, 2)",
        "INSERT INTO a VALUES (3, 3)",
    )),
    S("trigger_before_changes_new", "BEFORE INSERT/UPDATE triggers changing NEW", (
        "CREATE TABLE b (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
        "CREATE TRIGGER b_bi BEFORE INSERT ON b FOR EACH ROW SET NEW.v = NEW.v * 2, NEW.note = 'inserted'",
        "CREATE TRIGGER b_bu BEFORE UPDATE ON b FOR EACH ROW SET NEW.v = NEW.v + 100",
        "INSERT INTO b (id, v) VALUES (1, 1), (2, 2)",
        "UPDATE b SET v = 5 WHERE id = 1",
    )),
    S("trigger_update_delete_other_table", "BEFORE UPDATE / AFTER DELETE triggers writing another table", (
        "CREATE TABLE c (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE c_hist (id INT AUTO_INCREMENT PRIMARY KEY, c_id INT, old_v INT, what VARCHAR(10))",
        "CREATE TRIGGER c_bu BEFORE UPDATE ON c FOR EACH ROW INSERT INTO c_hist (c_id, old_v, what) VALUES (OLD.id, OLD.v, 'upd')",
        "CREATE TRIGGER c_ad AFTER DELETE ON c FOR EACH ROW INSERT INTO c_hist (c_id, old_v, what) VALUES (OLD.id, OLD.v, 'del')",
        "INSERT INTO c VALUES (1, 1), (2, 2)",
        "UPDATE c SET v = v + 1",
        "DELETE FROM c WHERE id = 2",
    )),
    # MariaDB's trigger_notembedded: the definer loses TRIGGER, the leader's INSERT fails at the AFTER trigger
    # once the MyISAM row is written, and the row is logged. A native replica's row applier fires no trigger;
    # SQL fires it, and the server checks the definer before the guard can skip the body: a loud stop.
    S("trigger_definer_revoked", "a MyISAM row written by a statement whose AFTER trigger's definer had lost "
      "TRIGGER (the statement failed after writing it)", (
        "CREATE USER '{db}_d'@'localhost'",
        "GRANT INSERT, TRIGGER ON {db}.* TO '{db}_d'@'localhost'",
        "CREATE TABLE t (id INT) ENGINE=MyISAM",
        "CREATE TABLE seen (who VARCHAR(100)) ENGINE=MyISAM",
        ("CREATE DEFINER='{db}_d'@'localhost' TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW "
         "INSERT INTO seen VALUES (CURRENT_USER())"),
        "INSERT INTO t VALUES (1)",
        "REVOKE TRIGGER ON {db}.* FROM '{db}_d'@'localhost'",
        Sql("INSERT INTO t VALUES (2)", expect_error=1142),
    ), sql_refusal="before cdc-consumer's guard can skip the body",
      # A managed user's triggers have the consumer's user as definer ([replay] definer = "consumer"), who has TRIGGER.
      managed_refusal=""),
    S("application_schema", "an application's schema: BEGIN...END triggers writing other tables and setting "
      "columns, a SQL SECURITY INVOKER view, functions and procedures", (
        ("CREATE TABLE customer (id INT PRIMARY KEY, name VARCHAR(40), orders INT NOT NULL DEFAULT 0, "
         "updated_by VARCHAR(20))"),
        ("CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(10,2), "
         "total DECIMAL(10,2), status VARCHAR(10))"),
        "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(20), ref INT, at_amount DECIMAL(10,2))",
        "CREATE FUNCTION with_tax(a DECIMAL(10,2)) RETURNS DECIMAL(10,2) DETERMINISTIC RETURN ROUND(a * 1.2, 2)",
        ("CREATE TRIGGER orders_bi BEFORE INSERT ON orders FOR EACH ROW\nBEGIN\n  DECLARE n INT;\n"
         "  SET NEW.total = with_tax(NEW.amount);\n  IF NEW.status IS NULL THEN SET NEW.status = 'new'; END IF;\n"
         "  SELECT COUNT(*) INTO n FROM orders WHERE customer_id = NEW.customer_id;\n"
         "  INSERT INTO audit (what, ref, at_amount) VALUES (CONCAT('order#', n + 1), NEW.customer_id, NEW.amount);\n"
         "END"),
        ("CREATE TRIGGER orders_ai AFTER INSERT ON orders FOR EACH ROW\nmain: BEGIN\n"
         "  UPDATE customer SET orders = orders + 1, updated_by = 'trigger' WHERE id = NEW.customer_id;\n"
         "  IF NEW.amount < 100 THEN LEAVE main; END IF;\n"
         "  INSERT INTO audit (what, ref, at_amount) VALUES ('big', NEW.id, NEW.amount);\nEND main"),
        ("CREATE TRIGGER orders_bu BEFORE UPDATE ON orders FOR EACH ROW BEGIN\n"
         "  IF NEW.amount <> OLD.amount THEN SET NEW.total = with_tax(NEW.amount); END IF;\nEND"),
        ("CREATE TRIGGER orders_ad AFTER DELETE ON orders FOR EACH ROW BEGIN\n"
         "  UPDATE customer SET orders = orders - 1 WHERE id = OLD.customer_id;\n"
         "  INSERT INTO audit (what, ref, at_amount) VALUES ('deleted', OLD.id, OLD.amount);\nEND -- bookkeeping"),
        ("CREATE SQL SECURITY INVOKER VIEW customer_totals AS SELECT c.id, c.name, SUM(o.total) AS total "
         "FROM customer c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id, c.name"),
        ("CREATE PROCEDURE place_order(IN cust INT, IN amt DECIMAL(10,2), OUT new_id INT)\nBEGIN\n"
         "  INSERT INTO orders (customer_id, amount) VALUES (cust, amt);\n  SET new_id = LAST_INSERT_ID();\nEND"),
        ("CREATE PROCEDURE reprice(IN pct INT) BEGIN UPDATE orders SET amount = amount * (100 + pct) / 100 "
         "WHERE status = 'new'; END"),
        "INSERT INTO customer (id, name) VALUES (1, 'ann'), (2, 'bob')",
        "CALL place_order(1, 50.00, @a)",
        "CALL place_order(1, 250.00, @b)",
        "CALL place_order(2, 120.00, @c)",
        "INSERT INTO orders (customer_id, amount, status) VALUES (2, 10.00, 'rush')",
        "CALL reprice(10)",
        "DELETE FROM orders WHERE amount < 20",
        "CREATE TABLE report SELECT * FROM customer_totals",
    ), source="23"),
    # --- foreign keys: cascades are done by the follower's InnoDB, not logged
    S("fk_cascade", "foreign keys ON DELETE/UPDATE CASCADE", (
        "CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(10))",
        ("CREATE TABLE child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent (id) "
        "ON DELETE CASCADE ON UPDATE CASCADE)"),
        "INSERT INTO parent VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        "INSERT INTO child VALUES (10, 1), (11, 1), (20, 2), (30, 3)",
        "DELETE FROM parent WHERE id = 1",
        "UPDATE parent SET id = 22 WHERE id = 2",
    )),
    S("fk_set_null", "foreign keys ON DELETE/UPDATE SET NULL", (
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        ("CREATE TABLE child (id INT PRIMARY KEY, p INT NULL, FOREIGN KEY (p) REFERENCES parent (id) "
        "ON DELETE SET NULL ON UPDATE SET NULL)"),
        "INSERT INTO parent VALUES (1), (2)",
        "INSERT INTO child VALUES (10, 1), (20, 2)",
        "DELETE FROM parent WHERE id = 1",
        "UPDATE parent SET id = 3 WHERE id = 2",
    )),
    # --- scheduled events: replicated disabled on the replica (SLAVESIDE_DISABLED)
    S("scheduled_events", "CREATE EVENT: the leader's runs replicate; the copy must not run again", (
        "CREATE TABLE tick (id INT AUTO_INCREMENT PRIMARY KEY, src VARCHAR(10))",
        "CREATE EVENT far_away ON SCHEDULE EVERY 1 DAY STARTS '2037-01-01 00:00:00' DO DELETE FROM tick",
        ("CREATE EVENT ticker ON SCHEDULE EVERY 1 SECOND STARTS '2020-01-01 00:00:00' "
        "DO INSERT INTO tick (src) VALUES ('event')"),
        Wait("SELECT COUNT(*) >= 3 FROM {db}.tick", "the event to run 3 times"),
        "ALTER EVENT ticker DISABLE",
        "INSERT INTO tick (src) VALUES ('client')",
    )),
    S("events_status", "CREATE/ALTER EVENT ENABLE/DISABLE: the native replica keeps every event SLAVESIDE_DISABLED", (
        "CREATE TABLE t (id INT)",
        "CREATE EVENT e_on ON SCHEDULE EVERY 1 DAY STARTS '2037-01-01 00:00:00' DO INSERT INTO t VALUES (1)",
        "CREATE EVENT e_off ON SCHEDULE EVERY 1 DAY STARTS '2037-01-01 00:00:00' DISABLE DO INSERT INTO t VALUES (2)",
        "CREATE EVENT e_toggled ON SCHEDULE EVERY 1 DAY STARTS '2037-01-01 00:00:00' DO INSERT INTO t VALUES (3)",
        "ALTER EVENT e_toggled DISABLE",
        "ALTER EVENT e_toggled ENABLE",
        "ALTER EVENT e_off RENAME TO e_renamed",
    )),
    # --- generated and hidden columns
    S("generated_virtual", "VIRTUAL generated column", (
        "CREATE TABLE v (a INT, b INT AS (a * 2) VIRTUAL)",
        "INSERT INTO v (a) VALUES (1), (2)",
        "UPDATE v SET a = 10 WHERE a = 1",
        "DELETE FROM v WHERE a = 2",
    )),
    S("generated_stored", "STORED/PERSISTENT generated columns", (
        "CREATE TABLE s (id INT PRIMARY KEY, a INT, b INT AS (a * 3) STORED, c VARCHAR(20) AS (CONCAT('x', a)) PERSISTENT)",
        "INSERT INTO s (id, a) VALUES (1, 1), (2, 2)",
        "UPDATE s SET a = 7 WHERE id = 1",
        "DELETE FROM s WHERE id = 2",
    )),
    S("generated_indexed", "an index on a virtual column", (
        ("CREATE TABLE gi (id INT PRIMARY KEY, doc VARCHAR(100), k VARCHAR(20) AS (SUBSTRING_INDEX(doc, ':', 1)) VIRTUAL, "
        "KEY (k))"),
        "INSERT INTO gi (id, doc) VALUES (1, 'a:1'), (2, 'b:2')",
        "UPDATE gi SET doc = 'c:3' WHERE id = 1",
    )),
    S("invisible_columns", "INVISIBLE columns (explicit and with defaults)", (
        "CREATE TABLE inv (id INT PRIMARY KEY, v INT, secret VARCHAR(10) INVISIBLE DEFAULT 'dflt', n INT INVISIBLE)",
        "INSERT INTO inv VALUES (1, 1)",
        "INSERT INTO inv (id, v, secret, n) VALUES (2, 2, 'given', 5)",
        "UPDATE inv SET secret = 'changed', n = 6 WHERE id = 1",
    )),
    S("system_versioned", "system-versioned table with its history rows", (
        "CREATE TABLE ver (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING",
        "INSERT INTO ver VALUES (1, 1), (2, 2), (3, 3)",
        "UPDATE ver SET v = 10 WHERE id = 1",
        "UPDATE ver SET v = 11 WHERE id = 1",
        "DELETE FROM ver WHERE id = 2",
    )),
    S("system_versioned_explicit_columns", "system versioning with explicit row_start/row_end columns", (
        ("CREATE TABLE vx (id INT PRIMARY KEY, v INT, rs TIMESTAMP(6) GENERATED ALWAYS AS ROW START, "
        "re TIMESTAMP(6) GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME (rs, re)) WITH SYSTEM VERSIONING"),
        "INSERT INTO vx (id, v) VALUES (1, 1), (2, 2)",
        "UPDATE vx SET v = 5 WHERE id = 1",
        "DELETE FROM vx WHERE id = 2",
    )),
    S("system_versioned_transactions", "system versioning: several statements per transaction, a key changed, "
      "a column WITHOUT SYSTEM VERSIONING, history inserted with system_versioning_insert_history", (
        "CREATE TABLE vt (id INT PRIMARY KEY, v INT, note VARCHAR(10) WITHOUT SYSTEM VERSIONING) WITH SYSTEM VERSIONING",
        "CREATE TABLE plain (id INT PRIMARY KEY)",
        "START TRANSACTION",
        "INSERT INTO vt (id, v) VALUES (1, 1), (2, 2), (3, 3)",
        "UPDATE vt SET v = v + 10",
        "INSERT INTO plain VALUES (1)",
        "UPDATE vt SET id = 20 WHERE id = 2",
        "COMMIT",
        "UPDATE vt SET note = 'quiet' WHERE id = 1",
        "START TRANSACTION",
        "UPDATE vt SET v = 100 WHERE id = 3",
        "DELETE FROM vt WHERE id = 3",
        "COMMIT",
        "SET system_versioning_insert_history = ON",
        ("INSERT INTO vt (id, v, row_start, row_end) VALUES (7, 7, '2001-01-01 00:00:00.000001', "
         "'2002-02-02 00:00:00.000002')"),
    ), source="23"),
    # A copy drops the follower's table (DROP TABLE + CREATE TABLE) and with it the table's triggers: they come back
    # after the copy's last rows, in their order, each with the sql_mode and charsets it was created with.
    S("copy_again_keeps_triggers", "a table copied again gets its triggers back", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
        "CREATE TABLE log (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(40))",
        "CREATE TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW INSERT INTO log (what) VALUES (CONCAT('ins ', NEW.id))",
        "CREATE TRIGGER t_ai0 AFTER INSERT ON t FOR EACH ROW PRECEDES t_ai INSERT INTO log (what) VALUES ('first')",
        "SET sql_mode = 'ANSI_QUOTES,PIPES_AS_CONCAT'",
        'CREATE TRIGGER "t_bu" BEFORE UPDATE ON t FOR EACH ROW SET NEW.s = NEW.s || \'+\'',
        "SET sql_mode = DEFAULT",
        Sql("CREATE TRIGGER t_bd BEFORE DELETE ON t FOR EACH ROW INSERT INTO log (what) VALUES ('d\xe9l')",
            session="b"),
        "INSERT INTO t VALUES (1, 1, 'a'), (2, 2, 'b')",
        WaitFollower("SELECT COUNT(*) = 4 FROM {db}.log", "the rows before the copy"),
        CopyAgain(("{db}.t",)),
        "INSERT INTO t VALUES (3, 3, 'c')",
        "UPDATE t SET v = 10 WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
    ), source="24", session_charsets=(("b", "latin1"),)),
    S("trigger_on_statement_logged_dml", "a trigger fired by DML the leader logs as a statement (a table versioned "
      "by transaction id: MariaDB logs its DML as statements even with binlog_format=ROW)", (
        ("CREATE TABLE vtrx (id INT PRIMARY KEY, v INT, ts BIGINT UNSIGNED GENERATED ALWAYS AS ROW START, "
         "te BIGINT UNSIGNED GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME (ts, te)) WITH SYSTEM VERSIONING "
         "ENGINE=InnoDB"),
        "CREATE TABLE vtrx_log (id INT AUTO_INCREMENT PRIMARY KEY, vtrx_id INT, v INT)",
        "CREATE TRIGGER vtrx_ai AFTER INSERT ON vtrx FOR EACH ROW INSERT INTO vtrx_log (vtrx_id, v) VALUES (NEW.id, NEW.v)",
        "INSERT INTO vtrx (id, v) VALUES (1, 1), (2, 2)",
        # Its period columns hold each server's own transaction ids: dropped before the copies are compared.
        "DROP TABLE vtrx",
    ), source="23"),
    S("system_versioned_delete_history", "DELETE HISTORY of a system-versioned table", (
        "CREATE TABLE vdh (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING",
        "INSERT INTO vdh VALUES (1, 1)",
        "UPDATE vdh SET v = 2 WHERE id = 1",
        "DELETE HISTORY FROM vdh",
    ), source="23", sql_refusal="the follower's table is system-versioned and the leader removed rows from its history"),
    # --- XA
    S("xa_prepare_commit", "XA START .. XA PREPARE, then XA COMMIT", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "XA START 'x1'", "INSERT INTO t VALUES (1, 1)", "UPDATE t SET v = 2 WHERE id = 1", "XA END 'x1'",
        "XA PREPARE 'x1'", "XA COMMIT 'x1'",
        "INSERT INTO t VALUES (2, 2)",
    )),
    S("xa_prepare_rollback", "XA PREPARE, then XA ROLLBACK: nothing of it", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 1)",
        "XA START 'x2'", "INSERT INTO t VALUES (2, 2)", "UPDATE t SET v = 9 WHERE id = 1", "XA END 'x2'",
        "XA PREPARE 'x2'", "XA ROLLBACK 'x2'",
        "INSERT INTO t VALUES (3, 3)",
    )),
    S("xa_one_phase", "XA COMMIT ... ONE PHASE", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "XA START 'x3'", "INSERT INTO t VALUES (1, 1)", "XA END 'x3'", "XA COMMIT 'x3' ONE PHASE",
    )),
    S("xa_interleaved", "several XA transactions interleaved, one committed from another session after a disconnect", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (0, 0)",
        Sql("XA START 'a'", "a"), Sql("INSERT INTO t VALUES (1, 1)", "a"),
        Sql("XA START 'b'", "b"), Sql("INSERT INTO t VALUES (2, 2)", "b"),
        Sql("XA START 'c'", "c"), Sql("INSERT INTO t VALUES (3, 3)", "c"),
        Sql("UPDATE t SET v = 10 WHERE id = 1", "a"), Sql("XA END 'a'", "a"),
        Sql("XA END 'b'", "b"), Sql("XA PREPARE 'b'", "b"),
        Sql("XA PREPARE 'a'", "a"),
        Sql("XA END 'c'", "c"), Sql("XA PREPARE 'c'", "c"), Close("c"),
        Sql("INSERT INTO t VALUES (4, 4)", "d"),
        Sql("XA COMMIT 'b'", "b"),
        Sql("XA ROLLBACK 'a'", "a"),
        Sql("XA COMMIT 'c'", "d"),
    )),
    S("xa_commit_after_producer_restart", "XA PREPARE, cdc-producer restarts, then XA COMMIT", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        Sql("XA START 'r1'", "a"), Sql("INSERT INTO t VALUES (1, 1)", "a"), Sql("XA END 'r1'", "a"),
        Sql("XA PREPARE 'r1'", "a"),
        Sql("INSERT INTO t VALUES (2, 2)", "b"),
        WaitFollower("SELECT COUNT(*) FROM {db}.t WHERE id = 2", "the row written after the XA PREPARE"),
        RestartProducer(),
        Sql("XA COMMIT 'r1'", "a"),
    )),
    S("xa_prepared_before_the_producer_started", "XA COMMIT of a transaction prepared before cdc-producer's start", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        Sql("XA START 'early'", "a"), Sql("INSERT INTO t VALUES (1, 1)", "a"), Sql("XA END 'early'", "a"),
        Sql("XA PREPARE 'early'", "a"),
        NewPipeline(),
        Sql("XA COMMIT 'early'", "a"),
    ), refusal="commits a transaction prepared before the position this producer started reading at"),
    # --- sequences
    S("sequences", "CREATE SEQUENCE, NEXTVAL in INSERT and SELECT, SETVAL, ALTER SEQUENCE", (
        "CREATE SEQUENCE s START WITH 100 INCREMENT BY 5 CACHE 2",
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (NEXTVAL(s), 1), (NEXTVAL(s), 2), (NEXTVAL(s), 3)",
        "SELECT NEXTVAL(s)",
        "SELECT SETVAL(s, 1000)",
        "ALTER SEQUENCE s INCREMENT BY 2",
        "INSERT INTO t VALUES (NEXTVAL(s), 4)",
        "CREATE TABLE t2 (id INT PRIMARY KEY DEFAULT NEXTVAL(s), v INT)",
        "INSERT INTO t2 (v) VALUES (1)",
    )),
    # --- statement shapes
    S("on_update_current_timestamp", "ON UPDATE CURRENT_TIMESTAMP columns", (
        ("CREATE TABLE ts (id INT PRIMARY KEY, v INT, changed TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
        "ON UPDATE CURRENT_TIMESTAMP(6), d DATETIME DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)"),
        "INSERT INTO ts (id, v) VALUES (1, 1), (2, 2)",
        "UPDATE ts SET v = 3 WHERE id = 1",
    )),
    S("create_table_select", "CREATE TABLE ... SELECT (DDL and rows in one group)", (
        "CREATE TABLE src (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO src VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        "CREATE TABLE dst SELECT id, v, CONCAT(v, v) AS vv FROM src WHERE id > 1",
        "CREATE TABLE dst2 (k INT AUTO_INCREMENT PRIMARY KEY) SELECT v FROM src",
    )),
    S("insert_select", "INSERT ... SELECT", (
        "CREATE TABLE src (id INT PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE dst (id INT AUTO_INCREMENT PRIMARY KEY, src_id INT, v VARCHAR(10))",
        "INSERT INTO src VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        "INSERT INTO dst (src_id, v) SELECT id, v FROM src ORDER BY id DESC",
        "INSERT INTO dst (src_id, v) SELECT src_id, v FROM dst",
    )),
    S("multi_table_update_delete", "multi-table UPDATE and DELETE", (
        "CREATE TABLE o (id INT PRIMARY KEY, total INT)",
        "CREATE TABLE l (id INT PRIMARY KEY, o_id INT, amount INT)",
        "INSERT INTO o VALUES (1, 0), (2, 0), (3, 0)",
        "INSERT INTO l VALUES (1, 1, 5), (2, 1, 7), (3, 2, 1), (4, 3, 9)",
        "UPDATE o JOIN l ON l.o_id = o.id SET o.total = o.total + l.amount, l.amount = l.amount * 10",
        "DELETE o, l FROM o JOIN l ON l.o_id = o.id WHERE o.id = 3",
    )),
    S("replace", "REPLACE on the primary key and on a secondary UNIQUE key", (
        "CREATE TABLE r (id INT PRIMARY KEY, u VARCHAR(10) UNIQUE, v INT)",
        "INSERT INTO r VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)",
        "REPLACE INTO r VALUES (1, 'a', 10)",
        "REPLACE INTO r VALUES (4, 'b', 40)",
        "REPLACE INTO r VALUES (3, 'a', 30)",
    )),
    S("insert_on_duplicate_key_update", "INSERT ... ON DUPLICATE KEY UPDATE", (
        "CREATE TABLE d (id INT PRIMARY KEY, u INT UNIQUE, hits INT)",
        "INSERT INTO d VALUES (1, 1, 1), (2, 2, 1)",
        "INSERT INTO d VALUES (1, 1, 1), (3, 3, 1) ON DUPLICATE KEY UPDATE hits = hits + 1",
        "INSERT INTO d VALUES (9, 2, 1) ON DUPLICATE KEY UPDATE hits = hits + 10, id = 20",
    )),
    S("load_data", "LOAD DATA INFILE (plain, REPLACE, IGNORE)", (
        Call(write_file("rows.tsv", b"1\talpha\n2\tbeta\n3\t\\N\n"), "a data file"),
        Call(write_file("more.tsv", b"2\tBETA\n4\tdelta\n"), "a second data file"),
        "CREATE TABLE ld (id INT PRIMARY KEY, v VARCHAR(10))",
        "LOAD DATA INFILE '{tmp}/rows.tsv' INTO TABLE ld",
        "LOAD DATA INFILE '{tmp}/more.tsv' REPLACE INTO TABLE ld",
        "LOAD DATA INFILE '{tmp}/rows.tsv' IGNORE INTO TABLE ld",
    )),
    S("partitions_maintenance", "partitioned table with partition maintenance", (
        ("CREATE TABLE p (id INT NOT NULL PRIMARY KEY, v VARCHAR(10)) PARTITION BY RANGE (id) ("
        "PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), PARTITION pmax VALUES LESS THAN MAXVALUE)"),
        "INSERT INTO p VALUES (1, 'a'), (5, 'b'), (15, 'c'), (25, 'd'), (150, 'e')",
        "ALTER TABLE p TRUNCATE PARTITION p0",
        "ALTER TABLE p DROP PARTITION p1",
        ("ALTER TABLE p REORGANIZE PARTITION pmax INTO (PARTITION p2 VALUES LESS THAN (100), "
        "PARTITION pmax VALUES LESS THAN MAXVALUE)"),
        "ALTER TABLE p REBUILD PARTITION p2",
        "ALTER TABLE p ANALYZE PARTITION p2",
        "INSERT INTO p VALUES (2, 'f'), (50, 'g')",
        "UPDATE p SET id = 200 WHERE id = 50",
        "CREATE TABLE h (id INT NOT NULL, v INT) PARTITION BY HASH (id) PARTITIONS 4",
        "INSERT INTO h VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)",
        "ALTER TABLE h COALESCE PARTITION 2",
        "ALTER TABLE h ADD PARTITION PARTITIONS 1",
    )),
    S("truncate", "TRUNCATE TABLE", (
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "INSERT INTO t (v) VALUES (1), (2), (3)",
        "TRUNCATE TABLE t",
        "INSERT INTO t (v) VALUES (4)",
    )),
    S("rename_across_databases", "RENAME TABLE into another database, and back", (
        "CREATE DATABASE {db}_b",
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 1)",
        "RENAME TABLE t TO {db}_b.t",
        "INSERT INTO {db}_b.t VALUES (2, 2)",
        "CREATE TABLE u (id INT PRIMARY KEY)",
        "RENAME TABLE u TO u2, {db}_b.t TO t3",
        "INSERT INTO t3 VALUES (3, 3)",
    ), databases=("{db}_b",)),
    S("routines_that_write", "stored procedures and functions that write", (
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE calls (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(20))",
        ("CREATE PROCEDURE add_row(IN x VARCHAR(20)) BEGIN INSERT INTO t (v) VALUES (x); "
        "UPDATE t SET v = CONCAT(v, '!') WHERE id = LAST_INSERT_ID(); END"),
        ("CREATE FUNCTION logged(x INT) RETURNS INT DETERMINISTIC MODIFIES SQL DATA BEGIN "
        "INSERT INTO calls (what) VALUES (CONCAT('f', x)); RETURN x * 2; END"),
        "CALL add_row('a')",
        "CALL add_row('b')",
        "SELECT logged(3)",
        "INSERT INTO t (v) VALUES (logged(4))",
    )),
    S("myisam_innodb_one_transaction", "MyISAM and InnoDB in one transaction, committed and rolled back", (
        "CREATE TABLE i (id INT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM",
        "BEGIN", "INSERT INTO i VALUES (1)", "INSERT INTO m VALUES (1)", "INSERT INTO i VALUES (2)", "COMMIT",
        "BEGIN", "INSERT INTO i VALUES (3)", "INSERT INTO m VALUES (2)", "ROLLBACK",
    )),
    S("big_transaction_200k", "one transaction of 200,000 rows", (
        "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)",
        "INSERT INTO big SELECT seq, CONCAT('row-', seq), seq * 7 FROM seq_1_to_200000",
        "DELETE FROM big WHERE id % 1000 = 0",
    ), timeout=240.0),
    # Inserts of 16 rows or more: the SQL path decodes them as typed rows (cdc_stream.typed_rows) and sends them in
    # bulk; the types come from the table's previous large insert, so two tables alternate, a column is NULL in
    # the first and last rows of a statement, one holds NULL only, and an ENUM gets its '' error value.
    S("bulk_inserts_of_every_type", "multi-row inserts of every column type, NULLs in patterns, two tables in turn", (
        ("CREATE TABLE ty (id BIGINT PRIMARY KEY, u BIGINT UNSIGNED, y YEAR, b BIT(12), d DECIMAL(20,6), "
         "v VARCHAR(30), e ENUM('a','b'), dt DATETIME(6), f FLOAT, db DOUBLE, dd DATE, tm TIME(3), ts TIMESTAMP(6) "
         "NULL, j JSON, bl BLOB, st SET('x','y'), n INT)"),
        "CREATE TABLE tz (id INT PRIMARY KEY, v VARCHAR(10), dt DATETIME)",
        "SET SESSION sql_mode = ''",
        ("INSERT INTO ty SELECT seq, seq * 1000003, 1901 + seq % 254, seq % 4096, seq / 7, CONCAT('v', seq), "
         "IF(seq % 5 = 0, 'zzz', IF(seq % 2, 'a', 'b')), '2024-01-01 00:00:00.000001' + INTERVAL seq * 7919 SECOND, "
         "seq / 3, seq / 11, '2023-12-31' + INTERVAL seq DAY, SEC_TO_TIME(seq * 13.5), "
         "FROM_UNIXTIME(1700000000 + seq), JSON_OBJECT('k', seq), UNHEX(HEX(seq)), IF(seq % 3, 'x,y', ''), "
         "IF(seq % 4 = 0, NULL, seq) FROM seq_1_to_40"),
        "INSERT INTO tz SELECT seq, IF(seq IN (1, 30), NULL, CONCAT('z', seq)), NOW() - INTERVAL seq HOUR FROM seq_1_to_30",
        ("INSERT INTO ty SELECT seq, NULL, NULL, NULL, -seq / 9, IF(seq IN (41, 80), NULL, REPEAT('w', seq % 30)), "
         "NULL, IF(seq % 3 = 0, NULL, IF(seq % 3 = 1, '0000-00-00 00:00:00', '2021-03-04 05:06:07.000089' + INTERVAL seq SECOND)), NULL, -seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
         "FROM seq_41_to_80"),
        "INSERT INTO tz SELECT seq, CONCAT('z', seq), NULL FROM seq_31_to_60",
        ("INSERT INTO ty SELECT seq, seq, 2000, 1, 0.5, 'x', 'b', '2020-02-29 12:00:00.123456', 1.5, 2.5, '2020-02-29', "
         "'-838:59:59', NULL, '[1, 2]', '', 'y', 0 FROM seq_81_to_100"),
        "SET SESSION sql_mode = DEFAULT",
    )),
    S("keyless_unique_not_null", "table without PRIMARY KEY but a UNIQUE NOT NULL key", (
        "CREATE TABLE ku (u VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (u))",
        "INSERT INTO ku VALUES ('a', 1), ('b', 2), ('c', 3)",
        "UPDATE ku SET v = 20 WHERE u = 'b'",
        "UPDATE ku SET u = 'z' WHERE u = 'c'",
        "DELETE FROM ku WHERE u = 'a'",
    )),
    S("case_insensitive_collation", "case-insensitive collation where 'a', 'A' and 'a ' collide", (
        "CREATE TABLE ci (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        "INSERT INTO ci VALUES ('a', 1), ('b', 2)",
        "UPDATE ci SET k = 'A' WHERE k = 'a'",
        "UPDATE ci SET v = 3 WHERE k = 'B'",
        "CREATE TABLE cik (k VARCHAR(10) COLLATE utf8mb4_general_ci, v INT)",
        "INSERT INTO cik VALUES ('a', 1), ('A', 1), ('a ', 1)",
        "UPDATE cik SET v = 2 WHERE k = 'A' COLLATE utf8mb4_bin",
        "DELETE FROM cik WHERE k = 'a ' COLLATE utf8mb4_bin AND LENGTH(k) = 2",
    )),
    S("savepoint_rollback", "SAVEPOINT and ROLLBACK TO in an InnoDB transaction", (
        "CREATE TABLE sp (a INT PRIMARY KEY, b INT) ENGINE=InnoDB",
        "BEGIN", "INSERT INTO sp VALUES (1, 1)", "SAVEPOINT s", "INSERT INTO sp VALUES (2, 2)",
        "ROLLBACK TO s", "INSERT INTO sp VALUES (3, 3)", "COMMIT",
    )),
    S("savepoint_rollback_with_myisam", "ROLLBACK TO SAVEPOINT with a MyISAM table in the transaction", (
        "CREATE TABLE sp (a INT PRIMARY KEY, b INT) ENGINE=InnoDB",
        "CREATE TABLE spm (a INT PRIMARY KEY, b INT) ENGINE=MyISAM",
        "BEGIN", "INSERT INTO sp VALUES (4, 4)", "SAVEPOINT s", "INSERT INTO spm VALUES (1, 1)",
        "INSERT INTO sp VALUES (5, 5)", "ROLLBACK TO s", "COMMIT",
    )),
    S("aria_tables", "Aria tables written by many small transactions", (
        "CREATE TABLE ar (id INT PRIMARY KEY, v INT) ENGINE=Aria",
        *_many("INSERT INTO ar VALUES ({i}, {i})", 60),
        "UPDATE ar SET v = v + 1 WHERE id % 2 = 0",
        *_many("DELETE FROM ar WHERE id = {i} * 3", 10),
    )),
    S("aria_and_innodb_transactions", "InnoDB transactions before, between and after ones writing Aria and InnoDB together", (
        "CREATE TABLE i (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
        "CREATE TABLE ar (id INT PRIMARY KEY, v INT) ENGINE=Aria",
        *_many("INSERT INTO i VALUES ({i}, {i})", 10),
        "BEGIN", "INSERT INTO i VALUES (100, 1)", "INSERT INTO ar VALUES (1, 1), (2, 2)", "UPDATE i SET v = 2 WHERE id = 1",
        "COMMIT",
        *_many("INSERT INTO i VALUES (1{i}0, {i})", 10),
        "UPDATE ar SET v = v * 10",
        "BEGIN", "DELETE FROM ar WHERE id = 1", "DELETE FROM i WHERE id = 2", "COMMIT",
        *_many("UPDATE i SET v = v + 1 WHERE id = {i}", 10),
    )),
    S("foreign_key_checks_off_rows", "rows written with foreign_key_checks=0 (how dumps are loaded)", (
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        "CREATE TABLE child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent (id))",
        "SET foreign_key_checks = 0",
        "INSERT INTO child VALUES (1, 99), (2, 98)",
        "UPDATE child SET p = 97 WHERE id = 2",
        "SET foreign_key_checks = 1",
        "INSERT INTO parent VALUES (99)",
    )),
    S("check_constraint_checks_off_rows", "rows written with check_constraint_checks=0", (
        "CREATE TABLE ck (id INT PRIMARY KEY, v INT CHECK (v > 0))",
        "SET check_constraint_checks = 0",
        "INSERT INTO ck VALUES (1, -5)",
        "SET check_constraint_checks = 1",
        "INSERT INTO ck VALUES (2, 5)",
    )),
    # mtr's check_constraint: a native replica's row applier evaluates no CHECK constraint; the SQL path's strict
    # session would turn the CHECK's 'Ken' -> number warning into error 1292 (it writes rows with
    # check_constraint_checks=0), while DDL keeps the leader's check_constraint_checks (1: the ALTER checks rows).
    S("check_constraint_warning_rows", "a CHECK that warns on rows a non-strict session wrote (MyISAM)", (
        "CREATE TABLE ck (id SMALLINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
        "name VARCHAR(30) NOT NULL CHECK (CHAR_LENGTH(name > 2))) ENGINE=MyISAM",
        "INSERT IGNORE INTO ck VALUES (NULL, 'Ken')",
        "SET sql_mode = ''",
        "INSERT INTO ck VALUES (NULL, 'Ken'), (NULL, 'Brian')",
        "UPDATE ck SET name = 'Kenneth' WHERE id = 2",
        "SET sql_mode = DEFAULT",
        "CREATE TABLE ck2 (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
        "INSERT INTO ck2 VALUES (1, 5), (2, -5)",
        "SET check_constraint_checks = 0",
        "ALTER TABLE ck2 ADD CONSTRAINT positive CHECK (v > 0)",
        "SET check_constraint_checks = 1",
        "CREATE TABLE ck3 (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
        "INSERT INTO ck3 VALUES (1, 5)",
        "ALTER TABLE ck3 ADD CONSTRAINT positive CHECK (v > 0)",
    ), source="24"),
    S("unique_checks_off_rows", "rows written with unique_checks=0", (
        "CREATE TABLE uq (id INT PRIMARY KEY, u INT, UNIQUE KEY (u))",
        "SET unique_checks = 0",
        "INSERT INTO uq VALUES (1, 1), (2, 2), (3, 3)",
        "SET unique_checks = 1",
    )),
    S("long_unique_keys", "UNIQUE on a BLOB and UNIQUE ... USING HASH (hidden DB_ROW_HASH_1)", (
        "CREATE TABLE lu (id INT PRIMARY KEY, b BLOB, UNIQUE KEY (b))",
        "CREATE TABLE lh (id INT PRIMARY KEY, s VARCHAR(100), UNIQUE KEY (s) USING HASH)",
        "INSERT INTO lu VALUES (1, 'x'), (2, 'y')",
        "INSERT INTO lh VALUES (1, 'x'), (2, 'y')",
        "UPDATE lu SET b = 'z' WHERE id = 1",
        "DELETE FROM lh WHERE id = 2",
    )),
    S("compressed_columns", "COMPRESSED columns", (
        "CREATE TABLE cc (id INT PRIMARY KEY, v VARCHAR(30) COMPRESSED, b BLOB COMPRESSED)",
        "INSERT INTO cc VALUES (1, 'hello', REPEAT('x', 1000)), (2, '', NULL), (3, NULL, 'short')",
        "UPDATE cc SET v = 'world' WHERE id = 1",
    )),
    S("compressed_column_in_excluded_database", "a COMPRESSED column in a database the filters exclude", (
        "CREATE DATABASE cmp_excluded_compressed",
        "CREATE TABLE cmp_excluded_compressed.cc (id INT PRIMARY KEY, v VARCHAR(30) COMPRESSED)",
        "INSERT INTO cmp_excluded_compressed.cc VALUES (1, 'hidden')",
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
    ), excluded=("cmp_excluded_compressed",)),
    # --- DDL under the leader's session
    S("ddl_sql_mode_ansi_quotes", "DDL and routines under sql_mode ANSI_QUOTES", (
        "SET sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')",
        'CREATE TABLE "quoted" ("id" INT PRIMARY KEY, "v" VARCHAR(10) DEFAULT \'x\')',
        'INSERT INTO "quoted" VALUES (1, \'a\')',
        'CREATE VIEW "vq" AS SELECT "id", "v" FROM "quoted"',
        'CREATE PROCEDURE "p_ansi"() SELECT "v" FROM "quoted"',
        'CREATE TRIGGER "t_ansi" BEFORE INSERT ON "quoted" FOR EACH ROW SET NEW."v" = UPPER(NEW."v")',
        'INSERT INTO "quoted" VALUES (2, \'b\')',
    )),
    S("ddl_sql_mode_routines", "routines, triggers and events keep the leader's sql_mode", (
        "SET sql_mode = 'PIPES_AS_CONCAT,NO_ENGINE_SUBSTITUTION'",
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE FUNCTION f_concat(a VARCHAR(5), b VARCHAR(5)) RETURNS VARCHAR(10) DETERMINISTIC RETURN a || b",
        "CREATE PROCEDURE p_ins(i INT) INSERT INTO t VALUES (i, 'p' || i)",
        "CREATE TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW SET NEW.v = NEW.v || '!'",
        "CREATE EVENT e_later ON SCHEDULE AT '2037-01-01 00:00:00' DO INSERT INTO t VALUES (99, 'x' || 'y')",
        "CALL p_ins(1)",
        "INSERT INTO t VALUES (2, f_concat('a', 'b'))",
    )),
    S("ddl_ignore_bad_table_options", "DDL under IGNORE_BAD_TABLE_OPTIONS (unknown options kept), ALTER later", (
        "SET sql_mode = 'IGNORE_BAD_TABLE_OPTIONS'",
        "CREATE TABLE bad (id INT PRIMARY KEY) ENGINE=InnoDB FANCY_OPTION='yes'",
        "SET sql_mode = DEFAULT",
        "ALTER TABLE bad ADD COLUMN v INT",
        "INSERT INTO bad VALUES (1, 1)",
    )),
    S("ddl_latin1", "DDL sent in latin1 (defaults, comments, collations)", (
        Sql("CREATE TABLE l1 (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_german1_ci "
            "DEFAULT 'é') COMMENT 'Grüße'", "latin1"),
        Sql("INSERT INTO l1 (id) VALUES (1)", "latin1"),
        Sql("INSERT INTO l1 VALUES (2, 'ä')", "latin1"),
        Sql("CREATE VIEW lv AS SELECT id, s FROM l1 WHERE s = 'ä' COLLATE latin1_german1_ci", "latin1"),
        Sql("CREATE TABLE l2 (id INT PRIMARY KEY, s VARCHAR(10) DEFAULT 'ñ')", "latin1"),
        Sql("INSERT INTO l2 (id) VALUES (1)", "latin1"),
    ), session_charsets=(("latin1", "latin1"),)),
    S("session_time_zone", "DDL and rows under a session time zone", (
        "SET time_zone = '+05:00'",
        ("CREATE TABLE tz (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT '2020-01-01 00:00:00', "
        "dt DATETIME DEFAULT '2020-01-01 00:00:00')"),
        "INSERT INTO tz (id) VALUES (1)",
        "INSERT INTO tz VALUES (2, '2021-06-01 12:00:00', '2021-06-01 12:00:00')",
        "CREATE EVENT tz_ev ON SCHEDULE AT '2037-01-01 00:00:00' DO DELETE FROM tz",
    )),
    S("ddl_session_timestamp", "DDL that fills rows with the statement's time (SET TIMESTAMP on the leader)", (
        "CREATE TABLE st (id INT PRIMARY KEY)",
        "INSERT INTO st VALUES (1), (2)",
        "SET TIMESTAMP = 1000000000",
        "ALTER TABLE st ADD COLUMN created TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
        "SET TIMESTAMP = DEFAULT",
    )),
    # --- issue 22: DDL from any client collation and session time zone; then a client with the defaults
    S("ddl_client_utf8mb4_unicode_ci", "DDL and rows from a utf8mb4_unicode_ci client (Laravel's), then a default one", (
        Sql("SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci", "u"),  # character_set_client logged as 224
        Sql("CREATE DATABASE {db}_c1", "u"),
        Sql("CREATE TABLE {db}_c1.t (id INT PRIMARY KEY, s VARCHAR(10))", "u"),
        Sql("INSERT INTO {db}_c1.t VALUES (1, 'ñ')", "u"),
        Sql("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(20) DEFAULT 'Straße' COMMENT 'Größe', n VARCHAR(10))", "u"),
        Sql("INSERT INTO t (id, n) VALUES (1, 'x'), (2, 'Ü')", "u"),
        Sql("INSERT INTO t (id, n) VALUES (3, IF('ß' = 'ss', 'eq', 'ne'))", "u"),
        Sql("CREATE VIEW v AS SELECT id, 'ß' = 'ss' AS same, CONCAT(s, 'é') AS c FROM t", "u"),
        Sql("CREATE PROCEDURE p() INSERT INTO t (id, n) VALUES (10, IF('ß' = 'ss', 'eq', 'ne'))", "u"),
        Sql("CALL p()", "u"),
        Sql("CREATE TABLE ctas AS SELECT 'é' AS c, id FROM t", "u"),  # c takes the connection's collation
        Sql("ALTER TABLE t ADD COLUMN k VARCHAR(5) NOT NULL DEFAULT 'ü'", "u"),
        Sql("UPDATE t SET n = 'upd' WHERE id = 2", "u"),
        Sql("INSERT INTO t (id, n) VALUES (20, 'ö')", "b"),
        Sql("CREATE TABLE after_default (id INT PRIMARY KEY, s VARCHAR(10) DEFAULT 'é', "
            "ts TIMESTAMP NULL DEFAULT '2020-01-01 00:00:00')", "b"),
        Sql("INSERT INTO after_default (id) VALUES (1)", "b"),
    ), source="22", databases=("{db}_c1",)),
    S("ddl_client_collations_not_default", "DDL from clients whose collation is not their charset's default "
      "(ids 192, 223, 96, 609, 2503; collation_server 2503)", (
        Sql("SET NAMES utf8mb3 COLLATE utf8mb3_unicode_ci", "m3"),  # 192
        Sql("CREATE TABLE m3 (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET utf8mb3 DEFAULT 'ä') COMMENT 'ö'", "m3"),
        Sql("INSERT INTO m3 (id) VALUES (1)", "m3"),
        Sql("SET NAMES utf8mb3 COLLATE utf8mb3_general_mysql500_ci", "m3"),  # 223
        Sql("CREATE VIEW m3v AS SELECT id, CONCAT(s, 'ü') AS c FROM m3", "m3"),
        Sql("SET NAMES cp932 COLLATE cp932_bin", "j"),  # 96; ソ is 0x83 0x5C in cp932: a backslash byte
        Sql("CREATE TABLE j (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET cp932 DEFAULT 'ソテスト') COMMENT '日本'",
            "j"),
        Sql("INSERT INTO j (id) VALUES (1)", "j"),
        Sql("INSERT INTO j VALUES (2, 'ソ表')", "j"),
        Sql("SET NAMES utf8mb4 COLLATE utf8mb4_myanmar_ci", "u"),  # 609
        Sql("CREATE TABLE my (id INT PRIMARY KEY, s VARCHAR(10) DEFAULT 'ဿ')", "u"),
        Sql("INSERT INTO my (id) VALUES (1)", "u"),
        Sql("SET NAMES utf8mb4 COLLATE utf8mb4_uca1400_croatian_nopad_as_cs", "u"),  # 2503
        Sql("SET collation_server = utf8mb4_uca1400_croatian_nopad_as_cs", "u"),
        Sql("CREATE DATABASE {db}_hr", "u"),  # takes collation_server
        Sql("CREATE TABLE {db}_hr.t AS SELECT 'č' AS c, 'Dž' = 'dž' AS same", "u"),
        Sql("INSERT INTO m3 VALUES (2, 'é')", "b"),
        Sql("CREATE TABLE after_default (id INT PRIMARY KEY, s VARCHAR(10) DEFAULT 'é')", "b"),
        Sql("INSERT INTO after_default (id) VALUES (1)", "b"),
    ), source="22", databases=("{db}_hr",), session_charsets=(("m3", "utf8mb3"), ("j", "cp932"))),
    S("ddl_collation_connection_ucs2", "DDL and rows under a ucs2, utf32 and utf16 collation_connection "
      "(with a session time zone), then a default client", (
        Sql("SET time_zone = '+02:00'", "w"),  # before: a ucs2 connection misreads the literal
        Sql("SET collation_connection = ucs2_general_ci", "w"),
        Sql("CREATE TABLE w (id INT PRIMARY KEY, s VARCHAR(10) DEFAULT 'ü' COMMENT 'Größe', "
            "ts TIMESTAMP NOT NULL DEFAULT '2021-06-01 12:00:00', created TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP)",
            "w"),
        Sql("INSERT INTO w (id) VALUES (1)", "w"),
        Sql("INSERT INTO w (id, s, ts) VALUES (2, 'é', NOW())", "w"),
        Sql("CREATE VIEW wv AS SELECT id, CONCAT(s, 'ß') AS c, 'lit' AS l FROM w", "w"),
        Sql("CREATE TABLE wc AS SELECT 'Ä' AS c, id FROM w", "w"),  # a ucs2 column
        Sql("SET collation_connection = utf32_general_ci", "w"),
        Sql("ALTER TABLE w ADD COLUMN k VARCHAR(5) NOT NULL DEFAULT 'ñ'", "w"),
        Sql("CREATE FUNCTION wf(x VARCHAR(5)) RETURNS VARCHAR(10) DETERMINISTIC RETURN CONCAT(x, 'ø')", "w"),
        Sql("UPDATE w SET s = wf('a') WHERE id = 1", "w"),
        Sql("SET collation_connection = utf16_general_ci", "w"),
        Sql("CREATE EVENT w_ev ON SCHEDULE AT '2037-01-01 00:00:00' DO DELETE FROM w WHERE s = 'ü'", "w"),
        Sql("INSERT INTO w (id, ts) VALUES (3, '2022-01-01 00:00:00')", "b"),
        Sql("CREATE TABLE after_default (id INT PRIMARY KEY, ts TIMESTAMP NULL DEFAULT '2020-01-01 00:00:00', "
            "s VARCHAR(5) DEFAULT 'é')", "b"),
        Sql("INSERT INTO after_default (id) VALUES (1)", "b"),
    ), source="22"),
    S("ddl_latin1_german2", "DDL and rows from a latin1 client in latin1_german2_ci (not latin1's default): "
      "text in latin1 columns, comments, defaults; then a default client", (
        Sql("SET NAMES latin1 COLLATE latin1_german2_ci", "l"),  # 31
        Sql("CREATE TABLE l (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET latin1 DEFAULT 'Größe' COMMENT 'Maß', "
            "e ENUM('ä', 'ö') CHARACTER SET latin1 DEFAULT 'ö', CHECK (s <> 'verboten')) COMMENT 'Grüße'", "l"),
        Sql("INSERT INTO l (id) VALUES (1)", "l"),
        Sql("INSERT INTO l VALUES (2, 'Ärger', 'ä')", "l"),
        Sql("CREATE VIEW lv AS SELECT id, s, 'Ü' AS lit FROM l WHERE s > 'Ä'", "l"),
        Sql("CREATE TABLE lc AS SELECT id, CONCAT(s, '€') AS c FROM l", "l"),
        Sql("UPDATE l SET s = 'Öl' WHERE id = 2", "l"),
        Sql("INSERT INTO l VALUES (3, 'ß', 'ö')", "b"),
        Sql("ALTER TABLE l ADD COLUMN t VARCHAR(5) DEFAULT 'ÿ'", "b"),
        Sql("INSERT INTO l (id) VALUES (4)", "b"),
    ), source="22", session_charsets=(("l", "latin1"),)),
    S("session_time_zone_named", "DDL and rows under a named session time zone (Europe/Berlin, loaded on the "
      "leader and replicated): TIMESTAMP defaults, CURRENT_TIMESTAMP, NOW()", (
        Call(_load_time_zone("Europe/Berlin"), "the Europe/Berlin time zone in the leader's tables"),
        "SET time_zone = 'Europe/Berlin'",
        ("CREATE TABLE tzn (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT '2021-07-01 12:00:00', "
         "w TIMESTAMP NOT NULL DEFAULT '2021-01-01 12:00:00', created TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP, "
         "dt DATETIME DEFAULT NOW())"),
        "INSERT INTO tzn (id) VALUES (1)",
        "INSERT INTO tzn (id, ts) VALUES (2, '2021-10-31 02:30:00')",  # the hour that comes twice
        "SET TIMESTAMP = 1617000000",
        ("ALTER TABLE tzn ADD COLUMN added DATETIME NOT NULL DEFAULT NOW(), "
         "ADD COLUMN added_ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"),  # existing rows: the statement's time
        "SET TIMESTAMP = DEFAULT",
        "CREATE EVENT tzn_ev ON SCHEDULE AT '2037-07-01 00:00:00' DO DELETE FROM tzn",
        Sql("INSERT INTO tzn (id, ts) VALUES (3, '2021-07-01 12:00:00')", "b"),
        Sql("CREATE TABLE after_default (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT '2021-07-01 12:00:00')",
            "b"),
        Sql("INSERT INTO after_default (id) VALUES (1)", "b"),
    ), source="22"),
    S("session_time_zone_offset_now", "DDL and rows under a session time zone offset: NOW() and "
      "CURRENT_TIMESTAMP defaults filled by DDL", (
        "SET time_zone = '-03:30'",
        ("CREATE TABLE tzo (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT '2021-07-01 12:00:00', "
         "created TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP, dt DATETIME(3) DEFAULT NOW(3))"),
        "INSERT INTO tzo (id) VALUES (1)",
        "INSERT INTO tzo (id, ts, dt) VALUES (2, NOW(), NOW())",
        "SET TIMESTAMP = 1617000000.25",
        ("ALTER TABLE tzo ADD COLUMN added DATETIME(2) NOT NULL DEFAULT NOW(2), "
         "ADD COLUMN added_ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"),
        "SET TIMESTAMP = DEFAULT",
        Sql("INSERT INTO tzo (id, ts) VALUES (3, '2021-07-01 12:00:00')", "b"),
        Sql("CREATE TABLE after_default (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT '2021-07-01 12:00:00')",
            "b"),
        Sql("INSERT INTO after_default (id) VALUES (1)", "b"),
    ), source="22"),
    S("session_time_zone_unknown_on_follower", "a named time zone the leader has and the copies lack", (
        Call(_load_time_zone("America/Lima", logged=False), "the America/Lima time zone, on the leader only"),
        "SET time_zone = 'America/Lima'",
        "CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT '2021-07-01 12:00:00')",
    ), source="22", refusal="has no time zone 'America/Lima'", native_stops=True),
    S("statement_format_dml", "DML a session logs in statement format (binlog_format=STATEMENT), from a "
      "utf8mb4_unicode_ci client with a time zone", (
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), ts TIMESTAMP NULL)",
        Sql("SET SESSION binlog_format = 'STATEMENT'", "s"),
        Sql("SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci", "s"),
        Sql("SET time_zone = '+05:00'", "s"),
        Sql("INSERT INTO t VALUES (1, 'é', NOW()), (2, 'ß', '2021-07-01 12:00:00')", "s"),
        Sql("BEGIN", "s"),
        Sql("UPDATE t SET v = IF(v = 'ss', 'eq', 'ne') WHERE id = 2", "s"),
        Sql("INSERT INTO t VALUES (3, 'ü', '2021-01-01 00:00:00')", "s"),
        Sql("COMMIT", "s"),
        Sql("DELETE FROM t WHERE id = 1", "s"),
        Sql("INSERT INTO t VALUES (4, 'ö', '2021-07-01 12:00:00')", "b"),
    ), source="22"),
    S("statement_format_dml_user_variable", "statement-format DML that needs a user variable and an INSERT_ID", (
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(10))",
        Sql("SET SESSION binlog_format = 'STATEMENT'", "s"),
        Sql("SET @x = 'userv'", "s"),
        Sql("INSERT INTO t (v) VALUES (@x)", "s"),
    ), source="22"),
    S("statement_format_context", "statement-format DML from a latin1 client, run with what the leader logged "
      "before it: INSERT_ID after a rolled-back insert, LAST_INSERT_ID(), RAND()'s seeds, user variables of each "
      "type (a latin1 string that is not UTF-8, signed, unsigned, NULL, double, decimal), also read by CREATE "
      "TABLE ... SELECT", (
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARBINARY(60), r DOUBLE, l BIGINT)",
        Sql("SET SESSION binlog_format = 'STATEMENT'", "s"),
        Sql("SET NAMES latin1", "s"),
        Sql("BEGIN", "s"),
        Sql("INSERT INTO t (v) VALUES ('rolled back')", "s"),  # not logged, but the leader's counter moved on
        Sql("ROLLBACK", "s"),
        Sql("SET @s = _latin1 X'E9FF00', @i = -5, @u = CAST(7 AS UNSIGNED), @n = NULL, @r = 0.1e0, @d = 1.50, "
            "@d0 = CAST(5 AS DECIMAL(10,0)), @big = 18446744073709551615", "s"),
        Sql("INSERT INTO t (v, r, l) VALUES (@s, @r + RAND(), LAST_INSERT_ID())", "s"),
        Sql("INSERT INTO t (v, r, l) VALUES (CONCAT_WS('/', @i, @u, @d, @d0, IFNULL(@n, 'null'), @big), RAND(), "
            "LAST_INSERT_ID()), ('two', RAND(), 0)", "s"),
        Sql("UPDATE t SET r = r + RAND() WHERE id = LAST_INSERT_ID()", "s"),
        Sql("CREATE TABLE typed AS SELECT @s AS s, @i AS i, @u AS u, @n AS n, @r AS r, @d AS d, @d0 AS d0, "
            "@big AS big", "s"),
    ), source="24"),
    S("mixed_format_context", "a MIXED-format session: safe DML logged as statements with their user variables, "
      "INSERT_ID and LAST_INSERT_ID(); unsafe DML (RAND(), UUID()) logged as rows", (
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, k INT, v VARCHAR(40))",
        Sql("SET SESSION binlog_format = 'MIXED'", "s"),
        Sql("SET @k = 4, @v = 'mixed é'", "s"),
        Sql("INSERT INTO t (k, v) VALUES (@k, @v)", "s"),
        Sql("INSERT INTO t (k, v) SELECT @k + 1 + LAST_INSERT_ID(), CONCAT(@v, '!')", "s"),
        Sql("INSERT INTO t (k, v) VALUES (RAND() * 1000, UUID())", "s"),
        Sql("UPDATE t SET v = @v WHERE k = @k", "s"),
    ), source="24"),
    S("ddl_user_variables", "DDL the leader evaluates with user variables or RAND() (logged after USER_VAR and RAND "
      "events in ROW format too; MariaDB's events_bugs): CREATE EVENT ... EVERY @s SECOND, AT ... + INTERVAL @d "
      "DAY, ALTER EVENT ... EVERY @m MINUTE, a view of RAND()", (
        "SET @s = 5, @d = 3, @m = 2",
        "CREATE EVENT e_every ON SCHEDULE EVERY @s SECOND DISABLE DO SET @y = 1",
        "CREATE EVENT e_at ON SCHEDULE AT '2030-01-01 00:00:00' + INTERVAL @d DAY DISABLE DO SET @y = 1",
        "ALTER EVENT e_every ON SCHEDULE EVERY @m MINUTE",
        "CREATE VIEW vr AS SELECT RAND() AS r",
        "CREATE TABLE after_ddl (id INT PRIMARY KEY)",
        "INSERT INTO after_ddl VALUES (1)",
    ), source="24"),
    S("statement_format_guard_variable", "a leader's user variable named like the consumer's trigger guard "
      "(@cdc_consumer, NULL) read by statement-format DML on a table with a trigger, then rows of that table", (
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE audit_log (t_id INT PRIMARY KEY)",
        "CREATE TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW INSERT INTO audit_log VALUES (NEW.id)",
        Sql("SET SESSION binlog_format = 'STATEMENT'", "s"),
        Sql("SET @cdc_consumer = NULL", "s"),
        Sql("INSERT INTO t VALUES (1, IFNULL(@cdc_consumer, 'null'))", "s"),
        "INSERT INTO t VALUES (2, 'row')",  # its trigger's row is in the binlog: the follower's must not fire
    ), source="24"),
    # --- statements the leader executed in part
    S("partial_drop_table", "DROP TABLE t1, t2 where t1 does not exist", (
        "CREATE TABLE t2 (id INT PRIMARY KEY)",
        Sql("DROP TABLE t1, t2", expect_error=1051),
        "CREATE TABLE after_drop (id INT PRIMARY KEY)",
        "INSERT INTO after_drop VALUES (1)",
    )),
    S("partial_drop_view", "DROP VIEW v1, v2 where v1 does not exist (logged with its error code)", (
        "CREATE VIEW v2 AS SELECT 1 AS one",
        Sql("DROP VIEW v1, v2", expect_error=4092),
        "CREATE TABLE after_drop (id INT PRIMARY KEY)",
        "INSERT INTO after_drop VALUES (1)",
    )),
    S("partial_insert_myisam", "a multi-row INSERT into MyISAM failing half-way (the first rows stay)", (
        "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM",
        Sql("INSERT INTO m VALUES (1), (2), (1), (3)", expect_error=1062),
        "INSERT INTO m VALUES (4)",
    )),
    # --- sessions
    S("temporary_tables", "temporary tables feeding real ones", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "CREATE TEMPORARY TABLE tmp (id INT PRIMARY KEY, v INT)",
        "INSERT INTO tmp VALUES (1, 10), (2, 20)",
        "INSERT INTO t SELECT * FROM tmp",
        "UPDATE t JOIN tmp USING (id) SET t.v = t.v + tmp.v",
        "CREATE TABLE t2 SELECT id FROM tmp",
        "DROP TEMPORARY TABLE tmp",
        "CREATE TEMPORARY TABLE t (id INT)",
        "INSERT INTO t VALUES (5)",
        "DROP TEMPORARY TABLE t",
        "INSERT INTO t VALUES (3, 3)",
    )),
    # --- a row the follower lacks: native replication stops (error 1032); so must we
    S("update_of_missing_row", "an UPDATE whose row is missing on the copy must be loud, not an insert", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 1)",
        "SET sql_log_bin = 0",
        "INSERT INTO t VALUES (2, 2)",
        "SET sql_log_bin = 1",
        "UPDATE t SET v = 20 WHERE id = 2",
    ), refusal="found no row", native_stops=True),
    S("delete_of_missing_row", "a DELETE whose row is missing on the copy must be loud, not a no-op", (
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 1)",
        "SET sql_log_bin = 0",
        "INSERT INTO t VALUES (2, 2)",
        "SET sql_log_bin = 1",
        "DELETE FROM t WHERE id = 2",
    ), refusal="found no row", native_stops=True),
    # ======================= issue 18
    S("auto_increment_session_ddl", "auto_increment_increment/offset of the session running the DDL", (
        "CREATE TABLE ai (a INT PRIMARY KEY)",
        "INSERT INTO ai VALUES (1), (2), (3)",
        "SET auto_increment_increment = 5, auto_increment_offset = 3",
        "ALTER TABLE ai ADD id INT AUTO_INCREMENT UNIQUE",
        "CREATE TABLE ai2 (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "INSERT INTO ai2 (v) VALUES (1), (2)",
    ), source="18"),
    S("exchange_partition", "ALTER TABLE ... EXCHANGE PARTITION", (
        ("CREATE TABLE t1 (id INT NOT NULL, name VARCHAR(30)) PARTITION BY RANGE (id) "
        "(PARTITION p0 VALUES LESS THAN (50), PARTITION p1 VALUES LESS THAN (MAXVALUE))"),
        "INSERT INTO t1 VALUES (16, 'Me'), (337, 'ROFL')",
        "CREATE TABLE t2 LIKE t1",
        "ALTER TABLE t2 REMOVE PARTITIONING",
        "ALTER TABLE t1 EXCHANGE PARTITION p0 WITH TABLE t2",
        "INSERT INTO t1 VALUES (17, 'after')",
    ), source="18"),
    S("application_time_period", "application-time period table with WITHOUT OVERLAPS", (
        "CREATE TABLE ap (id INT, s DATE, e DATE, v INT, PERIOD FOR p(s, e), UNIQUE (id, p WITHOUT OVERLAPS))",
        "INSERT INTO ap VALUES (1, '2020-01-01', '2021-01-01', 10), (2, '2020-01-01', '2020-06-01', 20)",
        "UPDATE ap SET v = 11 WHERE id = 1",
        "UPDATE ap FOR PORTION OF p FROM '2020-03-01' TO '2020-06-01' SET v = 12 WHERE id = 1",
        "DELETE FROM ap FOR PORTION OF p FROM '2020-08-01' TO '2020-09-01' WHERE id = 1",
        "DELETE FROM ap WHERE id = 2",
    ), source="18"),
    S("application_time_period_with_primary_key", "application-time period table with a PRIMARY KEY too", (
        ("CREATE TABLE app (pk INT PRIMARY KEY, id INT, s DATE, e DATE, v INT, PERIOD FOR p(s, e), "
        "UNIQUE (id, p WITHOUT OVERLAPS))"),
        "INSERT INTO app VALUES (1, 1, '2020-01-01', '2021-01-01', 10), (2, 2, '2020-01-01', '2020-06-01', 20)",
        "UPDATE app SET v = 11 WHERE pk = 1",
        "DELETE FROM app WHERE pk = 2",
    ), source="18"),
    S("accounts_create_user", "CREATE USER / GRANT / ALTER USER replicated", (
        "CREATE USER '{db}_u'@'%' IDENTIFIED BY 'secret1'",
        "GRANT SELECT, INSERT ON {db}.* TO '{db}_u'@'%'",
        "ALTER USER '{db}_u'@'%' WITH MAX_USER_CONNECTIONS 7",
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
    ), source="18", compare_accounts=True, secrets=("secret1",)),
    S("accounts_user_exists_on_follower", "CREATE USER of an account the follower already has: never a stop", (
        "CREATE USER '{db}_u'@'%' IDENTIFIED BY 'secret2'",
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
    ), source="18", follower_setup=("CREATE USER '{db}_u'@'%' IDENTIFIED BY 'follower-own'",), secrets=("secret2",)),
    S("partial_drop_user", "DROP USER of one missing and one existing account (logged with error 1396)", (
        "CREATE USER '{db}_u1'@'%'",
        Sql("DROP USER '{db}_missing'@'%', '{db}_u1'@'%'", expect_error=1396),
        "CREATE USER '{db}_u2'@'%'",
        Sql("CREATE USER '{db}_u2'@'%', '{db}_u3'@'%'", expect_error=1396),
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
    ), source="18", compare_accounts=True),
    S("accounts_passwords", "passwords set by CREATE USER, ALTER USER and SET PASSWORD: equal hashes, never on the topic", (
        "CREATE USER '{db}_p'@'%' IDENTIFIED BY 'first-pw'",
        "ALTER USER '{db}_p'@'%' IDENTIFIED BY 'second-pw'",
        "CREATE USER '{db}_q'@'localhost' IDENTIFIED BY PASSWORD '*0913BF2E2CE20CE21BFB1961AF124D4920458E5F'",
        "SET PASSWORD FOR '{db}_q'@'localhost' = PASSWORD('third-pw')",
        "GRANT SELECT ON {db}.* TO '{db}_p'@'%'",
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
    ), source="18", compare_accounts=True, secrets=("first-pw", "second-pw", "third-pw")),
    S("non_strict_enum_duplicate", "non-strict leader: ENUM with a duplicated value (1291 in strict mode)", (
        "SET sql_mode = ''",
        "CREATE TABLE ne (id INT PRIMARY KEY, e ENUM('a', 'b', 'a'))",
        "INSERT INTO ne VALUES (1, 'a'), (2, 'b')",
    ), source="18"),
    S("non_strict_column_length", "non-strict leader: VARCHAR(70000) becomes a TEXT type (1074 in strict mode)", (
        "SET sql_mode = ''",
        "CREATE TABLE nl (id INT PRIMARY KEY, v VARCHAR(70000))",
        "INSERT INTO nl VALUES (1, 'x')",
    ), source="18"),
    S("non_strict_long_comment", "non-strict leader: a table comment over 2048 characters (1628 in strict mode)", (
        "SET sql_mode = ''",
        "CREATE TABLE nc (id INT PRIMARY KEY) COMMENT = '" + "c" * 2100 + "'",
        "INSERT INTO nc VALUES (1)",
    ), source="18"),
    S("non_strict_alter_truncates", "non-strict leader: ALTER TABLE truncating data (1265 in strict mode)", (
        "SET sql_mode = ''",
        "CREATE TABLE nt (id INT PRIMARY KEY, s VARCHAR(10))",
        "INSERT INTO nt VALUES (1, 'abcdefghij'), (2, 'ab')",
        "ALTER TABLE nt MODIFY s VARCHAR(3)",
        "INSERT INTO nt VALUES (3, 'xyz')",
    ), source="18"),
    S("non_strict_time_value", "non-strict leader: ALTER to TIME with values that are not times (1292 in strict mode)", (
        "SET sql_mode = ''",
        "CREATE TABLE nti (id INT PRIMARY KEY, t VARCHAR(20))",
        "INSERT INTO nti VALUES (1, '10:11:12'), (2, 'not a time'), (3, '25:61:61')",
        "ALTER TABLE nti MODIFY t TIME",
        "INSERT INTO nti VALUES (4, '01:02:03')",
    ), source="18"),
    # mtr's type_time: MariaDB's pre-10.1 temporal formats, whose precision the table map leaves out (the producer
    # learns it from the CREATE TABLE it read, else from the leader's information_schema: `tt_like`).
    S("old_temporal_fractions", "TIME/DATETIME/TIMESTAMP(0..6) made with mysql56_temporal_format=OFF everywhere", (
        *_old_temporal_format((
            "CREATE TABLE tt (id INT PRIMARY KEY, " + ", ".join(f"t{n} TIME({n})" for n in range(7)) + ")",
            "CREATE TABLE dt (id INT PRIMARY KEY, " + ", ".join(f"d{n} DATETIME({n})" for n in range(7)) + ")",
            "CREATE TABLE st (id INT PRIMARY KEY, " + ", ".join(f"s{n} TIMESTAMP({n}) NULL" for n in range(7)) + ")",
            "CREATE TABLE tt_like LIKE tt",
        )),
        "SET sql_mode = '', time_zone = '+00:00'",
        *(f"INSERT INTO {table} VALUES ({i}{f', {value!r}' * 7})" for table in ("tt", "tt_like") for i, value in
          enumerate(("00:00:00", "838:59:59.999999", "-838:59:59.999999", "-00:00:00.5", "-00:00:00.000001",
                     "-01:02:03.123456", "12:34:56.7", "100:20:20.123456", "-100:20:20.654321"))),
        *(f"INSERT INTO dt VALUES ({i}{f', {value!r}' * 7})" for i, value in enumerate((
            "0000-00-00 00:00:00", "1000-01-01 00:00:00.000001", "9999-12-31 23:59:59.999999",
            "2024-02-29 12:34:56.789012", "0001-01-01 00:00:00.5", "2021-00-00 10:20:30.25"))),
        *(f"INSERT INTO st VALUES ({i}{f', {value!r}' * 7})" for i, value in enumerate((
            "0000-00-00 00:00:00", "1970-01-01 00:00:01.000001", "2038-01-19 03:14:07.999999",
            "2024-02-29 12:34:56.789012", "2001-09-09 01:46:40.5"))),
        "INSERT INTO st (id) VALUES (9)",
        "UPDATE tt SET t3 = '-00:00:01.001', t6 = '01:00:00.000001' WHERE id IN (1, 2, 3)",
        "UPDATE dt SET d6 = '1999-12-31 23:59:59.999999' WHERE id = 3",
        "UPDATE st SET s2 = '2020-02-02 02:02:02.02' WHERE id = 4",
        "DELETE FROM tt WHERE id = 4", "DELETE FROM dt WHERE id = 1", "DELETE FROM st WHERE id = 2",
        "DELETE FROM tt_like WHERE id = 5",
        "SET sql_mode = DEFAULT",
    ), source="24"),
    S("old_temporal_format", "a table in the pre-10.1 temporal format holding ALLOW_INVALID_DATES values", (
        "SET GLOBAL mysql56_temporal_format = OFF",
        "CREATE TABLE of (id INT PRIMARY KEY, t TIME, d DATETIME)",
        "SET GLOBAL mysql56_temporal_format = ON",
        "SET sql_mode = 'ALLOW_INVALID_DATES'",
        "INSERT INTO of VALUES (1, '-838:59:59', '0000-00-00 00:00:00'), (2, '838:59:59', '2020-00-03 01:02:03')",
        "UPDATE of SET t = '-00:00:01', d = '2021-02-30 00:00:00' WHERE id = 2",
        "INSERT INTO of VALUES (3, '01:00:00', '2021-02-30 00:00:00')",
    ), source="18", sql_differs="d: replica '0000-00-00 00:00:00' / follower '2021-02-30 00:00:00'"),
    S("non_strict_row_values", "non-strict leader: rows holding what it made of out-of-range and invalid values", (
        "CREATE TABLE nv (id INT PRIMARY KEY, ti TINYINT, u INT UNSIGNED, d DATE, dt DATETIME, s VARCHAR(3), "
        "e ENUM('a', 'b'), n DECIMAL(4, 1), y YEAR)",
        "SET sql_mode = ''",
        "INSERT INTO nv VALUES (1, 300, -5, '2020-02-30', '2020-13-01 00:00:00', 'abcdef', 'zzz', 12345.67, 3000)",
        "INSERT INTO nv VALUES (2, -300, 1, '0000-00-00', '2021-01-01 25:00:00', 'x', '', 1.25, 1900)",
        "UPDATE nv SET ti = ti + 1000, s = CONCAT(s, 'longer'), e = 'nope' WHERE id = 2",
        "SET sql_mode = DEFAULT",
        "INSERT INTO nv (id) VALUES (3)",
    ), source="18"),
    S("fk_off_truncate_parent", "TRUNCATE of a referenced table with foreign_key_checks=0", (
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        "CREATE TABLE child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent (id))",
        "INSERT INTO parent VALUES (1), (2)",
        "INSERT INTO child VALUES (10, 1)",
        "SET foreign_key_checks = 0",
        "TRUNCATE TABLE parent",
        "SET foreign_key_checks = 1",
        "INSERT INTO parent VALUES (3)",
    ), source="18"),
    S("fk_off_delete_parent", "DELETE of a referenced parent row with foreign_key_checks=0", (
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        "CREATE TABLE child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent (id))",
        "INSERT INTO parent VALUES (1), (2)",
        "INSERT INTO child VALUES (10, 1)",
        "SET foreign_key_checks = 0",
        "DELETE FROM parent WHERE id = 1",
        "UPDATE parent SET id = 20 WHERE id = 2",
        "SET foreign_key_checks = 1",
    ), source="18"),
    S("fk_off_ddl", "DDL with foreign_key_checks=0: child before parent, mismatched types, dropping a parent", (
        "SET foreign_key_checks = 0",
        "CREATE TABLE child (id INT PRIMARY KEY, p BIGINT, FOREIGN KEY (p) REFERENCES parent (id))",
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        "CREATE TABLE parent2 (id INT PRIMARY KEY)",
        "CREATE TABLE child2 (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent2 (id))",
        "DROP TABLE parent2",
        "SET foreign_key_checks = 1",
        "INSERT INTO parent VALUES (1)",
    ), source="18"),
]
