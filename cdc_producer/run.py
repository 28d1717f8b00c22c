"""cdc-producer's one function: wire the leader, the topic and the publisher, then stream."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pymysql
from pymysqlreplication import binlogstream

from cdc_producer.binlog import (
    connect, current_position, leader_info, open_binlog, preflight, stream_error,
)
from cdc_producer.publish import Publisher, ResumeState, check_same_server, read_tail
from cdc_stream.console import err
from cdc_stream.errors import SetupError
from cdc_stream.filters import TableFilter
from cdc_stream.profile import ProducerProfile
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import open_stream

STATUS_INTERVAL = 10.0
MAX_BACKOFF = 10.0
# Errors of the binlog connection that a reconnect can cure (the leader restarted,
# a network cut, a half-open socket caught by the read timeout).
_TRANSIENT_CODES = {2003, 2006, 2013, 2055, 1053, 1927}
_TRANSIENT = (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError, socket.timeout, OSError)

# python-mysql-replication reconnects by itself on 2006/2013, but from the position
# it was created with (on MariaDB it never updates auto_position): that would
# publish old transactions again. We reconnect ourselves from the last published one.
binlogstream.MYSQL_EXPECTED_ERROR_CODES.clear()


def check(profile: ProducerProfile) -> list[str]:
    """Preflight only: the problems found on the leader ([] when ready)."""
    conn = connect(profile.database, "leader")
    try:
        return preflight(conn, leader_info(conn), profile.database.server_id)
    finally:
        conn.close()


def run(profile: ProducerProfile, stop: StopSignal) -> None:
    """Follow the leader's binlog and publish until stopped; reconnect when the leader goes away."""
    conn = connect(profile.database, "leader", autocommit=True)
    try:
        info = leader_info(conn)
        problems = preflight(conn, info, profile.database.server_id)
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
    check_same_server(start, info)
    if info.flavor == "mariadb" and start.gtid_set is None:
        raise SetupError(f"the topic's resume point {start} is a file position, but MariaDB is followed by GTID only")
    publisher = Publisher(
        topic=topic, resource=profile.mysql_resource_name, filters=TableFilter.from_profile(profile.filters),
        info=info, next_sequence=tail.next_sequence, position=start, state=state,
    )
    where = f"{profile.database.ip_or_host}:{profile.database.port}"
    failures = 0
    next_status = time.monotonic() + STATUS_INTERVAL
    try:
        while not stop.requested:
            position = publisher.position
            binlog = open_binlog(profile.database, info, position)
            announced = False
            try:
                while not stop.requested:
                    with stop.interruptible():
                        ev = binlog.fetchone()
                    if not announced:
                        verb = "streaming from" if failures == 0 else "reconnected: streaming from"
                        err.print(
                            f"{verb} {position} of {info.flavor} {info.version} at {where} to topic '{name}' "
                            f"({stream.describe()}), next sequence {publisher.next_sequence}",
                            markup=False,
                        )
                        announced, failures = True, 0
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
            except _TRANSIENT as e:
                if isinstance(e, pymysql.err.MySQLError) and e.args and e.args[0] not in _TRANSIENT_CODES:
                    raise stream_error(e, position) from None
                publisher.discard_partial()
                failures += 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                reason = e.args[-1] if getattr(e, "args", None) else type(e).__name__
                err.print(
                    f"lost the leader at {where} ({reason}); reconnecting in {delay:g}s (attempt {failures}), "
                    f"will resume at {publisher.position}",
                    markup=False,
                )
                with stop.interruptible():
                    time.sleep(delay)
            except pymysql.err.MySQLError as e:
                raise stream_error(e, position) from None
            finally:
                binlog.close()
    except Shutdown:
        pass
    finally:
        publisher.flush_state(force=True)
        topic.close()
        stream.close()
    s = publisher.stats
    err.print(f"stopped: published {s.transactions} transactions ({s.events} events); resume at {publisher.position}", markup=False)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
