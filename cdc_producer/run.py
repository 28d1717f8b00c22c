"""cdc-producer's one function: wire the leader, the topic and the publisher, then stream."""

from __future__ import annotations

import time
from pathlib import Path

import pymysql

from cdc_producer.binlog import connect, current_position, leader_info, open_binlog, preflight, stream_error
from cdc_producer.publish import Publisher, ResumeState, read_tail
from cdc_stream.console import err
from cdc_stream.errors import SetupError
from cdc_stream.filters import TableFilter
from cdc_stream.profile import ProducerProfile
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import open_stream

STATUS_INTERVAL = 10.0


def check(profile: ProducerProfile) -> list[str]:
    """Preflight only: the problems found on the leader ([] when ready)."""
    conn = connect(profile.database, "leader")
    try:
        return preflight(conn, leader_info(conn))
    finally:
        conn.close()


def run(profile: ProducerProfile, stop: StopSignal) -> None:
    """Follow the leader's binlog and publish until stopped."""
    conn = connect(profile.database, "leader", autocommit=True)
    try:
        info = leader_info(conn)
        problems = preflight(conn, info)
        if problems:
            raise SetupError("the leader is not ready for CDC:\n  - " + "\n  - ".join(problems))
        stream = open_stream(profile.stream)
        name = profile.stream.topic
        stream.create(name)
        topic = stream.topic(name)
        tail = read_tail(topic, info.flavor)
        state = ResumeState(Path(profile.data.base_path) / f"producer-{_safe(name)}.json", stream.identity, name)
        start = state.load(tail) or tail.position or current_position(conn, info)
    finally:
        conn.close()
    if info.flavor == "mariadb" and start.gtid_set is None:
        raise SetupError(f"the topic's resume point {start} is a file position, but MariaDB is followed by GTID only")
    publisher = Publisher(
        topic=topic, resource=profile.mysql_resource_name, filters=TableFilter.from_profile(profile.filters),
        info=info, next_sequence=tail.next_sequence, position=start, state=state,
    )
    binlog = open_binlog(profile.database, info, start)
    announced = False
    next_status = time.monotonic() + STATUS_INTERVAL
    try:
        while not stop.requested:
            try:
                with stop.interruptible():
                    ev = binlog.fetchone()
            except pymysql.err.MySQLError as e:
                raise stream_error(e, start) from None
            if not announced:
                err.print(
                    f"streaming from {start} of {info.flavor} {info.version} at "
                    f"{profile.database.ip_or_host}:{profile.database.port} to topic '{name}' "
                    f"({stream.describe()}), next sequence {tail.next_sequence}",
                    markup=False,
                )
                announced = True
            if ev is None:
                continue
            publisher.handle(ev)
            publisher.flush_state()
            if time.monotonic() >= next_status:
                s = publisher.stats
                err.print(
                    f"published {s.transactions} transactions ({s.events} events, {s.rows} rows), "
                    f"skipped {s.skipped_transactions}; at {publisher.position}",
                    markup=False,
                )
                next_status = time.monotonic() + STATUS_INTERVAL
    except Shutdown:
        pass
    finally:
        publisher.flush_state(force=True)
        binlog.close()
        topic.close()
        stream.close()
    s = publisher.stats
    err.print(f"stopped: published {s.transactions} transactions ({s.events} events); resume at {publisher.position}", markup=False)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
