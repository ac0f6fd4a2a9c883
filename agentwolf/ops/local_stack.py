"""The embedded local stack: a Temporal dev server (SQLite in the user's data dir) and a worker,
started in the background and stopped by PID (psutil: Linux and macOS).

A PID file records the process's creation time and command line besides its PID: PIDs are reused,
and a stale file must neither make `down` signal an unrelated process group nor `up` skip the worker.

worker.env remembers the running worker's launch (plugins, flags, the PYTHONPATH its plugins were
found on, digests of the environment it builds models and traces from), so an implicit `up` (any
verb that auto-starts) brings back the same worker. A launch whose worker dies before it polls is
forgotten, so one bad `--plugin` never poisons later starts. A client's environment never restarts
a running worker: only `wolf up --restart` applies it."""

from __future__ import annotations

import asyncio
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
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil  # imported where used: `wolf status` checks pollers without it (11 ms of its start)

from agentwolf.defaults import TASK_QUEUE
from agentwolf.ops.devserver import start_dev_command
from agentwolf.paths import data_dir

DEFAULT_ADDRESS = "localhost:7233"
READY_TIMEOUT = 120.0
"""Seconds `start` waits for a new worker to poll (imports and connecting take a few on a busy machine)."""
LOG_TAIL = 8
_ASK = timedelta(seconds=5)
"""Lines of worker.log quoted when the worker dies before it polls."""


class StackError(Exception):
    """The local stack cannot run: the message says why and where to look (the CLI exits 3)."""


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
    created: float | None
    """psutil's creation time; None in files written before it (the command line alone decides)."""
    cmdline: list[str]

    @classmethod
    def parse(cls, text: str) -> _Process:
        """ValueError or TypeError unless `text` is one of our records."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not a record")
        return cls(int(data["pid"]), data.get("created"), list(data["cmdline"]))

    def live(self) -> psutil.Process | None:
        """The process holding this PID now, if it runs (a zombie has ended)."""
        import psutil

        try:
            proc = psutil.Process(self.pid)
            return None if proc.status() == psutil.STATUS_ZOMBIE else proc
        except psutil.Error:
            return None

    def same(self, proc: psutil.Process) -> bool:
        """Whether `proc` is this process (an exec'd child may show its parent's command line for a
        moment: the creation time decides when recorded)."""
        import psutil

        try:
            if self.created is not None:
                return abs(proc.create_time() - self.created) < 0.01
            return proc.cmdline() == self.cmdline
        except psutil.Error:
            return False

    def running(self) -> bool:
        return (proc := self.live()) is not None and self.same(proc)


def _ours(pid_file: Path) -> _Process | None:
    """The process `pid_file` recorded if it still runs; else None and the file removed (the user
    told when the PID now belongs to another process)."""
    try:
        text = pid_file.read_text()
    except FileNotFoundError:
        return None
    try:
        recorded = _Process.parse(text)
    except (ValueError, TypeError, KeyError):  # an old plain-number file, or not one of ours
        why = (
            f"{text.strip()[:20]!r} does not say which process we started"
            f" (stop it yourself if it is an old {pid_file.stem})"
        )
        _ignore(pid_file, f"{pid_file.name}: {why}")
        return None
    proc = recorded.live()
    if proc is None:  # it exited: nothing to say
        pid_file.unlink(missing_ok=True)
        return None
    if not recorded.same(proc):
        _ignore(pid_file, f"stale {pid_file.name}: pid {recorded.pid} now belongs to another process")
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
    """Why the running worker was restarted: the launch parts (`--plugin`, `flags`, `PYTHONPATH`)
    asked for, or with `restart`, the environment variables that differed."""
    kept_env: list[str] = field(default_factory=list)
    """Variables of this environment that differ from those the running worker started with, which
    it keeps (`wolf up --restart` applies them)."""
    log_offset: int = 0
    """Where this start's lines begin in worker.log."""
    plugins: list[str] = field(default_factory=list)
    """The worker's plugin modules (remembered ones included)."""
    metrics: str | None = None
    """Where the worker serves Prometheus metrics (its `--metrics-port`, remembered ones included)."""


