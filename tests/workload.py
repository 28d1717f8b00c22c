"""A concurrent mixed write load on the leader, for fault-injection tests and benchmarks.

Multi-row transactions, updates, deletes, a composite key, and a table without a
primary key that holds duplicate rows: a double apply or a lost change on the
follower shows up as a row difference.
"""

from __future__ import annotations

import random
import threading
import time

import pymysql

SCHEMA = [
    "CREATE DATABASE IF NOT EXISTS flvDb",
    "CREATE TABLE flvDb.accounts (id INT PRIMARY KEY, balance DECIMAL(12,2) NOT NULL, note VARCHAR(40))",
    "CREATE TABLE flvDb.items (a INT, b VARCHAR(8), qty INT, PRIMARY KEY (a, b))",
    "CREATE TABLE flvDb.log_nopk (k INT, v VARCHAR(10))",
]
TABLES = ["accounts", "items", "log_nopk"]


class Workload:
    """Runs random transactions in a thread until stopped; pause() waits for the current one to finish."""

    def __init__(self, port: int, seed: int = 7, pace: float = 0.005):
        self.pace = pace
        self.conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=False)
        self.rng = random.Random(seed)
        self.next_id = 1
        self.transactions = 0
        self._run = threading.Event()
        self._idle = threading.Event()
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def create_schema(self) -> None:
        with self.conn.cursor() as cur:
            for sql in SCHEMA:
                cur.execute(sql)
        self.conn.commit()

    def start(self) -> Workload:
        self._run.set()
        self._thread.start()
        return self

    def pause(self) -> None:
        self._run.clear()
        self._idle.wait(30)
        if self._error:
            raise self._error

    def resume(self) -> None:
        self._idle.clear()
        self._run.set()

    def stop(self) -> None:
        self._stop = True
        self._run.set()
        self._thread.join(30)
        self.conn.close()
        if self._error:
            raise self._error

    def _loop(self) -> None:
        try:
            while not self._stop:
                if not self._run.is_set():
                    self._idle.set()
                    self._run.wait()
                    continue
                self.one_transaction()
                time.sleep(self.pace)  # concurrency matters here, not volume
        except BaseException as e:  # surfaced to the test by pause()/stop()
            self._error = e
            self._idle.set()

    def one_transaction(self) -> None:
        rng = self.rng
        with self.conn.cursor() as cur:
            kind = rng.choice(["insert", "insert", "update", "delete", "mixed"])
            if kind in ("insert", "mixed"):
                rows = [(self.next_id + i, f"{rng.randint(0, 10**6) / 100:.2f}", rng.choice([None, "x", "née ✓"]))
                        for i in range(rng.randint(1, 5))]
                self.next_id += len(rows)
                cur.executemany("INSERT INTO flvDb.accounts VALUES (%s, %s, %s)", rows)
                k = rng.randint(1, 20)
                cur.executemany("INSERT INTO flvDb.log_nopk VALUES (%s, %s)", [(k, "dup"), (k, "dup")])
                cur.execute("INSERT INTO flvDb.items VALUES (%s, %s, 1) ON DUPLICATE KEY UPDATE qty = qty + 1",
                            (rng.randint(1, 10), rng.choice("abc")))
            if kind in ("update", "mixed"):
                cur.execute("UPDATE flvDb.accounts SET balance = balance + 1.5, note = %s WHERE id %% 7 = %s",
                            (f"u{self.transactions}", rng.randint(0, 6)))
                cur.execute("UPDATE flvDb.log_nopk SET v = %s WHERE k = %s LIMIT 1", (f"v{self.transactions}", rng.randint(1, 20)))
                cur.execute("UPDATE IGNORE flvDb.items SET b = 'z' WHERE a = %s AND b = 'a'", (rng.randint(1, 10),))
            if kind in ("delete", "mixed"):
                cur.execute("DELETE FROM flvDb.accounts WHERE id = %s", (rng.randint(1, max(1, self.next_id)),))
                cur.execute("DELETE FROM flvDb.log_nopk WHERE k = %s LIMIT 1", (rng.randint(1, 20),))
        self.conn.commit()
        self.transactions += 1
