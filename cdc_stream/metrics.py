"""The metrics endpoint: Prometheus text at /metrics and the program's health at /healthz.

The only module that uses prometheus_client (imported only when `[metrics] listen` or
`--metrics-listen` turns the endpoint on). It owns the registry: the program's own metrics
(its `Telemetry.samples()`, read when Prometheus scrapes, so nothing is updated on the hot paths
beyond the plain counters the programs keep anyway), `mysql_cdc_build_info` and the standard
process, platform and garbage-collector metrics. The HTTP server runs in daemon threads and
never writes to stderr (which carries the program's status lines).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from cdc_stream.errors import ConfigError
from cdc_stream.telemetry import Sample, Telemetry

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def build_version() -> str:
    """The installed mysql-cdc version ("unknown" when run from a source tree without metadata)."""
    try:
        return version("mysql-cdc")
    except PackageNotFoundError:
        return "unknown"


def families(samples: Iterable[Sample]) -> list[Metric]:
    """Samples grouped into Prometheus metric families (one per name, in first-seen order)."""
    grouped: dict[str, tuple[Sample, list[Sample]]] = {}
    for s in samples:
        grouped.setdefault(s.name, (s, []))[1].append(s)
    out: list[Metric] = []
    for name, (first, members) in grouped.items():
        labels = list(first.labels)
        family: Metric
        if first.type == "counter":
            counter = CounterMetricFamily(name, first.help, labels=labels)
            for s in members:
                counter.add_metric([s.labels[k] for k in labels], s.value)
            family = counter
        elif first.type == "gauge":
            gauge = GaugeMetricFamily(name, first.help, labels=labels)
            for s in members:
                gauge.add_metric([s.labels[k] for k in labels], s.value)
            family = gauge
        else:
            info = InfoMetricFamily(name.removesuffix("_info"), first.help)
            for s in members:
                info.add_metric([], s.labels)
            family = info
        out.append(family)
    return out


class ProgramCollector:
    """A prometheus_client collector over a program's Telemetry (read at each scrape)."""

    def __init__(self, telemetry: Telemetry, build: str):
        self.telemetry, self.build = telemetry, build

    def collect(self) -> Iterator[Metric]:
        build = Sample("mysql_cdc_build_info", "info", "The mysql-cdc version running.", 1, {"version": self.build})
        yield from families([build, *self.telemetry.samples()])


def registry_for(telemetry: Telemetry) -> CollectorRegistry:
    """A registry with the program's metrics, build info and the standard process metrics."""
    registry = CollectorRegistry()
    registry.register(ProgramCollector(telemetry, build_version()))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
    PlatformCollector(registry=registry)  # python_info
    GCCollector(registry=registry)  # python_gc_*
    return registry


def wsgi_app(telemetry: Telemetry, registry: CollectorRegistry) -> Callable[[dict[str, Any], StartResponse],
                                                                             list[bytes]]:
    """/metrics (prometheus_client's exposition: text or OpenMetrics, gzip) and /healthz."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return list(metrics(environ, start_response))
        if path == "/healthz":
            state = telemetry.health.state
            start_response("200 OK" if state.ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [state.line().encode() + b"\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds up the program's exit


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: stderr carries the program's status lines."""


class Endpoint:
    """The running HTTP server; `url` is where /metrics is served."""

    def __init__(self, server: WSGIServer, thread: threading.Thread):
        self.server, self.thread = server, thread
        host, port = server.server_address[:2]
        self.host, self.port = str(host), int(port)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def serve(host: str, port: int, telemetry: Telemetry) -> Endpoint:
    """Serve /metrics and /healthz on host:port from a daemon thread; ConfigError if it cannot listen there."""
    app = wsgi_app(telemetry, registry_for(telemetry))
    server_class = _IPv6Server if ":" in host else _Server
    try:
        server = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    except OSError as e:
        raise ConfigError(
            f"cannot serve metrics on {host}:{port}: {e.strerror or e}; "
            "choose another [metrics] listen (or --metrics-listen) HOST:PORT"
        ) from None
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return Endpoint(server, thread)