WATCHED_ENV = ("WOLF_MODEL", "WOLF_POLICY")
"""What the worker reads to build models, besides every provider's `*_API_KEY` and `*_BASE_URL`
(pydantic-ai's providers read their own: GEMINI_API_KEY, GROQ_API_KEY...), every `OTEL_*` (its
traces) and WOLF_TRACE_CONTENT."""
_UNSET = hashlib.sha256(b"\0unset").hexdigest()[:16]


def _watched_env() -> dict[str, str]:
    """A digest per variable set (values never reach the disk), so a change can be named."""
    names = {
        *WATCHED_ENV,
        "WOLF_TRACE_CONTENT",
        *(n for n in os.environ if n.startswith("OTEL_") or n.endswith(("_API_KEY", "_BASE_URL"))),
    }
    return {
        name: hashlib.sha256(os.environ[name].encode()).hexdigest()[:16]
        for name in sorted(names)
        if name in os.environ
    }


def _env_differs(recorded: dict[str, Any]) -> list[str]:
    before = recorded.get("env")
    if not isinstance(before, dict):  # written before worker.env held the environment apart
        return []
    now = _watched_env()
    return sorted(n for n in {*before, *now} if before.get(n, _UNSET) != now.get(n, _UNSET))


PLUGINS = "--plugin"
"""The key of the worker's plugin modules in worker.env (names, not secrets: kept as written)."""
FLAGS = "flags"
"""The key of the worker's other flags in worker.env (metrics port, log options)."""
PYTHONPATH = "PYTHONPATH"
"""The key of the module path the worker was started with (absolute): where its plugins came from."""


def _recorded(env_file: Path) -> dict[str, Any]:
    try:
        recorded = json.loads(env_file.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _pythonpath() -> str:
    """This environment's PYTHONPATH, absolute: a worker started later, elsewhere, finds the same."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return os.pathsep.join(str(Path(entry).resolve()) for entry in entries if entry)


def up(
    timeout: float = 30.0,
    plugins: Sequence[str] | None = None,
    flags: Sequence[str] | None = None,
    *,
    restart: bool = False,
) -> StackStatus:
    """Start whatever of (server, worker) is not running; idempotent. `plugins`: the worker's plugin
    modules (found on this environment's PYTHONPATH), `flags` its other flags (a running worker with
    others is restarted); None keeps the remembered launch's. `restart`: restart a running worker,
    so it takes this environment's variables. Returns at once: `start` also waits until it polls.
    Plugins are imported here first, so one that cannot load raises PluginError before anything starts."""
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
                raise StackError(f"the Temporal dev server did not start; see {home / 'server.log'}")
            time.sleep(0.2)
    worker = _ours(home / "worker.pid")
    recorded = _recorded(home / "worker.env")
    plugins = list(plugins) if plugins is not None else list(recorded.get(PLUGINS, []))
    flags = list(flags) if flags is not None else list(recorded.get(FLAGS, []))
    path = _pythonpath() if plugins != recorded.get(PLUGINS) else str(recorded.get(PYTHONPATH, _pythonpath()))
    launch: dict[str, Any] = {PLUGINS: plugins, FLAGS: flags, PYTHONPATH: path}
    changed = [key for key, value in launch.items() if recorded.get(key, value) != value] if worker else []
    differs = _env_differs(recorded) if worker else []
    if worker is not None and (changed or restart):
        changed += differs
        differs = []
        _stop(home / "worker.pid", worker)
        worker = None
    worker_pid = worker.pid if worker else None
    log_offset = 0
    if worker is None:
        cmd = [sys.executable, "-m", "agentwolf.worker", "--address", address, "--sole"]  # its build current
        cmd += [arg for module in plugins for arg in (PLUGINS, module)] + flags
        log = home / "worker.log"
        log_offset = log.stat().st_size if log.exists() else 0
        env = {name: value for name, value in os.environ.items() if name != PYTHONPATH}
        worker_pid = _spawn(cmd, log, home / "worker.pid", env | ({PYTHONPATH: path} if path else {}))
        (home / "worker.env").write_text(json.dumps({**launch, "env": _watched_env()}))
        started.append("worker")
    return StackStatus(
        address,
        ui_url(address),
        server_pid,
        worker_pid,
        started,
        changed,
        differs,
        log_offset,
        plugins,
        metrics_url(flags),
    )


def metrics_url(flags: Sequence[str]) -> str | None:
    """The worker's metrics endpoint, when its flags ask for one (it listens on every interface)."""
    if "--metrics-port" not in flags:
        return None
    return f"http://127.0.0.1:{flags[flags.index('--metrics-port') + 1]}/metrics"


async def start(
    plugins: Sequence[str] | None = None, flags: Sequence[str] | None = None, *, restart: bool = False
) -> StackStatus:
    """`up`, then wait until a worker it started polls its task queue. StackError if that worker
    exits first (quoting the end of its log; its launch is forgotten) or never polls."""
    status = await asyncio.to_thread(up, plugins=plugins, flags=flags, restart=restart)
    if "worker" in status.started and status.worker_pid is not None:
        await _until_polling(status, remembered=plugins is None)
    return status


async def _until_polling(status: StackStatus, *, remembered: bool) -> None:
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.service import RPCError

    from agentwolf.connection import connect

    home = data_dir()
    worker = _Process.parse((home / "worker.pid").read_text())
    identity = f"{worker.pid}@{socket.gethostname()}"  # a worker's default identity
    deadline = time.monotonic() + READY_TIMEOUT
    client = None
    while worker.running():
        try:  # a server that has just started may not answer, nor serve the namespace, yet
            client = client or await connect(status.address)  # as the worker connects
            request = DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=TASK_QUEUE),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
            described = await client.workflow_service.describe_task_queue(request, timeout=_ASK)
            if any(poller.identity == identity for poller in described.pollers):
                return
        except (RuntimeError, RPCError):
            pass
        if time.monotonic() > deadline:
            raise StackError(
                f"the local worker (pid {worker.pid}) runs but has not polled task queue {TASK_QUEUE!r}"
                f" after {READY_TIMEOUT:.0f} s; see {home / 'worker.log'}"
            )
        await asyncio.sleep(0.2)
    recorded = _recorded(home / "worker.env")
    for name in ("worker.env", "worker.pid"):
        (home / name).unlink(missing_ok=True)
    raise StackError(
        _died(home / "worker.log", status.log_offset, recorded.get(PLUGINS, []) if remembered else [])
    )


