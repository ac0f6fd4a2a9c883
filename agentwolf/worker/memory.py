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
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

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
