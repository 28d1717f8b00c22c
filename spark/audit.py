"""The replica audit: leader vs follower row by row, excusing what the topic still holds.

Every value is compared as a *canonical string* rendered by the server itself
(CAST ... AS CHAR, HEX for bytes, DATETIME(6) in a +00:00 session), so one stored
value gives one string on both sides whatever JDBC or Spark would make of it.
Spark only moves and joins those strings (no Python UDFs: executors need nothing
but the JDBC jar). Topic values (cdc_stream.values.to_param) and server strings
are matched through Column.norm, which maps both to the same Python value.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql

from cdc_consumer.checkpoint import SCHEMA as CDC_SCHEMA
from cdc_consumer.checkpoint import TABLE as CDC_TABLE
from cdc_spark.jars import DEBIAN_JAR, find_jdbc_jar, is_jdbc_jar, session_jars, under_spark_submit
from cdc_stream.errors import AuditError
from cdc_stream.filters import TableFilter, ddl_targets
from cdc_stream.layout import Layout
from cdc_stream.mysql import connect, quote_ident
from cdc_stream.profile import load_consumer_profile, load_producer_profile
from cdc_stream.topics import open_stream
from cdc_stream.values import BadValue, to_param

SYSTEM_SCHEMAS = {"information_schema", "mysql", "performance_schema", "sys", CDC_SCHEMA}
INT_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year", "bit"}
FLOAT_TYPES = {"float", "double", "real"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}
INDEXABLE = (INT_TYPES - {"bit"}) | {"char", "varchar", "date", "datetime", "timestamp"}  # `col IN (canonical)` works
MAX_PARTITIONS = 256
RECHECK_BATCH = 200
EXACT_COUNT_BELOW = 1_000_000  # tables whose estimate is below this are counted exactly for planning
Key = tuple  # canonical strings (None for NULL): the PK columns, or the whole row without a PK


@dataclass(frozen=True)
class Column:
    """One column: how the server renders it canonically, and how to match and report it."""

    name: str
    data_type: str
    octets: int | None = None  # BINARY(n): the binlog drops trailing zero bytes, the table keeps them

    def sql(self) -> str:
        """The server-side canonical string of this column (exact for every type)."""
        c, t = quote_ident(self.name), self.data_type
        if t == "bit":
            return f"CAST({c} + 0 AS CHAR)"
        if t in FLOAT_TYPES:  # via DOUBLE: FLOAT AS CHAR keeps only 6 digits, DOUBLE prints round-trip digits
            return f"CAST(CAST({c} AS DOUBLE) AS CHAR)"
        if t in ("datetime", "timestamp"):  # always 6 digits; TIMESTAMP in the session's +00:00
            return f"CAST(CAST({c} AS DATETIME(6)) AS CHAR)"
        if t == "time":
            return f"CAST(CAST({c} AS TIME(6)) AS CHAR)"
        if t in BINARY_TYPES:
            return f"HEX({c})"
        return f"CAST({c} AS CHAR)" if t in INT_TYPES | {"decimal", "date", "json"} else c

    def norm(self, v: Any, from_server: bool = True) -> Hashable:
        """A canonical string (from_server) or a to_param value from the topic -> one comparable value."""
        t = self.data_type
        if v is None:
            return None
        if t in INT_TYPES:
            return int(v)
        if t in FLOAT_TYPES:
            return float(v)
        if t == "decimal":
            return Decimal(v)  # equal decimals are equal whatever their trailing zeros or exponent
        if t in BINARY_TYPES:
            if from_server:
                return bytes.fromhex(v)
            b = bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode()
            return b.ljust(self.octets, b"\0") if t == "binary" and self.octets else b
        s = str(v)
        if t in ("datetime", "timestamp") and len(s) == 19:
            return s + ".000000"  # to_param gives the zero TIMESTAMP without fraction
        if t == "set":  # labels: definition order on the server, sorted on the topic
            return ",".join(sorted(x for x in s.split(",") if x))
        return json.dumps(json.loads(s), sort_keys=True) if t == "json" else s

    def report(self, s: str | None) -> int | str | None:
        """JSON-friendly: integers as numbers, everything else as its canonical string."""
        return int(s) if s is not None and self.data_type in INT_TYPES else s


@dataclass
class Table:
    """A table's columns (in table order) and primary key (in key order, [] for none)."""

    database: str
    name: str
    columns: list[Column]
    pk: list[str]
    rows_estimate: int = 0

    @property
    def key_columns(self) -> list[Column]:
        """What identifies a row: the PK columns, or every column when there is no PK."""
        by_name = {c.name: c for c in self.columns}
        return [by_name[n] for n in self.pk] if self.pk else list(self.columns)

    @property
    def key_index(self) -> list[int]:
        """Positions of the key columns in the canonical row."""
        return [self.columns.index(c) for c in self.key_columns]

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(self.name)}"

    @property
    def range_column(self) -> Column | None:
        """The column reads are split on: the (first) PK column, when it is an integer."""
        first = self.key_columns[0] if self.pk else None
        return first if first is not None and first.data_type in INT_TYPES - {"bit"} else None

    def norm(self, key: Key) -> Key:
        """A key of canonical strings, comparable with keys read from the topic."""
        return tuple(c.norm(v) for c, v in zip(self.key_columns, key))

    def report(self, key: Key) -> list:
        """A key as the JSON report shows it."""
        return [c.report(v) for c, v in zip(self.key_columns, key)]


