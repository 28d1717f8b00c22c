"""The default backend: a durable append-only log per topic in one SQLite file.

SQLite in WAL mode gives what a local log needs without a server: one writer and
many readers in other processes, atomic batches (one transaction per append), and
durability of an acknowledged append across kill -9 and power loss.

An append commits without an fsync (synchronous=NORMAL), rings the readers' bell, and only then
fsyncs the WAL and returns: readers see the records while the fsync runs, instead of after it
(0.6 ms of the 5k lag's 4 ms: bench/README.md, issue 26, ninth and tenth parts). A record can so be read
before it is durable; a reader that makes something durable of records first calls durable(),
its own fsync of the WAL, which finds the writer's done or waits for it. After a crash of the
machine in between, SQLite's WAL is consistent without the last commit, and no reader built on it.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cdc_stream.topics.base import Record, Stream, Topic, TopicError, TopicNotFound
from cdc_stream.topics.bell import Bell, Listener

DB_FILE = "stream.db"
# A waiting reader checks PRAGMA data_version this often: a cheap read of a
# shared-memory counter, so a new record is seen within about one interval (at once where
# writers ring the stream's bell: bell.py).
POLL_INTERVAL = 0.01
# ... and this often while records came within the last FAST_WINDOW seconds: a consumer following a busy
# leader waited half of POLL_INTERVAL on average for each append, the largest part of the pipeline's lag
# (bench/README.md, issue 26); an idle topic is still checked only every POLL_INTERVAL.
FAST_POLL = 0.001
FAST_WINDOW = 1.0
# A reader that hears the stream's bell (bell.py) polls only this often: records that came without a
# ring (a writer of an older version) are then read as fast as above.
BELL_POLL = 0.1
BUSY_TIMEOUT = 30.0  # seconds a writer waits for another one
PAGE_SIZE = 16384  # of a new stream.db (see _connect)
# A writer checkpoints the WAL after a commit, once it has rung the bell, and not inside the COMMIT as
# SQLite's autocheckpoint does: that kept a commit's ring, and so the waiting readers, for the 5-60 ms
# the checkpoint took (bench/README.md, issue 26, sixth part). Still in the writer's thread: in a thread
# of its own, a PASSIVE checkpoint never finds the WAL fully copied while appends go on, so the WAL
# never starts over and grows without end. Every CHECKPOINT_FRAMES frames written, estimated
# (wal_frames); SQLite's own autocheckpoint stays on, higher, in case the estimate falls short.
# 100 frames (1.6 MiB), not SQLite's default 1,000: a 16 MiB checkpoint took 12-16 ms of writes and an
# fsync, which the follower's commits met on the same disk (following 20,000 rows/s, the transaction after
# each checkpoint, once a second, made the lag's p99: 22-29 ms against 10-12 ms with 100; producer and
# catch-up rates unchanged; bench/README.md, issue 26, eighth part).
CHECKPOINT_FRAMES = 100
AUTOCHECKPOINT = 4 * CHECKPOINT_FRAMES
# A writer that pauses (Topic.idle: the producer's append thread, after IDLE_AFTER without an append)
# checkpoints from this many frames on, so that at a steady rate the checkpoint runs between
# transactions and CHECKPOINT_FRAMES is rarely reached. Run right after the ring, it met the readers'
# own fsync (durable()) and their follower's commit on the same disk: following 20,000 rows/s, the 27% of
# transactions whose append checkpointed spent 0.55 ms more between the ring and their statements
# (the consumer's fsync 0.45 ms p50 / 1.13 p90 against 0.18 / 0.30; bench/README.md, issue 26,
# fourteenth part).
IDLE_CHECKPOINT_FRAMES = CHECKPOINT_FRAMES // 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    next_offset INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL,
    offset INTEGER NOT NULL,
    key BLOB,
    value BLOB NOT NULL,
    ts INTEGER NOT NULL,
    PRIMARY KEY (topic, offset)
) WITHOUT ROWID;
"""


