"""The producer's row decoding alone (rows -> JSON, cdc_producer/rowcode.py), this checkout's against an earlier one's.

    python bench/rows_json.py --before DIR [--rows 100000] [--rounds 20]

Starts one local MariaDB leader, writes the standard workload (load.py) and reads its row events
back once with python-mysql-replication (table maps and row images, as the producer gets them). Then
the generated code of both versions (rowcode.py of this checkout and of DIR, `git archive REV
cdc_producer | tar -x -C DIR`) decodes every event, in one process and alternating rounds, so both
see the same machine; it checks they write the same JSON, byte for byte, and prints each side's best
and median CPU seconds and the load average. On a 2-core machine shared with other work this is the
figure that still shows a few per cent: a whole producer run moves by up to a third between rounds.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import rig
from decode_loop import row_events
from load import SCHEMA, standard_workload
from pymysqlreplication.row_event import UpdateRowsEvent

from cdc_producer import rowcode
from cdc_producer.columns import column_codec
from cdc_producer.library_patches import row_image_bytes

Work = list[tuple[Callable[[bytes, int, int], tuple[list[bytes], int]], bytes]]


def record(port: int, start: str, end: str) -> list[tuple[Any, bool, bytes]]:
    """(table map, is an update, row images) of every row event after `start` up to `end`'s commit."""
    return [(ev.table_map[ev.table_id], isinstance(ev, UpdateRowsEvent), row_image_bytes(ev))
            for ev in row_events(port, start, end, server_id=5403)]


def load_rowcode(tree: Path) -> ModuleType:
    """rowcode.py of an earlier tree, as a module of its own (it imports this checkout's unpack.py and values.py)."""
    spec = importlib.util.spec_from_file_location("rowcode_before", tree / "cdc_producer" / "rowcode.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no cdc_producer/rowcode.py in {tree}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def compiled(module: ModuleType, events: list[tuple[Any, bool, bytes]]) -> Work:
    """Each event with the function `module` generates for its table map (rows, or pairs for an update)."""
    functions: dict[int, tuple[Any, Any]] = {}
    for table, _, _ in events:
        if id(table) not in functions:
            codecs = [column_codec(c, f"{table.schema}.{table.table}") for c in table.columns]
            functions[id(table)] = module.compile_rows_json([c.spec for c in codecs], tuple(c.reader for c in codecs))
    return [(functions[id(table)][update], data) for table, update, data in events]


def digest(work: Work) -> str:
    h = hashlib.sha256()
    for decode, data in work:
        for row in decode(data, 0, len(data))[0]:
            h.update(row)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="a tree with the earlier cdc_producer/rowcode.py")
    ap.add_argument("--rows", type=int, default=100_000, help="inserts of the standard workload (default 100,000)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of each side, alternating (default 20)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mysql-cdc-rows-json-"))
    (leader,) = rig.start_servers(base, ["leader"])
    try:
        leader.execute(*SCHEMA)
        start = leader.gtid()
        counts = standard_workload(leader.port, args.rows)
        events = record(leader.port, start, leader.gtid())
    finally:
        rig.stop_servers([leader])
        shutil.rmtree(base, ignore_errors=True)
    sides = {"before": compiled(load_rowcode(args.before.resolve()), events), "ours": compiled(rowcode, events)}
    digests = {name: digest(work) for name, work in sides.items()}
    if len(set(digests.values())) != 1:
        print(f"the two versions write different JSON: {digests}")
        return 1
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name in ("before", "ours") if r % 2 == 0 else ("ours", "before"):
            t0 = time.process_time()
            for decode, data in sides[name]:
                decode(data, 0, len(data))
            seconds[name].append(time.process_time() - t0)
    best = {name: min(s) for name, s in seconds.items()}
    median = {name: sorted(s)[len(s) // 2] for name, s in seconds.items()}
    print(f"{counts.total:,} row changes in {len(events):,} row events; the same JSON from both (sha256 "
          f"{digests['ours'][:16]}); {args.rounds} rounds each, alternating; load average {rig.load_average()}")
    for name in sides:
        print(f"{name:>6}: best {best[name] * 1000:.1f} ms, median {median[name] * 1000:.1f} ms CPU "
              f"({counts.total / best[name]:,.0f} rows/s at best)")
    print(f"ours / before: best {best['ours'] / best['before']:.3f}, median {median['ours'] / median['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
