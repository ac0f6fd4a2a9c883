"""A pydantic-ai agent spec file (what `Agent.from_file` reads) runs as an AgentWolf agent unchanged:
named in `agents_from`, submitted with `wolf submit`, it sends the scripted server what pydantic-ai's
own agent built from the same file sends."""

from __future__ import annotations

import json
import os

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from agentwolf.config.loading import ManifestError, load_manifest
from agentwolf.defaults import TASK_QUEUE
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.test_capabilities import _seen
from tests.test_examples import address, run

SPEC = """\
# A pydantic-ai agent spec, as Agent.from_file reads it.
name: summariser
description: Summarises in one line.
model: openai:gpt-5
instructions:
  - You summarise in one line.
  - Never use bullet points.
model_settings:
  max_tokens: 500
capabilities:
  - Thinking: high
  - WebSearch
"""


async def test_a_pydantic_ai_spec_file_runs_through_wolf_submit(client, run_worker, tmp_path):
    spec = tmp_path / "summariser.yaml"
    spec.write_text(SPEC)
    with ScriptedOpenAI(lambda body: Reply(text="One line.")) as server:
        model = OpenAIResponsesModel("gpt-5", provider=OpenAIProvider(base_url=server.base_url, api_key="k"))
        await Agent.from_file(spec, model=model).run("Summarise the news.")
        expected = _seen(server.requests[-1])
        config = tmp_path / "wolf.yaml"
        config.write_text(
            "host:\n  models:\n    providers:\n"
            f"      openai: {{api_key: k, base_url: '{server.base_url}'}}\n"
            "agents_from: [./summariser.yaml]\n"
        )
        async with run_worker(task_queue=TASK_QUEUE):
            out = await run(
                "wolf", "submit", "Summarise the news.", "--agent", "summariser", "--config", str(config),
                "--address", address(client), "--wait", "--json", env=dict(os.environ),
            )  # fmt: skip
        sent = _seen(server.requests[-1])
    assert json.loads(out)["output"] == "One line."
    assert sent == expected
    assert sent["instructions"] == "You summarise in one line.\n\nNever use bullet points."
    assert sent["reasoning"]["effort"] == "high" and sent["max_output_tokens"] == 500
    assert [t["type"] for t in sent["tools"]] == ["web_search"]


def test_a_spec_file_pydantic_ai_refuses_is_a_clear_error(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: bad\nmodel: 3\ncapabilities: [{Thinking: {effort: 3.5}}]\n")
    (tmp_path / "wolf.yaml").write_text("agents_from: [./bad.yaml]\n")
    with pytest.raises(ManifestError) as raised:
        load_manifest(tmp_path / "wolf.yaml")
    assert "bad.yaml: not a pydantic-ai agent spec" in str(raised.value)
