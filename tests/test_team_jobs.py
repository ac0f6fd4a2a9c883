"""A job's typed result comes only from a checked answer: a team job with `output` is refused when the
manifest loads, and a team's text never reaches `json.loads` (it failed the workflow task for ever;
core review, finding 4)."""

from __future__ import annotations

import asyncio

import pytest

from agentwolf.config.loading import ManifestError, parse_manifest
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.session.output import structured
from tests.support.models import Script, text

OUTPUT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
TEAM_JOB = """
agents:
  a: {model: "local:m"}
teams:
  crew: {members: [a], mode: sequential}
jobs:
  j:
    agent: crew
    prompt: do it
    output: {type: object, properties: {x: {type: integer}}, required: [x]}
"""


def test_a_team_job_with_an_output_schema_is_refused_at_load():
    with pytest.raises(ManifestError, match=r"jobs\.j\.output: 'crew' is a team"):
        parse_manifest(TEAM_JOB)
    parse_manifest(TEAM_JOB.replace("agent: crew", "agent: a"))  # an agent's job may have one


@pytest.mark.parametrize(
    ("output", "typed"),
    [('{"x": 1}', {"x": 1}), ('{"x": "one"}', None), ("[1]", None), ("plain member answer", None)],
)
def test_only_a_checked_object_is_a_typed_result(output, typed):
    assert structured(OUTPUT, "completed", output) == typed


def test_a_schema_jsonschema_cannot_use_gives_no_typed_result():
    assert structured({"$ref": "#/definitions/missing"}, "completed", '{"x": 1}') is None


async def test_a_team_job_built_in_code_ends_with_its_text(wolf, run_worker):
    """A manifest built in code skips the load-time check: the run still ends (as the probe
    team_job.py: no result after 15 s, the workflow task failing on every attempt)."""
    script = Script(lambda s: text("plain member answer"))
    manifest = Manifest.model_validate(
        {
            "agents": {"a": {"model": "local:m"}},
            "teams": {"crew": {"members": ["a"], "mode": "sequential"}},
            "jobs": {"j": {"agent": "crew", "prompt": "do it", "output": OUTPUT}},
        }
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_job("j", {}, manifest)
        result = await asyncio.wait_for(wolf.result(sid), 120)
    assert result.outcome == "completed" and result.structured is None
    assert "plain member answer" in (result.output or "")
