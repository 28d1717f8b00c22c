#!/usr/bin/env python3
"""External corpora in the differential harness: workloads nobody here wrote, on a leader followed by a
native replica and by our pipeline, compared database by database (tests/differential.py).

Workloads:
  mtr:<name>   MariaDB's own test suite, /usr/share/mysql/mysql-test/main/<name>.test, run by the real
               driver (mariadb-test) in a database of its own, stopped before the file's final clean-up
               (its trailing DROPs etc.) so that there is something left to compare.
  dump         a mariadb-dump of a database with triggers, views, routines, events, FKs and 12,000 rows,
               restored on the leader with the mariadb client.
  sessions     application sessions: utf8mb4_unicode_ci and latin1 clients, session time zones by name
               and by offset, DDL and DML.
  sysbench     a real client: sysbench's prepare (bulk INSERTs) and OLTP scripts (transactions of UPDATEs of
               indexed and non-indexed columns, DELETE and re-INSERT; autocommit INSERTs, DELETEs and the
               read/write mix), 4 threads at once.

    .venv/bin/python scripts/corpus.py --rows binlog --shard 1/4 --out /tmp/corpus-b1.jsonl
    .venv/bin/python scripts/corpus.py --rows sql --files names.txt --out /tmp/s.jsonl
    .venv/bin/python scripts/corpus.py --rows sql --managed --workloads sysbench   # a managed follower's user
    .venv/bin/python scripts/corpus.py --report /tmp/corpus-b*.jsonl     # the summary of finished runs

Each workload's result is one JSON line in --out (appended as it finishes, so a long run can be polled
and an interrupted one keeps what it did); the summary (a table, and --json) is printed at the end.
docs/compatibility.md ("External corpora") explains the figures and lists the causes found.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import pymysql
from differential import (
    MARKER_DB,
    Call,
    Context,
    Differential,
    Outcome,
    Scenario,
    ScenarioStop,
    compare,
    snapshot,
)
from harness import Server, quote

MTR = Path(os.environ.get("CDC_MTR_DIR", "/usr/share/mysql/mysql-test"))
SYSTEM_DBS = {"information_schema", "mysql", "performance_schema", "sys", MARKER_DB, "mtr", "mysql_cdc"}
FILE_TIMEOUT = 300.0  # seconds mariadb-test may run one file
# The native replica applies an UPDATE/DELETE of a table without a key by scanning the table for each row: a
# few files take it many minutes. After this long it is re-attached at the leader's position (an ORACLE outcome).
SYNC_TIMEOUT = 120.0
HARNESS_FAILURES_IN_A_ROW = 5  # the same harness error on this many files in a row stops the run

# What makes a file unusable for the comparison (grepped in the file and every include it sources).
SKIP_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("restarts the server", re.compile(
        r"restart_mysqld|shutdown_server|kill_mysqld|start_mysqld|restart_and_|wait_until_disconnected"
        r"|\.expect\b|mysqld\.1\.expect|^\s*--?exec\b.*\$MYSQLD\b", re.I | re.M)),
    ("changes binlog_format", re.compile(r"binlog_format\s*:?=\s*(?!'?\"?row\b)", re.I)),
    ("RESET MASTER", re.compile(r"\breset\s+master\b", re.I)),
    ("turns sql_log_bin off", re.compile(r"sql_log_bin\s*:?=\s*(0|off|false)\b", re.I)),
    # A file that damages a system table (events_1: ALTER TABLE mysql.event DROP ...) restores it in its final
    # clean-up, which the runner cuts: every later file would then fail on the damaged table.
    ("alters the mysql schema's tables", re.compile(
        r"\b(?:alter|drop|rename|truncate)\s+table\s+(?:if\s+exists\s+)?`?mysql`?\s*\.", re.I)),
)
_SOURCE = re.compile(r"^\s*(?:--\s*)?source\s+([^\s;]+)", re.I | re.M)

# mtr's server options (include/default_mysqld.cnf, mariadb-test-run.pl), on every server as mtr's replication
# suites have them: the binlog does not say which engine a CREATE TABLE defaulted to.
MTR_GLOBALS = ("SET GLOBAL log_bin_trust_function_creators = 1", "SET GLOBAL local_infile = 1",
               "SET GLOBAL character_set_server = latin1", "SET GLOBAL collation_server = latin1_swedish_ci",
               "SET GLOBAL default_storage_engine = MyISAM")

# Global variables that move by themselves (positions) or cannot be set back: never restored.
_UNRESTORED = re.compile(r"^(gtid_|timestamp$|rand_seed|last_insert_id$|insert_id$|identity$|warning_count$"
                         r"|error_count$|pseudo_thread_id$|server_id$|log_bin_basename|debug_sync$)")


# ---------------------------------------------------------------------------
# Reading a .test file (pure)


def includes(text: str, base: Path = MTR, seen: set[Path] | None = None) -> list[Path]:
    """Every file `text` sources, recursively (a source path made of a variable is not followed)."""
    seen = set() if seen is None else seen
    found = []
    for name in _SOURCE.findall(text):
        if "$" in name:
            continue
        for candidate in (base / name, MTR / name, MTR / "main" / name):
            if candidate.is_file() and candidate not in seen:
                seen.add(candidate)
                found.append(candidate)
                found += includes(candidate.read_bytes().decode("latin-1"), base, seen)
                break
    return found


def skip_reason(text: str, base: Path = MTR) -> str | None:
    """Why a .test file cannot be compared (restarts, binlog_format, RESET MASTER, sql_log_bin off), or None."""
    texts = [("", text)] + [(f" (in {p.relative_to(MTR) if p.is_relative_to(MTR) else p})",
                             p.read_bytes().decode("latin-1")) for p in includes(text, base)]
    for reason, pattern in SKIP_PATTERNS:
        for where, body in texts:
            if pattern.search(_uncommented(body)):
                return reason + where
    return None


# sql_log_bin off only around mtr's own bookkeeping (include/have_innodb.inc...): nothing of the test goes unlogged.
_HARMLESS = re.compile(
    r"set\s+statement\s+sql_log_bin\s*=\s*0\s+for\s+call\s+mtr\.|"
    r"sql_log_bin\s*=\s*(?:0|off)\s*;(?:\s*call\s+mtr\.\w+\([^;]*\)\s*;)+\s*set\s+(?:@@session\.)?sql_log_bin\s*=",
    re.I)


def _uncommented(text: str) -> str:
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return _HARMLESS.sub("", text)


@dataclass
class Statement:
    line: int  # 0-based index of its first line
    text: str


def statements(text: str) -> list[Statement]:
    """The file split as mariadb-test reads it: `--command` lines, and statements ending in the delimiter."""
    out: list[Statement] = []
    delimiter = ";"
    current: list[str] = []
    start = 0
    for i, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if not current:
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("--"):
                out.append(Statement(i, stripped))
                m = re.match(r"--\s*delimiter\s+(\S+)", stripped, re.I)
                if m:
                    delimiter = m.group(1)
                continue
            start = i
        current.append(line)
        if stripped.endswith(delimiter):
            body = "\n".join(current).strip()[: -len(delimiter)].strip()
            m = re.match(r"delimiter\s+(\S+)$", body, re.I)
            if m:
                delimiter = m.group(1)
            out.append(Statement(start, body))
            current = []
    if current:
        out.append(Statement(start, "\n".join(current)))
    return out


_CLEANUP = re.compile(
    r"^(?:--\s*)?(?:drop\s|disconnect\b|connection\b|echo\b|remove_file|remove_files|let\b|"
    r"enable_|disable_|uninstall\s|flush\s+privileges|use\s|set\s+(?:global|@@global)|"
    r"source\s+\S*(?:count_sessions|cleanup|restore|check_events_off)|exit\b|delimiter\b|"
    r"set\s+(?:@@)?(?:session\s+)?(?:sql_mode|names|character_set_\w+|collation_\w+|time_zone|"
    r"default_storage_engine|storage_engine|optimizer_\w+|@\w+)\s*=\s*(?:@|default))",
    re.I)


def cleanup_start(text: str) -> int | None:
    """The line where the file's final clean-up begins (its trailing run of DROPs, disconnects,
    restores of variables...), None when the file does not end with one."""
    cut = None
    for stmt in reversed(statements(text)):
        if not _CLEANUP.match(stmt.text.strip()):
            break
        cut = stmt.line
    return cut


def truncated(text: str) -> tuple[str, int]:
    """The file without its final clean-up, and the number of lines cut."""
    lines = text.splitlines()
    cut = cleanup_start(text)
    if cut is None:
        return text, 0
    return "\n".join(lines[:cut]) + "\n", len(lines) - cut


# ---------------------------------------------------------------------------
# Results


@dataclass
class FileResult:
    """One workload's outcome."""

    name: str
    rows: str
    status: str  # EQUAL, DIFFERS, STOPPED (pipeline), ORACLE (native replica), TIMEOUT, SKIPPED
    reason: str = ""  # SKIPPED: why; STOPPED/ORACLE/TIMEOUT: the cause
    detail: str = ""
    databases: list[str] = field(default_factory=list)
    tables: int = 0  # tables and views compared
    tables_equal: int = 0
    diffs: list[str] = field(default_factory=list)
    diff_causes: list[str] = field(default_factory=list)
    driver: str = ""  # how mariadb-test ended: ok, skipped by the file, failed at line N...
    lines_cut: int = 0
    seconds: float = 0.0


