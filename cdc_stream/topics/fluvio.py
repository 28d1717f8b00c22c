"""Fluvio topic backend, on the official `fluvio` Python client (0.21.0).

Every Topic uses partition 0 only (producers are pinned to it), so offsets form one ordered log.
The client holds the GIL while some calls block and its connect has no timeout, so this module
probes the endpoint itself before connecting and never blocks in an unbounded `next()`: a waiting
read polls the partition's end (a one-record read) with a short backoff, and reads with
non-continuous streams only. The client's async stream is not used: a pending read of it is a task
of the client's runtime that must re-enter Python when it ends, and if that happens while the
interpreter shuts down the process aborts ("FATAL: exception not rethrown").

The client times out its requests (FLV_SOCKET_WAIT) but not the answers of a stream fetch: the
stream's `next()` waits for the SPU for ever, holding the GIL (so no watchdog thread can run), but
it runs Python signal handlers every 100 ms (`run_future_checking_signals` in the client). A read
therefore arms a SIGALRM deadline (`_FetchDeadline`): `timeout` s without a record ends it with
TopicUnavailable. Only the main thread takes signals; reads in other threads (none today) and
processes whose SIGALRM belongs to someone else read without this deadline. Still unbounded (seen
on a frozen server): `consumer_with_config` opening a new SPU connection, as a new client's first
read does; it releases the GIL, so no signal handler runs either (the probe before connecting
only shows that the SC answered a moment before).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import ssl
import struct
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from fluvio import (
    ConsumerConfigExtBuilder,
    Fluvio,
    FluvioAdmin,
    FluvioConfig,
    Offset,
    TopicProducerConfigBuilder,
    TopicSpec,
)

from cdc_stream.topics.base import Record, Stream, Topic, TopicError, TopicNotFound, TopicUnavailable

T = TypeVar("T")
_HINT = "check [stream] fluvio_endpoint / fluvio_profile and that the cluster is running"
# A waiting read checks the end of the partition after 10 ms, then backs off to every 100 ms while
# nothing arrives (each check is one small fetch); a new record is seen within about 0.1 s.
POLL_MIN, POLL_MAX = 0.01, 0.1
# An SC answers ApiVersions in milliseconds; one that stays silent this long is treated as down, so a
# wrong endpoint is reported within seconds (the client's own request timeouts stay `timeout`).
PROBE_TIMEOUT = 5.0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _os_reason(exc: BaseException) -> str:
    """'connection refused' rather than '[Errno 111] Connection refused'."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return _one_line(exc)


def _client_error(exc: BaseException) -> bool:
    """An error raised by the client: its FluviorError, or the plain Exception/builtins it raises."""
    module = type(exc).__module__
    return module in ("builtins", "mymodule") or module.startswith(("fluvio", "_fluvio"))


def _connection_lost(exc: BaseException) -> bool:
    """A socket error or request timeout of the client ("Socket error: Socket io Timed out: ...")."""
    text = str(exc).lower()
    return "socket" in text or "timed out" in text or "connection" in text


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
        raise fail(_os_reason(exc)) from None


def client_waits(timeout: float) -> dict[str, str]:
    """The environment variables that bound the Fluvio client's own waits to `timeout` seconds: a
    request without an answer (FLV_SOCKET_WAIT, whole seconds), the first metadata sync
    (FLV_METADATA_TIMEOUT, ms)."""
    return {"FLV_SOCKET_WAIT": str(max(1, math.ceil(timeout))), "FLV_METADATA_TIMEOUT": str(int(timeout * 1000))}


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


class _FetchDeadline:
    """Ends a stream fetch that receives nothing for `timeout` s, by raising `error()` out of it.

    The fetch's `next()` holds the GIL while it waits but runs Python signal handlers every 100 ms,
    so the deadline is an ITIMER_REAL alarm whose handler raises (main thread only). Each record
    received moves the deadline (`progress()`), so a long read that keeps receiving never times out.
    The handler stays installed once set: an alarm that fires just after a fetch ended finds nothing
    armed and does nothing (restoring SIG_DFL would let such a late alarm kill the process).
    """

    armed: ClassVar[_FetchDeadline | None] = None  # the fetch the process-wide alarm is set for
    installed: ClassVar[bool] = False  # _alarm is SIGALRM's handler in this process

    def __init__(self, timeout: float, error: Callable[[], TopicUnavailable]) -> None:
        self.timeout, self.error = timeout, error
        self.last = 0.0  # time.monotonic() at the start, then at the last record

    def __enter__(self) -> _FetchDeadline:
        if _FetchDeadline._own_alarm():
            self.last = time.monotonic()
            _FetchDeadline.armed = self
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
        return self

    def __exit__(self, *exc: object) -> None:
        if _FetchDeadline.armed is self:
            _FetchDeadline.armed = None
            signal.setitimer(signal.ITIMER_REAL, 0)

    def progress(self) -> None:
        """A record arrived: the fetch has another `timeout` s for the next one."""
        self.last = time.monotonic()

    @staticmethod
    def _own_alarm() -> bool:
        """Whether this thread may use SIGALRM (installing the handler the first time)."""
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers run in the main thread only
        if not _FetchDeadline.installed:
            if signal.getsignal(signal.SIGALRM) != signal.SIG_DFL or signal.getitimer(signal.ITIMER_REAL)[0]:
                return False  # the program uses SIGALRM itself: leave it alone
            signal.signal(signal.SIGALRM, _FetchDeadline._alarm)
            _FetchDeadline.installed = True
        return True

    @staticmethod
    def _alarm(signum: int, frame: Any) -> None:
        fetch = _FetchDeadline.armed
        if fetch is None:
            return  # a late alarm of a fetch that already ended
        silent = time.monotonic() - fetch.last
        if silent < fetch.timeout:  # records came meanwhile: wait for the rest of the moved deadline
            signal.setitimer(signal.ITIMER_REAL, fetch.timeout - silent)
            return
        _FetchDeadline.armed = None
        raise fetch.error()


