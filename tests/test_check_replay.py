"""The replay gate: `wolf check-replay` replays recorded histories and live sessions against this
code, and names each one a deliberately breaking change (a command no recorded run emitted) breaks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from agentwolf.client.replay_check import check_corpus, check_live
from agentwolf.workflows.loop import TurnRunner
from agentwolf.workflows.types import workflow_id
from tests.conftest import HISTORIES, make_manifest, wait_for
from tests.support.deploy_worker import changed
from tests.support.models import Script, sequence, text
from tests.support.polls import idle

WOLF = str(Path(sys.executable).parent / "wolf")


async def test_check_replay_names_the_histories_and_sessions_a_breaking_change_breaks(
    wolf, client, run_worker, tmp_path, monkeypatch
):
    corpus = tmp_path / "histories"
    corpus.mkdir()
    for name in ("multi_step_turn", "steer"):
        shutil.copy(HISTORIES / f"{name}.json", corpus)
    async with run_worker(local_models={"m": Script(sequence(text("hi"))).model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="hello")
        await wait_for(lambda: idle(wolf, sid, 1))
    live = f"WorkflowId = '{workflow_id('default', sid)}' AND ExecutionStatus = 'Running'"
    assert await check_live(client, 10, live) == (1, [])

    done = subprocess.run(
        [WOLF, "check-replay", "--histories", str(corpus), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"replayed": 2, "broken": []}
    missing = subprocess.run(
        [WOLF, "check-replay", "--histories", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no recorded histories" in missing.stderr

    monkeypatch.setattr(TurnRunner, "run_turn", changed(TurnRunner.run_turn))
    replayed, broken = await check_corpus(corpus)
    assert replayed == 2 and sorted(b.source for b in broken) == ["multi_step_turn", "steer"]
    assert all("nondetermin" in b.error.lower() for b in broken), broken
    replayed, broken = await check_live(client, 10, live)
    assert replayed == 1 and [b.source for b in broken] == [workflow_id("default", sid)]
