"""The local stack's first-day traps, on real processes: `wolf up` and auto-starting verbs with a
private WOLF_HOME and port (every process is stopped even when a test fails: `wolf down`, then the
process mark)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support.processes import wait_gone
from tests.support.serving import free_port
from tests.test_cli import WOLF

PROVIDER_ENV = ("WOLF_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "PYTHONPATH")


@dataclass
class Stack:
    """`wolf` against a private local stack; `run` drops the provider variables, PYTHONPATH and
    Temporal's, then adds `env`."""

    home: Path
    base: dict[str, str]

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in self.base.items() if k not in PROVIDER_ENV and not k.startswith("OTEL_")}
        return subprocess.run(
            [WOLF, *args], capture_output=True, text=True, env=environ | env, timeout=300, check=False
        )

    def worker(self) -> psutil.Process:
        return psutil.Process(json.loads((self.home / "worker.pid").read_text())["pid"])


@pytest.fixture
def stack(tmp_path: Path, process_mark: dict[str, str]) -> Iterator[Stack]:
    base = {
        **os.environ,
        **process_mark,
        "NO_COLOR": "1",
        "WOLF_HOME": str(tmp_path / "home"),
        "WOLF_LOCAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE", "TEMPORAL_NAMESPACE"):
        base.pop(name, None)
    stack = Stack(tmp_path / "home", base)
    try:
        yield stack
    finally:
        stack.run("down")


def test_a_worker_that_dies_at_start_makes_up_exit_3_and_the_next_up_works(stack, tmp_path):
    """The review's trap: a plugin found through PYTHONPATH is remembered with that path (a later
    `wolf up` from a shell without it still loads it); a remembered plugin that no longer loads
    makes `wolf up` exit 3 with the end of the worker's log, and is forgotten."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "trap_plugin.py").write_text(
        "def register(wolf):\n    wolf.tool(ping)\n\n\ndef ping() -> str:\n    return 'pong'\n"
    )
    first = stack.run("up", "--plugin", "trap_plugin", "--json", PYTHONPATH=str(plugins))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["started"] == ["server", "worker"]
    stack.run("down")
    again = stack.run("up", "--json")  # no PYTHONPATH here
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["plugins"] == ["trap_plugin"]  # says what it reused
    assert stack.worker().cmdline()[-2:] == ["--plugin", "trap_plugin"]
    stack.run("down")

    (plugins / "trap_plugin.py").write_text("raise RuntimeError('the plugin is broken')\n")
    broken = stack.run("up")
    assert broken.returncode == 3, broken.stderr
    assert "exited before it polled" in broken.stderr
    assert "RuntimeError: the plugin is broken" in broken.stderr
    assert "trap_plugin; they are forgotten now" in broken.stderr
    assert "Traceback" not in broken.stderr.split("the end of")[0]
    assert not (stack.home / "worker.pid").exists()

    fixed = stack.run("up", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["started"] == ["worker"] and json.loads(fixed.stdout)["plugins"] == []
    assert "--plugin" not in stack.worker().cmdline()


def test_a_client_shell_never_changes_the_running_workers_credentials(stack):
    """A first `wolf submit` starts the stack and waits for its worker (no false "no worker polls"
    warning); one from a shell without the provider variables leaves the worker's alone and says
    how to apply them; OTEL_* counts as well; `wolf up --restart` applies this shell's."""
    keys = {"WOLF_MODEL": "local:demo", "OPENAI_API_KEY": "sk-worker-secret"}
    cold = stack.run("submit", "What time is it?", "--json", **keys)
    assert cold.returncode == 0, cold.stderr
    assert "starting the embedded local stack" in cold.stderr
    assert "no worker polls" not in cold.stderr
    worker = stack.worker()

    bare = stack.run("submit", "What time is it?", "--json", WOLF_MODEL="local:demo")
    assert bare.returncode == 0, bare.stderr
    assert "keeps the OPENAI_API_KEY it started with" in bare.stderr
    assert "wolf up --restart" in bare.stderr
    assert stack.worker().pid == worker.pid and worker.is_running()
    assert worker.environ()["OPENAI_API_KEY"] == "sk-worker-secret"

    traced = stack.run("up", "--json", OTEL_SERVICE_NAME="wolf-test", **keys)
    assert traced.returncode == 0, traced.stderr
    assert json.loads(traced.stdout)["started"] == []
    assert "OTEL_SERVICE_NAME" in json.loads(traced.stdout)["note"]
    assert stack.worker().pid == worker.pid

    restarted = stack.run("up", "--restart", "--json", WOLF_MODEL="local:demo", OTEL_SERVICE_NAME="wolf-test")
    assert restarted.returncode == 0, restarted.stderr
    info = json.loads(restarted.stdout)
    assert info["started"] == ["worker"] and info["worker_pid"] != worker.pid
    assert "OPENAI_API_KEY" in info["restarted_worker_because"]
    assert "OTEL_SERVICE_NAME" in info["restarted_worker_because"]
    assert "OPENAI_API_KEY" not in stack.worker().environ()
    assert "sk-worker-secret" not in (stack.home / "worker.env").read_text()