class EmbeddedStream(Stream):
    """All topics of one directory (`[stream] path`), stored in `<path>/stream.db`."""

    def __init__(self, path: str | os.PathLike[str], create: bool = True):
        self.path = Path(path)
        db = self.path / DB_FILE
        if not db.exists() and not create:
            raise TopicNotFound(
                f"no embedded stream at {self.path}: check [stream] path (cdc-topic: --path), "
                "or start cdc-producer first to create it"
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._db = _connect(db)
        except (sqlite3.Error, OSError) as e:
            raise storage_error(f"cannot open the embedded stream at {self.path}", self.path, e) from None
        try:
            with self._db:
                self._db.executescript(_SCHEMA)
                self._db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('stream_id', ?)", (str(uuid.uuid4()),)
                )
        except sqlite3.Error as e:
            self._db.close()  # (an open file would keep the stream's mount busy)
            raise storage_error(f"cannot open the embedded stream at {self.path}", self.path, e) from None

    @property
    def identity(self) -> str:
        """A random id fixed when the stream was created: tells a recreated stream apart."""
        with _storage(f"cannot read the embedded stream at {self.path}", self.path):
            return str(self._db.execute("SELECT value FROM meta WHERE key='stream_id'").fetchone()[0])

    def describe(self) -> str:
        return f"embedded stream {self.path}"

    def create(self, name: str) -> None:
        _check_name(name)
        with _storage(f"cannot create topic '{name}'", self.path), self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO topics (name, created_ms) VALUES (?, ?)",
                (name, int(time.time() * 1000)),
            )

    def exists(self, name: str) -> bool:
        with _storage(f"cannot read the embedded stream at {self.path}", self.path):
            return self._db.execute("SELECT 1 FROM topics WHERE name=?", (name,)).fetchone() is not None

    def topic(self, name: str) -> EmbeddedTopic:
        if not self.exists(name):
            raise TopicNotFound(
                f"topic '{name}' does not exist in {self.path}; "
                "check the topic name, or start cdc-producer (it creates the topic)"
            )
        return EmbeddedTopic(self.path, name)

    def list_topics(self) -> list[tuple[str, int]]:
        with _storage(f"cannot read the embedded stream at {self.path}", self.path):
            rows = self._db.execute(
                "SELECT t.name, (SELECT COUNT(*) FROM records r WHERE r.topic = t.name) FROM topics t ORDER BY t.name"
            )
            return [(name, count) for name, count in rows]

    def close(self) -> None:
        self._db.close()


