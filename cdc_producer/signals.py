"""Requests to a running producer: copy tables again, stop, pause or resume the copies.

Two ways in, one request:

- the **signal table** (`[snapshot] signal_table = "db.table"` on the leader): a row inserted there
  reaches the producer through the binlog, in order with the changes around it. Its columns are
  `id` (any text), `type` (`execute-snapshot`, `stop-snapshot`, `pause-snapshot`,
  `resume-snapshot`) and `data` (JSON: `{"tables": ["db.t", ...]}`; no tables: every table the
  filters pass, for `execute-snapshot`; every copy, for `stop-snapshot`; `execute-snapshot` may add
  `"where": "<leader SQL condition>"`: only the rows matching it are copied again, see `where_problem`).
  The producer never publishes the signal table's rows or DDL.
- a **request file** in `[data] base_path` (`requests/*.json`, the same `type` and `data`), written by
  `cdc-producer PROFILE --snapshot db.t ...` when a producer of that profile is running (it holds
  `producer-<topic>.lock`): for leaders the producer may not write.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cdc_stream import values
from cdc_stream.errors import ConfigError
from cdc_stream.filters import TableFilter

KINDS = ("execute-snapshot", "stop-snapshot", "pause-snapshot", "resume-snapshot")
POLL_INTERVAL = 0.5  # seconds between looks into the request directory


@dataclass(frozen=True)
class Request:
    """One signal: what to do, to which tables (empty: all), and where it came from (for the log)."""

    kind: str
    tables: tuple[str, ...] = ()
    source: str = ""
    where: str | None = None  # execute-snapshot: copy only the rows matching this leader SQL condition


def parse_request(kind: Any, data: Any, source: str) -> Request:
    """A signal's type and data (JSON text or None) -> Request; raises ValueError naming what is wrong."""
    if kind not in KINDS:
        raise ValueError(f"type must be one of {', '.join(KINDS)}, got {kind!r}")
    tables: list[str] = []
    if data not in (None, ""):
        try:
            parsed = json.loads(data)
        except json.JSONDecodeError as e:
            raise ValueError(f"data is not JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise ValueError('data must be a JSON object such as {"tables": ["db.t"]}')
        raw = parsed.get("tables", [])
        if not isinstance(raw, list) or not all(isinstance(t, str) and "." in t for t in raw):
            raise ValueError('data "tables" must be a list of "database.table" names')
        tables = raw
        where = parsed.get("where")
        if where is not None:
            if kind != "execute-snapshot":
                raise ValueError('data "where" goes with execute-snapshot only')
            if not isinstance(where, str) or (problem := where_problem(where)) is not None:
                raise ValueError(f'data "where" {problem if isinstance(where, str) else "must be a string"}')
            return Request(kind, tuple(tables), source, where.strip())
    return Request(kind, tuple(tables), source)


# What a copy's condition may not hold: it runs on the leader (each chunk's SELECT) and on the follower (each
# chunk's DELETE), so it must say the same of the same row on both, at any time, and do nothing else.
_NOT_IN_WHERE = frozenset([
    "select", "sleep", "benchmark", "get_lock", "release_lock", "release_all_locks", "is_free_lock", "is_used_lock",
    "load_file", "master_pos_wait", "master_gtid_wait", "source_pos_wait", "wait_for_executed_gtid_set", "now",
    "sysdate", "curdate", "curtime", "current_date", "current_time", "current_timestamp", "localtime",
    "localtimestamp", "unix_timestamp", "utc_date", "utc_time", "utc_timestamp", "rand", "uuid", "uuid_short",
    "sys_guid", "nextval", "lastval", "setval", "last_insert_id", "connection_id", "user", "current_user",
    "session_user", "system_user", "database", "schema", "found_rows", "row_count", "last_value", "current_role",
])
_BARE = frozenset(["select", "current_date", "current_time", "current_timestamp", "localtime", "localtimestamp",
                   "utc_date", "utc_time", "utc_timestamp", "current_user", "current_role"])  # (no parentheses needed)
_WORD = re.compile(
    r"'(?:[^'\\]|''|\\.)*'|\"(?:[^\"\\]|\"\"|\\.)*\"|`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_$]*|[@;#]|--|/\*",
    re.DOTALL)


def where_problem(where: str) -> str | None:
    """Why a copy's condition is refused (None: accepted as far as text tells; the leader then checks it).

    A condition on the table's own columns, the same on leader and follower: no subquery, no variable,
    no comment or second statement, none of the functions whose value depends on the session or the time."""
    text = where.strip()
    if not text:
        return "is empty"
    if len(text) > 2000:
        return "is longer than 2000 characters"
    for m in _WORD.finditer(text):
        word = m.group(0)
        if word in ("@", ";", "#", "--", "/*"):
            return f"may not hold {word!r} (variables, comments and further statements are refused)"
        name = word.lower()
        if word[0] not in "'\"`" and name in _NOT_IN_WHERE and (
                name in _BARE or text[m.end():].lstrip().startswith("(")):
            return (f"may not use {word.upper()} (a subquery, or a value that differs between leader and follower "
                    "or over time: the follower's DELETE runs it too)")
    return None


@dataclass(frozen=True)
class SignalFilter(TableFilter):
    """The filters the binlog reader is given: they let the signal table's rows through, which the
    producer's own filters (and so the topic) never see."""

    signal: tuple[str, str] = ("", "")

    def allows_db(self, db: str | None) -> bool:
        return db == self.signal[0] or super().allows_db(db)

    def allows_table(self, db: str | None, table: str) -> bool:
        return (db, table) == self.signal or super().allows_table(db, table)


def reader_filters(filters: TableFilter, signal_table: str | None) -> TableFilter:
    """What the binlog reader must let through: the filters, plus the signal table."""
    if signal_table is None:
        return filters
    db, _, table = signal_table.partition(".")
    return SignalFilter(filters.include_dbs, filters.exclude_dbs, filters.include_tables, filters.exclude_tables,
                        signal=(db, table))


@dataclass
class Signals:
    """Requests received and not acted on yet: from the signal table's rows (read by the Assembler)
    and from request files (polled by the run loop)."""

    table: tuple[str, str] | None
    requests_dir: Path | None
    pending: list[Request] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _next_poll: float = 0.0

    def is_signal(self, db: str | None, table: str) -> bool:
        """Whether db.table is the signal table."""
        return self.table is not None and (db, table) == self.table

    def on_rows(self, operation: str, columns: list[str], rows: list[Any]) -> None:
        """Rows written to the signal table: each inserted row is a request."""
        if operation != "Add":
            return
        for row in rows:
            fields = {c: _text(v) for c, v in zip(columns, row)}
            source = f"signal {fields.get('id')!r}"
            try:
                self.pending.append(parse_request(fields.get("type"), fields.get("data"), source))
            except ValueError as e:
                self.problems.append(f"{source} in {'.'.join(self.table or ())} ignored: {e}")

    def poll(self) -> None:
        """Take the request files (at most every POLL_INTERVAL seconds), oldest first."""
        if self.requests_dir is None or time.monotonic() < self._next_poll:
            return
        self._next_poll = time.monotonic() + POLL_INTERVAL
        try:
            names = sorted(p for p in self.requests_dir.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return
        for path in names:
            source = f"request file {path.name}"
            try:
                body = json.loads(path.read_text())
                self.pending.append(parse_request(body.get("type"), json.dumps(body.get("data") or {}), source))
            except (OSError, ValueError, AttributeError) as e:
                self.problems.append(f"{source} ignored: {e}")
            path.unlink(missing_ok=True)

    def due(self) -> bool:
        """Whether requests wait, or the request directory is to be looked into."""
        return bool(self.pending or self.problems) or (self.requests_dir is not None
                                                        and time.monotonic() >= self._next_poll)

    def take(self) -> tuple[list[Request], list[str]]:
        """The requests and the problems since the last call."""
        out, self.pending = self.pending, []
        problems, self.problems = self.problems, []
        return out, problems


def _text(tagged: Any) -> Any:
    value = values.to_param(tagged)
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


# -- the one running producer of a profile, and requests to it --------------------------------


def lock_path(base_path: str, topic: str) -> Path:
    """The lock a running producer of this topic holds, under [data] base_path."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in topic)
    return Path(base_path) / f"producer-{safe}.lock"


def requests_dir(base_path: str, topic: str) -> Path:
    """Where request files for the running producer of this topic go."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in topic)
    return Path(base_path) / f"requests-{safe}"


def hold_lock(base_path: str, topic: str) -> TextIO:
    """Take the producer's lock (kept until the returned file is closed); ConfigError if another holds it."""
    path = lock_path(base_path, topic)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = path.open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise ConfigError(f"another cdc-producer is running for topic '{topic}' (it holds {path}); "
                          "stop it first, or use --snapshot to ask it to copy tables") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def running_pid(base_path: str, topic: str) -> int | None:
    """The pid of the producer running for this topic (None: none is)."""
    path = lock_path(base_path, topic)
    try:
        f = path.open("a+")
    except OSError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            text = f.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


def send_request(base_path: str, topic: str, kind: str, tables: list[str]) -> Path:
    """Write a request file for the running producer; it acts on it within a second."""
    directory = requests_dir(base_path, topic)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
    tmp = directory / f"{name}.tmp"
    tmp.write_text(json.dumps({"type": kind, "data": {"tables": tables}}))
    final = directory / f"{name}.json"
    tmp.rename(final)  # whole or not at all: the producer reads only *.json
    return final
