"""Delta tables kept equal to the source tables, from the `mysql_cdc` source's micro-batches.

Per source table: `<lake>/state/<database>/<table>` holds the current rows, partitioned by
`_cdc_bucket` (cdc_spark/lakefiles.py: a hash of the row's key), each row with the source
position of the change that wrote it; `<lake>/changelog/<database>/<table>` every change,
appended. The data files are written where the batch's rows are (an `Engine`: Spark's
executors, or this process for tests); the driver plans, and commits each table's Delta log.

A micro-batch is cut at its DDL statements into segments. Its rows are spilled to files by the
tasks that read them (cdc_spark/spill.py), whose index gives each segment's tables, columns and
keys; per segment, one task per (table, bucket) writes the files, all tables in parallel, then
one Delta commit per table. DDL (create, ADD COLUMN, DROP, TRUNCATE) is
committed by the driver (an ADD COLUMN's default is written into existing files by the
executors).

Exactly once: Spark replays a micro-batch whose commit it did not record. Every Delta commit
of the job carries an application transaction (Delta's `txn` action: app id = the query id,
version = `version(batch, item, slot)`, increasing along the batch for each table); a commit
whose table already records a version at or past it is skipped on replay. Foreign commits
(OPTIMIZE, VACUUM, compaction) keep the `txn` versions, so they never make a step run twice
or the table look new. The state table's commits also carry the column types
(`mysql_cdc.columns`) and the bucket key; the job reads them from its latest commit that has
them, so a restarted job types values as the stream had them, not as the leader has them now.

`CDC_LAKE_CRASH=plan|merge` (tests only) kills the job's process group with SIGKILL at the
start of the first non-empty batch (`plan`: Spark has written the batch's offsets, nothing
is in the lake) or right after that batch's first state commit (`merge`: before the rest of
the batch and before Spark's commit).
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

import msgspec
import pyarrow as pa

from cdc_spark.convert import ImageConverter
from cdc_spark.ddl import AddedColumn, Change, changes
from cdc_spark.lakefiles import BUCKET, Plan, Rewrite, Written, changelog_schema, now_ms, rewrite_file, state_schema
from cdc_spark.schema import ColumnType, TableSchema
from cdc_spark.spill import META, Pos, SpillIndex, run_group, spill
from cdc_stream.column_types import KIND_OF
from cdc_stream.errors import LakeError
from cdc_stream.values import encode

TAG_COLUMNS = "mysql_cdc.columns"
TAG_DROPPED = "mysql_cdc.dropped"
TAG_KEY = "mysql_cdc.key"  # {"key": [...], "keyed": bool}: the bucket key
TAG_WRITERS = "mysql_cdc.writers"  # the executors that wrote the commit's files
LOCK_FILE = "_mysql_cdc.lock"
SLOT_CREATE, SLOT_DATA, SLOT_REWRITE, SLOT_LOG = 0, 1, 2, 3

SchemaLookup = Callable[[str, str], TableSchema | None]  # (database, table) -> the leader's columns now


def version(batch: int, item: int, slot: int) -> int:
    """The application-transaction version of one commit: batch, then the batch's items (segments and DDL
    statements, in order), then the commit's slot within the item (4 per table a statement changes: a
    statement changes up to 1,024 tables, a batch holds up to 2^19 statements)."""
    assert 0 <= slot < 1 << 12 and 0 <= item < 1 << 24
    return (batch << 36) | (item << 12) | slot


def schema_json(schema: TableSchema) -> str:
    """The column types as stored in commit metadata."""
    return json.dumps([msgspec.structs.asdict(_Col(**c.__dict__)) for c in schema.columns])


class _Col(msgspec.Struct):
    name: str
    data_type: str
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    charset: str | None = None
    nullable: bool = True
    default: str | None = None


def schema_of(database: str, table: str, text: str) -> TableSchema:
    cols = msgspec.json.decode(text, type=list[_Col])
    return TableSchema(database, table, tuple(ColumnType(**msgspec.structs.asdict(c)) for c in cols))


def _dir(name: str) -> str:
    return quote(name, safe="$-_.@ ") or "%00"


def job_commit(path: Path) -> dict[str, Any] | None:
    """The latest commit of a state table that this job made (foreign commits, e.g. OPTIMIZE, are passed over)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return None
    table = DeltaTable(str(path))
    for limit in (16, None):
        for commit in table.history(limit):
            if TAG_COLUMNS in commit:
                return commit
    return None


