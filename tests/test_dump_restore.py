"""Issue 22: restoring a dump on the leader must never crash the follower's server.

Every mariadb-dump/mysqldump file runs its INSERTs with UNIQUE_CHECKS=0, FOREIGN_KEY_CHECKS=0 and
AUTOCOMMIT=0 into empty tables: InnoDB's bulk insert (MariaDB 10.6+). Replayed one rows event per
BINLOG statement, with the leader's statement left open between them, that crashed a MariaDB 10.11
follower (signal 11 in ha_write_row under mysql_client_binlog_statement); every BINLOG statement now
ends the leader's statement (cdc_consumer/binlog_replay.py `ending_statement`, docs/compatibility.md).

The restore goes through the real `mariadb` client on the leader while the pipeline runs, on both row
paths; the follower must equal the native replica (tests/differential.py) and its error log must show
no crash. A follower that died anyway is started again after the test, so later tests find it running.
"""

from __future__ import annotations

import base64
import os
import random
import re
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator

import pytest
from differential import Call, Context, Differential, Outcome, Scenario
from harness import Server, quote, wait_for
from test_replayer_machine import FDE, WRITE

from cdc_consumer.binlog_replay import STMT_END_F, LeaderFormat, ending_statement
from cdc_stream.errors import DataError

# -- ending_statement (pure) ------------------------------------------------------------------------

_HEADER = 19


def _events(b64: str) -> list[bytearray]:
    raw, out = base64.b64decode(b64), []
    while raw:
        size = struct.unpack_from("<I", raw, 9)[0]
        out.append(bytearray(raw[:size]))
        raw = raw[size:]
    return out


def _join(events: list[bytearray]) -> str:
    return base64.b64encode(b"".join(events)).decode("ascii")


def _with_flags(event: bytearray, flags: int, crc: bool = True) -> bytearray:
    out = bytearray(event)
    struct.pack_into("<H", out, _HEADER + 6, flags)
    if crc:
        struct.pack_into("<I", out, len(out) - 4, zlib.crc32(bytes(out[:-4])))
    return out


def _flags(event: bytearray) -> int:
    return struct.unpack_from("<H", event, _HEADER + 6)[0]


def test_a_rows_event_that_does_not_end_its_statement_gets_stmt_end_f_and_its_crc32_again():
    table_map, rows = _events(WRITE)  # a real MariaDB 10.11 TABLE_MAP + WRITE_ROWS, the last of its statement
    assert rows[4] == 23 and _flags(rows) & STMT_END_F
    open_rows = _with_flags(rows, _flags(rows) & ~STMT_END_F)  # as the leader writes all but a statement's last
    assert ending_statement(_join([table_map, open_rows]), LeaderFormat(base64.b64decode(FDE))) == WRITE
    # Events that already end their statement come back as they are (the same string).
    assert ending_statement(WRITE, LeaderFormat(base64.b64decode(FDE))) is WRITE


def test_without_leader_checksums_only_the_flag_changes():
    fde = bytearray(base64.b64decode(FDE))
    assert LeaderFormat(bytes(fde)).checksum
    fde[-5] = 0  # binlog_checksum=NONE: the algorithm byte before the FDE's checksum field
    leader = LeaderFormat(bytes(fde))
    assert not leader.checksum
    table_map, rows = (_strip_crc(e) for e in _events(WRITE))
    open_rows = _with_flags(rows, _flags(rows) & ~STMT_END_F, crc=False)
    ended = _events(ending_statement(_join([table_map, open_rows]), leader))
    assert ended == [table_map, _with_flags(open_rows, _flags(open_rows) | STMT_END_F, crc=False)]


def _strip_crc(event: bytearray) -> bytearray:
    out = bytearray(event[:-4])
    struct.pack_into("<I", out, 9, len(out))
    return out