STOPS = ("STOPPED", "TIMEOUT", "ORACLE", "CRASHED", "ERROR")  # outcomes where nothing was compared
# Names and values that vary from file to file; short quoted values (a charset id, a type) stay.
_QUOTED = re.compile(r"(?<!\w)'[^']{25,}'(?!\w)|`[^`]*`|\"[^\"]*\"|0x[0-9a-f]+|\b\d{5,}\b"
                     r"|(?<=(?<!\w)')[^' ]*\.[^' ]*(?=')|(?<=\bon )[\w$]+\.[\w$]+", re.I)


def stop_cause(detail: str) -> str:
    """The cause of a stop: the program's `error:` line with names and numbers blanked."""
    lines = [line.strip() for line in detail.splitlines()]
    error = next((line for line in lines if "error:" in line.lower()), None) or next(
        (line for line in reversed(lines) if line), detail[:200])
    error = error.split("error:", 1)[-1].strip()
    error = re.sub(r" at offset \S+, transaction \S+:|; nothing of the transaction was applied.*"
                   r"|^offset \S+ \(transaction \S+\) cannot be applied: ", "", error)
    return _QUOTED.sub("_", error)[:160]


def oracle_cause(reason: str) -> str:
    """Why the native replica broke, first line, names blanked."""
    first = reason.splitlines()[0] if reason else ""
    if first.startswith("timed out"):  # as an earlier version said it
        return "the native replica was too slow (an UPDATE/DELETE of a table without a key?)"
    return _QUOTED.sub("_", re.sub(r"' on query\. Default database.*|\. Default database.*", "'", first))[:160]


def diff_cause(diff: str) -> str:
    """The kind of a difference (compare()'s first line without names), refined for SHOW CREATE texts."""
    head = diff.splitlines()[0]
    if m := re.match(r"table \S+: (SHOW CREATE TABLE differs|rows differ|columns differ|CHECKSUM TABLE differs)", head):
        kind = m.group(1)
        if kind == "SHOW CREATE TABLE differs":
            return "SHOW CREATE TABLE differs: " + _create_delta(diff)
        return kind
    if m := re.match(r"\S+: (\w+) .* exists on the (replica|follower) only", head):
        return f"{m.group(1)} on the {m.group(2)} only"
    if m := re.match(r"\S+: (\w+) \S+ differs", head):
        return f"{m.group(1)} differs"
    if head.startswith("database "):
        return re.sub(r"^database \S+: ", "database ", head).split("\n")[0]
    return head[:120]


def _create_delta(diff: str) -> str:
    lines = diff.splitlines()
    r = next((x.split("replica:", 1)[1] for x in lines if x.strip().startswith("replica:")), "")
    f = next((x.split("follower:", 1)[1] for x in lines if x.strip().startswith("follower:")), "")
    rw, fw = set(re.findall(r"[A-Za-z_]+=\S+|COLLATE \S+|CHARACTER SET \S+|DEFAULT \S+", r)), \
        set(re.findall(r"[A-Za-z_]+=\S+|COLLATE \S+|CHARACTER SET \S+|DEFAULT \S+", f))
    delta = sorted(rw ^ fw)
    return ", ".join(re.sub(r"\b\d+\b", "N", d) for d in delta[:3]) or "other"


