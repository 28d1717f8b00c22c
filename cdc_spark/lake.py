"""Delta tables kept equal to the source tables, from the `mysql_cdc` source's micro-batches.

Per source table: `<lake>/state/<database>/<table>` holds the current rows (MERGE by the
events' primary key; a table without one is a multiset: its changed rows are counted and
the table rewritten), `<lake>/changelog/<database>/<table>` every change, appended.
Both are written with `deltalake` (delta-rs) from the driver's foreachBatch.

Exactly once: Spark replays a micro-batch whose commit it did not record. Every Delta
commit of a batch carries the tag (query id, batch id, step) in its commit metadata; the
steps of a batch are numbered in a fixed order, and a step whose table already holds a
commit tagged at or after it is skipped on replay. The state table's commits also carry
the source table's column types (`mysql_cdc.columns`), so a restarted job types values as
the stream had them, not as the leader has them now.

`CDC_LAKE_CRASH=plan|merge` (tests only) kills the job's process group with SIGKILL at the
start of the first non-empty batch (`plan`: Spark has written the batch's offsets, nothing
is in the lake) or right after that batch's first state MERGE (`merge`: before the rest of
the batch and before Spark's commit).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec
import pyarrow as pa

from cdc_spark.convert import ImageConverter
from cdc_spark.ddl import AddedColumn, Change, changes
from cdc_spark.schema import RAW_COLUMN, ColumnType, TableSchema
from cdc_stream.errors import DataError
from cdc_stream.mysql import quote_ident
from cdc_stream.values import encode

TAG_QUERY, TAG_BATCH, TAG_STEP = "mysql_cdc.query", "mysql_cdc.batch", "mysql_cdc.step"
TAG_COLUMNS = "mysql_cdc.columns"
TAG_DROPPED = "mysql_cdc.dropped"
DELETED = "_cdc_deleted"
CRASH_ENV = "CDC_LAKE_CRASH"
_decode = msgspec.json.Decoder().decode

Image = tuple[list[Any], str | None]  # a row image's typed values and its _cdc_raw JSON
SchemaLookup = Callable[[str, str], TableSchema | None]  # (database, table) -> the leader's columns now


class LakeError(DataError):
    """The lake cannot follow a change; the message names the offset, the cause and the fix."""


@dataclass(frozen=True, order=True)
class Tag:
    """Where a commit stands in the query's micro-batches."""

    query: str
    batch: int
    step: int

    def metadata(self) -> dict[str, str]:
        return {TAG_QUERY: self.query, TAG_BATCH: str(self.batch), TAG_STEP: str(self.step)}

    @classmethod
    def of(cls, commit: dict[str, Any]) -> Tag | None:
        if TAG_QUERY not in commit:
            return None
        return cls(commit[TAG_QUERY], int(commit[TAG_BATCH]), int(commit[TAG_STEP]))


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


