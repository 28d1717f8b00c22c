#!/usr/bin/env python3
"""A wire-compatible Fluvio test server: one SC (control plane) and one SPU (data plane).

It exists because no real Fluvio cluster can be installed where the tests run. The unmodified
official `fluvio` Python client (0.21.0, Rust crate from infinyon/fluvio tag v0.17.3) talks to it:

  python tests/fluvio_server.py [--host 127.0.0.1] [--sc-port 0] [--spu-port 0] [--data-dir DIR]

prints `fluvio-test-server sc=HOST:PORT spu=HOST:PORT` once both listeners are up and serves until
SIGTERM/SIGINT. It must run in its own process: many client calls hold the GIL while they block.
SIGUSR1 makes it stop itself (SIGSTOP) as soon as the next stream fetch request is read, before
answering it: a test's way to freeze the server while a client waits inside a stream fetch.

Implemented (layouts from fluvio-protocol, fluvio-sc-schema, fluvio-spu-schema at v0.17.3):
  SC : ApiVersions(18), Create(1001, topics), Delete(1002), List(1003), Watch(1004: SPU/Partition/Topic)
  SPU: ApiVersions(18), Produce(0), FetchOffsets(1002), StreamFetch(1003), UpdateOffsets(1005)
Not implemented: consumer offsets (1006-1008), SmartModules, TLS, mirroring, retention.

Records are never parsed: the producer's batches are stored as raw bytes with base_offset patched
(the CRC does not cover base_offset), so keys, values and timestamps round-trip byte-exact.
We always answer with the versions we advertise (SC 19, SPU 24), so field sets are fixed.
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import signal
import struct
import sys

PLATFORM_VERSION = "0.17.3"
SC_VERSION = 19  # fluvio-sc-schema objects::COMMON_VERSION (>= DYN_OBJ 11: TypeBuffer has a u32 length)
SPU_VERSION = 24  # fluvio-spu-schema COMMON_VERSION
SPU_ID = 5001
SYSTEM_TOPIC = "consumer-offset"  # real clusters have it; it also keeps the client's topic store non-empty
# fluvio-protocol link::ErrorCode values
E_NONE, E_OFFSET_OUT_OF_RANGE, E_NOT_LEADER = 0, 1, 6
E_TOPIC_NOT_FOUND, E_TOPIC_EXISTS, E_TOPIC_INVALID_NAME, E_TOPIC_DELETED = 2001, 2002, 2006, 2007
TOPIC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # the SC's validation rule
DEBUG = bool(os.environ.get("FLUVIO_TEST_SERVER_DEBUG"))


def log(*args: object) -> None:
    if DEBUG:
        print("fluvio-test-server:", *args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- encoding (all big-endian)
class Reader:
    """Sequential decoder over one request payload."""

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError("request truncated")
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def unpack(self, fmt: str) -> int:
        return struct.unpack(">" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:  # fluvio String = u16 length + UTF-8 (Kafka uses i16)
        return self.take(self.unpack("H")).decode()

    def option(self) -> bool:  # Option<T> = i8 flag, then T
        return self.unpack("b") != 0

    def rest(self) -> bytes:
        return self.take(len(self.buf) - self.pos)


def p(fmt: str, *values: int) -> bytes:
    return struct.pack(">" + fmt, *values)


def s(text: str) -> bytes:
    data = text.encode()
    return p("H", len(data)) + data


def vec(items: list[bytes]) -> bytes:  # Vec<T> = u32 count + items
    return p("I", len(items)) + b"".join(items)


def type_buffer(ty: str, body: bytes) -> bytes:  # SC object envelope: type label, u32 len, bytes
    return s(ty) + p("I", len(body)) + body


# ---------------------------------------------------------------- metadata objects (SC version 19)
def topic_spec(partitions: int, system: bool) -> bytes:
    # ReplicaSpec::Computed{partitions, replication 1, ignore_rack}, cleanup None, storage None,
    # compression Any(4), deduplication None, system
    return p("BIIB", 1, partitions, 1, 0) + b"\x00\x00" + p("B", 4) + b"\x00" + p("B", system)


def topic_status(partitions: int) -> bytes:
    # resolution Provisioned(4), replica_map BTreeMap<u32, Vec<i32>> (u16 count), mirror_map {}, reason
    replica_map = b"".join(p("I", i) + vec([p("i", SPU_ID)]) for i in range(partitions))
    return p("BH", 4, partitions) + replica_map + p("H", 0) + s("")


def partition_spec(system: bool) -> bytes:
    # leader, replicas, cleanup None, storage None, compression Any, dedup None, system, mirror None
    return p("i", SPU_ID) + vec([p("i", SPU_ID)]) + b"\x00\x00" + p("B", 4) + b"\x00" + p("B", system) + b"\x00"


def partition_status(end: int, size: int) -> bytes:
    # resolution Online(1), leader ReplicaStatus{spu, hw, leo}, lsr, replicas [], size, deleting, base_offset
    return p("Biqq", 1, SPU_ID, end, end) + p("I", 0) + vec([]) + p("q", size) + b"\x00" + p("q", 0)


def spu_spec(host: str, port: int) -> bytes:
    # id, type Custom(1), public IngressPort{port, [IngressAddr{hostname, ip None}], PLAINTEXT},
    # private Endpoint{port, host, PLAINTEXT}, rack None, public_endpoint_local None
    ingress = b"\x01" + s(host) + b"\x00"
    return p("iBH", SPU_ID, 1, port) + vec([ingress]) + b"\x00" + p("H", port) + s(host) + b"\x00" + b"\x00\x00"


# ---------------------------------------------------------------- storage
class Partition:
    """One append-only log of raw record batches."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []  # each: base_offset i64, batch_len i32, header + records
        self.bases: list[int] = []
        self.end = 0  # offset the next record gets
        self.size = 0
        self.changed = asyncio.Condition()  # notified on append and on delete
        self.deleted = False

    def append(self, batch: bytes) -> int:
        """Store one batch at the end; returns its base offset."""
        count = struct.unpack_from(">i", batch, 23)[0] + 1  # last_offset_delta + 1 records
        base = self.end
        self.batches.append(p("q", base) + batch[8:])
        self.bases.append(base)
        self.end += max(count, 0)
        self.size += len(batch)
        return base

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Whole batches from the one holding `offset` (at least one batch); returns (bytes, next offset)."""
        i = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        out: list[bytes] = []
        size, next_offset = 0, offset
        while i < len(self.batches) and (not out or size + len(self.batches[i]) <= max_bytes):
            out.append(self.batches[i])
            size += len(self.batches[i])
            i += 1
            next_offset = self.bases[i] if i < len(self.bases) else self.end
        return b"".join(out), next_offset


def split_batches(record_set: bytes) -> list[bytes]:
    """Split concatenated batches (base_offset i64, batch_len i32, batch_len bytes)."""
    batches, pos = [], 0
    while pos + 12 <= len(record_set):
        end = pos + 12 + struct.unpack_from(">i", record_set, pos + 8)[0]
        batches.append(record_set[pos:end])
        pos = end
    return batches


class Topic:
    def __init__(self, name: str, partitions: int, system: bool = False) -> None:
        self.name, self.system = name, system
        self.partitions = [Partition() for _ in range(partitions)]


# ---------------------------------------------------------------- server
class Connection:
    """One client socket; stream requests (watch, stream fetch) keep writing to it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.lock = asyncio.Lock()  # one frame at a time, and drain() is not concurrency-safe
        self.tasks: set[asyncio.Task] = set()
        self.acks: dict[int, int] = {}  # stream fetch session id -> offset the consumer asked for next
        self.acked = asyncio.Condition()
        self.next_stream_id = 0

    async def send(self, correlation_id: int, body: bytes) -> None:
        async with self.lock:
            self.writer.write(p("ii", 4 + len(body), correlation_id) + body)
            await self.writer.drain()

    def spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class FluvioTestServer:
    def __init__(self, host: str, data_dir: str | None) -> None:
        self.host = host
        self.spu_port = 0
        self.data_dir = data_dir
        self.topics: dict[str, Topic] = {SYSTEM_TOPIC: Topic(SYSTEM_TOPIC, 1, system=True)}
        self.watchers: list[tuple[str, Connection, int]] = []  # (type label, connection, correlation id)
        self.epoch = 1
        self.serving: set[asyncio.Task] = set()  # connection handlers, ended cleanly on shutdown
        self.freeze_at_stream_fetch = False  # set by SIGUSR1
        if data_dir:
            self.load()

    # ---- persistence (optional): topics.json plus one file of raw batches per partition
    def path(self, name: str) -> str:
        return os.path.join(self.data_dir or "", name)

    def load(self) -> None:
        os.makedirs(self.data_dir or ".", exist_ok=True)
        if not os.path.exists(self.path("topics.json")):
            return
        with open(self.path("topics.json")) as f:
            for name, partitions in json.load(f).items():
                self.topics[name] = topic = Topic(name, partitions)
                for i, part in enumerate(topic.partitions):
                    if os.path.exists(self.path(f"{name}-{i}.log")):
                        with open(self.path(f"{name}-{i}.log"), "rb") as log_file:
                            for batch in split_batches(log_file.read()):
                                part.append(batch)

    def save_topics(self) -> None:
        if self.data_dir:
            user = {t.name: len(t.partitions) for t in self.topics.values() if not t.system}
            with open(self.path("topics.json.tmp"), "w") as f:
                json.dump(user, f)
            os.replace(self.path("topics.json.tmp"), self.path("topics.json"))

    # ---- connection loop shared by both listeners
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, spu: bool) -> None:
        conn, task = Connection(writer), asyncio.current_task()
        assert task is not None
        self.serving.add(task)
        handlers = self.spu_handlers() if spu else self.sc_handlers()
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                r = Reader(await reader.readexactly(size))
                api_key, version, correlation_id = r.unpack("H"), r.unpack("h"), r.unpack("i")
                r.string()  # client id
                log("spu" if spu else "sc", "api", api_key, "v", version, "corr", correlation_id)
                handler = handlers.get(api_key)
                if handler is None:  # no generic error frame exists; the client's request times out
                    log("unsupported api key", api_key)
                    continue
                body = await handler(r, conn, correlation_id)
                if body is not None:
                    await conn.send(correlation_id, body)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # client went away, or shutdown (swallowed so asyncio does not log it as an error)
        except Exception as exc:  # a request we cannot decode: say so, and drop this connection only
            print(f"fluvio-test-server: closing connection: {exc!r}", file=sys.stderr, flush=True)
        finally:
            self.watchers = [w for w in self.watchers if w[1] is not conn]
            for stream_task in list(conn.tasks):
                stream_task.cancel()
            writer.close()
            self.serving.discard(task)

    def sc_handlers(self):
        return {18: self.api_versions_sc, 1001: self.create, 1002: self.delete, 1003: self.list, 1004: self.watch}

    def spu_handlers(self):
        return {18: self.api_versions_spu, 0: self.produce, 1002: self.fetch_offsets,
                1003: self.stream_fetch, 1005: self.update_offsets}

    @staticmethod
    def versions(keys: list[tuple[int, int]]) -> bytes:
        # ApiVersionsResponse{error_code, api_keys Vec<{key, min, max}>, platform_version}
        return p("h", E_NONE) + vec([p("hhh", key, 0, top) for key, top in keys]) + s(PLATFORM_VERSION)

    async def api_versions_sc(self, r: Reader, conn: Connection, corr: int) -> bytes:
        return self.versions([(18, 2)] + [(key, SC_VERSION) for key in (1001, 1002, 1003, 1004)])

    async def api_versions_spu(self, r: Reader, conn: Connection, corr: int) -> bytes:
        return self.versions([(18, 2), (0, SPU_VERSION), (1002, SPU_VERSION), (1003, SPU_VERSION), (1005, 0)])

    # ---- SC
    def objects(self, ty: str) -> list[tuple[str, bytes, bool]]:
        """(name, Metadata{name, spec, status} bytes, is_system) of every object of one type."""
        if ty == "Topic":
            return [(t.name, s(t.name) + topic_spec(len(t.partitions), t.system) + topic_status(len(t.partitions)),
                     t.system) for t in self.topics.values()]
        if ty == "Partition":
            return [(f"{t.name}-{i}", s(f"{t.name}-{i}") + partition_spec(t.system)
                     + partition_status(part.end, part.size), t.system)
                    for t in self.topics.values() for i, part in enumerate(t.partitions)]
        if ty == "SPU":
            name = f"custom-spu-{SPU_ID}"
            return [(name, s(name) + spu_spec(self.host, self.spu_port) + b"\x00", False)]  # status Online(0)
        return []  # SmartModule, TableFormat, ...: none

    @staticmethod
    def status(name: str, code: int = E_NONE, message: str | None = None) -> bytes:
        return s(name) + p("h", code) + (b"\x01" + s(message) if message else b"\x00")

    async def create(self, r: Reader, conn: Connection, corr: int) -> bytes:
        ty, body = r.string(), Reader(r.take(r.unpack("I")))
        name, dry_run = body.string(), body.option()
        if body.option():
            body.unpack("I")  # timeout ms
        if ty != "Topic":
            return self.status(name, 60, f"the test server only creates topics, not {ty}")
        spec = body.rest()  # TopicSpec; only the partition count matters here
        # ReplicaSpec tag 1 = Computed{partitions u32, ...}, 0 = Assigned(Vec<PartitionMap>: u32 count first)
        partitions = struct.unpack_from(">I", spec, 1)[0] if spec[:1] in (b"\x00", b"\x01") else 1
        if name in self.topics:
            return self.status(name, E_TOPIC_EXISTS)
        if not TOPIC_NAME.match(name):
            return self.status(name, E_TOPIC_INVALID_NAME, f"invalid topic name: '{name}'")
        if not dry_run:
            self.topics[name] = Topic(name, max(partitions, 1))
            self.save_topics()
            await self.notify_watchers()
        return self.status(name)

    async def delete(self, r: Reader, conn: Connection, corr: int) -> bytes:
        ty, body = r.string(), Reader(r.take(r.unpack("I")))
        name = body.string()
        topic = self.topics.get(name) if ty == "Topic" else None
        if topic is None or topic.system:
            return self.status(name, E_TOPIC_NOT_FOUND)
        del self.topics[name]
        for i, part in enumerate(topic.partitions):
            part.deleted = True
            async with part.changed:
                part.changed.notify_all()
            if self.data_dir and os.path.exists(self.path(f"{name}-{i}.log")):
                os.remove(self.path(f"{name}-{i}.log"))
        self.save_topics()
        await self.notify_watchers()
        return self.status(name)

    async def list(self, r: Reader, conn: Connection, corr: int) -> bytes:
        # ListRequest{name_filters Vec<{name}>, summary bool, system bool}
        ty, body = r.string(), Reader(r.take(r.unpack("I")))
        names = {body.string() for _ in range(body.unpack("I"))}
        body.option()  # summary
        system = body.option()
        found = [meta for name, meta, is_system in self.objects(ty)
                 if (not names or name in names) and (ty != "Topic" or is_system == system)]
        return type_buffer(ty, vec(found))

    def watch_update(self, ty: str) -> bytes:
        # WatchResponse{MetadataUpdate{epoch, changes [], all}}: a non-empty `all` replaces the client's store
        return type_buffer(ty, p("q", self.epoch) + vec([]) + vec([meta for _, meta, _ in self.objects(ty)]))

    async def watch(self, r: Reader, conn: Connection, corr: int) -> None:
        ty = r.string()
        self.watchers.append((ty, conn, corr))
        await conn.send(corr, self.watch_update(ty))

    async def notify_watchers(self) -> None:
        self.epoch += 1
        for ty, conn, corr in list(self.watchers):
            try:
                await conn.send(corr, self.watch_update(ty))
            except ConnectionError:
                pass

    # ---- SPU
    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        return t.partitions[index] if t and index < len(t.partitions) else None

    async def produce(self, r: Reader, conn: Connection, corr: int) -> bytes:
        # ProduceRequest{transactional_id Option<String>, isolation i16, timeout i32,
        #                topics Vec<{name, partitions Vec<{index u32, records RecordSet}>}>, smartmodules}
        if r.option():
            r.string()
        r.take(6)  # isolation i16, timeout i32: every produce is acknowledged at once
        responses, touched = [], []
        for _ in range(r.unpack("I")):
            name, results = r.string(), []
            for _ in range(r.unpack("I")):
                index = r.unpack("I")
                batches = split_batches(r.take(r.unpack("i")))  # RecordSet = i32 length + batches
                part = self.partition(name, index)
                if part is None:
                    results.append(p("Ihqqq", index, E_TOPIC_NOT_FOUND, -1, -1, -1))
                    continue
                base = part.end
                for batch in batches:
                    part.append(batch)
                    if self.data_dir:
                        with open(self.path(f"{name}-{index}.log"), "ab") as f:
                            f.write(part.batches[-1])
                touched.append(part)
                # PartitionProduceResponse{index, error_code, base_offset, log_append_time_ms, log_start_offset}
                results.append(p("Ihqqq", index, E_NONE, base, -1, 0))
            responses.append(s(name) + vec(results))
        for part in touched:  # wake the stream fetches waiting at the end of these logs
            async with part.changed:
                part.changed.notify_all()
        return vec(responses) + p("i", 0)  # throttle_time_ms

    async def fetch_offsets(self, r: Reader, conn: Connection, corr: int) -> bytes:
        # response: Vec<{name, Vec<{error_code, index, start_offset, last_stable_offset}>}>
        topics = []
        for _ in range(r.unpack("I")):
            name, parts = r.string(), []
            for _ in range(r.unpack("I")):
                index = r.unpack("I")
                part = self.partition(name, index)
                parts.append(p("hIqq", E_NONE, index, 0, part.end) if part
                             else p("hIqq", E_NOT_LEADER, index, -1, -1))
            topics.append(s(name) + vec(parts))
        return vec(topics)

    @staticmethod
    def fetch_response(topic: str, stream_id: int, index: int, error: int, hw: int, records: bytes) -> bytes:
        # StreamFetchResponse{topic, stream_id, FetchablePartitionResponse{index, error_code, high_watermark,
        #   next_filter_offset, log_start_offset, aborted Option<Vec> None, records RecordSet}}
        return s(topic) + p("IIhqqq", stream_id, index, error, hw, 0, 0) + b"\x00" + p("i", len(records)) + records

    async def stream_fetch(self, r: Reader, conn: Connection, corr: int) -> bytes | None:
        # StreamFetchRequest{topic, partition u32, fetch_offset i64, max_bytes i32, isolation, ...}
        topic, index, offset, max_bytes = r.string(), r.unpack("I"), r.unpack("q"), r.unpack("i")
        if self.freeze_at_stream_fetch:  # SIGUSR1: stop answering with this fetch in flight, until SIGCONT
            self.freeze_at_stream_fetch = False
            os.kill(os.getpid(), signal.SIGSTOP)
        part = self.partition(topic, index)
        if part is None:
            return self.fetch_response(topic, 0, index, E_NOT_LEADER, -1, b"")
        if not 0 <= offset <= part.end:
            return self.fetch_response(topic, 0, index, E_OFFSET_OUT_OF_RANGE, part.end, b"")
        conn.next_stream_id += 1
        conn.spawn(self.stream_records(conn, corr, topic, index, part, offset, max_bytes, conn.next_stream_id))
        return None

    async def stream_records(self, conn: Connection, corr: int, topic: str, index: int, part: Partition,
                             offset: int, max_bytes: int, stream_id: int) -> None:
        """Push batches as they arrive. Like the real SPU, wait for the consumer's UpdateOffsets ack after
        each response: the client queues at most 10 responses per stream and a full queue stalls its socket."""
        while True:
            await self.wait_for_records(part, offset)
            if part.deleted:
                await conn.send(corr, self.fetch_response(topic, stream_id, index, E_TOPIC_DELETED, -1, b""))
                return
            records, offset = part.read(offset, max_bytes)
            await conn.send(corr, self.fetch_response(topic, stream_id, index, E_NONE, part.end, records))
            await self.wait_for_ack(conn, stream_id, offset)
            offset = conn.acks[stream_id]

    @staticmethod
    async def wait_for_records(part: Partition, offset: int) -> None:
        async with part.changed:
            await part.changed.wait_for(lambda: part.end > offset or part.deleted)

    @staticmethod
    async def wait_for_ack(conn: Connection, stream_id: int, offset: int) -> None:
        async with conn.acked:
            await conn.acked.wait_for(lambda: conn.acks.get(stream_id, -1) >= offset)

    async def update_offsets(self, r: Reader, conn: Connection, corr: int) -> bytes:
        # UpdateOffsetsRequest{Vec<{offset i64, session_id u32}>} -> Vec<{session_id, error}>
        statuses = []
        for _ in range(r.unpack("I")):
            offset, session = r.unpack("q"), r.unpack("I")
            conn.acks[session] = max(offset, conn.acks.get(session, -1))
            statuses.append(p("Ih", session, E_NONE))
        async with conn.acked:
            conn.acked.notify_all()
        return vec(statuses)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--sc-port", type=int, default=0)
    parser.add_argument("--spu-port", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="keep topics and records here across restarts")
    args = parser.parse_args()
    # the SPU address is advertised in metadata, so it must be one the client can dial
    server = FluvioTestServer("127.0.0.1" if args.host in ("", "0.0.0.0") else args.host, args.data_dir)
    sc = await asyncio.start_server(lambda r, w: server.serve(r, w, spu=False), args.host, args.sc_port)
    spu = await asyncio.start_server(lambda r, w: server.serve(r, w, spu=True), args.host, args.spu_port)
    sc_port, server.spu_port = sc.sockets[0].getsockname()[1], spu.sockets[0].getsockname()[1]
    print(f"fluvio-test-server sc={args.host}:{sc_port} spu={args.host}:{server.spu_port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, setattr, server, "freeze_at_stream_fetch", True)
    await stop.wait()
    sc.close()
    spu.close()
    for task in list(server.serving):
        task.cancel()
    if server.serving:
        await asyncio.wait(server.serving, timeout=2)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