def tables_named(db: str, diffs: list[str]) -> set[str]:
    """The tables and views of `db` that the differences name."""
    names = set()
    for d in diffs:
        head = d.splitlines()[0]
        m = re.match(rf"table {re.escape(db)}\.(.+?): ", head) or re.match(
            rf"{re.escape(db)}: (?:table|view) (.+?) (?:differs|exists on)", head)
        if m:
            names.add(m.group(1))
    return names


# ---------------------------------------------------------------------------
# The runner


class Corpus:
    """The differential harness plus what the corpus needs: mariadb-test's environment, leftovers undone."""

    def __init__(self, tmp: Path, rows: str, log: Callable[[str], None] = print, sync_timeout: float = SYNC_TIMEOUT,
                 managed: bool = False):
        self.tmp = tmp
        # `managed`: the consumer runs as a managed service's admin user (Differential(managed=True)), so its
        # rows take SQL whatever `rows` says; results say "managed" for the row path.
        self.managed = managed
        self.rows = "managed" if managed else rows
        self.sync_timeout = sync_timeout
        self.log = log
        self.diff = self._servers(tmp / "servers")
        self.vardir = tmp / "var"
        self.globals: dict[str, str] = {}
        self.accounts: set[tuple[str, str]] = set()

    def __enter__(self) -> Corpus:
        for attempt in range(1, 4):
            try:
                self.diff.__enter__()
                break
            except subprocess.CalledProcessError as e:  # a server slow to start on a loaded machine: again
                if attempt == 3:
                    raise
                self.log(f"starting the servers failed ({e.stderr.strip()[-200:] if e.stderr else e}); again")
                self.diff = self._servers(self.tmp / f"servers-{attempt}")
        try:
            for d in ("tmp", "log"):
                (self.vardir / d).mkdir(parents=True, exist_ok=True)
            # mtr links var/std_data to the suite's data files; files read them as $MYSQLTEST_VARDIR/std_data
            # or, relative to the server's datadir, as ../../std_data.
            for link in (self.vardir / "std_data", self.diff.leader.dir.parent / "std_data"):
                if not link.exists():
                    link.symlink_to(MTR / "std_data")
            self._prepare()
        except BaseException:
            self.diff.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.diff.__exit__(*exc)

    def _servers(self, tmp: Path) -> Differential:
        diff = Differential(tmp, rows="sql" if self.rows == "sql" else "auto", managed=self.managed)
        for server in (diff.leader, diff.replica, diff.follower):
            # A tmpdir of its own: the servers' temporary files are not in the shared /tmp, where the
            # machine's other users clean up.
            (server.dir / "tmp").mkdir(parents=True, exist_ok=True)
            server.args += f" --tmpdir={server.dir / 'tmp'}"
        # mtr lets the files read and write files (LOAD DATA INFILE, SELECT ... INTO OUTFILE)
        diff.leader.args += " --secure-file-priv="
        return diff

    # -- the servers, as mariadb-test-run prepares them

    def _prepare(self) -> None:
        d = self.diff
        # Time zone tables on every server (not logged: the servers load them each), as mtr's bootstrap does.
        tz = subprocess.run(["mariadb-tzinfo-to-sql", "--skip-write-binlog", "/usr/share/zoneinfo"],
                            capture_output=True, check=True).stdout
        for server in (d.leader, d.replica, d.follower):
            _client(server, tz, "mysql")
            server.execute(*MTR_GLOBALS)
        # Sessions take the globals when they open: the replica's applier and the consumer's must start again.
        d.reattach_replica()
        d.restart_pipeline()
        # The `test` database and mtr.add_suppression() (mtr's include/mtr_warnings.sql, which is mtr's own SQL
        # dialect, reduced to what tests call), logged: both copies get them.
        boot = ("CREATE DATABASE IF NOT EXISTS test;\nCREATE DATABASE IF NOT EXISTS mtr;\n"
                "CREATE TABLE mtr.test_suppressions (pattern VARCHAR(255));\n"
                "CREATE TABLE mtr.global_suppressions (pattern VARCHAR(255));\n"
                "CREATE DEFINER=root@localhost PROCEDURE mtr.add_suppression(pattern VARCHAR(255)) "
                "INSERT INTO mtr.test_suppressions (pattern) VALUES (pattern);\n")
        _client(d.leader, boot.encode())
        d.sync(self.sync_timeout)
        self.globals = self._global_variables()
        self.accounts = set(self._accounts())

    def _mysqltest(self, test: Path, db: str, timeout: float) -> subprocess.CompletedProcess:
        leader = self.diff.leader
        client = f"mariadb --no-defaults -uroot --host=127.0.0.1 --port={leader.port}"
        env = {**os.environ, "MYSQLTEST_VARDIR": str(self.vardir), "MYSQL_TMP_DIR": str(self.vardir / "tmp"),
               "MYSQL_TEST_DIR": str(MTR), "MASTER_MYPORT": str(leader.port), "MYSQL_TEST_LOGIN_FILE": "/dev/null",
               "MASTER_MYSOCK": str(leader.dir / "mysqld.sock"), "MYSQL": client,
               "MYSQL_DUMP": client.replace("mariadb ", "mariadb-dump ", 1),
               "MYSQL_BINLOG": "mariadb-binlog --no-defaults", "MYSQL_CHARSETSDIR": "/usr/share/mysql/charsets",
               "MYSQLD_DATADIR": str(leader.dir / "data"), "MYSQL_SHAREDIR": "/usr/share/mysql"}
        args = ["mariadb-test", "--no-defaults", f"--basedir={MTR}/", f"--suite-dir={MTR}/main/",
                f"--tmpdir={self.vardir / 'tmp'}", f"--logdir={self.vardir / 'log'}", "--host=127.0.0.1",
                f"--port={leader.port}", f"--socket={leader.dir / 'mysqld.sock'}", "--user=root",
                f"--database={db}", f"--test-file={test}", "--max-connect-retries=3", "--tail-lines=5"]
        try:
            return subprocess.run(args, cwd=MTR, env=env, capture_output=True, text=True, errors="replace",
                                  timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            return subprocess.CompletedProcess(args, -9, out, f"timed out after {timeout:g}s")

    def _global_variables(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.diff.leader.query("SHOW GLOBAL VARIABLES")}

    def _accounts(self) -> list[tuple[str, str]]:
        return [(u, h) for u, h in self.diff.leader.query("SELECT User, Host FROM mysql.user")]

    # -- between files: put the leader back as it was

    def _undo(self) -> list[str]:
        """Drop every database but the system ones (recreate `test`), drop new accounts, restore changed
        globals; what could not be undone."""
        leader, problems = self.diff.leader, []
        dbs = [d for (d,) in leader.query("SHOW DATABASES") if d not in SYSTEM_DBS]
        statements = [f"DROP DATABASE IF EXISTS {quote(d)}" for d in dbs] + ["CREATE DATABASE IF NOT EXISTS test"]
        for u, h in set(self._accounts()) - self.accounts:
            statements.append(f"DROP USER IF EXISTS {quote(u)}@{quote(h)}" if h else f"DROP ROLE IF EXISTS {quote(u)}")
        for sql in statements:
            try:
                leader.execute(sql)
            except pymysql.err.MySQLError as e:
                if e.args[0] != 1010 or not sql.startswith("DROP DATABASE"):
                    problems.append(f"{sql}: {e}")
                    continue
                # Files a test wrote into the database's directory (SELECT ... INTO OUTFILE 'name'):
                # the server does not drop a directory with files it does not know.
                folder = leader.dir / "data" / sql.rsplit("`", 2)[-2].replace("``", "`")
                shutil.rmtree(folder, ignore_errors=True)
                try:
                    leader.execute(sql)
                except pymysql.err.MySQLError as again:
                    problems.append(f"{sql}: {again}")
        now = self._global_variables()
        conn = leader.connect()
        try:
            with conn.cursor() as cur:
                for name, value in sorted(self.globals.items()):
                    if now.get(name) == value or _UNRESTORED.match(name):
                        continue
                    literal = value if re.fullmatch(r"-?\d+(\.\d+)?", value) else conn.escape(value)
                    try:
                        cur.execute(f"SET GLOBAL {name} = {literal}")
                    except pymysql.err.MySQLError as e:
                        problems.append(f"SET GLOBAL {name}: {e}")
        finally:
            conn.close()
        return problems

    def server_changes(self, uptime_before: int) -> str | None:
        """What a file did to the leader that makes its comparison meaningless (restart, binlog off/format)."""
        try:
            values = dict(self.diff.leader.query(
                "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                "WHERE VARIABLE_NAME = 'UPTIME' UNION ALL SELECT 'BINLOG_FORMAT', @@global.binlog_format "
                "UNION ALL SELECT 'LOG_BIN', @@global.log_bin"))
        except pymysql.err.MySQLError as e:
            return f"the leader does not answer ({e})"
        if int(values["UPTIME"]) < uptime_before:
            return "restarts the server (seen after the file)"
        if values["BINLOG_FORMAT"] != "ROW":
            return f"changes binlog_format (seen after the file: {values['BINLOG_FORMAT']})"
        if str(values["LOG_BIN"]) != "1":
            return "the binlog is off (seen after the file)"
        return None

    def _drop_strays(self) -> None:
        """Drop, unlogged, what a stopped pipeline left on the follower, or a re-attached replica on the replica:
        databases the leader no longer has (both copies have caught up with the leader or start after it)."""
        leader = set(self.diff.leader.user_databases())
        for server in (self.diff.replica, self.diff.follower):
            stray = set(server.user_databases()) - leader - SYSTEM_DBS
            # `test` is recreated empty on the leader: a copy that kept tables in it lost the DROP
            if server.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test'")[0][0]:
                stray.add("test")
            if stray:
                server.execute("SET sql_log_bin = 0", *[f"DROP DATABASE IF EXISTS {quote(d)}" for d in stray],
                               "CREATE DATABASE IF NOT EXISTS test")

    def revive(self) -> str | None:
        """Start again a server that died (the follower crashing on a statement the consumer sent), then a
        fresh pipeline; which server died and the signal its error log names, or None."""
        dead = []
        for server in (self.diff.leader, self.diff.replica, self.diff.follower):
            try:
                server.query("SELECT 1")
            except pymysql.err.MySQLError:
                log = (server.dir / "error.log").read_text(errors="replace")
                signals = re.findall(r"got (signal \d+)", log)
                dead.append(f"the {server.name.removeprefix('compat-')}'s server crashed"
                            + (f" ({signals[-1]})" if signals else ""))
                server.start()
                server.execute(*MTR_GLOBALS)  # a restart forgot them
        if not dead:
            return None
        self.diff.restart_pipeline()
        return "; ".join(dead)

    def _uptime(self) -> int:
        return int(self.diff.leader.query("SHOW GLOBAL STATUS LIKE 'Uptime'")[0][1])

    # -- one workload

    def run_mtr(self, name: str) -> FileResult:
        path = MTR / "main" / f"{name}.test"
        text = path.read_bytes().decode("latin-1")  # files are in several charsets: keep their bytes
        reason = skip_reason(text)
        if reason:
            return FileResult(f"mtr:{name}", self.rows, "SKIPPED", reason)
        body, cut = truncated(text)
        copy = self.tmp / "files" / f"{name}.test"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(body.encode("latin-1"))
        driver: list[str] = []

        def run(ctx: Context) -> None:
            result = self._mysqltest(copy, ctx.scenario.db, FILE_TIMEOUT)
            driver.append(_driver_outcome(result))

        result = self.run_workload(f"mtr:{name}", run, prefix="mt_" + re.sub(r"\W", "_", name))
        result.driver = driver[0] if driver else ""
        result.lines_cut = cut
        if result.driver.startswith("skipped by the file") and result.status == "EQUAL" and result.tables == 0:
            result.status, result.reason = "SKIPPED", result.driver
        return result

    def run_workload(self, name: str, fn: Callable[[Context], None], prefix: str) -> FileResult:
        """Run `fn` on the leader (in the scenario database `cmp_<prefix>`), then compare every database."""
        start = time.monotonic()
        uptime = self._uptime()
        def guarded(ctx: Context) -> None:
            try:
                fn(ctx)
            except (OSError, subprocess.SubprocessError, RuntimeError, pymysql.err.MySQLError) as e:
                raise ScenarioStop("ERROR", f"the workload failed on the leader: {e}") from e

        scenario = Scenario(prefix, name, (Call(guarded, name),), timeout=self.sync_timeout)
        crashed = None
        try:
            outcome = self.diff.run(scenario)
        except (RuntimeError, AssertionError, pymysql.err.MySQLError) as e:
            # Only a dead server makes the harness itself fail (it restarts the pipeline after a stop).
            crashed = self.revive() or f"the harness failed: {str(e)[:300]}"
            outcome = Outcome(scenario, "CRASHED", f"{crashed}\n{e}")
        result = FileResult(name, self.rows, "EQUAL")
        changed = self.server_changes(uptime)
        dbs = sorted({d for s in (self.diff.replica, self.diff.follower, self.diff.leader)
                      for d in s.user_databases()} - SYSTEM_DBS)
        result.databases = dbs
        if changed:
            result.status, result.reason = "SKIPPED", changed
            self.diff.restart_pipeline()
        elif outcome.status in ("PASS", "FAIL"):
            for db in dbs:
                # the replica's objects as the follower must hold them (trigger guards on the SQL path)
                r, f = snapshot(self.diff.replica, db, self.diff.documented), snapshot(self.diff.follower, db)
                diffs = compare(db, r, f)
                names = {k.split(" ", 1)[1] for k in {**r.objects, **f.objects} if k.startswith("table ")}
                result.tables += len(names)
                result.tables_equal += len(names - tables_named(db, diffs))
                result.diffs += diffs
            result.diff_causes = [diff_cause(d) for d in result.diffs]
            if result.diffs:
                result.status = "DIFFERS"
        else:
            result.status = outcome.status if outcome.status in ("STOPPED", "TIMEOUT", "ERROR", "CRASHED") else "ORACLE"
            result.reason = (stop_cause(outcome.detail) if outcome.status == "STOPPED" else crashed
                             or outcome.detail[:300])
            result.detail = outcome.detail[-3000:]
            # Refused: the tables the native replica has count as compared and not equal. (Not when the replica
            # itself broke or lags: nothing is compared, and its applier may hold the tables' locks.)
            for db in dbs if result.status != "ORACLE" else ():
                r = snapshot(self.diff.replica, db)
                result.tables += sum(1 for k in r.objects if k.startswith("table "))
        if outcome.status == "ORACLE" and "timed out" in outcome.detail:
            self.diff.reattach_replica()
            result.reason = "the native replica was too slow (an UPDATE/DELETE of a table without a key?)"
        problems = self._undo()
        try:
            self.diff.sync(self.sync_timeout)
        except ScenarioStop as stop:
            problems.append(f"the clean-up after the file: {stop.status}: {stop.detail[-600:]}")
            if stop.status == "ORACLE" and "timed out" in stop.detail:
                self.diff.reattach_replica()
            else:
                self.diff.restart_pipeline()
        self._drop_strays()
        if problems:
            result.detail = (result.detail + "\nleftovers: " + "; ".join(problems)).strip()
        result.seconds = round(time.monotonic() - start, 2)
        return result


def _client(server: Server, sql: bytes, db: str | None = None) -> None:
    """Run `sql` through the mariadb client (it knows DELIMITER) on `server`."""
    args = ["mariadb", "--no-defaults", "-uroot", "-h127.0.0.1", f"-P{server.port}", *([db] if db else [])]
    done = subprocess.run(args, input=sql, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"mariadb on {server.name} failed: {done.stderr.decode(errors='replace')[-500:]}")


def _driver_outcome(result: subprocess.CompletedProcess) -> str:
    out = (result.stdout or "") + (result.stderr or "")
    if result.returncode == 62:
        last = [line for line in out.splitlines() if line.strip()][-1:] or [""]
        return "skipped by the file: " + last[0].strip()[:120]
    if result.returncode == 0:
        return "ok"
    if result.returncode == -9:
        return "timed out"
    m = re.search(r"At line (\d+): (.*)", out)
    return f"failed at line {m.group(1)}: {m.group(2)[:160]}" if m else f"exit {result.returncode}: {out[-200:]}"


# ---------------------------------------------------------------------------
# The two written workloads: a dump restore, application sessions


def dump_workload(corpus: Corpus) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        leader, src = corpus.diff.leader, "cmp_excluded_dump_src"
        conn = leader.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SET sql_log_bin = 0")
                cur.execute(f"CREATE DATABASE {src}")
                cur.execute(f"USE {src}")
                for sql in _DUMP_SOURCE:
                    cur.execute(sql)
        finally:
            conn.close()
        base = ["--no-defaults", "-uroot", "-h127.0.0.1", f"-P{leader.port}"]
        dump = subprocess.run(["mariadb-dump", *base, "--routines", "--events", "--triggers", src],
                              capture_output=True, check=True).stdout
        subprocess.run(["mariadb", *base, ctx.scenario.db], input=dump, capture_output=True, check=True)
        leader.execute("SET sql_log_bin = 0", f"DROP DATABASE {src}")
    return run


_DUMP_SOURCE = (
    "CREATE TABLE customer (id INT PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4 NOT NULL, "
    "born DATE, balance DECIMAL(12,2) NOT NULL DEFAULT 0, note TEXT, UNIQUE KEY (name)) ENGINE=InnoDB",
    "CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer INT NOT NULL, at DATETIME(3) NOT NULL, "
    "amount DECIMAL(10,2) NOT NULL, payload BLOB, FOREIGN KEY (customer) REFERENCES customer (id) "
    "ON DELETE CASCADE) ENGINE=InnoDB",
    "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(20), order_id INT, at TIMESTAMP "
    "NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB",
    "INSERT INTO customer SELECT seq, CONCAT('customer ', seq, ' é'), DATE('1950-01-01') + INTERVAL seq DAY, "
    "seq * 1.25, IF(seq % 7 = 0, NULL, REPEAT('x', seq % 50)) FROM seq_1_to_2000",
    "INSERT INTO orders (customer, at, amount, payload) SELECT 1 + seq % 2000, "
    "TIMESTAMP('2024-01-01') + INTERVAL seq SECOND, seq % 997 + 0.5, UNHEX(MD5(seq)) FROM seq_1_to_12000",
    "CREATE TRIGGER orders_ai AFTER INSERT ON orders FOR EACH ROW "
    "INSERT INTO audit (what, order_id, at) VALUES ('insert', NEW.id, '2024-01-01 00:00:00')",
    "CREATE VIEW big_orders AS SELECT c.name, o.amount FROM orders o JOIN customer c "
    "ON c.id = o.customer WHERE o.amount > 900",
    "CREATE FUNCTION vat(x DECIMAL(10,2)) RETURNS DECIMAL(10,2) DETERMINISTIC RETURN x * 1.2",
    "CREATE PROCEDURE bump(IN c INT) MODIFIES SQL DATA UPDATE customer SET balance = balance + 1 "
    "WHERE id = c",
    "CREATE EVENT nightly ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' DISABLE "
    "DO DELETE FROM audit WHERE at < '2000-01-01'",
)


def sessions_workload(corpus: Corpus) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        db, port = ctx.scenario.db, corpus.diff.leader.port
        sessions = [
            ("utf8mb4", "SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci", "SET time_zone = 'Europe/Paris'"),
            ("latin1", "SET NAMES latin1", "SET time_zone = '+05:30'"),
            ("utf8mb4", "SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci", "SET time_zone = 'America/New_York'"),
            ("latin1", "SET NAMES latin1", "SET time_zone = '-08:00'"),
        ]
        conns = []
        try:
            for charset, names, tz in sessions:
                conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=db,
                                       autocommit=True, charset=charset)
                with conn.cursor() as cur:
                    cur.execute(names)
                    cur.execute(tz)
                conns.append(conn)
            for i, conn in enumerate(conns):
                with conn.cursor() as cur:
                    for sql in _SESSION_SQL:
                        cur.execute(sql.format(i=i))
        finally:
            for conn in conns:
                conn.close()
    return run


