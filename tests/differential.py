"""The differential harness: native MariaDB replication is the oracle for the CDC pipeline.

One leader; a native replica of it (`CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos`);
our follower, fed by the real `cdc-producer` -> embedded topic -> `cdc-consumer` CLIs.
Replica and follower run with `event_scheduler=ON`, as production servers do (so does the
leader: its scheduled events write rows). A `Scenario` runs its SQL on the leader in its own
database(s), then the harness waits until both the replica and the follower have a marker
written after the scenario (deadline, and stops of the consumer/producer/replica are failures),
and compares replica and follower object by object, rows byte for byte (`snapshot`, `compare`).

Cost: three servers and one pipeline for a whole test module. A scenario whose consumer or
producer stopped (or did not catch up in time) leaves that pipeline behind at its event: the
harness then starts a *fresh* pipeline (new topic, streaming from the leader's current
position) for the next scenario. Scenarios use distinct databases, so the next one does not
depend on what the broken one left on the follower. A replica that stopped is re-pointed at
the leader's current position the same way (and the scenario reports that the oracle broke).

How a test uses it (tests/test_compat_matrix.py):

    @pytest.fixture(scope="module")
    def compat(tmp_path_factory):
        with Differential(tmp_path_factory.mktemp("compat")) as harness:
            yield harness

    def test_it(compat):
        outcome = compat.run(Scenario("my_case", "what it shows", ("CREATE TABLE t (...)", "INSERT ...")))
        assert outcome.ok, outcome.report()

The follower's innodb_lock_wait_timeout is 10 s (not 50) so that a consumer blocked on a lock
fails within a scenario's deadline; the error it reports is the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Self

import pymysql
from harness import Cli, Server, quote, wait_for

from cdc_consumer.definitions import guard_trigger

LEADER_ARGS = "--event-scheduler=ON"
REPLICA_ARGS = "--event-scheduler=ON"
FOLLOWER_ARGS = "--event-scheduler=ON --innodb-lock-wait-timeout=10"
MARKER_DB = "cdc_compat_marker"
EXCLUDED_DBS = "cmp_excluded_*"  # the pipeline's [filters] exclude_dbs
DEFAULT_TIMEOUT = 60.0
# The consumer's account on a managed follower (Differential(managed=True)): what Amazon RDS / Azure /
# Cloud SQL give their admin user, less what no managed service grants (SUPER, SET USER, BINLOG REPLAY).
MANAGED_USER = ("cdc_managed", "managed-pw")
MANAGED_ACCOUNT = f"'{MANAGED_USER[0]}'@'%'"
MANAGED_GRANTS = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, RELOAD, PROCESS, REFERENCES, INDEX, ALTER, "
                  "SHOW DATABASES, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, REPLICATION SLAVE, "
                  "BINLOG MONITOR, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, CREATE USER, EVENT, "
                  "TRIGGER, DELETE HISTORY")
PRODUCER_SERVER_ID = 5402
MAX_ROW_DIFFS = 8  # rows shown per table in a diff


# ---------------------------------------------------------------------------
# Scenarios


@dataclass(frozen=True)
class Sql:
    """One statement on one leader session (sessions are separate connections, opened on first use)."""

    sql: str | bytes
    session: str = "a"
    expect_error: int | None = None  # the leader must fail it with this error code (and log what it did)


@dataclass(frozen=True)
class Wait:
    """Poll the leader (session-less) until `sql` returns a first column that is truthy."""

    sql: str
    what: str
    timeout: float = 30.0


@dataclass(frozen=True)
class Call:
    """Arbitrary preparation (e.g. a file for LOAD DATA): fn(context) -> None."""

    fn: Callable[[Context], None]
    what: str


@dataclass(frozen=True)
class Close:
    """Disconnect a session (e.g. to leave an XA transaction prepared and detached)."""

    session: str


@dataclass(frozen=True)
class WaitFollower:
    """Poll the follower until `sql` returns a truthy first column (the pipeline got that far)."""

    sql: str
    what: str
    timeout: float = 30.0


@dataclass(frozen=True)
class RestartProducer:
    """Stop cdc-producer (SIGTERM) and start it again on the same topic: it resumes from the topic's tail."""


@dataclass(frozen=True)
class CopyAgain:
    """Stop cdc-producer and start it again with `--snapshot` of `tables` ("{db}.t") and `[snapshot] method =
    "consistent"`: each table is copied again by DROP TABLE + CREATE TABLE + its rows on the follower, then the
    binlog follows from where the topic ended."""

    tables: tuple[str, ...]


@dataclass(frozen=True)
class NewPipeline:
    """Replace the pipeline by a fresh one (new topic) that starts at the leader's current position."""


Step = str | Sql | Wait | Call | Close | WaitFollower | RestartProducer | CopyAgain | NewPipeline


