"""The tutorial and the CLIs on the Fluvio backend (tests/fluvio_server.py), held against the embedded backend.

Each test uses its own topic (`[stream] topic`) on the session's Fluvio test server, or on the cluster at
FLUVIO_ENDPOINT=host:port when set; the byte-for-byte `cdc-topic` test, the SIGKILL test and the reconnect
test always start a private test server (one lists all topics, the others freeze the server). Topics are
read back with FluvioStream in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from conftest_fluvio import FluvioServerProcess
from harness import BIN, Cli, free_port, run_cli, wait_for
from test_tutorial import EXPECTED_OPERATIONS, EXPECTED_PET, STATEMENTS, run_sql

from cdc_stream.topics.base import Record, TopicError
from cdc_stream.topics.embedded import EmbeddedStream
from cdc_stream.topics.fluvio import FluvioStream


class FluvioPipeline:
    """Profiles and observations of one pipeline whose topic lives on a Fluvio (test) server."""

    def __init__(self, pipeline, endpoint: str, topic: str) -> None:
        self.p, self.endpoint, self.topic = pipeline, endpoint, topic
        self._stream: FluvioStream | None = None

    def extra(self, topic: str | None = None) -> str:
        return f'backend = "fluvio"\nfluvio_endpoint = "{self.endpoint}"\ntopic = "{topic or self.topic}"'

    def producer_profile(self, topic: str | None = None, name: str = "fluvio-producer.toml") -> Path:
        return self.p.producer_profile(extra=self.extra(topic), name=name)

    def consumer_profile(self, topic: str | None = None, name: str = "fluvio-consumer.toml") -> Path:
        return self.p.consumer_profile(extra=self.extra(topic), name=name)

    @property
    def stream(self) -> FluvioStream:
        if self._stream is None:
            self._stream = FluvioStream(endpoint=self.endpoint)
        return self._stream

    def records(self, topic: str | None = None) -> list[Record]:
        name = topic or self.topic
        if not self.stream.exists(name):
            return []
        t = self.stream.topic(name)
        records: list[Record] = []
        while batch := t.read(len(records), max_records=100_000):
            assert [r.offset for r in batch] == list(range(len(records), len(records) + len(batch)))
            records += batch
        return records

    def lines(self, topic: str | None = None) -> list[bytes]:
        return [r.value for r in self.records(topic)]

    def events(self, topic: str | None = None) -> list[dict]:
        return [json.loads(v) for v in self.lines(topic)]

    def last_event(self, topic: str | None = None) -> dict:
        name = topic or self.topic
        last = self.stream.topic(name).last_record() if self.stream.exists(name) else None
        return json.loads(last.value) if last else {}

    def end_offset(self, topic: str | None = None) -> int:
        name = topic or self.topic
        return self.stream.topic(name).end_offset() if self.stream.exists(name) else 0

    def wait_published(self, timeout: float = 30.0, topic: str | None = None) -> None:
        want = self.p.leader.gtid()
        wait_for(lambda: self.last_event(topic).get("gtid_set") == want, timeout,
                 f"the producer to publish up to {want} on Fluvio")

    def wait_applied(self, timeout: float = 30.0, topic: str | None = None) -> None:
        name = topic or self.topic
        wait_for(lambda: self.p.checkpoint(name) == self.end_offset(name), timeout,
                 "the consumer to reach the end of the Fluvio topic")

    def wait_synced(self, timeout: float = 30.0, topic: str | None = None) -> None:
        self.wait_published(timeout, topic)
        self.wait_applied(timeout, topic)

    def close(self, delete: bool = False) -> None:
        if self._stream is not None:
            if delete:  # this test's topics: cdc-<id> and cdc-<id>-<suffix>
                for name in [t for t, _ in self._stream.list_topics() if t.startswith(self.topic)]:
                    self._stream.admin.delete_topic(name)
            self._stream.close()


@pytest.fixture
def fluvio(pipeline, request) -> Iterator[FluvioPipeline]:
    endpoint = os.environ.get("FLUVIO_ENDPOINT") or request.getfixturevalue("fluvio_endpoint")
    f = FluvioPipeline(pipeline, endpoint, f"cdc-{uuid.uuid4().hex[:12]}")
    yield f
    for cli in pipeline.procs:  # nothing may still write to the topics
        if cli.proc.poll() is None:
            cli.kill()
    f.close(delete=True)


def run_together(*commands: list[str], input: bytes | None = None, timeout: float = 60.0,
                 env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """harness.run_cli for several commands at once (interpreter start-up dominates on a busy machine)."""
    procs = [subprocess.Popen([str(BIN / args[0]), *args[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200", **(env or {})})
             for args in commands]
    results = []
    try:
        for args, proc in zip(commands, procs):
            out, err = proc.communicate(input, timeout=timeout)
            results.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def no_traceback(*clis: Cli) -> None:
    for cli in clis:
        assert "Traceback" not in cli.stderr, cli.stderr


def stop_all(*clis: Cli) -> None:
    """SIGTERM each CLI: each must stop cleanly (exit 0) without a traceback."""
    for cli in clis:
        code = cli.stop()
        assert code == 0, f"{cli.args[0]} exited {code}: {cli.stderr}"
    no_traceback(*clis)


def test_tutorial_on_fluvio_gives_the_embedded_events_and_an_exact_follower(fluvio):
    p = fluvio.p
    embedded_profile = p.producer_profile(name="embedded-producer.toml")
    embedded_profile.write_text(embedded_profile.read_text().replace("server_id = 5401", "server_id = 5402"))
    producer = p.start_producer(fluvio.producer_profile())
    assert "next sequence 0" in producer.wait_line(f"to topic '{fluvio.topic}' (Fluvio at {fluvio.endpoint})")
    embedded = p.start_producer(embedded_profile)  # reads the same binlog events into the embedded log
    consumer = p.start_consumer(fluvio.consumer_profile())
    assert f"applying topic '{fluvio.topic}' (Fluvio at {fluvio.endpoint}) from offset 0" in consumer.wait_line(
        "applying topic")
    run_sql(p.leader, STATEMENTS)
    fluvio.wait_synced()
    p.wait_published()

    lines = fluvio.lines()
    events = [json.loads(line) for line in lines]
    assert [e["operation"] for e in events] == EXPECTED_OPERATIONS
    assert [e["sequence"] for e in events] == list(range(9))
    assert all(e["txn"] == {"id": e["gtid"], "index": 0, "last": True} for e in events)
    assert events[-1]["gtid_set"] == p.leader.gtid()
    # Both producers decoded the same binlog events, so not even ts, gtid or bn_file may differ.
    with EmbeddedStream(p.stream_path) as stream:
        embedded_records = stream.topic("rust-mysql-cdc").read(0, max_records=100)
    assert lines == [r.value for r in embedded_records]
    assert [r.key for r in fluvio.records()] == [r.key for r in embedded_records] == [
        e["gtid"].encode() for e in events]

    assert p.follower.rows("flvDb", "pet") == EXPECTED_PET == p.leader.rows("flvDb", "pet")
    assert p.checkpoint(fluvio.topic) == 9

    # cdc-topic prints the same bytes from both backends.
    for args in (["-B", "-d"], ["-B", "-d", "-k"], ["-T", "2", "-d", "-k"]):
        on_fluvio, on_embedded = run_together(
            ["cdc-topic", "consume", fluvio.topic, *args, "--endpoint", fluvio.endpoint],
            ["cdc-topic", "consume", "rust-mysql-cdc", *args, "--path", str(p.stream_path)])
        assert on_fluvio.returncode == on_embedded.returncode == 0, on_fluvio.stderr
        assert on_fluvio.stdout == on_embedded.stdout, args
        assert on_fluvio.stderr.decode().replace(fluvio.topic, "rust-mysql-cdc") == on_embedded.stderr.decode()
    assert on_fluvio.stdout.decode().splitlines() == [f"[{e['gtid']}] {line.decode()}"
                                                      for e, line in zip(events[-2:], lines[-2:])]

    stop_all(producer, embedded, consumer)


def test_restart_on_fluvio_resumes_from_the_topic_tail(fluvio):
    p = fluvio.p
    producer = p.start_producer(fluvio.producer_profile())
    consumer = p.start_consumer(fluvio.consumer_profile())
    run_sql(p.leader, STATEMENTS[:5])  # up to the two inserts
    fluvio.wait_synced()
    stop_all(producer, consumer)

    run_sql(p.leader, ["USE flvDb"] + STATEMENTS[5:7])  # UPDATE and ALTER while both are down

    producer = p.start_producer(fluvio.producer_profile())
    assert "next sequence 4" in producer.wait_line("next sequence")
    consumer = p.start_consumer(fluvio.consumer_profile())
    assert "from offset 4" in consumer.wait_line("applying topic")
    run_sql(p.leader, ["USE flvDb"] + STATEMENTS[7:])
    fluvio.wait_synced()

    events = fluvio.events()
    assert [e["operation"] for e in events] == EXPECTED_OPERATIONS
    assert [e["sequence"] for e in events] == list(range(9))
    assert len({e["gtid"] for e in events}) == 9
    assert p.follower.rows("flvDb", "pet") == EXPECTED_PET
    assert p.checkpoint(fluvio.topic) == 9
    stop_all(producer, consumer)


# ------------------------------------------------------------------ cdc-topic, byte for byte

LINES = [
    '{"uri":"flv://mysql-srv1/flvDb","sequence":0,"operation":{"Query":"CREATE DATABASE flvDb"}}',
    "plain text with\ttab and trailing spaces   ",
    "ünïcødé ключ 鍵 🐟",
    "[brackets] look like a key",
    "x" * 5000,
]


@pytest.mark.server  # a Fluvio test server of its own
def test_cdc_topic_prints_the_same_bytes_on_fluvio_and_embedded(tmp_path):
    embedded = ["--path", str(tmp_path / "stream")]
    with FluvioServerProcess() as server:  # private: `list` must show only this test's topics
        on = {"fluvio": ["--endpoint", server.endpoint], "embedded": embedded}

        def both(*args: str, input: bytes | None = None) -> dict[str, subprocess.CompletedProcess]:
            results = dict(zip(on, run_together(*[["cdc-topic", *args, *where] for where in on.values()], input=input)))
            fl, emb = results["fluvio"], results["embedded"]
            assert (fl.returncode, fl.stdout, fl.stderr) == (emb.returncode, emb.stdout, emb.stderr), args
            return results

        assert both("create", "events")["fluvio"].stderr == b'topic "events" created\n'
        assert both("create", "empty")["fluvio"].returncode == 0
        text = "\n".join(LINES).encode() + b"\n"
        assert both("produce", "events", input=text)["fluvio"].stderr == b"appended 5 records to 'events'\n"
        both("produce", "events", input=b"sixth\nseventh\n")
        everything = both("consume", "events", "-B", "-d")["fluvio"]
        assert everything.stdout == text + b"sixth\nseventh\n"
        assert everything.stderr == b"Consuming records from 'events' starting from the beginning of log\n"
        keyed = both("consume", "events", "-B", "-d", "-k")["fluvio"]
        assert keyed.stdout.splitlines() == [b"[null] " + line for line in everything.stdout.splitlines()]
        assert both("consume", "events", "-T", "2", "-d", "-k")["fluvio"].stdout == b"[null] sixth\n[null] seventh\n"
        assert both("consume", "events", "--start", "4", "-d")["fluvio"].stdout.startswith(b"x" * 5000 + b"\nsixth")
        assert both("consume", "events", "-d")["fluvio"].stdout == b""  # from the end: nothing new
        listing = both("list")["fluvio"]
        assert listing.returncode == 0
        assert listing.stdout.decode().split() == ["NAME", "RECORDS", "empty", "0", "events", "7"]

        # The cluster named by a profile of the Fluvio config file, as `fluvio -P local ...` would use.
        config = tmp_path / "fluvio-config"
        config.write_text(f'version = "2.0"\ncurrent_profile = "local"\n[profile.local]\ncluster = "local"\n'
                          f'[cluster.local]\nendpoint = "{server.endpoint}"\n')
        by_profile, keyed_by_profile = run_together(
            ["cdc-topic", "list", "--fluvio-profile", "local"],
            ["cdc-topic", "consume", "events", "-B", "-d", "-k", "--fluvio-profile", "local"],
            env={"FLV_PROFILE_PATH": str(config)})
        assert (by_profile.returncode, by_profile.stdout) == (0, listing.stdout)
        assert (keyed_by_profile.returncode, keyed_by_profile.stdout) == (0, keyed.stdout)

        # A missing topic: the same exit code, a message naming where it was looked for.
        missing = dict(zip(on, run_together(*[["cdc-topic", "consume", "nope", "-B", "-d", *where]
                                               for where in on.values()])))
        assert missing["fluvio"].returncode == missing["embedded"].returncode == 2
        assert missing["fluvio"].stderr.decode() == (
            f"error: topic 'nope' does not exist on Fluvio at {server.endpoint}; "
            "create it first (e.g. `fluvio topic create nope`)\n")

        # Continuous mode: records appended later are printed as they arrive; SIGTERM ends it cleanly.
        follow = LineReader(["cdc-topic", "consume", "events", "-T", "1", "--endpoint", server.endpoint])
        try:
            follow.wait_lines([b"seventh"])
            assert run_cli("cdc-topic", "produce", "events", "--endpoint", server.endpoint,
                           input=b"eighth\nninth\n").returncode == 0
            follow.wait_lines([b"seventh", b"eighth", b"ninth"])
            follow.proc.send_signal(signal.SIGTERM)
            assert follow.proc.wait(timeout=20) == 0
        finally:
            follow.close()
        assert follow.lines == [b"seventh", b"eighth", b"ninth"]
        assert follow.stderr() == "Consuming records from 'events' starting from 1 records from the end of log\n"


class LineReader:
    """A CLI whose stdout is collected line by line as it is printed."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([str(BIN / args[0]), *args[1:]], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.lines: list[bytes] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip(b"\n"))

    def wait_lines(self, expected: list[bytes], timeout: float = 20.0) -> None:
        wait_for(lambda: self.lines == expected, timeout, f"{expected} on stdout (got {self.lines})")

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._thread.join(5)


