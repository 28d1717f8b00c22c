"""What cdc-producer tells about itself: health, lag, connection, counts, snapshot progress, as metric samples.

run.py updates it per binlog event (one comparison) and per snapshot chunk; the counts of what was
published are the Publisher's own (`Publisher.stats`, counted per transaction). The metrics endpoint
(cdc_stream/metrics.py) reads `samples()` when scraped; docs/metrics.md explains each metric.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdc_producer.publish import Publisher
from cdc_stream.events import OPERATIONS, Operation
from cdc_stream.telemetry import Health, Sample, SourceLag

if TYPE_CHECKING:  # snapshot.py is imported only when a snapshot runs (run._snapshot)
    from cdc_producer.snapshot import Progress, TableInfo

# The `kind` label of an event (docs/events.md names the operations).
KIND: dict[Operation, str] = {"Add": "insert", "Update": "update", "Delete": "delete", "Query": "ddl"}
_P = "mysql_cdc_producer_"


class ProducerTelemetry:
    """The producer's state for /metrics and /healthz."""

    def __init__(self) -> None:
        self.health = Health("not started yet: checking the leader")
        self.lag = SourceLag()
        self.connected = False  # the binlog connection is up
        self.reconnects = 0
        self.publisher: Publisher | None = None
        self.snapshot_rows: dict[str, int] = {}  # table -> rows copied
        self.snapshot_estimates: dict[str, int] = {}  # tables not copied yet -> estimated rows
        self._commits = 0
        self._heartbeats = 0

    # -- from run.py ----------------------------------------------------------------------

    def following(self, publisher: Publisher, detail: str) -> None:
        """The binlog connection is up and events flow to `publisher`."""
        self.publisher, self.connected = publisher, True
        self._commits = publisher.stats.transactions + publisher.stats.skipped_transactions
        self._heartbeats = publisher.stats.heartbeats
        self.health.running(detail)

    def lost(self, detail: str) -> None:
        """The binlog connection dropped, or a new one failed; reconnecting."""
        if self.connected:
            self.reconnects += 1
        self.connected = False
        self.health.reconnecting(detail)

    def binlog_event(self, timestamp: int) -> None:
        """After each binlog event was dispatched: if it committed a transaction (published or
        filtered out), its timestamp is that commit's; a heartbeat means caught up."""
        stats = self.publisher.stats if self.publisher is not None else None
        if stats is None:
            return
        commits = stats.transactions + stats.skipped_transactions
        if commits != self._commits:
            self._commits = commits
            if timestamp:
                self.lag.at(timestamp)
        elif stats.heartbeats != self._heartbeats:
            self._heartbeats = stats.heartbeats
            self.lag.caught_up()

    def snapshot(self, publisher: Publisher, tables: list[TableInfo], progress: Progress) -> Progress:
        """A snapshot of `tables` begins: returns `progress` counting the copied rows here too."""
        self.publisher = publisher
        self.snapshot_rows.update(dict.fromkeys((t.full_name for t in tables), 0))
        self.snapshot_estimates = {t.full_name: t.estimated_rows for t in tables}
        self.health.running(f"copying a snapshot of {len(tables)} tables")
        return _CountedProgress(self, progress)

    def snapshot_done(self) -> None:
        """The snapshot is complete (tables a resumed snapshot had copied before are done too)."""
        self.snapshot_estimates = {}

    # -- for the endpoint ----------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """The producer's metrics now."""
        stats = self.publisher.stats if self.publisher is not None else None
        kinds = dict(stats.events_by_kind) if stats is not None else dict.fromkeys(OPERATIONS, 0)
        out = [Sample(_P + "events_total", "counter", "Change events published, by kind (one per row batch or DDL).",
                      kinds[op], {"kind": KIND[op]}) for op in OPERATIONS]
        out += [
            Sample(_P + "rows_total", "counter", "Row changes published (an update counts once).",
                   stats.rows if stats else 0),
            Sample(_P + "transactions_total", "counter", "Source transactions published.",
                   stats.transactions if stats else 0),
            Sample(_P + "skipped_transactions_total", "counter",
                   "Source transactions with nothing to publish (all filtered out).",
                   stats.skipped_transactions if stats else 0),
            Sample(_P + "connected", "gauge", "1 while the binlog connection to the leader is up.",
                   1 if self.connected else 0),
            Sample(_P + "reconnects_total", "counter", "Times the binlog connection to the leader was lost.",
                   self.reconnects),
        ]
        lag = self.lag.seconds()
        if lag is not None:
            out.append(Sample(_P + "source_lag_seconds", "gauge",
                              "Now minus the commit timestamp of the last transaction read from the binlog; "
                              "0 when caught up (the leader's heartbeat).", lag))
        copied, estimates = dict(self.snapshot_rows), dict(self.snapshot_estimates)
        copy = self.publisher.copy if self.publisher is not None else None
        etas: list[Sample] = []
        if copy is not None:  # live copies (the watermark method): rows copied and left, by table
            for table, rows in copy.copied_rows.items():
                copied[table] = copied.get(table, 0) + rows
            etas += [Sample(_P + "snapshot_chunk_rereads_total", "counter",
                            "Chunks of live copies read again: the binlog reader was past the chunk's snapshot "
                            "(snapshot), or a copy with a condition saw its range change (condition).",
                            n, {"reason": reason}) for reason, n in (("snapshot", copy.behind),
                                                                       ("condition", copy.rereads))]
            for c in copy.report():
                copied.setdefault(c.table, 0)
                estimates[c.table] = copied[c.table] + max(0, (c.estimated_rows or 0) - (c.rows or 0))
                if c.eta_seconds is not None:
                    etas.append(Sample(_P + "snapshot_eta_seconds", "gauge",
                                       "Seconds a live copy of the table still needs, at its rate so far.",
                                       c.eta_seconds, {"table": c.table}))
        out += [Sample(_P + "snapshot_rows_total", "counter", "Rows copied by the snapshot, by table.", rows,
                       {"table": table}) for table, rows in copied.items()]
        out.append(Sample(_P + "snapshot_remaining_tables", "gauge", "Tables the running snapshot has still to copy.",
                          len(estimates)))
        out.append(Sample(_P + "snapshot_remaining_rows", "gauge",
                          "Rows the running snapshot has still to copy (from the leader's row estimates).",
                          sum(max(0, est - copied.get(t, 0)) for t, est in estimates.items())))
        out += etas
        if self.publisher is not None:
            p = self.publisher.position
            out.append(Sample(_P + "position_info", "info", "Where the binlog continues after the last transaction "
                              "read: GTID state or set, or binlog file and position.", 1,
                              {"gtid": p.gtid_set or "", "file": p.binlog.file_name if p.binlog else "",
                               "pos": str(p.binlog.offset or "") if p.binlog else ""}))
        return out


class _CountedProgress:
    """A snapshot's progress display that also counts the rows per table for the metrics."""

    def __init__(self, telemetry: ProducerTelemetry, display: Progress):
        self.telemetry, self.display = telemetry, display
        self._tables: dict[Any, str] = {}

    def start(self, table: TableInfo) -> Any:
        task = self.display.start(table)
        self._tables[task] = table.full_name
        return task

    def advance(self, task: Any, rows: int) -> None:
        name = self._tables[task]
        self.telemetry.snapshot_rows[name] = self.telemetry.snapshot_rows.get(name, 0) + rows
        self.display.advance(task, rows)

    def finish(self, task: Any) -> None:
        self.telemetry.snapshot_estimates.pop(self._tables[task], None)
        self.display.finish(task)
