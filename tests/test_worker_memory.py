"""The worker's malloc tuning (worker/memory.py): threads share two arenas instead of one each, and
settings given in the environment win (each case runs in a fresh process: arenas are per process);
the trimmer returns freed memory after work, not while idle."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys

import pytest

from agentwolf.worker.memory import Trimmer, malloc_trim
from tests.conftest import wait_for

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

PROBE = """
import ctypes, sys, threading
from agentwolf.worker.memory import tune_malloc

tuned = tune_malloc() if sys.argv[1] == "tuned" else None
kept = []
together = threading.Barrier(6)
def allocate():
    together.wait()  # all alive at once: a thread that ended hands its arena on to the next
    kept.append([bytearray(4000) for _ in range(200)])  # past pymalloc's 512 B: from the thread's arena
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
out = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
print(tuned, open(sys.argv[2]).read().count("<heap nr="))
"""


def _arenas(tmp_path, mode: str, **env: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(tmp_path / f"{mode}.xml")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=True,
    ).stdout.split()
    return out[0], int(out[1])


def test_worker_threads_share_two_malloc_arenas_unless_the_environment_says(tmp_path):
    assert _arenas(tmp_path, "tuned") == ("True", 2)
    untuned = _arenas(tmp_path, "plain")[1]
    assert untuned > 2  # glibc's default: an arena per thread that allocates (up to 8 per core)
    # MALLOC_ARENA_MAX given by whoever runs the worker is theirs to choose.
    assert _arenas(tmp_path, "tuned", MALLOC_ARENA_MAX="4")[1] in range(3, 5)


async def test_the_trimmer_trims_after_work_and_leaves_an_idle_worker_alone():
    """A trim follows CPU spent since the last one; an idle process is not trimmed again."""
    cpu = [0.0]
    trimmed: list[float] = []
    trimmer = Trimmer(
        every=0.01, after_cpu=1.0, trim=lambda: trimmed.append(cpu[0]) is None, cpu=lambda: cpu[0]
    )
    task = asyncio.create_task(trimmer.run())
    try:
        cpu[0] = 0.5  # too little work yet
        await asyncio.sleep(0.1)
        assert trimmed == []
        cpu[0] = 1.5
        await wait_for(lambda: trimmed == [1.5])
        await asyncio.sleep(0.1)  # idle since: no second trim
        assert trimmed == [1.5] and trimmer.trims == 1
        cpu[0] = 2.6
        await wait_for(lambda: trimmed == [1.5, 2.6])
    finally:
        task.cancel()
    assert malloc_trim() is True  # glibc here (the module is skipped elsewhere)


async def test_a_trimmer_off_glibc_stops():
    trimmer = Trimmer(every=0.01, after_cpu=0.0, trim=lambda: False)
    await asyncio.wait_for(trimmer.run(), timeout=30)
    assert trimmer.trims == 0