_SESSION_SQL = (
    "CREATE TABLE s{i} (id INT PRIMARY KEY, name VARCHAR(30), ts TIMESTAMP NULL, dt DATETIME, "
    "d DATE DEFAULT (CURRENT_DATE), t VARCHAR(10) DEFAULT 'straße')",
    "INSERT INTO s{i} (id, name, ts, dt) VALUES (1, 'Müller', '2024-03-31 01:30:00', '2024-03-31 02:30:00'), "
    "(2, 'Ærø', '2024-10-27 02:30:00', NOW()), (3, 'abc', FROM_UNIXTIME(1700000000), '2000-01-01')",
    "UPDATE s{i} SET name = CONCAT(name, '-é'), ts = ts + INTERVAL 1 DAY WHERE id < 3",
    "ALTER TABLE s{i} ADD COLUMN c VARCHAR(20) DEFAULT 'é' AFTER name, ADD KEY (name)",
    "INSERT INTO s{i} (id, name, ts, dt) SELECT id + 10, UPPER(name), ts, CONVERT_TZ(dt, '+00:00', @@time_zone) "
    "FROM s{i}",
    "CREATE VIEW v{i} AS SELECT id, name, UNIX_TIMESTAMP(ts) AS u FROM s{i} WHERE name > 'a'",
    "CREATE TRIGGER tr{i} BEFORE INSERT ON s{i} FOR EACH ROW SET NEW.name = CONCAT(NEW.name, '·')",
    "INSERT INTO s{i} (id, name, ts, dt) VALUES (100, 'ñ', '2024-06-01 12:00:00', '2024-06-01 12:00:00')",
    "DELETE FROM s{i} WHERE id = 2",
)


