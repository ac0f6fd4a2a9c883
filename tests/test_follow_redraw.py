"""`wolf submit --follow` in a pseudo-terminal when a model request is retried mid-answer: the lost
attempt's lines are taken back, so the screen ends with the final answer exactly once (issue 24)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from agentwolf.cli.live_view import RESTARTED
from agentwolf.worker.bootstrap import TASK_QUEUE
from tests.support.models import Script, sequence, text
from tests.support.terminal import Terminal
from tests.test_cli import _scripted_manifest
from tests.test_follow import WOLF

LINES = ["alpha one", "bravo two", "charlie three", "delta four", "echo five"]


def _follow(address: str, config: str, home: Path, shown: threading.Event) -> tuple[Terminal, int | None]:
    term = Terminal(
        WOLF,
        ["submit", "tell me", "-a", "a", "-c", config, "--follow"],
        {"NO_COLOR": "1", "TEMPORAL_ADDRESS": address, "WOLF_HOME": str(home)},
    )
    try:
        term.wait("charlie three", timeout=150)  # a busy machine starts the CLI and the session slowly
        shown.set()  # the first attempt's three lines are on the screen: now it may break
        term.wait("turn completed", timeout=120)
        return term, term.exit_status()
    finally:
        shown.set()  # a failed wait does not hold the model request
        term.close()


async def test_a_retried_answer_ends_on_the_screen_once(client, run_worker, tmp_path):
    # The first attempt breaks after 6 chunks, once its three lines are on the screen (however long a
    # busy machine takes to show them); the retry streams the whole answer.
    shown = threading.Event()
    script = Script(
        sequence(text("\n".join(LINES))),
        chunk_delay=0.2,
        fail_after=lambda s: 6 if s.calls == 1 else None,
        before_break=lambda: asyncio.to_thread(shown.wait),
    )
    address = client.service_client.config.target_host
    config = str(_scripted_manifest(tmp_path))
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        term, status = await asyncio.to_thread(_follow, address, config, tmp_path / "home", shown)
    assert status == 0, term.text
    assert script.calls == 2
    screen = [line for line in term.screen() if line]
    assert [line for line in screen if line in LINES] == LINES, term.show()
    assert RESTARTED not in "\n".join(screen)
