"""Fluvio topic backend, on the official `fluvio` Python client (0.21.0).

Every Topic uses partition 0 only (producers are pinned to it), so offsets form one ordered log.
The client holds the GIL while some calls block and its connect has no timeout, so this module
probes the endpoint itself before connecting and never blocks in an unbounded `next()`: waiting
reads use the client's async stream on a private event loop, with a deadline.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import ssl
import struct
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from fluvio import ConsumerConfigExtBuilder, Fluvio, FluvioAdmin, FluvioConfig, Offset
from fluvio import TopicProducerConfigBuilder, TopicSpec

from cdc_stream.topics.base import Record, Stream, Topic, TopicError, TopicNotFound

T = TypeVar("T")
_HINT = "check [stream] fluvio_endpoint / fluvio_profile and that the cluster is running"
_GRACE = 0.005  # s to wait for records the client already holds when draining a waiting stream


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _recv_exactly(sock: socket.socket, size: int, deadline: float) -> bytes:
    data = b""
    while len(data) < size:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("connection closed by the server")
        data += chunk
    return data


def probe(endpoint: str, timeout: float, tls: bool = False) -> str:
    """Connect and exchange ApiVersions (key 18, v2) within `timeout` s; returns the platform version.

    The client's own connect waits forever on a peer that accepts and never answers.
    """
    host, _, port = endpoint.rpartition(":")
    deadline = time.monotonic() + timeout

    def fail(reason: str) -> TopicError:
        return TopicError(f"cannot reach Fluvio at {endpoint}: {reason}; {_HINT}")

    def enc(text: str) -> bytes:
        return struct.pack(">H", len(text)) + text.encode()

    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw:
            sock = raw
            if tls:  # only reachability is checked here; the client verifies certificates itself
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                sock = ctx.wrap_socket(raw, server_hostname=host.strip("[]"))
            request = struct.pack(">Hhi", 18, 2, 1) + enc("cdc-probe") + enc("0.15.2") + enc("linux") + enc("x86_64")
            sock.sendall(struct.pack(">i", len(request)) + request)
            size = struct.unpack(">i", _recv_exactly(sock, 4, deadline))[0]
            if not 0 < size < 1 << 20:
                raise fail("the answer is not Fluvio's protocol; is this a Fluvio SC port?")
            payload = _recv_exactly(sock, size, deadline)
        correlation_id, error_code, count = struct.unpack_from(">ihI", payload)
        if correlation_id != 1 or error_code != 0:
            raise fail(f"unexpected ApiVersions answer (error {error_code}); is this a Fluvio SC port?")
        pos = 10 + 6 * count
        return payload[pos + 2:pos + 2 + struct.unpack_from(">H", payload, pos)[0]].decode()
    except TimeoutError:  # socket.timeout is an alias
        raise fail(f"no answer within {timeout:g} s") from None
    except (OSError, ValueError, struct.error) as exc:
        raise fail(_one_line(exc)) from None


def _profile_config(profile: str | None) -> tuple[str, Any, bool]:
    """(endpoint, FluvioConfig, uses TLS) of a profile in the Fluvio config file (FLV_PROFILE_PATH first)."""
    path = Path(os.environ.get("FLV_PROFILE_PATH") or Path.home() / ".fluvio" / "config")
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TopicError(f"no Fluvio config file at {path}; set [stream] fluvio_endpoint = \"host:port\" "
                         "or add a profile with `fluvio profile add`") from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TopicError(f"cannot read the Fluvio config file {path}: {_one_line(exc)}") from None
    name = profile or data.get("current_profile")
    if not name:
        raise TopicError(f"{path} has no current_profile; set [stream] fluvio_profile or fluvio_endpoint")
    cluster = data.get("cluster", {}).get(data.get("profile", {}).get(name, {}).get("cluster", ""), {})
    endpoint = cluster.get("endpoint") or cluster.get("addr")
    if not endpoint:
        raise TopicError(f"Fluvio profile '{name}' not found (or its cluster has no endpoint) in {path}")
    config = FluvioConfig.new(endpoint)
    tls = cluster.get("tls", {})
    policy, certs = tls.get("tls_policy", "disabled"), tls.get("certs", {})
    if policy == "anonymous":
        config.set_anonymous_tls()
    elif policy in ("verified", "verify"):
        args = (certs.get("domain", ""), certs.get("key", ""), certs.get("cert", ""), certs.get("ca_cert", ""))
        (config.set_inline_tls if tls.get("tls_source") == "inline" else config.set_tls_file_paths)(*args)
    if cluster.get("use_spu_local_address"):
        config.set_use_spu_local_address(True)
    return endpoint, config, policy not in ("disabled", "disable")


def _record(rec: Any) -> Record:
    key = bytes(rec.key())
    return Record(offset=rec.offset(), value=bytes(rec.value()), key=key or None, timestamp_ms=rec.timestamp())


class FluvioStream(Stream):
    """Topics of one Fluvio cluster, reached by `endpoint` ("host:port") or a profile of ~/.fluvio/config."""

    def __init__(self, endpoint: str | None = None, profile: str | None = None, partitions: int = 1,
                 retention_seconds: int | None = None, timeout: float = 10.0) -> None:
        """Probe the cluster (TopicError within `timeout` s if unreachable), then connect."""
        if endpoint:
            self.endpoint, config, tls = endpoint, FluvioConfig.new(endpoint), False
        else:
            self.endpoint, config, tls = _profile_config(profile)
        self.partitions, self.retention_seconds, self.timeout = partitions, retention_seconds, timeout
        self.platform_version = probe(self.endpoint, timeout, tls)
        # Bound the client's own waits (read once per process, so the first stream sets them):
        # a request without an answer, and the first metadata sync.
        os.environ.setdefault("FLV_SOCKET_WAIT", str(max(1, math.ceil(timeout))))
        os.environ.setdefault("FLV_METADATA_TIMEOUT", str(int(timeout * 1000)))
        self.client: Any = self.call("connect", lambda: Fluvio.connect_with_config(config))
        self.admin: Any = self.call("admin connect", lambda: FluvioAdmin.connect_with_config(config))
        self._topics: dict[str, FluvioTopic] = {}

    def call(self, what: str, fn: Callable[[], T], topic: str | None = None) -> T:
        """Run a client call, turning its errors (FluviorError or plain Exception) into TopicError."""
        try:
            return fn()
        except TopicError:
            raise
        except Exception as exc:
            where = f"topic '{topic}' on " if topic else ""
            raise TopicError(f"Fluvio {what} failed for {where}Fluvio at {self.endpoint}: {_one_line(exc)}") from exc

    def until_known(self, what: str, fn: Callable[[], T], topic: str) -> T:
        """Retry `fn` while the client's metadata does not know the topic yet (it syncs asynchronously)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self.call(what, fn, topic)
            except TopicError as exc:
                if "not found" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def create(self, name: str) -> None:
        """Create the topic (self.partitions partitions, optional retention) unless it exists."""
        if self.exists(name):
            return
        spec = TopicSpec.create().with_partitions(self.partitions)
        if self.retention_seconds:
            spec = spec.with_retention_time(int(self.retention_seconds))  # int: a str crashes build()
        try:
            self.admin.create_topic(name, spec.build())
        except Exception as exc:
            if "already exists" not in str(exc).lower():  # lost a race with another creator: fine
                raise TopicError(f"cannot create topic '{name}' on Fluvio at {self.endpoint}: "
                                 f"{_one_line(exc)}") from exc

    def exists(self, name: str) -> bool:
        """Whether the topic exists (asks the SC)."""
        return any(t.name() == name for t in self.call("list topics", lambda: self.admin.list_topics([name]), name))

    def topic(self, name: str) -> FluvioTopic:
        """Open an existing topic; TopicNotFound if the SC does not know it."""
        if name not in self._topics:
            if not self.exists(name):  # checked first: a producer for a missing topic can wait 60 s
                raise TopicNotFound(f"topic '{name}' does not exist on Fluvio at {self.endpoint}; create it "
                                    f"first (e.g. `fluvio topic create {name}`)")
            self._topics[name] = FluvioTopic(self, name)
        return self._topics[name]

    def list_topics(self) -> list[tuple[str, int]]:
        """(name, end offset) of every non-system topic, sorted by name."""
        names = sorted(t.name() for t in self.call("list topics", self.admin.all_topics))
        return [(name, self._topics.setdefault(name, FluvioTopic(self, name)).end_offset()) for name in names]

    def close(self) -> None:
        """Close every opened topic (the client itself has no disconnect call)."""
        for topic in self._topics.values():
            topic.close()
        self._topics.clear()


