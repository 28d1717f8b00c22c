"""One contract for every topic backend: the embedded log and Fluvio (via tests/fluvio_server.py).

Plus Fluvio-only checks: unreachable endpoints fail fast with a clear TopicError, profiles, and an
optional run against a real cluster (FLUVIO_ENDPOINT=host:port).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_stream.topics.base import Record, Stream, TopicError, TopicNotFound
from cdc_stream.topics.fluvio import FluvioStream

ROOT = Path(__file__).resolve().parent.parent


def backend_source(request, kind: str, tmp_path) -> str:
    """Python source that binds `stream` to a fresh Stream of the backend `kind`."""
    if kind == "embedded":
        path = str(tmp_path / "topics")
        return f"from cdc_stream.topics.embedded import EmbeddedStream\nstream = EmbeddedStream({path!r})"
    if kind == "memory":
        return "from cdc_stream.topics.memory import MemoryStream\nstream = MemoryStream()"
    endpoint = request.getfixturevalue("fluvio_endpoint")
    return f"from cdc_stream.topics.fluvio import FluvioStream\nstream = FluvioStream(endpoint={endpoint!r})"


@pytest.fixture(params=["embedded", pytest.param("fluvio", marks=pytest.mark.server), "memory"])
def backend(request, tmp_path) -> str:
    """Python source that binds `stream` to a fresh Stream of the parametrized backend."""
    return backend_source(request, request.param, tmp_path)


@pytest.fixture(params=["embedded", pytest.param("fluvio", marks=pytest.mark.server)])
def shared_backend(request, tmp_path) -> str:
    """A backend other processes can open too (the in-memory one lives in one process)."""
    return backend_source(request, request.param, tmp_path)


def _stream(source: str) -> Iterator[Stream]:
    scope: dict = {}
    exec(source, scope)
    yield scope["stream"]
    scope["stream"].close()


@pytest.fixture
def stream(backend: str) -> Iterator[Stream]:
    yield from _stream(backend)


@pytest.fixture
def shared_stream(shared_backend: str) -> Iterator[Stream]:
    yield from _stream(shared_backend)


@pytest.fixture
def name() -> str:
    """A topic name unique to this test (valid for Fluvio: lowercase letters, digits, '-')."""
    return f"contract-{uuid.uuid4().hex[:12]}"


def read_all(topic, from_offset: int, count: int, timeout: float = 10.0) -> list[Record]:
    """Read until `count` records arrived (a backend may return fewer per call than exist)."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records += topic.read(from_offset + len(records), wait=0.2, max_records=count - len(records))
    return records


def test_create_is_idempotent(stream, name):
    assert not stream.exists(name)
    stream.create(name)
    stream.create(name)
    assert stream.exists(name)
    assert stream.topic(name).end_offset() == 0
    assert [t for t in stream.list_topics() if t[0] == name] == [(name, 0)]


def test_missing_topic_raises_topic_not_found(stream, name):
    with pytest.raises(TopicNotFound, match=name):
        stream.topic(name)
    assert not stream.exists(name)


def test_append_returns_consecutive_offsets_and_end_offset_follows(stream, name):
    stream.create(name)
    topic = stream.topic(name)
    assert topic.append([]) == []
    assert topic.append([(b"a", b"1"), (b"b", b"2"), (None, b"3")]) == [0, 1, 2]
    assert topic.end_offset() == 3
    assert topic.append([(b"c", b"4"), (b"d", b"5")]) == [3, 4]
    assert topic.end_offset() == 5
    assert stream.topic(name).end_offset() == 5
    topic.close()


def test_read_from_start_middle_and_end(stream, name):
    stream.create(name)
    topic = stream.topic(name)
    values = [f"v{i}".encode() for i in range(5)]
    topic.append([(f"k{i}".encode(), v) for i, v in enumerate(values)])
    assert [(r.offset, r.value) for r in topic.read(0)] == list(enumerate(values))
    assert [(r.offset, r.value) for r in topic.read(2)] == [(2, b"v2"), (3, b"v3"), (4, b"v4")]
    assert [r.offset for r in topic.read(1, max_records=2)] == [1, 2]
    started = time.monotonic()
    assert topic.read(5) == []
    assert time.monotonic() - started < 1.0
    started = time.monotonic()
    assert topic.read(5, wait=0.3) == []
    assert time.monotonic() - started < 0.3 + 1.0
    assert topic.read(99, wait=0.1) == []
    topic.close()


def test_waiting_reader_sees_record_appended_by_another_thread(stream, name):
    stream.create(name)
    topic = stream.topic(name)
    writer = stream.topic(name)
    timer = threading.Timer(0.2, lambda: writer.append([(b"k", b"late")]))
    started = time.monotonic()  # before the timer starts: it may append 0.2 s after its own start
    timer.start()
    records = topic.read(0, wait=5.0)  # blocks until the other thread's record arrives
    timer.join()
    assert [(r.offset, r.key, r.value) for r in records] == [(0, b"k", b"late")]
    assert 0.2 <= time.monotonic() - started < 5.0
    topic.close()
    writer.close()


