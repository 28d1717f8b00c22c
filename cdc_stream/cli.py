"""cdc-topic: look into and write to topics on any backend, like the `fluvio` CLI."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from cdc_stream.console import err, report_errors
from cdc_stream.errors import ConfigError
from cdc_stream.events import ChangeEvent, encode_event
from cdc_stream.layout import Layout
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


def _settings(profile: Path | None, path: Path | None, endpoint: str | None,
              fluvio_profile: str | None = None) -> StreamSettings:
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
    topic: str | None = typer.Argument(
        None, help="Topic name. Without it (and with --profile): the profile's change events in source order, "
                   "whatever its topic layout."),
    from_beginning: bool = typer.Option(False, "-B", "--from-beginning", help="Start at the first record."),
    disable_continuous: bool = typer.Option(False, "-d", "--disable-continuous", help="Exit once caught up."),
    tail: int | None = typer.Option(None, "-T", "--tail", help="Start N records before the end."),
    start: int | None = typer.Option(None, "--start", help="Start at this absolute offset."),
    key_value: bool = typer.Option(False, "-k", "--key-value", help="Print \\[key] before each value."),
    profile: Path | None = ProfileOpt, path: Path | None = PathOpt, endpoint: str | None = EndpointOpt,
    fluvio_profile: str | None = FluvioProfileOpt, debug: bool = DebugOpt,
) -> None:
    """Print records one per line (status on stderr), from the end unless told otherwise."""
    stop = StopSignal().install()

    def go() -> int:
        if topic is None and profile is None:
            raise ConfigError("name a TOPIC, or give --profile to print the profile's change events")
        settings = _settings(profile, path, endpoint, fluvio_profile)
        with open_stream(settings, create=False) as stream:
            if topic is None:  # the profile's log, through its layout: one line per change event
                layout = Layout.of(settings)
                reader = layout.reader(stream)
                read: Callable[[int, float], list[tuple[int, list[tuple[bytes | None, bytes]]]]] = (
                    lambda offset, wait: [(r.offset, [(_txn_key(e), encode_event(e)) for e in r.events()])
                                          for r in reader.read(offset, wait)])
                name, end, close = layout.log_topic, reader.end_offset(), reader.close
            else:
                t = stream.topic(topic)
                read = lambda offset, wait: [(r.offset, [(r.key, r.value)]) for r in t.read(offset, wait)]
                name, end, close = topic, t.end_offset(), t.close
            offset, where = _first_offset(end, start, from_beginning, tail)
            err.print(f"Consuming records from '{name}' starting from {where}")
            out = sys.stdout.buffer
            try:
                while not stop.requested:
                    with stop.interruptible():
                        records = read(offset, 0.0 if disable_continuous else 0.5)
                    if not records and disable_continuous:
                        break
                    for at, lines in records:
                        for key, value in lines:
                            if key_value:
                                out.write(b"[" + (key if key is not None else b"null") + b"] ")
                            out.write(value + b"\n")
                        offset = at + 1
                    out.flush()
            except (Shutdown, BrokenPipeError):
                pass
            close()
        return 0

    raise typer.Exit(report_errors(go, debug))


def _txn_key(event: ChangeEvent) -> bytes | None:
    """An event's record key on the topic: its source transaction's id."""
    return event.txn.id.encode() if event.txn else None


def _first_offset(end: int, start: int | None, from_beginning: bool, tail: int | None) -> tuple[int, str]:
    if start is not None:
        return start, f"offset {start}"
    if from_beginning:
        return 0, "the beginning of log"
    if tail is not None:
        return max(0, end - tail), f"{tail} records from the end of log"
    return end, "the end of log"


@app.command("list")
def list_topics(
    profile: Path | None = ProfileOpt, path: Path | None = PathOpt, endpoint: str | None = EndpointOpt,
    fluvio_profile: str | None = FluvioProfileOpt, debug: bool = DebugOpt,
) -> None:
    """Show the topics with their record counts."""

    def go() -> int:
        from rich.console import Console
        from rich.table import Table  # only here: importing it slows every other command's start

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
    profile: Path | None = ProfileOpt, path: Path | None = PathOpt, endpoint: str | None = EndpointOpt,
    fluvio_profile: str | None = FluvioProfileOpt, debug: bool = DebugOpt,
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
    profile: Path | None = ProfileOpt, path: Path | None = PathOpt, endpoint: str | None = EndpointOpt,
    fluvio_profile: str | None = FluvioProfileOpt, debug: bool = DebugOpt,
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
