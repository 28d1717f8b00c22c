"""Terminal output shared by the three CLIs: status on stderr, errors as one line."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pymysql

from cdc_stream.errors import CdcError, mysql_message

T = TypeVar("T")


class StatusLines:
    """Status and error lines on stderr, so stdout stays clean for data (cdc-topic consume).

    A line is written as it is: rich's Console is created only for a progress bar on a
    terminal (then lines go through it, above the bar): importing rich costs every start
    (bench/README.md, "Measurements behind the code")."""

    def __init__(self) -> None:
        self._console: Any = None  # rich.console.Console, once a progress bar needs one

    @property
    def is_terminal(self) -> bool:
        """Whether stderr is a terminal (where a progress bar can be drawn)."""
        return sys.stderr.isatty()

    def console(self) -> Any:
        """The rich Console on stderr, created on first use."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def print(self, line: str) -> None:
        """Write one line (never interpreted as rich markup or emoji codes)."""
        if self._console is not None:
            self._console.print(line, markup=False, emoji=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


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
        if debug:
            traceback.print_exc(file=sys.stderr)
        message, code = describe_error(e)
        err.print(f"error: {message}")
        return code


class TableProgress:
    """Per-table progress of a copy: a rich bar (rows, rows/s, ETA) on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self._bar: Any = None  # rich.progress.Progress on a terminal
        if err.is_terminal:
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
        err.print(f"snapshot of {table.full_name}: about {table.estimated_rows} rows")
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
            err.print(f"snapshot of {name}: {copy.rows} rows ({rate:,.0f} rows/s)")

    def finish(self, task: Any) -> None:
        """The task's table is copied."""
        name = self._name(task)
        copy = self._started[name]
        seconds = time.monotonic() - copy.started
        if self._bar is None:
            rate = copy.rows / max(seconds, 1e-6)
            err.print(f"snapshot of {name}: done, {copy.rows} rows in {seconds:.1f}s ({rate:,.0f} rows/s)")

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
