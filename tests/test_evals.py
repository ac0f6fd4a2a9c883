"""Evals from recorded sessions: captured turns asked again with recorded tool results."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentwolf.client import evals
from agentwolf.client.wolf_client import WolfClient
from agentwolf.workflows.evals.run import EVAL_WORKFLOW, EvalRunInput
from tests.conftest import make_manifest, record_history, tools_server, wait_for
from tests.support.models import Script, text, tools, user_texts
from tests.support.polls import idle

WOLF = str(Path(sys.executable).parent / "wolf")
CASES = 20
REGRESSED = {3: 1, 7: 2, 11: 1}
"""Cases the 'regress' instructions change, and the step where each diverges."""


def _turns(script: Script) -> ModelResponse:
    """`case N`: echo and record, then `done N`. Told to regress: case 3 adds instead of echoing,
    case 7 answers otherwise, case 11 calls a failing tool."""
    last = script.requests[-1][-1]
    assert isinstance(last, ModelRequest)
    regress = "regress" in (last.instructions or "")
    n = int(user_texts(script.requests[-1])[-1].split()[-1])
    if any(isinstance(p, ToolReturnPart) for p in last.parts):
        return text(f"done {n} otherwise" if regress and n == 7 else f"done {n}")
    if regress and n == 3:
        return tools(("add", {"a": n, "b": n}), ("record", {"tag": f"case {n}"}))
    if regress and n == 11:
        return tools(("fail", {"message": "no"}), ("record", {"tag": f"case {n}"}))
    return tools(("echo", {"text": f"case {n}"}), ("record", {"tag": f"case {n}"}))


async def test_captured_turns_replay_identically_and_regressions_are_found_at_their_step(
    client, run_worker, task_queue, tmp_path
):
    wolf = WolfClient(client, task_queue=task_queue)
    effects = tmp_path / "effects"
    servers = {"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))}
    manifest = make_manifest({"instructions": "be brief"}, mcp_servers=servers)
    regressed = make_manifest({"instructions": "be brief; regress"}, mcp_servers=servers)
    script = Script(_turns)
    dataset = tmp_path / "cases.jsonl"
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        for n in range(1, CASES + 1):  # queued: they run one after another
            await wolf.prompt(sid, f"case {n}")
        await wait_for(lambda: idle(wolf, sid, CASES))
        for n in range(1, CASES + 1):
            await evals.save(wolf, await evals.capture(wolf, sid, n), dataset)
        recorded, requests = effects.read_text(), script.calls

        same = await evals.run(wolf, (await evals.load(wolf, dataset)), manifest)
        assert [c.divergence for c in same.cases] == [None] * CASES and same.score == 1.0
        assert [c.output for c in same.cases] == [f"done {n}" for n in range(1, CASES + 1)]
        assert effects.read_text() == recorded  # every call got its recorded result
        assert script.calls == requests + 2 * CASES  # the model was asked again, two steps a case

        progress = await client.get_workflow_handle(same.run_id).query("progress")
        assert progress == [CASES, CASES]
        two = await evals.run(
            wolf, (await evals.load(wolf, dataset))[:2], manifest
        )  # a run small enough to keep
        await record_history(client, two.run_id, "eval_run")
        worse = await evals.run(wolf, (await evals.load(wolf, dataset)), regressed)
        found = {int(c.name.rsplit("-", 1)[-1]): c.divergence for c in worse.cases if c.divergence}
        assert {n: int(d.split(":")[0].removeprefix("step ")) for n, d in found.items()} == REGRESSED
        assert "add" in found[3] and "'done 7 otherwise'" in found[7] and "fail" in found[11]
        assert worse.score == (CASES - len(REGRESSED)) / CASES
        assert effects.read_text() == recorded  # a divergent record call did not run either

        # The push gate, as the CLI runs it: below the minimum refused, at it pushed.
        small = tmp_path / "small.jsonl"
        small.write_text("".join(dataset.read_text().splitlines(keepends=True)[:4]))
        files = {}
        for name, m in (("good", manifest), ("bad", regressed)):
            files[name] = tmp_path / f"{name}.json"
            files[name].write_text(m.model_dump_json(exclude_none=True))
        address = client.service_client.config.target_host
        # A tenant of its own: the registry config it pushes is no other test's (`wolf mcp` lists them).
        tenant = f"evals-{uuid.uuid4().hex[:6]}"
        environ = {**os.environ, "NO_COLOR": "1", "TEMPORAL_ADDRESS": address, "WOLF_TENANT": tenant}
        environ["WOLF_TASK_QUEUE"] = task_queue  # `wolf config push --eval` runs on this test's worker

        def push(name: str) -> subprocess.CompletedProcess[str]:
            args = [
                WOLF,
                "config",
                "push",
                "evaluated",
                str(files[name]),
                "--eval",
                str(small),
                "--min-score",
                "0.9",
            ]
            return subprocess.run(args, capture_output=True, text=True, env=environ, timeout=180)

        refused = await asyncio.to_thread(push, "bad")
        assert refused.returncode == 1, refused.stderr
        assert "not pushed" in refused.stderr and "scores 0.75" in refused.stderr
        assert "step 1: called" in refused.stdout
        pushed = await asyncio.to_thread(push, "good")
        assert pushed.returncode == 0, pushed.stderr
        mine = WolfClient(client, tenant=tenant, task_queue=task_queue)
        assert (await mine.config_get("evaluated")).version == 1


async def test_an_eval_run_whose_id_names_no_tenant_is_refused(client, run_worker, task_queue):
    """An `EvalRun` started under an id that names no tenant ran its cases as tenant "default"."""
    run_id = f"eval-{uuid.uuid4().hex[:8]}"
    inp = EvalRunInput(cases=[], manifest=make_manifest())
    async with run_worker(local_models={"m": Script(lambda s: text("unused")).model}):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(EVAL_WORKFLOW, inp, id=run_id, task_queue=task_queue)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "TenantMismatch"
        await record_history(client, run_id, "eval_run_without_tenant")