@dataclass(frozen=True)
class Scenario:
    """One feature: SQL run on the leader, then replica and follower must be equal.

    `steps`: plain strings run on session "a"; `{db}` in SQL is the scenario's database,
    `{tmp}` a directory the servers can read. `databases`: extra databases the scenario
    writes (compared too; `{db}` allowed). `session_charsets`: the connection charset of a
    session (the leader logs statements in it). `follower_setup`: statements run on the
    follower only before the scenario (not logged). `excluded`: databases the scenario writes
    that the pipeline's filters exclude (EXCLUDED_DBS): they must not reach the follower.
    `refusal`: the scenario must be refused loudly: the consumer or producer stops with this
    fragment in its stderr. `sql_refusal`: the same, only when rows are applied as SQL (`[replay]
    rows = "sql"`, the harness's `rows`): what the SQL path cannot reproduce. `native_stops`: the
    native replica is expected to stop on it too (its error is then part of the outcome, not a
    broken oracle). `managed_refusal`: the refusal expected from a managed follower's user
    (Differential(managed=True)), instead of the others ("": none, it applies the scenario). `sql_differs`: on the SQL path the follower differs from the native replica,
    knowingly (docs/compatibility.md): the difference must be exactly this one (every difference is a
    row whose changed values read exactly so, `documented_only`). `secrets`: strings (passwords) that must appear neither on the topic nor in what the
    programs print.
    """

    id: str
    description: str
    steps: tuple[Step, ...]
    source: str = "17"  # the issue that asks for it
    databases: tuple[str, ...] = ()
    session_charsets: tuple[tuple[str, str], ...] = ()
    follower_setup: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    compare_accounts: bool = False  # accounts named '{db}%' are compared too
    refusal: str | None = None
    sql_refusal: str | None = None
    sql_differs: str | None = None
    managed_refusal: str | None = None
    native_stops: bool = False
    secrets: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT

    def refusal_for(self, rows: str, managed: bool = False) -> str | None:
        """The fragment the scenario must be refused with when rows are applied by `rows` ("auto" or "sql"),
        by a managed follower's user or not."""
        if managed and self.managed_refusal is not None:
            return self.managed_refusal or None  # "": the managed user applies what the SQL path refuses
        return self.refusal or (self.sql_refusal if rows == "sql" else None)

    @property
    def db(self) -> str:
        return "cmp_" + self.id

    def all_databases(self) -> list[str]:
        return [self.db] + [d.format(db=self.db) for d in self.databases]


@dataclass
class Context:
    scenario: Scenario
    tmp: Path
    leader: Server
    copies: tuple[Server, ...] = ()  # the native replica and the follower


