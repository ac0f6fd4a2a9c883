"""A workspace's tools as the model sees them, what a call sends to `wolf.workspace`, and what the
session records of its workspace (its home host and a snapshot per turn)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agentwolf.config.manifest import WorkspaceSettings
from agentwolf.workflows.archive import StoredRef
from agentwolf.workflows.contracts import HostRef, ToolCallInput, ToolSpec

WORKSPACE = "@workspace"
"""The `server` of the workspace tools: they run as `wolf.workspace` on the workspace's home host."""

READ_ONLY = frozenset({"read_file", "list_files", "grep"})
"""Tools that change nothing: safe to run again after a worker loss."""

_PATH = {"type": "string", "description": "A path in the workspace, relative to its root."}


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        server=WORKSPACE,
        tool=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
        repeat_safe=name in READ_ONLY,
    )


def workspace_tools(settings: WorkspaceSettings) -> list[ToolSpec]:
    """The six tools coding agents know, by the names they know them."""
    return [
        _spec(
            "read_file",
            "Read a text file of the workspace (lines `offset` on, at most `limit` of them).",
            {
                "path": _PATH,
                "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
                "limit": {"type": "integer", "minimum": 1},
            },
            ["path"],
        ),
        _spec(
            "write_file",
            "Write a file of the workspace (created with its folders, or replaced whole).",
            {"path": _PATH, "content": {"type": "string"}},
            ["path", "content"],
        ),
        _spec(
            "edit_file",
            "Replace `old_string` by `new_string` in a file. `old_string` must occur exactly once "
            "(give more context to make it unique) unless `replace_all` is true.",
            {
                "path": _PATH,
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": False},
            },
            ["path", "old_string", "new_string"],
        ),
        _spec(
            "list_files",
            "List the workspace's files matching a glob (`**/*.py`; `*` alone stays in one folder).",
            {"pattern": {"type": "string", "default": "**/*"}, "path": {**_PATH, "default": "."}},
            [],
        ),
        _spec(
            "grep",
            "Search file contents for a regular expression: `path:line:text` for each match.",
            {
                "pattern": {"type": "string", "description": "A Python regular expression."},
                "path": {**_PATH, "default": "."},
                "glob": {"type": "string", "description": "Only files matching this glob."},
                "ignore_case": {"type": "boolean", "default": False},
            },
            ["pattern"],
        ),
        _spec(
            "bash",
            f"Run a shell command in the workspace (a sandbox: no network, no host files) and get its "
            f"exit code and output; it is stopped after `timeout_s` (at most {settings.bash_timeout_s:g}).",
            {"command": {"type": "string"}, "timeout_s": {"type": "number", "exclusiveMinimum": 0}},
            ["command"],
        ),
    ]


class WorkspaceSnapshot(BaseModel):
    """The workspace as it was at the end of a turn (0: as seeded), in the payload store: the
    reference of its root folder's tree (workspace_store.py)."""

    turn: int
    tree: StoredRef
    files: int = 0
    bytes: int = 0
    stored_bytes: int = 0
    """What this snapshot added to the store (files and folders that changed since the last one)."""


class WorkspaceState(BaseModel):
    """What the session keeps of its workspace: where it lives and its snapshots by turn."""

    home: str | None = None
    """The task queue of the host whose folder holds it; None: not placed yet (or its host is gone)."""
    snapshots: list[WorkspaceSnapshot] = []
    restore: bool = False
    """The next call starts from the last snapshot whatever the folder holds (after a fork or rewind)."""
    epoch: int = 0
    """Counts rewinds: a host restores once per epoch, however many parallel calls ask for it."""
    changed: bool = False
    """A tool that may change files ran since the last snapshot."""

    def last(self, line: set[int] | None = None) -> WorkspaceSnapshot | None:
        """The latest snapshot of a turn on the session's line (`line`: its turn numbers; 0, the
        seed, is always on it; None: any turn). A rewind keeps the set-aside turns' snapshots, so a
        redo finds them again."""
        fitting = [s for s in self.snapshots if line is None or s.turn == 0 or s.turn in line]
        return max(fitting, key=lambda s: s.turn) if fitting else None

    def rewound(self) -> WorkspaceState:
        """After a rewind or redo: the next call restores the line's last snapshot first."""
        return self.model_copy(update={"restore": True, "changed": False, "epoch": self.epoch + 1})

    def forked(self, line: set[int]) -> WorkspaceState:
        """A fork's start: the source's snapshots of the fork's line, restored in its own folder."""
        kept = [s for s in self.snapshots if s.turn == 0 or s.turn in line]
        return WorkspaceState(snapshots=kept, restore=True)


def turn_number(turn_id: str | None) -> int:
    """`turn-4` -> 4 (0 for none)."""
    return int(turn_id.removeprefix("turn-")) if turn_id and turn_id.startswith("turn-") else 0


def line_turns(turn_ids: list[str], cut_mid_turn: str | None = None) -> set[int]:
    """The turn numbers of a line (`turn_ids`), without a turn it was cut in the middle of (that
    turn's snapshot holds what its later steps did)."""
    return {turn_number(t) for t in turn_ids if t != cut_mid_turn}


class WorkspaceCall(BaseModel):
    """One tool call (or, with `tool` None, a snapshot) on the workspace's home host."""

    ref: HostRef
    tool: str | None
    arguments: dict[str, Any] = {}
    settings: WorkspaceSettings
    last: WorkspaceSnapshot | None = None
    """What to restore from when the folder is gone (or `restore` asks for it)."""
    restore: bool = False
    epoch: int = 0
    turn: int = 0
    """The turn this runs in (a snapshot is recorded as that turn's)."""
    home: str | None = None
    """As a local activity (a read on the worker running the session): the home it must be on."""
    agent: str = ""
    """The session's agent, whose capabilities' tool hooks run around the call ('' before they did)."""
    turn_id: str = ""
    call_id: str = ""

    def as_tool_call(self) -> ToolCallInput:
        """The call as the agent's tool hooks see it."""
        return ToolCallInput(
            ref=self.ref,
            server=WORKSPACE,
            tool=self.tool or "",
            arguments=self.arguments,
            call_id=self.call_id,
            agent=self.agent,
            turn_id=self.turn_id,
        )


class WorkspaceResult(BaseModel):
    content: str = ""
    is_error: bool = False
    restored: int | None = Field(None, description="The turn whose snapshot the folder was restored from.")
    snapshot: WorkspaceSnapshot | None = None
    elsewhere: bool = False
    """A local activity found the workspace's home is another host: nothing ran."""
