"""A session's workspace on its home host: the folder, the sandbox its commands run in, the six
tools, and bringing the folder back from a snapshot.

The folder is `$WOLF_HOME/workspaces/<tenant>/<key>` (the key from the session's workflow id, so a
fork has its own). It is the pydantic-ai backend's environment (hosts/bubblewrap.py); the tools
read and write through the backend, which keeps them inside the folder. `list_files` and `grep`
walk it without following symlinks. When the folder is missing (its host was lost, or this is a
fork's or rewind's first call), it is restored from the session's last snapshot first.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai.workspaces import (
    LocalWorkspaceBackend,
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceTimeoutError,
)
from temporalio.converter import DataConverter

from agentwolf import workspace_store
from agentwolf.config.manifest import WorkspaceSettings
from agentwolf.config.policy import WorkspacePolicy
from agentwolf.hosts.bubblewrap import (
    BubblewrapBackend,
    SandboxLimits,
    SandboxPolicy,
    SandboxUnavailable,
    WorkspaceLimitError,
    unavailable_reason,
)
from agentwolf.paths import data_dir
from agentwolf.workflows.workspace_tools import WorkspaceCall, WorkspaceResult, WorkspaceSnapshot

GREP_MATCHES = 500
"""Matches `grep` lists; the rest are counted."""
GREP_FILE_BYTES = 5 << 20
"""Files larger than this are not searched."""
LIST_ENTRIES = 2000
READ_BYTES = 20 << 20
"""The largest file `read_file` reads (the model gets it cut by the tool output limit anyway)."""
LOCK_POLL = 0.02
"""Seconds between tries of a busy workspace's lock."""


class ToolError(Exception):
    """What the model is told when a call cannot be done (a bad path, a non-unique edit)."""


def folder(tenant: str, workflow_id: str) -> Path:
    key = hashlib.sha256(workflow_id.encode()).hexdigest()[:24]
    return data_dir() / "workspaces" / tenant / key


def backend(root: Path, settings: WorkspaceSettings, policy: WorkspacePolicy) -> LocalWorkspaceBackend:
    """The folder's backend under the worker policy: sandboxed, or plain processes if it says `none`;
    a worker without bubblewrap refuses (SandboxUnavailable, one sentence)."""
    if policy.sandbox == "none":
        return LocalWorkspaceBackend(root)
    if (reason := unavailable_reason()) is not None:
        raise SandboxUnavailable(reason)
    limits = SandboxLimits(
        cpu_s=settings.cpu_s,
        memory_mb=settings.memory_mb,
        processes=settings.processes,
        file_mb=settings.file_mb,
        disk_mb=settings.disk_mb,
    )
    sandbox = SandboxPolicy(
        network=policy.network, read_only=tuple(policy.read_only), path=tuple(policy.path), limits=limits
    )
    return BubblewrapBackend(root, name=root.name, create=True, policy=sandbox)


