"""What a user sees when something is wrong: one line naming the fix, an exit code, nothing half-applied."""

from __future__ import annotations

import base64
import json

from harness import free_port, run_cli


def one_line_error(result) -> str:
    err = result.stderr.decode()
    assert "Traceback" not in err
    lines = [l for l in err.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_unreachable_leader(pipeline, tmp_path):
    profile = pipeline.producer_profile()
    port = free_port()
    profile.write_text(profile.read_text().replace(f"port = {pipeline.leader.port}", f"port = {port}"))
    result = run_cli("cdc-producer", str(profile))
    assert result.returncode == 3
    assert one_line_error(result) == (
        f"error: cannot reach the leader at 127.0.0.1:{port}: connection refused; "
        "check that it is running and [database] ip_or_host/port"
    )


def test_wrong_password(pipeline):
    profile = pipeline.consumer_profile()
    profile.write_text(profile.read_text().replace('user = "root"\npassword = ""', 'user = "fluvio"\npassword = "wrong"'))
    result = run_cli("cdc-consumer", str(profile))
    assert result.returncode == 2
    assert one_line_error(result) == (
        f"error: the follower at 127.0.0.1:{pipeline.follower.port} refused user 'fluvio' (access denied): "
        "check [database] user and password"
    )


def test_preflight_refuses_minimal_row_metadata_and_prints_the_fix(pipeline):
    pipeline.leader.execute("SET GLOBAL binlog_row_metadata = 'MINIMAL'", "SET GLOBAL binlog_row_image = 'NOBLOB'",
                            "SET GLOBAL binlog_format = 'MIXED'")
    try:
        result = run_cli("cdc-producer", str(pipeline.producer_profile()))
        check = run_cli("cdc-producer", "--check", str(pipeline.producer_profile()))
    finally:
        pipeline.leader.execute("SET GLOBAL binlog_row_metadata = 'FULL'", "SET GLOBAL binlog_row_image = 'FULL'",
                                "SET GLOBAL binlog_format = 'ROW'")
    assert result.returncode == 4
    err = result.stderr.decode()
    assert err.splitlines() == [
        "error: the leader is not ready for CDC:",
        "  - binlog_format is MIXED, must be ROW: set binlog-format=ROW (or SET GLOBAL binlog_format='ROW')",
        "  - binlog_row_image is NOBLOB, must be FULL: set binlog-row-image=FULL (or SET GLOBAL binlog_row_image='FULL')",
        "  - binlog_row_metadata is MINIMAL, must be FULL: set binlog-row-metadata=FULL (or SET GLOBAL binlog_row_metadata='FULL')",
    ]
    assert check.returncode == 4
    assert check.stderr.decode().count("FAIL ") == 3
    assert not (pipeline.stream_path / "stream.db").exists()  # nothing created before the checks passed
    ok = run_cli("cdc-producer", "--check", str(pipeline.producer_profile()))
    assert ok.returncode == 0
    assert ok.stderr.decode().strip() == f"ok: the leader at 127.0.0.1:{pipeline.leader.port} is ready for CDC"


def test_consumer_without_topic_waits_for_it_until_stopped(pipeline):
    consumer = pipeline.start_consumer_waiting()
    assert consumer.wait_line("waiting for topic") == (
        f"waiting for topic 'rust-mysql-cdc': no embedded stream at {pipeline.stream_path}: check [stream] path "
        "(cdc-topic: --path), or start cdc-producer first to create it")
    assert consumer.stop() == 0
    assert consumer.lines[-1] == "stopped before applying anything"


def produce(pipeline, lines: list[str]):
    run_cli("cdc-topic", "create", "rust-mysql-cdc", "--path", str(pipeline.stream_path))
    r = run_cli("cdc-topic", "produce", "rust-mysql-cdc", "--path", str(pipeline.stream_path), input="\n".join(lines).encode())
    assert r.returncode == 0, r.stderr


def row_event(seq, table, txn_index, last, value):
    return json.dumps({
        "uri": f"flv://mysql-srv1/flvDb/{table}", "sequence": seq, "txn": {"id": "0-1-5", "index": txn_index, "last": last},
        "columns": ["id"], "pk": ["id"], "operation": {"Add": {"rows": [{"cols": [{"SignedInteger": value}]}]}},
    })


def test_malformed_record_stops_consumer_with_its_offset(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY)")
    produce(pipeline, [row_event(0, "pet", 0, True, 1), '{"uri": "flv://x/flvDb/pet", "sequence": 1}', row_event(2, "pet", 0, True, 3)])
    result = run_cli("cdc-consumer", str(pipeline.consumer_profile()))
    assert result.returncode == 5
    assert one_line_error(result) == (
        "error: record at offset 1 of topic 'rust-mysql-cdc' is not a valid change event: missing field 'operation'; "
        "nothing of it was applied and the checkpoint stays before it "
        "(--skip-bad-records moves such records to a dead-letter topic)"
    )
    assert pipeline.follower.rows("flvDb", "pet") == [(1,)]
    assert pipeline.checkpoint() == 1


def test_failed_statement_rolls_back_the_whole_source_transaction(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY)")
    produce(pipeline, [row_event(0, "pet", 0, False, 1), row_event(1, "ghost", 1, True, 2)])
    result = run_cli("cdc-consumer", str(pipeline.consumer_profile()))
    assert result.returncode == 5
    assert one_line_error(result) == (
        "error: table `flvDb`.`ghost` does not exist on the follower (offset 1, transaction 0-1-5); "
        "create it there or exclude it with [filters]; nothing of the transaction was applied"
    )
    assert pipeline.follower.rows("flvDb", "pet") == []  # the first event of the transaction was rolled back
    assert pipeline.checkpoint() is None


def test_cdc_topic_errors(pipeline):
    missing = run_cli("cdc-topic", "consume", "nope", "-B", "-d", "--path", str(pipeline.tmp / "nostream"))
    assert missing.returncode == 2
    assert one_line_error(missing).startswith(f"error: no embedded stream at {pipeline.tmp / 'nostream'}")
    run_cli("cdc-topic", "create", "t1", "--path", str(pipeline.stream_path))
    nope = run_cli("cdc-topic", "consume", "nope", "-B", "-d", "--path", str(pipeline.stream_path))
    assert nope.returncode == 2
    assert one_line_error(nope).startswith(f"error: topic 'nope' does not exist in {pipeline.stream_path}")
    produced = run_cli("cdc-topic", "produce", "t1", "--path", str(pipeline.stream_path), input=b"a\nb\n")
    assert produced.returncode == 0
    out = run_cli("cdc-topic", "consume", "t1", "-B", "-d", "--path", str(pipeline.stream_path))
    assert out.stdout == b"a\nb\n"
    both = run_cli("cdc-topic", "list", "--path", "x", "--endpoint", "h:1")
    assert both.returncode == 2 and one_line_error(both) == "error: give only one of --profile, --path and --endpoint"


def test_checks_name_missing_privileges_with_the_grant(pipeline):
    for server in (pipeline.leader, pipeline.follower):
        server.execute("DROP USER IF EXISTS 'weak'@'%'", "CREATE USER 'weak'@'%' IDENTIFIED BY 'pw'",
                       "GRANT SELECT ON *.* TO 'weak'@'%'")
    producer = pipeline.producer_profile()
    producer.write_text(producer.read_text().replace('user = "root"\npassword = ""', 'user = "weak"\npassword = "pw"'))
    result = run_cli("cdc-producer", "--check", str(producer))
    assert result.returncode == 4
    assert result.stderr.decode().splitlines() == [
        "FAIL user 'weak' lacks REPLICATION SLAVE, REPLICATION CLIENT: "
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'weak'@'%'"
    ]
    run_cli("cdc-topic", "create", "rust-mysql-cdc", "--path", str(pipeline.stream_path))
    consumer = pipeline.consumer_profile()
    consumer.write_text(consumer.read_text().replace('user = "root"\npassword = ""', 'user = "weak"\npassword = "pw"'))
    result = run_cli("cdc-consumer", "--check", str(consumer))
    assert result.returncode == 4
    [line] = [line for line in result.stderr.decode().splitlines() if not line.startswith("WARN ")]
    assert line.startswith("FAIL cannot use the checkpoint table mysql_cdc.consumer_offsets: Access denied for user 'weak'@")
    assert line.endswith("GRANT ALL ON `mysql_cdc`.* TO the consumer's user")
    ok = run_cli("cdc-consumer", "--check", str(pipeline.consumer_profile()))
    assert ok.returncode == 0
    [(version, user)] = pipeline.follower.query("SELECT VERSION(), CURRENT_USER()")
    account = "'{}'@'{}'".format(*user.split("@"))
    assert ok.stderr.decode().strip() == (
        f"ok: the follower at 127.0.0.1:{pipeline.follower.port} is ready; rows by BINLOG replay of a MariaDB "
        f"leader's events ([replay] rows = \"auto\", follower MariaDB {version.split('-')[0]}, {account} may run "
        "BINLOG); as SQL where an event has none")


def test_binlog_replay_without_the_privilege_falls_back_to_sql_or_refuses_to_start(pipeline):
    pipeline.follower.execute("DROP USER IF EXISTS 'norep'@'%'", "CREATE USER 'norep'@'%' IDENTIFIED BY 'pw'",
                              "GRANT ALL ON `mysql_cdc`.* TO 'norep'@'%'", "GRANT ALL ON `flvDb`.* TO 'norep'@'%'")
    run_cli("cdc-topic", "create", "rust-mysql-cdc", "--path", str(pipeline.stream_path))
    grant = "GRANT BINLOG REPLAY ON *.* TO 'norep'@'%'"
    auto = pipeline.consumer_profile(name="auto.toml")
    auto.write_text(auto.read_text().replace('user = "root"\npassword = ""', 'user = "norep"\npassword = "pw"'))
    check = run_cli("cdc-consumer", "--check", str(auto))
    assert check.returncode == 0
    assert check.stderr.decode().splitlines() == [
        "WARN CREATE TRIGGER and CREATE FUNCTION will fail (error 1419: the follower logs binlogs and 'norep'@'%' "
        "lacks SUPER): SET GLOBAL log_bin_trust_function_creators = ON on the follower (and in its my.cnf or the "
        "service's parameter group)",
        "WARN views, triggers, events and routines whose DEFINER is another account will fail (error 1227: "
        "'norep'@'%' lacks SET USER and SUPER): set [replay] definer = \"consumer\", or GRANT SET USER ON *.* TO "
        "'norep'@'%'",
        f"ok: the follower at 127.0.0.1:{pipeline.follower.port} is ready; rows as SQL, inserts in bulk (the follower user "
        f"'norep'@'%' may not run BINLOG; {grant} for exact replay of tables with triggers or system versioning)"]
    binlog = pipeline.consumer_profile(name="binlog.toml", extra='[replay]\nrows = "binlog"')
    binlog.write_text(binlog.read_text().replace('user = "root"\npassword = ""', 'user = "norep"\npassword = "pw"'))
    refused = f'[replay] rows = "binlog", but the follower user \'norep\'@\'%\' may not run BINLOG statements: {grant} ' \
              'on the follower (or set rows = "auto" to fall back to SQL)'
    check = run_cli("cdc-consumer", "--check", str(binlog))
    assert check.returncode == 4 and check.stderr.decode().splitlines() == [f"FAIL {refused}"]
    result = run_cli("cdc-consumer", str(binlog))
    assert result.returncode == 4 and one_line_error(result) == f"error: {refused}"
    pipeline.follower.execute(grant)
    assert run_cli("cdc-consumer", "--check", str(binlog)).returncode == 0


def test_check_names_what_a_managed_followers_user_needs(pipeline):
    """A managed service's admin user (DML and DDL, no SUPER, SET USER or BINLOG REPLAY): --check names, before
    anything is applied, the setting and the privileges each kind of statement will need."""
    pipeline.follower.execute("DROP USER IF EXISTS 'admin'@'%'", "CREATE USER 'admin'@'%' IDENTIFIED BY 'pw'",
                              "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, CREATE VIEW, "
                              "SHOW VIEW, EXECUTE ON *.* TO 'admin'@'%'")
    run_cli("cdc-topic", "create", "rust-mysql-cdc", "--path", str(pipeline.stream_path))
    profile = pipeline.consumer_profile(extra='[replay]\ndefiner = "consumer"')
    profile.write_text(profile.read_text().replace('user = "root"\npassword = ""', 'user = "admin"\npassword = "pw"'))
    check = run_cli("cdc-consumer", "--check", str(profile))
    assert check.returncode == 0
    assert check.stderr.decode().splitlines()[:2] == [
        "WARN CREATE TRIGGER and CREATE FUNCTION will fail (error 1419: the follower logs binlogs and 'admin'@'%' "
        "lacks SUPER): SET GLOBAL log_bin_trust_function_creators = ON on the follower (and in its my.cnf or the "
        "service's parameter group)",
        "WARN 'admin'@'%' lacks TRIGGER (for CREATE/DROP TRIGGER), CREATE ROUTINE (for CREATE PROCEDURE/FUNCTION), "
        "ALTER ROUTINE (for ALTER/DROP PROCEDURE/FUNCTION), EVENT (for CREATE/ALTER/DROP EVENT): GRANT TRIGGER, CREATE "
        "ROUTINE, ALTER ROUTINE, EVENT ON *.* TO 'admin'@'%' if the leader uses them"]
    pipeline.follower.execute("GRANT TRIGGER, CREATE ROUTINE, ALTER ROUTINE, EVENT ON *.* TO 'admin'@'%'",
                              "SET GLOBAL log_bin_trust_function_creators = ON")
    try:
        check = run_cli("cdc-consumer", "--check", str(profile))
    finally:
        pipeline.follower.execute("SET GLOBAL log_bin_trust_function_creators = OFF")
    assert check.returncode == 0
    assert [line.split(";")[0] for line in check.stderr.decode().splitlines()] == [
        f"ok: the follower at 127.0.0.1:{pipeline.follower.port} is ready"]


def test_check_without_a_stream_still_names_every_other_problem(pipeline):
    """--check used to stop at the missing stream (one error line, exit 2), hiding the follower's problems."""
    pipeline.follower.execute("DROP USER IF EXISTS 'norep'@'%'", "CREATE USER 'norep'@'%' IDENTIFIED BY 'pw'",
                              "GRANT ALL ON `mysql_cdc`.* TO 'norep'@'%'")
    binlog = pipeline.consumer_profile(extra='[replay]\nrows = "binlog"')
    binlog.write_text(binlog.read_text().replace('user = "root"\npassword = ""', 'user = "norep"\npassword = "pw"'))
    check = run_cli("cdc-consumer", "--check", str(binlog))
    assert (check.returncode, check.stderr.decode().splitlines()) == (4, [
        "FAIL [replay] rows = \"binlog\", but the follower user 'norep'@'%' may not run BINLOG statements: GRANT BINLOG "
        "REPLAY ON *.* TO 'norep'@'%' on the follower (or set rows = \"auto\" to fall back to SQL)",
        f"FAIL no embedded stream at {pipeline.stream_path}: check [stream] path (cdc-topic: --path), or start cdc-producer "
        "first to create it"])


def test_server_id_of_the_leader_is_refused(pipeline):
    [(leader_id,)] = pipeline.leader.query("SELECT @@server_id")
    profile = pipeline.producer_profile()
    profile.write_text(profile.read_text().replace("server_id = 5401", f"server_id = {leader_id}"))
    result = run_cli("cdc-producer", str(profile))
    assert result.returncode == 4
    assert result.stderr.decode().splitlines() == [
        "error: the leader is not ready for CDC:",
        f"  - [database] server_id = {leader_id} is the leader's own server_id: choose another number",
    ]
    assert not (pipeline.stream_path / "stream.db").exists()


def test_skip_bad_records_parks_them_on_a_dead_letter_topic(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY)")
    produce(pipeline, [row_event(0, "pet", 0, True, 1), "not json at all", row_event(2, "pet", 0, True, 3)])
    from harness import Cli, wait_for

    consumer = Cli(["cdc-consumer", "--skip-bad-records", str(pipeline.consumer_profile())])
    pipeline.procs.append(consumer)
    wait_for(lambda: pipeline.checkpoint() == 3, 30, "the consumer to pass the bad record")
    assert pipeline.follower.rows("flvDb", "pet") == [(1,), (3,)]
    assert "skipped bad record at offset 1 (not JSON: " in consumer.wait_line("skipped bad record")
    assert consumer.stop() == 0
    dead = run_cli("cdc-topic", "consume", "rust-mysql-cdc-dead-letter", "-B", "-d", "-k", "--path", str(pipeline.stream_path))
    assert dead.stdout == b"[rust-mysql-cdc@1] not json at all\n"


def test_row_over_the_followers_max_allowed_packet(pipeline):
    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY, b LONGBLOB)",
                              "SET GLOBAL max_allowed_packet = 1048576")
    try:
        blob = {"Blob": base64.b64encode(b"x" * 600_000).decode()}  # sent as hex: 1.2 MB
        produce(pipeline, [json.dumps({
            "uri": "flv://mysql-srv1/flvDb/pet", "sequence": 0, "txn": {"id": "0-1-5", "index": 0, "last": True},
            "columns": ["id", "b"], "pk": ["id"], "operation": {"Add": {"rows": [{"cols": [{"SignedInteger": 1}, blob]}]}},
        })])
        result = run_cli("cdc-consumer", str(pipeline.consumer_profile()))
    finally:
        pipeline.follower.execute("SET GLOBAL max_allowed_packet = 1073741824")
    assert result.returncode == 5
    assert one_line_error(result) == (
        "error: Add on flvDb.pet failed at offset 0, transaction 0-1-5: a statement of 1,200,060 bytes is over the "
        "follower's max_allowed_packet (1,048,576 bytes) (MySQL error 1153); raise max_allowed_packet on the follower "
        "(SET GLOBAL and its my.cnf) and restart; nothing of the transaction was applied"
    )
    assert "lost the follower" not in result.stderr.decode()
    assert pipeline.follower.rows("flvDb", "pet") == []
    assert pipeline.checkpoint() is None


