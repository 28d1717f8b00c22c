"""cdc-consumer PROFILE: parse, call run() or check(), report."""

from __future__ import annotations

from pathlib import Path

import typer

from cdc_consumer import run as consumer
from cdc_consumer.telemetry import ConsumerTelemetry
from cdc_stream import collector
from cdc_stream.console import err, log_format, report_check, report_error, report_errors, show_status
from cdc_stream.errors import ConfigError, DataError
from cdc_stream.profile import load_consumer_profile
from cdc_stream.shutdown import StopSignal
from cdc_stream.telemetry import serve_metrics

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def consume(
    profile: Path = typer.Argument(..., help="Consumer profile (TOML), e.g. profiles/consumer_profile.toml"),
    check: bool = typer.Option(False, "--check", help="Run the preflight checks on the follower and exit."),
    skip_bad_records: bool = typer.Option(
        False, "--skip-bad-records", help="Copy records that are not valid events to TOPIC-dead-letter and go on."
    ),
    status: bool = typer.Option(
        False, "--status", help="Show where the consumer stands (checkpoint, backlog) and exit."),
    as_json: bool = typer.Option(False, "--json", help="With --status: print JSON instead of a table."),
    metrics_listen: str | None = typer.Option(
        None, "--metrics-listen", metavar="HOST:PORT", help="Serve /metrics and /healthz here (\\[metrics] listen)."),
    log_format_name: str | None = typer.Option(
        None, "--log-format", metavar="human|json",
        help="Status lines as text (default) or JSON (\\[logging] format)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Replay the topic's change events onto the follower, one source transaction per commit."""
    stop = StopSignal().install()
    err.configure("cdc-consumer", "json" if log_format_name == "json" else "human")

    def go() -> int:
        chosen = log_format(log_format_name)
        p = load_consumer_profile(profile)
        err.configure("cdc-consumer", chosen or p.logging.format, secrets=[p.database.password])
        if as_json and not status:
            raise ConfigError("--json goes with --status")
        if status:
            from cdc_consumer.status import consumer_status, rows

            state = consumer_status(p)
            show_status(f"cdc-consumer {profile}", state, rows(state), as_json)
            return state.exit_code
        if check:
            problems, facts = consumer.check(p)
            for need in facts[1:]:  # what the follower user lacks for some statements
                err.log("warning", "WARN {need}", need=need)
            return report_check(problems, "ok: the follower at {follower} is ready; {row_path}",
                                follower=f"{p.database.ip_or_host}:{p.database.port}",
                                row_path=facts[0] if facts else "")
        telemetry = ConsumerTelemetry()
        endpoint = serve_metrics(p.metrics.listen if metrics_listen is None else metrics_listen, telemetry)
        try:
            consumer.run(p, stop, skip_bad_records=skip_bad_records, telemetry=telemetry)
        except DataError as e:
            if endpoint is None:
                raise
            # Watched by Prometheus: stay up, stopped, so the stop shows as mysql_cdc_consumer_stopped and
            # on /healthz (a service manager restarting the program would only meet the record again).
            code = report_error(e, debug)
            err.info("stopped at offset {offset}; serving metrics until SIGTERM", offset=telemetry.stopped_at)
            stop.wait()
            return code
        return 0

    raise typer.Exit(report_errors(go, debug))


def main() -> None:
    """Console-script entry point."""
    collector.quiet_start()  # run() calls collector.streaming() once the follower is open
    app()
