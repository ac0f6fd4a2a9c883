"""The replay gate: `wolf check-replay` replays recorded histories and live sessions against this
code, and names each one a deliberately breaking change (a command no recorded run emitted) breaks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import workflow

from agentwolf.ops import replay_check
from agentwolf.ops.replay_check import LONG_LIVED, check_corpus, check_live
from agentwolf.worker.bootstrap import WORKFLOWS
from agentwolf.workflows.configs.config_registry import (
    REGISTRY_WORKFLOW,
    ConfigRegistryWorkflow,
    RegistryInput,
)
from agentwolf.workflows.session.loop import TurnRunner
from agentwolf.workflows.types import SESSION_WORKFLOW, registry_id, workflow_id
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


@workflow.defn(name=REGISTRY_WORKFLOW, sandboxed=False)
class ChangedRegistry:
    """The config registry with a timer first: a command sequence no build emits, unpatched."""

    @workflow.run
    async def run(self, inp: RegistryInput) -> None:
        await workflow.sleep(timedelta(milliseconds=1))


def test_the_live_check_knows_every_long_lived_workflow_type():
    names = {workflow._Definition.must_from_class(w).name for w in WORKFLOWS}
    assert set(LONG_LIVED) == names - {SESSION_WORKFLOW}


async def test_the_live_check_replays_the_long_lived_workflows_a_deploy_replays_at_once(
    wolf, client, run_worker, monkeypatch
):
    """Limiters, config registries, schedule fires and evals auto-upgrade: a change that breaks one
    breaks it at its next task after the deploy, so `--live` samples them with the sessions."""
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        await wolf.config_push(name, make_manifest())
    registry = registry_id("default", name)
    replayed, broken = await check_live(client, 50)
    assert registry not in [b.source for b in broken]
    monkeypatch.setattr(
        replay_check, "WORKFLOWS", [ChangedRegistry if w is ConfigRegistryWorkflow else w for w in WORKFLOWS]
    )
    replayed, broken = await check_live(client, 50)
    assert registry in [b.source for b in broken]
