"""`cdc-consumer PROFILE --status`: where the consumer stands, read without starting it.

The follower's checkpoint (mysql_cdc.consumer_offsets, read only: nothing is created), the log
topic's end offset through the topic layout, the backlog between them, and the lag of the last
applied change (the source timestamp of the record just before the checkpoint). A part that cannot
be reached is reported as such; the others are still shown.
"""

from __future__ import annotations

import time

import msgspec
import pymysql

from cdc_consumer import checkpoint
from cdc_consumer.follower import connect_follower
from cdc_stream.console import describe_error
from cdc_stream.errors import CdcError, UnreachableError
from cdc_stream.layout import Layout, LogReader
from cdc_stream.profile import ConsumerProfile
from cdc_stream.telemetry import Reachable, stream_place
from cdc_stream.topics import open_stream

MISSING_SCHEMA = {1049, 1146}  # unknown database / table: the consumer never ran against this follower


class CheckpointInfo(msgspec.Struct, kw_only=True):
    """The follower's checkpoint of the topic: everything before next_offset is applied."""

    next_offset: int
    sequence: int | None
    transaction: str | None
    position: str | None
    written_at: str | None  # UTC, when the consumer last committed


class ConsumerStatus(msgspec.Struct, kw_only=True):
    """Where cdc-consumer stands (`--status --json` prints this)."""

    topic: str
    follower: Reachable
    stream: Reachable
    end_offset: int | None  # of the log topic
    checkpoint: CheckpointInfo | None  # None: nothing applied yet (or the follower did not answer)
    backlog_records: int | None  # end offset minus the checkpoint
    last_applied_at: str | None  # UTC source time of the last change applied
    lag_seconds: float | None  # 0 when the backlog is empty; now - last_applied_at otherwise

    @property
    def exit_code(self) -> int:
        """0 when every part answered, 3 when the follower or the stream could not be read."""
        return 0 if self.follower.reachable and self.stream.reachable else UnreachableError.exit_code


def consumer_status(profile: ConsumerProfile, now: float | None = None) -> ConsumerStatus:
    """Read the checkpoint and the topic (never raises for an unreachable part)."""
    layout = Layout.of(profile.stream)
    topic = layout.log_topic
    db = profile.database
    follower = Reachable(address=f"{db.ip_or_host}:{db.port}", reachable=False)
    cp: CheckpointInfo | None = None
    try:
        conn = connect_follower(db)
        try:
            cp = _checkpoint(conn, topic)
        finally:
            conn.close()
        follower.reachable = True
    except (CdcError, pymysql.err.MySQLError, OSError) as e:
        follower.error = describe_error(e)[0]
    stream = Reachable(address=stream_place(profile.stream), reachable=False)
    end: int | None = None
    last_ts: int | None = None
    try:
        with open_stream(profile.stream, create=False) as s:
            stream.address = s.describe()
            reader = layout.reader(s)
            try:
                end = reader.end_offset()
                if cp is not None and cp.next_offset > 0:
                    last_ts = _last_change_ts(reader, cp.next_offset - 1)
            finally:
                reader.close()
        stream.reachable = True
    except (CdcError, OSError) as e:
        stream.error = describe_error(e)[0]
    applied = cp.next_offset if cp is not None else 0
    backlog = max(0, end - applied) if end is not None and follower.reachable else None
    lag: float | None = None
    if backlog == 0:
        lag = 0.0
    elif backlog is not None and last_ts is not None:
        lag = round(max(0.0, (time.time() if now is None else now) - last_ts / 1000), 3)
    return ConsumerStatus(topic=topic, follower=follower, stream=stream, end_offset=end, checkpoint=cp,
                          backlog_records=backlog, last_applied_at=_utc(last_ts / 1000) if last_ts else None,
                          lag_seconds=lag)


def _checkpoint(conn: pymysql.Connection, topic: str) -> CheckpointInfo | None:
    try:
        saved = checkpoint.load(conn, topic)
        written = checkpoint.written_at(conn, topic) if saved else None
    except pymysql.err.MySQLError as e:
        if e.args and e.args[0] in MISSING_SCHEMA:
            return None
        raise
    if saved is None:
        return None
    return CheckpointInfo(next_offset=saved.next_offset, sequence=saved.sequence, transaction=saved.txn_id,
                          position=saved.position.text() if saved.position is not None else None,
                          written_at=_utc(written) if written is not None else None)


def _last_change_ts(reader: LogReader, offset: int) -> int | None:
    """The source timestamp (ms) of the last change the record at `offset` holds (None if it holds none)."""
    records = reader.read(offset, wait=0.0, max_records=1)
    if not records:
        return None
    try:
        stamps = [e.ts for e in records[0].events() if e.ts]
    except CdcError:  # a bad record the consumer skipped (--skip-bad-records)
        return None
    return stamps[-1] if stamps else None


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def rows(status: ConsumerStatus) -> list[tuple[str, str]]:
    """The status as the table's rows."""
    f, s, cp = status.follower, status.stream, status.checkpoint
    out = [("follower", f"{f.address}, " + ("reachable" if f.reachable else f"unreachable: {f.error}"))]
    if s.reachable:
        out.append(("topic", f"'{status.topic}' ({s.address}), end offset {status.end_offset}"))
    else:
        out.append(("topic", f"'{status.topic}' ({s.address}): {s.error}"))
    if not f.reachable:
        out.append(("checkpoint", "unknown (the follower did not answer)"))
    elif cp is None:
        out.append(("checkpoint", "none: nothing applied yet (starts at offset 0)"))
    else:
        written = f", written {cp.written_at}" if cp.written_at else ""
        out.append(("checkpoint", f"offset {cp.next_offset}, transaction {cp.transaction}{written}"))
        out.append(("position", cp.position or "-"))
    out.append(("backlog", "unknown" if status.backlog_records is None else f"{status.backlog_records} records"))
    if status.lag_seconds is None:
        out.append(("lag", "unknown"))
    elif status.backlog_records == 0:
        out.append(("lag", "0 s (caught up)"))
    else:
        out.append(("lag", f"{status.lag_seconds:g} s (last applied change from {status.last_applied_at})"))
    return out