@dataclass
class LakeTable:
    """One source table's two Delta tables and the column types the stream is at."""

    database: str
    table: str
    state_path: Path
    changelog_path: Path
    schema: TableSchema | None = None  # None: not in the lake yet
    dropped: bool = False
    key: tuple[str, ...] | None = None  # the bucket key, once known
    keyed: bool = True

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def load(self) -> None:
        """Read the column types and the bucket key from the job's latest commit, if the table exists."""
        commit = job_commit(self.state_path)
        if commit is None:
            return
        self.schema = schema_of(self.database, self.table, commit[TAG_COLUMNS])
        self.dropped = commit.get(TAG_DROPPED) == "true"
        if TAG_KEY in commit:
            key = json.loads(commit[TAG_KEY])
            self.key, self.keyed = tuple(key["key"]), bool(key["keyed"])

    def metadata(self, writers: Sequence[str] = ()) -> dict[str, str]:
        """Commit metadata of a state commit."""
        assert self.schema is not None
        meta = {TAG_COLUMNS: schema_json(self.schema), TAG_DROPPED: str(self.dropped).lower()}
        if self.key is not None:
            meta[TAG_KEY] = json.dumps({"key": list(self.key), "keyed": self.keyed})
        if writers:
            meta[TAG_WRITERS] = ",".join(sorted(set(writers)))
        return meta


@dataclass
class Lake:
    """The lake directory and what the job knows of its tables."""

    root: Path
    lookup: SchemaLookup
    tables: dict[tuple[str, str], LakeTable] = field(default_factory=dict)
    commits: int = 0  # Delta commits made (not skipped) by this process
    # Called at each of a batch's crash windows, by name: "plan" (planned, nothing committed) and "merge"
    # (a table's state committed, the rest of the batch not). None in production; the tests inject a
    # SIGKILL there (tests/lake_crash.py) to prove a restart loses and repeats nothing.
    at_window: Callable[[str], None] | None = None

    def table(self, database: str, table: str) -> LakeTable:
        key = (database, table)
        if key not in self.tables:
            t = LakeTable(database, table, self.root / "state" / _dir(database) / _dir(table),
                          self.root / "changelog" / _dir(database) / _dir(table))
            t.load()
            self.tables[key] = t
        return self.tables[key]

    def tracked(self) -> list[LakeTable]:
        """Tables the lake holds (found on disk or created by this run)."""
        state = self.root / "state"
        if state.is_dir():
            for db_dir in sorted(state.iterdir()):
                for t_dir in sorted(db_dir.iterdir()) if db_dir.is_dir() else []:
                    self.table(unquote(db_dir.name), unquote(t_dir.name))
        return [t for t in self.tables.values() if t.schema is not None]

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The lake's lock (a file lock on the driver's host): a batch's writes and commits, or maintenance."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_FILE, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


@dataclass
class Change_:
    """A DDL statement of a micro-batch, as the source gave it."""

    offset: int
    row_index: int
    op: str
    meta: dict[str, Any]
    ddl: str | None = None

    @property
    def pos(self) -> Pos:
        return (self.offset, self.row_index)


@dataclass(frozen=True)
class TableSummary:
    """What a segment holds of one table."""

    segment: int
    database: str
    table: str
    pks: tuple[tuple[str, ...], ...]
    columns: tuple[tuple[str, ...], ...]
    first_offset: int
    last_offset: int
    rows: int


class Engine(Protocol):
    """Where a micro-batch's rows are: Spark's executors (cdc_spark/lakespark.py) or this process (LocalEngine)."""

    def ddl(self) -> list[Change_]:
        """The batch's DDL rows, in source order (few: they are collected)."""

    def summary(self, ddl: Sequence[Pos]) -> list[TableSummary]:
        """Per segment (rows between DDL positions) and table: its keys, columns, first offset, row count."""

    def write(self, segment: int, ddl: Sequence[Pos], plans: dict[tuple[str, str], Plan]) -> list[Written]:
        """Write the segment's state and change-log files of the planned tables (grouped by table and bucket)."""

    def rewrite(self, jobs: list[Rewrite]) -> list[Written]:
        """Rewrite state files (ADD COLUMN with a default), in parallel."""

    def close(self) -> None:
        """Release the batch (its spill files)."""