@pytest.mark.parametrize("cut", [3, 30, 60])
def test_events_whose_sizes_do_not_add_up_are_a_data_error(cut):
    raw = base64.b64decode(WRITE)[:-cut]
    raw = raw[:len(raw) // 3 * 3]  # whole base64 quanta
    with pytest.raises(DataError, match="'binlog' field"):
        ending_statement(base64.b64encode(raw).decode(), LeaderFormat(base64.b64decode(FDE)))


def _ended_by_decoding(events: str, leader: LeaderFormat) -> str:
    """ending_statement's result the plain way: decode everything, set the flag, compute the CRC32 again."""
    raw, at, last = bytearray(base64.b64decode(events)), 0, None
    while at < len(raw):
        size = struct.unpack_from("<I", raw, at + 9)[0]
        last = (at, size) if raw[at + 4] in (23, 24, 25, 30, 31, 32, 39) else last
        at += size
    if last is None or _flags(raw[last[0]:]) & STMT_END_F:
        return events
    start, size = last
    struct.pack_into("<H", raw, start + _HEADER + 6, _flags(raw[start:]) | STMT_END_F)
    if leader.checksum:
        struct.pack_into("<I", raw, start + size - 4, zlib.crc32(raw[start:start + size - 4]))
    return base64.b64encode(raw).decode("ascii")


def test_ending_statement_reads_and_changes_only_what_it_must_and_equals_decoding_it_all():
    # It decodes the events' headers, flags and checksum alone, and updates the checksum by CRC-32's linearity
    # (binlog_replay._one_bit_crc): on event sequences of every shape, the same text as decoding everything.
    rng = random.Random(7)
    fde = bytearray(base64.b64decode(FDE))
    for case in range(1500):
        crc = case % 3 != 0
        fde[-5] = 1 if crc else 0
        leader = LeaderFormat(bytes(fde))
        events = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice([19, 23, 24, 25, 32])  # TABLE_MAP, WRITE/UPDATE/DELETE_ROWS, MySQL's v2 UPDATE
            body = bytes(6) + rng.choice([0, 1, 2, 3, 0x8000]).to_bytes(2, "little") + rng.randbytes(
                rng.choice([0, 1, 2, 50, 8000, 70000]))
            event = bytearray(struct.pack("<IBIIIH", 0, kind, 1, _HEADER + len(body) + 4 * crc, 0, 0) + body)
            events.append(event + (zlib.crc32(event).to_bytes(4, "little") if crc else b""))
        text = _join(events)
        assert ending_statement(text, leader) == _ended_by_decoding(text, leader), case


# -- the pipeline: leader + native replica + follower -----------------------------------------------


@pytest.fixture(scope="module", params=["auto", "sql"], ids=["binlog-path", "sql-path"])
def diff(request, tmp_path_factory) -> Iterator[Differential]:
    with Differential(tmp_path_factory.mktemp(f"dump-{request.param}"), rows=request.param) as harness:
        yield harness


@pytest.fixture(autouse=True)
def follower_kept_running(request) -> Iterator[None]:
    """After a test of this module, a follower that died is started again (the test itself has failed)."""
    yield
    if "diff" in request.fixturenames:
        _revive(request.getfixturevalue("diff").follower)


def _alive(server: Server) -> bool:
    try:
        return server.query("SELECT 1") == [(1,)]
    except Exception:
        return False


def _revive(server: Server) -> None:
    if _alive(server):
        return
    pid_file = server.dir / "mysqld.pid"

    def gone() -> bool:
        try:
            os.kill(int(pid_file.read_text()), 0)
        except (OSError, ValueError):
            return True
        return False

    wait_for(gone, 60, f"the crashed {server.name} to exit")
    server.start()
    wait_for(lambda: _alive(server), 60, f"{server.name} to answer again")


_CRASH = re.compile(r"signal|got exception|assertion", re.IGNORECASE)


def _log_size(server: Server) -> int:
    return (server.dir / "error.log").stat().st_size


def crash_lines(server: Server, since: int = 0) -> list[str]:
    """The lines of the server's error log after byte `since` that tell of a crash."""
    with (server.dir / "error.log").open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    return [line for line in text.splitlines() if _CRASH.search(line)]


def run_unharmed(diff: Differential, scenario: Scenario) -> None:
    """Run the scenario: the follower's server must not crash, and must equal the native replica."""
    log_at = _log_size(diff.follower)  # a crash an earlier test caused (its follower revived) is not this one's
    try:
        outcome = diff.run(scenario)
    except RuntimeError as e:  # the harness could not start a pipeline again: the follower is gone
        outcome = Outcome(scenario, "ERROR", str(e))
    crashed = crash_lines(diff.follower, log_at)
    assert crashed == [], "the follower's server crashed:\n" + "\n".join(crashed) + "\n" + outcome.report()
    assert _alive(diff.follower), "the follower's server does not answer\n" + outcome.report()
    assert outcome.ok, outcome.report()


def test_600_rows_into_an_empty_table_with_unique_and_foreign_key_checks_off(diff):
    """The minimal case: one INSERT of 600 rows (two rows events on the leader, the first without
    STMT_END_F) into an empty table with a foreign key and a secondary key."""
    values = ",".join(f"({i}, {i % 7}, 'name{i}')" for i in range(1, 601))
    run_unharmed(diff, Scenario("dump_600", "600 rows, unique and foreign key checks off", (
        "CREATE TABLE p (id INT PRIMARY KEY)",
        "INSERT INTO p VALUES (0), (1), (2), (3), (4), (5), (6)",
        "CREATE TABLE c (id INT PRIMARY KEY, pid INT, name VARCHAR(20), KEY k (name), "
        "FOREIGN KEY (pid) REFERENCES p (id))",
        "SET UNIQUE_CHECKS = 0", "SET FOREIGN_KEY_CHECKS = 0", "SET AUTOCOMMIT = 0",
        f"INSERT INTO c VALUES {values}",
        "COMMIT", "SET AUTOCOMMIT = 1", "SET UNIQUE_CHECKS = 1", "SET FOREIGN_KEY_CHECKS = 1"), source="22"))
    assert diff.follower.query("SELECT COUNT(*), SUM(id) FROM cmp_dump_600.c") == [(600, 180300)]


SOURCE_DB = "dump_source"
SOURCE_SQL = (
    f"CREATE DATABASE {SOURCE_DB}",
    f"USE {SOURCE_DB}",
    "CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, created DATETIME(6) NOT NULL, "
    "UNIQUE KEY uq_name (name))",
    "CREATE TABLE child (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT NOT NULL, qty INT, "
    "note TEXT CHARACTER SET utf8mb4, amount DECIMAL(12, 2), tag VARBINARY(16), KEY k_qty (qty), "
    "CONSTRAINT fk_parent FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE)",
    "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, child_id INT NOT NULL, what VARCHAR(20) NOT NULL, "
    "UNIQUE KEY uq_child (child_id, what))",
    "CREATE TRIGGER child_ai AFTER INSERT ON child FOR EACH ROW INSERT INTO audit (child_id, what) VALUES (NEW.id, 'added')",
    "CREATE VIEW totals AS SELECT parent_id, COUNT(*) AS n, SUM(amount) AS total FROM child GROUP BY parent_id",
    "CREATE FUNCTION twice(x INT) RETURNS INT DETERMINISTIC RETURN x * 2",
    "CREATE PROCEDURE add_child(IN p INT, IN q INT) MODIFIES SQL DATA "
    "INSERT INTO child (parent_id, qty, note) VALUES (p, twice(q), 'by procedure')",
    # It never fires during the test (the leader's scheduler is on), but its definition and status travel.
    "CREATE EVENT purge_audit ON SCHEDULE EVERY 1 DAY STARTS '2035-01-01 00:00:00' DO DELETE FROM audit WHERE id < 0",
    "INSERT INTO parent SELECT seq, CONCAT('parent-', seq), '2024-02-29 12:34:56.123456' + INTERVAL seq SECOND "
    "FROM seq_1_to_3000",
    "INSERT INTO child (parent_id, qty, note, amount, tag) SELECT 1 + seq % 3000, IF(seq % 11 = 0, NULL, seq % 97), "
    "CONCAT('café ', REPEAT(CHAR(97 + seq % 26), seq % 60), ' ', seq), seq * 1.25, UNHEX(MD5(seq)) "
    "FROM seq_1_to_12000",
    "CALL add_child(7, 21)",
)


def _make_source_and_dump(ctx: Context) -> None:
    """The source database, on the leader only (sql_log_bin = 0), and its mariadb-dump file."""
    conn = ctx.leader.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            for sql in SOURCE_SQL:
                cur.execute(sql)
    finally:
        conn.close()
    # A small --net-buffer-length: several INSERT statements per table (each many rows events), as a
    # big table's dump has, all in the dump's one transaction per table.
    with (ctx.tmp / "dump.sql").open("wb") as out:
        subprocess.run(["mariadb-dump", "--no-defaults", "-h127.0.0.1", f"-P{ctx.leader.port}", "-uroot",
                        "--routines", "--triggers", "--events", "--net-buffer-length=65536", SOURCE_DB],
                       stdout=out, stderr=subprocess.PIPE, check=True, timeout=120)


def _restore(ctx: Context) -> None:
    """The dump file through the real `mariadb` client, into the scenario's (new, empty) database."""
    with (ctx.tmp / "dump.sql").open("rb") as dump:
        subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{ctx.leader.port}", "-uroot",
                        ctx.scenario.db], stdin=dump, capture_output=True, check=True, timeout=300)


