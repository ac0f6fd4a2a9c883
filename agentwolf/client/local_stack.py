"""The embedded local stack: a Temporal dev server (SQLite in the user's data dir) and a worker,
started in the background and stopped by PID.

A PID file records the process's start time and command line besides its PID: PIDs are reused, and
a stale file must neither make `down` signal an unrelated process group nor `up` skip the worker."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class _Process:
    """What tells a process from a later one with the same PID."""

    pid: int
    start: int
    """Clock ticks from boot to its start: /proc/PID/stat field 22."""
    cmdline: list[str]


def _start_time(pid: int) -> int:
    """Field 22 of Linux's /proc/PID/stat; OSError if there is no such process."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])  # the name in parentheses may hold spaces; field 3 follows


def _process(pid: int) -> _Process | None:
    """The process now holding `pid` (a zombie's command line is empty), or None."""
    try:
        start, cmdline = _start_time(pid), Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return _Process(pid, start, cmdline.decode(errors="replace").split("\0")[:-1])


def _ours(pid_file: Path) -> _Process | None:
    """The process `pid_file` recorded if it is still that process; else None, the file removed and the user
    told."""
    try:
        text = pid_file.read_text()
    except FileNotFoundError:
        return None
    try:
        recorded = _Process(**json.loads(text))
    except (ValueError, TypeError):  # an old plain-number file, or not one of ours
        why = (
            f"{text.strip()[:20]!r} does not say which process we started"
            f" (stop it yourself if it is an old {pid_file.stem})"
        )
        _ignore(pid_file, f"{pid_file.name}: {why}")
        return None
    if _process(recorded.pid) != recorded:
        _ignore(pid_file, f"stale {pid_file.name}: pid {recorded.pid} is not the {pid_file.stem} we started")
        return None
    return recorded


def _ignore(pid_file: Path, why: str) -> None:
    print(f"note: ignoring {why}", file=sys.stderr)
    pid_file.unlink(missing_ok=True)


@dataclass
class StackStatus:
    address: str
    ui: str
    server_pid: int | None
    worker_pid: int | None
    started: list[str]
    changed: list[str] = field(default_factory=list)
    """The model environment variables (or `--plugin`, the plugin list) that changed since the running
    worker started (it was restarted)."""


MODEL_ENV = ("WOLF_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "WOLF_POLICY")
"""What the worker reads to build models: a worker started before a change would keep the old ones."""


def _model_env() -> dict[str, str]:
    """A digest per variable (values never reach the disk), so a change can be named."""
    return {
        name: hashlib.sha256(os.environ.get(name, "\0unset").encode()).hexdigest()[:16] for name in MODEL_ENV
    }


PLUGINS = "--plugin"
"""The key of the worker's plugin modules in worker.env (names, not secrets: kept as written)."""
FLAGS = "flags"
"""The key of the worker's other flags in worker.env (metrics port, log options)."""


def _recorded(env_file: Path) -> dict[str, Any]:
    try:
        recorded = json.loads(env_file.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _env_changes(recorded: dict[str, Any], plugins: list[str], flags: list[str]) -> list[str]:
    changed = [name for name, digest in _model_env().items() if recorded.get(name, digest) != digest]
    changed += [PLUGINS] if recorded.get(PLUGINS, plugins) != plugins else []
    return changed + ([FLAGS] if recorded.get(FLAGS, flags) != flags else [])


def up(
    timeout: float = 30.0, plugins: Sequence[str] | None = None, flags: Sequence[str] | None = None
) -> StackStatus:
    """Start whatever of (server, worker) is not running; idempotent. `plugins`: the worker's plugin
    modules, `flags` its other flags (a running worker with others is restarted); None keeps those it
    was last started with.
    They are imported here first, so one that cannot load raises PluginError before anything starts."""
    if plugins:
        from agentwolf.plugins import load_plugins

        load_plugins(plugins, entry_points=())
    home = data_dir()
    address = local_address()
    started = []
    server = _ours(home / "server.pid")
    server_pid = server.pid if server else None
    if not listening(address):
        cmd = start_dev_command(int(address.rsplit(":", 1)[1]), str(home / "temporal.db"))
        server_pid = _spawn(cmd, home / "server.log", home / "server.pid")
        started.append("server")
        deadline = time.monotonic() + timeout
        while not listening(address):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Temporal dev server did not start; see {home / 'server.log'}")
            time.sleep(0.2)
    worker = _ours(home / "worker.pid")
    recorded = _recorded(home / "worker.env")
    wanted = list(plugins) if plugins is not None else list(recorded.get(PLUGINS, []))
    wanted_flags = list(flags) if flags is not None else list(recorded.get(FLAGS, []))
    changed = _env_changes(recorded, wanted, wanted_flags) if worker else []
    if worker is not None and changed:  # it would keep building models from the old environment
        _stop(home / "worker.pid", worker)
        worker = None
    worker_pid = worker.pid if worker else None
    if worker is None:
        cmd = [sys.executable, "-m", "agentwolf.worker", "--address", address]
        cmd += [arg for module in wanted for arg in (PLUGINS, module)] + wanted_flags
        worker_pid = _spawn(cmd, home / "worker.log", home / "worker.pid")
        (home / "worker.env").write_text(json.dumps({**_model_env(), PLUGINS: wanted, FLAGS: wanted_flags}))
        started.append("worker")
    return StackStatus(address, ui_url(address), server_pid, worker_pid, started, changed)


def down(timeout: float = 15.0) -> list[str]:
    """Stop the worker (it drains), then the server; returns what was stopped."""
    home = data_dir()
    stopped = []
    for name in ("worker", "server"):
        pid_file = home / f"{name}.pid"
        started = _ours(pid_file)
        if started is not None:
            _stop(pid_file, started, timeout)
            stopped.append(name)
        pid_file.unlink(missing_ok=True)
    return stopped


def _stop(pid_file: Path, started: _Process, timeout: float = 15.0) -> None:
    """SIGTERM the process group `_spawn` made (it drains), SIGKILL after `timeout`."""
    os.killpg(started.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _process(started.pid) == started and time.monotonic() < deadline:
        time.sleep(0.1)
    if _process(started.pid) == started:
        os.killpg(started.pid, signal.SIGKILL)
        deadline = time.monotonic() + 2  # a killed process is gone a moment later, not at once
        while _process(started.pid) == started and time.monotonic() < deadline:
            time.sleep(0.05)
    pid_file.unlink(missing_ok=True)


def _spawn(cmd: list[str], log: Path, pid_file: Path) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    # `cmd` is its command line: /proc may show it empty for a moment after exec.
    pid_file.write_text(json.dumps(asdict(_Process(proc.pid, _start_time(proc.pid), cmd))))
    return proc.pid