# ---------------------------------------------------------------------------
# A real client: sysbench's OLTP scripts, several threads at once


@dataclass(frozen=True)
class SysbenchStep:
    """One sysbench command: a script of /usr/share/sysbench and what bounds it."""

    script: str
    command: str  # prepare or run
    events: int = 0  # run: transactions (0: --time bounds it alone)
    options: tuple[str, ...] = ()
    engine: str = "innodb"  # another engine's tables are in a database of their own, `<db>_<engine>`


SYSBENCH_TABLES, SYSBENCH_ROWS, SYSBENCH_THREADS = 4, 5000, 4
SYSBENCH_TIME = 60  # seconds a run step may take at most (on a loaded machine it then runs fewer transactions)
SYSBENCH_STEPS = (
    # CREATE TABLE, multi-row INSERTs of 5,000 rows (one thread per table), then CREATE INDEX k_<n>
    SysbenchStep("oltp_write_only", "prepare"),
    # BEGIN; UPDATE of the indexed k; UPDATE of the non-indexed c; DELETE of a row and INSERT of it again; COMMIT
    # (server-side prepared statements; deadlocks are rolled back and retried, as sysbench does)
    SysbenchStep("oltp_write_only", "run", 2000),
    # the same writes between point and range SELECTs (the read/write mix)
    SysbenchStep("oltp_read_write", "run", 500),
    # autocommit UPDATEs of the indexed k, then of the non-indexed c
    SysbenchStep("oltp_update_index", "run", 1000),
    SysbenchStep("oltp_update_non_index", "run", 1000),
    # autocommit INSERTs of new rows (AUTO_INCREMENT ids)
    SysbenchStep("oltp_insert", "run", 1000),
    # autocommit DELETEs by id (some find the row gone already)
    SysbenchStep("oltp_delete", "run", 1000),
    # The same on Aria, non-transactional (the leader logs each statement as a transaction of its own, the consumer
    # applies it alone). Without rollback two threads can DELETE and re-INSERT the same id: sysbench counts the
    # second INSERT's duplicate key as an ignored error and goes on.
    SysbenchStep("oltp_write_only", "prepare", engine="aria"),
    SysbenchStep("oltp_write_only", "run", 1000, ("--mysql-ignore-errors=1062",), engine="aria"),
    SysbenchStep("oltp_insert", "run", 500, engine="aria"),
    SysbenchStep("oltp_delete", "run", 500, engine="aria"),
)


