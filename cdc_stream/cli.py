"""cdc-topic: look into and write to topics on any backend, like the `fluvio` CLI."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from cdc_stream.console import err, report_errors
from cdc_stream.errors import ConfigError
from cdc_stream.profile import Stream as StreamSettings
from cdc_stream.profile import load_stream_profile
from cdc_stream.shutdown import Shutdown, StopSignal
from cdc_stream.topics import open_stream

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="Inspect and write topics (embedded log or Fluvio).")

ProfileOpt = typer.Option(None, "--profile", "-p", help="Take \\[stream] from this producer/consumer profile.")
PathOpt = typer.Option(None, "--path", help="Embedded stream directory (default ~/mysql-cdc/stream).")
EndpointOpt = typer.Option(None, "--endpoint", help="Fluvio SC endpoint HOST:PORT.")
FluvioProfileOpt = typer.Option(None, "--fluvio-profile",
                                help="A profile of the Fluvio config file (~/.fluvio/config, or $FLV_PROFILE_PATH).")
DebugOpt = typer.Option(False, "--debug", help="Show tracebacks.")


def _settings(profile: Optional[Path], path: Optional[Path], endpoint: Optional[str],
              fluvio_profile: Optional[str] = None) -> StreamSettings:
    if sum(x is not None for x in (profile, path, endpoint, fluvio_profile)) > 1:
        if fluvio_profile is None:
            raise ConfigError("give only one of --profile, --path and --endpoint")
        raise ConfigError("give only one of --profile, --path, --endpoint and --fluvio-profile")
    if profile is not None:
        return load_stream_profile(profile).stream
    if endpoint is not None:
        return StreamSettings(backend="fluvio", fluvio_endpoint=endpoint)
    if fluvio_profile is not None:
        return StreamSettings(backend="fluvio", fluvio_profile=fluvio_profile)
    settings = StreamSettings(backend="embedded")
    settings.path = str(Path(path).expanduser()) if path else str(Path(settings.path).expanduser())
    return settings


@app.command()
def consume(
    topic: str = typer.Argument(..., help="Topic name."),
    from_beginning: bool = typer.Option(False, "-B", "--from-beginning", help="Start at the first record."),
    disable_continuous: bool = typer.Option(False, "-d", "--disable-continuous", help="Exit once caught up."),
    tail: Optional[int] = typer.Option(None, "-T", "--tail", help="Start N records before the end."),
    start: Optional[int] = typer.Option(None, "--start", help="Start at this absolute offset."),
    key_value: bool = typer.Option(False, "-k", "--key-value", help="Print \\[key] before each value."),
    profile: Optional[Path] = ProfileOpt, path: Optional[Path] = PathOpt, endpoint: Optional[str] = EndpointOpt,
    fluvio_profile: Optional[str] = FluvioProfileOpt, debug: bool = DebugOpt,
) -> None:
    """Print records one per line (status on stderr), from the end unless told otherwise."""
    stop = StopSignal().install()

    def go() -> int:
        with open_stream(_settings(profile, path, endpoint, fluvio_profile), create=False) as stream:
            t = stream.topic(topic)
            end = t.end_offset()
            if start is not None:
                offset, where = start, f"offset {start}"
            elif from_beginning:
                offset, where = 0, "the beginning of log"
            elif tail is not None:
                offset, where = max(0, end - tail), f"{tail} records from the end of log"
            else:
                offset, where = end, "the end of log"
            err.print(f"Consuming records from '{topic}' starting from {where}")
            out = sys.stdout.buffer
            try:
                while not stop.requested:
                    with stop.interruptible():
                        records = t.read(offset, wait=0.0 if disable_continuous else 0.5)
                    if not records and disable_continuous:
                        break
                    for r in records:
                        if key_value:
                            out.write(b"[" + (r.key if r.key is not None else b"null") + b"] ")
                        out.write(r.value + b"\n")
                        offset = r.offset + 1
                    out.flush()
            except (Shutdown, BrokenPipeError):
                pass
            t.close()
        return 0

    raise typer.Exit(report_errors(go, debug))


@app.command("list")
def list_topics(
    profile: Optional[Path] = ProfileOpt, path: Optional[Path] = PathOpt, endpoint: Optional[str] = EndpointOpt,
    fluvio_profile: Optional[str] = FluvioProfileOpt, debug: bool = DebugOpt,
) -> None:
    """Show the topics with their record counts."""

    def go() -> int:
        from rich.console import Console
        from rich.table import Table  # only here: it costs every other command's start-up 70 ms

        with open_stream(_settings(profile, path, endpoint, fluvio_profile), create=False) as stream:
            table = Table("NAME", "RECORDS", box=None, header_style="bold")
            for name, count in stream.list_topics():
                table.add_row(name, str(count))
            Console(highlight=False).print(table)
        return 0

    raise typer.Exit(report_errors(go, debug))


@app.command()
def create(
    topic: str = typer.Argument(..., help="Topic name."),
    profile: Optional[Path] = ProfileOpt, path: Optional[Path] = PathOpt, endpoint: Optional[str] = EndpointOpt,
    fluvio_profile: Optional[str] = FluvioProfileOpt, debug: bool = DebugOpt,
) -> None:
    """Create a topic (no error if it exists)."""

    def go() -> int:
        with open_stream(_settings(profile, path, endpoint, fluvio_profile)) as stream:
            stream.create(topic)
            err.print(f"topic \"{topic}\" created")
        return 0

    raise typer.Exit(report_errors(go, debug))


@app.command()
def produce(
    topic: str = typer.Argument(..., help="Topic name."),
    profile: Optional[Path] = ProfileOpt, path: Optional[Path] = PathOpt, endpoint: Optional[str] = EndpointOpt,
    fluvio_profile: Optional[str] = FluvioProfileOpt, debug: bool = DebugOpt,
) -> None:
    """Append each line of stdin as one record (for debugging and tests)."""

    def go() -> int:
        with open_stream(_settings(profile, path, endpoint, fluvio_profile), create=False) as stream:
            t = stream.topic(topic)
            lines = [line.rstrip(b"\r\n") for line in sys.stdin.buffer]
            offsets = t.append([(None, line) for line in lines if line])
            err.print(f"appended {len(offsets)} records to '{topic}'")
            t.close()
        return 0

    raise typer.Exit(report_errors(go, debug))


def main() -> None:
    """Console-script entry point."""
    app()
