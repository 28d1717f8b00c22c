"""`cdc-producer PROFILE --status`: where the producer stands, read without starting it.

The topic's tail (where a start resumes: cdc_producer/resume.py), the leader's position now, and
whether the leader still has the binlog from the resume point on. A part that cannot be reached is
reported as such; the others are still shown.
"""

from __future__ import annotations

import msgspec
import pymysql

from cdc_producer.binlog import current_position, leader_info, purged_problem
from cdc_producer.progress import CopyProgress, copies_path, describe_copies, load
from cdc_producer.resume import read_tail
from cdc_stream.console import describe_error
from cdc_stream.errors import CdcError, SetupError, UnreachableError
from cdc_stream.layout import Layout
from cdc_stream.mysql import connect
from cdc_stream.positions import Copying, Position
from cdc_stream.profile import ProducerProfile
from cdc_stream.telemetry import Reachable, stream_place
from cdc_stream.topics import open_stream


class ProducerStatus(msgspec.Struct, kw_only=True):
    """Where cdc-producer stands (`--status --json` prints this)."""

    topic: str
    leader: Reachable
    stream: Reachable
    leader_version: str | None  # e.g. "10.11.6-MariaDB-log"
    leader_position: str | None  # GTID state/set, or file:pos
    end_offset: int | None  # of the log topic
    next_sequence: int | None
    resume_from: str | None  # where a start resumes (None: a first start, or the topic could not be read)
    resume_source: str | None  # "topic" (its tail), "state file" (past filtered-out transactions), "first start"
    caught_up: bool | None  # the resume point is the leader's position
    purged: str | None  # why the resume point can no longer be streamed from (None: it can, or unknown)
    copies: list[CopyProgress] = msgspec.field(default_factory=list)  # live copies in progress

    @property
    def exit_code(self) -> int:
        """0 when all is well, 3 when the leader or the stream could not be read, 4 when the
        leader no longer has the binlog the producer needs (a start would refuse)."""
        if not (self.leader.reachable and self.stream.reachable):
            return UnreachableError.exit_code
        return SetupError.exit_code if self.purged else 0


def producer_status(profile: ProducerProfile) -> ProducerStatus:
    """Read the topic's tail and the leader (never raises for an unreachable part)."""
    layout = Layout.of(profile.stream)
    db = profile.database
    status = ProducerStatus(topic=layout.log_topic, leader=Reachable(address=f"{db.ip_or_host}:{db.port}",
                            reachable=False), stream=Reachable(address=stream_place(profile.stream), reachable=False),
                            leader_version=None, leader_position=None, end_offset=None, next_sequence=None,
                            resume_from=None, resume_source=None, caught_up=None, purged=None)
    start: Position | None = None
    try:
        with open_stream(profile.stream, create=False) as stream:
            status.stream.address = stream.describe()
            if stream.exists(layout.log_topic):
                tail, state = read_tail(layout, stream, profile.data.base_path)
                reader = layout.reader(stream)
                try:
                    status.end_offset = reader.end_offset()
                finally:
                    reader.close()
                status.next_sequence = tail.next_sequence
                saved = state.load(tail)
                resume = saved or tail.resume_point()
                start = resume.read_from() if resume is not None else None
                status.resume_source = "state file" if saved else "topic" if tail.position else "first start"
                status.copies = _copies(tail.copying, load(copies_path(profile.data.base_path, layout.log_topic)))
            else:
                status.end_offset, status.next_sequence, status.resume_source = 0, 0, "first start"
        status.stream.reachable = True
    except (CdcError, OSError) as e:
        status.stream.error = describe_error(e)[0]
    if start is not None:
        status.resume_from = start.text()
    try:
        conn = connect(db, "leader")
        try:
            info = leader_info(conn)
            now = current_position(conn, info)
            status.leader_version, status.leader_position = info.version, now.text()
            if start is not None:
                status.purged = purged_problem(conn, info, start)
                status.caught_up = start.text() == now.text()
            elif status.stream.reachable:
                status.caught_up = False
        finally:
            conn.close()
        status.leader.reachable = True
    except (CdcError, pymysql.err.MySQLError, OSError) as e:
        status.leader.error = describe_error(e)[0]
    return status


def _copies(copying: Copying, running: list[CopyProgress]) -> list[CopyProgress]:
    """The copies the topic's tail says are in progress, with what the running producer says of them."""
    live = {c.copy: c for c in running}
    return [live.get(cursor.copy) or CopyProgress(table=table, copy=cursor.copy, after=cursor.after,
                                                  recopy=cursor.recopy)
            for table, cursor in copying.items()]


def rows(status: ProducerStatus) -> list[tuple[str, str]]:
    """The status as the table's rows."""
    leader, stream = status.leader, status.stream
    if leader.reachable:
        out = [("leader", f"{leader.address}, reachable ({status.leader_version})"),
               ("leader position", status.leader_position or "-")]
    else:
        out = [("leader", f"{leader.address}, unreachable: {leader.error}")]
    if stream.reachable:
        out.append(("topic", f"'{status.topic}' ({stream.address}), end offset {status.end_offset}, "
                             f"next sequence {status.next_sequence}"))
    else:
        out.append(("topic", f"'{status.topic}' ({stream.address}): {stream.error}"))
    if status.resume_source == "first start":
        out.append(("resume from", "first start: the leader's current position"))
    elif status.resume_from is not None:
        out.append(("resume from", f"{status.resume_from} (from the {status.resume_source})"))
    else:
        out.append(("resume from", "unknown (the topic could not be read)"))
    if status.caught_up is not None:
        out.append(("caught up", "yes" if status.caught_up else "no"))
    if status.copies:
        out.append(("copying", describe_copies(status.copies)))
    if status.resume_from is None or not leader.reachable:
        out.append(("binlog purged", "unknown" if status.resume_source != "first start" else "-"))
    else:
        out.append(("binlog purged", f"yes: {status.purged}" if status.purged else "no"))
    return out
