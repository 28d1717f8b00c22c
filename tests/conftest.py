"""Fixtures: one real MariaDB leader and follower per test session, a fresh pipeline per test.

Also the `server` marker (see SERVER_FIXTURES) and the guard that keeps the other tests off the network.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_fluvio import FluvioServerProcess, fluvio_endpoint, silent_endpoint  # noqa: F401  (Fluvio test fixtures)
from harness import Cli, Server, wait_for
from mysql8_primary import Mysql8PrimaryProcess

from cdc_stream.topics.embedded import EmbeddedStream

TOPIC = "rust-mysql-cdc"

# Fixtures that start a server (MariaDB, the Fluvio test server, the MySQL 8 test primary, Spark's JVM)
# for their test. A test that uses one, directly or through another fixture, is marked `server`;
# `./test.sh -m "not server"` runs the others. A test that starts a server by itself (not through a
# fixture) carries `@pytest.mark.server` (or its module `pytestmark = pytest.mark.server`).
SERVER_FIXTURES = frozenset({
    "leader", "follower",                          # this file: the session's MariaDB pair
    "fluvio_endpoint", "silent_endpoint",          # conftest_fluvio.py: the Fluvio test server
    "compat", "compat_sql", "compat_managed",      # test_compat_matrix*.py: a Differential (three MariaDBs)
    "diff",                                        # test_dump_restore.py: a Differential
    "run_corpus",                                  # test_corpus.py: scripts/corpus.py's servers
    "compressed_leader",                           # test_compressed_binlog.py: its own MariaDB
    "tls_leader",                                  # test_tls.py: its own MariaDB
    "lab",                                         # test_mysql8_primary.py: the MySQL 8 test primary
    "spark",                                       # test_spark_source.py: a Spark session (a JVM)
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `server` every test that uses a fixture of SERVER_FIXTURES (fixturenames is the closure)."""
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


class ServerNeeded(AssertionError):
    """A test not marked `server` tried to reach or start one."""


