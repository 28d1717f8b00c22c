"""The progress of live copies: what the status line, the metrics and `--status` show of them.

A running producer writes its copies' progress to `<base_path>/copies-<topic>.json` once a second
while it copies (rows copied, estimate, ETA); `--status` shows it beside the cursors the topic's tail
carries (`copying`), which are the truth a restart continues from.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec

STALE_AFTER = 30.0  # seconds: an older progress file is from a producer that stopped


class CopyProgress(msgspec.Struct, kw_only=True):
    """One copy in progress."""

    table: str
    copy: str
    after: list[Any] | None  # the last key on the topic (None: no chunk yet)
    rows: int | None = None  # rows this producer process copied (None: unknown)
    estimated_rows: int | None = None  # the leader's estimate of the table's rows
    eta_seconds: float | None = None
    paused: bool = False
    recopy: bool = False


class _Saved(msgspec.Struct):
    written_at: float
    copies: list[CopyProgress]


def copies_path(base_path: str, topic: str) -> Path:
    """Where a running producer keeps its copies' progress."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in topic)
    return Path(base_path) / f"copies-{safe}.json"


def save(path: Path, copies: list[CopyProgress]) -> None:
    """Write the progress (whole or not at all)."""
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_bytes(msgspec.json.encode(_Saved(time.time(), copies)))
        tmp.replace(path)
    except OSError:
        pass  # progress for --status only: a full disk shows elsewhere


def load(path: Path) -> list[CopyProgress]:
    """The progress a running producer wrote lately ([] when none, or too old)."""
    try:
        saved = msgspec.json.decode(path.read_bytes(), type=_Saved)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return []
    return saved.copies if time.time() - saved.written_at < STALE_AFTER else []


def describe_copies(copies: list[CopyProgress]) -> str:
    """`db.t 4000 of ~100000 rows, ETA 12s; db.u (waiting)` for the status lines."""
    parts = []
    for c in copies:
        if c.rows is None and c.after is None:
            parts.append(f"{c.table} (waiting)")
            continue
        text = f"{c.table} {c.rows if c.rows is not None else '?'}"
        if c.estimated_rows:
            text += f" of ~{c.estimated_rows}"
        text += " rows"
        if c.after is not None:
            text += f", up to key {', '.join(map(str, c.after))}"
        if c.eta_seconds is not None:
            text += f", ETA {c.eta_seconds:.0f}s"
        if c.paused:
            text += ", paused"
        parts.append(text)
    return "; ".join(parts)