class EmbeddedTopic(Topic):
    """One topic of an embedded stream; each instance has its own connection."""

    def __init__(self, path: Path, name: str):
        self.name, self.path = name, path
        self._last_data = -FAST_WINDOW  # when a read last returned records (monotonic)
        self._rung = -FAST_WINDOW  # when a waiting read last heard the bell (monotonic)
        self._bell = Bell(path)
        self._page_size = 0  # read at the first append
        self._frames = 0  # written since the last checkpoint (wal_frames)
        self._listener: Listener | None = None  # opened at the first read that waits
        self._listen_tried = False
        self._durable_end = 0  # the records below it were made durable by durable()
        try:
            self._db = _connect(path / DB_FILE)
        except sqlite3.Error as e:
            raise storage_error(f"cannot open topic '{name}'", path, e) from None

    def append(self, batch: Sequence[tuple[bytes | None, bytes]]) -> list[int]:
        """Append the batch in one transaction: all records become visible (and durable) or none."""
        offsets, commit = self._write(batch)
        commit()
        return offsets

    def stage(self, batch: Sequence[tuple[bytes | None, bytes]]) -> Callable[[], None] | None:
        """Write the batch in an open transaction; the returned function commits it.

        The commit is where SQLite writes the WAL, then the readers' bell rings and the WAL is
        synced, with the GIL released, so another thread can run it while this one goes on decoding."""
        return self._write(batch)[1]

    def _write(self, batch: Sequence[tuple[bytes | None, bytes]]) -> tuple[list[int], Callable[[], None]]:
        if not batch:
            return [], lambda: None
        now = int(time.time() * 1000)
        try:
            # BEGIN IMMEDIATE takes the write lock first, so reading next_offset and
            # bumping it cannot interleave with another writer.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (first,) = self._db.execute(
                    "SELECT next_offset FROM topics WHERE name=?", (self.name,)
                ).fetchone()
                offsets = list(range(first, first + len(batch)))
                self._db.executemany(
                    "INSERT INTO records (topic, offset, key, value, ts) VALUES (?, ?, ?, ?, ?)",
                    [(self.name, off, key, value, now) for off, (key, value) in zip(offsets, batch)],
                )
                self._db.execute(
                    "UPDATE topics SET next_offset=? WHERE name=?", (first + len(batch), self.name)
                )
                if not self._page_size:
                    self._page_size = int(self._db.execute("PRAGMA page_size").fetchone()[0])
                self._frames += wal_frames((len(v) + len(k or b"") for k, v in batch), self._page_size)
            except BaseException:
                self._rollback()
                raise
        except sqlite3.Error as e:
            raise storage_error(f"cannot append to topic '{self.name}'", self.path, e) from None
        return offsets, self._commit

    def _commit(self) -> None:
        try:
            try:
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        except sqlite3.Error as e:
            raise storage_error(f"cannot append to topic '{self.name}'", self.path, e) from None
        self._bell.ring()
        try:
            self._fsync()
        except OSError as e:  # (committed and visible, but not known to be durable: stop, say why)
            raise storage_error(f"cannot make the append to topic '{self.name}' durable", self.path, e) from None
        if self._frames >= CHECKPOINT_FRAMES:
            self._checkpoint()

    def idle(self) -> None:
        """Checkpoint the WAL if IDLE_CHECKPOINT_FRAMES were written since the last checkpoint."""
        if self._frames >= IDLE_CHECKPOINT_FRAMES:
            self._checkpoint()

    def _checkpoint(self) -> None:
        self._frames = 0
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # the WAL grows until the next one (SQLite ignores its autocheckpoint's errors too)

    def _rollback(self) -> None:
        """Undo the open transaction, if SQLite has not already: after SQLITE_FULL (and some I/O
        errors) it rolls back by itself, and a second ROLLBACK's "no transaction is active" would
        hide the cause. The caller raises the first error."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection is unusable; the first error says why

    def read(self, from_offset: int, wait: float = 0.0, max_records: int = 1000) -> list[Record]:
        deadline = time.monotonic() + wait
        while True:
            # The version, then the query: a commit after the query shows as a new version, and its
            # ring waits in the listener (if it listened by then) even if it came before the wait began.
            version = self._data_version() if wait > 0 else None
            with _storage(f"cannot read topic '{self.name}'", self.path):
                rows = self._db.execute(
                    "SELECT offset, key, value, ts FROM records WHERE topic=? AND offset>=? ORDER BY offset LIMIT ?",
                    (self.name, from_offset, max_records),
                ).fetchall()
            now = time.monotonic()
            if rows:
                self._last_data = now
            if rows or now >= deadline:
                return [Record(offset=o, key=k, value=v, timestamp_ms=ts) for o, k, v, ts in rows]
            self._wait_commit(version, deadline)

    def _wait_commit(self, version: int | None, deadline: float) -> None:
        """Until another connection commits (data_version moves from `version`) or the deadline."""
        if not self._listen_tried:  # the first wait: listen, then look again for what came before
            self._listen_tried = True
            self._listener = Listener.open(self.path)
            if self._data_version() != version:
                return
        while (now := time.monotonic()) < deadline:
            recent_data, rung = now - self._last_data < FAST_WINDOW, now - self._rung < FAST_WINDOW
            if self._listener is None:
                interval = FAST_POLL if recent_data else POLL_INTERVAL
            else:  # the bell wakes this reader; polls are for a writer that does not ring
                interval = FAST_POLL if recent_data and not rung else BELL_POLL
            timeout = min(interval, deadline - now)
            if self._listener is None:
                time.sleep(timeout)
            elif self._listener.wait(timeout):
                self._rung = time.monotonic()
            if self._data_version() != version:
                return

    def durable(self, end: int) -> None:
        """fsync the WAL (the writer's own fsync may not have returned yet: see the module's docstring)."""
        if end <= self._durable_end:
            return
        try:
            self._fsync()
        except OSError as e:
            raise storage_error(f"cannot make the records of topic '{self.name}' durable", self.path, e) from None
        self._durable_end = end

    def _fsync(self) -> None:
        """Sync the WAL, which holds every commit not yet checkpointed (SQLite syncs the database file before
        a checkpoint lets the WAL start over). fdatasync, as SQLite's own sync of the WAL on Linux: on any
        descriptor it makes every written page of the file durable, whichever process wrote it."""
        try:
            fd = os.open(self.path / (DB_FILE + "-wal"), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # no WAL: the last connection to close checkpointed and synced it all
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def value_sizes(self, start: int, end: int) -> list[int] | None:
        with _storage(f"cannot read topic '{self.name}'", self.path):
            rows = self._db.execute("SELECT length(value) FROM records WHERE topic=? AND offset>=? AND offset<? "
                                    "ORDER BY offset", (self.name, start, end)).fetchall()
            return [int(n) for (n,) in rows]

    def end_offset(self) -> int:
        with _storage(f"cannot read topic '{self.name}'", self.path):
            row = self._db.execute("SELECT next_offset FROM topics WHERE name=?", (self.name,)).fetchone()
        if row is None:
            raise TopicNotFound(f"topic '{self.name}' was deleted")
        return int(row[0])

    def close(self) -> None:
        self._db.close()
        self._bell.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _data_version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])


def _connect(db_path: Path) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves; busy_timeout lets a
    # second writer (cdc-topic produce next to a running producer) wait its turn.
    db = sqlite3.connect(db_path, isolation_level=None, timeout=BUSY_TIMEOUT, check_same_thread=False)
    try:
        _configure(db)
    except BaseException:
        db.close()
        raise
    return db


def _configure(db: sqlite3.Connection) -> None:
    # Pages of 16 KiB (SQLite's default is 4 KiB): a row-batch record (~20 KB of JSON) then
    # spans 2 pages instead of 5, and an append writes and checkpoints fewer, larger pages
    # (bench/README.md, "Measurements behind the code"). It only applies when the file is
    # created: existing streams keep their page size.
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")
    _set_wal(db, time.monotonic() + BUSY_TIMEOUT)
    db.execute("PRAGMA synchronous=NORMAL")  # the WAL's fsync after the commit: EmbeddedTopic._commit
    db.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT}")


def wal_frames(sizes: Iterable[int], page_size: int) -> int:
    """About the WAL frames a commit of records of these sizes writes: the leaf pages their first
    bytes fill (a record keeps up to ~1/4 page in its leaf, the b-tree's leaves ~70% full), their
    overflow pages, and a few more (the b-tree's interior, the topic's row, the file header). Within
    0.65-1.6x of what SQLite wrote for commits of 100 B to 4 MiB records."""
    local = (page_size - 12) * 64 // 255 - 23  # SQLite's maxLocal for an index b-tree (WITHOUT ROWID)
    leaf_bytes = overflow = 0
    for n in sizes:
        leaf_bytes += min(n, local)
        if n > local:
            overflow += -(-(n - local) // (page_size - 4))
    return -(-leaf_bytes * 10 // (page_size * 7)) + overflow + 3


def _set_wal(db: sqlite3.Connection, deadline: float) -> None:
    # Two processes creating the same stream.db at once (a producer and cdc-topic):
    # the switch to WAL can fail with "database is locked" without SQLite's busy
    # handler ever waiting (seen once in 360 racing opens), so wait for it here.
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(POLL_INTERVAL)


def _check_name(name: str) -> None:
    if not name or len(name) > 255 or any(c in name for c in "\0\n"):
        raise TopicError(f"invalid topic name {name!r}: use 1-255 printable characters")


# SQLite's primary result codes (the low byte of sqlite3.Error.sqlite_errorcode).
_SQLITE_READONLY, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 8, 11, 13, 14, 26


@contextmanager
def _storage(doing: str, path: Path) -> Iterator[None]:
    """Raise storage_error for an SQLite failure inside."""
    try:
        yield
    except sqlite3.Error as e:
        raise storage_error(doing, path, e) from None


def storage_error(doing: str, path: Path, error: sqlite3.Error | OSError) -> TopicError:
    """The TopicError for a failure of the stream's SQLite file or directory: `doing` ("cannot
    append to topic 't'"), then the cause in the user's terms (disk full, read-only, damaged file)
    and the fix.

    A failed append left nothing behind (its transaction is rolled back), so every fix ends with
    "start again": the producer resumes after the last transaction the stream holds."""
    code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
    errno_ = error.errno if isinstance(error, OSError) else None
    file = path / DB_FILE
    if code == _SQLITE_FULL or errno_ == errno.ENOSPC:
        return TopicError(f"{doing}: no space left under the stream's path {path}; free space there "
                          "and start again (the stream keeps every append it acknowledged)")
    if code == _SQLITE_READONLY or errno_ == errno.EROFS or (code == _SQLITE_CANTOPEN and not os.access(path, os.W_OK)):
        return TopicError(f"{doing}: the stream's path {path} is read-only; make it writable and start again")
    if errno_ == errno.EIO:
        return TopicError(f"{doing}: the disk under the stream's path {path} failed a write ({error}); check it "
                          "(dmesg), then start again")
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return TopicError(f"{doing}: the stream's file {file} is damaged ({error}); restore it from a "
                          "backup, or move it away to start a new stream (then snapshot the follower again)")
    return TopicError(f"{doing}: {error}")