def select_exprs(leader: Table, side: Table) -> list[str]:
    """Canonical expressions of the leader's columns, rendered from `side` (leader or follower).

    A column the follower lacks becomes NULL plus one marker column, so that every
    follower row then differs from its leader row instead of silently matching.
    """
    have = {c.name: c for c in side.columns}
    exprs = [have[c.name].sql() if c.name in have else "NULL" for c in leader.columns]
    return [*exprs, "'(columns differ)'"] if len(exprs) > sum(c.name in have for c in leader.columns) else exprs


def discover(conn: pymysql.Connection, filt: TableFilter, only: Sequence[str] | None) -> list[Table]:
    """Base tables of a server: the `only` db.table names, or all that `filt` lets through."""
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
        found = {(db, t): rows or 0 for db, t, rows in cur.fetchall() if db not in SYSTEM_SCHEMAS}
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH "
                    "FROM information_schema.COLUMNS ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION")
        columns: dict[tuple, list[Column]] = {}
        for db, t, name, dtype, octets in cur.fetchall():
            columns.setdefault((db, t), []).append(Column(name, dtype.lower(), octets))
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
                    "WHERE CONSTRAINT_NAME = 'PRIMARY' ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION")
        pks: dict[tuple, list[str]] = {}
        for db, t, name in cur.fetchall():
            pks.setdefault((db, t), []).append(name)
    wanted = [tuple(n.split(".", 1)) for n in only] if only is not None else [k for k in found if filt.allows_table(*k)]
    for db_t in wanted:
        if db_t not in found:
            raise AuditError(f"--tables: {'.'.join(db_t)} is not a table on the leader; name tables as db.table")
    return [Table(db, t, columns.get((db, t), []), pks.get((db, t), []), found[(db, t)]) for db, t in wanted]


