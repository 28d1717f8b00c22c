"""Terminal output shared by the three CLIs: status on stderr, errors as one line."""

from __future__ import annotations

import sys
import traceback
from typing import Callable, TypeVar

import pymysql
from rich.console import Console

from cdc_stream.errors import CdcError
from cdc_stream.topics.base import TopicError, TopicNotFound

# Status and errors go to stderr so stdout stays clean for data (cdc-topic consume).
err = Console(stderr=True, highlight=False, soft_wrap=True)
T = TypeVar("T")


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