class FluvioTopic(Topic):
    """Partition 0 of one Fluvio topic."""

    def __init__(self, stream: FluvioStream, name: str) -> None:
        self.name, self._stream = name, stream
        self._producer: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tail: Any = None  # async generator of a continuous stream, kept open across reads
        self._tail_next = -1  # offset the tail yields next
        self._pending: asyncio.Task | None = None  # a tail read still waiting for its record

    def append(self, batch: Sequence[tuple[bytes | None, bytes]]) -> list[int]:
        """Send all records, flush, and wait for every acknowledgement; returns their offsets.

        Not atomic on Fluvio: if this raises, a prefix of the batch may already be stored (and a
        retry may store it twice), so the caller must tolerate partial or repeated batches.
        A None key is sent as an empty key (the Python client cannot send a null key).
        """
        if not batch:
            return []
        if self._producer is None:
            config = TopicProducerConfigBuilder().set_specific_partitioner(0).build()
            self._producer = self._stream.until_known(
                "producer", lambda: self._stream.client.topic_producer_with_config(self.name, config), self.name)

        def send() -> list[int]:
            outputs = self._producer.send_all([(key or b"", value) for key, value in batch])
            self._producer.flush()
            return [output.wait().offset() for output in outputs]

        return self._stream.call("append", send, self.name)

    def _consume(self, offset: Any, max_records: int, min_offset: int = 0) -> list[Record]:
        """Records already stored from `offset` on (a non-continuous stream ends when caught up)."""
        builder = ConsumerConfigExtBuilder(self.name)
        builder.partition(0)
        builder.offset_start(offset)
        builder.disable_continuous(True)
        config = builder.build()
        records: list[Record] = []

        def run() -> None:
            client = self._stream.client
            for rec in self._stream.until_known("read", lambda: client.consumer_with_config(config), self.name):
                if rec.offset() >= min_offset:
                    records.append(_record(rec))
                if len(records) >= max_records:
                    break

        self._stream.call("read", run, self.name)
        return records

    def read(self, from_offset: int, wait: float = 0.0, max_records: int = 1000) -> list[Record]:
        """Records with offset >= from_offset (at most max_records); if none, waits up to `wait` s for one.

        A caught-up reader keeps one continuous stream open and reuses it while each call asks for
        the offset after the last one returned; records then arrive as the SPU pushes them.
        """
        from_offset = max(from_offset, 0)
        if max_records <= 0:
            return []
        if self._tail is not None and self._tail_next == from_offset:
            records = self._take(from_offset, max_records, wait)
            if records or wait > 0:
                return records
        records = self._consume(Offset.absolute(from_offset), max_records, from_offset)
        if records or wait <= 0:
            return records
        self._open_tail(min(from_offset, self.end_offset()))  # the SPU refuses offsets past the end
        return self._take(from_offset, max_records, wait)

    def _open_tail(self, start: int) -> None:
        self._close_tail()
        self._loop = self._loop or asyncio.new_event_loop()
        client = self._stream.client
        consumer = self._stream.until_known("read", lambda: client.partition_consumer(self.name, 0), self.name)
        opening = asyncio.wait_for(consumer.async_stream(Offset.absolute(start)), self._stream.timeout)
        loop = self._loop
        self._tail = self._stream.call("read", lambda: loop.run_until_complete(opening), self.name)
        self._tail_next = start

    def _take(self, from_offset: int, max_records: int, wait: float) -> list[Record]:
        """Drain the tail: the first record may take up to `wait` s, later ones only _GRACE."""
        assert self._loop is not None
        deadline = time.monotonic() + wait
        records: list[Record] = []
        while len(records) < max_records:
            timeout = _GRACE if records else max(deadline - time.monotonic(), _GRACE)
            if self._pending is None:  # a timed-out read stays pending for the next call: no record is lost
                self._pending = self._loop.create_task(self._next_from_tail())
            done, _ = self._loop.run_until_complete(asyncio.wait({self._pending}, timeout=timeout))
            if not done:
                if records or time.monotonic() >= deadline:
                    break
                continue
            task, self._pending = self._pending, None
            try:
                rec = task.result()
            except (Exception, asyncio.CancelledError) as exc:  # StopAsyncIteration, or the stream failed
                self._close_tail()
                if isinstance(exc, StopAsyncIteration):
                    break
                raise TopicError(f"Fluvio read failed for topic '{self.name}' on Fluvio at "
                                 f"{self._stream.endpoint}: {_one_line(exc)}") from exc
            self._tail_next = rec.offset() + 1
            if rec.offset() >= from_offset:
                records.append(_record(rec))
        return records

    async def _next_from_tail(self) -> Any:
        return await self._tail.__anext__()

    def _close_tail(self) -> None:
        if self._pending is not None and self._loop is not None:
            self._pending.cancel()
            self._loop.run_until_complete(asyncio.wait({self._pending}))
        self._pending, self._tail, self._tail_next = None, None, -1

    def last_record(self) -> Record | None:
        """The record with the highest offset (None when empty), from one `Offset.from_end(1)` read."""
        records = self._consume(Offset.from_end(1), 1)
        return records[-1] if records else None

    def end_offset(self) -> int:
        """Last record's offset + 1, else 0 (so 0 too if retention has removed every record)."""
        last = self.last_record()
        return last.offset + 1 if last else 0

    def close(self) -> None:
        """Stop the waiting stream and its event loop."""
        self._close_tail()
        if self._loop is not None:
            self._loop.close()
            self._loop = None