# ------------------------------------------------------------------ unreachable endpoints




@pytest.mark.parametrize("kind", ["silent", "nothing listening"])
def test_unreachable_fluvio_is_one_line_naming_the_endpoint(pipeline, kind, request):
    """cdc-producer, cdc-consumer and cdc-topic (run at once, to keep the module fast) each print one line
    naming the endpoint and exit 3. The bound on the CLIs includes three interpreters starting on a
    loaded 2-core machine; the bound of the probe itself is checked in this process meanwhile."""
    if kind == "silent":
        endpoint, reason, probe_bound = request.getfixturevalue("silent_endpoint"), "no answer within 5 s", 5.0
    else:
        endpoint, reason, probe_bound = f"127.0.0.1:{free_port()}", "connection refused", 0.0
    f = FluvioPipeline(pipeline, endpoint, "rust-mysql-cdc")
    commands = {
        "cdc-producer": [str(f.producer_profile())],
        "cdc-consumer": [str(f.consumer_profile())],
        "cdc-topic": ["consume", "rust-mysql-cdc", "-B", "-d", "--endpoint", endpoint],
    }
    expected = (f"cannot reach Fluvio at {endpoint}: {reason}; "
                "check [stream] fluvio_endpoint / fluvio_profile and that the cluster is running")
    started = time.monotonic()
    procs = {cmd: subprocess.Popen([str(BIN / cmd), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for cmd, args in commands.items()}
    try:
        with pytest.raises(TopicError) as failure:
            FluvioStream(endpoint=endpoint)
        probe_time = time.monotonic() - started
        assert str(failure.value) == expected
        assert probe_bound <= probe_time < probe_bound + 1.0
        results = {cmd: (*proc.communicate(timeout=30), time.monotonic() - started) for cmd, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    for cmd, (out, err, elapsed) in results.items():
        assert (procs[cmd].returncode, out, err.decode()) == (3, b"", f"error: {expected}\n"), cmd
        assert elapsed < probe_bound + 7.0, (cmd, elapsed)
    assert not pipeline.follower.query("SHOW DATABASES LIKE 'flvDb'")


# ------------------------------------------------------------------ crashes while publishing

ROWS_PER_TXN = 10
PAD = 3000
# 250 events of ~6 KB (1.5 MB): more than the client's largest produce request (1 MiB), so the append is
# always several requests. Against a frozen server the client sends the first (the first 16 KiB batch,
# as soon as it is full) and waits for its answer before sending more.
BIG_ROWS, BIG_PAD = 250, 6000


def load_txn(cur, txn: int, rows: int = ROWS_PER_TXN, pad: int = PAD) -> None:
    cur.execute("BEGIN")
    for n in range(rows):  # one statement per row: one event per row
        cur.execute("INSERT INTO flvDb.load_t VALUES (%s, %s, REPEAT(CHAR(97 + %s %% 26), %s))", (txn, n, n, pad))
    cur.execute("COMMIT")


def copies_per_txn(events: list[dict]) -> Counter:
    """How many times each source transaction starts on the topic (> 1: republished)."""
    return Counter(e["txn"]["id"] for e in events if e["txn"]["index"] == 0)


def test_republished_partial_transaction_is_applied_once(fluvio):
    """A producer that died mid-append left a transaction's first events on the topic (Fluvio appends are not
    atomic): the restarted producer republishes that transaction whole and the follower applies it once."""
    p = fluvio.p
    producer = p.start_producer(fluvio.producer_profile())
    p.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.load_t (txn INT, n INT, pad TEXT)")
    conn = p.leader.connect()
    with conn.cursor() as cur:
        for txn in range(4):
            load_txn(cur, txn)
    conn.close()
    fluvio.wait_published()
    stop_all(producer)
    events = fluvio.events()
    assert len(events) == 2 + 4 * ROWS_PER_TXN

    # The topic a crash during the third transaction's append leaves: its first 5 of 12 events.
    crashed = f"{fluvio.topic}-crashed"
    cut = 2 + 2 * ROWS_PER_TXN + 5
    fluvio.stream.create(crashed)
    fluvio.stream.topic(crashed).append([(r.key, r.value) for r in fluvio.records()[:cut]])
    producer = p.start_producer(fluvio.producer_profile(crashed, name="crashed.toml"))
    streaming = producer.wait_line("next sequence")
    assert f"streaming from gtid {events[cut - 6]['gtid_set']} " in streaming and f"next sequence {cut}" in streaming
    consumer = p.start_consumer(fluvio.consumer_profile(crashed, name="crashed-consumer.toml"))
    fluvio.wait_synced(topic=crashed)

    republished = fluvio.events(crashed)
    assert len(republished) == cut + 2 * ROWS_PER_TXN
    assert [e["sequence"] for e in republished] == list(range(len(republished)))
    strip = lambda e: {k: v for k, v in e.items() if k != "sequence"}
    assert [strip(e) for e in republished[cut:]] == [strip(e) for e in events[cut - 5:]]
    assert copies_per_txn(republished)[events[cut - 5]["gtid"]] == 2
    assert p.follower.rows("flvDb", "load_t") == p.leader.rows("flvDb", "load_t")
    assert len(p.follower.rows("flvDb", "load_t")) == 4 * ROWS_PER_TXN
    assert p.checkpoint(crashed) == len(republished)
    stop_all(producer, consumer)


def test_retried_request_repeating_the_end_of_a_transaction_is_skipped(fluvio):
    """The client retries a produce request whose answer was lost (at-least-once): the SPU may then hold that
    request's records twice. When they were the end of a transaction, the repeat comes after its commit."""
    p = fluvio.p
    producer = p.start_producer(fluvio.producer_profile())
    p.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.load_t (txn INT, n INT, pad TEXT)")
    conn = p.leader.connect()
    with conn.cursor() as cur:
        for txn in range(3):
            load_txn(cur, txn)
    conn.close()
    fluvio.wait_published()
    stop_all(producer)
    records = fluvio.records()
    assert len(records) == 2 + 3 * ROWS_PER_TXN

    retried = f"{fluvio.topic}-retried"
    end_of_second = 2 + 2 * ROWS_PER_TXN
    fluvio.stream.create(retried)
    fluvio.stream.topic(retried).append([(r.key, r.value) for r in records[:end_of_second]
                                         + records[end_of_second - 4:]])  # its last 4 events twice
    consumer = p.start_consumer(fluvio.consumer_profile(retried, name="retried-consumer.toml"))
    end = len(records) + 4
    wait_for(lambda: consumer.proc.poll() is not None or p.checkpoint(retried) == end, 30,
             "the consumer to apply the topic or to stop")
    assert consumer.proc.poll() is None, consumer.stderr
    assert p.follower.rows("flvDb", "load_t") == p.leader.rows("flvDb", "load_t")
    stop_all(consumer)


def bytes_in_flight(pid: int, port: int) -> tuple[int, int]:
    """(bytes process `pid` could not send yet, bytes it sent that the peer has not read) on its TCP
    connections to `port`: its sockets' tx_queue and the peer sockets' rx_queue in /proc/net/tcp."""
    sockets = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            sockets.add(link[8:-1])
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    # fields: sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt uid timeout inode
    port_of = lambda address: int(address.rpartition(":")[2], 16)
    mine = [r for r in rows if r[9] in sockets and port_of(r[2]) == port]
    local_ports = {port_of(r[1]) for r in mine}
    peers = [r for r in rows if port_of(r[1]) == port and port_of(r[2]) in local_ports]
    return (sum(int(r[4].partition(":")[0], 16) for r in mine), sum(int(r[4].partition(":")[2], 16) for r in peers))


def unread_at(port: int) -> int:
    """Bytes received on this machine's TCP sockets listening side `port` that the server has not read yet."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return sum(int(r[4].partition(":")[2], 16) for r in rows if int(r[1].rpartition(":")[2], 16) == port)


def settled_in_flight(pid: int, port: int, settle: float = 0.2, stuck: float = 2.0):
    """A wait_for condition: the producer has bytes in flight to the frozen server, unchanged for `settle` s
    (it waits for an answer, or for room in the socket buffers); returns (unsent, unread).

    Fewer than BIG_PAD bytes count only once unchanged for `stuck` s: the client follows an append with
    a small empty produce request of its own, and when that one reached the server just before the
    freeze, the client sends nothing more until it is answered."""
    seen: list[tuple[tuple[int, int], float]] = []

    def check() -> tuple[int, int] | None:
        counts, now = bytes_in_flight(pid, port), time.monotonic()
        if not seen or seen[-1][0] != counts:
            seen.append((counts, now))
            return None
        waited = now - seen[-1][1]
        big = sum(counts) >= BIG_PAD
        return counts if (big and waited >= settle) or (not big and sum(counts) and waited >= stuck) else None

    return check


def test_producer_sigkilled_while_sending_leaves_no_gap_and_no_duplicate(pipeline):
    """SIGKILL the producer twice in the middle of an append, under a write load: no gap, no duplicate.

    The client sends an append's produce requests microseconds apart, too fast to aim a kill at from
    outside, so each kill is set up: pause the load, let the producer catch up, freeze the private
    Fluvio server (SIGSTOP), commit a 1.5 MB transaction (several produce requests), and kill the
    producer once whole requests of it wait at the frozen server and nothing else is sent yet. On
    SIGCONT the server stores those requests only: a partial transaction, which the restarted producer
    must republish whole, the load running again. (When the client's first request is bigger than
    the socket buffers, a kill would cut it and the server would store nothing; when the client's own
    empty produce request reached the server just before the freeze, nothing of the append is sent:
    those attempts are let through instead.)"""
    with FluvioServerProcess() as server:
        fluvio = FluvioPipeline(pipeline, server.endpoint, "rust-mysql-cdc")
        try:
            _sigkill_under_load(fluvio, server)
        finally:
            fluvio.close()


def _sigkill_under_load(fluvio: FluvioPipeline, server: FluvioServerProcess) -> None:
    p = fluvio.p
    producer = p.start_producer(fluvio.producer_profile())
    consumer = p.start_consumer(fluvio.consumer_profile())
    p.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.load_t (txn INT, n INT, pad TEXT)")
    stop, pause, committed, failure = threading.Event(), threading.Lock(), [], []

    def write_load() -> None:
        try:
            conn = p.leader.connect()
            with conn.cursor() as cur:
                while not stop.is_set():
                    with pause:
                        load_txn(cur, len(committed))
                        committed.append(len(committed))
                    stop.wait(0.02)  # pace the load so the 2-core machine keeps up
            conn.close()
        except pymysql.MySQLError as e:  # pragma: no cover - reported by the assertion below
            failure.append(e)

    writer = threading.Thread(target=write_load, daemon=True)
    writer.start()
    spu_port, big = int(server.spu.rpartition(":")[2]), p.leader.connect()
    kills, big_txns = 0, 0
    try:
        while kills < 2:
            assert big_txns < 12, f"only {kills} of {big_txns} big appends waited at the server with nothing unsent"
            mark = fluvio.end_offset()
            wait_for(lambda mark=mark: fluvio.end_offset() >= mark + 3 * ROWS_PER_TXN, 30,
                     "the producer to publish the load")
            with pause:
                fluvio.wait_published()
                server.process.send_signal(signal.SIGSTOP)
                try:
                    with big.cursor() as cur:
                        big_txns += 1
                        load_txn(cur, -big_txns, BIG_ROWS, BIG_PAD)
                    unsent, unread = wait_for(settled_in_flight(producer.proc.pid, spu_port), 20,
                                              "the producer's big append to wait at the frozen server", interval=0.01)
                    # Only whole requests of the append at the server: the rest of it is not sent yet.
                    if unsent == 0 and unread >= BIG_PAD:
                        producer.proc.send_signal(signal.SIGKILL)
                        producer.proc.wait(timeout=20)
                        kills += 1
                finally:
                    server.process.send_signal(signal.SIGCONT)
                if producer.proc.poll() is None:  # a request cut by full buffers, or the client's empty one: not this time
                    fluvio.wait_published()
                    continue
                wait_for(lambda: unread_at(spu_port) == 0, 20, "the server to read what the producer sent")
                tail = fluvio.last_event()
                assert tail["txn"]["id"] == p.leader.gtid() and not tail["txn"]["last"]  # a partial transaction
            producer = p.start_producer(fluvio.producer_profile())  # the load runs again meanwhile
        mark = fluvio.end_offset()
        wait_for(lambda: fluvio.end_offset() >= mark + 3 * ROWS_PER_TXN, 30, "the producer to publish the load")
    finally:
        stop.set()
        writer.join(30)
        big.close()
    print(f"{kills} kills inside the append of {big_txns} big transactions")
    assert not failure and len(committed) > 6
    fluvio.wait_synced(timeout=60)

    leader_rows = p.leader.rows("flvDb", "load_t")
    assert len(leader_rows) == len(committed) * ROWS_PER_TXN + big_txns * BIG_ROWS
    assert p.follower.rows("flvDb", "load_t") == leader_rows  # sorted, duplicates kept
    events = fluvio.events()
    assert [e["sequence"] for e in events] == list(range(len(events)))
    copies = copies_per_txn(events)
    assert len(copies) == 2 + len(committed) + big_txns  # CREATE DATABASE, CREATE TABLE, the transactions
    republished = [txn for txn, n in copies.items() if n > 1]
    assert len(republished) == kills  # each interrupted append: a partial copy, then the whole transaction
    complete = Counter(e["txn"]["id"] for e in events if e["txn"]["last"])
    assert set(complete) == set(copies) and set(complete.values()) == {1}  # never published whole twice
    for txn in republished:
        assert [e["txn"]["index"] for e in events if e["txn"]["id"] == txn][-BIG_ROWS:] == list(range(BIG_ROWS))
    assert p.checkpoint() == len(events)
    stop_all(producer, consumer)


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat ('T' once SIGSTOP took effect)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


@pytest.mark.parametrize("moment", ["between-requests", "in-stream-fetch"])
def test_consumer_reconnects_after_fluvio_stops_answering(pipeline, moment):
    """A Fluvio server that stops answering mid-run (frozen past the client's 10 s timeout) costs the
    consumer a reconnect, not its life: it says so, waits, and applies what comes after, exactly.

    between-requests: SIGSTOP at any moment; the idle consumer mostly sleeps between its polls, so its
    next request is what goes unanswered. in-stream-fetch: the server stops itself (SIGUSR1, see
    fluvio_server.py) once the consumer's next stream fetch arrived, whose answer the client would
    wait for without end: the read's own deadline must end it."""
    with FluvioServerProcess() as server:
        fluvio = FluvioPipeline(pipeline, server.endpoint, "rust-mysql-cdc")
        try:
            p = fluvio.p
            producer = p.start_producer(fluvio.producer_profile())
            consumer = p.start_consumer(fluvio.consumer_profile())
            p.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.t (id INT PRIMARY KEY, v TEXT)",
                             "INSERT INTO flvDb.t VALUES (1, 'before')")
            fluvio.wait_synced()
            server.process.send_signal(signal.SIGSTOP if moment == "between-requests" else signal.SIGUSR1)
            try:
                wait_for(lambda: process_state(server.process.pid) == "T", 10, "the Fluvio server to stop")
                frozen = time.monotonic()
                lost = consumer.wait_line("lost the stream", timeout=40)
                print(f"the consumer lost the stream {time.monotonic() - frozen:.1f} s after the freeze: {lost}")
            finally:
                server.process.send_signal(signal.SIGCONT)
            where = f"Fluvio read failed for topic 'rust-mysql-cdc' on Fluvio at {server.endpoint}: "
            assert lost.startswith(f"lost the stream ({where}") and "; reconnecting in 0.5s (attempt 1)" in lost
            if moment == "in-stream-fetch":
                assert "timed out (no answer within 10 s)" in lost  # the read's deadline, not the client's
            else:  # the client's request timeout ("Socket io Timed out"), or the fetch's deadline
                assert "timed out" in lost.lower()
            p.leader.execute("INSERT INTO flvDb.t VALUES (2, 'after'), (3, 'after')")
            consumer.wait_line("reconnected: applying", timeout=40)
            fluvio.wait_synced(timeout=60)
            assert consumer.proc.poll() is None and producer.proc.poll() is None
            assert p.follower.rows("flvDb", "t") == p.leader.rows("flvDb", "t") == [(1, "before"), (2, "after"), (3, "after")]
            stop_all(producer, consumer)
        finally:
            fluvio.close()
