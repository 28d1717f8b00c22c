"""Clean stops on SIGINT/SIGTERM without tearing a transaction in half.

The handler only sets a flag, except while the program is parked in a blocking
read (binlog socket, topic wait): there nothing is half-done, so it interrupts.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Shutdown(Exception):
    """Raised out of a blocking read when a stop was requested."""


class StopSignal:
    """Set by SIGINT/SIGTERM; checked by the main loops between units of work."""

    def __init__(self) -> None:
        self.requested = False
        self._interruptible = False

    def install(self) -> StopSignal:
        """Route SIGINT and SIGTERM here (main thread only)."""
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self._interruptible:
            self._interruptible = False
            raise Shutdown()

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Mark a blocking read that may be abandoned on a stop request."""
        if self.requested:
            raise Shutdown()
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False