def changelog_schema(table: TableSchema) -> pa.Schema:
    image = table.arrow_struct(lake=True)
    return pa.schema([
        ("offset", pa.int64()), ("row_index", pa.int32()), ("sequence", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")), ("op", pa.string()), ("txn_id", pa.string()),
        ("txn_index", pa.int32()), ("txn_last", pa.bool_()), ("position", pa.string()),
        ("pk", pa.list_(pa.string())), ("before", image), ("after", image), ("ddl", pa.string()),
    ])


def _dir(name: str) -> str:
    return quote(name, safe="$-_.@ ") or "%00"


@dataclass
class LakeTable:
    """One source table's two Delta tables and the column types the stream is at."""

    database: str
    table: str
    state_path: Path
    changelog_path: Path
    schema: TableSchema | None = None  # None: not in the lake yet
    dropped: bool = False
    _converter: ImageConverter | None = None

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def converter(self) -> ImageConverter:
        assert self.schema is not None
        if self._converter is None or self._converter.schema is not self.schema:
            self._converter = ImageConverter(self.schema, lake=True)
        return self._converter

    def load(self) -> None:
        """Read the column types and the last tag from the state table, if it exists."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(str(self.state_path)):
            return
        commit = DeltaTable(str(self.state_path)).history(1)[0]
        if TAG_COLUMNS in commit:
            self.schema = schema_of(self.database, self.table, commit[TAG_COLUMNS])
            self.dropped = commit.get(TAG_DROPPED) == "true"


def last_tag(path: Path) -> Tag | None:
    """The tag of a Delta table's latest commit (None: no table, or not written by this job)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return None
    return Tag.of(DeltaTable(str(path)).history(1)[0])


@dataclass
class Change_:
    """One changed row of a micro-batch (or a DDL statement), as the source gave it."""

    offset: int
    row_index: int
    op: str
    pk: list[str]
    before: dict[str, Any] | None  # column -> tagged value
    after: dict[str, Any] | None
    meta: dict[str, Any]
    ddl: str | None = None


# a changed row with its before and after images typed (None: no such image)
Typed = tuple[Change_, Image | None, Image | None]


@dataclass
class Lake:
    """The lake directory and what the job knows of its tables."""

    root: Path
    lookup: SchemaLookup
    tables: dict[tuple[str, str], LakeTable] = field(default_factory=dict)
    commits: int = 0  # Delta commits made (not skipped) by this process
    crash: str | None = field(default_factory=lambda: os.environ.get(CRASH_ENV))

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
            from urllib.parse import unquote

            for db_dir in sorted(state.iterdir()):
                for t_dir in sorted(db_dir.iterdir()) if db_dir.is_dir() else []:
                    self.table(unquote(db_dir.name), unquote(t_dir.name))
        return [t for t in self.tables.values() if t.schema is not None]


class BatchWriter:
    """Applies one micro-batch to the lake, step by step, skipping steps a replay finds done."""

    def __init__(self, lake: Lake, query: str, batch: int):
        self.lake, self.query, self.batch = lake, query, batch
        self.step = 0

    def _tag(self, path: Path) -> Tag | None:
        """The tag for the next step, or None when `path` already holds it (a replay)."""
        tag = Tag(self.query, self.batch, self.step)
        self.step += 1
        done = last_tag(path)
        if done is not None and done.query == tag.query and (done.batch, done.step) >= (tag.batch, tag.step):
            return None
        return tag

    def _committed(self, merged: bool = False) -> None:
        self.lake.commits += 1
        if merged and self.lake.crash == "merge":
            _crash()

    # -- row changes ------------------------------------------------------------------------

    def apply(self, rows: Iterable[Change_], tables: list[tuple[str, str]]) -> None:
        """The changes of a batch segment (no DDL inside), table by table in first-seen order."""
        by_table: dict[tuple[str, str], list[Change_]] = {}
        for r in rows:
            by_table.setdefault((r.meta["database"], r.meta["table"]), []).append(r)
        for key in tables:
            if key in by_table:
                self._apply_table(self.lake.table(*key), by_table[key])

    def _apply_table(self, t: LakeTable, rows: list[Change_]) -> None:
        first = rows[0]
        columns = list((first.after or first.before or {}).keys())
        if t.schema is None or t.dropped:
            self._create(t, first.offset, columns)
        assert t.schema is not None
        names = set(t.schema.names)
        for r in rows:
            extra = [c for c in (r.after or r.before or {}) if c not in names]
            if extra:
                raise LakeError(f"offset {r.offset}: {t.name} has column(s) {', '.join(extra)} that the lake's table "
                                "lacks and no ALTER TABLE on the topic added; the lake cannot follow: rebuild it "
                                "(new --lake and --checkpoint directories)")
        conv = t.converter
        typed = [(r, self._typed(conv, r.before, r), self._typed(conv, r.after, r)) for r in rows]
        tag = self._tag(t.state_path)
        if tag is not None:
            if first.pk:
                self._merge(t, typed, tag)
            else:
                self._multiset(t, typed, tag)
            self._committed(merged=True)
        self._append_changelog(t, typed)

    @staticmethod
    def _typed(conv: ImageConverter, image: dict[str, Any] | None, r: Change_) -> Image | None:
        if image is None:
            return None
        try:
            return conv.values(list(image), list(image.values()))
        except ValueError as e:
            raise LakeError(f"offset {r.offset}: {conv.schema.database}.{conv.schema.table}: {e}") from None

    def _merge(self, t: LakeTable, typed: list[Typed], tag: Tag) -> None:
        """MERGE by primary key: each key's last image in the batch, or its deletion."""
        from deltalake import CommitProperties, DeltaTable

        assert t.schema is not None
        names = t.schema.names
        final: dict[tuple[Any, ...], Image | None] = {}
        for r, before, after in typed:
            index = [names.index(c) if c in names else -1 for c in r.pk]
            if -1 in index:
                raise LakeError(f"offset {r.offset}: primary key {r.pk} names a column not in the lake's {t.name}")
            if before is not None:
                final[self._key(r, before, index)] = None
            if after is not None:
                final[self._key(r, after, index)] = after
        pk = typed[-1][0].pk
        rows, deleted = [], []
        for key, image in final.items():
            if image is None:
                values: list[Any] = [None] * (len(names) + 1)
                for col, v in zip(pk, key):
                    values[names.index(col)] = v
                rows.append(values)
                deleted.append(True)
            else:
                rows.append(image[0] + [image[1]])
                deleted.append(False)
        schema = t.schema.arrow_schema(lake=True)
        source = pa.Table.from_arrays(
            [pa.array([row[i] for row in rows], f.type) for i, f in enumerate(schema)] + [pa.array(deleted)],
            schema=schema.append(pa.field(DELETED, pa.bool_())))
        predicate = " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in pk)
        meta = CommitProperties(custom_metadata={**tag.metadata(), TAG_COLUMNS: schema_json(t.schema)})
        (DeltaTable(str(t.state_path))
         .merge(source, predicate, source_alias="s", target_alias="t", commit_properties=meta)
         .when_matched_delete(predicate=f"s.{DELETED}")
         .when_matched_update_all(predicate=f"NOT s.{DELETED}", except_cols=[DELETED])
         .when_not_matched_insert_all(predicate=f"NOT s.{DELETED}", except_cols=[DELETED])
         .execute())

    @staticmethod
    def _key(r: Change_, image: Image, index: list[int]) -> tuple[Any, ...]:
        """The typed key of an image (MERGE compares typed values, so each must have one)."""
        values, raw = image
        key = tuple(values[i] for i in index)
        if raw is not None and any(c in json.loads(raw) for c in r.pk):
            raise LakeError(f"offset {r.offset}: a primary-key value of {r.meta['database']}.{r.meta['table']} has "
                            f"no Spark form ({raw}); the lake cannot MERGE on it")
        return key

    def _multiset(self, t: LakeTable, typed: list[Typed], tag: Tag) -> None:
        """A table without a primary key: rows are counted, like MySQL's copies of equal rows."""
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        assert t.schema is not None
        schema = t.schema.arrow_schema(lake=True)
        delta: dict[tuple[Any, ...], int] = {}
        images: dict[tuple[Any, ...], list[Any]] = {}
        for _, before, after in typed:
            for image, n in ((before, -1), (after, 1)):
                if image is not None:
                    row = image[0] + [image[1]]
                    k = _hashable(row)
                    delta[k] = delta.get(k, 0) + n
                    images[k] = row
        meta = CommitProperties(custom_metadata={**tag.metadata(), TAG_COLUMNS: schema_json(t.schema)})
        if all(n >= 0 for n in delta.values()):  # inserts only: append
            rows = [images[k] for k, n in delta.items() for _ in range(n)]
            write_deltalake(str(t.state_path), _table(schema, rows), mode="append", commit_properties=meta)
            return
        current = DeltaTable(str(t.state_path)).to_pyarrow_table().select(schema.names).to_pylist()
        counts: dict[tuple[Any, ...], int] = {}
        for d in current:
            row = [d[n] for n in schema.names]
            k = _hashable(row)
            counts[k] = counts.get(k, 0) + 1
            images.setdefault(k, row)
        for k, n in delta.items():
            counts[k] = max(0, counts.get(k, 0) + n)
        rows = [images[k] for k, n in counts.items() for _ in range(n)]
        write_deltalake(str(t.state_path), _table(schema, rows), mode="overwrite", commit_properties=meta)

    def _append_changelog(self, t: LakeTable, typed: list[Typed]) -> None:
        from deltalake import CommitProperties, write_deltalake

        tag = self._tag(t.changelog_path)
        if tag is None:
            return
        assert t.schema is not None
        schema = changelog_schema(t.schema)
        conv = t.converter
        cols: dict[str, list[Any]] = {n: [] for n in schema.names}
        for r, before, after in typed:
            for name in ("offset", "row_index"):
                cols[name].append(getattr(r, name))
            for name in ("sequence", "ts", "txn_id", "txn_index", "txn_last", "position"):
                cols[name].append(r.meta[name])
            cols["op"].append(r.op)
            cols["pk"].append(r.pk)
            cols["before"].append(before)
            cols["after"].append(after)
            cols["ddl"].append(r.ddl)
        arrays = [pa.array(cols[n], schema.field(n).type) if n not in ("before", "after") else conv.build(cols[n])
                  for n in schema.names]
        write_deltalake(str(t.changelog_path), pa.Table.from_arrays(arrays, schema=schema), mode="append",
                        schema_mode="merge", commit_properties=CommitProperties(custom_metadata=tag.metadata()))
        self._committed()

    # -- DDL ------------------------------------------------------------------------------------

    def _create(self, t: LakeTable, offset: int, columns: list[str] | None) -> None:
        """Put a table in the lake: its columns (as the stream names them) typed from the leader."""
        from deltalake import CommitProperties, write_deltalake

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
        tag = self._tag(t.state_path)
        t.schema, t.dropped = schema, False
        if tag is not None:
            meta = {**tag.metadata(), TAG_COLUMNS: schema_json(schema)}
            write_deltalake(str(t.state_path), _table(schema.arrow_schema(lake=True), []), mode="overwrite",
                            schema_mode="overwrite", commit_properties=CommitProperties(custom_metadata=meta))
            self._committed()

    def ddl(self, r: Change_) -> None:
        """Follow one DDL statement (raises LakeError for what cannot be followed)."""
        assert r.ddl is not None
        held = {(t.database, t.table) for t in self.lake.tracked() if not t.dropped}
        for change in changes(r.ddl, r.meta.get("default_db") or r.meta["database"]):
            self._ddl(r, change, held)

    def _ddl(self, r: Change_, change: Change, held: set[tuple[str, str]]) -> None:
        db, name = change.database or "", change.table
        targets = [(db, name)] if name is not None else sorted(k for k in held if k[0] == db)
        if change.kind == "create" and name is not None:
            t = self.lake.table(db, name)
            if t.schema is not None and not t.dropped and change.if_not_exists:
                return
            self._create(t, r.offset, change.columns)
            self._append_changelog(t, [(r, None, None)])
            return
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
                self._add_columns(t, r, change.added)
            elif change.kind in ("drop", "truncate"):
                self._empty(t, dropped=change.kind == "drop")
            self._append_changelog(t, [(r, None, None)])

    def _empty(self, t: LakeTable, dropped: bool) -> None:
        from deltalake import CommitProperties, DeltaTable

        tag = self._tag(t.state_path)
        t.dropped = dropped
        if tag is None:
            return
        assert t.schema is not None
        meta = {**tag.metadata(), TAG_COLUMNS: schema_json(t.schema), TAG_DROPPED: str(dropped).lower()}
        DeltaTable(str(t.state_path)).delete(commit_properties=CommitProperties(custom_metadata=meta))
        self._committed()

    def _add_columns(self, t: LakeTable, r: Change_, added: list[AddedColumn]) -> None:
        """ADD COLUMN: existing rows get the column's default, as on the leader."""
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        assert t.schema is not None
        leader = self.lake.lookup(t.database, t.table)
        new_cols: list[ColumnType] = []
        defaults: list[tuple[Any, str | None]] = []
        for a in added:
            col = leader.column(a.name) if leader is not None else None
            if a.problem or col is None:
                why = a.problem or "it is not on the leader any more, so its type is unknown"
                raise LakeError(f"offset {r.offset}: the lake cannot add column {a.name} to {t.name}: {why}; rebuild "
                                "the lake (new --lake and --checkpoint directories) once the statement is behind it")
            new_cols.append(col)
            defaults.append(_default_value(col, a, r.offset, t.name))
        schema = TableSchema(t.database, t.table, t.schema.columns + tuple(new_cols))
        tag = self._tag(t.state_path)
        t.schema = schema
        if tag is None:
            return
        arrow = schema.arrow_schema(lake=True)
        current = DeltaTable(str(t.state_path)).to_pyarrow_table()
        n = current.num_rows
        arrays = [current.column(f.name) if f.name in current.column_names and f.name != RAW_COLUMN
                  else pa.nulls(n, f.type) for f in arrow]
        for col, (value, _) in zip(new_cols, defaults):
            arrays[arrow.names.index(col.name)] = pa.array([value] * n, arrow.field(col.name).type)
        raw_extra = {c.name: raw for c, (_, raw) in zip(new_cols, defaults) if raw is not None}
        old_raw = current.column(RAW_COLUMN).to_pylist() if RAW_COLUMN in current.column_names else [None] * n
        arrays[arrow.names.index(RAW_COLUMN)] = pa.array(
            [_merge_raw(v, raw_extra) for v in old_raw] if raw_extra else old_raw, pa.string())
        meta = {**tag.metadata(), TAG_COLUMNS: schema_json(schema)}
        write_deltalake(str(t.state_path), pa.Table.from_arrays(arrays, schema=arrow), mode="overwrite",
                        schema_mode="overwrite", commit_properties=CommitProperties(custom_metadata=meta))
        self._committed()


def _merge_raw(old: str | None, extra: dict[str, Any]) -> str:
    return json.dumps({**(json.loads(old) if old else {}), **extra}, separators=(",", ":"))


KIND_OF = {"tinyint": "signed", "smallint": "signed", "mediumint": "signed", "int": "signed", "integer": "signed",
           "bigint": "signed", "decimal": "decimal", "numeric": "decimal", "float": "float", "double": "double",
           "real": "double", "date": "date", "datetime": "datetime", "time": "time", "year": "year",
           "enum": "enum", "set": "set", "char": "string", "varchar": "string", "tinytext": "string",
           "text": "string", "mediumtext": "string", "longtext": "string", "binary": "binary",
           "varbinary": "binary", "tinyblob": "binary", "blob": "binary", "mediumblob": "binary",
           "longblob": "binary"}


def _default_value(col: ColumnType, added: AddedColumn, offset: int, table: str) -> tuple[Any, str | None]:
    """(typed value, _cdc_raw JSON) existing rows hold in an added column."""
    if added.default is None:
        return None, None
    kind = KIND_OF.get(col.data_type)
    if kind is None or (added.default == "" and kind not in ("signed", "decimal", "float", "double", "string")):
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


def _hashable(row: list[Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def _table(schema: pa.Schema, rows: list[list[Any]]) -> pa.Table:
    return pa.Table.from_arrays([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)], schema=schema)


def _crash() -> None:
    """The test hook: SIGKILL to the job's whole process group (driver, JVM, Python workers)."""
    os.killpg(os.getpgid(0), signal.SIGKILL)


META = ("database", "table", "sequence", "ts", "txn_id", "txn_index", "txn_last", "position")


def changes_of(rows: pa.Table | list[dict[str, Any]]) -> list[Change_]:
    """The source's rows (its Arrow batch, or that batch's to_pylist()) as Change_ records, in
    (offset, row_index) order."""
    if isinstance(rows, pa.Table):
        columns = {n: rows.column(n).to_pylist() for n in ("offset", "row_index", "op", "pk", "ddl", *META)}
        before, after = decode_images(rows.column("before")), decode_images(rows.column("after"))
        dicts = [{n: columns[n][i] for n in columns} | {"before": before[i], "after": after[i]}
                 for i in range(rows.num_rows)]
    else:
        dicts = [d | {"before": _image(d["before"]), "after": _image(d["after"])} for d in rows]
    return [Change_(d["offset"], d["row_index"], d["op"], list(d["pk"] or []), d["before"], d["after"],
                    {k: d[k] for k in META}, d["ddl"])
            for d in sorted(dicts, key=lambda d: (d["offset"], d["row_index"]))]


def decode_images(column: pa.ChunkedArray) -> list[dict[str, Any] | None]:
    """Generic images (map<string,string> of tagged values as JSON) -> dicts, parsing each chunk's
    values in one msgspec call."""
    out: list[dict[str, Any] | None] = []
    for chunk in column.chunks:
        offsets = chunk.offsets.to_pylist()
        base = offsets[0] if offsets else 0
        keys = chunk.keys.to_pylist()
        texts = chunk.items.to_pylist()
        values = _decode("[" + ",".join(texts) + "]") if texts else []
        for a, b, valid in zip(offsets, offsets[1:], chunk.is_valid().to_pylist()):
            out.append(dict(zip(keys[a - base:b - base], values[a - base:b - base])) if valid else None)
    return out


def _image(pairs: list[tuple[str, str]] | None) -> dict[str, Any] | None:
    if pairs is None:
        return None
    values = _decode("[" + ",".join(v for _, v in pairs) + "]")  # one parse per image, not per value
    return dict(zip((k for k, _ in pairs), values))


def apply_batch(lake: Lake, query: str, batch: int, rows: pa.Table | list[dict[str, Any]]) -> BatchWriter:
    """Apply one micro-batch: row changes between DDL statements, then each statement, in log order."""
    writer = BatchWriter(lake, query, batch)
    if len(rows) and lake.crash == "plan":
        _crash()
    segment: list[Change_] = []

    def flush() -> None:
        order = list(dict.fromkeys((c.meta["database"], c.meta["table"]) for c in segment))
        writer.apply(segment, order)
        segment.clear()

    for change in changes_of(rows):
        if change.op == "ddl":
            flush()
            writer.ddl(change)
        else:
            segment.append(change)
    flush()
    return writer