class BatchWriter:
    """Applies one micro-batch to the lake: segments and DDL in source order, each commit once."""

    def __init__(self, lake: Lake, query: str, batch: int, engine: Engine):
        self.lake, self.query, self.batch, self.engine = lake, query, batch, engine
        self.app_id = f"mysql_cdc:{query}"
        self.rows = 0  # changes in the batch (DDL included)
        self.last_offset: int | None = None
        self.tables: set[tuple[str, str]] = set()
        self.writers: set[str] = set()
        # seconds: reading the batch and planning (the first actions read the source), the executors' writes,
        # the rest (the driver's Delta commits and DDL)
        self.seconds = {"read": 0.0, "write": 0.0, "commit": 0.0}

    # -- commits ----------------------------------------------------------------------------------

    def _done(self, path: Path, v: int) -> bool:
        """Whether the table already holds this commit (a replay)."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(str(path)):
            return False
        done = DeltaTable(str(path)).transaction_version(self.app_id)
        return done is not None and done >= v

    def _props(self, v: int, meta: dict[str, str] | None = None) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(custom_metadata=meta, app_transactions=[Transaction(self.app_id, v)])

    def _committed(self, state_data: bool = False) -> None:
        self.lake.commits += 1
        if state_data and self.lake.at_window is not None:
            self.lake.at_window("merge")

    # -- the batch --------------------------------------------------------------------------------

    def run(self) -> None:
        """All of the batch: its segments and statements, in source order."""
        started = time.monotonic()
        ddl = self.engine.ddl()
        positions = [d.pos for d in ddl]
        summaries = self.engine.summary(positions)
        self.seconds["read"] = time.monotonic() - started
        self.rows = sum(s.rows for s in summaries) + len(ddl)
        offsets = [s.last_offset for s in summaries] + [d.offset for d in ddl]
        self.last_offset = max(offsets) if offsets else None
        self.tables = {(s.database, s.table) for s in summaries} | {(d.meta["database"], d.meta["table"]) for d in ddl}
        if (ddl or summaries) and self.lake.at_window is not None:
            self.lake.at_window("plan")
        by_segment: dict[int, list[TableSummary]] = {}
        for s in summaries:
            by_segment.setdefault(s.segment, []).append(s)
        with self.lake.locked():
            for i in range(len(ddl) + 1):
                if i in by_segment:
                    self._segment(2 * i, i, positions, sorted(by_segment[i], key=lambda s: (s.database, s.table)))
                if i < len(ddl):
                    self._ddl(2 * i + 1, ddl[i])
        self.seconds["commit"] = time.monotonic() - started - self.seconds["read"] - self.seconds["write"]

    def _segment(self, item: int, segment: int, positions: list[Pos], summaries: list[TableSummary]) -> None:
        from deltalake import DeltaTable

        plans: dict[tuple[str, str], Plan] = {}
        pinned: dict[tuple[str, str], int] = {}
        v_create, v_data, v_log = (version(self.batch, item, s) for s in (SLOT_CREATE, SLOT_DATA, SLOT_LOG))
        for s in summaries:
            t = self.lake.table(s.database, s.table)
            columns = list(dict.fromkeys(c for cols in s.columns for c in cols))
            if t.schema is None or t.dropped:
                self._create(t, s.first_offset, columns, v_create)
            assert t.schema is not None
            extra = [c for c in columns if c not in t.schema.names]
            if extra:
                raise LakeError(f"offset {s.first_offset}: {t.name} has column(s) {', '.join(extra)} that the lake's "
                                "table lacks and no ALTER TABLE on the topic added; the lake cannot follow: rebuild it "
                                "(new --lake and --checkpoint directories)")
            self._key(t, s)
            write_state, write_log = not self._done(t.state_path, v_data), not self._done(t.changelog_path, v_log)
            if not (write_state or write_log):
                continue
            self._changelog_table(t)
            files: dict[int, tuple[str, ...]] = {}
            if write_state:
                state = DeltaTable(str(t.state_path))
                pinned[(s.database, s.table)] = state.version()
                files = _bucket_files(state)
            assert t.key is not None
            plans[(s.database, s.table)] = Plan(s.database, s.table, t.schema, t.key, t.keyed, str(t.state_path),
                                                str(t.changelog_path), files, write_state, write_log)
        if not plans:
            return
        started = time.monotonic()
        written = self.engine.write(segment, positions, plans)
        self.seconds["write"] += time.monotonic() - started
        errors = sorted((w for w in written if w.kind == "error"), key=lambda w: _offset_of(w.error))
        if errors:
            raise LakeError(errors[0].error)
        self.writers.update(w.writer for w in written)
        for key, plan in plans.items():
            t = self.lake.tables[key]
            mine = [w for w in written if (w.database, w.table) == key]
            if plan.write_state:
                self._commit_state(t, [w for w in mine if w.kind == "state"], pinned[key], v_data)
            if plan.write_log:
                self._commit_log(t, [w for w in mine if w.kind == "changelog"], v_log)

    def _key(self, t: LakeTable, s: TableSummary) -> None:
        """The table's bucket key: its primary key, or (none) every column it was created with."""
        assert t.schema is not None
        pks = set(s.pks)
        if t.key is None:
            if len(pks) != 1:
                raise LakeError(f"offset {s.first_offset}: {t.name}'s changes name different primary keys "
                                f"({' / '.join(','.join(p) or '(none)' for p in sorted(pks))}); the lake cannot follow")
            (pk,) = pks
            t.key, t.keyed = (pk, True) if pk else (tuple(t.schema.names), False)
        expected = t.key if t.keyed else ()
        if pks != {expected}:
            found = next(p for p in sorted(pks) if p != expected)
            raise LakeError(f"offset {s.first_offset}: the primary key of {t.name} is now ({', '.join(found)}), the "
                            f"lake's table was built on ({', '.join(expected)}); the lake cannot follow: rebuild it "
                            "(new --lake and --checkpoint directories)")
        missing = [c for c in t.key if c not in t.schema.names]
        if missing:
            raise LakeError(f"offset {s.first_offset}: primary key {list(t.key)} names a column not in the lake's "
                            f"{t.name}")

    def _commit_state(self, t: LakeTable, written: list[Written], pinned: int, v: int) -> None:
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction, RemoveAction

        removed = [(p, w.bucket) for w in written for p in w.removed]
        state = DeltaTable(str(t.state_path))
        if state.version() != pinned and removed:
            active = set(_bucket_paths(state))
            gone = [p for p, _ in removed if p not in active]
            if gone:
                raise LakeError(f"{t.name}: files this batch rewrote ({gone[0]}) were removed by another writer while "
                                "it ran (OPTIMIZE or VACUUM without the lake's lock?); start the job again: the batch "
                                "is replayed")
        now = now_ms()
        actions: list[Any] = [AddAction(w.path, w.size, {BUCKET: str(w.bucket)}, now, True,
                                        json.dumps({"numRecords": w.records})) for w in written if w.path]
        actions += [RemoveAction(p, True, now, None, {BUCKET: str(b)}) for p, b in removed]
        if not actions:
            return
        state.create_write_transaction(actions, "append", state.schema(), partition_by=[BUCKET],
                                       commit_properties=self._props(v, t.metadata([w.writer for w in written])))
        self._committed(state_data=True)

    def _commit_log(self, t: LakeTable, written: list[Written], v: int) -> None:
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction

        if not written:
            return
        log = DeltaTable(str(t.changelog_path))
        now = now_ms()
        actions: list[Any] = [AddAction(w.path, w.size, {}, now, True, json.dumps({"numRecords": w.records}))
                              for w in written]
        meta = {TAG_WRITERS: ",".join(sorted({w.writer for w in written}))}
        log.create_write_transaction(actions, "append", log.schema(), commit_properties=self._props(v, meta))
        self._committed()

    def _changelog_table(self, t: LakeTable) -> None:
        """The change-log table, with the columns of the table's current schema (an empty commit if it changed)."""
        from deltalake import DeltaTable, write_deltalake

        assert t.schema is not None
        schema = changelog_schema(t.schema)
        if DeltaTable.is_deltatable(str(t.changelog_path)):
            have = DeltaTable(str(t.changelog_path)).schema().to_arrow()
            if pa.schema(have).equals(schema):
                return
        write_deltalake(str(t.changelog_path), schema.empty_table(), mode="append", schema_mode="merge")

    # -- DDL ------------------------------------------------------------------------------------

    def _create(self, t: LakeTable, offset: int, columns: list[str] | None, v: int) -> None:
        """Put a table in the lake: its columns (as the stream names them) typed from the leader."""
        from deltalake import write_deltalake

        leader = self.lake.lookup(t.database, t.table)
        if leader is None:
            raise LakeError(f"offset {offset}: {t.name} is not on the leader any more, so its column types are "
                            "unknown; the lake cannot follow it (filter it out with the producer's [filters])")
        wanted = columns if columns is not None else leader.names
        missing = [c for c in wanted if leader.column(c) is None]
        if missing:
            raise LakeError(f"offset {offset}: column(s) {', '.join(missing)} of {t.name} are not on the leader any "
                            "more, so their types are unknown; the lake cannot follow them")
        schema = TableSchema(t.database, t.table, tuple(c for c in leader.columns if c.name in wanted))
        if t.schema is not None and t.schema != schema:
            old, new = t.schema.names, schema.names
            if new[:len(old)] != old and not set(old) <= set(new):
                raise LakeError(f"offset {offset}: {t.name} was created again with other columns ({', '.join(new)}; "
                                f"the lake has {', '.join(old)}); the lake cannot follow: rebuild it")
        t.schema, t.dropped, t.key, t.keyed = schema, False, None, True
        if not self._done(t.state_path, v):
            write_deltalake(str(t.state_path), state_schema(schema).empty_table(), mode="overwrite",
                            schema_mode="overwrite", partition_by=[BUCKET],
                            commit_properties=self._props(v, t.metadata()))
            self._committed()

    def _ddl(self, item: int, r: Change_) -> None:
        """Follow one DDL statement (raises LakeError for what cannot be followed)."""
        assert r.ddl is not None
        held = {(t.database, t.table) for t in self.lake.tracked() if not t.dropped}
        for n, change in enumerate(changes(r.ddl, r.meta["database"])):
            self._change(item, n, r, change, held)

    def _change(self, item: int, n: int, r: Change_, change: Change, held: set[tuple[str, str]]) -> None:
        db, name = change.database or "", change.table
        vs = [version(self.batch, item, 4 * n + slot) for slot in range(4)]
        if change.kind == "create" and name is not None:
            t = self.lake.table(db, name)
            if t.schema is not None and not t.dropped and change.if_not_exists:
                return
            self._create(t, r.offset, change.columns, vs[SLOT_CREATE])
            self._log_ddl(t, r, vs[SLOT_LOG])
            return
        targets = [(db, name)] if name is not None else sorted(k for k in held if k[0] == db)
        targets = [k for k in targets if k in held]
        if change.kind == "none" or not targets:
            return
        for key in targets:
            t = self.lake.table(*key)
            if change.kind == "unsupported":
                raise LakeError(f"offset {r.offset}: the lake cannot follow `{r.ddl}` on {t.name} ({change.reason}); "
                                "only new tables, ADD COLUMN, DROP and TRUNCATE are followed: rebuild the lake "
                                "from a new snapshot (new --lake and --checkpoint directories)")
            if change.kind == "add_columns":
                self._add_columns(t, r, change.added, vs[SLOT_DATA], vs[SLOT_REWRITE])
            elif change.kind in ("drop", "truncate"):
                self._empty(t, change.kind == "drop", vs[SLOT_DATA])
            self._log_ddl(t, r, vs[SLOT_LOG])

    def _log_ddl(self, t: LakeTable, r: Change_, v: int) -> None:
        """The statement's row in the table's change log."""
        from deltalake import write_deltalake

        assert t.schema is not None
        self._changelog_table(t)
        if self._done(t.changelog_path, v):
            return
        schema = changelog_schema(t.schema)
        values: dict[str, Any] = {"offset": r.offset, "row_index": r.row_index, "op": "ddl", "pk": [], "ddl": r.ddl,
                                  **{k: r.meta.get(k) for k in ("sequence", "ts", "txn_id", "txn_index", "txn_last",
                                                               "position")}}
        row = pa.Table.from_pylist([{n: values.get(n) for n in schema.names}], schema=schema)
        write_deltalake(str(t.changelog_path), row, mode="append", commit_properties=self._props(v))
        self._committed()

    def _empty(self, t: LakeTable, dropped: bool, v: int) -> None:
        from deltalake import DeltaTable

        t.dropped = dropped
        if not self._done(t.state_path, v):
            DeltaTable(str(t.state_path)).delete(commit_properties=self._props(v, t.metadata()))
            self._committed()

    def _add_columns(self, t: LakeTable, r: Change_, added: list[AddedColumn], v_schema: int, v_rewrite: int) -> None:
        """ADD COLUMN: a schema change; existing rows get the column's default (files rewritten by the executors)."""
        from deltalake import DeltaTable, write_deltalake

        assert t.schema is not None
        leader = self.lake.lookup(t.database, t.table)
        new_cols: list[ColumnType] = []
        defaults: list[tuple[str, Any, str | None]] = []
        for a in added:
            col = leader.column(a.name) if leader is not None else None
            if a.problem or col is None:
                why = a.problem or "it is not on the leader any more, so its type is unknown"
                raise LakeError(f"offset {r.offset}: the lake cannot add column {a.name} to {t.name}: {why}; rebuild "
                                "the lake (new --lake and --checkpoint directories) once the statement is behind it")
            value, raw = _default_value(col, a, r.offset, t.name)
            defaults.append((col.name, value, raw))
            if t.schema.column(col.name) is None:  # a replay may have loaded the schema with it already
                new_cols.append(col)
        t.schema = TableSchema(t.database, t.table, t.schema.columns + tuple(new_cols))
        if not self._done(t.state_path, v_schema):
            write_deltalake(str(t.state_path), state_schema(t.schema).empty_table(), mode="append",
                            schema_mode="merge", partition_by=[BUCKET],
                            commit_properties=self._props(v_schema, t.metadata()))
            self._committed()
        fill = tuple(d for d in defaults if d[1] is not None or d[2] is not None)
        if not fill or self._done(t.state_path, v_rewrite):
            return
        state = DeltaTable(str(t.state_path))
        jobs = [Rewrite(t.database, t.table, str(t.state_path), path, bucket, t.schema, fill)
                for bucket, paths in _bucket_files(state).items() for path in paths]
        started = time.monotonic()
        written = self.engine.rewrite(jobs) if jobs else []
        self.seconds["write"] += time.monotonic() - started
        self.writers.update(w.writer for w in written)
        self._commit_state(t, written, state.version(), v_rewrite)