@dataclass
class SysbenchTally:
    """What the sysbench steps did on the leader: sysbench's own counts, and the rows it wrote: the prepares'
    rows, and the leader's Handler_write/update/delete during the runs (they count a deadlock's rolled-back rows
    too; not during the prepares, where they also count the rows an Aria CREATE INDEX copies)."""

    transactions: int = 0
    queries: int = 0
    ignored_errors: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        return (f"sysbench: {self.transactions} transactions, {self.queries} queries, {self.ignored_errors} "
                f"ignored errors in {self.seconds:.1f}s; rows inserted {self.inserted}, updated {self.updated}, "
                f"deleted {self.deleted}")


def _sysbench_count(out: str, label: str) -> int:
    m = re.search(rf"^\s*{label}:\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def sysbench_workload(corpus: Corpus, tally: SysbenchTally) -> Callable[[Context], None]:
    """sysbench's OLTP scripts (SYSBENCH_STEPS) on the leader, in the scenario's database, SYSBENCH_THREADS
    threads at once; what they did is added to `tally`."""
    def handler_rows() -> dict[str, int]:  # MariaDB 10.11 has no Innodb_rows_*; Handler_tmp_* are apart
        return {name.lower(): int(value) for name, value in corpus.diff.leader.query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_write', 'Handler_update', 'Handler_delete')")}

    def run(ctx: Context) -> None:
        leader = corpus.diff.leader
        base = ["--mysql-host=127.0.0.1", f"--mysql-port={leader.port}", "--mysql-user=root",
                f"--tables={SYSBENCH_TABLES}", f"--table-size={SYSBENCH_ROWS}", f"--threads={SYSBENCH_THREADS}",
                "--rand-seed=1"]
        start = time.monotonic()
        for step in SYSBENCH_STEPS:
            db = ctx.scenario.db if step.engine == "innodb" else f"{ctx.scenario.db}_{step.engine}"
            if step.command == "prepare" and db != ctx.scenario.db:
                leader.execute(f"CREATE DATABASE IF NOT EXISTS {quote(db)}")
            bound = [f"--events={step.events}", f"--time={SYSBENCH_TIME}"] if step.command == "run" else []
            args = ["sysbench", step.script, *base, f"--mysql-db={db}", f"--mysql-storage-engine={step.engine}",
                    *bound, *step.options, step.command]
            before = handler_rows()
            done = subprocess.run(args, capture_output=True, text=True, errors="replace",
                                  timeout=SYSBENCH_TIME * 3)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(args[:2])} {step.command} exited {done.returncode}: "
                                   f"{(done.stderr or done.stdout)[-500:]}")
            tally.transactions += _sysbench_count(done.stdout, "transactions")
            tally.queries += _sysbench_count(done.stdout, "total")
            tally.ignored_errors += _sysbench_count(done.stdout, "ignored errors")
            if step.command == "prepare":
                tally.inserted += SYSBENCH_TABLES * SYSBENCH_ROWS
                continue
            after = handler_rows()
            tally.inserted += after["handler_write"] - before["handler_write"]
            tally.updated += after["handler_update"] - before["handler_update"]
            tally.deleted += after["handler_delete"] - before["handler_delete"]
        tally.seconds += time.monotonic() - start
    return run