async def off_loop(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


@asynccontextmanager
async def locked(root: Path) -> AsyncIterator[None]:
    """The folder to one call at a time (parallel calls, other worker processes of the host): a lock
    file beside it. Calls on one workspace take turns, like commands typed in one shell; and since
    nothing a command starts outlives it, no sandboxed process runs while a file tool resolves a
    path, so a symlink cannot be swapped in under it."""
    root.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(root.with_name(root.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:  # polled, not a blocking flock: a long command would hold a thread per waiter
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL)
        yield
    finally:
        os.close(fd)  # releases the lock


async def prepare(
    call: WorkspaceCall, root: Path, ws: LocalWorkspaceBackend, converter: DataConverter
) -> str | None:
    """(Under `locked`.) Make the folder ready: restored from the last snapshot when it is gone, or
    once per epoch when the call asks (a seed, a fork, a rewind). What the model is told about it (a
    lost host's folder restored), if anything."""
    marker = root.with_name(root.name + ".epoch")
    missing = not await asyncio.to_thread(root.is_dir)
    done = await asyncio.to_thread(lambda: marker.read_text() if marker.exists() else None)
    asked = call.restore and done != str(call.epoch)
    if call.last is not None and (asked or missing):
        uid = ws.uid if isinstance(ws, BubblewrapBackend) else None
        await workspace_store.restore(converter, call.last.tree, root, off_loop, uid)
        await asyncio.to_thread(marker.write_text, str(call.epoch))
        if missing and not call.restore:
            return (
                f"(The host holding this workspace was lost: it was restored as it was at the end of "
                f"turn {call.last.turn}; changes made after that are gone.)"
            )
    await ws.working_dir()  # a fresh folder is made here
    return None


SIDE_FILES = (workspace_store.INDEX_SUFFIX, ".lock", ".epoch")
"""What lives beside a workspace folder: its snapshot index, lock and restore epoch."""


def remove(root: Path) -> None:
    """The folder and what lives beside it (its snapshots stay in the payload store)."""
    shutil.rmtree(root, ignore_errors=True)
    for suffix in SIDE_FILES:
        root.with_name(root.name + suffix).unlink(missing_ok=True)


async def snapshot(root: Path, converter: DataConverter, turn: int) -> WorkspaceSnapshot:
    taken = await workspace_store.take(converter, root, off_loop, workspace_store.index_path(root))
    return WorkspaceSnapshot(
        turn=turn, tree=taken.tree, files=taken.files, bytes=taken.bytes, stored_bytes=taken.stored_bytes
    )


# -- the tools ---------------------------------------------------------------------------------------


def _inside(root: Path, path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise ToolError("`path` must be a non-empty string")
    full = os.path.normpath(os.path.join(root, path))
    if full != str(root) and not full.startswith(f"{root}/"):
        raise ToolError(f"{path!r} is outside the workspace")
    return full


def _shown(root: Path, full: str) -> str:
    return os.path.relpath(full, root)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob over relative paths: `**/` any folders (none too), `*` and `?` within one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def _files(root: Path, base: str) -> Iterator[str]:
    """Regular files under `base`, symlinks never followed, as paths relative to `base`."""
    for top, dirs, names in os.walk(base, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(top, name)
            if os.path.isfile(full) and not os.path.islink(full):
                yield os.path.relpath(full, base)


async def read_file(ws: LocalWorkspaceBackend, root: Path, args: dict[str, Any]) -> str:
    full = _inside(root, args.get("path"))
    size = (await ws.stat(full)).size or 0
    if size > READ_BYTES:
        raise ToolError(
            f"{_shown(root, full)} holds {size} bytes, more than read_file reads ({READ_BYTES}): read "
            "part of it with bash (head, tail, sed -n)"
        )
    data = await ws.read_bytes(full)
    if b"\0" in data[:8192]:
        return f"(a binary file of {len(data)} bytes)"
    text = data.decode("utf-8", errors="replace")
    offset, limit = args.get("offset"), args.get("limit")
    if offset is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max(int(offset or 1), 1) - 1
    end = start + int(limit) if limit is not None else len(lines)
    return "".join(lines[start:end])


async def write_file(ws: LocalWorkspaceBackend, root: Path, args: dict[str, Any]) -> str:
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("`content` must be a string")
    full = _inside(root, args.get("path"))
    data = content.encode()
    await ws.write_bytes(full, data)
    return f"wrote {len(data)} bytes to {_shown(root, full)}"


async def edit_file(ws: LocalWorkspaceBackend, root: Path, args: dict[str, Any]) -> str:
    old, new = args.get("old_string"), args.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        raise ToolError("`old_string` (not empty) and `new_string` must be strings")
    if old == new:
        raise ToolError("`old_string` and `new_string` are the same: nothing to change")
    full = _inside(root, args.get("path"))
    text = (await ws.read_bytes(full)).decode()
    count = text.count(old)
    if count == 0:
        raise ToolError(f"`old_string` does not occur in {_shown(root, full)}: nothing was changed")
    if count > 1 and not args.get("replace_all"):
        raise ToolError(
            f"`old_string` occurs {count} times in {_shown(root, full)}: give more surrounding text so "
            "it occurs once, or set `replace_all`; nothing was changed"
        )
    await ws.write_bytes(full, text.replace(old, new).encode())
    return f"replaced {count if args.get('replace_all') else 1} occurrence(s) in {_shown(root, full)}"


async def list_files(ws: LocalWorkspaceBackend, root: Path, args: dict[str, Any]) -> str:
    base = _inside(root, args.get("path") or ".")
    matcher = glob_regex(str(args.get("pattern") or "**/*"))

    def listed() -> list[str]:
        if not os.path.isdir(base) or os.path.islink(base):
            raise ToolError(f"{_shown(root, base)!r} is not a folder of the workspace")
        return [p for p in _files(root, base) if matcher.match(p)]

    found = await asyncio.to_thread(listed)
    more = f"\n... and {len(found) - LIST_ENTRIES} more" if len(found) > LIST_ENTRIES else ""
    return "\n".join(found[:LIST_ENTRIES]) + more if found else "(no files match)"


async def grep(ws: LocalWorkspaceBackend, root: Path, args: dict[str, Any]) -> str:
    try:
        regex = re.compile(str(args.get("pattern", "")), re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from None
    base = _inside(root, args.get("path") or ".")
    only = glob_regex(str(args["glob"])) if args.get("glob") else None

    def search() -> tuple[list[str], int]:
        hits: list[str] = []
        total = 0
        single = os.path.isfile(base) and not os.path.islink(base)
        paths = [os.path.basename(base)] if single else _files(root, base)
        top = os.path.dirname(base) if single else base
        for rel in paths:
            if only is not None and not only.match(rel):
                continue
            full = os.path.join(top, rel)
            if os.path.getsize(full) > GREP_FILE_BYTES:
                continue
            with open(full, "rb") as file:
                data = file.read()
            if b"\0" in data[:8192]:
                continue
            for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
                if regex.search(line):
                    total += 1
                    if len(hits) < GREP_MATCHES:
                        hits.append(f"{_shown(root, full)}:{number}:{line[:500]}")
        return hits, total

    hits, total = await asyncio.to_thread(search)
    more = f"\n... and {total - len(hits)} more matches" if total > len(hits) else ""
    return "\n".join(hits) + more if hits else "(no matches)"


async def bash(
    ws: LocalWorkspaceBackend, root: Path, args: dict[str, Any], settings: WorkspaceSettings
) -> tuple[str, bool]:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("`command` must be a non-empty string")
    asked = args.get("timeout_s")
    timeout = settings.bash_timeout_s
    if isinstance(asked, int | float) and asked > 0:
        timeout = min(float(asked), timeout)
    try:
        result = await ws.run(command, shell=True, timeout=timeout)
    except WorkspaceTimeoutError as exc:
        return _shown_output(f"timed out after {timeout:g} s and was stopped", exc.stdout, exc.stderr), True
    except WorkspaceLimitError as exc:
        return _shown_output(str(exc), exc.stdout, exc.stderr), True
    except WorkspaceOutputLimitError as exc:
        return _shown_output(str(exc), exc.stdout, exc.stderr), True
    return _shown_output(f"exit code {result.exit_code}", result.stdout, result.stderr), result.exit_code != 0


def _shown_output(head: str, stdout: str, stderr: str) -> str:
    parts = [head]
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts += ["[stderr]", stderr.rstrip("\n")]
    return "\n".join(parts)


FILE_TOOLS = {
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "list_files": list_files,
    "grep": grep,
}


async def run_tool(
    ws: LocalWorkspaceBackend, root: Path, tool: str, args: dict[str, Any], settings: WorkspaceSettings
) -> WorkspaceResult:
    """One tool call; what went wrong (a missing file, a non-unique edit, a limit) is the model's to
    read, as an error result."""
    try:
        if tool == "bash":
            content, failed = await bash(ws, root, args, settings)
            return WorkspaceResult(content=content, is_error=failed)
        if tool not in FILE_TOOLS:
            return WorkspaceResult(content=f"unknown workspace tool {tool!r}", is_error=True)
        return WorkspaceResult(content=await FILE_TOOLS[tool](ws, root, args))
    except ToolError as exc:
        return WorkspaceResult(content=str(exc), is_error=True)
    except FileNotFoundError as exc:
        return WorkspaceResult(
            content=f"no such file: {_shown(root, str(exc.filename or ''))}", is_error=True
        )
    except IsADirectoryError:
        return WorkspaceResult(content=f"{args.get('path')} is a folder, not a file", is_error=True)
    except NotADirectoryError:
        return WorkspaceResult(content=f"a part of {args.get('path')} is a file, not a folder", is_error=True)
    except PermissionError as exc:
        return WorkspaceResult(content=f"not allowed: {args.get('path')} ({exc.strerror})", is_error=True)
    except UnicodeDecodeError:
        return WorkspaceResult(content=f"{args.get('path')} is not UTF-8 text", is_error=True)
    except WorkspaceError as exc:
        return WorkspaceResult(content=str(exc), is_error=True)
