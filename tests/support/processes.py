"""Processes the tests start, found by an environment mark every descendant inherits (a detached
`wolf up` server or worker included), so a run can stop what it started and only that: other runs
share this machine."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import psutil

RUN_MARK = "WOLF_TEST_RUN"
"""Marks, one per test run the process descends from (a run started by a test adds its own)."""


def mark_this_run() -> None:
    """Give this process a new mark, after those it inherited; every process it starts inherits it."""
    os.environ[RUN_MARK] = f"{os.environ.get(RUN_MARK, '')} {uuid.uuid4().hex}".strip()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: only its parent has not read its status yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def marked(mark: str) -> list[psutil.Process]:
    """Every other process that carries `mark`, and their descendants."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if mark in proc.environ().get(RUN_MARK, "").split() and proc.status() != psutil.STATUS_ZOMBIE:
                found[proc.pid] = proc
        except psutil.Error:  # gone meanwhile, or a kernel thread
            continue
    for proc in list(found.values()):
        found.update((child.pid, child) for child in descendants(proc.pid))
    return list(found.values())


def started_by_this_run() -> list[psutil.Process]:
    """This process's live descendants and every process that carries this run's mark."""
    found = {p.pid: p for p in marked(os.environ[RUN_MARK].split()[-1])}
    found.update((p.pid, p) for p in descendants(os.getpid()))
    return [p for p in found.values() if alive(p.pid)]


def since_boot() -> float:
    """Now, on the clock `started` reads (psutil's create_time is only as exact as the boot time
    in whole seconds that it adds)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started(proc: psutil.Process) -> float:
    """When `proc` started, in seconds since boot (/proc/PID/stat field 22); 0 if it is gone."""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return 0.0
    return int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid}: {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"pid {proc.pid} (gone)"


def stop(procs: Iterable[psutil.Process], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is still there after `grace` seconds."""
    procs = list(procs)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, left = psutil.wait_procs(procs, timeout=grace)
    for proc in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(left, timeout=grace)


def end(proc: subprocess.Popen[bytes]) -> None:
    """End a process the test started and reap it: `stop` with a long grace (a loaded machine can
    take longer than a quiet one to drain a worker, and the test's outcome is known by then)."""
    if proc.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            stop([psutil.Process(proc.pid)], grace=30.0)
    proc.wait()


def wait_gone(pids: Iterable[int], timeout: float = 30.0) -> list[int]:
    """The pids still alive after waiting up to `timeout` seconds for all of them to end."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
