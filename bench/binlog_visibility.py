"""Does the leader send a transaction to binlog readers before its engine commit makes it visible?

Sessions insert rows (one autocommit INSERT each) into a scratch table; a binlog reader reads each
transaction's key back, on another connection, the moment its commit (XID) arrives, and counts the
rows not visible yet. This is the race live copies must survive (cdc_producer/chunks.py: each chunk is
read in a consistent snapshot at a known binlog position, and again when the reader is past it).

    python bench/binlog_visibility.py PORT [SESSIONS] [SECONDS]     (root without a password, test servers)

Measured on the test servers' MariaDB 10.11 (2 shared cores): 1 session 15 of 10,405 not yet visible;
4 sessions 7,424 of 27,235, and 10 of 4,893 on a busier machine; 16 sessions 0 of 19,618. The count
depends on the reader keeping up: one that lags behind the writers reads only commits that are done.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import WriteRowsEvent


def main() -> None:
    port = int(sys.argv[1])
    sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 15.0
    root = {"host": "127.0.0.1", "port": port, "user": "root", "password": ""}
    conn = pymysql.connect(**root, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS cdc_bench_visibility")
        cur.execute("DROP TABLE IF EXISTS cdc_bench_visibility.t")
        cur.execute("CREATE TABLE cdc_bench_visibility.t (id BIGINT PRIMARY KEY, v INT) ENGINE=InnoDB")
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    stop, keys = threading.Event(), itertools.count(1)

    def insert() -> None:
        writer = pymysql.connect(**root, autocommit=True)
        while not stop.is_set():
            with writer.cursor() as cur:
                cur.execute("INSERT INTO cdc_bench_visibility.t VALUES (%s, 1)", (next(keys),))

    threads = [threading.Thread(target=insert, daemon=True) for _ in range(sessions)]
    stream = BinLogStreamReader(connection_settings=root, server_id=9911, log_file=file, log_pos=pos, blocking=True,
                                only_events=[WriteRowsEvent, XidEvent], only_schemas=["cdc_bench_visibility"])
    for t in threads:
        t.start()
    end = time.monotonic() + seconds
    key, read, missing = None, 0, 0
    for ev in stream:
        if isinstance(ev, WriteRowsEvent):
            key = ev.rows[0]["values"]["id"]
        elif isinstance(ev, XidEvent) and key is not None:
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM cdc_bench_visibility.t WHERE id = %s", (key,))
                missing += cur.fetchone()[0] == 0
            read, key = read + 1, None
        if time.monotonic() > end:
            break
    stop.set()
    stream.close()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE cdc_bench_visibility")
    print(f"sessions={sessions} transactions read from the binlog={read} not yet visible when their commit "
          f"arrived={missing}")


if __name__ == "__main__":
    main()
