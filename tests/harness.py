"""Test harness: real MariaDB servers, the real CLIs as subprocesses, waits with deadlines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PASSWORD = "fluvio4cdc!"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    """Poll until condition() is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # a server restarting, a table not yet created...
            last_error = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


@dataclass
class Server:
    """A local MariaDB started by docker/install.sh --local."""

    name: str
    dir: Path
    port: int = field(default_factory=free_port)
    args: str = ""  # extra mariadbd options (docker/install.sh's CDC_MARIADB_ARGS)

    def start(self) -> Server:
        # A tmpdir of its own, as scripts/corpus.py gives its servers: in the shared /tmp, another pytest
        # session's or the machine's clean-up could delete a server's temporary files mid-query.
        tmpdir = self.dir / "tmp"
        tmpdir.mkdir(parents=True, exist_ok=True)
        args = self.args or os.environ.get("CDC_MARIADB_ARGS", "")  # self.args replace the environment's
        env = {**os.environ, "CDC_MARIADB_ARGS": f"{args} --tmpdir={tmpdir}"}
        subprocess.run(
            ["bash", str(ROOT / "docker/install.sh"), "-n", self.name, "-d", str(self.dir), "-p", str(self.port), "--local"],
            check=True, capture_output=True, text=True, env=env,
        )
        return self

    def stop(self) -> None:
        subprocess.run(["bash", str(ROOT / "docker/install.sh"), "-d", str(self.dir), "--stop"], check=True, capture_output=True)

    def connect(self, db: str | None = None, user: str = "root", password: str = "") -> pymysql.Connection:
        return pymysql.connect(host="127.0.0.1", port=self.port, user=user, password=password, database=db,
                               autocommit=True, charset="utf8mb4")

    def execute(self, *statements: str, db: str | None = None) -> None:
        conn = self.connect(db)
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
        finally:
            conn.close()

    def query(self, sql: str, args=None, db: str | None = None) -> list[tuple]:
        conn = self.connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def rows(self, db: str, table: str) -> list[tuple]:
        """All rows, sorted, for exact comparison (duplicates kept)."""
        return sorted(self.query(f"SELECT * FROM {quote(db)}.{quote(table)}"), key=repr)

    def user_databases(self) -> list[str]:
        system = {"information_schema", "mysql", "performance_schema", "sys"}
        return [d for (d,) in self.query("SHOW DATABASES") if d not in system]

    def reset(self) -> None:
        """Drop every non-system database (each test starts clean)."""
        self.execute(*[f"DROP DATABASE {quote(d)}" for d in self.user_databases()])

    def gtid(self) -> str:
        return self.query("SELECT @@global.gtid_binlog_pos")[0][0]


class Cli:
    """A CLI started as a subprocess; its stderr is collected line by line."""

    def __init__(self, args: list[str], env: dict | None = None, stdin=None):
        self.args = args
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [str(BIN / args[0])] + args[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
        )
        self._out: list[bytes] = []
        # Each pipe has its own reader thread, so no line is lost and a full pipe never blocks the CLI.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._out_reader = threading.Thread(target=lambda: self._out.extend(self.proc.stdout), daemon=True)
        self._out_reader.start()

    @property
    def stdout(self) -> bytes:
        return b"".join(self._out)

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def exit_code(self) -> int | None:
        """The exit code once the program has ended (its stderr then fully collected), else None."""
        code = self.proc.poll()
        if code is not None:
            self._reader.join(5)
        return code

    def wait_line(self, text: str, timeout: float = 30.0) -> str:
        def found():
            if self.proc.poll() is not None and not any(text in l for l in self.lines):
                self._reader.join(2)
                if not any(text in l for l in self.lines):
                    raise AssertionError(f"{self.args[0]} exited {self.proc.returncode}: {self.stderr}")
            return next((l for l in self.lines if text in l), None)

        return wait_for(found, timeout, f"'{text}' from {self.args[0]} (stderr so far: {self.stderr!r})")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.args[0]} did not stop within {timeout}s after signal {sig}: {self.stderr}") from None
        self._reader.join(10)
        self._out_reader.join(10)
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join(10)
        self._out_reader.join(10)


def run_cli(*args: str, input: bytes | None = None, timeout: float = 60.0, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a CLI to completion."""
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], input=input, capture_output=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
