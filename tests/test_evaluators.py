"""Eval evaluators (exact, contains, JSON schema, an LLM judge on a scripted OpenAI server, a plugin's)
and datasets in the tenant's registry, on a real dev server: each evaluator passes the recorded
answer and fails a regressed one, and another tenant cannot read the dataset."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import subprocess
import uuid
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentwolf.activities.evals import EvalActivities
from agentwolf.activities.evaluators import Evaluators, Target
from agentwolf.client import evals
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.policy import REDACTED
from agentwolf.hosts.host import HostRegistry
from agentwolf.plugins import EvaluatorContext, load_plugins
from agentwolf.workflows.evals.cases import EvalCase, EvaluatorSpec, ScoreInput
from agentwolf.workflows.evals.datasets import DatasetInput, EvalDatasetWorkflow, dataset_id
from agentwolf.workflows.types import TENANT_ATTR, quote
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import Script, text, user_texts
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.polls import idle
from tests.test_evals import WOLF

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
PLUGIN = "tests.support.eval_plugin"


def _answers(script: Script) -> ModelResponse:
    """`case N`: `{"answer": "done N"}`; told to regress, `oops N` (not JSON, not done)."""
    n = user_texts(script.requests[-1])[-1].split()[-1]
    regress = "regress" in (script.requests[-1][-1].instructions or "")  # type: ignore[union-attr]
    return text(f"oops {n}" if regress else json.dumps({"answer": f"done {n}"}))


def _judge(body: dict[str, Any]) -> Reply:
    """Grades by the rubric `says done`: fails an answer with `oops` in it."""
    passed = "oops" not in json.dumps(body["input"])
    verdict = {"reason": "it says done" if passed else "it says oops", "pass": passed, "score": float(passed)}
    return Reply(text=f"Here is my grade: {json.dumps(verdict)}")


async def test_evaluators_pass_the_recorded_answers_fail_regressed_ones_and_gate_a_push(
    client, run_worker, task_queue, tmp_path
):
    tenant = f"evaluators-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
    script = Script(_answers)
    with ScriptedOpenAI(_judge) as judge:
        models = {"providers": {"openai": {"api_key": "k", "base_url": judge.base_url}}}
        agent = {"capabilities": [], "instructions": "be brief"}
        manifest = make_manifest(agent, mcp_servers={}, models=models)
        regressed = make_manifest(
            {**agent, "instructions": "be brief; regress"}, mcp_servers={}, models=models
        )
        plugins = load_plugins([PLUGIN], entry_points=[])
        async with run_worker(local_models={"m": script.model}, plugins=plugins):
            sid = await wolf.start_session("a", manifest)
            for n in (1, 2):
                await wolf.prompt(sid, f"case {n}")
            await wait_for(lambda: idle(wolf, sid, 2))
            address = client.service_client.config.target_host
            environ = {
                **os.environ,
                "NO_COLOR": "1",
                "COLUMNS": "250",
                "TEMPORAL_ADDRESS": address,
                "WOLF_TENANT": tenant,
                "WOLF_TASK_QUEUE": task_queue,  # the CLI's work goes to this test's worker
            }

            def wolf_cli(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [WOLF, *args], capture_output=True, text=True, env=environ, timeout=180, check=False
                )

            # Case 1 by the CLI, into the tenant's registry, with every capture flag.
            flags = ["--expect-exact", '{"answer": "done 1"}', "--expect-contains", "done"]
            flags += [
                "--judge",
                "says done",
                "--judge-model",
                "openai:gpt-4o-mini",
                "--evaluator",
                "mentions_case",
            ]
            captured = await asyncio.to_thread(
                wolf_cli, "eval", "capture", sid, "--turn", "1", "--dataset", "regress", "-j", *flags
            )
            assert captured.returncode == 0, captured.stderr
            scored = ["SameTrajectory", "EqualsExpected", "Contains", "LLMJudge", "mentions_case"]
            assert json.loads(captured.stdout)["evaluators"] == scored
            # Case 2 by the client: a JSON schema, and the plugin's evaluator with an argument.
            specs = [{"MatchesSchema": {"schema": SCHEMA}}, {"mentions_case": {"prefix": "done"}}]
            assert await evals.save(wolf, await evals.capture(wolf, sid, 2, evaluators=specs), "regress") == 2
            cases = await evals.load(wolf, "regress")
            assert [c.name for c in cases] == [f"{sid}:turn-1", f"{sid}:turn-2"]
            assert cases[0].expected_output == '{"answer": "done 1"}'

            same = await evals.run(wolf, cases, manifest)
            verdicts = [[(e.name, e.value) for e in c.evaluations] for c in same.cases]
            assert verdicts == [
                [
                    (n, True)
                    for n in ("SameTrajectory", "EqualsExpected", "Contains", "LLMJudge", "mentions_case")
                ],
                [(n, True) for n in ("SameTrajectory", "MatchesSchema", "mentions_case")],
            ]
            assert same.score == 1.0 and same.cases[0].evaluations[3].reason == "it says done"
            assert len(judge.requests) == 1 and judge.requests[0]["model"] == "gpt-4o-mini"
            await record_history(client, same.run_id, "eval_run_scored")
            await record_history(client, f"wolf-dataset/{tenant}/regress", "eval_dataset")

            worse = await evals.run(wolf, cases, regressed)
            reasons = {e.name: e.reason for c in worse.cases for e in c.evaluations}
            assert all(e.value is False for c in worse.cases for e in c.evaluations), reasons
            assert worse.score == 0.0
            assert reasons["EqualsExpected"] == "answered 'oops 1', expected '{\"answer\": \"done 1\"}'"
            assert reasons["Contains"] == "the answer 'oops 1' lacks 'done'"
            assert reasons["LLMJudge"] == "it says oops"
            assert reasons["MatchesSchema"] == "the answer 'oops 2' is not JSON"
            assert reasons["mentions_case"] == "no 'done 2' in the answer"

            # Another tenant finds neither the dataset nor its listing; a path is a file, never a name.
            other = WolfClient(client, tenant=f"{tenant}-other", task_queue=task_queue)
            with pytest.raises(evals.DatasetNotFound, match="no dataset named 'regress' in tenant"):
                await evals.load(other, "regress")
            with pytest.raises(FileNotFoundError):
                await evals.load(other, f"../{tenant}/regress")
            assert await evals.datasets(other) == []
            await wait_for(lambda: _listed(wolf))

            # `wolf eval datasets`, and the push gate on a registry dataset.
            listed = await asyncio.to_thread(wolf_cli, "eval", "datasets")
            assert listed.returncode == 0 and "regress\t2\n" in listed.stdout, listed
            bad = tmp_path / "bad.json"
            bad.write_text(regressed.model_dump_json(exclude_none=True))
            push = ["config", "push", "evaluated", str(bad), "--eval", "regress", "--min-score", "0.5"]
            refused = await asyncio.to_thread(wolf_cli, *push)
            assert refused.returncode == 1, refused.stderr
            assert "not pushed" in refused.stderr and "scores 0.00 on regress" in refused.stderr
            assert "(SameTrajectory 0.00, EqualsExpected 0.00, Contains 0.00, LLMJudge 0.00" in refused.stderr
            assert "EqualsExpected FAIL" in refused.stdout and "LLMJudge FAIL: it says oops" in refused.stdout


async def test_a_worker_lost_mid_run_keeps_the_verdicts_it_recorded(client, run_worker, task_queue):
    """Each case's evaluators run in one activity whose result is in the run's history: the worker
    that finishes the run replays the verdicts of the one that stopped, and asks no judge again."""
    wolf = WolfClient(client, tenant=f"evaluators-{uuid.uuid4().hex[:6]}", task_queue=task_queue)
    script = Script(_answers)
    with ScriptedOpenAI(_judge) as judge:
        models = {"providers": {"openai": {"api_key": "k", "base_url": judge.base_url}}}
        manifest = make_manifest({"capabilities": []}, mcp_servers={}, models=models)
        rubric = {"LLMJudge": {"rubric": "says done", "model": "openai:gpt-4o-mini"}}
        async with run_worker(local_models={"m": script.model}):
            sid = await wolf.start_session("a", manifest)
            for n in (1, 2, 3):
                await wolf.prompt(sid, f"case {n}")
            await wait_for(lambda: idle(wolf, sid, 3))
            cases = [await evals.capture(wolf, sid, n, evaluators=[rubric]) for n in (1, 2, 3)]
            run = asyncio.create_task(evals.run(wolf, cases, manifest, concurrency=1))
            runs = f"WorkflowType = 'EvalRun' AND WorkflowId STARTS_WITH 'wolf/{wolf.tenant}/'"
            run_id = (await wait_for(lambda: _first(client.list_workflows(runs)))).id
            await wait_for(lambda: _finished(client, run_id, 1))
        async with run_worker(local_models={"m": script.model}):  # another worker finishes the run
            report = await asyncio.wait_for(run, 120)
    assert [[e.value for e in c.evaluations] for c in report.cases] == [[True, True]] * 3
    assert len(judge.requests) == 3  # one verdict a case, none asked twice


async def test_a_registry_dataset_keeps_its_cases_and_size_across_continue_as_new(
    client, run_worker, task_queue
):
    wolf = WolfClient(client, tenant=f"evaluators-{uuid.uuid4().hex[:6]}", task_queue=task_queue)
    fields = {"agent": "a", "prefix": [], "prompt": "p", "calls": [], "steps": [], "output": "o"}
    wid = dataset_id(wolf.tenant, "small")
    async with run_worker():
        first = await client.start_workflow(
            EvalDatasetWorkflow.run,
            DatasetInput(name="small", max_history_events=10),  # continues as new every few cases
            id=wid,
            task_queue=task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(TENANT_ATTR, wolf.tenant)]),
        )
        for n in range(1, 21):
            assert await evals.save(wolf, EvalCase(name=f"c{n}", **fields), "small") == n
            # Once the current run's size is indexed, the listing says it, even while the run it
            # continued from still shows as Running (its close not indexed yet).
            current = (await client.get_workflow_handle(wid).describe()).run_id
            await wait_for(functools.partial(_indexed, client, wid, current, n))
            assert await _sized(wolf, n)
        assert current != first.first_execution_run_id, "the dataset never continued as new"
        assert [c.name for c in await evals.load(wolf, "small")] == [f"c{n}" for n in range(1, 21)]


async def _indexed(client: Any, workflow_id: str, run_id: str, cases: int) -> bool:
    query = f"WorkflowId = {quote(workflow_id)} AND ExecutionStatus = 'Running'"
    return any(
        [
            wf.run_id == run_id and (await wf.memo()).get("cases") == cases
            async for wf in client.list_workflows(query)
        ]
    )


async def _sized(wolf: WolfClient, cases: int) -> bool:
    return [(d.name, d.cases) for d in await evals.datasets(wolf)] == [("small", cases)]


async def _first(found: Any) -> Any:
    async for item in found:
        return item
    return None


async def _finished(client: Any, run_id: str, cases: int) -> bool:
    done, _ = await client.get_workflow_handle(run_id).query("progress")
    return done >= cases


async def _listed(wolf: WolfClient) -> bool:
    return [(d.name, d.cases) for d in await evals.datasets(wolf)] == [("regress", 2)]


async def test_dataset_forms_unknown_evaluators_and_a_run_scoring_another_tenants_session():
    # pydantic-evals' short forms round-trip; a dataset line written before evaluators still loads.
    assert EvaluatorSpec.model_validate("EqualsExpected").model_dump() == "EqualsExpected"
    assert EvaluatorSpec.model_validate({"Contains": "x"}).call_arguments() == (["x"], {})
    judge = {"LLMJudge": {"rubric": "r", "model": "m"}}
    assert EvaluatorSpec.model_validate(judge).call_arguments() == ([], {"rubric": "r", "model": "m"})
    older = {"name": "c", "agent": "a", "prefix": [], "prompt": "p", "calls": [], "steps": [], "output": "o"}
    case = EvalCase.model_validate_json(json.dumps({**older, "expect_contains": "Tokyo"}))
    assert json.loads(case.model_dump_json())["evaluators"] == ["SameTrajectory", {"Contains": "Tokyo"}]

    hosts = HostRegistry(plugins=load_plugins([PLUGIN], entry_points=[]))
    scorer = Evaluators(hosts)
    ctx = EvaluatorContext(
        name="c", inputs="case 1", output="done 1", expected_output=None, recorded_output=None, steps=[]
    )
    target = Target(tenant="t", agent="a", manifest=_no_manifest)

    async def verdict(spec: object) -> tuple[bool | float, str | None] | None:
        found = await scorer.run(EvaluatorSpec.model_validate(spec), ctx, None, target)
        return None if found is None else (found.value, found.reason)

    assert await verdict("EqualsExpected") is None  # no expected output: no verdict, as in pydantic-evals
    nope = await verdict("nope")
    assert nope is not None and nope[0] is False and "no evaluator named 'nope'" in nope[1]  # type: ignore[operator]
    assert "mentions_case" in nope[1]  # type: ignore[operator]
    wrong = await verdict({"Contains": {"text": "x"}})  # a wrong argument: a failed verdict, said
    assert wrong is not None and wrong[0] is False and "unexpected keyword argument 'text'" in str(wrong[1])
    secret = f"sk-{uuid.uuid4().hex}"  # a value this worker resolved (a provider key): never in a verdict
    REDACTED.add(secret)
    try:
        leaked = await verdict({"Equals": secret})
    finally:
        REDACTED.discard(secret)
    assert leaked is not None and leaked[0] is False and "expected" in str(leaked[1])
    assert secret[:20] not in str(leaked[1])

    # A run of tenant `b` is refused scoring a session of tenant `a`.
    activity = ActivityEnvironment()
    activity.info = dataclasses.replace(activity.info, workflow_id="wolf/b/_eval-1")
    hostile = ScoreInput(
        workflow_id="wolf/a/victim", start=0, name="c", agent="a", prompt="p", steps=[],
        expected_output=None, evaluators=[], output=None,
    )  # fmt: skip
    with pytest.raises(ApplicationError, match="names tenant 'a', but the calling workflow is 'wolf/b/"):
        await activity.run(EvalActivities(hosts).eval_score, hostile)


async def _no_manifest() -> Any:
    raise AssertionError("only an LLM judge asks for the config")


def test_a_plain_name_is_a_registry_dataset_unless_a_file_has_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert evals.in_registry("regressions") and not evals.in_registry("cases.jsonl")
    (tmp_path / "regressions").write_text("")  # a file kept under a plain name stays that file
    assert not evals.in_registry("regressions") and not evals.in_registry(tmp_path / "regressions")
