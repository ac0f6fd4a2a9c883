"""`wolf chat` in a pseudo-terminal against the real dev server and a worker: steering while a turn
runs, an approval answered inline, Ctrl-C, history recall, Tab completion, reattaching."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import yaml
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from agentwolf.client.wolf_client import WolfClient
from agentwolf.worker.bootstrap import TASK_QUEUE, create_worker
from tests.conftest import TOOLS_SERVER, wait_for
from tests.support.models import Script, text, tool, user_texts
from tests.support.polls import idle
from tests.support.terminal import CTRL_C, TAB, UP, Terminal

WOLF = str(Path(sys.executable).parent / "wolf")


def _config(tmp_path: Path) -> Path:
    skill = tmp_path / "skills" / "review"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: review\ndescription: Review things.\n---\nReview $ARGUMENTS.\n"
    )
    path = tmp_path / "chat.yaml"
    server = {
        "command": sys.executable,
        "args": [TOOLS_SERVER],
        "env": {"WOLF_SIDE_EFFECTS": str(tmp_path / "effects")},
    }
    path.write_text(
        yaml.safe_dump(
            {
                "host": {"mcp_servers": {"tools": server}},
                "agents": {
                    "a": {
                        "model": "local:m",
                        "capabilities": [{"mcp": "tools"}, {"skills": ["skills"]}],
                        "permissions": {"rules": [{"tool": "record", "action": "confirm"}]},
                    }
                },
            }
        )
    )
    return path


class _Decide:
    """By the step: a tool result is answered with text; a prompt by what it asks. The steered turn's
    tool is called again (`waits` counts these) until the steer has arrived: on a loaded machine the
    steer can land after the first call ended, and the test must wait for it, not for time."""

    def __init__(self) -> None:
        self.waits = 0

    def __call__(self, s: Script):
        last = s.requests[-1][-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            (result,) = [p for p in last.parts if isinstance(p, ToolReturnPart)]
            if result.tool_name == "record":
                return text(f"record said: {result.content}")
            steered = "focus on speed" in user_texts(s.requests[-1])
            if not steered and self.waits < 120:
                self.waits += 1
                return tool("slow", {"seconds": 1})
            return text(f"steered: {steered}")
        asked = user_texts([last])[-1]
        if asked == "work":
            return tool("slow", {"seconds": 3})
        if asked == "go slow":
            return tool("slow", {"seconds": 30})
        if asked == "record it":
            return tool("record", {"tag": "inline"}, "call-rec")
        return text(f"reply number {s.calls}")


def _chat(address: str, home: Path, *args: str) -> Terminal:
    env = {"NO_COLOR": "1", "TEMPORAL_ADDRESS": address, "WOLF_HOME": str(home)}
    return Terminal(WOLF, ["chat", *args], env)


def _drive(term: Terminal, effects: Path) -> int | None:
    try:
        term.wait("you>")
        term.line("hello")
        term.wait("reply number 1")
        term.wait("turn completed")
        term.wait("you>")

        # Tab completes slash commands: the chat's own and the session's (its skill).
        term.send("/rev" + TAB)
        term.wait_screen(lambda screen: _prompt_line(screen) == "you> /review")
        term.send(CTRL_C)  # a line with text: Ctrl-C clears it, the chat stays
        term.wait_screen(lambda screen: _prompt_line(screen) == "you>")

        # Typing while the turn runs steers it.
        term.line("work")
        term.wait("-> slow")
        term.line("focus on speed")
        term.wait("steering the running turn")
        term.wait("steered: True")
        term.wait("turn completed")

        # An approval is asked and answered inline.
        term.line("record it")
        term.wait("approve record")
        term.wait("[y]es / [n]o / [a]lways")
        term.line("y")
        term.wait("record said: recorded inline")
        term.wait("turn completed")
        assert effects.read_text() == "inline\n"

        # Ctrl-C interrupts a running turn.
        term.line("go slow")
        term.wait("-> slow")
        term.send(CTRL_C)
        term.wait("interrupting the turn")
        term.wait("interrupted")
        term.wait("you>")

        # Up-arrow recalls earlier lines (the history file).
        for _ in range(10):
            term.send(UP)
            term.settle(0.2)
            if _prompt_line(term.screen()) == "you> hello":
                break
        else:
            raise AssertionError(f"'hello' never recalled:\n{term.show()}")
        term.send("\r")
        term.wait("reply number")
        term.wait("turn completed")

        # Ctrl-C twice at an empty prompt leaves (closing the session the chat started).
        term.send(CTRL_C)
        term.wait("Ctrl-C again to leave")
        term.send(CTRL_C)
        return term.exit_status()
    finally:
        term.close()


def _prompt_line(screen: list[str]) -> str:
    """The last line with something on it: the prompt."""
    return next((line for line in reversed(screen) if line), "")


async def test_chat_steer_approve_interrupt_history_and_completion(client, tmp_path):
    address = client.service_client.config.target_host
    decide = _Decide()
    script = Script(decide)
    config, home = _config(tmp_path), tmp_path / "home"
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE, local_models={"m": script.model})
    async with worker:
        term = _chat(address, home, "-a", "a", "-c", str(config))
        status = await asyncio.to_thread(_drive, term, tmp_path / "effects")
        assert status == 0, term.text[-2000:]
        sid = re.search(r"session ([0-9a-f]{12})", term.text).group(1)
        assert term.text.rstrip().endswith(sid)  # and its id again when it leaves
        await wait_for(
            lambda: _done(WolfClient(client, task_queue=TASK_QUEUE), sid)
        )  # a chat closes the session it started
        await hosts.close()
    asked = [user_texts([r[-1]]) for r in script.requests]
    assert ["focus on speed"] in asked  # the steer reached the model in the running turn's next request
    # hello, work (+ its steered step), record it (+ after approval), go slow (interrupted), hello again
    assert script.calls == 7 + decide.waits and user_texts(script.requests[-1])[-1] == "hello"
    history = (home / "chat_history").read_text()
    assert "+hello" in history and "+focus on speed" in history


async def _done(wolf: WolfClient, sid: str) -> bool:
    return (await wolf.status(sid)).state == "done"


async def test_chat_reattaches_with_the_transcript(client, tmp_path):
    address = client.service_client.config.target_host
    script = Script(_Decide())
    config, home = _config(tmp_path), tmp_path / "home"
    wolf = WolfClient(client, task_queue=TASK_QUEUE)
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE, local_models={"m": script.model})
    async with worker:
        sid = await wolf.start_session("a", config)
        await wolf.prompt(sid, "first [bold]question[/bold]")
        await wait_for(lambda: idle(wolf, sid, 1))

        def drive() -> int | None:
            term = _chat(address, home, "--session", sid)
            try:
                term.wait(f"session {sid}")
                term.wait("> first [bold]question[/bold]")
                term.wait("reply number 1")
                term.wait("you>")
                term.line("second")
                term.wait("reply number 2")
                term.wait("you>")
                term.line("/exit")
                return term.exit_status()
            finally:
                term.close()

        status = await asyncio.to_thread(drive)
        assert status == 0
        assert (await wolf.status(sid)).state == "idle"  # a reattached chat leaves the session open
        await wolf.close(sid)
        await hosts.close()


async def test_chat_streams_the_answer_above_the_prompt(client, tmp_path):
    words = [f"word{i}" for i in range(12)]
    script = Script(lambda s: text(" ".join(words)), chunk_delay=0.25)
    address = client.service_client.config.target_host
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE, local_models={"m": script.model})

    def drive() -> tuple[Terminal, int | None]:
        term = _chat(address, tmp_path / "home", "-a", "a", "-c", str(_config(tmp_path)))
        try:
            term.wait("you>")
            term.line("hello")
            term.wait_screen(lambda s: words[1] in " ".join(s) and words[-1] not in " ".join(s))
            term.wait("turn completed")
            term.settle()
            answer = [line for line in term.screen() if " ".join(words) in line]
            assert len(answer) == 1 and answer[0] == " ".join(words), term.show()
            term.line("/exit")
            return term, term.exit_status()
        finally:
            term.close()

    async with worker:
        term, status = await asyncio.to_thread(drive)
        await hosts.close()
    assert status == 0, term.text