def test_account_statements_are_skipped_by_default_and_never_show_a_password(pipeline):
    # No database filter: account statements belong to no database (include_dbs leaves them out).
    producer = pipeline.start_producer(pipeline.producer_profile(filters=""))
    consumer = pipeline.start_consumer(pipeline.consumer_profile(filters=""))
    pipeline.leader.execute("DROP USER IF EXISTS 'skipme'@'%'", "CREATE DATABASE flvDb",
                            "CREATE USER 'skipme'@'%' IDENTIFIED BY 'very-secret-pw'",
                            "GRANT SELECT ON flvDb.* TO 'skipme'@'%'", "CREATE TABLE flvDb.t (id INT PRIMARY KEY)",
                            "INSERT INTO flvDb.t VALUES (1)")
    pipeline.wait_synced()
    assert pipeline.follower.rows("flvDb", "t") == [(1,)]
    assert pipeline.follower.query("SELECT COUNT(*) FROM mysql.user WHERE User = 'skipme'") == [(0,)]
    skipped = [line for line in consumer.lines if line.startswith("skipped account statement")]
    assert [line.split(": ", 1)[1] for line in skipped] == [
        f"{verb} 'skipme'@'%' ([replay] accounts = \"skip\")" for verb in ("DROP USER", "CREATE USER", "GRANT")]
    assert consumer.stop() == 0 and producer.stop() == 0
    # (6 transactions: the skipped account statements are passed like applied ones, the checkpoint past them)
    assert consumer.lines[-1] == ("stopped: applied 6 transactions (1 rows), skipped 0 repeated, 3 account "
                                  "statements skipped; next offset 6")
    assert "very-secret-pw" not in consumer.stderr + producer.stderr
    assert b"very-secret-pw" not in b"".join(f.read_bytes() for f in pipeline.stream_path.glob("stream.db*"))


