"""Terminal output shared by the three CLIs: status on stderr, errors as one line."""

from __future__ import annotations

import sys
import time
import traceback
from typing import Callable, TypeVar

import pymysql

from cdc_stream.errors import CdcError
from cdc_stream.topics.base import TopicError, TopicNotFound

T = TypeVar("T")


class StatusLines:
    """Status and error lines on stderr, so stdout stays clean for data (cdc-topic consume).

    A line is written as it is: rich's Console is created only for a progress bar on a
    terminal (then lines go through it, above the bar). Importing rich cost every start
    of the producer and the consumer 28 ms, a tenth of the producer's start-up."""

    def __init__(self) -> None:
        self._console = None

    @property
    def is_terminal(self) -> bool:
        """Whether stderr is a terminal (where a progress bar can be drawn)."""
        return sys.stderr.isatty()

    def console(self):
        """The rich Console on stderr, created on first use."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def print(self, line: str, markup: bool = False) -> None:
        """Write one line (never interpreted as rich markup or emoji codes)."""
        if self._console is not None:
            self._console.print(line, markup=False, emoji=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


err = StatusLines()


def report_errors(fn: Callable[[], T], debug: bool = False) -> T | int:
    """Run fn; turn any failure into one 'error: ...' line and an exit code (traceback only with --debug)."""
    try:
        return fn()
    except CdcError as e:
        return _fail(str(e), e.exit_code, debug)
    except TopicNotFound as e:
        return _fail(str(e), 2, debug)
    except TopicError as e:
        return _fail(str(e), 3, debug)
    except pymysql.err.MySQLError as e:
        return _fail(f"database error: {e.args[-1] if e.args else e}", 5, debug)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: still one line, the traceback is behind --debug
        return _fail(f"unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)", 1, debug)


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc(file=sys.stderr)
    err.print(f"error: {message}", markup=False)
    return code


class TableProgress:
    """Per-table progress of a copy: a rich bar (rows, rows/s, ETA) on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self._bar = None
        if err.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} rows/s"), TimeRemainingColumn(), console=err.console(),
            )
            self._bar.start()
        self._started: dict = {}

    def start(self, table) -> object:
        """Begin a table; `table` has full_name and estimated_rows."""
        self._started[table.full_name] = [time.monotonic(), 0, time.monotonic()]
        if self._bar is not None:
            return self._bar.add_task(table.full_name, total=table.estimated_rows or None, rate="-")
        err.print(f"snapshot of {table.full_name}: about {table.estimated_rows} rows", markup=False)
        return table.full_name

    def advance(self, task, rows: int) -> None:
        name = self._name(task)
        state = self._started[name]
        state[1] += rows
        rate = state[1] / max(time.monotonic() - state[0], 1e-6)
        if self._bar is not None:
            self._bar.update(task, advance=rows, rate=f"{rate:,.0f}")
        elif time.monotonic() - state[2] >= 10:
            state[2] = time.monotonic()
            err.print(f"snapshot of {name}: {state[1]} rows ({rate:,.0f} rows/s)", markup=False)

    def finish(self, task) -> None:
        name = self._name(task)
        start, rows, _ = self._started[name]
        seconds = time.monotonic() - start
        if self._bar is None:
            err.print(f"snapshot of {name}: done, {rows} rows in {seconds:.1f}s ({rows / max(seconds, 1e-6):,.0f} rows/s)",
                      markup=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _name(self, task) -> str:
        return self._bar.tasks[task].description if self._bar is not None else task
