"""The workspace half of `WolfClient`: seeding a session's workspace from a local folder, and reading
its snapshots (`wolf workspace ls|cat|get|diff`) straight from the payload store, by the references
the session records (its snapshot query), so no worker has to be up."""

from __future__ import annotations

import asyncio
import difflib
import io
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentwolf.client.parts import ClientCore

if TYPE_CHECKING:
    from agentwolf.workflows.workspace_tools import WorkspaceSnapshot, WorkspaceState


async def _off_loop(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


class WorkspaceMethods(ClientCore):
    """Workspaces of this client's tenant's sessions."""

    async def seed_workspace(self, folder: str | Path) -> WorkspaceState:
        """A new session's workspace state: `folder` copied into the payload store as turn 0's
        snapshot, which the session's first workspace call restores."""
        from agentwolf.workflows.workspace_tools import WorkspaceSnapshot, WorkspaceState
        from agentwolf.workspace_store import take

        root = Path(folder).expanduser()
        if not root.is_dir():
            raise ValueError(f"{folder} is not a folder")
        taken = await take(self.client.data_converter, root, _off_loop)
        seed = WorkspaceSnapshot(turn=0, tree=taken.tree, files=taken.files, bytes=taken.bytes)
        return WorkspaceState(snapshots=[seed], restore=True)

    async def workspace_snapshots(self, session_id: str) -> list[WorkspaceSnapshot]:
        """The session's workspace snapshots, by turn (0: as seeded)."""
        snapshot = await self.snapshot(session_id)
        return list(snapshot.workspace.snapshots) if snapshot.workspace else []

    async def workspace_at(self, session_id: str, at: int | None = None) -> WorkspaceSnapshot:
        """The snapshot of turn `at` (the last one at or before it; None: the latest)."""
        shots = [s for s in await self.workspace_snapshots(session_id) if at is None or s.turn <= at]
        if not shots:
            raise ValueError(
                f"session {session_id!r} has no workspace snapshot" + (f" at turn {at}" if at else "")
            )
        return max(shots, key=lambda s: s.turn)

    async def workspace_files(self, session_id: str, at: int | None = None) -> dict[str, dict[str, Any]]:
        """Every entry of the workspace at turn `at` by path: kind `f`/`d`/`l`, mode, size."""
        from agentwolf.workspace_store import listing

        return await listing(self.client.data_converter, (await self.workspace_at(session_id, at)).tree)

    async def workspace_read(self, session_id: str, path: str, at: int | None = None) -> bytes:
        from agentwolf.workspace_store import read

        return await read(self.client.data_converter, (await self.workspace_at(session_id, at)).tree, path)

    async def workspace_tar(self, session_id: str, at: int | None = None) -> bytes:
        """The whole tree at turn `at` as a tar archive."""
        from agentwolf.workspace_store import contents, listing

        tree = (await self.workspace_at(session_id, at)).tree
        entries = await listing(self.client.data_converter, tree)
        files = [p for p, e in entries.items() if e["k"] == "f"]
        datas = await contents(self.client.data_converter, tree.metadata, [entries[p]["r"] for p in files])
        by_path = dict(zip(files, datas, strict=True))
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for path, entry in sorted(entries.items()):
                info = tarfile.TarInfo(path)
                info.mode = entry["m"]
                if entry["k"] == "d":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif entry["k"] == "l":
                    info.type, info.linkname = tarfile.SYMTYPE, entry["t"]
                    tar.addfile(info)
                else:
                    info.size = len(by_path[path])
                    tar.addfile(info, io.BytesIO(by_path[path]))
        return out.getvalue()

    async def workspace_diff(self, session_id: str, at: int | None = None, since: int | None = None) -> str:
        """A unified diff of the workspace's text files from turn `since` (default: the first
        snapshot, the seed if it had one) to turn `at` (default: the latest)."""
        from agentwolf.workspace_store import contents, listing

        shots = await self.workspace_snapshots(session_id)
        if not shots:
            raise ValueError(f"session {session_id!r} has no workspace snapshot")
        new = await self.workspace_at(session_id, at)
        old = (
            min(shots, key=lambda s: s.turn) if since is None else await self.workspace_at(session_id, since)
        )
        converter = self.client.data_converter
        before, after = await listing(converter, old.tree), await listing(converter, new.tree)
        paths = sorted(
            p for p in {*before, *after} if "f" in (before.get(p, {}).get("k"), after.get(p, {}).get("k"))
        )
        changed = [p for p in paths if before.get(p, {}).get("r") != after.get(p, {}).get("r")]

        async def texts(entries: dict[str, dict[str, Any]], meta: dict[str, str]) -> dict[str, str]:
            present = [p for p in changed if entries.get(p, {}).get("k") == "f"]
            datas = await contents(converter, meta, [entries[p]["r"] for p in present])
            return {p: d.decode("utf-8", errors="replace") for p, d in zip(present, datas, strict=True)}

        old_texts, new_texts = await texts(before, old.tree.metadata), await texts(after, new.tree.metadata)
        lines: list[str] = []
        for path in changed:
            lines += difflib.unified_diff(
                old_texts.get(path, "").splitlines(keepends=True),
                new_texts.get(path, "").splitlines(keepends=True),
                f"a/{path}" if path in old_texts else "/dev/null",
                f"b/{path}" if path in new_texts else "/dev/null",
            )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
