"""Wake-ups between the processes of one embedded stream: a writer rings after each commit, and a
reader waiting for records returns at once instead of at its next poll.

A reader sees other processes' commits by polling SQLite's data_version. Following a leader that
commits 50 transactions a second, the consumer waited 0.8 ms of its 6 ms median lag for its next
poll, and its 1,000 polls a second were most of its CPU (bench/README.md, issue 26, sixth part).

On Linux the bell is a file of one byte beside stream.db: a writer writes that byte again after each
commit, and readers watch the file with inotify (IN_MODIFY), which reaches every reader of every
process with no registration. The bell only speeds readers up: a reader without it (another system,
the per-user inotify limit reached, a read-only bell) polls as before, and one that hears it still
polls, slower, for writers that do not ring (an older version, or a write made by hand).

inotify is called through ctypes on the process's own libc: inotify_simple would add 11-16 ms of
imports and a `find_library` subprocess to each program's start for these two calls.
"""

from __future__ import annotations

import os
import select
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

BELL_FILE = "stream.db-bell"
_IN_MODIFY = 0x2
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
# inotify instances a process opens at most (a reader each; more poll): the per-user limit
# (fs.inotify.max_user_instances, 128 by default) is shared with every other program of the user.
MAX_LISTENERS = 8
_open_listeners = 0


class Bell:
    """A writer's side: ring() after each commit. Best effort: a bell that cannot be written is
    given up for good (the readers poll), never an error of the append."""

    def __init__(self, directory: Path):
        self.path = directory / BELL_FILE
        self._fd: int | None = None
        self._broken = False

    def ring(self) -> None:
        """Wake the readers waiting on this stream (after a commit has become visible)."""
        if self._broken:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            os.pwrite(self._fd, b"\0", 0)
        except OSError:
            self._broken = True
            self.close()

    def close(self) -> None:
        """Close the bell's file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Listener:
    """A reader's side: wait(timeout) returns early when a writer rings."""

    def __init__(self, fd: int):
        global _open_listeners
        _open_listeners += 1
        self._fd = fd
        self._poll = select.poll()  # (not select(): a descriptor above 1023 would raise there)
        self._poll.register(fd, select.POLLIN)
        # released by close(), or when the listener is dropped unclosed (its topic never closed)
        self._release = weakref.finalize(self, _release, fd)

    @classmethod
    def open(cls, directory: Path) -> Listener | None:
        """A listener on the stream's bell, or None where there can be none (not Linux, no inotify
        instance left for this user, a bell that cannot be created): the caller polls."""
        if _open_listeners >= MAX_LISTENERS or not hasattr(os, "pwrite") or os.uname().sysname != "Linux":
            return None
        path = directory / BELL_FILE
        try:
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            libc = _libc()
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(path), _IN_MODIFY) < 0:
                os.close(fd)
                return None
        except (OSError, AttributeError):  # AttributeError: a libc without inotify
            return None
        return cls(fd)

    def wait(self, timeout: float) -> bool:
        """Sleep until the bell rings or `timeout` seconds pass; whether it rang (since the last wait,
        perhaps before this call: a ring is never missed between two waits)."""
        if self._drain():
            return True  # rung before this call
        return bool(self._poll.poll(max(timeout, 0.0) * 1000)) and self._drain()

    def _drain(self) -> bool:
        """Read the queued events (without blocking); whether there were any."""
        rang = False
        while True:
            try:
                if not os.read(self._fd, 4096):
                    return rang
            except BlockingIOError:
                return rang
            rang = True

    def close(self) -> None:
        """Stop listening."""
        self._release()


def _release(fd: int) -> None:
    global _open_listeners
    os.close(fd)
    _open_listeners -= 1


def _libc() -> ctypes.CDLL:
    # (ctypes only here, and only when a reader first waits: ~4 ms to import)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc
