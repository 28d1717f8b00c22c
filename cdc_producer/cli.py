"""cdc-producer PROFILE: parse, call run() or check(), report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cdc_stream import collector

if TYPE_CHECKING:
    from cdc_stream.profile import ProducerProfile

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def produce(
    profile: Path = typer.Argument(..., help="Producer profile (TOML), e.g. profiles/producer_profile.toml"),
    tables: list[str] = typer.Argument(
        None, help="With --snapshot: the tables to copy (db.table); none = all filtered."),
    check: bool = typer.Option(False, "--check", help="Run the preflight checks on the leader and exit."),
    snapshot: bool = typer.Option(False, "--snapshot", help="Copy tables onto the topic before streaming."),
    status: bool = typer.Option(False, "--status", help="Show where the producer stands (topic, leader) and exit."),
    as_json: bool = typer.Option(False, "--json", help="With --status: print JSON instead of a table."),
    metrics_listen: str | None = typer.Option(
        None, "--metrics-listen", metavar="HOST:PORT", help="Serve /metrics and /healthz here (\\[metrics] listen)."),
    log_format_name: str | None = typer.Option(
        None, "--log-format", metavar="human|json",
        help="Status lines as text (default) or JSON (\\[logging] format)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Follow the leader's binlog and publish one change event per DDL statement or row batch."""
    # Imported here, after main() turned the collector off: most of the start-up objects are theirs.
    from cdc_producer import run as producer
    from cdc_producer.telemetry import ProducerTelemetry
    from cdc_stream.console import err, log_format, report_check, report_errors, show_status
    from cdc_stream.errors import ConfigError
    from cdc_stream.profile import load_producer_profile
    from cdc_stream.shutdown import StopSignal
    from cdc_stream.telemetry import serve_metrics

    stop = StopSignal().install()
    err.configure("cdc-producer", "json" if log_format_name == "json" else "human")

    def go() -> int:
        chosen = log_format(log_format_name)
        p = load_producer_profile(profile)
        err.configure("cdc-producer", chosen or p.logging.format, secrets=[p.database.password])
        if as_json and not status:
            raise ConfigError("--json goes with --status")
        if status:
            from cdc_producer.status import producer_status, rows

            state = producer_status(p)
            show_status(f"cdc-producer {profile}", state, rows(state), as_json)
            return state.exit_code
        if check:
            return report_check(producer.check(p), "ok: the leader at {leader} is ready for CDC",
                                leader=f"{p.database.ip_or_host}:{p.database.port}")
        if tables and not snapshot:
            raise ConfigError(f"unexpected arguments {' '.join(tables)}: table names go with --snapshot")
        if snapshot and p.snapshot.method == "watermark" and _asked_running(p, list(tables or [])):
            return 0
        telemetry = ProducerTelemetry()
        serve_metrics(p.metrics.listen if metrics_listen is None else metrics_listen, telemetry)
        producer.run(p, stop, snapshot_tables=list(tables or []) if snapshot else None, telemetry=telemetry)
        return 0

    raise typer.Exit(report_errors(go, debug))


def _asked_running(p: ProducerProfile, tables: list[str]) -> bool:
    """--snapshot while a producer of this profile runs: hand it the request (a file under [data]
    base_path) instead of starting a second one. Returns whether one was running."""
    from cdc_producer.signals import running_pid, send_request
    from cdc_stream.console import err
    from cdc_stream.layout import Layout

    topic = Layout.of(p.stream).log_topic
    pid = running_pid(p.data.base_path, topic)
    if pid is None:
        return False
    path = send_request(p.data.base_path, topic, "execute-snapshot", tables)
    err.info("asked the running producer (pid {pid}) to copy {tables} while it streams ({path})", pid=pid,
             tables=", ".join(tables) or "every filtered table", path=str(path))
    return True


def main() -> None:
    """Console-script entry point."""
    collector.quiet_start()  # run() calls collector.streaming() before it snapshots or streams
    app()