def _bucket_paths(table: Any) -> list[str]:
    return [str(p) for p in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()]


def _bucket_files(table: Any) -> dict[int, tuple[str, ...]]:
    """A state table's current files by bucket."""
    actions = pa.table(table.get_add_actions(flatten=True))
    files: dict[int, list[str]] = {}
    for path, bucket in zip(actions.column("path").to_pylist(), actions.column(f"partition.{BUCKET}").to_pylist()):
        files.setdefault(int(bucket), []).append(path)
    return {b: tuple(p) for b, p in files.items()}


def _offset_of(message: str) -> int:
    head = message.split(":", 1)[0]
    return int(head[7:]) if head.startswith("offset ") and head[7:].isdigit() else -1


def _merge_raw(old: str | None, extra: dict[str, Any]) -> str:
    return json.dumps({**(json.loads(old) if old else {}), **extra}, separators=(",", ":"))


# Kinds (cdc_stream.column_types) whose default, as the DDL spells it, does not tell the value existing rows got.
_NO_DEFAULT = {"timestamp", "bit", "json", "geometry"}


def _default_value(col: ColumnType, added: AddedColumn, offset: int, table: str) -> tuple[Any, str | None]:
    """(typed value, _cdc_raw JSON) existing rows hold in an added column."""
    if added.default is None:
        return None, None
    kind = KIND_OF.get(col.data_type)
    if kind is None or kind in _NO_DEFAULT or (
            added.default == "" and kind not in ("signed", "decimal", "float", "double", "string")):
        raise LakeError(f"offset {offset}: the lake cannot add column {col.name} ({col.data_type}) to {table}: "
                        "the value existing rows got is not known here; rebuild the lake")
    text = added.default
    if kind == "signed" and col.unsigned:
        kind = "unsigned"
    try:
        if kind in ("signed", "unsigned", "year"):
            value: Any = int(text or "0")
        elif kind in ("decimal",):
            from decimal import Decimal

            value = Decimal(text or "0")
        elif kind in ("float", "double"):
            value = float(text or "0")
        elif kind == "binary":
            value = text.encode()
        else:
            value = text
        tagged = encode(value, kind)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise LakeError(f"offset {offset}: default {text!r} of column {col.name} of {table}: {e}") from None
    conv = ImageConverter(TableSchema("", table, (col,)), lake=True)
    values, raw = conv.values([col.name], [tagged])
    return values[0], raw




