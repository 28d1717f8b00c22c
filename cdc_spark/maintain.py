"""Lake maintenance beside the job: compact small files, vacuum what no version needs.

    python spark/maintain.py --lake DIR [--retain-hours 168]

For every state and change-log table: `optimize.compact()` (delta-rs; bin-packing within each
`_cdc_bucket` partition, so a bucket stays one group of files), then `vacuum` (files removed
more than --retain-hours ago, and files a killed batch wrote but never committed), then a
checkpoint of the Delta log. It holds the lake's lock (the same file lock the job holds for a
batch's writes and commits), so it runs between the job's batches, never inside one; its
commits are foreign commits to the job, which finds its own progress through Delta's
application transactions and its column types in its own latest commit, whatever came after.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from cdc_spark.lake import Lake
from cdc_stream.console import describe_error
from cdc_stream.errors import ConfigError

DEFAULT_RETAIN_HOURS = 168  # Delta's default: readers of versions a week old still find their files


@dataclass(frozen=True)
class Maintained:
    """What maintenance did to one Delta table."""

    path: str
    compacted: int  # files removed by compaction
    added: int  # files it wrote
    vacuumed: int  # files deleted


def maintain_table(path: Path, retain_hours: int) -> Maintained:
    """Compact, vacuum and checkpoint one Delta table."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    metrics = table.optimize.compact()
    table = DeltaTable(str(path))
    deleted = table.vacuum(retention_hours=retain_hours, dry_run=False, enforce_retention_duration=False, full=True)
    DeltaTable(str(path)).create_checkpoint()
    return Maintained(str(path), int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0)),
                      len(deleted))


def maintain(root: Path, retain_hours: int = DEFAULT_RETAIN_HOURS) -> list[Maintained]:
    """Every table of the lake, under the lake's lock."""
    from deltalake import DeltaTable

    lake = Lake(root, lambda db, t: None)
    done = []
    with lake.locked():
        for t in lake.tracked():
            for path in (t.state_path, t.changelog_path):
                if DeltaTable.is_deltatable(str(path)):
                    done.append(maintain_table(path, retain_hours))
    return done


def main(argv: list[str] | None = None) -> int:
    """The command line: one line per table, `error: ...` on failure."""
    p = argparse.ArgumentParser(prog="maintain.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--lake", required=True, type=Path, help="the lake job's --lake directory")
    p.add_argument("--retain-hours", type=int, default=DEFAULT_RETAIN_HOURS,
                   help=f"keep files removed less than this many hours ago (default {DEFAULT_RETAIN_HOURS})")
    args = p.parse_args(argv)
    try:
        if not (args.lake / "state").is_dir():
            raise ConfigError(f"--lake {args.lake}: no lake there (no state/ directory); give the lake job's --lake")
        if args.retain_hours < 0:
            raise ConfigError("--retain-hours must be 0 or more")
        for m in maintain(args.lake.resolve(), args.retain_hours):
            name = str(Path(m.path).relative_to(args.lake.resolve()))
            print(f"{name}: compacted {m.compacted} files into {m.added}, vacuumed {m.vacuumed} files", flush=True)
    except Exception as e:
        message, code = describe_error(e)
        print(f"error: {message}", file=sys.stderr)
        return code
    return 0