def plan_partitions(column: str, lo: int | None, hi: int | None, rows: int, rows_per_partition: int,
                    use_options: bool) -> dict[str, str] | list[str] | None:
    """How to split a read on an integer column: Spark options, WHERE predicates, or None (one partition).

    Spark's partitionColumn bounds are signed 64-bit, so BIGINT UNSIGNED beyond
    that (and composite keys, cut on their first column) get predicates instead.
    The first and last ranges are open-ended: rows outside [lo, hi] are still read.
    """
    if lo is None or hi is None:
        return None
    n = max(1, min(MAX_PARTITIONS, math.ceil(rows / max(1, rows_per_partition)), hi - lo + 1))
    if n == 1:
        return None
    if use_options and lo >= -(2**63) and hi < 2**63 - 1:
        return {"partitionColumn": column, "lowerBound": str(lo), "upperBound": str(hi + 1), "numPartitions": str(n)}
    cuts, q = [lo + (hi + 1 - lo) * i // n for i in range(1, n)], quote_ident(column)
    return ([f"{q} < {cuts[0]}"] + [f"{q} >= {a} AND {q} < {b}" for a, b in itertools.pairwise(cuts)]
            + [f"{q} >= {cuts[-1]}"])


def _plan(leader: pymysql.Connection, follower: pymysql.Connection, table: Table, side: Table | None,
          rows_per_partition: int) -> dict[str, str] | list[str] | None:
    """The split of both sides' reads, from both sides' key bounds (the follower's may be wider)."""
    rc = table.range_column
    if rc is None:
        return None
    bounds = []
    for conn, t in ((leader, table), (follower, side)):
        if t is None or rc.name not in {c.name for c in t.columns}:
            continue
        with conn.cursor() as cur:
            cur.execute(f"SELECT MIN({quote_ident(rc.name)}), MAX({quote_ident(rc.name)}) FROM {t.qualified}")
            lo, hi = cur.fetchone()
            rows = t.rows_estimate
            if rows < EXACT_COUNT_BELOW:  # InnoDB's estimate can be far off on small tables
                cur.execute(f"SELECT COUNT(*) FROM {t.qualified}")
                rows = cur.fetchone()[0]
        bounds.append((lo, hi, rows))
    lo = min((int(b[0]) for b in bounds if b[0] is not None), default=None)
    hi = max((int(b[1]) for b in bounds if b[1] is not None), default=None)
    return plan_partitions("__pk", lo, hi, max(b[2] for b in bounds), rows_per_partition, len(table.pk) == 1)


@dataclass
class Backlog:
    """What the topic holds beyond the consumer's checkpoint: keys touched (normalised), tables altered."""

    start: int = 0
    end: int = 0
    keys: dict[tuple[str, str], set[Key]] = field(default_factory=dict)
    ddl: set[tuple[str | None, str | None]] = field(default_factory=set)

    def touches(self, table: Table, key: Key) -> bool:
        """Whether applying the backlog may still change this (normalised) key of this table."""
        if {(table.database, table.name), (table.database, None)} & self.ddl:
            return True
        return key in self.keys.get((table.database, table.name), set())


def read_backlog(spark, profile: Path, start: int, end: int, tables: Sequence[Table]) -> Backlog:
    """The keys of `tables` that the log's records in [start, end) touch, read by the `mysql_cdc` source
    on the executors (whole transactions, per-table topics merged in source order, and a transaction
    still being published at the end included: it may still change the follower).

    Only the distinct keys (as the topic's tagged values) and the DDL reach the driver."""
    from pyspark.sql import functions as F

    backlog = Backlog(start=start, end=end)
    if start >= end or not tables:
        return backlog
    df = (spark.read.format("mysql_cdc").option("profile", str(profile)).option("typed", "false")
          .option("startingOffset", str(start)).option("endingOffset", str(end)).option("includeIncomplete", "true")
          .load())
    for row in df.where(F.col("op") == "ddl").select("database", "ddl").collect():
        backlog.ddl.update(ddl_targets(row["ddl"] or "", row["database"]))
    # A live copy's chunk not applied yet replaces a key range: the whole table may still change.
    for row in df.where(F.col("op") == "copy_range").select("database", "table").distinct().collect():
        backlog.ddl.add((row["database"], row["table"]))
    key = None
    for t in tables:  # each table's key columns, as an array of tagged values (JSON text)
        this = (F.col("database") == t.database) & (F.col("table") == t.name)
        cols = F.array(*[F.col("image")[c.name] for c in t.key_columns])
        key = F.when(this, cols) if key is None else key.when(this, cols)
    images = (df.where(F.col("op") != "ddl")
              .select("database", "table", F.explode(F.array("before", "after")).alias("image"))
              .where(F.col("image").isNotNull()))
    keyed = images.select("database", "table", key.alias("key")).where(F.col("key").isNotNull()).distinct()
    for row in keyed.collect():
        table = next(t for t in tables if (t.database, t.name) == (row["database"], row["table"]))
        keys = backlog.keys.setdefault((table.database, table.name), set())
        try:
            keys.add(tuple(c.norm(to_param(json.loads(v)), from_server=False) for c, v in zip(table.key_columns,
                                                                                                 row["key"])))
        except (BadValue, ValueError, TypeError, ArithmeticError):
            backlog.ddl.add((table.database, table.name))  # columns changed: cannot tell, so all pending
    return backlog


@dataclass
class TableReport:
    """The audit of one table; keys are JSON-friendly lists (PK values, or whole rows)."""

    database: str
    table: str
    leader_rows: int = 0
    follower_rows: int = 0
    missing: list[list] = field(default_factory=list)
    extra: list[list] = field(default_factory=list)
    changed: list[list] = field(default_factory=list)
    pending: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        """No drift (pending keys are the follower being behind, not drift)."""
        return not (self.missing or self.extra or self.changed)

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("database", "table", "leader_rows", "follower_rows")}
        return d | {k: getattr(self, k) for k in ("missing", "extra", "changed", "pending")}


