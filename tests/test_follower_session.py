"""The consumer's follower sessions and the follower's binary log: no Annotate_rows event holding a BINLOG
statement's base64 where the consumer's user may turn annotations off (cdc_consumer/follower.py)."""

from __future__ import annotations

from harness import Server

from cdc_consumer.follower import connect_follower, probe
from cdc_stream.profile import FollowerDatabase


def _session(server: Server, user: str, password: str) -> tuple[int, bool]:
    """(@@session.binlog_annotate_row_events, probe's `annotates`) of a consumer session as that user."""
    conn = connect_follower(FollowerDatabase(ip_or_host="127.0.0.1", port=server.port, user=user, password=password))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@session.binlog_annotate_row_events")
            [(value,)] = cur.fetchall()
        return int(value), probe(conn).annotates
    finally:
        conn.close()


def test_a_session_logs_no_annotations_where_its_user_may_say_so(follower):
    """SUPER or BINLOG ADMIN may turn them off; a user with BINLOG REPLAY alone keeps the server's default, and
    the probe says so (the Replayer then keeps BINLOG statements small: test_replayer_machine)."""
    follower.execute("DROP USER IF EXISTS 'replay_only'@'%'", "CREATE USER 'replay_only'@'%' IDENTIFIED BY 'pw'",
                     "GRANT BINLOG REPLAY ON *.* TO 'replay_only'@'%'",
                     "DROP USER IF EXISTS 'binlog_admin'@'%'", "CREATE USER 'binlog_admin'@'%' IDENTIFIED BY 'pw'",
                     "GRANT BINLOG REPLAY, BINLOG ADMIN ON *.* TO 'binlog_admin'@'%'")
    try:
        assert _session(follower, "root", "") == (0, False)
        assert _session(follower, "binlog_admin", "pw") == (0, False)
        assert _session(follower, "replay_only", "pw") == (1, True)
        assert follower.query("SELECT @@global.binlog_annotate_row_events") == [(1,)]  # the server's own: unchanged
    finally:
        follower.execute("DROP USER 'replay_only'@'%'", "DROP USER 'binlog_admin'@'%'")


def _binlog_events(server: Server, since: tuple[str, int]) -> list[str]:
    """The event types the server logged after `since` (a file and position of SHOW MASTER STATUS), a table
    map's with its table ('Table_map flvDb.wide')."""
    file, position = since
    return [f"Table_map {str(row[5]).rsplit('(', 1)[1][:-1]}" if row[2] == "Table_map" else str(row[2])
            for row in server.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {position}")]


def _position(server: Server) -> tuple[str, int]:
    [row] = server.query("SHOW MASTER STATUS")
    return str(row[0]), int(row[1])


def test_binlog_replay_leaves_no_base64_in_the_followers_binary_log(pipeline):
    """One INSERT of 300 rows of 200 characters: 8 rows events on the leader, replayed by BINLOG statements. The
    follower logs the rows (one rows event per leader's, each ending its statement) and no Annotate_rows."""
    producer, consumer = pipeline.start_producer(), pipeline.start_consumer()
    pipeline.leader.execute("CREATE DATABASE flvDb", "CREATE TABLE flvDb.wide (id INT PRIMARY KEY, pad VARCHAR(200))")
    pipeline.wait_synced()
    leader_from, follower_from = _position(pipeline.leader), _position(pipeline.follower)
    pipeline.leader.execute("INSERT INTO flvDb.wide SELECT seq, REPEAT(CHAR(97 + seq % 26), 200) FROM flvDb.seq_1_to_300")
    pipeline.wait_synced()
    assert pipeline.follower.rows("flvDb", "wide") == pipeline.leader.rows("flvDb", "wide")
    leader_events, follower_events = _binlog_events(pipeline.leader, leader_from), _binlog_events(pipeline.follower,
                                                                                                  follower_from)
    rows_events = leader_events.count("Write_rows_v1")
    assert rows_events == 8 and "Annotate_rows" in leader_events  # the leader's own INSERT is annotated
    assert follower_events.count("Write_rows_v1") == rows_events
    assert follower_events.count("Table_map flvDb.wide") == rows_events  # each rows event ended its statement
    assert "Annotate_rows" not in follower_events
    assert consumer.stop() == 0 and producer.stop() == 0
