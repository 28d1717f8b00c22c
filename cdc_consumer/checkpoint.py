"""The consumer's position, stored in the follower itself.

It is written in the same follower transaction as the rows it covers, so after
any crash the follower and its checkpoint agree: nothing is applied twice and
nothing is skipped. DDL cannot share a transaction (MySQL commits implicitly
around it), so a DDL's offset is recorded first as `ddl_offset`: if the process
dies between the DDL and the next checkpoint, the replayed DDL's "already
exists / does not exist" error is recognised as "already applied".
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from cdc_consumer.literals import NULL_LITERAL, quote_text
from cdc_stream.consumer_offsets import SCHEMA, TABLE
from cdc_stream.mysql import qualified, quote_ident
from cdc_stream.positions import Position

_TABLE = qualified(SCHEMA, TABLE)

# Errors a DDL statement gives when it already ran (used only for the recorded ddl_offset).
ALREADY_APPLIED_DDL_ERRORS = {1007, 1008, 1050, 1051, 1054, 1060, 1061, 1091, 1146}


@dataclass
class Checkpoint:
    """Everything below next_offset of `topic` has been applied."""

    topic: str
    stream_id: str
    next_offset: int
    sequence: int | None = None
    txn_id: str | None = None
    position: Position | None = None  # source position after txn_id (stored as text: GTID state/set, or "file:pos")
    ddl_offset: int | None = None


def ensure_schema(conn: pymysql.Connection) -> None:
    """Create the checkpoint schema and table on the follower if missing."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_ident(SCHEMA)}")
        cur.execute(
            f"""CREATE TABLE IF NOT EXISTS {_TABLE} (
                topic VARCHAR(255) NOT NULL PRIMARY KEY,
                stream_id VARCHAR(64) NOT NULL,
                next_offset BIGINT NOT NULL,
                sequence BIGINT NULL,
                txn_id VARCHAR(255) NULL,
                position TEXT NULL,
                ddl_offset BIGINT NULL,
                updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
            ) ENGINE=InnoDB"""
        )
    conn.commit()


def load(conn: pymysql.Connection, topic: str) -> Checkpoint | None:
    """The stored checkpoint of a topic, or None before the first commit."""
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT topic, stream_id, next_offset, sequence, txn_id, position, ddl_offset FROM {_TABLE} "
            "WHERE topic=%s",
            (topic,),
        )
        row = cur.fetchone()
    conn.commit()  # end the read snapshot
    if not row:
        return None
    topic_, stream_id, next_offset, sequence, txn_id, position, ddl_offset = row
    return Checkpoint(topic_, stream_id, next_offset, sequence, txn_id,
                      Position.parse(position) if position is not None else None, ddl_offset)


def written_at(conn: pymysql.Connection, topic: str) -> float | None:
    """When the topic's checkpoint was last written (seconds since the epoch), or None."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT UNIX_TIMESTAMP(updated_at) FROM {_TABLE} WHERE topic=%s", (topic,))
        row = cur.fetchone()
    conn.commit()
    return float(row[0]) if row and row[0] is not None else None


_SAVE = f"""INSERT INTO {_TABLE} (topic, stream_id, next_offset, sequence, txn_id, position, ddl_offset)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON DUPLICATE KEY UPDATE stream_id=VALUES(stream_id), next_offset=VALUES(next_offset),
                sequence=VALUES(sequence), txn_id=VALUES(txn_id), position=VALUES(position),
                ddl_offset=VALUES(ddl_offset)"""


def _literal(value: str | int | None) -> str:
    if value is None:
        return NULL_LITERAL
    return str(value) if isinstance(value, int) else quote_text(value)


def save_sql(cp: Checkpoint) -> str:
    """The statement writing the checkpoint, values escaped in: the caller sends it inside the
    follower transaction that applies the rows it covers (and commits)."""
    position = cp.position.text() if cp.position is not None else None  # the only place it becomes text
    params = (cp.topic, cp.stream_id, cp.next_offset, cp.sequence, cp.txn_id, position, cp.ddl_offset)
    return _SAVE % tuple(_literal(p) for p in params)


__all__ = ["SCHEMA", "TABLE", "Checkpoint", "ensure_schema", "load", "save_sql", "written_at"]