@dataclass
class AuditResult:
    """Every table's audit, and where the consumer stood in the topic."""

    tables: list[TableReport]
    checkpoint: int = 0
    topic_end: int = 0

    @property
    def status(self) -> str:
        return "ok" if all(t.in_sync for t in self.tables) else "drift"

    def to_json(self) -> dict[str, Any]:
        """The --report document: {"status": ..., "tables": [...]}."""
        return {"status": self.status, "tables": [t.to_json() for t in self.tables]}


def _sort_key(key: list) -> tuple:
    return tuple((0, 0, "") if v is None else (1, v, "") if isinstance(v, int) else (2, 0, str(v)) for v in key)


def classify(table: Table, candidates: list[tuple[Key, Any]], leader_now: dict, follower_now: dict,
             backlog: Backlog, report: TableReport) -> None:
    """Sort the first pass's differences, as re-read now, into missing/extra/changed/pending.

    A key is pending when the topic beyond the checkpoint touches it, or when the
    leader changed it between the two passes (a change perhaps not published yet).
    With a PK, `before` and the *_now maps hold rows; without, copies of a row.
    """
    for key, before in candidates:
        try:
            pending = backlog.touches(table, table.norm(key))
        except (ValueError, ArithmeticError):
            pending = False
        if table.pk:
            lead, follow = leader_now.get(key), follower_now.get(key)
            kind, copies = ("missing" if follow is None else "extra" if lead is None else "changed"), 1
        else:
            lead, follow = leader_now.get(key, 0), follower_now.get(key, 0)
            kind, copies = ("missing" if lead > follow else "extra"), abs(lead - follow)
        if lead != follow:  # else caught up (or was in flight) since the first pass
            target = report.pending if pending or lead != before else getattr(report, kind)
            target.extend([table.report(key)] * copies)
    for kind in ("missing", "extra", "changed", "pending"):
        getattr(report, kind).sort(key=_sort_key)


def fetch(conn: pymysql.Connection, table: Table, side: Table | None, keys: list[Key]) -> dict[Key, Any]:
    """The current canonical rows of `keys` on one server: {key: row} with a PK, {row: copies} without."""
    out: dict[Key, Any] = {}
    if side is None or not keys:
        return out
    exprs = [e.replace("%", "%%") for e in select_exprs(table, side)]  # pymysql formats with %
    key_exprs = [exprs[i] for i in table.key_index]
    first = {c.name: c for c in side.columns}.get(table.key_columns[0].name) if table.pk else None
    with conn.cursor() as cur:
        for i in range(0, len(keys), RECHECK_BATCH):
            batch = keys[i:i + RECHECK_BATCH]
            match = " OR ".join("(" + " AND ".join(f"{e} <=> %s" for e in key_exprs) + ")" for _ in batch)
            params = [v for k in batch for v in k[:len(key_exprs)]]
            sql = f"SELECT {', '.join(exprs)} FROM {side.qualified.replace('%', '%%')} WHERE ({match})"
            if first is not None and first.data_type in INDEXABLE:  # the PK index finds the rows: no full scan
                sql += f" AND {quote_ident(first.name).replace('%', '%%')} IN ({', '.join(['%s'] * len(batch))})"
                params += [k[0] for k in batch]
            cur.execute(sql, params)
            for row in cur.fetchall():
                if table.pk:
                    out[tuple(row[j] for j in table.key_index)] = list(row)
                else:
                    out[tuple(row)] = out.get(tuple(row), 0) + 1
    return out


