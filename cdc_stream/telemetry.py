"""What a running program tells about itself: its health, its lag behind the source, and metric samples.

Plain typed state, updated by the programs' run loops per batch or per transaction (never per row)
and read by the metrics endpoint (cdc_stream/metrics.py) from its own thread when it is scraped.
Nothing here imports prometheus_client: that costs every start, and the endpoint is off by default.
Each program describes its own metrics as `Sample`s (cdc_producer/telemetry.py,
cdc_consumer/telemetry.py); metrics.py turns them into the Prometheus exposition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec

from cdc_stream.errors import ConfigError

if TYPE_CHECKING:
    from cdc_stream.metrics import Endpoint
    from cdc_stream.profile import Stream as StreamSettings

MetricType = Literal["counter", "gauge", "info"]


class Phase(Enum):
    """Where a program stands, as /healthz reports it."""

    STARTING = "starting"
    RUNNING = "running"
    RECONNECTING = "reconnecting"
    STOPPED = "stopped"


@dataclass(frozen=True)
class HealthState:
    """One reading of a program's health: its phase and a one-line reason."""

    phase: Phase
    detail: str

    @property
    def ok(self) -> bool:
        """Healthy: following the binlog, copying a snapshot, or applying the topic."""
        return self.phase is Phase.RUNNING

    def line(self) -> str:
        """The one line /healthz answers with."""
        detail = " ".join(self.detail.split())  # one line, whatever the message
        return f"{'ok' if self.ok else self.phase.value}: {detail}"


class Health:
    """The program's current HealthState; replaced whole, so the endpoint's thread never reads half of it."""

    def __init__(self, detail: str = "not started yet") -> None:
        self.state = HealthState(Phase.STARTING, detail)

    def starting(self, detail: str) -> None:
        """Not working yet (connecting, checking)."""
        self.state = HealthState(Phase.STARTING, detail)

    def running(self, detail: str) -> None:
        """Working: following, copying or applying."""
        self.state = HealthState(Phase.RUNNING, detail)

    def reconnecting(self, detail: str) -> None:
        """Lost a server or the stream; trying again."""
        self.state = HealthState(Phase.RECONNECTING, detail)

    def stopped(self, detail: str) -> None:
        """Stopped and will not go on by itself (a record it cannot apply, or shutting down)."""
        self.state = HealthState(Phase.STOPPED, detail)


@dataclass
class SourceLag:
    """Seconds between now and the source timestamp of the last change handled; 0 once caught up.

    `at(ts)` when a change (or a transaction's commit) is handled, with its source timestamp;
    `caught_up()` when there is nothing more to read right now (the leader's heartbeat, an
    empty read of the topic). Reading it in between gives now - ts, so a program that stops
    moving shows a growing lag. Before either call it is unknown (None)."""

    _source_ts: float | None = None  # seconds since the epoch
    _caught_up: bool = False

    def at(self, source_ts: float) -> None:
        """A change whose source timestamp is `source_ts` (seconds) was handled."""
        self._source_ts, self._caught_up = source_ts, False

    def caught_up(self) -> None:
        """Nothing more to read right now: the lag is 0."""
        self._caught_up = True

    def seconds(self, now: float | None = None) -> float | None:
        """The lag now (None when nothing was handled yet and the program is not caught up)."""
        if self._caught_up:
            return 0.0
        if self._source_ts is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self._source_ts)


@dataclass(frozen=True)
class Sample:
    """One metric value: a counter, a gauge, or an info metric (value 1, the facts in its labels)."""

    name: str  # the full Prometheus name (counters end in _total, info metrics in _info)
    type: MetricType
    help: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


class Telemetry(Protocol):
    """What the metrics endpoint reads from a program."""

    @property
    def health(self) -> Health:
        """The program's health, for /healthz."""

    def samples(self) -> list[Sample]:
        """The program's metrics now (the endpoint adds build info and process metrics)."""


def serve_metrics(listen: str | None, telemetry: Telemetry) -> Endpoint | None:
    """Start the metrics endpoint on `listen` ("HOST:PORT"; None: off) and say where; ConfigError
    when the address is not HOST:PORT or cannot be listened on."""
    if listen is None:
        return None
    from cdc_stream.profile import parse_listen

    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise ConfigError(f"--metrics-listen: {e}") from None
    from cdc_stream import metrics  # prometheus_client: imported only when the endpoint is on
    from cdc_stream.console import err

    endpoint = metrics.serve(host, port, telemetry)
    err.info("serving metrics at {url} (health at /healthz)", url=endpoint.url)
    return endpoint


# -- what `--status` shows of both programs ---------------------------------------------------------


class Reachable(msgspec.Struct, kw_only=True):
    """A server or the stream: where it is, and whether it answered (`error` says why not)."""

    address: str
    reachable: bool
    error: str | None = None


def stream_place(settings: StreamSettings) -> str:
    """Where a profile's [stream] is, before it is opened (a Fluvio endpoint or profile, or a path)."""
    if settings.backend == "fluvio":
        return f"fluvio {settings.fluvio_endpoint or settings.fluvio_profile or '(default profile)'}"
    return f"embedded stream {settings.path}"