def run_sysbench(corpus: Corpus) -> FileResult:
    """The sysbench workload, compared; its figures in the result's `driver`."""
    tally = SysbenchTally()
    result = corpus.run_workload("sysbench", sysbench_workload(corpus, tally), "sysbench")
    result.driver = tally.line()
    return result


# ---------------------------------------------------------------------------
# Selection, summary, command line


def mtr_names(files: str | None, shard: tuple[int, int] | None) -> list[str]:
    """The main/*.test names to run: from `files` (a file of names, one a line, or a comma list), else all; then
    this shard's share (every n-th, starting at i-1)."""
    if files:
        if "," in files or not Path(files).is_file():
            source = files.split(",")
        else:
            source = Path(files).read_text().split()
        names = [n.strip().removeprefix("main/").removesuffix(".test") for n in source if n.strip()]
    else:
        names = sorted(p.stem for p in (MTR / "main").glob("*.test"))
    if shard:
        i, n = shard
        names = names[i - 1::n]
    return names


def summarize(results: Iterable[FileResult]) -> dict:
    results = list(results)
    for r in results:  # the cause as this version names it (a run's JSON keeps the whole detail)
        if r.status == "STOPPED" and r.detail:
            r.reason = stop_cause(r.detail)
        elif r.status == "ORACLE":
            r.reason, r.tables = oracle_cause(r.reason), 0  # nothing compared (an earlier version counted them)
    runs = [r for r in results if r.status != "SKIPPED"]
    summary: dict = {
        "files": len(results),
        "run": len(runs),
        "skipped": dict(Counter(_reason_key(r.reason) for r in results if r.status == "SKIPPED").most_common()),
        "status": dict(Counter(r.status for r in runs).most_common()),
        "tables_compared": sum(r.tables for r in runs),
        "tables_equal": sum(r.tables_equal for r in runs),
        "stops": dict(Counter(f"{r.status}: {r.reason}" for r in runs
                              if r.status in STOPS).most_common()),
        "differences": dict(Counter(c for r in runs for c in r.diff_causes).most_common()),
        "seconds_per_file": round(sum(r.seconds for r in runs) / len(runs), 2) if runs else 0,
        "refusals": [{"file": r.name, "rows": r.rows, "tables": r.tables, "reason": r.reason}
                     for r in runs if r.status in STOPS],
    }
    return summary


def _reason_key(reason: str) -> str:
    if reason.startswith("skipped by the file"):
        return "skips itself (mariadb-test: " + re.sub(r"[:(].*", "", reason.split(": ", 1)[-1]).strip()[:60] + ")"
    return re.sub(r" \(in .*\)$", "", reason)


