"""Pytest fixtures that run tests/fluvio_server.py (a wire-compatible Fluvio SC + SPU) in a subprocess.

tests/conftest.py imports the fixtures from here.

The server must be another process: the `fluvio` client holds the GIL while some calls block.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER_SCRIPT = Path(__file__).with_name("fluvio_server.py")


class FluvioServerProcess:
    """One running test server; `endpoint` is the SC address to give FluvioStream(endpoint=...)."""

    def __init__(self, data_dir: str | None = None, start_timeout: float = 15.0) -> None:
        args = [sys.executable, str(SERVER_SCRIPT), "--host", "127.0.0.1"]
        if data_dir:
            args += ["--data-dir", data_dir]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        stdout = self.process.stdout
        deadline = time.monotonic() + start_timeout
        line = ""
        while not line.startswith("fluvio-test-server "):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"fluvio test server did not start within {start_timeout} s "
                                   f"(exit code {self.process.returncode}, last line {line!r})")
            if select.select([stdout], [], [], remaining)[0]:
                line = stdout.readline()
        fields = dict(part.split("=", 1) for part in line.split()[1:])
        self.endpoint, self.spu = fields["sc"], fields["spu"]

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 5 s. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()

    def __enter__(self) -> FluvioServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def fluvio_endpoint() -> Iterator[str]:
    """SC endpoint "127.0.0.1:PORT" of a Fluvio test server shared by the whole session (in memory)."""
    server = FluvioServerProcess()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:  # includes the accept timeout
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()