def test_a_dead_local_worker_is_noticed_at_once_without_a_stale_pid_note(stack):
    """Temporal lists a dead worker's poller for minutes: a worker process of this host that has
    exited does not count; its pid file is simply gone (no "stale" note: it was ours)."""
    up = stack.run("up")
    assert up.returncode == 0, up.stderr
    worker = stack.worker()
    os.killpg(worker.pid, signal.SIGKILL)
    assert wait_gone([worker.pid], 30) == []
    status = stack.run("status", "no-such-session")
    assert status.returncode == 3, status.stderr
    assert "no worker polls" in status.stderr
    again = stack.run("up", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["started"] == ["worker"]
    assert "ignoring" not in again.stderr


def test_close_on_a_finished_session_says_so_and_exits_0(stack):
    up = stack.run("up")
    assert up.returncode == 0, up.stderr
    sid = json.loads(stack.run("submit", "hi", "--json", WOLF_MODEL="local:demo").stdout)["session_id"]
    assert stack.run("close", sid).returncode == 0
    stack.run("result", sid)  # waits until it has finished
    again = stack.run("close", sid)
    assert again.returncode == 0, again.stderr
    assert f"session {sid} has already finished" in again.stdout


def _wolf_without(module: str, address: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`wolf ARGS` in a process where `module` fails to import exactly as one not installed does
    (None in sys.modules)."""
    program = f"import sys; sys.modules[{module!r}] = None; from agentwolf.cli import app; app()"
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TEMPORAL_ADDRESS": address, "NO_COLOR": "1", **env},
    )


@pytest.mark.parametrize(
    ("verb", "blocked", "extra"),
    [
        (["serve", "--no-auth", "--port", "1"], "ag_ui", "serve"),
        (["mcp"], "uvicorn", "serve"),
    ],
)
def test_a_verb_without_its_extra_names_the_pip_install(env, verb, blocked, extra):
    run = _wolf_without(blocked, env.client.service_client.config.target_host, *verb)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (
        f"error: wolf {verb[0]} needs its extra: pip install 'agentwolf[{extra}]' ({blocked} missing)"
    )


def test_traces_asked_for_without_the_otel_extra_name_the_pip_install(env):
    """Not "cannot reach Temporal": the server is fine, a package is missing."""
    address = env.client.service_client.config.target_host
    sdk = "opentelemetry.sdk.trace"
    run = _wolf_without(sdk, address, "status", "x", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1")
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (
        f"error: OTEL_* asks for traces but {sdk} is missing: pip install 'agentwolf[otel]'"
    )


def test_the_extras_table_names_the_modules_of_each_extras_packages():
    """extras.EXTRA_MODULES and pyproject.toml's optional dependencies name the same packages."""
    import importlib.metadata as metadata
    import importlib.util
    import re

    from agentwolf.cli.extras import EXTRA_MODULES

    def canonical(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    def provides(dist: str, origin: Path) -> bool:
        found = metadata.distribution(dist)
        return any(Path(str(found.locate_file(f))).resolve() == origin for f in found.files or [])

    requirements = metadata.requires("agentwolf") or []
    top = metadata.packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        wanted = {
            canonical(re.split(r"[<>=!;\[ ]", r)[0])
            for r in requirements
            if f'extra == "{extra}"' in r and not r.startswith("agentwolf")  # `a2a` brings `serve` too
        }
        found = set()
        for module in modules:
            spec = importlib.util.find_spec(module)
            assert spec is not None and spec.origin is not None, module
            origin = Path(spec.origin).resolve()
            found |= {canonical(d) for d in top[module.split(".")[0]] if provides(d, origin)}
        assert found == wanted, extra


def test_up_prints_where_the_worker_serves_metrics(stack):
    import httpx

    port = free_port()
    here = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # this tree's code, when it is not installed
    up = stack.run("up", "--metrics-port", str(port), **here)
    assert up.returncode == 0, up.stderr
    url = f"http://127.0.0.1:{port}/metrics"
    assert f"metrics: {url}" in up.stdout.splitlines()
    assert httpx.get(url, timeout=10).status_code == 200
    again = json.loads(stack.run("up", "--metrics-port", str(port), "--json", **here).stdout)
    assert again["started"] == [] and again["metrics"] == url  # the running worker's
    plain = stack.run("up", **here)  # other options: the worker restarts without metrics
    assert "metrics: off (--metrics-port PORT serves them)" in plain.stdout.splitlines()
