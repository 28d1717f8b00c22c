"""cdc-producer PROFILE: parse, call run() or check(), report."""

from __future__ import annotations

import gc

# No collections while the modules load and the profile is checked: the start-up objects
# are not garbage, and the collector's passes over them slow every start.
# run() freezes them and turns collection back on (run._tune_gc) before it snapshots or
# streams; the short --check run and a failed start end with it off.
gc.disable()

from pathlib import Path  # noqa: E402

import typer  # noqa: E402

from cdc_producer import run as producer  # noqa: E402
from cdc_stream.console import err, report_errors  # noqa: E402
from cdc_stream.errors import ConfigError  # noqa: E402
from cdc_stream.profile import load_producer_profile  # noqa: E402
from cdc_stream.shutdown import StopSignal  # noqa: E402

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def produce(
    profile: Path = typer.Argument(..., help="Producer profile (TOML), e.g. profiles/producer_profile.toml"),
    tables: list[str] = typer.Argument(
        None, help="With --snapshot: the tables to copy (db.table); none = all filtered."),
    check: bool = typer.Option(False, "--check", help="Run the preflight checks on the leader and exit."),
    snapshot: bool = typer.Option(False, "--snapshot", help="Copy tables onto the topic before streaming."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Follow the leader's binlog and publish one change event per DDL statement or row batch."""
    stop = StopSignal().install()

    def go() -> int:
        p = load_producer_profile(profile)
        if check:
            problems = producer.check(p)
            for problem in problems:
                err.print(f"FAIL {problem}")
            if not problems:
                err.print(f"ok: the leader at {p.database.ip_or_host}:{p.database.port} is ready for CDC")
            return 4 if problems else 0
        if tables and not snapshot:
            raise ConfigError(f"unexpected arguments {' '.join(tables)}: table names go with --snapshot")
        producer.run(p, stop, snapshot_tables=list(tables or []) if snapshot else None)
        return 0

    raise typer.Exit(report_errors(go, debug))


def main() -> None:
    """Console-script entry point."""
    app()
