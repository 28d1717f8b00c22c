"""Preflight against the binlog settings that change the event format (docs/compatibility.md, "Binlog settings"):
what cdc-producer decodes passes, what it does not is refused at start with the fix.

MariaDB: the session's real leader. MySQL 8: the recorded-binlog test primary, told the setting's value.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import run_cli
from mysql8_primary import Mysql8PrimaryProcess

DATA = Path(__file__).with_name("data") / "mysql8"


def test_mariadb_log_bin_compress_passes_and_binlog_alter_two_phase_is_refused(pipeline):
    profile = pipeline.producer_profile()
    pipeline.leader.execute("SET GLOBAL log_bin_compress = ON")
    try:
        check = run_cli("cdc-producer", "--check", str(profile))
    finally:
        pipeline.leader.execute("SET GLOBAL log_bin_compress = OFF")
    assert check.returncode == 0, check.stderr
    assert check.stderr.decode().strip() == f"ok: the leader at 127.0.0.1:{pipeline.leader.port} is ready for CDC"

    pipeline.leader.execute("SET GLOBAL binlog_alter_two_phase = ON")
    try:
        result = run_cli("cdc-producer", str(profile))
    finally:
        pipeline.leader.execute("SET GLOBAL binlog_alter_two_phase = OFF")
    assert result.returncode == 4
    assert result.stderr.decode().splitlines() == [
        "error: the leader is not ready for CDC:",
        ("  - binlog_alter_two_phase is ON: ALTER TABLE is logged twice (START ALTER, then COMMIT ALTER), which the "
        "follower would run twice; SET GLOBAL binlog_alter_two_phase=OFF"),
    ]


def _profile(tmp: Path, port: int) -> Path:
    path = tmp / "producer.toml"
    path.write_text(f"""mysql_resource_name = "mysql-srv1"
[database]
ip_or_host = "127.0.0.1"
port = {port}
user = "cdc"
password = "fluvio4cdc!"
server_id = 5401
[data]
base_path = "{tmp}/producer"
[stream]
path = "{tmp}/stream"
""")
    return path


@pytest.mark.server  # the MySQL 8 test primary
def test_mysql_compression_and_partial_json_pass_and_permissive_gtid_modes_are_refused(tmp_path):
    binlog = DATA / "binlog-invisible-columns.000001"
    decoded = Mysql8PrimaryProcess(binlog, tmp_path, "--set", "binlog_transaction_compression=ON",
                                   "--set", "binlog_row_value_options=PARTIAL_JSON")
    try:
        check = run_cli("cdc-producer", "--check", str(_profile(tmp_path, decoded.port)))
    finally:
        decoded.stop()
    assert check.returncode == 0, check.stderr
    assert check.stderr.decode().strip() == f"ok: the leader at 127.0.0.1:{decoded.port} is ready for CDC"
    # (the test primary answers SHOW GLOBAL VARIABLES as MySQL 8.0 does; information_schema.GLOBAL_VARIABLES is gone)
    assert any("SHOW GLOBAL VARIABLES WHERE Variable_name IN" in r for r in decoded.requests())

    for mode in ("ON_PERMISSIVE", "OFF_PERMISSIVE"):
        primary = Mysql8PrimaryProcess(binlog, tmp_path, "--set", f"gtid_mode={mode}")
        try:
            result = run_cli("cdc-producer", str(_profile(tmp_path, primary.port)))
        finally:
            primary.stop()
        assert result.returncode == 4
        assert result.stderr.decode().splitlines() == [
            "error: the leader is not ready for CDC:",
            (f"  - gtid_mode is {mode}: a transition mode whose binlog mixes GTID and anonymous transactions, from "
            "which cdc-producer can resume neither by GTID set nor by file:position; finish the change: SET GLOBAL "
            "gtid_mode=ON (or OFF)"),
        ]
