"""`wolf follow` and `wolf submit --follow` as subprocesses against the real dev server and a worker:
JSON Lines with every event (deltas included), plain text off a terminal, and in a pseudo-terminal
the session id first, a spinner while the model thinks, a live line per running tool, and on Ctrl-C
how to reattach."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

from agentwolf.cli.live_view import RESTARTED
from agentwolf.client.wolf_client import WolfClient
from agentwolf.worker.bootstrap import TASK_QUEUE
from tests.support.models import Script, sequence, text, tool
from tests.support.terminal import CTRL_C, Terminal
from tests.test_cli import _scripted_manifest, _wolf

WOLF = str(Path(sys.executable).parent / "wolf")
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Issue 13's streaming core: `WolfClient.events` yields live events (deltas) too."""


def _joined(events: list[dict], turn_id: str, step: int) -> str:
    """A step's text as a follower renders it: its deltas minus superseded attempts."""
    dropped = {
        (e["turn_id"], e["step"], e.get("attempt")) for e in events if e["kind"] == "attempt_superseded"
    }
    deltas = [
        e
        for e in events
        if e["kind"] == "text_delta"
        and (e["turn_id"], e["step"]) == (turn_id, step)
        and (e["turn_id"], e["step"], e.get("attempt")) not in dropped
    ]
    text = ""
    for d in deltas:
        text = text[: d["index"]] + d["text"] if d["index"] <= len(text) else text + d["text"]
    return text


async def test_follow_json_has_every_event_with_offsets_and_plain_text_has_no_controls(
    client, run_worker, tmp_path
):
    address = client.service_client.config.target_host
    answer = "the answer is 42\nand a \x1b[2J second line"
    script = Script(sequence(tool("add", {"a": 20, "b": 22}), text(answer)), delay=0.3)
    config = str(_scripted_manifest(tmp_path))
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        started = await _wolf(address, "submit", "add them", "-a", "a", "-c", config, "--json")
        sid = json.loads(started.stdout.splitlines()[-1])["session_id"]
        follow, human = await asyncio.gather(
            _wolf(address, "follow", sid, "--json"), _wolf(address, "follow", sid)
        )
    assert follow.returncode == 0 and human.returncode == 0, follow.stderr + human.stderr
    assert f"session {sid}" in follow.stderr  # stdout stays pure JSON Lines
    events = [json.loads(line) for line in follow.stdout.splitlines()]
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(offsets)
    durable = [
        e
        for e in events
        if e["kind"] not in ("text_delta", "thinking_delta", "attempt_superseded", "tool_progress")
    ]
    assert [e["offset"] for e in durable] == list(range(len(durable)))  # every durable event, once, in order
    kinds = [e["kind"] for e in durable]
    assert kinds[0] == "turn_started" and kinds[-1] == "session_closed"
    assert kinds.index("tool_call_started") < kinds.index("tool_call_finished") < kinds.index("model_text")
    (final,) = [e for e in events if e["kind"] == "model_text"]
    assert final["text"] == answer

    # Off a terminal: the session id first, then plain text, every control shown, never sent.
    lines = human.stdout.splitlines()
    assert lines[0] == f"session {sid}"
    assert RAW.search(human.stdout) is None
    assert "the answer is 42" in lines and r"and a \x1b[2J second line" in lines
    assert human.stdout.count("the answer is 42") == 1

    # Deltas: the step's text_deltas come before its model_text and join to exactly its text.
    deltas = [e for e in events if e["kind"] == "text_delta"]
    assert deltas, "no text_delta in wolf follow --json"
    assert max(d["offset"] for d in deltas) <= final["offset"]
    assert events.index(deltas[-1]) < events.index(final)
    assert _joined(events, final["turn_id"], final["step"]) == answer


def _submit_follow(
    address: str, config: str, home: Path
) -> tuple[Terminal, int | None, list[str], list[list[str]]]:
    term = Terminal(
        WOLF,
        ["submit", "wait for me", "-a", "a", "-c", config, "--follow"],
        {"NO_COLOR": "1", "TEMPORAL_ADDRESS": address, "WOLF_HOME": str(home)},
    )
    seen: list[list[str]] = []
    try:
        term.wait("session ")
        term.wait_screen(
            lambda s: (seen.append(s) or True) and any("waiting for the model" in line for line in s)
        )
        term.wait_screen(
            lambda s: (seen.append(s) or True) and any(re.search(r"slow +\d+\.\ds", line) for line in s)
        )
        term.wait("done waiting")
        status = term.exit_status()
        return term, status, term.screen(), seen
    finally:
        term.close()


