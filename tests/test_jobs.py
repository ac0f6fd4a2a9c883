"""Job runs on the real dev server: typed results through the output tool, checked against the full
JSON Schema, retried within the agent's limits; bad jobs and variables start nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.client.jobs import JobFailed
from agentwolf.config.jobs import JobError
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import text, tool, user_texts

SCHEMA = {
    "type": "object",
    "properties": {"severity": {"enum": ["low", "medium", "high"]}, "summary": {"type": "string"}},
    "required": ["severity", "summary"],
}


def job_manifest(max_steps: int = 40) -> Manifest:
    base = make_manifest({"limits": {"max_steps": max_steps}}).model_dump()
    base["jobs"] = {
        "triage": {
            "agent": "a",
            "prompt": "Triage {issue} (priority {priority}).",
            "vars": {"issue": {}, "priority": {"type": "integer", "default": 2}},
            "output": SCHEMA,
        },
        "plain": {"agent": "a", "prompt": "Say hi to {who}.", "vars": {"who": {}}},
    }
    return Manifest.model_validate(base)


class Recorder:
    """A scripted model that records what each request offered and asked."""

    def __init__(self, *answers: ModelResponse) -> None:
        self.answers = answers
        self.requests: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []
        self.model = FunctionModel(self._answer)

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.infos.append(info)
        return self.answers[min(len(self.requests), len(self.answers)) - 1]


def retries(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The refused output calls' returns the model got."""
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.outcome == "retried"
    ]


async def test_a_job_returns_its_validated_object(wolf, run_worker):
    model = Recorder(tool("final_result", {"severity": "high", "summary": "crash on start"}))
    async with run_worker(local_models={"m": model.model}):
        result = await wolf.run_job("triage", {"issue": "#7"}, job_manifest())
    assert result == {"severity": "high", "summary": "crash on start"}
    info = model.infos[0]
    assert [t.name for t in info.output_tools] == ["final_result"] and not info.allow_text_output
    assert info.output_tools[0].parameters_json_schema == SCHEMA
    first = model.requests[0][0]
    assert isinstance(first, ModelRequest) and "Triage #7 (priority 2)." in str(first.parts[-1].content)


async def test_an_invalid_result_goes_back_to_the_model(wolf, run_worker):
    """An enum violation (which pydantic-ai's StructuredDict would let through), then a text answer,
    are each retried with the reason; the third answer is the result."""
    model = Recorder(
        tool("final_result", {"severity": "urgent", "summary": "x"}),
        text("it is bad"),
        tool("final_result", {"severity": "medium", "summary": "fixed"}),
    )
    async with run_worker(local_models={"m": model.model}):
        sid = await wolf.start_job("triage", {"issue": "#8", "priority": 1}, job_manifest())
        result = await wolf.job_result(sid)
        events = [e async for _, e in wolf.events(sid, live=False)]
        await record_history(wolf.client, workflow_id(wolf.tenant, sid), "job_output_retry")
    assert result.output == {"severity": "medium", "summary": "fixed"} and result.outcome == "completed"
    asked = retries(model.requests[-1])
    assert "'urgent' is not one of ['low', 'medium', 'high']" in str(asked[0].content)
    assert asked[0].tool_name == "final_result"
    # The text answer's feedback reaches the model as pydantic-ai renders it for providers: a user turn.
    assert "calling the `final_result` tool" in user_texts(model.requests[-1])[-1]
    refused = [e.text for e in events if e.kind == "error"]
    assert len(refused) == 2 and "severity: 'urgent' is not one of" in (refused[0] or "")
    assert (await wolf.result(sid)).structured == {"severity": "medium", "summary": "fixed"}


async def test_a_run_that_never_fits_fails_clearly_within_its_limits(wolf, run_worker):
    model = Recorder(tool("final_result", {"severity": "low"}))
    async with run_worker(local_models={"m": model.model}):
        sid = await wolf.start_job("triage", {"issue": "#9"}, job_manifest(max_steps=3))
        with pytest.raises(JobFailed, match=r"ended limit: max_steps \(3\) reached"):
            await wolf.job_result(sid)
    assert len(model.requests) == 3
    assert "'summary' is a required property" in str(retries(model.requests[-1])[-1].content)


async def test_a_job_without_output_returns_text_and_tools_still_run(wolf, run_worker):
    model = Recorder(tool("add", {"a": 1, "b": 2}), text("hi Ada"))
    async with run_worker(local_models={"m": model.model}):
        assert await wolf.run_job("plain", {"who": "Ada"}, job_manifest()) == "hi Ada"
    assert not model.infos[0].output_tools and model.infos[0].allow_text_output


@pytest.mark.parametrize(
    ("job", "variables", "error", "message"),
    [
        ("nope", {}, ValueError, r"unknown job 'nope' \(jobs in this config: plain, triage\)"),
        ("triage", {"issue": "#1", "priority": "high"}, JobError, "'high' is not an integer"),
        ("triage", {"issue": "#1", "colour": "red"}, JobError, "unknown variable 'colour'"),
        ("triage", {}, JobError, "missing variable 'issue'"),
    ],
)
async def test_bad_jobs_start_nothing(wolf, job: str, variables: dict[str, Any], error: type, message: str):
    """Nothing under the id the refused job was given (a describe reads the server's own state, not
    the visibility store, which lags), and nothing else on its queue by the time a job started after
    it is visible there (that job runs on no worker and is terminated)."""
    sid = f"refused-{uuid.uuid4().hex[:8]}"
    with pytest.raises(error, match=message):
        await wolf.start_job(job, variables, job_manifest(), session_id=sid)
    with pytest.raises(RPCError) as missing:
        await wolf.client.get_workflow_handle(workflow_id(wolf.tenant, sid)).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
    later = await wolf.start_job("plain", {"who": "Ada"}, job_manifest())
    later_wid = workflow_id(wolf.tenant, later)
    try:
        on_queue = f"TaskQueue = '{wolf.task_queue}'"
        await wait_for(lambda: _count(wolf, f"{on_queue} AND WorkflowId = '{later_wid}'"), timeout=60)
        assert await _count(wolf, on_queue) == 1
    finally:
        await wolf.client.get_workflow_handle(later_wid).terminate()


async def _count(wolf: Any, query: str) -> int:
    return (await wolf.client.count_workflows(query)).count
