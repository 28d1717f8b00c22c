"""spark/lake.py killed in one of the lake's crash windows: `$CDC_LAKE_CRASH` names it ("plan" or "merge").

Run instead of spark/lake.py (by python or spark-submit, same arguments) by test_spark_lake and
test_spark_cluster: the job's Lake gets an `at_window` that sends SIGKILL to the job's whole process
group (driver, JVM, Python workers) at that window. The variable is read here, in the tests' own entry
point, so the product never looks for it. (An environment variable rather than an argument: spark-submit
may start this script again with --jars added, with the same arguments and environment.)"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

CRASH_ENV = "CDC_LAKE_CRASH"


def kill_at(window: str):
    """The Lake.at_window that kills the process group at `window`."""

    def at_window(name: str) -> None:
        if name == window:
            os.killpg(os.getpgid(0), signal.SIGKILL)

    return at_window


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    import lake as job  # spark/lake.py

    sys.exit(job.main(at_window=kill_at(os.environ[CRASH_ENV])))
