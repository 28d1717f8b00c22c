"""Appends that overlap with the producer's work: one batch at a time, finished in a thread.

The embedded log's commit is where SQLite writes the WAL and the topic then syncs it, with
the GIL released: the producer decodes the next transactions meanwhile. Only the part
Topic.stage() hands back runs in the thread: the rest holds the GIL, and in a
thread of its own it would wait for the GIL at every row (5 ms switch interval),
which made the producer slower, not faster.

The thread is started once and waits for the next commit: following a leader that commits
small transactions one by one, the producer appends after every few of them, and starting
a thread per append cost ~55 µs of CPU each time (bench/README.md, issue 26).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Finish = Callable[[], None]


class BackgroundAppends:
    """Runs appends in order, the durable part of each in a thread while the caller goes on.

    At most one append is in flight: submit() first waits for the previous one, so
    memory stays bounded by two batches. A failed append is raised by the next
    submit() or wait(), and by every one after it: no later batch is appended out of
    order, and the caller never takes the topic's tail for durable when it is not.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._work: Finish | None = None  # the commit handed to the thread, not finished yet
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None  # started at the first commit handed over
        self._closed = False

    @property
    def pending(self) -> bool:
        """Whether an append may not be durable yet (in flight, or it failed)."""
        return self._work is not None or self._failure is not None

    def submit(self, stage: Callable[[], Finish | None]) -> None:
        """Once the previous append is durable, run `stage` (a LogWriter.stage: hands a batch to the
        topic and returns what makes it durable, or None), then finish it in the thread; returns
        without waiting for it."""
        self.wait()
        try:
            finish = stage()
        except BaseException as e:
            self._failure = e
            raise
        if finish is not None:
            with self._cond:
                if self._closed:
                    raise RuntimeError("BackgroundAppends.submit after close()")
                self._work = finish
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="topic-append", daemon=True)
                    self._thread.start()
                self._cond.notify_all()

    def wait(self) -> None:
        """Block until every submitted append is durable; raises the failure of an append."""
        self.settle()
        if self._failure is not None:
            raise self._failure

    def settle(self) -> None:
        """Wait for an append in flight to end, without raising its failure: before closing
        the topic while another error is on its way out (a success path calls wait())."""
        if self._work is None:
            return
        with self._cond:
            while self._work is not None:
                self._cond.wait()

    def close(self) -> None:
        """Let an append in flight end, then end the thread (its failure, if any, stays raised by wait())."""
        with self._cond:
            while self._work is not None:
                self._cond.wait()
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._work is None and not self._closed:
                    self._cond.wait()
                if self._work is None:
                    return  # closed
                finish = self._work
            try:
                finish()
            except BaseException as e:  # handed to the caller's thread, which reports it
                self._failure = e
            with self._cond:
                self._work = None
                self._cond.notify_all()
