"""`wolf dev`: the local stack in the foreground; Ctrl-C stops the server and the worker it started."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

from tests.support.processes import wait_gone
from tests.test_cli import WOLF


def test_dev_stops_the_stack_on_ctrl_c(tmp_path, process_mark):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path / "home"
    env = {
        **os.environ,
        **process_mark,  # `wolf dev`, its server and its worker are stopped even if this test fails
        "NO_COLOR": "1",
        "WOLF_HOME": str(home),
        "WOLF_LOCAL_ADDRESS": f"127.0.0.1:{port}",
    }
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE"):
        env.pop(name, None)
    dev = subprocess.Popen([WOLF, "dev"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert dev.stdout is not None
    ready = dev.stdout.readline()
    assert "Ctrl-C stops both" in ready, dev.stderr.read() if dev.stderr else ready
    pids = [json.loads((home / f"{name}.pid").read_text())["pid"] for name in ("server", "worker")]
    dev.send_signal(signal.SIGINT)
    rest, errors = dev.communicate(timeout=120)
    assert dev.returncode == 0, errors
    assert "stopped: worker, server" in rest
    assert wait_gone(pids, timeout=30) == []
    assert not (home / "server.pid").exists() and not (home / "worker.pid").exists()
