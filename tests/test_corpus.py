"""The corpus runner (scripts/corpus.py): how it reads MariaDB's .test files (pure), and a subset of the
corpus run for real on both row paths, one file per cause found in the full run (docs/compatibility.md,
"External corpora"). A cause fixed elsewhere changes its row in EXPECTED (and the docs' table)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import corpus

# ---------------------------------------------------------------------------
# Reading .test files (pure)


def test_the_final_clean_up_is_cut():
    text = ("--source include/have_innodb.inc\ncreate table t1 (a int);\ninsert into t1 values (1);\n"
            "drop table t1;\n\n--echo # End of 10.5 tests\n")
    body, cut = corpus.truncated(text)
    assert body == "--source include/have_innodb.inc\ncreate table t1 (a int);\ninsert into t1 values (1);\n"
    assert cut == 3


def test_a_multi_line_drop_and_restores_are_clean_up_but_a_select_is_not():
    text = ("create table t1 (a int);\nselect * from t1;\ndrop table t1,\n  t2;\nset global sql_mode = @old;\n"
            "disconnect con1;\nconnection default;\n")
    body, _ = corpus.truncated(text)
    assert body == "create table t1 (a int);\nselect * from t1;\n"


def test_delimiters_are_followed():
    text = ("delimiter //;\ncreate procedure p() begin select 1; end//\ndelimiter ;//\n"
            "drop procedure p;\n")
    assert [s.text for s in corpus.statements(text)] == [
        "delimiter //", "create procedure p() begin select 1; end", "delimiter ;", "drop procedure p"]
    assert corpus.truncated(text)[0] == "delimiter //;\ncreate procedure p() begin select 1; end//\n"


def test_a_file_without_clean_up_is_kept_whole():
    text = "create table t1 (a int);\ninsert into t1 values (1);\n"
    assert corpus.truncated(text) == (text, 0)


@pytest.mark.parametrize(("text", "reason"), [
    ("--source include/restart_mysqld.inc\n", "restarts the server"),
    ("set binlog_format=statement;\n", "changes binlog_format"),
    ("SET @@session.binlog_format = 'MIXED';\n", "changes binlog_format"),
    ("reset  master;\n", "RESET MASTER"),
    ("set sql_log_bin=0;\ninsert into t values (1);\n", "turns sql_log_bin off"),
    ("set binlog_format=row;\nselect 1;\n", None),
    ("# reset master in a comment\n", None),
    # sql_log_bin off only around mtr's bookkeeping: the test's own statements are all logged
    ("SET STATEMENT sql_log_bin=0 FOR\ncall mtr.add_suppression(\"x\");\n", None),
    ("set sql_log_bin=0;\ncall mtr.add_suppression(\"x\");\nset sql_log_bin=1;\n", None),
    ("ALTER TABLE mysql.event DROP comment, DROP starts;\n", "alters the mysql schema's tables"),
    ("drop table if exists `mysql`.`proc`;\n", "alters the mysql schema's tables"),
    ("update mysql.proc set body='x';\nalter table mysqltest.t1 add b int;\n", None),
])
def test_skip_reasons(text, reason):
    assert corpus.skip_reason(text) == reason


def test_a_skip_reason_in_an_include_names_it():
    assert corpus.skip_reason("--source include/have_binlog_format_mixed_or_statement.inc\n") == (
        "changes binlog_format (in include/have_binlog_format_mixed_or_statement.inc)")


def test_stop_causes_keep_the_cause_and_drop_positions_and_names():
    detail = ("  applying topic 'compat-1'\n  error: DDL failed at offset 113, transaction 0-58982-53: Unknown "
              "character set: '224' (MySQL error 1115); nothing of the transaction was applied")
    assert corpus.stop_cause(detail) == "DDL failed Unknown character set: '224' (MySQL error 1115)"
    assert corpus.stop_cause("error: Table 'cmp_x.t1' doesn't exist in `cmp_x`.`t1`") == (
        "Table '_' doesn't exist in _._")


def test_difference_causes_and_the_tables_they_name():
    diffs = ["table d.t1: rows differ (replica 2 rows, follower 1; 1 only on the replica, 0 only on the follower)",
             "table d.t2: SHOW CREATE TABLE differs\n  replica:  CREATE TABLE `t2` (`a` int) DEFAULT CHARSET=latin1\n"
             "  follower: CREATE TABLE `t2` (`a` int) DEFAULT CHARSET=utf8mb4",
             "d: view v1 differs\n  replica:  x\n  follower: y",
             "d: trigger tr exists on the replica only: order 1"]
    assert [corpus.diff_cause(d) for d in diffs] == [
        "rows differ", "SHOW CREATE TABLE differs: DEFAULT CHARSET=latin1, DEFAULT CHARSET=utf8mb4", "view differs",
        "trigger on the replica only"]
    assert corpus.tables_named("d", diffs) == {"t1", "t2", "v1"}


def test_summary_counts_refused_tables_as_not_equal():
    results = [corpus.FileResult("mtr:a", "sql", "EQUAL", tables=2, tables_equal=2, seconds=4),
               corpus.FileResult("mtr:b", "sql", "STOPPED", reason="x", tables=3, seconds=6),
               corpus.FileResult("mtr:c", "sql", "SKIPPED", reason="RESET MASTER")]
    summary = corpus.summarize(results)
    assert (summary["run"], summary["tables_compared"], summary["tables_equal"]) == (2, 5, 2)
    assert summary["skipped"] == {"RESET MASTER": 1}
    assert summary["stops"] == {"STOPPED: x": 1}
    assert summary["refusals"] == [{"file": "mtr:b", "rows": "sql", "tables": 3, "reason": "x"}]
    assert summary["seconds_per_file"] == 5


def test_shards_split_the_list():
    names = corpus.mtr_names("a,b,c,d,e", (2, 2))
    assert names == ["b", "d"]
    assert corpus.mtr_names("main/a.test,b", None) == ["a", "b"]


# ---------------------------------------------------------------------------
# A subset of the corpus, run for real on both row paths: one workload per cause the full run found
# (docs/compatibility.md, "External corpora"). "EQUAL", or "STATUS: a fragment of the cause".

SUBSET: dict[str, tuple[str, str]] = {  # workload -> (BINLOG replay, SQL path)
    "mtr:bool": ("EQUAL", "EQUAL"),
    "mtr:create_drop_procedure": ("EQUAL", "EQUAL"),
    # tables with triggers: the SQL path guards the replicated triggers (docs/compatibility.md)
    "mtr:func_time": ("EQUAL", "EQUAL"),
    # a client collation that is not its charset's default, in the DDL session (session.py)
    "mtr:ctype_collate": ("EQUAL", "EQUAL"),
    "sessions": ("EQUAL", "EQUAL"),
    # a utf16le collation_connection before the consumer's own time zone literal (follower.SESSION_SQL)
    "mtr:ctype_utf16le": ("EQUAL", "EQUAL"),
    # a user variable the leader logged (User_var event) before a statement (ALTER EVENT ... EVERY @a SECOND): it
    # travels in the statement's session and the consumer sets it first (before, the producer stopped there).
    # The file drops its database (events_test) before its last statements, so no table is left to compare
    "mtr:events_bugs": ("EQUAL", "EQUAL"),
    # a dump restore (unique_checks=0, foreign_key_checks=0): BINLOG replay once crashed the follower
    "dump": ("EQUAL", "EQUAL"),
    # a FLOAT(30,0) value the leader clipped to the column's maximum reads back (as a float) above it: the SQL
    # path sends the shortest literal of the same float (literals.py), which the strict session stores
    "mtr:type_float": ("EQUAL", "EQUAL"),
    # a CHECK constraint whose evaluation warns ('Ken' -> DECIMAL) on rows a non-strict session wrote to MyISAM: the
    # SQL path's strict session stopped on it (1292); it now writes rows with check_constraint_checks=0, as a native
    # replica's row applier evaluates no CHECK (follower.SESSION_SQL)
    "mtr:check_constraint": ("EQUAL", "EQUAL"),
    # MariaDB's pre-10.1 TIME(n) (mysql56_temporal_format=OFF), whose precision the table map leaves out: the
    # producer stopped on it; it now learns it from the binlog's CREATE TABLE (old_temporals.py)
    "mtr:type_time": ("EQUAL", "EQUAL"),
    # a procedure body the server cannot parse (written into mysql.proc): the comparison of objects once failed
    # on it, and every later file with it
    "mtr:errors": ("EQUAL", "EQUAL"),
    # the native replica itself stops (a temporary table the leader's row events do not carry)
    "mtr:backup_log": ("ORACLE: the native replica stopped", "ORACLE: the native replica stopped"),
    # a real client: sysbench's bulk prepare and OLTP writes, 4 threads, on InnoDB and Aria (about 30 s a path)
    "sysbench": ("EQUAL", "EQUAL"),
}


# Files that leave no table to compare (events_bugs drops everything before it ends, so the runner finds no
# final clean-up to cut; errors leaves only routines): EQUAL says the pipeline went through them and left
# nothing, objects included, that the native replica lacks.
NOTHING_LEFT = frozenset({"mtr:events_bugs", "mtr:errors"})


@pytest.fixture(scope="module", params=["binlog", "sql"])
def run_corpus(request, tmp_path_factory):
    with corpus.Corpus(tmp_path_factory.mktemp(f"corpus-{request.param}"), request.param, sync_timeout=60) as c:
        yield c


@pytest.mark.parametrize("workload", SUBSET)
def test_corpus_subset(run_corpus, workload):
    c = run_corpus
    if workload == "dump":
        result = c.run_workload("dump", corpus.dump_workload(c), "dump")
    elif workload == "sessions":
        result = c.run_workload("sessions", corpus.sessions_workload(c), "sessions")
    elif workload == "sysbench":
        result = corpus.run_sysbench(c)
    else:
        result = c.run_mtr(workload.removeprefix("mtr:"))
    want = SUBSET[workload][0 if c.rows == "binlog" else 1]
    status, _, cause = want.partition(": ")
    shown = f"{result.status} {result.reason}\n" + "\n".join(result.diffs) + result.detail
    assert result.status == status, shown
    assert cause in result.reason, shown
    if status == "EQUAL":
        assert (result.tables > 0 or workload in NOTHING_LEFT) and result.tables_equal == result.tables, shown
    else:
        assert result.tables_equal == 0, shown
