"""Appends that overlap with the producer's work: one batch at a time, finished in a thread.

The embedded log's commit is where SQLite writes the WAL and the topic then syncs it, with
the GIL released: the producer decodes the next transactions meanwhile. Only the part
Topic.stage() hands back runs in the thread: the rest holds the GIL, and in a
thread of its own it would wait for the GIL at every row (5 ms switch interval),
which made the producer slower, not faster.

The thread is started once and waits for the next commit: following a leader that commits
small transactions one by one, the producer appends after every few of them, and starting
a thread per append cost ~55 µs of CPU each time (bench/README.md, issue 26).

The same thread runs the topics' housekeeping (`idle`: the embedded log's WAL checkpoint) once no
append came for IDLE_AFTER, so that it falls between transactions instead of right after an append,
when readers work on what it brought (cdc_stream/topics/embedded.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Finish = Callable[[], None]
# Quiet time after an append before the housekeeping runs: longer than a consumer takes to read, make
# durable and apply a transaction of a steady load here (~7 ms after the ring at 20,000 rows/s), shorter
# than the gap between transactions at that rate (20 ms).
IDLE_AFTER = 0.01


class BackgroundAppends:
    """Runs appends in order, the durable part of each in a thread while the caller goes on.

    At most one append is in flight: submit() first waits for the previous one, so
    memory stays bounded by two batches. A failed append is raised by the next
    submit() or wait(), and by every one after it: no later batch is appended out of
    order, and the caller never takes the topic's tail for durable when it is not.
    """

    def __init__(self, idle: Finish | None = None, idle_after: float = IDLE_AFTER) -> None:
        self._cond = threading.Condition()
        self._work: Finish | None = None  # the commit handed to the thread, not finished yet
        self._idle, self._idle_after = idle, idle_after
        self._idle_due = False  # an append was submitted since the housekeeping last ran
        self._housekeeping = False  # the thread runs `idle`: submit() waits for it (one thread at a time)
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
        with self._cond:  # stage() uses the topic: no housekeeping from here until the batch is handed over
            self._idle_due = False
            while self._housekeeping:
                self._cond.wait()
        try:
            finish = stage()
        except BaseException as e:
            self._failure = e
            raise
        if finish is not None or self._idle is not None:
            with self._cond:
                if self._closed:
                    raise RuntimeError("BackgroundAppends.submit after close()")
                self._work, self._idle_due = finish, self._idle is not None
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
        """Wait for an append in flight (or the housekeeping) to end, without raising its failure: before
        closing the topic while another error is on its way out (a success path calls wait())."""
        if self._work is None and not self._housekeeping:
            return
        with self._cond:
            while self._work is not None or self._housekeeping:
                self._cond.wait()

    def close(self) -> None:
        """Let an append in flight end, then end the thread (its failure, if any, stays raised by wait())."""
        with self._cond:
            while self._work is not None or self._housekeeping:
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
                    if self._idle_due and self._failure is None:
                        # (submit() clears _idle_due before it stages: then the topic is not ours)
                        if not self._cond.wait(self._idle_after) and self._idle_due and self._work is None \
                                and not self._closed:
                            self._idle_due, self._housekeeping = False, True
                            break
                    else:
                        self._cond.wait()
                if self._work is None and not self._housekeeping:
                    return  # closed
                finish = self._idle if self._housekeeping else self._work
            try:
                if finish is not None:
                    finish()
            except BaseException as e:  # handed to the caller's thread, which reports it
                self._failure = e
            with self._cond:
                self._work, self._housekeeping = None, False
                self._cond.notify_all()