def _objects(server: Server, db: str) -> dict[str, object]:
    count = {
        "parent": f"SELECT COUNT(*) FROM {quote(db)}.parent",
        "child": f"SELECT COUNT(*) FROM {quote(db)}.child",
        "audit": f"SELECT COUNT(*) FROM {quote(db)}.audit",
        "views": f"SELECT COUNT(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = '{db}'",
        "triggers": f"SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '{db}'",
        "routines": f"SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = '{db}'",
        "events": f"SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = '{db}'",
    }
    return {name: server.query(sql)[0][0] for name, sql in count.items()}


def test_a_mariadb_dump_restored_on_the_leader_reaches_the_follower_exactly(diff):
    scenario = Scenario("dump_restore", "mariadb-dump --routines --triggers --events, restored by the mariadb client", (
        Call(_make_source_and_dump, "make the source database and dump it"),
        Call(_restore, "mariadb < dump.sql"),
    ), source="22", timeout=240)
    started = time.monotonic()
    run_unharmed(diff, scenario)
    expected = {"parent": 3000, "child": 12001, "audit": 12001, "views": 1, "triggers": 1, "routines": 2, "events": 1}
    assert _objects(diff.leader, scenario.db) == expected  # the restore brought everything the dump holds
    assert _objects(diff.follower, scenario.db) == expected
    dump = (diff.tmp / "files" / scenario.id / "dump.sql").read_text(errors="replace")
    assert "UNIQUE_CHECKS=0" in dump and "FOREIGN_KEY_CHECKS=0" in dump and dump.count("INSERT INTO `child`") > 1
    print(f"dump restore ({diff.rows}): {time.monotonic() - started:.1f}s, {len(dump) >> 10} KiB of dump")

