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
    """What `wolf up` records for a process it starts: pid, start time (/proc stat field 22), command line."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    return {"pid": pid, "start": int(stat[19]), "cmdline": cmdline}


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
        json.dumps({"pid": pid, "start": 1, "cmdline": ["temporal", "server"]})
    )
    run = _down(tmp_path)
    assert run.returncode == 0, run.stderr
    assert bystander.poll() is None, "wolf down signalled a process it did not start"
    assert "nothing was running" in run.stdout
    assert f"ignoring worker.pid: '{pid}' does not say which process we started" in run.stderr
    assert f"ignoring stale server.pid: pid {pid} is not the server we started" in run.stderr
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
    from agentwolf.client import local_stack

    home = tmp_path / "home"
    home.mkdir()
    pid = bystander.pid
    if old_format:
        (home / "worker.pid").write_text(str(pid))
        note = f"ignoring worker.pid: '{pid}' does not say which process we started"
    else:  # the PID was reused: same pid, another process
        (home / "worker.pid").write_text(
            json.dumps({**_identity(pid), "cmdline": [sys.executable, "-m", "agentwolf.worker"]})
        )
        note = f"ignoring stale worker.pid: pid {pid} is not the worker we started"
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


def test_up_restarts_the_worker_when_the_model_environment_changed(tmp_path, monkeypatch):
    """A worker started before `WOLF_MODEL` changed would keep the old model: `up` restarts it and
    says which variable changed; the values never reach the disk."""
    from agentwolf.client import local_stack

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
            assert first.started == ["worker"] and first.changed == []
            same = local_stack.up()
            assert same.started == [] and same.worker_pid == first.worker_pid
            monkeypatch.setenv("WOLF_MODEL", "openai:gpt-secret-model-name")
            changed = local_stack.up()
            assert changed.changed == ["WOLF_MODEL"] and changed.started == ["worker"]
            assert changed.worker_pid != first.worker_pid
            assert "gpt-secret-model-name" not in (home / "worker.env").read_text()
        finally:
            assert local_stack.down() == ["worker"]
