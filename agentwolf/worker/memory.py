"""glibc's malloc tuned for a worker that lives for weeks (measured with bench/longrun.py --memory).

Left at its defaults, a worker's RSS grew with a long session's turns although its live Python heap
did not (tracemalloc): glibc gives each thread that allocates its own arena (up to 8 per core: the
Temporal core's Rust threads, the workflow and activity threads), and freed memory in one arena is
not reused by another; and its mmap threshold rises with every large block freed (up to 32 MB), so
the growing transcript's serialised copies move from mmap (returned when freed) into the heaps and
fragment them. Two arenas and a fixed threshold stop that growth (bench/longrun.py's worker: 1.51x
-> 1.22x RSS from turn 50 to 400; what is left is the transcript, kept whole by design, and
pymalloc's arenas around it). The same settings as `MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072`,
which, when set, win.

glibc returns a heap's free memory to the system only from its top, and only in the main arena: a
worker that has freed a long session's old copies keeps their pages. `Trimmer` hands them back with
`malloc_trim(0)` (which also releases free pages inside every arena) once the worker has worked since
the last trim, from a thread of its own, never from workflow code.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import platform
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # mallopt parameters (malloc.h)
_M_ARENA_MAX = -8
ARENAS = 2
MMAP_THRESHOLD = 128 * 1024
"""glibc's initial threshold, fixed: blocks this large and larger are mapped and unmapped on free."""


def tune_malloc() -> bool:
    """Apply the settings (before the process starts its threads, where it can); False off glibc.
    Settings the environment gives glibc are left as they are."""
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    for env, param, value in (
        ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENAS),
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ):
        if env not in os.environ and mallopt(param, value) != 1:
            log.warning("could not set glibc's malloc parameter %d to %d", param, value)
            return False
    return True


def malloc_trim() -> bool:
    """Return the free memory of every malloc arena to the system; False off glibc (nothing done)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    ctypes.CDLL(None).malloc_trim(0)
    return True


TRIM_EVERY = 10.0
"""Seconds between checks whether to trim."""
TRIM_AFTER_CPU = 1.0
"""CPU seconds the process spent since the last trim that make the next one worth it: an idle worker
frees nothing, so it is not trimmed again and again (a trim walks every arena under its lock)."""


class Trimmer:
    """Trims the worker's malloc heap every `every` seconds once it has spent `after_cpu` CPU seconds
    since the last trim. `trim` and `cpu` are what it calls (tests give their own)."""

    def __init__(
        self,
        every: float = TRIM_EVERY,
        after_cpu: float = TRIM_AFTER_CPU,
        trim: Callable[[], bool] = malloc_trim,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.every, self.after_cpu, self._trim, self._cpu = every, after_cpu, trim, cpu
        self.trims = 0
        self._last = cpu()

    def due(self) -> bool:
        return self._cpu() - self._last >= self.after_cpu

    async def run(self) -> None:
        """Until cancelled; a trim runs in a thread (it takes milliseconds under the arenas' locks)."""
        while True:
            await asyncio.sleep(self.every)
            if self.due():
                self._last = self._cpu()
                if not await asyncio.to_thread(self._trim):
                    return  # not glibc: nothing to trim, ever
                self.trims += 1
