"""The audit's first pass, on Spark: both sides' rows read over JDBC (split on the key) and joined.

In sync, each side is read once; the differing keys (up to a limit) come back to the driver
with the leader's row, for the second pass (audit_recheck.py).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pymysql
from audit_tables import AuditError, Key, Table, select_exprs

from cdc_spark.jars import DEBIAN_JAR, is_jdbc_jar, session_jars
from cdc_stream.mysql import quote_ident

MAX_PARTITIONS = 256
EXACT_COUNT_BELOW = 1_000_000  # tables whose estimate is below this are counted exactly for planning


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


def plan_reads(leader: pymysql.Connection, follower: pymysql.Connection, table: Table, side: Table | None,
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


def spark_session(jar: str | None, master: str | None):
    """A SparkSession that can load the JDBC driver and read the topic through the `mysql_cdc` source."""
    from cdc_spark import register
    from cdc_spark.session import builder

    spark = builder("mysql-cdc verify_replica", master, session_jars(jar)).getOrCreate()
    register(spark)
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    if not any(is_jdbc_jar(j) for j in jars.split(",")):
        raise AuditError(f"spark-submit was given no MariaDB/MySQL JDBC jar: add --jars {DEBIAN_JAR} "
                         "(apt-get install libmariadb-java) to the spark-submit command")
    return spark


def jdbc_options(db, jars: str) -> dict[str, str]:
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



__all__ = ["first_pass", "jdbc_options", "plan_partitions", "plan_reads", "spark_session"]
