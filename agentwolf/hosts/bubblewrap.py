"""A workspace's sandbox: pydantic-ai's `WorkspaceBackend` whose commands run under bubblewrap.

The workspace is a folder on the worker host. Commands see it at the same absolute path, as the only
writable mount; the system (`/usr` and a few files of `/etc`) is read-only and nothing else of the
host is there (no home, no `/work`, no other workspace), `/tmp` is a small private tmpfs. Each command
gets its own namespaces (`--unshare-all`: no network unless the worker policy allows it, its own PIDs,
so nothing it starts outlives it), an environment of its own (never the worker's), and rlimits on CPU
time, address space, processes and file size. When the worker runs as root, the command runs as an
unprivileged user of its own (one per workspace, with no capabilities), so the process limit counts
only its processes and it cannot read what the worker's user can; otherwise it runs as the worker's
user in a user namespace. The workspace's disk use is checked after each command and before each
write.

File operations run in the worker (no process per read) but only inside the workspace: a path, or a
symlink a command left, that resolves outside it is refused, and when the worker is root they obey the
sandbox user's permission bits, so they see what a command would.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat as stat_module
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread
from pydantic_ai.workspaces import (
    CommandResult,
    LocalWorkspaceBackend,
    WorkspaceCommand,
    WorkspaceError,
    WorkspaceRef,
    WorkspaceUnavailableError,
)

BWRAP = "bwrap"
PROVIDER = "bubblewrap"

SYSTEM_DIRS = ("/usr",)
SYSTEM_LINKS = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
)
"""What of `/etc` programs need (the loader, users, time zone, certificates); not shadow, not keys."""
NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf")
WATCH_INTERVAL = 0.2
"""Seconds between checks that a running command's workspace folder still exists."""
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
UID_BASE, UID_SPAN = 200_000, 60_000
"""Sandbox users (root workers only): one per workspace, from its name, in a range no account uses."""


class SandboxUnavailable(RuntimeError):
    """This worker cannot run sandboxed commands (no bubblewrap) and its policy does not allow
    unsandboxed ones."""