def _connect(db, role: str) -> pymysql.Connection:
    conn = connect(db, role, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMPs rendered in UTC, as in the Spark reads
    return conn


def follower_snapshot(conn: pymysql.Connection, topic: str, work: list[tuple[Table, Table | None, list[Key]]]
                      ) -> tuple[int, str | None, list[dict]]:
    """(checkpoint next_offset, its stream id, the rows of each work item), all from one snapshot.

    The consumer commits rows and checkpoint together, so within one snapshot the
    follower is exactly "the topic applied up to next_offset".
    """
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            try:
                cur.execute(f"SELECT next_offset, stream_id FROM {quote_ident(CDC_SCHEMA)}.{quote_ident(CDC_TABLE)} "
                            "WHERE topic = %s", (topic,))
                row = cur.fetchone()
            except pymysql.err.ProgrammingError as e:
                if e.args[0] != 1146:
                    raise
                row = None  # the consumer never ran: nothing applied yet
            rows = [fetch(conn, t, side, keys) for t, side, keys in work]
        finally:
            conn.rollback()
    return (row[0], row[1], rows) if row else (0, None, rows)


def spark_session(jar: str | None, master: str | None):
    """A SparkSession that can load the JDBC driver and read the topic through the `mysql_cdc` source."""
    from cdc_spark import register
    from cdc_spark.session import builder, prepare_local

    prepare_local(master)
    spark = builder("mysql-cdc verify_replica", master, session_jars(jar)).getOrCreate()
    register(spark)
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    if not any(is_jdbc_jar(j) for j in jars.split(",")):
        raise AuditError(f"spark-submit was given no MariaDB/MySQL JDBC jar: add --jars {DEBIAN_JAR} "
                         "(apt-get install libmariadb-java) to the spark-submit command")
    return spark


def _jdbc(db, jars: str) -> dict[str, str]:
    mysql = "mysql-connector" in jars and "mariadb" not in jars
    scheme, driver = ("mysql", "com.mysql.cj.jdbc.Driver") if mysql else ("mariadb", "org.mariadb.jdbc.Driver")
    return {
        "url": f"jdbc:{scheme}://{db.ip_or_host}:{db.port}/", "driver": driver, "user": db.user,
        "password": db.password, "fetchsize": "5000",  # stream rows instead of buffering whole results
        # UTC like the consumer; ANSI_QUOTES because Spark's generic dialect (used for
        # jdbc:mariadb URLs) quotes identifiers with double quotes. Not the driver's
        # sessionVariables: Spark loses them on reads split by predicates.
        "sessionInitStatement": "SET time_zone = '+00:00', sql_mode = 'ANSI_QUOTES'",
    }


def _read(spark, jdbc: dict, table: Table, side: Table | None, plan):
    """`key` and `row` (JSON arrays of canonical strings) of every row of one side."""
    from pyspark.sql import functions as F

    if side is None:
        return spark.createDataFrame([], "key string, row string")
    exprs = select_exprs(table, side)
    cols = ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs))
    cols += f", {quote_ident(table.range_column.name)} AS __pk" if plan else ""
    query = f"(SELECT {cols} FROM {side.qualified}) AS q"
    if isinstance(plan, list):
        df = spark.read.jdbc(jdbc["url"], query, predicates=plan, properties=jdbc)
    else:
        df = spark.read.format("jdbc").options(**jdbc, dbtable=query, **(plan or {})).load()
    return df.select(F.to_json(F.array(*[df[f"c{i}"] for i in table.key_index])).alias("key"),
                     F.to_json(F.array(*[df[f"c{i}"] for i in range(len(exprs))])).alias("row"))


def first_pass(spark, leader_jdbc: dict, follower_jdbc: dict, table: Table, side: Table | None, plan,
               max_keys: int) -> tuple[int, int, list[tuple[Key, Any]]]:
    """(leader rows, follower rows, up to max_keys differing keys with the leader's row or copies)."""
    from pyspark.sql import functions as F

    lead, follow = _read(spark, leader_jdbc, table, table, plan), _read(spark, follower_jdbc, table, side, plan)
    if table.pk:  # full outer join on the key
        j = lead.select("key", F.col("row").alias("l")).join(
            follow.select("key", F.col("row").alias("f")), "key", "full_outer")
        differs = F.col("l").isNull() | F.col("f").isNull() | (F.col("l") != F.col("f"))
        counts = [F.count("l"), F.count("f")]
    else:  # multisets: the copies of each distinct row on each side
        j = (lead.groupBy(F.col("row").alias("key")).agg(F.count("*").alias("l"))
             .join(follow.groupBy(F.col("row").alias("key")).agg(F.count("*").alias("f")), "key", "full_outer")
             .select("key", F.coalesce("l", F.lit(0)).alias("l"), F.coalesce("f", F.lit(0)).alias("f")))
        differs = F.col("l") != F.col("f")
        counts = [F.sum("l"), F.sum("f")]
    # One read of each side when in sync; the differing keys cost a second one.
    stats = j.agg(*counts, F.sum(differs.cast("int"))).first()
    diffs = j.where(differs).select("key", "l").limit(max_keys).collect() if stats[2] else []
    decode = (lambda v: None if v is None else json.loads(v)) if table.pk else (lambda v: v)
    return int(stats[0] or 0), int(stats[1] or 0), [(tuple(json.loads(r[0])), decode(r[1])) for r in diffs]


