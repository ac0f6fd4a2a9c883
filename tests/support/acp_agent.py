"""A scripted ACP agent (ACP Python SDK, stdio) for tests: streams text, asks permission, runs a
"tool" whose side effect is a counter file, and (unless ACP_NO_LOAD is set) supports session/load
backed by a file, replaying the conversation as the protocol says.

Environment: ACP_STATE (folder for sessions and the counter), ACP_NO_LOAD, ACP_CHUNK_DELAY (seconds
between words). A prompt containing "permission" first asks to run the tool `mark` (call id `mark-1`);
one containing "slow" streams 30 words. A session that already ran the tool does not run it again."""

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
from acp.schema import AgentCapabilities, AllowedOutcome, PermissionOption, ToolCallUpdate

STATE = Path(os.environ["ACP_STATE"])
LOADS = not os.environ.get("ACP_NO_LOAD")
DELAY = float(os.environ.get("ACP_CHUNK_DELAY", "0.01"))


class Scripted(Agent):
    def __init__(self) -> None:
        self.cancelled: set[str] = set()

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        (STATE / "pids").open("a").write(f"{os.getpid()}\n")
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities(load_session=LOADS)
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session_id = uuid.uuid4().hex[:12]
        self._save(session_id, {"cwd": cwd, "history": [], "tool_done": False})
        return NewSessionResponse(session_id=session_id)

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        path = STATE / f"{session_id}.json"
        if not LOADS or not path.exists():
            raise RequestError.resource_not_found(session_id)
        for text in json.loads(path.read_text())["history"]:  # the protocol: replay it all
            await self.client.session_update(session_id, update_agent_message_text(text))
        (STATE / "loads").open("a").write(f"{session_id}\n")
        return LoadSessionResponse()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        state = self._load(session_id)
        text = " ".join(getattr(block, "text", "") for block in prompt)
        (STATE / "prompts").open("a").write(json.dumps(text) + "\n")
        self.cancelled.discard(session_id)
        await self.client.session_update(session_id, update_agent_thought_text("thinking it over"))
        if "permission" in text and not state["tool_done"]:
            await self.client.session_update(
                session_id, start_tool_call("mark-1", "write the mark file", kind="edit", status="pending")
            )
            answer = await self.client.request_permission(
                session_id,
                ToolCallUpdate(tool_call_id="mark-1", title="write the mark file", raw_input={"n": 1}),
                [
                    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
                ],
            )
            allowed = isinstance(answer.outcome, AllowedOutcome) and answer.outcome.option_id == "yes"
            if allowed:
                counter = STATE / "counter"
                counter.write_text(str(int(counter.read_text() if counter.exists() else "0") + 1))
                state["tool_done"] = True
                self._save(session_id, state)
            await self.client.session_update(
                session_id,
                update_tool_call("mark-1", status="completed" if allowed else "failed"),
            )
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

    def _save(self, session_id: str, state: dict[str, Any]) -> None:
        (STATE / f"{session_id}.json").write_text(json.dumps(state))


if __name__ == "__main__":
    asyncio.run(run_agent(Scripted()))
