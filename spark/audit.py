"""The replica audit: leader vs follower row by row, excusing what the topic still holds.

`run_audit` is what spark/verify_replica.py calls. A first pass on Spark compares every row of
both sides as canonical strings (audit_tables.py: what is compared; audit_compare.py: the
Spark reads and join); the keys that differ are re-read on both servers, with the follower's
checkpoint, and sorted into missing, extra, changed and pending by what the topic beyond the
checkpoint still holds (audit_recheck.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pymysql
from audit_compare import first_pass, jdbc_options, plan_reads, spark_session
from audit_recheck import AuditResult, Backlog, TableReport, classify, fetch, follower_snapshot, read_backlog
from audit_tables import AuditError, discover

from cdc_spark.jars import find_jdbc_jar, under_spark_submit
from cdc_stream.filters import TableFilter
from cdc_stream.layout import Layout
from cdc_stream.mysql import connect
from cdc_stream.profile import load_consumer_profile, load_producer_profile
from cdc_stream.topics import open_stream


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


def _connect(db, role: str) -> pymysql.Connection:
    conn = connect(db, role, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMPs rendered in UTC, as in the Spark reads
    return conn


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
            plans = [plan_reads(leader, follower, t, sides.get((t.database, t.name)), opts.rows_per_partition)
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
                spark, jdbc_options(producer.database, jars), jdbc_options(consumer.database, jars), t, side, plan,
                opts.max_keys)
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


__all__ = ["AuditOptions", "AuditResult", "run_audit"]
