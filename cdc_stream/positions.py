"""Comparing a source transaction with a source position (GTID state or set, or file:pos).

The consumer uses it to drop a transaction republished after a producer crash;
the producer uses it to drop binlog changes a snapshot already contains.
"""

from __future__ import annotations

from pymysqlreplication.gtid import Gtid, GtidSet


def covers(position: str | None, gtid: str | None, binlog: tuple[str, int] | None = None) -> bool:
    """Whether the transaction with `gtid` (or ending at `binlog` file:pos) lies at or before `position`.

    `position` is a MariaDB GTID state ("0-1-42,1-2-7"), a MySQL GTID set
    ("uuid:1-42"), or "file:pos" when GTIDs are off.
    """
    if not position:
        return False
    if gtid:
        if ":" not in gtid:  # MariaDB domain-server-seq: sequence numbers grow within a domain
            domain, _, seq = gtid.split("-")
            state = {p.split("-")[0]: int(p.split("-")[2]) for p in position.split(",") if p.count("-") == 2}
            return domain in state and int(seq) <= state[domain]
        try:
            return Gtid(gtid) in GtidSet(position)
        except ValueError:
            return False
    if binlog is not None and ":" in position:
        file, _, pos = position.rpartition(":")
        return _binlog_key(*binlog) <= _binlog_key(file, int(pos))
    return False


def _binlog_key(file: str, pos: int) -> tuple:
    stem, _, number = file.rpartition(".")
    return (stem, int(number) if number.isdigit() else number, pos)


def passed(position: str | None, until: str) -> bool:
    """Whether `position` is at or beyond `until` (every later transaction comes after `until`)."""
    if not position:
        return False
    if _is_gtid_set(until):
        try:
            return all(Gtid(g) in GtidSet(position) for g in _expand_mysql(until))
        except ValueError:
            return False
    if ":" in until:  # file:pos
        file, _, pos = until.rpartition(":")
        return covers(position, None, (file, int(pos)))
    return all(covers(position, g) for g in until.split(",") if g)


def _is_gtid_set(text: str) -> bool:
    return ":" in text and len(text.split(":")[0]) == 36  # a MySQL server UUID


def _expand_mysql(gtid_set: str) -> list[str]:
    """The last GTID of every interval: enough to test containment of a whole set."""
    out = []
    for part in gtid_set.split(","):
        uuid, *intervals = part.strip().split(":")
        out += [f"{uuid}:{iv.split('-')[-1]}" for iv in intervals]
    return out
