"""The worker's malloc tuning (worker/memory.py): threads share two arenas instead of one each, and
settings given in the environment win. Each case runs in a fresh process: arenas are per process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

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