class WorkspaceLimitError(WorkspaceError):
    """A command or write went past one of the workspace's limits; `stdout`/`stderr` hold the output."""

    def __init__(self, message: str, *, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


@dataclass(frozen=True)
class SandboxLimits:
    """What one command may use (rlimits: CPU seconds and file size per process, address space per
    process, processes of the sandbox user) and what the workspace may hold on disk."""

    cpu_s: int = 60
    memory_mb: int = 1024
    processes: int = 64
    file_mb: int = 100
    disk_mb: int = 500
    tmp_mb: int = 64


@dataclass(frozen=True)
class SandboxPolicy:
    """What the worker lets a sandbox reach: the network (all or nothing), extra read-only folders
    (a toolchain outside `/usr`) and PATH entries for them."""

    network: bool = False
    read_only: tuple[str, ...] = ()
    path: tuple[str, ...] = ()
    limits: SandboxLimits = field(default_factory=SandboxLimits)


def bwrap_path() -> str | None:
    return shutil.which(BWRAP)


def sandbox_uid(name: str) -> int:
    return UID_BASE + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % UID_SPAN


def _as_root() -> bool:
    return os.geteuid() == 0


def disk_use(root: Path) -> int:
    """Bytes the files under `root` hold (symlinks not followed)."""
    total, stack = 0, [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                total += info.st_blocks * 512 if hasattr(info, "st_blocks") else info.st_size
                if stat_module.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
    return total


def _parents(path: str) -> list[str]:
    """bwrap arguments making the folders above `path` (outside the system's) traversable, whatever
    the host's modes: bwrap would copy them (a 0700 home would stop the sandbox user)."""
    out: list[str] = []
    for parent in reversed(Path(path).parents[:-1]):
        if not any(parent == Path(s) or Path(s) in parent.parents for s in SYSTEM_DIRS):
            out += ["--perms", "0755", "--dir", str(parent)]
    return out


class BubblewrapBackend(LocalWorkspaceBackend):
    """A folder on this host as a workspace, its commands run under bubblewrap (module docstring).

    `name` identifies the workspace (its ref's id, and the sandbox user of a root worker). With
    `create`, the first operation makes the folder (and the ref exists from then on); without, the
    backend attaches to the folder, and a missing one is `WorkspaceUnavailableError`. Removing it is
    the caller's call."""

    def __init__(
        self,
        working_dir: str | Path,
        *,
        name: str,
        create: bool = False,
        policy: SandboxPolicy | None = None,
    ) -> None:
        super().__init__(working_dir)
        self._policy = policy or SandboxPolicy()
        self._bwrap = bwrap_path()
        self._uid = sandbox_uid(name) if _as_root() else None
        self._named = WorkspaceRef(provider=PROVIDER, id=name)
        self._created: WorkspaceRef | None = None if create else self._named
        self._creating = threading.Lock()

    @property
    def ref(self) -> WorkspaceRef | None:  # type: ignore[override]  # None until a fresh one exists
        return self._created

    def _ensure_alive(self) -> Path:
        if self._created is None:
            with self._creating:  # concurrent first operations make one folder
                if self._created is None:
                    self._working_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
                    if self._uid is not None:
                        os.chown(self._working_dir, self._uid, self._uid)
                    self._created = self._named
        return super()._ensure_alive()

    @property
    def uid(self) -> int | None:
        """The sandbox user's uid on a root worker (files the worker writes are given to it)."""
        return self._uid

    # -- commands -------------------------------------------------------------------------------------

    def _argv(
        self, command: WorkspaceCommand, shell: bool, env: Mapping[str, str] | None, root: str
    ) -> list[str]:
        if self._bwrap is None:
            raise SandboxUnavailable("bubblewrap (`bwrap`) is not installed on this worker")
        policy, limits = self._policy, self._policy.limits
        argv = [self._bwrap, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid"]
        argv += ["--unshare-uts", "--unshare-cgroup-try"]
        if not policy.network:
            argv.append("--unshare-net")
        if self._uid is None:
            argv.append("--unshare-user")
        for folder in SYSTEM_DIRS:
            argv += ["--ro-bind", folder, folder]
        for link, target in SYSTEM_LINKS.items():
            argv += ["--symlink", target, link]
        for path in (*ETC_FILES, *(NETWORK_FILES if policy.network else ())):
            argv += ["--ro-bind-try", path, path]
        argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limits.tmp_mb << 20)]
        argv += ["--tmpfs", "/tmp"]
        for path in policy.read_only:
            argv += [*_parents(path), "--ro-bind-try", path, path]
        argv += [*_parents(root), "--bind", root, root, "--chdir", root, "--clearenv"]
        variables = {
            "PATH": ":".join((*policy.path, BASE_PATH)),
            "HOME": root,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        }
        for name, value in variables.items():
            argv += ["--setenv", name, value]
        if self._uid is not None:
            argv += ["setpriv", f"--reuid={self._uid}", f"--regid={self._uid}", "--clear-groups"]
            argv += ["--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]
        argv += [
            "prlimit",
            f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",  # SIGXCPU first: the error can say why
            f"--as={limits.memory_mb << 20}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_mb << 20}",
            "--",
        ]
        # Through `sh`, so a missing program exits 127 as the protocol asks (bwrap would say 1).
        if shell:
            assert isinstance(command, str)
            return [*argv, "/bin/sh", "-c", command]
        return [*argv, "/bin/sh", "-c", 'exec "$@"', "sh", *command]

    async def run(
        self,
        command: WorkspaceCommand,
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        if isinstance(command, str) != shell:
            raise TypeError("a string command needs shell=True, an argv sequence shell=False")
        root = await self.working_dir()
        argv = self._argv(command, shell, env, root)
        result: CommandResult | Exception | None = None
        async with anyio.create_task_group() as group:

            async def command_run() -> None:
                nonlocal result
                try:
                    result = await super(BubblewrapBackend, self).run(argv, env={}, timeout=timeout)
                except Exception as exc:  # raised below, by itself rather than in a group
                    result = exc
                group.cancel_scope.cancel()

            group.start_soon(command_run)
            # Inside the sandbox the bind mount keeps a deleted folder alive: watch it from here.
            while os.path.isdir(root):
                await anyio.sleep(WATCH_INTERVAL)
            group.cancel_scope.cancel()
        if result is None:
            raise WorkspaceUnavailableError(f"the workspace folder {root} was removed while the command ran")
        if isinstance(result, Exception):
            raise result
        if result.exit_code == 128 + 24:  # SIGXCPU
            raise WorkspaceLimitError(
                f"the command used its {self._policy.limits.cpu_s} s of CPU time and was stopped",
                stdout=result.stdout,
                stderr=result.stderr,
            )
        if result.exit_code == 128 + 25:  # SIGXFSZ
            raise WorkspaceLimitError(
                f"the command wrote a file past the {self._policy.limits.file_mb} MB limit and was stopped",
                stdout=result.stdout,
                stderr=result.stderr,
            )
        await self._check_disk(result)
        return result

    async def _check_disk(self, result: CommandResult | None = None, adding: int = 0) -> None:
        used = await anyio.to_thread.run_sync(disk_use, Path(await self.working_dir()))
        limit = self._policy.limits.disk_mb << 20
        if used + adding > limit:
            raise WorkspaceLimitError(
                f"the workspace holds {used / 2**20:.1f} MB, past its {self._policy.limits.disk_mb} MB "
                "limit: delete files before writing more",
                stdout=result.stdout if result else "",
                stderr=result.stderr if result else "",
            )

    # -- files: inside the workspace only, with the sandbox user's rights -----------------------------

    def _path(self, path: str) -> Path:  # type: ignore[override]  # an instance method here: it needs the root
        target = Path(path)
        if not target.is_absolute():
            raise ValueError(f"path must be absolute, got {path!r}")
        root = self._ensure_alive()
        resolved = Path(os.path.realpath(target))
        if resolved != root and root not in resolved.parents:
            raise PermissionError(errno.EACCES, "outside the workspace", path)
        return target

    def _may(self, path: Path, want: int) -> None:
        """On a root worker, refuse what the sandbox user may not do to `path` (`want`: 4 read, 2 write)."""
        if self._uid is None:
            return
        try:
            info = path.stat()
        except FileNotFoundError:
            return
        shift = 6 if info.st_uid == self._uid else 3 if info.st_gid == self._uid else 0
        if not (info.st_mode >> shift) & want:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def _give(self, path: Path) -> None:
        """Hand `path` and the folders above it up to the root to the sandbox user (root worker)."""
        if self._uid is None:
            return
        root = self._ensure_alive()
        for item in (path, *path.parents):
            if item == root or root not in item.parents:
                break
            if item.exists() and item.lstat().st_uid != self._uid:
                os.lchown(item, self._uid, self._uid)

    async def read_bytes(self, path: str) -> bytes:
        await anyio.to_thread.run_sync(lambda: self._may(self._path(path), 4))
        return await super().read_bytes(path)

    async def write_bytes(self, path: str, data: bytes) -> None:
        target = await anyio.to_thread.run_sync(self._path, path)
        await anyio.to_thread.run_sync(self._may, target, 2)
        await self._check_disk(adding=len(data))
        await super().write_bytes(path, data)
        await anyio.to_thread.run_sync(self._give, target)

    async def make_dir(self, path: str) -> None:
        target = await anyio.to_thread.run_sync(self._path, path)
        await super().make_dir(path)
        await anyio.to_thread.run_sync(self._give, target)

    async def remove(self, path: str) -> None:
        root = Path(await self.working_dir())
        target = Path(path)
        if target.is_absolute() and Path(os.path.normpath(target)) in (root, *root.parents):
            raise ValueError("cannot remove the workspace root or its ancestor")
        await super().remove(path)


def unavailable_reason() -> str | None:
    """Why this worker cannot sandbox (one sentence), or None."""
    if bwrap_path() is None:
        return (
            "this worker cannot run workspace agents: bubblewrap is not installed (install the `bubblewrap` "
            "package, or let the worker policy run them unsandboxed with `workspaces: {sandbox: none}`)"
        )
    return None