class SpilledEngine:
    """An Engine over a spilled batch (cdc_spark/spill.py): its index gives the DDL and the summaries, and its
    groups' write tasks run through `map` (this process, or Spark's executors: cdc_spark/lakespark.py)."""

    def _index(self) -> SpillIndex:
        raise NotImplementedError

    def map(self, function: Callable[[Any], Any], items: list[Any], weights: list[int] | None = None) -> list[Any]:
        """function(item) for each item, in order (`weights`: each item's share of the work)."""
        raise NotImplementedError

    def ddl(self) -> list[Change_]:
        return [Change_(d["offset"], d["row_index"], "ddl", {k: d[k] for k in META}, d["ddl"])
                for d in self._index().ddl_rows]

    def summary(self, ddl: Sequence[Pos]) -> list[TableSummary]:
        by: dict[int, list[dict[str, Any]]] = {}
        for segment, row in self._index().summary(ddl):
            by.setdefault(segment, []).append(row)
        return [s for segment in sorted(by) for s in summaries(by[segment], segment)]

    def write(self, segment: int, ddl: Sequence[Pos], plans: dict[tuple[str, str], Plan]) -> list[Written]:
        tasks = self._index().tasks(segment, ddl, plans)
        return [w for found in self.map(run_group, tasks, [t.rows for t in tasks]) for w in found]

    def rewrite(self, jobs: list[Rewrite]) -> list[Written]:
        return self.map(rewrite_file, jobs)

    def close(self) -> None:
        pass