def _record(rec: Any) -> Record:
    key = bytes(rec.key())
    return Record(offset=rec.offset(), value=bytes(rec.value()), key=key or None, timestamp_ms=rec.timestamp())


class FluvioStream(Stream):
    """Topics of one Fluvio cluster, reached by `endpoint` ("host:port") or a profile of ~/.fluvio/config."""

    def __init__(self, endpoint: str | None = None, profile: str | None = None, partitions: int = 1,
                 retention_seconds: int | None = None, timeout: float = 10.0) -> None:
        """Probe the cluster (TopicError within min(timeout, PROBE_TIMEOUT) s if unreachable), then connect."""
        if endpoint:
            self.endpoint, config, tls = endpoint, FluvioConfig.new(endpoint), False
        else:
            self.endpoint, config, tls = _profile_config(profile)
        self.partitions, self.retention_seconds, self.timeout = partitions, retention_seconds, timeout
        self.platform_version = probe(self.endpoint, min(timeout, PROBE_TIMEOUT), tls)
        # The client reads its waits only from the environment, once per process, at its first
        # connect, which is here; no program entry point can set them for every process that opens
        # a stream (Spark executors open theirs in the source's readers). So the first stream of a
        # process sets them, unless the user did (setdefault).
        for name, value in client_waits(timeout).items():
            os.environ.setdefault(name, value)
        self.client: Any = self.call("connect", lambda: Fluvio.connect_with_config(config))
        self.admin: Any = self.call("admin connect", lambda: FluvioAdmin.connect_with_config(config))
        self._topics: dict[str, FluvioTopic] = {}

    def describe(self) -> str:
        """"Fluvio at host:port" (the SC), as in every error message of this backend."""
        return f"Fluvio at {self.endpoint}"

    def call(self, what: str, fn: Callable[[], T], topic: str | None = None) -> T:
        """Run a client call, turning its errors (FluviorError or plain Exception) into TopicError.

        Other exceptions pass through: a blocking `next()` runs Python signal handlers, so the
        callers' own stop requests (cdc_stream.shutdown.Shutdown) can surface from inside it.
        """
        try:
            return fn()
        except TopicError:
            raise
        except Exception as exc:
            if not _client_error(exc):
                raise
            where = f"topic '{topic}' on " if topic else ""
            kind = TopicUnavailable if _connection_lost(exc) else TopicError
            raise kind(f"Fluvio {what} failed for {where}Fluvio at {self.endpoint}: {_one_line(exc)}") from exc

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
        self._poll = POLL_MIN  # current wait between end checks of a caught-up reader

    def append(self, batch: Sequence[tuple[bytes | None, bytes]]) -> list[int]:
        """Send all records, flush, and wait for every acknowledgement; returns their offsets.

        Not atomic on Fluvio: if this raises (or the process dies inside it), a prefix of the batch
        may already be stored, and the client's own retries may store a batch twice, so the caller
        must tolerate partial or repeated batches.
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
        deadline = _FetchDeadline(self._stream.timeout, lambda: TopicUnavailable(
            f"Fluvio read failed for topic '{self.name}' on {self._stream.describe()}: timed out "
            f"(no answer within {self._stream.timeout:g} s)"))

        def run() -> None:
            client = self._stream.client
            stream = self._stream.until_known("read", lambda: client.consumer_with_config(config), self.name)
            with deadline:  # the client times out its other requests itself, not a stream fetch's answers
                for rec in stream:
                    deadline.progress()
                    if rec.offset() >= min_offset:
                        records.append(_record(rec))
                    if len(records) >= max_records:
                        break

        self._stream.call("read", run, self.name)
        return records

    def read(self, from_offset: int, wait: float = 0.0, max_records: int = 1000) -> list[Record]:
        """Records with offset >= from_offset (at most max_records); if none, waits up to `wait` s for one.

        While none are there, the end of the partition is checked every POLL_MIN..POLL_MAX s
        (backing off while idle, back to POLL_MIN once records come); the waits are plain sleeps, so
        signal handlers run and may raise out of them.
        """
        from_offset = max(from_offset, 0)
        if max_records <= 0:
            return []
        deadline = time.monotonic() + wait
        while True:
            if self.end_offset() > from_offset:  # never ask for offsets past the end: the SPU refuses them
                records = self._consume(Offset.absolute(from_offset), max_records, from_offset)
                if records:
                    self._poll = POLL_MIN
                    return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(self._poll, remaining))
            self._poll = min(self._poll * 2, POLL_MAX)

    def last_record(self) -> Record | None:
        """The record with the highest offset (None when empty), from one `Offset.from_end(1)` read."""
        records = self._consume(Offset.from_end(1), 1)
        return records[-1] if records else None

    def end_offset(self) -> int:
        """Last record's offset + 1, else 0 (so 0 too if retention has removed every record)."""
        last = self.last_record()
        return last.offset + 1 if last else 0

    def close(self) -> None:
        """Drop the producer (every append was already flushed and acknowledged)."""
        self._producer = None