def test_waiting_reader_sees_record_appended_by_another_process(shared_stream, shared_backend, name):
    stream, backend = shared_stream, shared_backend
    stream.create(name)
    topic = stream.topic(name)
    topic.append([(b"first", b"0")])
    assert topic.read(1, wait=0.05) == []  # a caught-up reader
    child_code = backend + textwrap.dedent(f"""
        import sys, time
        topic = stream.topic({name!r})
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.time()
        offsets = topic.append([(b"child", b"from another process")])
        print(repr(started), offsets, flush=True)
        """)
    child = subprocess.Popen([sys.executable, "-c", child_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert select.select([child.stdout], [], [], 20)[0], "child did not start"
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
        records = topic.read(1, wait=5.0)  # blocks until the child's record arrives
        seen = time.time()
        assert select.select([child.stdout], [], [], 20)[0], "child did not append"
        started, offsets = child.stdout.readline().split(" ", 1)
        assert offsets.strip() == "[1]"
        assert [(r.offset, r.key, r.value) for r in records] == [(1, b"child", b"from another process")]
        latency = seen - float(started)
        print(f"wake-up latency including the append: {latency * 1000:.1f} ms")
        assert latency < 1.0
        assert child.wait(timeout=20) == 0
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        topic.close()


def test_last_record(stream, name):
    stream.create(name)
    topic = stream.topic(name)
    assert topic.last_record() is None
    topic.append([(b"k1", b"one"), (b"k2", b"two")])
    last = topic.last_record()
    assert (last.offset, last.key, last.value) == (1, b"k2", b"two")
    topic.close()


def test_keys_round_trip(stream, name):
    stream.create(name)
    topic = stream.topic(name)
    keys = [b"plain", None, b"\x00\xff\xfe binary", "ключ".encode()]
    topic.append([(key, b"value") for key in keys])
    assert [r.key for r in topic.read(0)] == keys
    topic.close()


def test_list_topics_counts(stream, name):
    for suffix, count in (("b", 3), ("a", 0), ("c", 1)):
        stream.create(f"{name}-{suffix}")
        stream.topic(f"{name}-{suffix}").append([(None, b"x")] * count)
    listed = stream.list_topics()
    assert listed == sorted(listed)
    assert [t for t in listed if t[0].startswith(name)] == [(f"{name}-a", 0), (f"{name}-b", 3), (f"{name}-c", 1)]


def test_batch_of_500_round_trips_byte_exact(stream, name):
    stream.create(name)
    topic = stream.topic(name)
    batch = [(f"key-{i}".encode() if i % 3 else None,
              b"" if i % 10 == 0 else bytes((i * 7 + j) % 256 for j in range(i % 50)) + b"\xff\xfe\x80")
             for i in range(500)]
    assert topic.append(batch) == list(range(500))
    records = read_all(topic, 0, 500)
    assert [r.offset for r in records] == list(range(500))
    assert [(r.key, r.value) for r in records] == batch
    assert topic.end_offset() == 500
    topic.close()


# ------------------------------------------------------------------ Fluvio only




def test_fluvio_silent_endpoint_raises_within_timeout(silent_endpoint):
    started = time.monotonic()
    with pytest.raises(TopicError, match=f"cannot reach Fluvio at {silent_endpoint}: no answer") as err:
        FluvioStream(endpoint=silent_endpoint, timeout=1.0)
    assert time.monotonic() - started < 1.0 + 2.0
    assert "fluvio_endpoint" in str(err.value)


def test_fluvio_nothing_listening_raises_quickly():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        endpoint = f"127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(TopicError, match=f"cannot reach Fluvio at {endpoint}"):
        FluvioStream(endpoint=endpoint, timeout=5.0)
    assert time.monotonic() - started < 1.0


def test_fluvio_profile_from_config_file(fluvio_endpoint, tmp_path, monkeypatch, name):
    config = tmp_path / "config"
    config.write_text(textwrap.dedent(f"""
        version = "2.0"
        current_profile = "local"
        [profile.local]
        cluster = "local"
        [cluster.local]
        endpoint = "{fluvio_endpoint}"
        [cluster.local.tls]
        tls_policy = "disabled"
        """))
    monkeypatch.setenv("FLV_PROFILE_PATH", str(config))
    with FluvioStream() as stream:  # the current profile
        stream.create(name)
    with FluvioStream(profile="local") as stream:
        assert stream.exists(name)
    with pytest.raises(TopicError, match="profile 'nope' not found"):
        FluvioStream(profile="nope")
    monkeypatch.setenv("FLV_PROFILE_PATH", str(tmp_path / "missing"))
    with pytest.raises(TopicError, match="no Fluvio config file"):
        FluvioStream()


@pytest.mark.server
@pytest.mark.skipif(not os.environ.get("FLUVIO_ENDPOINT"),
                    reason="set FLUVIO_ENDPOINT=host:port to test against a real Fluvio cluster")
def test_real_fluvio_cluster(name):
    with FluvioStream(endpoint=os.environ["FLUVIO_ENDPOINT"]) as stream:
        stream.create(name)
        topic = stream.topic(name)
        try:
            assert topic.append([(b"k", b"v0"), (None, b"\xff")]) == [0, 1]
            assert [(r.offset, r.key, r.value) for r in topic.read(0)] == [(0, b"k", b"v0"), (1, None, b"\xff")]
            assert topic.end_offset() == 2
            assert topic.read(2, wait=0.2) == []
        finally:
            topic.close()
            stream.admin.delete_topic(name)