def table(summary: dict) -> str:
    rows = [("files", summary["files"]), ("run", summary["run"]),
            *((f"skipped: {k}", v) for k, v in summary["skipped"].items()),
            *((f"outcome: {k}", v) for k, v in summary["status"].items()),
            ("tables compared", summary["tables_compared"]), ("tables equal", summary["tables_equal"]),
            *((f"stop: {k}", v) for k, v in summary["stops"].items()),
            *((f"difference: {k}", v) for k, v in summary["differences"].items()),
            ("seconds per file run", summary["seconds_per_file"])]
    out = ["| figure | count |", "|---|---|"] + [f"| {k.replace('|', '/')} | {v} |" for k, v in rows]
    if summary["refusals"]:
        out += ["", "| refused | rows | tables | reason |", "|---|---|---|---|"]
        out += [f"| {r['file']} | {r['rows']} | {r['tables']} | {r['reason'].replace('|', '/')} |"
                for r in summary["refusals"]]
    return "\n".join(out)


def load(paths: Iterable[str]) -> list[FileResult]:
    """The results in --out files; a workload run again (same row path) counts once, as its last run."""
    out: dict[tuple[str, str], FileResult] = {}
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if line.strip():
                result = FileResult(**json.loads(line))
                if ":" not in result.name and result.name not in ("dump", "sessions", "sysbench"):
                    result.name = "mtr:" + result.name  # written by an earlier version
                out.pop((result.name, result.rows), None)
                out[result.name, result.rows] = result
    return list(out.values())


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"--shard takes i/n with 1 <= i <= n, not {text!r}")
    return int(m.group(1)), int(m.group(2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", choices=("binlog", "sql"), default="binlog", help="the consumer's row path")
    ap.add_argument("--managed", action="store_true",
                    help="the consumer runs as a managed service's admin user (no SUPER, BINLOG REPLAY: rows as "
                         "SQL); results are labelled row path 'managed'")
    ap.add_argument("--files", help="main/*.test names to run: a file with one name a line, or name,name,...")
    ap.add_argument("--shard", type=_shard, help="i/n: run every n-th file, starting at the i-th")
    ap.add_argument("--workloads", default="mtr,dump,sessions,sysbench",
                    help="which of mtr, dump, sessions, sysbench (default: all)")
    ap.add_argument("--out", help="append one JSON line per workload to this file; what it holds already "
                                  "(same --rows) is not run again")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON, not as a table")
    ap.add_argument("--report", nargs="*", metavar="JSONL", help="only summarize these --out files")
    ap.add_argument("--keep", action="store_true", help="keep the servers' directory (printed)")
    ap.add_argument("--sync-timeout", type=float, default=SYNC_TIMEOUT, metavar="SECONDS",
                    help="how long to wait for each copy to catch up (a loaded machine, a large file)")
    args = ap.parse_args(argv)
    # Stopped by kill: leave through the finally blocks, which stop the servers and the pipeline.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.report is not None:
        results = load(args.report)
    else:
        tools = ["mariadb-test", "mariadb-dump", "mariadb-tzinfo-to-sql"]
        if "sysbench" in {w.strip() for w in args.workloads.split(",")}:
            tools.append("sysbench")
        for tool in tools:
            if not shutil.which(tool):
                print(f"error: {tool} is not installed; run scripts/setup.sh (it installs mariadb-test and sysbench)",
                      file=sys.stderr)
                return 2
        results = run(args)
    summary = summarize(results)
    print(json.dumps(summary, indent=1) if args.json else table(summary))
    return 0


def run(args: argparse.Namespace) -> list[FileResult]:
    workloads = {w.strip() for w in args.workloads.split(",")}
    names = mtr_names(args.files, args.shard) if "mtr" in workloads else []
    unknown = workloads - {"mtr", "dump", "sessions", "sysbench"}
    if unknown:
        raise SystemExit(f"error: unknown workload {', '.join(sorted(unknown))}; use mtr, dump, sessions, sysbench")
    label = "managed" if args.managed else args.rows
    # (a file on which the harness itself failed is run again)
    done = ({r.name for r in load([args.out]) if r.rows == label and r.status != "ERROR"}
            if args.out and Path(args.out).exists() else set())
    workloads -= done
    names = [n for n in names if f"mtr:{n}" not in done and n not in done]
    if not names and not workloads & {"dump", "sessions", "sysbench"}:
        return []
    tmp = Path(tempfile.mkdtemp(prefix=f"corpus-{label}-"))
    results: list[FileResult] = []
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 (appended to as each workload ends)

    def record(result: FileResult) -> None:
        results.append(result)
        print(f"{time.strftime('%H:%M:%S')} {result.name} [{result.rows}] {result.status} {result.reason[:100]} "
              f"tables {result.tables_equal}/{result.tables} {result.seconds:.1f}s {result.driver[:80]}",
              file=sys.stderr, flush=True)
        if out:
            out.write(json.dumps(asdict(result)) + "\n")
            out.flush()

    try:
        with Corpus(tmp, args.rows, managed=args.managed, sync_timeout=args.sync_timeout) as corpus:
            if "dump" in workloads:
                record(corpus.run_workload("dump", dump_workload(corpus), "dump"))
            if "sessions" in workloads:
                record(corpus.run_workload("sessions", sessions_workload(corpus), "sessions"))
            if "sysbench" in workloads:
                record(run_sysbench(corpus))
            failing: list[str] = []  # the files the harness failed on in a row, with the same error
            for name in names:
                try:
                    record(corpus.run_mtr(name))
                    failing = []
                except (pymysql.err.MySQLError, RuntimeError, AssertionError, OSError) as e:
                    # the harness itself failed on this file (a query of the comparison...): count it, go on
                    died = corpus.revive()
                    reason = f"the harness failed: {e}"[:300]
                    record(FileResult(f"mtr:{name}", label, "ERROR", reason, detail=died or ""))
                    same = results[-2].reason == reason if failing and len(results) > 1 else False
                    failing = [*failing, name] if same else [name]
                    if len(failing) >= HARNESS_FAILURES_IN_A_ROW:
                        # a file left the servers in a state every later comparison fails on (a damaged system
                        # table): counting each later file as an ERROR would hide the corpus
                        raise SystemExit(f"error: the harness failed on {len(failing)} files in a row ({reason}), "
                                         f"from {failing[0]} on: a file before it left the servers damaged; add "
                                         "its cause to SKIP_PATTERNS, then run again with the same --out (files "
                                         "the harness failed on are run again)") from None
    finally:
        if out:
            out.close()
        if args.keep:
            print(f"servers' directory: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