def _died(log: Path, offset: int, remembered: list[str]) -> str:
    """What to tell when a worker exited before it polled: the end of its log, and what was forgotten."""
    with open(log, "rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").strip().splitlines()[-LOG_TAIL:]
    tail = "\n".join(f"  {line}" for line in lines) or "  (it wrote nothing)"
    message = f"the local worker exited before it polled its task queue; the end of {log}:\n{tail}"
    if remembered:
        message += (
            f"\nit loaded plugins remembered from an earlier `wolf up --plugin`: {', '.join(remembered)};"
            " they are forgotten now (name them again with --plugin once they load)"
        )
    return message


def polls_from_a_dead_process(identity: str) -> bool:
    """Whether a poller `identity` (a worker's default, PID@HOST) names a process of this host that
    has exited: Temporal lists a dead worker's poller for minutes. A zombie has exited too: a killed
    worker stays one until its parent (often init, which takes its time) reads its status, and
    psutil.pid_exists counts it. Linux answers from /proc (every `wolf status` asks: psutil's
    import would add 11 ms to its start); elsewhere psutil does."""
    pid, _, host = identity.partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if sys.platform.startswith("linux"):
        try:
            stat = Path(f"/proc/{int(pid)}/stat").read_text()
        except FileNotFoundError:
            return True
        except OSError:  # not ours to read: it runs
            return False
        return stat.rpartition(")")[2].split()[0] == "Z"  # the state follows the (command name)
    import psutil

    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # not ours to read (AccessDenied): it runs
        return False


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
    if not _gone(started, timeout):
        os.killpg(started.pid, signal.SIGKILL)
        _gone(started, 2)  # a killed process is gone a moment later, not at once
    pid_file.unlink(missing_ok=True)


def _gone(started: _Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while started.running():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _spawn(cmd: list[str], log: Path, pid_file: Path, env: dict[str, str] | None = None) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    import psutil

    created = psutil.Process(proc.pid).create_time()
    # `cmd` is its command line: the kernel may show the parent's for a moment after fork.
    pid_file.write_text(json.dumps(asdict(_Process(proc.pid, created, cmd))))
    return proc.pid
