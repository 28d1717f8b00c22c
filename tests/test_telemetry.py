"""Telemetry, metrics exposition and JSON lines without a server: the pure parts of issue 16."""

from __future__ import annotations

import json
import logging
import re
import warnings

import pytest
from harness import run_cli
from prometheus_client.parser import text_string_to_metric_families
from test_replayer_machine import FakeFollower, add, replayer

from cdc_consumer.checkpoint import Checkpoint
from cdc_consumer.telemetry import ConsumerTelemetry, Tally
from cdc_stream import metrics
from cdc_stream.console import StatusLines
from cdc_stream.errors import ConfigError
from cdc_stream.positions import Position as SourcePosition
from cdc_stream.profile import parse_listen
from cdc_stream.telemetry import Health, Sample, SourceLag


def test_source_lag_grows_from_the_last_change_and_is_zero_once_caught_up():
    lag = SourceLag()
    assert lag.seconds(now=100.0) is None  # nothing handled yet
    lag.at(90.0)
    assert lag.seconds(now=100.0) == 10.0 and lag.seconds(now=130.5) == 40.5  # not moving: growing
    lag.caught_up()
    assert lag.seconds(now=500.0) == 0.0
    lag.at(499.0)
    assert lag.seconds(now=500.0) == 1.0
    lag.at(501.0)  # a leader clock ahead of ours
    assert lag.seconds(now=500.0) == 0.0


def totals(t: Tally) -> tuple[dict[str, int], int, int]:
    c = t.totals()
    return dict(c.rows), c.transactions, c.repeated


def test_the_tally_counts_what_the_replayer_commits_and_nothing_it_rolls_back():
    f = FakeFollower()
    r = replayer(f)
    r.apply(0, add(0, "0-1-1", 0, True, 1, 2))
    r.apply(1, add(1, "0-1-2", 0, False, 3))
    r.apply(2, add(2, "0-1-2", 1, True, 4, op="Delete"))
    r.apply(3, add(3, "0-1-3", 0, False, 5))  # open when idle: not whole, so not applied (nor counted)
    assert totals(r.tally) == ({"Add": 0, "Update": 0, "Delete": 0}, 0, 0)  # nothing committed yet
    r.idle()
    assert totals(r.tally) == ({"Add": 3, "Update": 0, "Delete": 1}, 2, 0)
    assert r.tally.next_offset == 3
    update = add(3, "0-1-3", 0, True, op="Update")
    update.rows = [([{"SignedInteger": 5}], [{"SignedInteger": 6}])]
    r.apply(3, update)
    r.idle()
    assert totals(r.tally) == ({"Add": 3, "Update": 1, "Delete": 1}, 3, 0)

    again = replayer(FakeFollower(), Checkpoint("cdc", "stream-1", 4, 3, "0-1-3", SourcePosition(gtid_set="0-1-3")))
    again.tally = r.tally  # one tally for the process, across reconnections
    again.tally.resumed(4)
    again.apply(4, add(4, "0-1-3", 0, True, 5))  # a republished copy: skipped
    again.idle()
    assert totals(r.tally) == ({"Add": 3, "Update": 1, "Delete": 1}, 3, 1)


def test_commits_past_the_checkpoint_a_reconnection_finds_are_not_counted():
    t = Tally()
    for offset in (1, 2, 3):
        t.rows("Add", 10)
        t.transaction_done(repeated=False)
        t.committed(offset)
    assert totals(t) == ({"Add": 30, "Update": 0, "Delete": 0}, 3, 0)
    t.resumed(2)  # the follower's checkpoint: the third COMMIT never ran
    assert totals(t) == ({"Add": 20, "Update": 0, "Delete": 0}, 2, 0) and t.next_offset == 2


def test_health_lines_are_one_line():
    h = Health()
    assert (h.state.ok, h.state.line()) == (False, "starting: not started yet")
    h.running("applying topic 'x'")
    assert (h.state.ok, h.state.line()) == (True, "ok: applying topic 'x'")
    h.stopped("the leader is not ready for CDC:\n  - binlog_format is MIXED")
    assert h.state.line() == "stopped: the leader is not ready for CDC: - binlog_format is MIXED"


class Fixed:
    """A Telemetry with fixed samples."""

    def __init__(self, samples: list[Sample]):
        self.health = Health()
        self._samples = samples

    def samples(self) -> list[Sample]:
        return self._samples