def summaries(rows: Sequence[dict[str, Any]], segment: int) -> list[TableSummary]:
    """A segment's summary rows (per table, key and column list) -> one TableSummary per table."""
    found: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        s = found.setdefault((r["database"], r["table"]), [set(), set(), r["first"], r["last"], 0])
        s[0].add(tuple(r["pk"] or ()))
        s[1].add(tuple(json.loads(r["cols"])) if r["cols"] is not None else ())
        s[2], s[3], s[4] = min(s[2], r["first"]), max(s[3], r["last"]), s[4] + r["n"]
    return [TableSummary(segment, db, t, tuple(sorted(s[0])), tuple(sorted(s[1])), s[2], s[3], s[4])
            for (db, t), s in found.items()]


class LocalEngine(SpilledEngine):
    """The batch's rows in this process (tests, and small batches without Spark): spilled and written as the
    Spark engine does, by one read task over the whole batch."""

    def __init__(self, rows: pa.Table | list[dict[str, Any]]):
        import tempfile

        from cdc_spark.rows import lake_rows, lake_schema, output_schema

        generic = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=output_schema())
        self._directory = tempfile.TemporaryDirectory(prefix="mysql-cdc-spill-")
        index = spill(lake_rows(generic).to_batches(), lake_schema(), self._directory.name, "batch")
        self.index = SpillIndex(pa.Table.from_batches(list(index)).to_pylist())

    def _index(self) -> SpillIndex:
        return self.index

    def map(self, function: Callable[[Any], Any], items: list[Any], weights: list[int] | None = None) -> list[Any]:
        return [function(item) for item in items]

    def close(self) -> None:
        self._directory.cleanup()


def apply_batch(lake: Lake, query: str, batch: int, rows: pa.Table | list[dict[str, Any]] | Engine) -> BatchWriter:
    """Apply one micro-batch (the source's rows, or an Engine holding them): segments and DDL in log order."""
    engine: Engine = rows if not isinstance(rows, (pa.Table, list)) else LocalEngine(rows)
    try:
        writer = BatchWriter(lake, query, batch, engine)
        writer.run()
    finally:
        if engine is not rows:
            engine.close()
    return writer