@pytest.fixture(autouse=True)
def no_server_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked `server` may not connect to a TCP port it did not open itself, nor start a server.

    This keeps the fast subset honest: it runs with no MariaDB, Fluvio or Spark reachable. A socket the
    test (or the code it calls) bound in this process, such as a metrics endpoint it then queries, is
    allowed; anything listening in another process is a server. Child processes (the CLIs) and native
    clients (Fluvio's) are not watched: what they could reach is a server some test started, and starting
    one is refused. (Checked once with `strace -f -e trace=connect` over the whole fast subset: no TCP
    connection but to a port the test itself had bound.)
    """
    if request.node.get_closest_marker("server"):
        return
    own: set[int] = set()
    bind, connect, connect_ex = socket.socket.bind, socket.socket.connect, socket.socket.connect_ex

    def checked_bind(sock: socket.socket, address) -> None:
        bind(sock, address)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            own.add(sock.getsockname()[1])

    def check(sock: socket.socket, address) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[1] not in own:
            raise ServerNeeded(f"{request.node.nodeid} connects to {address[0]}:{address[1]}: "
                               "mark it @pytest.mark.server or add its fixture to SERVER_FIXTURES (tests/conftest.py)")

    def checked_connect(sock: socket.socket, address) -> None:
        check(sock, address)
        connect(sock, address)

    def checked_connect_ex(sock: socket.socket, address) -> int:
        check(sock, address)
        return connect_ex(sock, address)

    def refuse(*args, **kwargs):
        raise ServerNeeded(f"{request.node.nodeid} starts a server: mark it @pytest.mark.server "
                           "or add its fixture to SERVER_FIXTURES (tests/conftest.py)")

    monkeypatch.setattr(socket.socket, "bind", checked_bind)
    monkeypatch.setattr(socket.socket, "connect", checked_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", checked_connect_ex)
    monkeypatch.setattr(Server, "start", refuse)
    monkeypatch.setattr(FluvioServerProcess, "__init__", refuse)
    monkeypatch.setattr(Mysql8PrimaryProcess, "__init__", refuse)


@pytest.fixture(scope="session")
def leader(tmp_path_factory) -> Server:
    server = Server("leader", tmp_path_factory.mktemp("leader")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def follower(tmp_path_factory) -> Server:
    server = Server("follower", tmp_path_factory.mktemp("follower")).start()
    yield server
    server.stop()


class Pipeline:
    """Profiles, processes and observations for one producer -> topic -> consumer pipeline."""

    def __init__(self, tmp: Path, leader: Server, follower: Server):
        self.tmp, self.leader, self.follower = tmp, leader, follower
        self.stream_path = tmp / "stream"
        self.procs: list[Cli] = []

    def producer_profile(self, filters: str = 'include_dbs = ["flvDb"]', extra: str = "", name: str = "producer.toml") -> Path:
        path = self.tmp / name
        path.write_text(
            f"""mysql_resource_name = "mysql-srv1"
[database]
ip_or_host = "127.0.0.1"
port = {self.leader.port}
user = "root"
password = ""
server_id = 5401
[data]
base_path = "{self.tmp}/producer"
[filters]
{filters}
[stream]
path = "{self.stream_path}"
{extra}
"""
        )
        return path

    def consumer_profile(self, filters: str = 'include_dbs = ["flvDb"]', extra: str = "", name: str = "consumer.toml") -> Path:
        path = self.tmp / name
        path.write_text(
            f"""[database]
ip_or_host = "127.0.0.1"
port = {self.follower.port}
user = "root"
password = ""
[data]
base_path = "{self.tmp}/consumer"
[filters]
{filters}
[stream]
path = "{self.stream_path}"
{extra}
"""
        )
        return path

    def start_producer(self, profile: Path | None = None) -> Cli:
        cli = Cli(["cdc-producer", str(profile or self.producer_profile())])
        self.procs.append(cli)
        cli.wait_line("streaming from")
        return cli

    def start_consumer(self, profile: Path | None = None) -> Cli:
        cli = self.start_consumer_waiting(profile)
        cli.wait_line("applying topic")
        return cli

    def start_consumer_waiting(self, profile: Path | None = None) -> Cli:
        """cdc-consumer started, not waited for (it may wait for its topic)."""
        cli = Cli(["cdc-consumer", str(profile or self.consumer_profile())])
        self.procs.append(cli)
        return cli

    def events(self, topic: str = TOPIC) -> list[dict]:
        with EmbeddedStream(self.stream_path) as stream:
            t = stream.topic(topic)
            records = t.read(0, max_records=1_000_000)
            t.close()
        return [json.loads(r.value) for r in records]

    def last_event(self, topic: str = TOPIC) -> dict:
        with EmbeddedStream(self.stream_path) as stream:
            if not stream.exists(topic):
                return {}
            t = stream.topic(topic)
            last = t.last_record()
            t.close()
        return json.loads(last.value) if last else {}

    def end_offset(self, topic: str = TOPIC) -> int:
        with EmbeddedStream(self.stream_path) as stream:
            if not stream.exists(topic):
                return 0
            t = stream.topic(topic)
            end = t.end_offset()
            t.close()
            return end

    def checkpoint(self, topic: str = TOPIC) -> int | None:
        rows = self.follower.query("SELECT next_offset FROM mysql_cdc.consumer_offsets WHERE topic=%s", (topic,))
        return rows[0][0] if rows else None

    def wait_published(self, timeout: float = 30.0, topic: str = TOPIC) -> None:
        """Until the topic's last event is the leader's latest transaction."""
        want = self.leader.gtid()
        wait_for(lambda: self.last_event(topic).get("gtid_set") == want, timeout,
                 f"the producer to publish up to {want}")

    def wait_applied(self, timeout: float = 30.0, topic: str = TOPIC) -> None:
        """Until the consumer's checkpoint reaches the end of the topic."""
        wait_for(lambda: self.checkpoint(topic) == self.end_offset(topic), timeout, "the consumer to reach the end of the topic")

    def wait_synced(self, timeout: float = 30.0, topic: str = TOPIC) -> None:
        self.wait_published(timeout, topic)
        self.wait_applied(timeout, topic)

    def close(self) -> None:
        for p in self.procs:
            if p.proc.poll() is None:
                p.kill()


def pipeline_on(tmp: Path, leader: Server, follower: Server) -> Iterator[Pipeline]:
    """A Pipeline between `leader` and `follower`, both emptied first; its programs stopped afterwards."""
    leader.reset()
    follower.reset()
    p = Pipeline(tmp, leader, follower)
    yield p
    p.close()


@pytest.fixture
def pipeline(tmp_path, leader, follower):
    yield from pipeline_on(tmp_path, leader, follower)
