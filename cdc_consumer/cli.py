"""cdc-consumer PROFILE: parse, call run() or check(), report."""

from __future__ import annotations

from pathlib import Path

import typer

from cdc_consumer import run as consumer
from cdc_stream.console import err, report_errors
from cdc_stream.profile import load_consumer_profile
from cdc_stream.shutdown import StopSignal

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def consume(
    profile: Path = typer.Argument(..., help="Consumer profile (TOML), e.g. profiles/consumer_profile.toml"),
    check: bool = typer.Option(False, "--check", help="Run the preflight checks on the follower and exit."),
    skip_bad_records: bool = typer.Option(
        False, "--skip-bad-records", help="Copy records that are not valid events to TOPIC-dead-letter and go on."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Replay the topic's change events onto the follower, one source transaction per commit."""
    stop = StopSignal().install()

    def go() -> int:
        p = load_consumer_profile(profile)
        if check:
            problems, facts = consumer.check(p)
            for problem in problems:
                err.print(f"FAIL {problem}")
            if not problems:
                err.print(f"ok: the follower at {p.database.ip_or_host}:{p.database.port} is ready; {facts[0]}")
            return 4 if problems else 0
        consumer.run(p, stop, skip_bad_records=skip_bad_records)
        return 0

    raise typer.Exit(report_errors(go, debug))


def main() -> None:
    """Console-script entry point."""
    app()