@dataclass
class Outcome:
    """What a scenario came to: ok, or a failure with its readable explanation."""

    scenario: Scenario
    status: str  # PASS, FAIL (diff), STOPPED (consumer/producer exited), TIMEOUT, ORACLE (replica broke), ERROR
    detail: str = ""
    seconds: float = 0.0
    diffs: list[str] = field(default_factory=list)  # FAIL: the differences compare() found

    @property
    def ok(self) -> bool:
        return self.status == "PASS"

    def report(self) -> str:
        return f"scenario {self.scenario.id} ({self.scenario.description}): {self.status}\n{self.detail}"

    def as_dict(self) -> dict:
        return {"id": self.scenario.id, "source": self.scenario.source, "description": self.scenario.description,
                "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 2)}


class ScenarioStop(Exception):
    """The scenario cannot go on: status and detail for its Outcome."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


# ---------------------------------------------------------------------------
# Snapshots of a database and their comparison (pure once taken)


@dataclass
class TableData:
    create: str
    checksum: object
    columns: list[str]
    key: list[int]  # indexes into columns of the primary key (for readable diffs)
    rows: list[tuple]


@dataclass
class DbSnapshot:
    """Everything native replication carries for one database, as comparable values."""

    exists: bool
    create: str = ""
    objects: dict[str, str] = field(default_factory=dict)  # "table t" -> its type, "trigger x" -> definition...
    tables: dict[str, TableData] = field(default_factory=dict)


_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")


def _connect(server: Server, db: str | None = None) -> pymysql.Connection:
    conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", password="", database=db,
                           autocommit=True, charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP values and SHOW CREATE defaults alike
    return conn


def _dict_rows(cur) -> list[dict]:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


@dataclass(frozen=True)
class Documented:
    """What docs/compatibility.md says a follower's stored objects hold where a native replica's differ:
    with `guard`, each trigger's body is wrapped in `IF @cdc_consumer IS NULL THEN <body>; END IF`
    ([replay] triggers = "guarded"); with `definer` (`user`@`host`), views, triggers, events and
    routines have that definer (user@host; [replay] definer = "consumer"). `expected(replica)` is what the
    follower must then hold exactly: every other difference is a failure."""

    guard: bool = False
    definer: str | None = None

    def trigger(self, statement: str) -> str:
        statement = self.routine(statement)
        if self.guard:  # the one rewriting docs/compatibility.md documents (unit-tested in test_definitions.py)
            guarded = guard_trigger(statement)
            assert guarded is not None, f"not a trigger the consumer guards: {statement!r}"
            statement = guarded
        return statement

    def routine(self, statement: str) -> str:
        """A view's, routine's or trigger's CREATE as SHOW CREATE shows it (`x`@`y`, or "x"@"y" under
        ANSI_QUOTES), with the documented definer."""
        if not self.definer:
            return statement
        name, host = self.definer.split("@")
        return _DEFINER.sub(lambda m: f"DEFINER={m[1]}{name}{m[1]}@{m[1]}{host}{m[1]}", statement, count=1)

    def event_definer(self, definer: str) -> str:
        return self.definer or definer


_DEFINER = re.compile(r'DEFINER=([`"])(?:(?!\1).|\1\1)*\1@\1(?:(?!\1).|\1\1)*\1')


def snapshot(server: Server, db: str, documented: Documented | None = None) -> DbSnapshot:
    """The database `db` of `server`: schema objects and every row (as bytes), see compare().

    `documented`: the objects as the follower must hold them (given for the native replica's snapshot)."""
    doc = documented or Documented()
    conn = _connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (db,))
            if not cur.fetchone()[0]:
                return DbSnapshot(False)
            snap = DbSnapshot(True)
            cur.execute(f"SHOW CREATE DATABASE {quote(db)}")
            snap.create = cur.fetchone()[1]
            cur.execute(f"SHOW FULL TABLES FROM {quote(db)}")
            kinds = {name: kind for name, kind in cur.fetchall()}
            cur.execute("SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
            versioned = {name for name, kind in cur.fetchall() if kind == "SYSTEM VERSIONED"}
            for name, kind in sorted(kinds.items()):
                snap.objects[f"table {name}"] = kind
                if kind == "VIEW":
                    cur.execute(f"SHOW CREATE VIEW {quote(db)}.{quote(name)}")
                    create_view, *rest = cur.fetchone()[1:]
                    snap.objects[f"view {name}"] = " | ".join([doc.routine(str(create_view))] + [str(v) for v in rest])
                else:
                    try:
                        snap.tables[name] = _table_data(cur, db, name, name in versioned)
                    except pymysql.err.MySQLError as e:
                        # A table the server cannot open (a MERGE table over a missing child, MariaDB's merge
                        # test): compared by the error each side gives, and the harness goes on to drop it.
                        snap.tables[name] = TableData(f"unreadable: error {e.args[0]}", None, [], [], [])
            cur.execute("SELECT TRIGGER_NAME, ACTION_ORDER FROM information_schema.TRIGGERS "
                        "WHERE TRIGGER_SCHEMA = %s", (db,))
            for name, order in cur.fetchall():
                cur.execute(f"SHOW CREATE TRIGGER {quote(db)}.{quote(name)}")
                row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
                row.pop("Created", None)  # the time it was created on that server
                row["SQL Original Statement"] = doc.trigger(str(row["SQL Original Statement"]))
                snap.objects[f"trigger {name}"] = f"order {order} | " + " | ".join(f"{k}={v}" for k, v in row.items())
            cur.execute(
                "SELECT EVENT_NAME, DEFINER, TIME_ZONE, EVENT_BODY, EVENT_DEFINITION, EVENT_TYPE, EXECUTE_AT, "
                "INTERVAL_VALUE, INTERVAL_FIELD, SQL_MODE, STARTS, ENDS, STATUS, ON_COMPLETION, EVENT_COMMENT, "
                "CHARACTER_SET_CLIENT, COLLATION_CONNECTION, DATABASE_COLLATION "
                "FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s", (db,))
            for row in _dict_rows(cur):
                row["DEFINER"] = doc.event_definer(str(row["DEFINER"]))
                snap.objects[f"event {row['EVENT_NAME']}"] = " | ".join(f"{k}={v}" for k, v in row.items())
            cur.execute("SELECT ROUTINE_TYPE, ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s",
                        (db,))
            for kind, name in cur.fetchall():
                try:
                    cur.execute(f"SHOW CREATE {kind} {quote(db)}.{quote(name)}")
                except pymysql.err.MySQLError as e:
                    # A body the server cannot parse (MariaDB's errors.test writes one into mysql.proc):
                    # compared by the error each side gives, and the harness goes on to drop it.
                    snap.objects[f"{kind.lower()} {name}"] = f"SHOW CREATE fails: {e.args[0]}"
                    continue
                row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
                create = f"Create {kind.title()}"
                if row.get(create) is not None:
                    row[create] = doc.routine(str(row[create]))
                snap.objects[f"{kind.lower()} {name}"] = " | ".join(f"{k}={v}" for k, v in row.items())
        return snap
    finally:
        conn.close()


def _table_data(cur, db: str, name: str, versioned: bool) -> TableData:
    table = f"{quote(db)}.{quote(name)}"
    cur.execute(f"SHOW CREATE TABLE {table}")
    create = _AUTO_INCREMENT.sub("", cur.fetchone()[1])
    cur.execute(f"CHECKSUM TABLE {table} EXTENDED")
    checksum = cur.fetchone()[1]
    # information_schema lists INVISIBLE columns too; the implicit period columns of a
    # system-versioned table are not listed, but can be selected by name.
    cur.execute("SELECT COLUMN_NAME, COLUMN_KEY, EXTRA FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (db, name))
    described = cur.fetchall()
    columns = [c for c, _, _ in described]
    # Explicit period columns are listed (EXTRA says STORED GENERATED on 10.11); SHOW CREATE TABLE names
    # them in PERIOD FOR SYSTEM_TIME. Without that clause the table has the implicit ROW_START/ROW_END.
    if versioned and "PERIOD FOR SYSTEM_TIME" not in create.upper():
        columns += ["ROW_START", "ROW_END"]
    cur.execute("SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION", (db, name))
    key = [columns.index(c) for (c,) in cur.fetchall() if c in columns]
    # CAST(... AS BINARY): every value as the bytes the server holds (text in its own
    # charset, not converted to the connection's), numbers and dates in their text form.
    select = ", ".join(f"CAST({quote(c)} AS BINARY)" for c in columns)
    cur.execute(f"SELECT {select} FROM {table}" + (" FOR SYSTEM_TIME ALL" if versioned else ""))
    rows = sorted(cur.fetchall(), key=_sort_key)
    return TableData(create, checksum, columns, key, rows)


def _sort_key(row: tuple) -> tuple:
    return tuple((v is None, v or b"") for v in row)


def accounts(server: Server, prefix: str) -> dict[str, str]:
    """SHOW CREATE USER + SHOW GRANTS of the accounts whose name starts with `prefix`."""
    conn = _connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT User, Host FROM mysql.user WHERE User LIKE %s", (prefix.replace("_", "\\_") + "%",))
            out = {}
            for user, host in cur.fetchall():
                account = f"'{user}'@'{host}'"
                cur.execute(f"SHOW CREATE USER {account}")
                create = cur.fetchone()[0]
                cur.execute(f"SHOW GRANTS FOR {account}")
                out[f"account {account}"] = create + " | " + " | ".join(sorted(g for (g,) in cur.fetchall()))
            return out
    finally:
        conn.close()


def show(value: object) -> str:
    """A value for a diff: text when it is UTF-8, else hex."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
            if text.isprintable():
                return repr(text)
        except UnicodeDecodeError:
            pass
        return "0x" + value.hex()
    return repr(value)


def _show_row(columns: list[str], row: tuple) -> str:
    return "(" + ", ".join(f"{c}={show(v)}" for c, v in zip(columns, row)) + ")"


def compare(db: str, replica: DbSnapshot, follower: DbSnapshot) -> list[str]:
    """The differences between the native replica's and the follower's copy of `db`, readable ([] = equal)."""
    if not replica.exists or not follower.exists:
        if replica.exists == follower.exists:
            return []
        return [f"database {db}: exists on the {'replica' if replica.exists else 'follower'} only"]
    out = []
    if replica.create != follower.create:
        out.append(f"database {db}: SHOW CREATE DATABASE differs\n  replica:  {replica.create}\n"
                   f"  follower: {follower.create}")
    for name in sorted(set(replica.objects) | set(follower.objects)):
        r, f = replica.objects.get(name), follower.objects.get(name)
        if r != f:
            if r is None or f is None:
                out.append(f"{db}: {name} exists on the {'replica' if f is None else 'follower'} only: {r or f}")
            else:
                out.append(f"{db}: {name} differs\n  replica:  {r}\n  follower: {f}")
    for name in sorted(set(replica.tables) & set(follower.tables)):
        out += _compare_table(f"{db}.{name}", replica.tables[name], follower.tables[name])
    return out


def documented_only(diffs: list[str], changed: str) -> bool:
    """Whether `diffs` (of compare()) are only rows paired by key whose changed values read exactly
    `changed` ("column: replica X / follower Y"): no other table, object, column or row differs."""
    if not diffs:
        return False
    for diff in diffs:
        head, *rows = diff.splitlines()
        if not re.fullmatch(r"table \S+: rows differ \(.*\)", head) or not rows:
            return False
        if any(not line.startswith("  key (") or line.split("): ", 1)[-1] != changed for line in rows):
            return False
    return True


def _compare_table(name: str, r: TableData, f: TableData) -> list[str]:
    out = []
    if r.create != f.create:
        out.append(f"table {name}: SHOW CREATE TABLE differs\n  replica:  {r.create}\n  follower: {f.create}")
    if r.columns != f.columns:
        out.append(f"table {name}: columns differ: replica {r.columns}, follower {f.columns}")
        return out
    if r.rows != f.rows:
        only_r = Counter(r.rows) - Counter(f.rows)
        only_f = Counter(f.rows) - Counter(r.rows)
        lines = [(f"table {name}: rows differ (replica {len(r.rows)} rows, follower {len(f.rows)}; "
                 f"{sum(only_r.values())} only on the replica, {sum(only_f.values())} only on the follower)")]
        if r.key:
            fkeys = {tuple(row[i] for i in f.key): row for row in only_f.elements()}
            shown = 0
            for row in sorted(only_r.elements(), key=_sort_key):
                key = tuple(row[i] for i in r.key)
                if key in fkeys and shown < MAX_ROW_DIFFS:
                    other = fkeys.pop(key)
                    changed = [f"{c}: replica {show(a)} / follower {show(b)}"
                               for c, a, b in zip(r.columns, row, other) if a != b]
                    lines.append(f"  key {tuple(show(k) for k in key)}: " + "; ".join(changed))
                    only_r[row] -= 1
                    only_f[other] -= 1
                    shown += 1
        for label, rows in (("replica only", only_r), ("follower only", only_f)):
            for row in sorted((+rows).elements(), key=_sort_key)[:MAX_ROW_DIFFS]:
                lines.append(f"  {label}: {_show_row(r.columns, row)}")
            if sum((+rows).values()) > MAX_ROW_DIFFS:
                lines.append(f"  ... {sum((+rows).values()) - MAX_ROW_DIFFS} more {label}")
        out.append("\n".join(lines))
    elif r.checksum != f.checksum:
        out.append(f"table {name}: CHECKSUM TABLE differs (replica {r.checksum}, follower {f.checksum}) "
                   "although the selectable rows are equal (hidden columns?)")
    return out


# ---------------------------------------------------------------------------
# The pipeline and the servers


class CdcPipeline:
    """cdc-producer and cdc-consumer on a fresh embedded topic, streaming from the leader's current position."""

    def __init__(self, tmp: Path, leader: Server, follower: Server, number: int, rows: str = "auto",
                 user: tuple[str, str] = ("root", ""), replay: str = ""):
        self.tmp = tmp
        tmp.mkdir(parents=True)
        # A topic name of its own: the follower keeps one checkpoint per topic name.
        stream, topic = tmp / "stream", f"compat-{number}"
        common = f'[stream]\npath = "{stream}"\ntopic = "{topic}"\n'
        producer = tmp / "producer.toml"
        producer.write_text(
            f'mysql_resource_name = "compat"\n[database]\nip_or_host = "127.0.0.1"\nport = {leader.port}\n'
            f'user = "root"\npassword = ""\nserver_id = {PRODUCER_SERVER_ID}\n[data]\nbase_path = "{tmp}/producer"\n'
            f'[snapshot]\nmode = "never"\n[filters]\nexclude_dbs = ["{EXCLUDED_DBS}"]\n' + common)
        consumer = tmp / "consumer.toml"
        # Accounts are replayed (as a native replica does), so they can be compared with the replica's.
        consumer.write_text(
            f'[database]\nip_or_host = "127.0.0.1"\nport = {follower.port}\nuser = "{user[0]}"\n'
            f'password = "{user[1]}"\n[data]\nbase_path = "{tmp}/consumer"\n[filters]\nexclude_dbs = ["{EXCLUDED_DBS}"]\n'
            f'[replay]\naccounts = "apply"\nrows = "{rows}"\n{replay}' + common)
        self.consumer: Cli | None = None
        self.producer_profile = producer
        self.producer = Cli(["cdc-producer", str(producer)])
        try:
            _wait_started(self.producer, "streaming from")
            self.consumer = Cli(["cdc-consumer", str(consumer)])
            _wait_started(self.consumer, "applying topic")
        except BaseException:
            self.close()
            raise

    def restart_producer(self, copy: tuple[str, ...] = ()) -> None:
        """Stop the producer cleanly and start it again from the topic's tail (copying `copy` first, by the
        consistent method, when given)."""
        code = self.producer.stop()
        if code != 0:
            raise ScenarioStop("STOPPED", f"cdc-producer exited {code} when asked to stop:\n{_tail(self.producer.stderr)}")
        args = ["cdc-producer", str(self.producer_profile)]
        if copy:
            profile = self.tmp / "producer-copy.toml"
            profile.write_text(self.producer_profile.read_text().replace(
                '[snapshot]\nmode = "never"\n', '[snapshot]\nmode = "never"\nmethod = "consistent"\n'))
            args = ["cdc-producer", str(profile), "--snapshot", *copy]
        self.producer = Cli(args)
        _wait_started(self.producer, "streaming from")

    def leaks(self, secrets: tuple[str, ...]) -> list[str]:
        """Where any of `secrets` appears: the topic's files, the programs' stderr."""
        places = {f"the topic ({f.name})": f.read_bytes() for f in sorted((self.tmp / "stream").glob("stream.db*"))}
        for cli in (self.producer, self.consumer):
            if cli is not None:
                places[f"{cli.args[0]}'s output"] = cli.stderr.encode()
        return [f"'{secret}' appears in {where}" for secret in secrets for where, data in places.items()
                if secret.encode() in data]

    def stopped(self) -> Cli | None:
        """The program that exited, if one did."""
        for cli in (self.consumer, self.producer):
            if cli is not None and cli.exit_code() is not None:
                return cli
        return None

    def close(self) -> None:
        for cli in (self.consumer, self.producer):
            if cli is not None and cli.proc.poll() is None:
                try:
                    cli.stop(timeout=10)
                except AssertionError:
                    pass  # killed by stop()


def _wait_started(cli: Cli, line: str, timeout: float = 30.0) -> None:
    def started() -> bool:
        if any(line in seen for seen in cli.lines):
            return True
        if cli.exit_code() is not None:
            raise RuntimeError(f"{cli.args[0]} exited {cli.proc.returncode} at start:\n{cli.stderr}")
        return False

    deadline = time.monotonic() + timeout
    while not started():
        if time.monotonic() > deadline:
            raise AssertionError(f"{cli.args[0]} did not print '{line}' within {timeout:g}s: {cli.stderr}")
        time.sleep(0.02)


class Differential:
    """Leader, native replica, follower and pipeline; `run(scenario)` -> Outcome.

    `rows`: the consumer's `[replay] rows` ("auto": BINLOG replay where it can; "sql": the SQL path).
    `managed`: the consumer's user on the follower is MANAGED_USER, with what a managed MySQL/MariaDB
    service grants (MANAGED_GRANTS: DML and DDL, no SUPER, SET USER or BINLOG REPLAY), on a follower
    with log_bin_trust_function_creators=ON, and [replay] definer = "consumer": its rows take SQL
    (rows = "auto" finds no BINLOG privilege). The native replica still replicates as root."""

    def __init__(self, tmp: Path, rows: str = "auto", managed: bool = False, replay: str = ""):
        self.tmp = tmp
        self.rows = rows
        self.managed = managed
        self.replay = replay  # more [replay] lines of the consumer's profile ("workers = 4\n")
        self.leader = Server("compat-leader", tmp / "leader", args=LEADER_ARGS)
        self.replica = Server("compat-replica", tmp / "replica", args=REPLICA_ARGS)
        self.follower = Server("compat-follower", tmp / "follower", args=FOLLOWER_ARGS)
        self.pipeline: CdcPipeline | None = None
        self._pipelines = 0
        self._marker = 0
        self.results: list[Outcome] = []

    def __enter__(self) -> Self:
        try:
            for server in (self.leader, self.replica, self.follower):
                server.start()
            if self.managed:
                self.follower.execute(f"CREATE USER {MANAGED_ACCOUNT} IDENTIFIED BY '{MANAGED_USER[1]}'",
                                      f"GRANT {MANAGED_GRANTS} ON *.* TO {MANAGED_ACCOUNT} WITH GRANT OPTION",
                                      "SET GLOBAL log_bin_trust_function_creators = ON")
            self._attach_replica()
            self._restart_pipeline()
            self.leader.execute(f"CREATE DATABASE {MARKER_DB}",
                                f"CREATE TABLE {MARKER_DB}.m (id INT PRIMARY KEY, n BIGINT NOT NULL)",
                                f"INSERT INTO {MARKER_DB}.m VALUES (1, 0)")
            self._sync(DEFAULT_TIMEOUT)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        for server in (self.leader, self.replica, self.follower):
            try:
                server.stop()
            except subprocess.CalledProcessError as e:  # keep stopping the others; say why this one failed
                print(f"stopping {server.name} failed: {e.stderr!r}")
        path = os.environ.get("CDC_COMPAT_RESULTS")
        if path and self.results:
            Path(path).write_text(json.dumps([o.as_dict() for o in self.results], indent=1) + "\n")

    # -- the native replica

    def _attach_replica(self) -> None:
        """Replicate from the leader's current position (also after the replica stopped on an error)."""
        pos = self.leader.gtid()
        self.replica.execute(
            "STOP SLAVE", "RESET SLAVE ALL", "RESET MASTER",
            f"SET GLOBAL gtid_slave_pos = '{pos}'",
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.leader.port}, MASTER_USER='root', "
            "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
            "START SLAVE",
        )
        wait_for(lambda: self._replica_status().get("Slave_IO_Running") == "Yes", 30, "the replica to connect")

    def _replica_status(self) -> dict:
        conn = _connect(self.replica)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW SLAVE STATUS")
                rows = _dict_rows(cur)
                return rows[0] if rows else {}
        finally:
            conn.close()

    # -- the pipeline

    def _restart_pipeline(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        self._pipelines += 1
        managed = {"user": MANAGED_USER} if self.managed else {}
        replay = ('definer = "consumer"\n' if self.managed else "") + self.replay
        self.pipeline = CdcPipeline(self.tmp / f"pipeline-{self._pipelines}", self.leader, self.follower,
                                    self._pipelines, self.rows, replay=replay, **managed)

    @property
    def sql_path(self) -> bool:
        """Whether the consumer's rows take SQL (and its triggers are guarded: [replay] triggers = "auto")."""
        return self.rows == "sql" or self.managed

    @property
    def documented(self) -> Documented:
        """What the follower's objects hold where the native replica's differ (docs/compatibility.md)."""
        return Documented(guard=self.sql_path, definer=f"{MANAGED_USER[0]}@%" if self.managed else None)

    def restart_pipeline(self) -> None:
        """A fresh pipeline (new topic) from the leader's current position: past whatever stopped the old one."""
        self._restart_pipeline()

    def reattach_replica(self) -> None:
        """Point the replica at the leader's current position (after it fell too far behind)."""
        self._attach_replica()

    def sync(self, timeout: float = DEFAULT_TIMEOUT) -> list[str]:
        """Wait until the replica and the follower have everything the leader logged so far (see _sync);
        ScenarioStop when the pipeline stops, times out, or the replica breaks."""
        return self._sync(timeout)

    # -- running a scenario

    def run(self, scenario: Scenario) -> Outcome:
        """Run one scenario on the leader, wait for both copies, compare them."""
        start = time.monotonic()
        try:
            outcome = self._run(scenario)
        except ScenarioStop as stop:
            outcome = Outcome(scenario, stop.status, stop.detail)
        if self.sql_path and scenario.sql_differs is not None:
            if outcome.status == "FAIL" and documented_only(outcome.diffs, scenario.sql_differs):
                outcome = Outcome(scenario, "PASS", f"differs from the native replica as documented:\n{outcome.detail}")
            elif outcome.ok:
                outcome = Outcome(scenario, "FAIL", f"expected the documented difference '{scenario.sql_differs}', "
                                                    "but the follower equals the native replica")
        leaks = self.pipeline.leaks(scenario.secrets) if self.pipeline is not None else []
        if leaks and outcome.ok:
            outcome = Outcome(scenario, "FAIL", "a secret leaked: " + "; ".join(leaks))
        outcome.seconds = time.monotonic() - start
        self.results.append(outcome)
        if outcome.status in ("STOPPED", "TIMEOUT") or (self.pipeline and self.pipeline.stopped()):
            self._restart_pipeline()  # the old one is stuck at the scenario's event
        return outcome

    def _run(self, scenario: Scenario) -> Outcome:
        if self.pipeline is None or self.pipeline.stopped():
            self._restart_pipeline()
        for sql in scenario.follower_setup:
            conn = _connect(self.follower)
            try:
                with conn.cursor() as cur:
                    cur.execute("SET sql_log_bin = 0")
                    cur.execute(sql.format(db=scenario.db))
            finally:
                conn.close()
        ctx = Context(scenario, self.tmp / "files" / scenario.id, self.leader, (self.replica, self.follower))
        ctx.tmp.mkdir(parents=True, exist_ok=True)
        self._run_steps(scenario, ctx)
        refusal = scenario.refusal_for("sql" if self.sql_path else self.rows, self.managed)
        try:
            native = self._sync(scenario.timeout, scenario.native_stops)
        except ScenarioStop as stop:
            if refusal is not None and stop.status == "STOPPED":
                if refusal in stop.detail:
                    return Outcome(scenario, "PASS", f"refused as expected:\n{stop.detail}")
                return Outcome(scenario, "FAIL", f"refused, but without '{refusal}':\n{stop.detail}")
            raise
        native_note = f"the native replica stopped (as expected): {'; '.join(native)}\n" if native else ""
        if scenario.native_stops and not native:
            return Outcome(scenario, "ERROR", "the native replica was expected to stop on this scenario, but did not")
        if refusal is not None:
            return Outcome(scenario, "FAIL", f"{native_note}expected a loud refusal containing "
                                             f"'{refusal}', but the pipeline applied the scenario")
        diffs = []
        for db in scenario.all_databases():
            diffs += compare(db, snapshot(self.replica, db, self.documented), snapshot(self.follower, db))
        if scenario.compare_accounts:
            r, f = accounts(self.replica, scenario.db), accounts(self.follower, scenario.db)
            for name in sorted(set(r) | set(f)):
                if r.get(name) != f.get(name):
                    diffs.append(f"{name} differs\n  replica:  {r.get(name)}\n  follower: {f.get(name)}")
        for db in scenario.excluded:
            if snapshot(self.follower, db.format(db=scenario.db)).exists:
                diffs.append(f"database {db}: excluded by the filters, but it reached the follower")
        if diffs:
            return Outcome(scenario, "FAIL", native_note + "\n".join(diffs), diffs=diffs)
        return Outcome(scenario, "PASS", native_note)

    def _run_steps(self, scenario: Scenario, ctx: Context) -> None:
        charsets = dict(scenario.session_charsets)
        self.leader.execute(f"CREATE DATABASE {quote(scenario.db)}")
        sessions: dict[str, pymysql.Connection] = {}
        try:
            for step in scenario.steps:
                if isinstance(step, str):
                    step = Sql(step)
                if isinstance(step, Call):
                    step.fn(ctx)
                elif isinstance(step, Close):
                    closing = sessions.pop(step.session, None)
                    if closing is not None:
                        closing.close()
                elif isinstance(step, Wait):
                    wait_for(partial(self._leader_value, step.sql.format(db=scenario.db, tmp=ctx.tmp)),
                             step.timeout, f"{step.what} on the leader")
                elif isinstance(step, WaitFollower):
                    self._wait_follower_value(step.sql.format(db=scenario.db), step.what, step.timeout)
                elif isinstance(step, RestartProducer):
                    assert self.pipeline is not None
                    self.pipeline.restart_producer()
                elif isinstance(step, CopyAgain):
                    assert self.pipeline is not None
                    self.pipeline.restart_producer(tuple(t.format(db=scenario.db) for t in step.tables))
                elif isinstance(step, NewPipeline):
                    self._restart_pipeline()
                else:
                    conn = sessions.get(step.session)
                    if conn is None:
                        conn = sessions[step.session] = pymysql.connect(
                            host="127.0.0.1", port=self.leader.port, user="root", password="", database=scenario.db,
                            autocommit=True, charset=charsets.get(step.session, "utf8mb4"))
                    sql = step.sql
                    if isinstance(sql, str):
                        sql = sql.replace("{db}", scenario.db).replace("{tmp}", str(ctx.tmp))
                    try:
                        with conn.cursor() as cur:
                            cur.execute(sql)
                    except pymysql.err.MySQLError as e:
                        if step.expect_error is None or e.args[0] != step.expect_error:
                            raise ScenarioStop("ERROR", f"the scenario's SQL failed on the leader: {sql!r}: {e}") from e
                    else:
                        if step.expect_error is not None:
                            raise ScenarioStop("ERROR", f"{sql!r} was expected to fail with error "
                                                        f"{step.expect_error} on the leader, but it succeeded")
        finally:
            for conn in sessions.values():
                conn.close()

    def _leader_value(self, sql: str) -> object:
        return self.leader.query(sql)[0][0]

    def _wait_follower_value(self, sql: str, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.follower.query(sql)[0][0]:
                    return
            except pymysql.err.MySQLError:
                pass  # not created yet
            stopped = self.pipeline.stopped() if self.pipeline else None
            if stopped is not None:
                raise ScenarioStop("STOPPED", f"{stopped.args[0]} exited {stopped.proc.returncode} (waiting for "
                                              f"{what}):\n" + _tail(stopped.stderr))
            if time.monotonic() > deadline:
                raise ScenarioStop("TIMEOUT", f"timed out after {timeout:g}s waiting for {what} on the follower")
            time.sleep(0.05)

    def _sync(self, timeout: float, native_stops: bool = False) -> list[str]:
        """Write a marker on the leader; wait until the replica and the follower have it.

        Everything the leader logged before the marker is then applied on both (or lost:
        that is what the comparison finds). A stopped consumer/producer ends the follower's
        wait at once, with its error. A stopped replica is re-attached at the leader's
        position; with `native_stops` that stop is expected and its error returned,
        otherwise the oracle broke (ScenarioStop "ORACLE")."""
        self._marker += 1
        n = self._marker
        self.leader.execute(f"UPDATE {MARKER_DB}.m SET n = {n} WHERE id = 1")
        deadline = time.monotonic() + timeout
        follower_stop = None
        try:
            self._wait_follower(n, deadline, timeout)
        except ScenarioStop as stop:
            follower_stop = stop
        native_errors = self._wait_replica(n, deadline, timeout)
        if native_errors and not native_stops:
            also = f"\n(the follower: {follower_stop.status}: {follower_stop.detail})" if follower_stop else ""
            raise ScenarioStop("ORACLE", f"the native replica stopped: {'; '.join(native_errors)}{also}")
        if follower_stop is not None:
            if native_errors:
                follower_stop.detail += f"\n(the native replica stopped too: {'; '.join(native_errors)})"
            raise follower_stop
        return native_errors

    def _wait_follower(self, n: int, deadline: float, timeout: float) -> None:
        while self._marker_at(self.follower) < n:
            stopped = self.pipeline.stopped() if self.pipeline else None
            if stopped is not None:
                raise ScenarioStop("STOPPED", f"{stopped.args[0]} exited {stopped.proc.returncode}:\n"
                                              + _tail(stopped.stderr))
            if time.monotonic() > deadline:
                detail = f"timed out after {timeout:g}s waiting for the follower"
                if self.pipeline is not None and self.pipeline.consumer is not None:
                    detail += ("\nconsumer stderr:\n" + _tail(self.pipeline.consumer.stderr)
                               + "\nproducer stderr:\n" + _tail(self.pipeline.producer.stderr))
                raise ScenarioStop("TIMEOUT", detail)
            time.sleep(0.05)

    def _wait_replica(self, n: int, deadline: float, timeout: float) -> list[str]:
        """Until the replica has marker n; the errors it stopped with on the way (each re-attaches it)."""
        errors: list[str] = []
        deadline = max(deadline, time.monotonic() + 10)  # the follower may have used the whole deadline
        while self._marker_at(self.replica) < n:
            status = self._replica_status()
            if status.get("Slave_SQL_Running") != "Yes" or status.get("Slave_IO_Running") == "No":
                errors.append(str(status.get("Last_SQL_Error") or status.get("Last_IO_Error")))
                self._attach_replica()  # from the leader's position now, which is past the marker
                self.replica.execute("SET sql_log_bin = 0", f"UPDATE {MARKER_DB}.m SET n = {n} WHERE id = 1")
            elif time.monotonic() > deadline:
                raise ScenarioStop("ORACLE", f"timed out after {timeout:g}s waiting for the native replica")
            time.sleep(0.05)
        return errors

    def _marker_at(self, server: Server) -> int:
        try:
            rows = server.query(f"SELECT n FROM {MARKER_DB}.m WHERE id = 1")
        except pymysql.err.MySQLError:
            return -1
        return rows[0][0] if rows else -1


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join("  " + line for line in text.splitlines()[-lines:])


def write_file(name: str, data: bytes) -> Callable[[Context], None]:
    """A Call step's function writing `data` to `{tmp}/name` (for LOAD DATA INFILE)."""

    def write(ctx: Context) -> None:
        (ctx.tmp / name).write_bytes(data)

    return write


def scenario_ids(scenarios: Sequence[Scenario]) -> list[str]:
    ids = [s.id for s in scenarios]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates, f"duplicate scenario ids: {duplicates}"
    return ids


__all__ = [
    "Call",
    "Close",
    "Context",
    "CopyAgain",
    "Differential",
    "Documented",
    "NewPipeline",
    "Outcome",
    "Scenario",
    "ScenarioStop",
    "Sql",
    "Step",
    "Wait",
    "compare",
    "documented_only",
    "scenario_ids",
    "snapshot",
    "write_file",
]
