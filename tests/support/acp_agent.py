"""A scripted ACP agent (ACP Python SDK, stdio) for tests: streams text, asks permission, runs a
"tool" whose side effect is a counter file, and (unless ACP_NO_LOAD is set) supports session/load
backed by a file, replaying the conversation as the protocol says.

Environment: ACP_STATE (folder for sessions and the counter), ACP_NO_LOAD, ACP_CHUNK_DELAY (seconds
between words). A prompt containing "permission" first asks to run the tool `mark` (call id `mark-1`,
kind `edit`); one containing "slow" streams 30 words. A session that already ran the tool does not run
it again, unless the prompt says "again". The option each permission request was answered with is
appended to ACP_STATE/answers.

Settings as Claude's adapter reads them: a session starts in the mode its working directory's
`.claude/settings.json` names (`permissions.defaultMode`), and runs tools that file's
`permissions.allow` lists without asking unless `_meta.claudeCode.options.settingSources` leaves
`project` out; in mode `bypassPermissions` it never asks. Each new session's HOME, CLAUDE_CONFIG_DIR and
setting sources go to ACP_STATE/sessions, each `session/set_mode` to ACP_STATE/modes.

A prompt containing "fswrite", when the client announced the fs capability, writes `notes/hello.txt`
in the session's cwd with `fs/write_text_file` and reads it back, then tries to write and read outside
it (`../`, absolute paths); each outcome goes to ACP_STATE/fs as a JSON line."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    Client,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    PermissionOption,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    ToolCallUpdate,
)

STATE = Path(os.environ["ACP_STATE"])
LOADS = not os.environ.get("ACP_NO_LOAD")
DELAY = float(os.environ.get("ACP_CHUNK_DELAY", "0.01"))
MODES = ("default", "bypassPermissions")
ALL_SOURCES = ["user", "project", "local"]


class Scripted(Agent):
    def __init__(self) -> None:
        self.cancelled: set[str] = set()
        self.fs = False

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, **_: Any
    ) -> InitializeResponse:
        (STATE / "pids").open("a").write(f"{os.getpid()}\n")
        fs = client_capabilities.fs if client_capabilities else None
        self.fs = bool(fs and fs.read_text_file and fs.write_text_file)
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities(load_session=LOADS)
        )

    async def new_session(self, cwd: str, **meta: Any) -> NewSessionResponse:
        session_id = uuid.uuid4().hex[:12]
        sources = meta.get("claudeCode", {}).get("options", {}).get("settingSources", ALL_SOURCES)
        settings = _project_settings(cwd).get("permissions", {})
        mode = settings.get("defaultMode", "default")  # the adapter reads it whatever the sources
        allow = settings.get("allow", []) if "project" in sources else []
        said = {
            "home": os.environ.get("HOME"),
            "config": os.environ.get("CLAUDE_CONFIG_DIR"),
            "sources": sources,
        }
        (STATE / "sessions").open("a").write(json.dumps(said) + "\n")
        state = {"cwd": cwd, "history": [], "tool_done": False, "mode": mode, "allow": allow}
        self._save(session_id, state)
        return NewSessionResponse(session_id=session_id, modes=_modes(mode))

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        path = STATE / f"{session_id}.json"
        if not LOADS or not path.exists():
            raise RequestError.resource_not_found(session_id)
        state = json.loads(path.read_text())
        for text in state["history"]:  # the protocol: replay it all
            await self.client.session_update(session_id, update_agent_message_text(text))
        (STATE / "loads").open("a").write(f"{session_id}\n")
        return LoadSessionResponse(modes=_modes(state["mode"]))

    async def set_session_mode(self, session_id: str, mode_id: str, **_: Any) -> SetSessionModeResponse:
        if mode_id not in MODES:
            raise RequestError.invalid_params({"mode_id": mode_id})
        state = self._load(session_id)
        state["mode"] = mode_id
        self._save(session_id, state)
        (STATE / "modes").open("a").write(f"{mode_id}\n")
        return SetSessionModeResponse()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        state = self._load(session_id)
        text = " ".join(getattr(block, "text", "") for block in prompt)
        (STATE / "prompts").open("a").write(json.dumps(text) + "\n")
        self.cancelled.discard(session_id)
        await self.client.session_update(session_id, update_agent_thought_text("thinking it over"))
        if "permission" in text and (not state["tool_done"] or "again" in text):
            await self.client.session_update(
                session_id, start_tool_call("mark-1", "write the mark file", kind="edit", status="pending")
            )
            allowed = state["mode"] == "bypassPermissions" or "mark" in state["allow"]
            if not allowed:
                answer = await self.client.request_permission(
                    session_id,
                    ToolCallUpdate(tool_call_id="mark-1", title="write the mark file", raw_input={"n": 1}),
                    [
                        PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                        PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
                        PermissionOption(option_id="no", name="Reject", kind="reject_once"),
                    ],
                )
                chosen = (
                    answer.outcome.option_id if isinstance(answer.outcome, AllowedOutcome) else "cancelled"
                )
                (STATE / "answers").open("a").write(f"{chosen}\n")
                allowed = chosen in ("yes", "always")
            if allowed:
                counter = STATE / "counter"
                counter.write_text(str(int(counter.read_text() if counter.exists() else "0") + 1))
                state["tool_done"] = True
                self._save(session_id, state)
            await self.client.session_update(
                session_id,
                update_tool_call("mark-1", status="completed" if allowed else "failed"),
            )
        if "fswrite" in text and self.fs:
            await self._fs(session_id, state["cwd"])
        words = [f"w{i}" for i in range(30)] if "slow" in text else []
        reply = ["ACP", "answer", "to:", *text.split()[-3:], *words]
        said = []
        for word in reply:
            if session_id in self.cancelled:
                return PromptResponse(stop_reason="cancelled")
            said.append(word)
            await self.client.session_update(session_id, update_agent_message_text(word + " "))
            await asyncio.sleep(DELAY)
        state["history"].append(" ".join(said) + " ")
        self._save(session_id, state)
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **_: Any) -> None:
        self.cancelled.add(session_id)
        (STATE / "cancels").open("a").write(f"{session_id}\n")

    def _load(self, session_id: str) -> dict[str, Any]:
        path = STATE / f"{session_id}.json"
        if not path.exists():
            raise RequestError.resource_not_found(session_id)
        return json.loads(path.read_text())

    async def _fs(self, session_id: str, cwd: str) -> None:
        mine = os.path.join(cwd, "notes", "hello.txt")
        attempts: list[tuple[str, str]] = [
            ("write", mine),
            ("read", mine),
            ("write", os.path.join(cwd, "..", "escape.txt")),
            ("write", str(STATE / "abs-escape.txt")),
            ("read", "../../../../../../etc/hostname"),
            ("read", "/etc/hostname"),
        ]
        for op, path in attempts:
            said: dict[str, Any] = {"op": op, "path": path}
            try:
                if op == "write":
                    await self.client.write_text_file(session_id, path, "hi from acp\n")
                else:
                    said["content"] = (await self.client.read_text_file(session_id, path)).content
                said["ok"] = True
            except RequestError as exc:
                said.update(ok=False, error=f"{exc} {exc.data}")
            (STATE / "fs").open("a").write(json.dumps(said) + "\n")

    def _save(self, session_id: str, state: dict[str, Any]) -> None:
        (STATE / f"{session_id}.json").write_text(json.dumps(state))


def _project_settings(cwd: str) -> dict[str, Any]:
    path = Path(cwd) / ".claude" / "settings.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _modes(current: str) -> SessionModeState:
    return SessionModeState(
        current_mode_id=current, available_modes=[SessionMode(id=m, name=m) for m in MODES]
    )


if __name__ == "__main__":
    asyncio.run(run_agent(Scripted()))
