"""Keep the worker's secrets out of reach of the MCP servers it starts.

MCP stdio servers are programs a manifest chose; they run as the worker's user. They get a small
environment (the MCP SDK passes only HOME, PATH, USER and the like, plus the manifest's `env`), but a
process of the same user can read another's initial environment and memory through
`/proc/<pid>/environ` and `/proc/<pid>/mem`. Two measures close that:

- the worker marks itself non-dumpable (`PR_SET_DUMPABLE` 0): the kernel then lets only processes
  with CAP_SYS_PTRACE read its `/proc/<pid>/environ`, `mem`, `maps` and the like;
- when the worker itself holds capabilities (it runs as root), children start under
  `setpriv --bounding-set=-all --inh-caps=-all --no-new-privs`, so they hold none (no CAP_SYS_PTRACE).

What they still reach: files the worker's user can read. Run workers as a dedicated user whose
home holds nothing another tenant must not see (docs/features/security.md).
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import sys

log = logging.getLogger(__name__)

_PR_SET_DUMPABLE = 4
_SETPRIV = ("--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--")


def protect_process() -> bool:
    """Make this process non-dumpable (Linux); False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("could not make the worker non-dumpable (errno %d)", ctypes.get_errno())
        return False
    return True


def has_capabilities() -> bool:
    """Whether this process holds any effective capability (root, or granted ones)."""
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return int(line.split()[1], 16) != 0


def unprivileged(program: str, args: list[str]) -> tuple[str, list[str]]:
    """The command line that runs `program` without the worker's capabilities."""
    if not has_capabilities():
        return program, args
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        log.warning("the worker holds capabilities and `setpriv` is missing: MCP servers keep them")
        return program, args
    return setpriv, [*_SETPRIV, program, *args]