async def test_submit_follow_in_a_terminal_shows_a_spinner_and_running_tools(client, run_worker, tmp_path):
    address = client.service_client.config.target_host
    script = Script(sequence(tool("slow", {"seconds": 2}), text("done waiting")), delay=1.5)
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        term, status, screen, _ = await asyncio.to_thread(
            _submit_follow, address, str(_scripted_manifest(tmp_path)), tmp_path / "home"
        )
    assert status == 0, term.text
    shown = [line for line in screen if line]
    sid = shown[-1]
    assert shown[0] == f"session {sid}"
    # What stays: finished lines only; the spinner and the tool's live line are gone.
    assert "> wait for me" in shown and "done waiting" in shown and "turn completed" in " ".join(shown)
    assert not any("waiting for the model" in line or re.search(r"slow +\d+\.\ds", line) for line in shown)
    assert shown.count("done waiting") == 1 and RESTARTED not in term.text


async def test_follow_ctrl_c_says_how_to_reattach(client, run_worker, tmp_path):
    address = client.service_client.config.target_host
    # The tool outlasts any load this machine may be under: the session must still run after Ctrl-C.
    script = Script(sequence(tool("slow", {"seconds": 600}), text("late")))
    wolf = WolfClient(client, task_queue=TASK_QUEUE)
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        sid = await wolf.submit("be slow", "a", _scripted_manifest(tmp_path))

        def drive() -> tuple[Terminal, int | None]:
            term = Terminal(WOLF, ["follow", sid], {"NO_COLOR": "1", "TEMPORAL_ADDRESS": address})
            try:
                term.wait(f"session {sid}")
                term.wait("-> slow")
                term.send(CTRL_C)
                term.wait(f"Reattach: wolf follow {sid}")
                return term, term.exit_status()
            finally:
                term.close()

        term, status = await asyncio.to_thread(drive)
        assert status == 130 or status < 0  # exit code 130, or ended by SIGINT
        assert (await wolf.status(sid)).state == "running"  # detaching leaves the session running
        await wolf.interrupt(sid)
        await wolf.result(sid)


"""tests/support/models.py's Script can stream (issue 13's core)."""


def _watch_stream(
    address: str, config: str, home: Path, words: list[str]
) -> tuple[Terminal, int | None, list[list[str]]]:
    term = Terminal(
        WOLF,
        ["submit", "stream it", "-a", "a", "-c", config, "--follow"],
        {"NO_COLOR": "1", "TEMPORAL_ADDRESS": address, "WOLF_HOME": str(home)},
    )
    seen: list[list[str]] = []
    try:
        # Part of the answer on the screen while the rest is still to come.
        term.wait_screen(
            lambda s: (seen.append(s) or True) and words[1] in " ".join(s) and words[-1] not in " ".join(s)
        )
        term.wait("turn completed")
        return term, term.exit_status(), seen
    finally:
        term.close()


async def test_submit_follow_streams_text_as_it_comes(client, run_worker, tmp_path):
    words = [f"word{i}" for i in range(12)]
    script = Script(lambda s: text(" ".join(words)), chunk_delay=0.25)
    address = client.service_client.config.target_host
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        term, status, _ = await asyncio.to_thread(
            _watch_stream, address, str(_scripted_manifest(tmp_path)), tmp_path / "home", words
        )
        plain = await _wolf(address, "follow", term.screen()[-1 - _blank(term.screen())])
    assert status == 0, term.text
    shown = " ".join(line for line in term.screen() if line)
    assert shown.count(" ".join(words)) == 1  # the streamed line, once: model_text did not print it again
    assert plain.stdout.count(" ".join(words)) == 1


def _blank(screen: list[str]) -> int:
    return next(i for i, line in enumerate(reversed(screen)) if line)


PROGRESS_SERVER = str(Path(__file__).parent / "support" / "progress_server.py")


def _progress_manifest(tmp_path: Path, **env: str) -> Path:
    import yaml

    path = tmp_path / "progress.yaml"
    server = {"command": sys.executable, "args": [PROGRESS_SERVER], **({"env": env} if env else {})}
    path.write_text(
        yaml.safe_dump(
            {
                "host": {"mcp_servers": {"work": server}},
                "agents": {"a": {"model": "local:m", "capabilities": [{"mcp": "work"}]}},
            }
        )
    )
    return path


def _watch_progress(address: str, config: str) -> tuple[Terminal, int | None]:
    term = Terminal(
        WOLF,
        ["submit", "work", "-a", "a", "-c", config, "--follow"],
        {"NO_COLOR": "1", "TEMPORAL_ADDRESS": address},
    )
    try:
        # The tool's live line: its name, elapsed time, a progress bar, the server's message and count.
        term.wait_screen(
            lambda s: any(re.search(r"steps +\d+\.\ds +━+ +step [2-5] of 5 \([1-4]/5\)", line) for line in s),
            timeout=60,
        )
        term.wait("turn completed")
        return term, term.exit_status()
    finally:
        term.close()


async def test_follow_shows_progress_a_real_mcp_server_reports(client, run_worker, tmp_path):
    script = Script(sequence(tool("steps", {"count": 5, "seconds": 0.6}), text("all done")))
    address = client.service_client.config.target_host
    config = str(_progress_manifest(tmp_path))
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        term, status = await asyncio.to_thread(_watch_progress, address, config)
    assert status == 0, term.text
    assert not any("step " in line for line in term.screen())  # the live line is gone once the tool finished
