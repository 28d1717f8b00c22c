"""Operating both programs (issue 16): /metrics and /healthz, JSON log lines, --status; real servers, real CLIs."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from importlib.metadata import version

from harness import PASSWORD, Cli, free_port, run_cli, wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_tutorial import STATEMENTS, run_sql

WRONG_PASSWORD = "Wr0ng-Pa55word!"  # a secret that must never be printed


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus_client: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def scraped_when(port: int, name: str, want: float, **labels: str):
    """The scraped samples once `name` has the value `want` (None before)."""
    samples = scrape(port)
    return samples if value(samples, name, **labels) == want else None


def start(pipeline, program: str, profile, *args: str, wait: str) -> Cli:
    cli = Cli([program, str(profile), *args])
    pipeline.procs.append(cli)
    cli.wait_line(wait)
    return cli


def test_metrics_count_the_tutorial_exactly_and_lag_goes_to_zero(pipeline):
    pport, cport = free_port(), free_port()
    # The producer's endpoint from its profile, the consumer's from the command line.
    producer = start(pipeline, "cdc-producer", pipeline.producer_profile(extra=f'[metrics]\nlisten = "127.0.0.1:{pport}"'),
                     wait="streaming from")
    consumer = start(pipeline, "cdc-consumer", pipeline.consumer_profile(), "--metrics-listen", f"127.0.0.1:{cport}",
                     wait="applying topic")
    assert f"serving metrics at http://127.0.0.1:{pport}/metrics (health at /healthz)" in producer.lines
    assert f"serving metrics at http://127.0.0.1:{cport}/metrics (health at /healthz)" in consumer.lines
    run_sql(pipeline.leader, STATEMENTS)
    pipeline.wait_synced()

    p = wait_for(lambda: scraped_when(pport, "mysql_cdc_producer_source_lag_seconds", 0.0), 30,
                 "the producer's lag to go to 0 once idle")
    c = wait_for(lambda: scraped_when(cport, "mysql_cdc_consumer_lag_seconds", 0.0), 30,
                 "the consumer's lag to go to 0 once idle")
    build = version("mysql-cdc")
    assert {k: v for k, v in p.items() if k[0].startswith("mysql_cdc_")} == {
        ("mysql_cdc_build_info", (("version", build),)): 1.0,
        ("mysql_cdc_producer_events_total", (("kind", "ddl"),)): 3.0,
        ("mysql_cdc_producer_events_total", (("kind", "insert"),)): 3.0,
        ("mysql_cdc_producer_events_total", (("kind", "update"),)): 2.0,
        ("mysql_cdc_producer_events_total", (("kind", "delete"),)): 1.0,
        ("mysql_cdc_producer_rows_total", ()): 6.0,
        ("mysql_cdc_producer_transactions_total", ()): 9.0,
        ("mysql_cdc_producer_skipped_transactions_total", ()): 0.0,
        ("mysql_cdc_producer_connected", ()): 1.0,
        ("mysql_cdc_producer_reconnects_total", ()): 0.0,
        ("mysql_cdc_producer_source_lag_seconds", ()): 0.0,
        ("mysql_cdc_producer_snapshot_remaining_tables", ()): 0.0,
        ("mysql_cdc_producer_snapshot_remaining_rows", ()): 0.0,
        ("mysql_cdc_producer_position_info", (("file", ""), ("gtid", pipeline.leader.gtid()), ("pos", ""))): 1.0,
    }
    assert {k: v for k, v in c.items() if k[0].startswith("mysql_cdc_")} == {
        ("mysql_cdc_build_info", (("version", build),)): 1.0,
        ("mysql_cdc_consumer_rows_total", (("kind", "insert"),)): 3.0,
        ("mysql_cdc_consumer_rows_total", (("kind", "update"),)): 2.0,
        ("mysql_cdc_consumer_rows_total", (("kind", "delete"),)): 1.0,
        ("mysql_cdc_consumer_transactions_total", ()): 9.0,
        ("mysql_cdc_consumer_skipped_total", ()): 0.0,
        ("mysql_cdc_consumer_dead_letter_total", ()): 0.0,
        ("mysql_cdc_consumer_reconnects_total", ()): 0.0,
        ("mysql_cdc_consumer_stopped", (("offset", ""),)): 0.0,
        ("mysql_cdc_consumer_checkpoint_offset", ()): 9.0,
        ("mysql_cdc_consumer_backlog_records", ()): 0.0,
        ("mysql_cdc_consumer_lag_seconds", ()): 0.0,
    }
    for m in (p, c):  # the standard process metrics
        assert value(m, "process_cpu_seconds_total") > 0 and value(m, "process_resident_memory_bytes") > 0
    assert healthz(pport) == (200, f"ok: following the binlog of the leader at 127.0.0.1:{pipeline.leader.port}\n")
    assert healthz(cport) == (200, f"ok: applying topic 'rust-mysql-cdc' to the follower at "
                                   f"127.0.0.1:{pipeline.follower.port}\n")
    assert producer.stop() == 0 and consumer.stop() == 0


def test_healthz_is_503_while_a_server_is_away_and_200_once_it_is_back(pipeline):
    pport, cport = free_port(), free_port()
    producer = start(pipeline, "cdc-producer", pipeline.producer_profile(), "--metrics-listen", f"127.0.0.1:{pport}",
                     wait="streaming from")
    consumer = start(pipeline, "cdc-consumer", pipeline.consumer_profile(), "--metrics-listen", f"127.0.0.1:{cport}",
                     wait="applying topic")
    run_sql(pipeline.leader, STATEMENTS[:4])
    pipeline.wait_synced()
    leader, follower = f"127.0.0.1:{pipeline.leader.port}", f"127.0.0.1:{pipeline.follower.port}"
    assert healthz(pport) == (200, f"ok: following the binlog of the leader at {leader}\n")

    pipeline.leader.stop()
    try:
        _, body = wait_for(lambda: (h := healthz(pport))[0] == 503 and h, 30, "the producer's /healthz to say 503")
        assert body.startswith(f"reconnecting: lost the leader at {leader} (") and body.endswith(")\n")
        assert "\n" not in body[:-1]
        m = scrape(pport)
        assert value(m, "mysql_cdc_producer_connected") == 0 and value(m, "mysql_cdc_producer_reconnects_total") == 1
    finally:
        pipeline.leader.start()
    wait_for(lambda: healthz(pport)[0] == 200, 60, "the producer's /healthz to say 200 again")
    assert healthz(pport) == (200, f"ok: following the binlog of the leader at {leader}\n")
    assert value(scrape(pport), "mysql_cdc_producer_connected") == 1

    pipeline.follower.stop()
    try:
        run_sql(pipeline.leader, ["USE flvDb", STATEMENTS[4]])  # the consumer meets the stopped follower
        _, body = wait_for(lambda: (h := healthz(cport))[0] == 503 and h, 60, "the consumer's /healthz to say 503")
        assert body.startswith(f"reconnecting: lost the follower at {follower} (")
    finally:
        pipeline.follower.start()
    wait_for(lambda: healthz(cport)[0] == 200, 60, "the consumer's /healthz to say 200 again")
    pipeline.wait_synced(timeout=60)
    m = scrape(cport)
    assert value(m, "mysql_cdc_consumer_reconnects_total") == 1
    # Two inserts, the second one applied once although its first try was lost with the follower.
    assert value(m, "mysql_cdc_consumer_rows_total", kind="insert") == 2
    assert value(m, "mysql_cdc_consumer_transactions_total") == 4
    assert producer.stop() == 0 and consumer.stop() == 0


def bad_records(pipeline) -> None:
    from test_errors import produce, row_event

    pipeline.follower.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY)")
    produce(pipeline, [row_event(0, "pet", 0, True, 1), '{"uri": "flv://x/flvDb/pet", "sequence": 1}',
                       row_event(2, "pet", 0, True, 3)])


def test_consumer_stopped_on_a_malformed_record_stays_up_to_say_so(pipeline):
    bad_records(pipeline)
    port = free_port()
    consumer = start(pipeline, "cdc-consumer", pipeline.consumer_profile(), "--metrics-listen", f"127.0.0.1:{port}",
                     wait="stopped at offset 1; serving metrics until SIGTERM")
    error = ("record at offset 1 of topic 'rust-mysql-cdc' is not a valid change event: missing field 'operation'; "
             "nothing of it was applied and the checkpoint stays before it "
             "(--skip-bad-records moves such records to a dead-letter topic)")
    assert f"error: {error}" in consumer.lines
    m = scrape(port)
    assert value(m, "mysql_cdc_consumer_stopped", offset="1") == 1
    assert value(m, "mysql_cdc_consumer_rows_total", kind="insert") == 1
    assert value(m, "mysql_cdc_consumer_transactions_total") == 1
    assert value(m, "mysql_cdc_consumer_checkpoint_offset") == 1
    assert value(m, "mysql_cdc_consumer_backlog_records") == 2
    assert healthz(port) == (503, f"stopped: {error}\n")
    assert pipeline.follower.rows("flvDb", "pet") == [(1,)]
    assert consumer.stop() == 5  # the failure's exit code, once told to stop
    assert "Traceback" not in consumer.stderr


def test_skipped_bad_records_are_counted(pipeline):
    bad_records(pipeline)
    port = free_port()
    consumer = start(pipeline, "cdc-consumer", pipeline.consumer_profile(), "--skip-bad-records",
                     "--metrics-listen", f"127.0.0.1:{port}", wait="applying topic")
    pipeline.wait_applied()
    m = wait_for(lambda: scraped_when(port, "mysql_cdc_consumer_checkpoint_offset", 3.0), 30, "the checkpoint at 3")
    assert value(m, "mysql_cdc_consumer_dead_letter_total") == 1
    assert value(m, "mysql_cdc_consumer_rows_total", kind="insert") == 2
    assert value(m, "mysql_cdc_consumer_stopped", offset="") == 0
    assert consumer.stop() == 0


def json_lines(text: str, program: str) -> list[dict]:
    """Every stderr line parsed as one JSON object with time, level, program and message; 'time' dropped."""
    out = []
    for line in text.splitlines():
        record = json.loads(line)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record.pop("time")), line
        assert record["program"] == program and record["level"] in ("info", "warning", "error"), line
        assert isinstance(record["message"], str)
        out.append(record)
    return out


def test_json_log_lines_carry_fields_and_never_a_password(pipeline):
    def as_fluvio(text: str) -> str:  # the tutorial's user, whose password is in the profile
        return text.replace('user = "root"\npassword = ""', f'user = "fluvio"\npassword = "{PASSWORD}"')

    producer_profile = pipeline.producer_profile()
    producer_profile.write_text(as_fluvio(producer_profile.read_text()))
    consumer_profile = pipeline.consumer_profile(extra='[logging]\nformat = "json"')
    consumer_profile.write_text(as_fluvio(consumer_profile.read_text()))
    producer = start(pipeline, "cdc-producer", producer_profile, "--log-format", "json", wait="streaming from")
    consumer = start(pipeline, "cdc-consumer", consumer_profile, wait="applying topic")
    run_sql(pipeline.leader, STATEMENTS)
    pipeline.wait_synced()
    assert producer.stop() == 0 and consumer.stop() == 0

    leader, follower = f"127.0.0.1:{pipeline.leader.port}", f"127.0.0.1:{pipeline.follower.port}"
    start_gtid, end_gtid = pipeline.events()[0]["gtid_set"], pipeline.leader.gtid()
    start_gtid = f"{start_gtid.rsplit('-', 1)[0]}-{int(start_gtid.rsplit('-', 1)[1]) - 1}"
    [(leader_version,)] = pipeline.leader.query("SELECT VERSION()")
    stream = f"embedded stream {pipeline.stream_path}"
    assert json_lines(producer.stderr, "cdc-producer") == [
        {"level": "info", "program": "cdc-producer",
         "message": f"snapshot of 0 tables at gtid {start_gtid}; the binlog follows from gtid {start_gtid}",
         "tables": 0, "position": f"gtid {start_gtid}", "stream_from": f"gtid {start_gtid}"},
        {"level": "info", "program": "cdc-producer",
         "message": f"streaming from gtid {start_gtid} of mariadb {leader_version} at {leader} to topic "
                    f"'rust-mysql-cdc' ({stream}), next sequence 0",
         "verb": "streaming from", "position": f"gtid {start_gtid}", "flavor": "mariadb", "version": leader_version,
         "leader": leader, "to": f"to topic 'rust-mysql-cdc' ({stream})", "next_sequence": 0, "reconnected": False},
        {"level": "info", "program": "cdc-producer",
         "message": f"stopped: published 9 transactions (9 events); resume at gtid {end_gtid}",
         "transactions": 9, "events": 9, "rows": 6, "position": f"gtid {end_gtid}"},
    ]
    # The follower user ('fluvio', docker/install.sh) may run BINLOG: rows go by BINLOG replay, and the line says so.
    [(version,)] = pipeline.follower.query("SELECT VERSION()")
    row_path = (f"rows by BINLOG replay of a MariaDB leader's events ([replay] rows = \"auto\", follower MariaDB "
                f"{version.split('-')[0]}, 'fluvio'@'localhost' may run BINLOG); as SQL where an event has none")
    assert json_lines(consumer.stderr, "cdc-consumer") == [
        {"level": "info", "program": "cdc-consumer",
         "message": f"applying topic 'rust-mysql-cdc' ({stream}) from offset 0 to the follower at {follower}; "
                    f"{row_path}",
         "verb": "applying", "topic": "rust-mysql-cdc", "stream": stream, "offset": 0, "follower": follower,
         "row_path": row_path, "reconnected": False, "workers": 1},
        {"level": "info", "program": "cdc-consumer",
         "message": "stopped: applied 9 transactions (6 rows), skipped 0 repeated; next offset 9",
         "transactions": 9, "rows": 6, "skipped": 0, "offset": 9},
    ]

    # A failing connection, traceback included (--debug): one JSON line, and still no password.
    consumer_profile.write_text(consumer_profile.read_text().replace(PASSWORD, WRONG_PASSWORD))
    refused = run_cli("cdc-consumer", str(consumer_profile), "--debug")
    assert refused.returncode == 2
    [line] = json_lines(refused.stderr.decode(), "cdc-consumer")
    assert line.pop("traceback").startswith("Traceback (most recent call last):")
    assert line == {"level": "error", "program": "cdc-consumer", "exit_code": 2,
                    "message": f"the follower at {follower} refused user 'fluvio' (access denied): "
                               "check [database] user and password"}
    gone = free_port()
    producer_profile.write_text(producer_profile.read_text().replace(f"port = {pipeline.leader.port}", f"port = {gone}"))
    unreachable = run_cli("cdc-producer", str(producer_profile), "--log-format", "json", "--debug")
    assert unreachable.returncode == 3
    [line] = json_lines(unreachable.stderr.decode(), "cdc-producer")
    assert line["message"] == (f"cannot reach the leader at 127.0.0.1:{gone}: connection refused; "
                               "check that it is running and [database] ip_or_host/port")
    everything = producer.stderr + consumer.stderr + refused.stderr.decode() + unreachable.stderr.decode()
    assert PASSWORD not in everything and WRONG_PASSWORD not in everything


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def status(program: str, profile, *args: str):
    result = run_cli(program, str(profile), "--status", *args)
    assert "Traceback" not in result.stderr.decode() and result.stderr.decode() == ""
    return result.returncode, result.stdout.decode()


def test_status_table_and_json(pipeline):
    producer_profile, consumer_profile = pipeline.producer_profile(), pipeline.consumer_profile()
    producer = pipeline.start_producer()
    consumer = pipeline.start_consumer()
    run_sql(pipeline.leader, STATEMENTS[:8])  # up to the DELETE
    pipeline.wait_synced()
    assert consumer.stop() == 0
    run_sql(pipeline.leader, ["USE flvDb", *STATEMENTS[8:]])  # two more while the consumer is stopped
    pipeline.wait_published()
    assert producer.stop() == 0

    leader, follower = f"127.0.0.1:{pipeline.leader.port}", f"127.0.0.1:{pipeline.follower.port}"
    stream = f"embedded stream {pipeline.stream_path}"
    events = pipeline.events()
    gtid, applied = pipeline.leader.gtid(), events[6]["gtid_set"]
    [(leader_version,)] = pipeline.leader.query("SELECT VERSION()")

    def written() -> str:
        [(at,)] = pipeline.follower.query(
            "SELECT UNIX_TIMESTAMP(updated_at) FROM mysql_cdc.consumer_offsets WHERE topic = 'rust-mysql-cdc'")
        return utc(float(at))

    # The consumer is 2 records behind.
    code, out = status("cdc-consumer", consumer_profile, "--json")
    state = json.loads(out)
    lag = state.pop("lag_seconds")
    assert code == 0 and lag > 0
    assert state == {
        "topic": "rust-mysql-cdc",
        "follower": {"address": follower, "reachable": True, "error": None},
        "stream": {"address": stream, "reachable": True, "error": None},
        "end_offset": 9,
        "checkpoint": {"next_offset": 7, "sequence": 6, "transaction": applied, "position": applied,
                       "written_at": written()},
        "backlog_records": 2,
        "last_applied_at": utc(events[6]["ts"] / 1000),
    }
    code, out = status("cdc-consumer", consumer_profile)
    lines = out.splitlines()
    assert code == 0 and lines[:6] == [
        f"cdc-consumer {consumer_profile}",
        f"follower    {follower}, reachable",
        f"topic       'rust-mysql-cdc' ({stream}), end offset 9",
        f"checkpoint  offset 7, transaction {applied}, written {written()}",
        f"position    {applied}",
        "backlog     2 records",
    ]
    assert re.fullmatch(rf"lag         [0-9.]+ s \(last applied change from {utc(events[6]['ts'] / 1000)}\)", lines[6])
    assert len(lines) == 7

    # The producer is caught up with the leader.
    code, out = status("cdc-producer", producer_profile)
    assert code == 0 and out.splitlines() == [
        f"cdc-producer {producer_profile}",
        f"leader           {leader}, reachable ({leader_version})",
        f"leader position  {gtid}",
        f"topic            'rust-mysql-cdc' ({stream}), end offset 9, next sequence 9",
        f"resume from      {gtid} (from the topic)",
        "caught up        yes",
        "binlog purged    no",
    ]
    code, out = status("cdc-producer", producer_profile, "--json")
    assert code == 0 and json.loads(out) == {
        "topic": "rust-mysql-cdc",
        "leader": {"address": leader, "reachable": True, "error": None},
        "stream": {"address": stream, "reachable": True, "error": None},
        "leader_version": leader_version, "leader_position": gtid, "end_offset": 9, "next_sequence": 9,
        "resume_from": gtid, "resume_source": "topic", "caught_up": True, "purged": None, "copies": [],
    }

    # Caught up: lag 0.
    consumer = pipeline.start_consumer()
    pipeline.wait_applied()
    assert consumer.stop() == 0
    code, out = status("cdc-consumer", consumer_profile)
    assert code == 0 and out.splitlines() == [
        f"cdc-consumer {consumer_profile}",
        f"follower    {follower}, reachable",
        f"topic       'rust-mysql-cdc' ({stream}), end offset 9",
        f"checkpoint  offset 9, transaction {gtid}, written {written()}",
        f"position    {gtid}",
        "backlog     0 records",
        "lag         0 s (caught up)",
    ]

    # Unreachable parts are shown as such (exit 3), the rest still is.
    gone = free_port()
    for path in (producer_profile, consumer_profile):
        path.write_text(path.read_text().replace(f"port = {pipeline.leader.port}", f"port = {gone}")
                        .replace(f"port = {pipeline.follower.port}", f"port = {gone}"))
    refused = "connection refused; check that it is running and [database] ip_or_host/port"
    code, out = status("cdc-producer", producer_profile)
    assert code == 3 and out.splitlines() == [
        f"cdc-producer {producer_profile}",
        f"leader         127.0.0.1:{gone}, unreachable: cannot reach the leader at 127.0.0.1:{gone}: {refused}",
        f"topic          'rust-mysql-cdc' ({stream}), end offset 9, next sequence 9",
        f"resume from    {gtid} (from the topic)",
        "binlog purged  unknown",
    ]
    code, out = status("cdc-consumer", consumer_profile, "--json")
    assert code == 3 and json.loads(out) == {
        "topic": "rust-mysql-cdc",
        "follower": {"address": f"127.0.0.1:{gone}", "reachable": False,
                     "error": f"cannot reach the follower at 127.0.0.1:{gone}: {refused}"},
        "stream": {"address": stream, "reachable": True, "error": None},
        "end_offset": 9, "checkpoint": None, "backlog_records": None, "last_applied_at": None, "lag_seconds": None,
    }
    missing = pipeline.tmp / "nowhere"
    consumer_profile.write_text(consumer_profile.read_text().replace(str(pipeline.stream_path), str(missing)))
    code, out = status("cdc-consumer", consumer_profile)
    assert code == 3 and out.splitlines()[2] == (
        f"topic       'rust-mysql-cdc' (embedded stream {missing}): no embedded stream at {missing}: "
        "check [stream] path (cdc-topic: --path), or start cdc-producer first to create it")


def test_snapshot_rows_are_counted_per_table(pipeline):
    pipeline.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.pet (id INT PRIMARY KEY)",
                            "INSERT INTO flvDb.pet VALUES (1), (2), (3), (4), (5)")
    port = free_port()
    producer = start(pipeline, "cdc-producer", pipeline.producer_profile(extra="[snapshot]\nchunk_size = 2"),
                     "--metrics-listen", f"127.0.0.1:{port}", wait="streaming from")
    m = scrape(port)
    assert value(m, "mysql_cdc_producer_snapshot_rows_total", table="flvDb.pet") == 5
    assert value(m, "mysql_cdc_producer_snapshot_remaining_tables") == 0
    assert value(m, "mysql_cdc_producer_snapshot_remaining_rows") == 0
    # CREATE DATABASE, DROP TABLE, CREATE TABLE; three chunks of rows; counted as published.
    assert value(m, "mysql_cdc_producer_events_total", kind="ddl") == 3
    assert value(m, "mysql_cdc_producer_events_total", kind="insert") == 3
    assert value(m, "mysql_cdc_producer_rows_total") == 5
    assert producer.stop() == 0


def test_neither_program_runs_a_full_collection_while_it_streams(pipeline):
    """Both programs freeze their start-up objects and collect in larger steps (cdc_stream/collector.py). On
    the SQL path the consumer decodes every row and holds it until its follower commit: with Python's
    default thresholds it ran 12 full collections (~6 ms each) over the benchmark's 120,000 rows."""
    pport, cport = free_port(), free_port()
    producer = start(pipeline, "cdc-producer", pipeline.producer_profile(), "--metrics-listen", f"127.0.0.1:{pport}",
                     wait="streaming from")
    consumer = start(pipeline, "cdc-consumer", pipeline.consumer_profile(extra='[replay]\nrows = "sql"'),
                     "--metrics-listen", f"127.0.0.1:{cport}", wait="applying topic")
    pipeline.leader.execute(
        "CREATE DATABASE flvDb",
        "CREATE TABLE flvDb.t (id INT PRIMARY KEY, label VARCHAR(40), at DATETIME(6), amount DECIMAL(12,2))",
        "INSERT INTO flvDb.t SELECT seq, CONCAT('row ', seq), '2026-11-27' + INTERVAL seq SECOND, seq / 100 "
        "FROM flvDb.seq_1_to_40000")
    pipeline.wait_synced(120)
    assert pipeline.follower.query("SELECT COUNT(*), CAST(SUM(amount) AS CHAR) FROM flvDb.t") == [(40000, "8000200.00")]
    for port in (pport, cport):
        m = scrape(port)
        assert value(m, "python_gc_collections_total", generation="2") == 0, port
    assert producer.stop() == 0 and consumer.stop() == 0
