"""The garbage collector's settings in both programs.

Both decode many small objects (rows, their values) that live until their transaction is appended
(producer) or committed on the follower (consumer, up to 20,000 rows a follower transaction). With
Python's default thresholds the collector ran every 700 allocations, and its passes over those
surviving rows and over the start-up objects (modules, PyMySQL, msgspec's types: most of the heap)
were a large part of each program's time: the producer's (bench/README.md, "Measurements behind the
code") and a third of the SQL path's (decode, SQL, batching: 0.63 -> 0.47 s for the bench topic's
120,000 rows; bench/README.md, issue 26, eighth part). A full pass over the start-up objects is
also a pause of milliseconds in the middle of one transaction's replay.

So the programs load with the collector off (`quiet_start`), then freeze the start-up objects out
of collection without a collection first (a few hundred unreachable start-up objects are kept for
good) and collect real garbage cycles in larger steps (`streaming`).
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 20, 100)  # Python's default: (700, 10, 10)


def quiet_start() -> None:
    """No collections during start-up (the modules a program imports late, the profile's check,
    connecting): the start-up objects are not garbage. Called by a console script's entry point,
    not at import (importing a program's module from a test or a tool leaves the collector alone);
    a short run (--check, a failed start) ends with it off."""
    gc.disable()


def streaming() -> None:
    """Once a program has started (before it snapshots, streams or waits): freeze what start-up made
    and collect with THRESHOLDS."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    gc.enable()