def test_disk_full_stops_the_producer_naming_the_cause_and_a_restart_resumes_exactly(pipeline):
    """The stream's disk fills up (a 1 MiB tmpfs under [stream] path): the producer stops with one line
    naming the cause and the fix, not SQLite's follow-up "cannot rollback"; with space again, a restart
    publishes every transaction once, and the follower equals the leader."""
    import subprocess

    from harness import Cli, wait_for

    pipeline.stream_path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(pipeline.stream_path)],
                             capture_output=True)
    if mounted.returncode != 0:
        import pytest

        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        pipeline.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.t (id INT PRIMARY KEY, v LONGTEXT)")
        producer = pipeline.start_producer()
        inserted = 0
        while producer.exit_code() is None and inserted < 1000:
            inserted += 1
            pipeline.leader.execute(f"INSERT INTO flvDb.t VALUES ({inserted}, REPEAT('x', 20000))")
        wait_for(lambda: producer.exit_code() is not None, 30, "the producer to stop on the full disk")
        assert producer.exit_code() == 3
        assert "Traceback" not in producer.stderr
        assert [line for line in producer.lines if line.startswith("error:")] == [
            f"error: cannot append to topic 'rust-mysql-cdc': no space left under the stream's path "
            f"{pipeline.stream_path}; free space there and start again (the stream keeps every append it "
            "acknowledged)"]
        pipeline.leader.execute("INSERT INTO flvDb.t VALUES (0, 'while stopped')")

        subprocess.run(["mount", "-o", "remount,size=64m", str(pipeline.stream_path)], check=True)
        restarted = Cli(["cdc-producer", str(pipeline.producer_profile())])
        pipeline.procs.append(restarted)
        restarted.wait_line("streaming from")
        pipeline.wait_published()
        ids = [r["cols"][0]["SignedInteger"] for e in pipeline.events() if "Add" in e["operation"] for r in e["operation"]["Add"]["rows"]]
        assert len(ids) == len(set(ids)) and sorted(ids) == [r[0] for r in pipeline.leader.query("SELECT id FROM flvDb.t ORDER BY id")]
        pipeline.start_consumer()
        pipeline.wait_applied()
        assert pipeline.follower.rows("flvDb", "t") == pipeline.leader.rows("flvDb", "t")
        assert restarted.stop() == 0
    finally:
        pipeline.close()
        subprocess.run(["umount", "-l", str(pipeline.stream_path)], check=True)
