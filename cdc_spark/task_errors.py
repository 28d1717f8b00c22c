"""An exception a Spark task raised in its Python worker, back in the driver as what it was.

Spark hands the driver a PythonException whose text is the worker's traceback, which the jobs' one
`error: ...` line (console.describe_error) would show as "unexpected PythonException: An exception was
thrown from the Python worker". `task_error` gives back what the task raised, when it can be told:

- a CdcError (cdc_stream/errors.py) raised on an executor, e.g. the MalformedEvent of a read task that met
  a record it cannot decode: its message and exit code, as if raised in the driver;
- an OSError of a task, e.g. a full disk under the lake's spill directory: one line naming it, and what the
  job does about it (`then`: the lake's batch is not recorded as done).

Anything else stays Spark's exception (its first line, and the traceback with --debug).
"""

from __future__ import annotations

import builtins
import re

from cdc_stream import errors
from cdc_stream.errors import CdcError

_RAISED = re.compile(r"(?P<kind>[A-Za-z_][\w.]*): (?P<message>.*)", re.S)
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+")


def _raised_in_task(text: str) -> tuple[str, str] | None:
    """(qualified exception type, message) of the exception a Python traceback ends with; None when the text
    does not end like one. The exception's lines follow the last frame (`  File "..."`, its source lines)."""
    lines = text.rstrip().splitlines()
    while lines and _SQLSTATE.fullmatch(lines[-1]):  # Spark's error-class suffix, where it adds one
        lines.pop()
    start = max((i for i, line in enumerate(lines) if line.startswith('  File "')), default=-1) + 1
    while start and start < len(lines) and lines[start].startswith("    "):  # the frame's source and its carets
        start += 1
    found = _RAISED.fullmatch("\n".join(lines[start:]))
    return None if found is None else (found["kind"], found["message"].strip())


def task_error(e: BaseException, then: str = "fix the cause and run the job again") -> BaseException:
    """What a Spark task raised (above), or `e` itself when it is not a task's exception or its kind is not one
    to report this way; `then` ends an OSError's line."""
    from pyspark.errors.exceptions.base import PythonException

    if not isinstance(e, PythonException):
        return e
    raised = _raised_in_task(str(e))
    if raised is None:
        return e
    kind, message = raised
    module, _, name = kind.rpartition(".")
    ours = getattr(errors, name, None) if module == errors.__name__ else None
    if isinstance(ours, type) and issubclass(ours, CdcError):
        return CdcError(message, exit_code=ours.exit_code)
    builtin = getattr(builtins, name, None) if not module else None
    if isinstance(builtin, type) and issubclass(builtin, OSError):
        return CdcError(f"{name} in a Spark task on an executor: {message}; {then}")
    return e
