"""Baseline of the producer benchmark: python-mysql-replication's bare decode loop.

    python bench/decode_loop.py PORT START_GTID END_GTID

Reads the leader's binlog from START_GTID (exclusive) with the same stream
settings as cdc-producer (blocking, frozen schema), decodes every row of every row event (`for row in
ev.rows`) and stops after the commit of END_GTID. Prints one JSON line: rows,
seconds (and CPU seconds) from the first row event to the end, peak RSS (MB).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent


def peak_rss_mb(pid: int | str = "self") -> float:
    """VmHWM (peak resident set) of a process, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def row_events(port: int, start: str, end: str, server_id: int = 5402) -> Iterator[RowsEvent]:
    """The row events of the GTID range (start, end], as python-mysql-replication reads them with
    cdc-producer's stream settings; the stream is closed when the range ends (or the caller stops)."""
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "password": ""},
        server_id=server_id, is_mariadb=True, auto_position=start, blocking=True, freeze_schema=True,
        # GTID and XID events only tell where the range ends. blocking=True, like
        # cdc-producer: with blocking=False MariaDB closes the dump connection once it
        # has sent the whole binlog, the reset drops events still in the client's
        # socket buffer, and the library reconnects from `start` forever.
        only_events=[MariadbGtidEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    gtid = None
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                gtid = ev.gtid
            elif isinstance(ev, XidEvent):
                if gtid == end:
                    return
            else:
                yield ev
        raise RuntimeError(f"the binlog ended before {end}")
    finally:
        stream.close()


def decode_range(port: int, start: str, end: str, server_id: int = 5402) -> dict:
    """Decode the row events of the GTID range (start, end]; returns rows, seconds and peak RSS."""
    rows, first, first_cpu = 0, None, None
    for ev in row_events(port, start, end, server_id):
        if first is None:
            first, first_cpu = time.perf_counter(), time.process_time()
        for _row in ev.rows:
            rows += 1
    return {"rows": rows, "seconds": time.perf_counter() - (first or time.perf_counter()),
            "cpu_seconds": time.process_time() - (first_cpu or time.process_time()), "peak_rss_mb": peak_rss_mb()}


if __name__ == "__main__":
    print(json.dumps(decode_range(int(sys.argv[1]), sys.argv[2], sys.argv[3])))
