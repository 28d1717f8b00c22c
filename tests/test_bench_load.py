"""bench/load.py's lag writer: its statement is the one pymysql's executemany sends for the same rows.

The lag bench escapes each row's values once and only puts each transaction's ids in front (bench/README.md,
issue 26, thirteenth part); what reaches the leader must stay the statement executemany would send, or the
bench would measure other rows than the ones it names. No server: the connection is never opened.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pymysql
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import load


class _Capture(pymysql.cursors.Cursor):
    """A cursor that keeps the statements executemany builds instead of sending them."""

    sent: list[bytes | str]

    def execute(self, query, args=None):
        assert args is None  # executemany's INSERT form renders the values itself
        self.sent.append(query)
        return 0


@pytest.mark.parametrize("first_id", [1, 987_654_321])
def test_the_lag_statement_is_what_executemany_sends(first_id):
    conn = pymysql.connect(host="127.0.0.1", user="root", password="", charset="utf8mb4", defer_connect=True)
    conn.server_status = 0  # what escaping reads from the handshake: backslash escapes on, as on the bench's leader
    rng = random.Random(7)
    pool = [load.make_row(i, rng)[1:] for i in range(400)]
    # values that need escaping: quotes, backslashes, a NUL, non-ASCII text
    pool[3] = (pool[3][0], "it's a \\ back\x00slash", "Zürich\u00e9", *pool[3][3:])
    cur = _Capture(conn)
    cur.sent = []
    cur.executemany(load.INSERT.format(db=load.DB, table=load.LAG_TABLE),
                    [(first_id + j, *row) for j, row in enumerate(pool)])
    # (executemany hands execute the statement already encoded; execute encodes a str the same way)
    statement = load.lag_statement(load.lag_rows(conn, pool), first_id)
    assert [bytes(q) for q in cur.sent] == [statement.encode(conn.encoding)]
