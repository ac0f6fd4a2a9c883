"""How fast `wolf` starts, against what Python and its libraries cost.

`python bench/cli_start.py [--runs 5]` prints the median wall time of `wolf --help` vs `python -c pass`
(goal: <= 3x), and of `wolf status ID` against a running dev server (with a worker and an idle
session) vs the floor under any typer verb that reads a session (goal: <= 1.1x): Temporal's client,
typer and the pydantic it builds options with (`typer._adapters`), the pydantic data converter. The
floor itself is shown against `python -c "import temporalio.client"`, for scale. The dev server runs
on a free port with a throwaway database and stops at the end, with its worker. Beside each, the
median CPU time (user + system) of the same runs: on a loaded machine it moves less than wall time.
Every command runs once untimed first, with bytecode cached in a throwaway PYTHONPYCACHEPREFIX: an
installed wolf has its .pyc files, and PYTHONDONTWRITEBYTECODE (set in some shells) would otherwise
have every run compile agentwolf's sources while the floor reads site-packages' cache."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentwolf.client.wolf_client import WolfClient
from agentwolf.ops.devserver import start_dev_command
from agentwolf.ops.local_stack import listening

WOLF = str(Path(sys.executable).parent / "wolf")
ADAPTERS = "typer._adapters, " if importlib.util.find_spec("typer._adapters") else ""
"""typer builds options with pydantic in `typer._adapters` (0.29); a typer without it: the floor is
what is left."""
BUNDLED = Path(__file__).resolve().parents[1] / "agentwolf" / "examples" / "wolf.yaml"


@dataclass
class Timing:
    wall: float
    cpu: float


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_times(cmd: list[str], runs: int, env: dict[str, str]) -> Timing:
    """Median wall and CPU seconds of `runs` runs of `cmd` (output discarded; a failure stops the bench)."""
    walls, cpus = [], []
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)  # warm up
    for _ in range(runs):
        start, cpu = time.perf_counter(), cpu_of_children()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        walls.append(time.perf_counter() - start)
        cpus.append(cpu_of_children() - cpu)
    return Timing(statistics.median(walls), statistics.median(cpus))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def idle_session(address: str) -> str:
    wolf = await WolfClient.connect(address)
    sid = await wolf.start_session("assistant", BUNDLED)
    await wolf.status(sid)  # the worker answers: what `wolf status` will ask
    return sid


def report(name: str, ours: Timing, base: Timing, base_name: str, goal: float | None) -> None:
    ratio = ours.wall / base.wall
    verdict = "" if goal is None else f" ({'meets' if ratio <= goal else 'misses'} the {goal}x goal)"
    times = f"{ours.wall * 1000:.0f} ms vs {base_name} {base.wall * 1000:.0f} ms"
    cpu = f"CPU {ours.cpu * 1000:.0f} vs {base.cpu * 1000:.0f} ms = {ours.cpu / base.cpu:.2f}x"
    print(f"{name}: {times} = {ratio:.2f}x{verdict}; {cpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    plain = {**os.environ, "NO_COLOR": "1"}
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE", "TEMPORAL_NAMESPACE", "PYTHONDONTWRITEBYTECODE"):
        plain.pop(name, None)
    bytecode = tempfile.TemporaryDirectory()
    env = {**plain, "PYTHONPYCACHEPREFIX": bytecode.name}  # the timed commands'
    report(
        "wolf --help",
        median_times([WOLF, "--help"], runs, env),
        median_times([sys.executable, "-c", "pass"], runs, env),
        "python -c pass",
        3.0,
    )
    port = free_port()
    address = f"127.0.0.1:{port}"
    data = tempfile.TemporaryDirectory()
    cmd = start_dev_command(port, str(Path(data.name) / "temporal.db"), ui=False)
    server = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    worker = None
    try:
        deadline = time.monotonic() + 30
        while not listening(address):
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the dev server did not start")
            time.sleep(0.1)
        worker = subprocess.Popen(
            [sys.executable, "-m", "agentwolf.worker", "--address", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**plain, "WOLF_MODEL": "local:demo"},
        )
        sid = asyncio.run(idle_session(address))
        # What any typer verb that reads a session imports before agentwolf's own code runs: typer
        # builds a command's options with pydantic (typer._adapters), and the reply is a pydantic model.
        floor = f"import temporalio.client, typer, {ADAPTERS}temporalio.contrib.pydantic"
        floor_time = median_times([sys.executable, "-c", floor], runs, env)
        report(
            "wolf status",
            median_times([WOLF, "status", sid, "--address", address], runs, env),
            floor_time,
            "the floor",
            1.1,
        )
        report(
            "the floor (" + floor + ")",
            floor_time,
            median_times([sys.executable, "-c", "import temporalio.client"], runs, env),
            "import temporalio.client",
            None,
        )
    finally:
        for proc in (worker, server):
            if proc is not None:
                proc.terminate()
                proc.wait(15)
        data.cleanup()
        bytecode.cleanup()


if __name__ == "__main__":
    main()
