"""The suite's own guards (tests/support/guards.py), run as an inner pytest with that plugin alone:
nothing a test starts outlives the run, a run started in the background still lets its tests press
Ctrl-C, and a test whose tools are missing fails in CI instead of skipping quietly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.needs import import_or_skip, missing
from tests.support.processes import alive, wait_gone

ROOT = Path(__file__).parent.parent


def _inner_pytest(
    tmp_path: Path, test: str, preexec: Callable[[], None] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(test))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.support.guards",
            "-p",
            "no:cacheprovider",
            "test_inner.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=preexec,
    )


def test_a_process_left_behind_fails_the_run_and_is_stopped(tmp_path):
    # A detached grandchild (its parent gone, its session its own) is found by the run's mark alone.
    run = _inner_pytest(
        tmp_path,
        """
        import subprocess, sys

        def test_leaves_a_sleeper(tmp_path_factory):
            # coreutils' sleep, not Python: nothing at its start can fail (its output goes nowhere)
            spawn = "import subprocess; print(subprocess.Popen(['sleep', '600'],"
            spawn += " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
            pid = subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True).stdout
            open("sleeper.pid", "w").write(pid)
        """,
    )
    pid = int((tmp_path / "sleeper.pid").read_text())
    try:
        assert run.returncode == 1, f"sleeper alive: {alive(pid)}\n{run.stdout}{run.stderr}"
        assert "processes left behind" in run.stdout and f"pid {pid}:" in run.stdout, run.stdout
        assert "test_inner.py::test_leaves_a_sleeper" in run.stdout
        assert "1 passed" in run.stdout  # the test itself passed: the run fails for what it left
        assert wait_gone([pid], timeout=30) == []
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_reaches_what_a_background_run_starts(tmp_path):
    # `pytest &` in a script starts pytest with SIGINT ignored, which its children would inherit.
    run = _inner_pytest(
        tmp_path,
        """
        import signal, subprocess, sys

        def test_child_has_the_default_sigint():
            probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
            out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
            assert out.strip() == "True"
        """,
        preexec=_ignore_sigint,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "processes left behind" not in run.stdout  # and a run that leaves nothing passes


def test_a_missing_tool_skips_here_and_fails_in_ci(tmp_path, monkeypatch):
    run = _inner_pytest(
        tmp_path,
        """
        import pytest

        @pytest.mark.needs(False, "the moon")
        def test_needs_the_moon():
            pass
        """,
        CI="true",
    )
    assert run.returncode == 1, run.stdout
    assert "needs the moon, which CI installs: it is missing" in run.stdout
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs the moon"):
        missing("the moon")
    with pytest.raises(pytest.skip.Exception, match="needs the acp-of-the-moon extra"):
        import_or_skip("acp_of_the_moon", "the acp-of-the-moon extra")