@dataclass
class AuditOptions:
    """What verify_replica.py was asked to do."""

    producer_profile: Path
    consumer_profile: Path
    tables: list[str] | None = None
    jars: str | None = None
    master: str | None = None
    rows_per_partition: int = 100_000
    recheck_after: float = 1.0  # seconds for in-flight changes to land before the second pass
    max_keys: int = 10_000  # differing keys collected per table


def run_audit(opts: AuditOptions, progress: Callable[[str], None] = lambda s: None) -> AuditResult:
    """Audit every table: Spark compares all rows, then differing keys are re-read and excused by the topic."""
    producer, consumer = load_producer_profile(opts.producer_profile), load_consumer_profile(opts.consumer_profile)
    # Under spark-submit the jar came with --jars (verify_replica.py re-launches it with them if not).
    jar = None if under_spark_submit() else find_jdbc_jar(opts.jars)
    layout = Layout.of(consumer.stream)
    name = layout.log_topic
    with open_stream(consumer.stream, create=False) as stream:
        if not stream.exists(name):
            raise AuditError(f"topic '{name}' does not exist in {stream.describe()}: check [stream] in "
                             f"{opts.consumer_profile}, or start cdc-producer first")
        # Short-lived connections per phase: a long Spark phase must not outlive a server's wait_timeout.
        leader, follower = _connect(producer.database, "leader"), _connect(consumer.database, "follower")
        with leader, follower:
            tables = discover(leader, TableFilter.from_profile(producer.filters), opts.tables)
            sides = {(t.database, t.name): t for t in discover(follower, TableFilter(), None)}
            plans = [_plan(leader, follower, t, sides.get((t.database, t.name)), opts.rows_per_partition)
                     for t in tables]
        spark = spark_session(jar, opts.master)
        jars = spark.sparkContext.getConf().get("spark.jars", "")
        reports, work = [], []
        for t, plan in zip(tables, plans):
            side = sides.get((t.database, t.name))
            parts = len(plan) if isinstance(plan, list) else int(plan["numPartitions"]) if plan else 1
            progress(f"comparing {t.database}.{t.name} ({parts} partition{'s' * (parts > 1)})")
            report = TableReport(t.database, t.name, notes=[] if side else ["table missing on the follower"])
            report.leader_rows, report.follower_rows, candidates = first_pass(
                spark, _jdbc(producer.database, jars), _jdbc(consumer.database, jars), t, side, plan, opts.max_keys)
            reports.append(report)
            work.append((t, side, candidates))
        keys = [[k for k, _ in c] for _, _, c in work]
        if any(keys):
            progress(f"re-checking {sum(map(len, keys))} differing keys")
            time.sleep(opts.recheck_after)
        # Follower (with its checkpoint) first, then the leader, then the topic up to its
        # end now: whatever the leader did after the follower's snapshot is either in the
        # topic beyond the checkpoint or differs between the leader's two reads.
        leader, follower = _connect(producer.database, "leader"), _connect(consumer.database, "follower")
        with leader, follower:
            offset, stream_id, follower_now = follower_snapshot(
                follower, name, [(t, s, k) for (t, s, _), k in zip(work, keys)])
            if stream_id and stream.identity and stream_id != stream.identity:
                raise AuditError(f"the follower's checkpoint for topic '{name}' belongs to another stream (the topic "
                                 "was recreated?), so pending changes cannot be told apart; fix the consumer first")
            leader_now = [fetch(leader, t, t, k) for (t, _, _), k in zip(work, keys)]
        log = layout.reader(stream)
        try:
            end = log.end_offset()
            tail = log.tail()
        finally:
            log.close()
    backlog = read_backlog(spark, opts.consumer_profile.resolve(), offset, end, tables) if any(keys) else \
        Backlog(offset, end)
    # Tables a live copy is still copying: the producer drops their changes above the copy's cursor until
    # its chunks come, so their differences are pending, not drift.
    copying = dict(tail.end.copying or {}) if tail is not None else {}
    for report in reports:
        if f"{report.database}.{report.table}" in copying:
            backlog.ddl.add((report.database, report.table))
            report.notes.append("being copied by the producer (a live copy is in progress): differences are pending")
    for (t, _, candidates), report, lnow, fnow in zip(work, reports, leader_now, follower_now, strict=True):
        classify(t, candidates, lnow, fnow, backlog, report)
    return AuditResult(reports, checkpoint=offset, topic_end=backlog.end)
