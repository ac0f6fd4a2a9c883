"""Local stack PID files: only a process that is still the one `wolf up` started is stopped or trusted.

A PID is reused once its process exits; a stale `worker.pid` must neither make `wolf down` signal
whatever now holds that PID nor make `wolf up` believe the worker runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.test_cli import WOLF


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated live process leading its own process group, as a reused PID would be."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _identity(pid: int) -> dict[str, object]:
    """What `wolf up` records for a process it starts: pid, creation time, command line."""
    proc = psutil.Process(pid)
    return {"pid": pid, "created": proc.create_time(), "cmdline": proc.cmdline()}


def _settled(pid: int) -> dict[str, object]:
    """`_identity` once the kernel shows the command line: it reads empty for a few ms after exec."""
    deadline = time.monotonic() + 5
    while not (identity := _identity(pid))["cmdline"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return identity


def _down(home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WOLF_HOME": str(home), "WOLF_LOCAL_ADDRESS": "127.0.0.1:1", "NO_COLOR": "1"}
    return subprocess.run([WOLF, "down"], check=False, capture_output=True, text=True, env=env, timeout=60)


def test_down_leaves_a_foreign_process_alone(tmp_path, bystander):
    pid = bystander.pid
    # An old plain-number file, and one whose start time and command line are not this process's.
    (tmp_path / "worker.pid").write_text(str(pid))
    (tmp_path / "server.pid").write_text(
        json.dumps({"pid": pid, "created": 1.0, "cmdline": ["temporal", "server"]})
    )
    run = _down(tmp_path)
    assert run.returncode == 0, run.stderr
    assert bystander.poll() is None, "wolf down signalled a process it did not start"
    assert "nothing was running" in run.stdout
    assert f"ignoring worker.pid: '{pid}' does not say which process we started" in run.stderr
    assert f"ignoring stale server.pid: pid {pid} now belongs to another process" in run.stderr
    assert not (tmp_path / "worker.pid").exists() and not (tmp_path / "server.pid").exists()


def test_down_stops_the_process_it_recorded(tmp_path, bystander):
    (tmp_path / "worker.pid").write_text(json.dumps(_settled(bystander.pid)))
    run = _down(tmp_path)
    assert run.returncode == 0, run.stderr
    assert bystander.wait(timeout=10) == -signal.SIGTERM
    assert "stopped: worker" in run.stdout and "ignoring" not in run.stderr


@pytest.mark.parametrize("old_format", [True, False])
def test_up_starts_a_worker_when_worker_pid_names_a_foreign_process(
    tmp_path, bystander, monkeypatch, capsys, old_format
):
    from agentwolf.ops import local_stack

    home = tmp_path / "home"
    home.mkdir()
    pid = bystander.pid
    if old_format:
        (home / "worker.pid").write_text(str(pid))
        note = f"ignoring worker.pid: '{pid}' does not say which process we started"
    else:  # the PID was reused: same pid, a process created later
        worker = {"pid": pid, "created": psutil.Process(pid).create_time() - 100}
        (home / "worker.pid").write_text(
            json.dumps({**worker, "cmdline": [sys.executable, "-m", "agentwolf.worker"]})
        )
        note = f"ignoring stale worker.pid: pid {pid} now belongs to another process"
    with socket.socket() as listener:  # stands in for the server, so `up` starts only the worker
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setenv("WOLF_HOME", str(home))
        monkeypatch.setenv("WOLF_LOCAL_ADDRESS", f"127.0.0.1:{listener.getsockname()[1]}")
        try:
            status = local_stack.up()
            assert status.started == ["worker"] and status.worker_pid != pid
            assert note in capsys.readouterr().err
            assert json.loads((home / "worker.pid").read_text()) == _settled(status.worker_pid)
            assert local_stack.up().started == []  # the worker it recorded is trusted
        finally:
            assert local_stack.down() == ["worker"]
    assert bystander.poll() is None


def test_pid_files_written_before_psutil_still_name_a_running_process(tmp_path, bystander):
    """A worker started by an older `wolf up` (its record has /proc's start ticks, no creation time)
    is still ours when its command line matches: `down` stops it rather than starting a second one."""
    record = {"pid": bystander.pid, "start": 12345, "cmdline": _settled(bystander.pid)["cmdline"]}
    (tmp_path / "worker.pid").write_text(json.dumps(record))
    run = _down(tmp_path)
    assert run.returncode == 0, run.stderr
    assert "stopped: worker" in run.stdout and bystander.wait(timeout=10) == -signal.SIGTERM


def test_a_changed_environment_restarts_the_worker_only_when_asked(tmp_path, monkeypatch):
    """A worker keeps the model and OTEL_* variables it started with (a client's shell may lack its
    keys): `up` names the variables that differ, `up(restart=True)` applies them; values never reach
    the disk."""
    from agentwolf.ops import local_stack

    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as listener:  # stands in for the server
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setenv("WOLF_HOME", str(home))
        monkeypatch.setenv("WOLF_LOCAL_ADDRESS", f"127.0.0.1:{listener.getsockname()[1]}")
        monkeypatch.setenv("WOLF_MODEL", "local:demo")
        try:
            first = local_stack.up()
            assert first.started == ["worker"] and first.changed == first.kept_env == []
            same = local_stack.up()
            assert same.started == [] and same.worker_pid == first.worker_pid
            monkeypatch.setenv("WOLF_MODEL", "openai:gpt-secret-model-name")
            monkeypatch.setenv("OTEL_SERVICE_NAME", "traced")
            kept = local_stack.up()
            assert kept.started == [] and kept.kept_env == ["OTEL_SERVICE_NAME", "WOLF_MODEL"]
            changed = local_stack.up(restart=True)
            assert changed.changed == ["OTEL_SERVICE_NAME", "WOLF_MODEL"] and changed.started == ["worker"]
            assert changed.worker_pid != first.worker_pid
            assert "gpt-secret-model-name" not in (home / "worker.env").read_text()
        finally:
            assert local_stack.down() == ["worker"]


def test_a_poller_of_a_killed_process_that_is_still_a_zombie_does_not_count(bystander):
    """A SIGKILLed worker stays a zombie until its parent (often init, which takes its time) reads
    its status; it has exited all the same, so its poller does not count as a worker (its PID
    exists meanwhile: psutil.pid_exists alone said the dead worker still polled)."""
    from agentwolf.ops.local_stack import polls_from_a_dead_process

    host = socket.gethostname()
    assert not polls_from_a_dead_process(f"{bystander.pid}@{host}")
    bystander.kill()
    deadline = time.monotonic() + 30
    while psutil.Process(bystander.pid).status() != psutil.STATUS_ZOMBIE:  # not reaped: ours to wait
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert psutil.pid_exists(bystander.pid)
    assert polls_from_a_dead_process(f"{bystander.pid}@{host}")
    assert not polls_from_a_dead_process(f"{bystander.pid}@another-host")
    bystander.wait()
    assert polls_from_a_dead_process(f"{bystander.pid}@{host}")
