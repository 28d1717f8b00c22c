"""Terminal output shared by the three CLIs: status lines on stderr, errors as one line, status tables.

Every status and error line goes through `err` (a StatusLines): call sites give a message
template and its fields, once. The default format writes the line as it always was; `--log-format
json` (or `[logging] format = "json"`) writes one JSON object per line instead, with `time`,
`level`, `program`, `message` (the same text) and the fields, for log shippers. Secrets the program
was told about are masked in both formats.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import msgspec
import pymysql

from cdc_stream.errors import CdcError, ConfigError, SetupError, mysql_message

T = TypeVar("T")
LogFormat = Literal["human", "json"]
Level = Literal["info", "warning", "error"]
_RESERVED = ("time", "level", "program", "message")
MIN_SECRET = 4  # shorter secrets are not masked: replacing every "ab" would garble the lines


class StatusLines:
    """Status and error lines on stderr, so stdout stays clean for data (cdc-topic consume).

    A line is written as it is: rich's Console is created only for a progress bar on a
    terminal (then lines go through it, above the bar): importing rich costs every start
    (bench/README.md, "Measurements behind the code")."""

    def __init__(self) -> None:
        self._console: Any = None  # rich.console.Console, once a progress bar needs one
        self.program = ""
        self.format: LogFormat = "human"
        self._secrets: tuple[str, ...] = ()

    def configure(self, program: str, format: LogFormat = "human", secrets: Iterable[str] = ()) -> None:
        """Name the program, choose the format, and name the secrets to mask (passwords of the profile).

        In the json format, Python warnings and library log records become JSON lines too."""
        self.program, self.format = program, format
        self._secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True))
        if format == "json":
            warnings.showwarning = self._show_warning
            root = logging.getLogger()
            if not any(isinstance(h, _JsonLogHandler) for h in root.handlers):
                root.addHandler(_JsonLogHandler(self))

    @property
    def is_terminal(self) -> bool:
        """Whether stderr is a terminal (where a progress bar can be drawn)."""
        return sys.stderr.isatty()

    @property
    def can_draw(self) -> bool:
        """Whether a progress bar may be drawn: human lines on a terminal."""
        return self.format == "human" and self.is_terminal

    def console(self) -> Any:
        """The rich Console on stderr, created on first use."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def info(self, template: str, **fields: Any) -> None:
        """A status line: `template` formatted with `fields` (str.format); json adds the fields."""
        self._emit("info", template.format(**fields) if fields else template, fields)

    def warning(self, template: str, **fields: Any) -> None:
        """A line about something that went wrong and is being handled (a lost server, a skipped record)."""
        self._emit("warning", template.format(**fields) if fields else template, fields)

    def error(self, text: str, **fields: Any) -> None:
        """An error line: `error: <text>` (text as it is; `fields` only in json)."""
        self._emit("error", text, fields)

    def log(self, level: Level, template: str, **fields: Any) -> None:
        """A line at `level` written as the template says (no `error: ` prefix: a check's FAIL lines)."""
        self._emit(level, template.format(**fields) if fields else template, fields, prefix=False)

    def print(self, line: str) -> None:
        """A status line as it is (never interpreted as a template, rich markup or emoji codes)."""
        self._emit("info", line, {})

    def _emit(self, level: Level, text: str, fields: dict[str, Any], prefix: bool = True) -> None:
        if self.format == "json":
            record: dict[str, Any] = {"time": _utc(time.time()), "level": level, "program": self.program,
                                      "message": self._mask(text)}
            for key, value in fields.items():
                record[key if key not in _RESERVED else f"field_{key}"] = self._plain(value)
            line = msgspec.json.encode(record).decode()
        else:
            line = self._mask(f"error: {text}" if level == "error" and prefix else text)
        if self._console is not None:
            self._console.print(line, markup=False, emoji=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _plain(self, value: Any) -> Any:
        """A field's JSON value: numbers, booleans and null as they are, anything else as its text."""
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return self._mask(str(value))

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _show_warning(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: Any = None, line: str | None = None) -> None:
        self.warning("{category}: {text}", category=category.__name__, text=str(message),
                     source=f"{filename}:{lineno}")


class _JsonLogHandler(logging.Handler):
    """Library log records (python-mysql-replication, PyMySQL) as JSON lines, in the json format."""

    def __init__(self, lines: StatusLines):
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        level: Level = "error" if record.levelno >= logging.ERROR else "warning"
        text = record.getMessage()
        if level == "error":
            self.lines.error(text, logger=record.name)
        else:
            self.lines.warning("{text}", text=text, logger=record.name)


def log_format(name: str | None) -> LogFormat | None:
    """The --log-format option checked (None: not given, the profile decides)."""
    if name is None:
        return None
    if name == "human":
        return "human"
    if name == "json":
        return "json"
    raise ConfigError(f"--log-format must be human or json, not {name!r}")


def _utc(t: float) -> str:
    """RFC 3339 UTC time with milliseconds: 2026-01-02T03:04:05.678Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


err = StatusLines()


def describe_error(e: BaseException) -> tuple[str, int]:
    """The one-line message and exit code of any failure: a CdcError's own, a server's
    error, or (a bug) the exception's type and text, pointing to --debug."""
    if isinstance(e, CdcError):
        return str(e), e.exit_code
    if isinstance(e, pymysql.err.MySQLError):
        return f"database error: {mysql_message(e)}", 5
    text = (str(e).strip().splitlines() or [""])[0][:400]  # one line, even for a long multi-line text
    return f"unexpected {type(e).__name__}: {text} (rerun with --debug for the traceback)", 1


def report_errors(fn: Callable[[], T], debug: bool = False) -> T | int:
    """Run fn; turn any failure into one 'error: ...' line and an exit code (traceback only with --debug)."""
    try:
        return fn()
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        return report_error(e, debug)


def report_error(e: BaseException, debug: bool = False) -> int:
    """Write the one `error: ...` line of a failure (and its traceback with --debug); returns the exit code."""
    message, code = describe_error(e)
    if debug and err.format == "json":
        err.error(message, exit_code=code, traceback="".join(traceback.format_exception(e)))
        return code
    if debug:
        traceback.print_exception(e, file=sys.stderr)
    err.error(message, exit_code=code)
    return code


def show_status(title: str, state: Any, rows: list[tuple[str, str]], as_json: bool) -> None:
    """`--status`: the program's state as a small table on stdout, or (as_json) its JSON (a msgspec struct)."""
    import msgspec

    if as_json:
        print_json(msgspec.json.encode(state))
    else:
        print_table(title, rows)


def report_check(problems: list[str], ok: str, **fields: Any) -> int:
    """`--check`: one FAIL line per problem, or the `ok` line; the exit code of a server not set up for CDC."""
    for problem in problems:
        err.log("error", "FAIL {problem}", problem=problem)
    if problems:
        return SetupError.exit_code
    err.info(ok, **fields)
    return 0


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    """A small two-column table on stdout (`--status`): what, and where it stands (text as it is, no markup)."""
    from rich.console import Console
    from rich.table import Table  # only here: importing it slows every start
    from rich.text import Text

    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for what, value in rows:
        table.add_row(Text(what), Text(value))
    if sys.stdout.isatty():
        Console(highlight=False).print(table)
        return
    console = Console(highlight=False, width=4096)  # a file or a pipe: no folding, no padding after each line
    with console.capture() as captured:
        console.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    sys.stdout.flush()


def print_json(data: bytes) -> None:
    """One JSON document on stdout (`--status --json`)."""
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.flush()


class TableProgress:
    """Per-table progress of a copy: a rich bar (rows, rows/s, ETA) on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self._bar: Any = None  # rich.progress.Progress on a terminal
        if err.can_draw:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} rows/s"), TimeRemainingColumn(), console=err.console(),
            )
            self._bar.start()
        self._started: dict[str, _Copy] = {}

    def start(self, table: CopiedTable) -> Any:
        """Begin a table; returns its task (to pass to advance and finish)."""
        now = time.monotonic()
        self._started[table.full_name] = _Copy(now, 0, now)
        if self._bar is not None:
            return self._bar.add_task(table.full_name, total=table.estimated_rows or None, rate="-")
        err.info("snapshot of {table}: about {estimated_rows} rows", table=table.full_name,
                 estimated_rows=table.estimated_rows)
        return table.full_name

    def advance(self, task: Any, rows: int) -> None:
        """`rows` more rows of the task's table are copied."""
        name = self._name(task)
        copy = self._started[name]
        copy.rows += rows
        rate = copy.rows / max(time.monotonic() - copy.started, 1e-6)
        if self._bar is not None:
            self._bar.update(task, advance=rows, rate=f"{rate:,.0f}")
        elif time.monotonic() - copy.reported >= 10:
            copy.reported = time.monotonic()
            err.info("snapshot of {table}: {rows} rows ({rate:,.0f} rows/s)", table=name, rows=copy.rows, rate=rate)

    def finish(self, task: Any) -> None:
        """The task's table is copied."""
        name = self._name(task)
        copy = self._started[name]
        seconds = time.monotonic() - copy.started
        if self._bar is None:
            rate = copy.rows / max(seconds, 1e-6)
            err.info("snapshot of {table}: done, {rows} rows in {seconds:.1f}s ({rate:,.0f} rows/s)", table=name,
                     rows=copy.rows, seconds=seconds, rate=rate)

    def close(self) -> None:
        """Remove the progress bar."""
        if self._bar is not None:
            self._bar.stop()

    def _name(self, task: Any) -> str:
        return str(self._bar.tasks[task].description if self._bar is not None else task)


class CopiedTable(Protocol):
    """What a progress display needs to know of a table being copied."""

    @property
    def full_name(self) -> str: ...

    @property
    def estimated_rows(self) -> int: ...


@dataclass
class _Copy:
    started: float
    rows: int
    reported: float  # when a status line last said how far it is
