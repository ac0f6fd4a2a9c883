"""The embedded local stack: a Temporal dev server (SQLite in the user's data dir) and a worker,
started in the background and stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agentwolf.client.devserver import start_dev_command
from agentwolf.paths import data_dir

DEFAULT_ADDRESS = "localhost:7233"


def local_address() -> str:
    """Where the embedded server listens: `WOLF_LOCAL_ADDRESS`, else localhost:7233."""
    return os.environ.get("WOLF_LOCAL_ADDRESS") or DEFAULT_ADDRESS


def ui_url(address: str) -> str:
    host, port = address.rsplit(":", 1)
    return f"http://{host}:{int(port) + 1000}"


def listening(address: str, timeout: float = 0.3) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


@dataclass
class StackStatus:
    address: str
    ui: str
    server_pid: int | None
    worker_pid: int | None
    started: list[str]


def up(timeout: float = 30.0) -> StackStatus:
    """Start whatever of (server, worker) is not running; idempotent."""
    home = data_dir()
    address = local_address()
    started = []
    server_pid = _alive(home / "server.pid")
    if not listening(address):
        cmd = start_dev_command(int(address.rsplit(":", 1)[1]), str(home / "temporal.db"))
        server_pid = _spawn(cmd, home / "server.log", home / "server.pid")
        started.append("server")
        deadline = time.monotonic() + timeout
        while not listening(address):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Temporal dev server did not start; see {home / 'server.log'}")
            time.sleep(0.2)
    worker_pid = _alive(home / "worker.pid")
    if worker_pid is None:
        cmd = [sys.executable, "-m", "agentwolf.worker", "--address", address]
        worker_pid = _spawn(cmd, home / "worker.log", home / "worker.pid")
        started.append("worker")
    return StackStatus(address, ui_url(address), server_pid, worker_pid, started)


def down(timeout: float = 15.0) -> list[str]:
    """Stop the worker (it drains), then the server; returns what was stopped."""
    home = data_dir()
    stopped = []
    for name in ("worker", "server"):
        pid_file = home / f"{name}.pid"
        pid = _alive(pid_file)
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(pid_file) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid_file):
                os.killpg(pid, signal.SIGKILL)
            stopped.append(name)
        pid_file.unlink(missing_ok=True)
    return stopped


def _spawn(cmd: list[str], log: Path, pid_file: Path) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    pid_file.write_text(str(proc.pid))
    return proc.pid