def test_samples_become_prometheus_text_with_build_and_process_metrics():
    fixed = Fixed([
        Sample("mysql_cdc_x_rows_total", "counter", "Rows.", 3, {"kind": "insert"}),
        Sample("mysql_cdc_x_rows_total", "counter", "Rows.", 2, {"kind": "update"}),
        Sample("mysql_cdc_x_lag_seconds", "gauge", "Lag.", 0.5),
        Sample("mysql_cdc_x_position_info", "info", "Position.", 1, {"gtid": "0-1-9"}),
    ])
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry_for(fixed)).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("mysql_cdc_x_rows_total", (("kind", "insert"),))] == 3
    assert samples[("mysql_cdc_x_rows_total", (("kind", "update"),))] == 2
    assert samples[("mysql_cdc_x_lag_seconds", ())] == 0.5
    assert samples[("mysql_cdc_x_position_info", (("gtid", "0-1-9"),))] == 1
    assert samples[("mysql_cdc_build_info", (("version", metrics.build_version()),))] == 1
    assert "# TYPE mysql_cdc_x_rows_total counter" in text and "# TYPE mysql_cdc_x_lag_seconds gauge" in text
    assert ("process_cpu_seconds_total", ()) in samples and ("python_info", ()) not in samples  # python_info has labels
    assert any(name == "python_info" for name, _ in samples)


def call(app, path: str) -> tuple[str, bytes]:
    got: list[str] = []
    body = app({"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""},
               lambda status, headers: got.append(status))
    return got[0], b"".join(body)


def test_healthz_says_200_only_while_running():
    t = ConsumerTelemetry()
    app = metrics.wsgi_app(t, metrics.registry_for(t))
    assert call(app, "/healthz") == ("503 Service Unavailable", b"starting: not started yet: connecting to the follower\n")
    t.health.running("applying topic 't'")
    assert call(app, "/healthz") == ("200 OK", b"ok: applying topic 't'\n")
    t.lost("lost the follower at h:1 (gone); reconnecting (attempt 1)")
    assert call(app, "/healthz") == ("503 Service Unavailable",
                                     b"reconnecting: lost the follower at h:1 (gone); reconnecting (attempt 1)\n")
    assert call(app, "/nope") == ("404 Not Found", b"not found: try /metrics or /healthz\n")
    status, body = call(app, "/metrics")
    assert status == "200 OK" and b"mysql_cdc_consumer_reconnects_total 1.0" in body


def test_listen_addresses():
    assert parse_listen("127.0.0.1:9108") == ("127.0.0.1", 9108)
    assert parse_listen("[::1]:9108") == ("::1", 9108)
    assert parse_listen("0.0.0.0:1") == ("0.0.0.0", 1)
    for bad in ("9108", ":9108", "host:", "host:x", "host:70000", "", "[::1:9108", "[::1]]:9108"):
        with pytest.raises(ValueError, match="is not HOST:PORT"):
            parse_listen(bad)


@pytest.mark.parametrize("program", ["cdc-producer", "cdc-consumer"])
def test_an_empty_metrics_listen_option_is_refused_not_ignored(tmp_path, program):
    """`--metrics-listen ""` used to fall back to the profile's [metrics] listen (none: no endpoint) without a word."""
    profile = tmp_path / "p.toml"
    profile.write_text('mysql_resource_name = "x"\n[database]\nuser = "u"\nport = 1\n'
                       f'[stream]\npath = "{tmp_path}/stream"\n')
    result = run_cli(program, str(profile), "--metrics-listen", "")
    assert (result.returncode, result.stderr.decode()) == (
        2, "error: --metrics-listen: '' is not HOST:PORT (e.g. 127.0.0.1:9108)\n")


def test_an_address_in_use_is_one_error_naming_the_setting():
    t = ConsumerTelemetry()
    first = metrics.serve("127.0.0.1", 0, t)
    try:
        with pytest.raises(ConfigError, match=rf"cannot serve metrics on 127.0.0.1:{first.port}: .*; choose another"):
            metrics.serve("127.0.0.1", first.port, t)
    finally:
        first.close()


def test_human_lines_are_the_template_filled_in(capsys):
    lines = StatusLines()
    lines.configure("cdc-consumer")
    lines.info("lost {what}; reconnecting in {delay:g}s", what="the {x} stream", delay=0.5, extra=1)
    lines.error("record at offset {1} is bad", exit_code=5)
    lines.log("error", "FAIL {problem}", problem="a")
    assert capsys.readouterr().err.splitlines() == [
        "lost the {x} stream; reconnecting in 0.5s", "error: record at offset {1} is bad", "FAIL a"]


def test_json_lines_carry_the_fields_and_mask_secrets(capsys, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # json mode takes these over
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    lines = StatusLines()
    lines.configure("cdc-producer", "json", secrets=["s3cret-pw", ""])
    lines.info("at {position}, {rows} rows", position=object.__new__(Position), rows=3, lag=None)
    lines.warning("server said: access denied for s3cret-pw")
    lines.error("bad", exit_code=4, message="shadowed")
    out = capsys.readouterr().err
    records = [json.loads(line) for line in out.splitlines()]
    for r in records:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r.pop("time")) and r.pop("program") == "cdc-producer"
    assert records == [
        {"level": "info", "message": "at here, 3 rows", "position": "here", "rows": 3, "lag": None},
        {"level": "warning", "message": "server said: access denied for ***"},
        {"level": "error", "message": "bad", "exit_code": 4, "field_message": "shadowed"},
    ]
    assert "s3cret" not in out


class Position:
    def __str__(self) -> str:
        return "here"
