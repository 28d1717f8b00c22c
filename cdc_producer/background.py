"""Appends that overlap with the producer's work: one batch at a time, finished in a thread.

The embedded log's commit is where SQLite writes and fsyncs the WAL, with the GIL
released: the producer decodes the next transactions meanwhile. Only the part
Topic.stage() hands back runs in the thread: the rest holds the GIL, and in a
thread of its own it would wait for the GIL at every row (5 ms switch interval),
which made the producer slower, not faster.
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
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    @property
    def pending(self) -> bool:
        """Whether an append may not be durable yet (in flight, or it failed)."""
        return self._thread is not None or self._failure is not None

    def submit(self, stage: Callable[[], Finish | None]) -> None:
        """Once the previous append is durable, run `stage` (a LogWriter.stage: hands a batch to the
        topic and returns what makes it durable, or None), then finish it in a thread; returns
        without waiting for it."""
        self.wait()
        try:
            finish = stage()
        except BaseException as e:
            self._failure = e
            raise
        if finish is not None:
            self._thread = threading.Thread(target=self._finish, args=(finish,), name="topic-append", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        """Block until every submitted append is durable; raises the failure of an append."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failure is not None:
            raise self._failure

    def settle(self) -> None:
        """Wait for an append in flight to end, without raising its failure: before closing
        the topic while another error is on its way out (a success path calls wait())."""
        if self._thread is not None:
            self._thread.join()

    def _finish(self, finish: Finish) -> None:
        try:
            finish()
        except BaseException as e:  # handed to the caller's thread, which reports it
            self._failure = e
