"""The consumer's checkpoint as the other programs see it: where it is stored, and what it covers.

cdc-consumer records how far it applied the topic in `mysql_cdc.consumer_offsets` on the
follower (cdc_consumer/checkpoint.py writes it, in the transaction of the rows it covers); the
replica audit reads it there. A recorded source position also tells which transactions a
later copy on the topic repeats: the consumer skips them, and so does Spark's reading of the
topic (cdc_spark/reading.py).
"""

from __future__ import annotations

from cdc_stream.events import ChangeEvent
from cdc_stream.positions import Position

SCHEMA = "mysql_cdc"
TABLE = "consumer_offsets"


def position_after(ev: ChangeEvent) -> Position | None:
    """The source position a transaction's last event leaves the leader at, as checkpoints record
    it: its GTID state/set, else "file:pos" of its commit (None: none, or the empty GTID state)."""
    position = Position.after_record(ev.gtid_set, ev.bn_file)  # no server uuid: the row holds file:pos alone
    # (the empty GTID state covers nothing: like no position, it leaves the previous one in place)
    return position if position is not None and position.gtid_set != "" else None


def already_applied(ev: ChangeEvent, position: Position | None) -> bool:
    """Whether the transaction `ev` starts lies at or before `position` (a republished copy).

    Fluvio has no idempotent producer: after a crash between sending and the
    acknowledgement, a transaction can be on the topic twice (at new offsets).
    """
    if ev.txn is None or position is None:
        return False
    binlog = ev.bn_file if ev.bn_file is not None and ev.bn_file.offset is not None else None
    return position.covers(ev.gtid, binlog)


__all__ = ["SCHEMA", "TABLE", "already_applied", "position_after"]
