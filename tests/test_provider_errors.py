"""A model request that cannot work fails at once, in one line that says what to do: the bundled
example without OPENAI_API_KEY, a key the provider refuses, a provider with no key anywhere (issue 24)."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError

from agentwolf.cli.sources import BUNDLED_CONFIG
from agentwolf.config.loading import load_manifest
from agentwolf.config.manifest import Manifest
from tests.support.openai_server import Reply, ScriptedOpenAI


async def _failure(wolf, agent: str, manifest: Manifest) -> str:
    sid = await wolf.submit("hi", agent, manifest)
    with pytest.raises(WorkflowFailureError) as failure:
        await wolf.result(sid)
    return str(failure.value.cause)


async def test_the_bundled_example_without_its_key_fails_at_once_naming_the_variable(
    wolf, run_worker, monkeypatch
):
    with ScriptedOpenAI(lambda r: Reply(text="never asked")) as server:
        monkeypatch.setenv("WOLF_MODEL", "openai:gpt-4o-mini")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        async with run_worker():
            said = await _failure(wolf, "assistant", load_manifest(BUNDLED_CONFIG))
    assert server.requests == []  # no request with a made-up key, hence no retries
    assert "environment variable OPENAI_API_KEY is not set" in said and "wolf up --restart" in said
    assert "\n" not in said


async def test_a_refused_key_is_one_line_with_the_provider_s_message(wolf, run_worker):
    with ScriptedOpenAI(lambda r: Reply(text="Incorrect API key provided: sk-bad.", status=401)) as server:
        manifest = Manifest.model_validate(
            {
                "host": {
                    "models": {"providers": {"openai": {"api_key": "bad", "base_url": server.base_url}}}
                },
                "agents": {"a": {"model": "openai:gpt-4o-mini"}},
            }
        )
        async with run_worker():
            said = await _failure(wolf, "a", manifest)
    assert (
        "the provider refused the request for model gpt-4o-mini (401 Unauthorized): "
        "Incorrect API key provided: sk-bad.; check the API key the worker uses"
    ) in said, said
    assert "{" not in said and "body:" not in said and "\n" not in said, said
    assert len(server.requests) == 1, said  # a 401 is not retried


async def test_a_provider_without_any_key_says_which_variable_and_where(wolf, run_worker, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    manifest = Manifest.model_validate({"agents": {"a": {"model": "openai:gpt-4o-mini"}}})
    async with run_worker():
        said = await _failure(wolf, "a", manifest)
    assert "no API key for this model's provider: OPENAI_API_KEY is not set" in said
    assert "wolf up --restart" in said and "host.models.providers" in said
    assert "Pydantic AI" not in said and "OpenAIProvider(" not in said


async def test_the_cli_says_a_failure_once_without_type_names(client, run_worker, tmp_path):
    import yaml

    from agentwolf.defaults import TASK_QUEUE
    from tests.test_cli import _wolf

    address = client.service_client.config.target_host
    reason = "the provider refused the request for model gpt-4o-mini (401 Unauthorized): Incorrect API key"
    with ScriptedOpenAI(lambda r: Reply(text="Incorrect API key", status=401)) as server:
        manifest = tmp_path / "wolf.yaml"
        provider = {"openai": {"api_key": "bad", "base_url": server.base_url}}
        manifest.write_text(
            yaml.safe_dump(
                {
                    "host": {"models": {"providers": provider}},
                    "agents": {"a": {"model": "openai:gpt-4o-mini"}},
                }
            )
        )
        async with run_worker(task_queue=TASK_QUEUE):
            waited = await _wolf(address, "submit", "hi", "-a", "a", "-c", str(manifest), "--wait")
            followed = await _wolf(address, "submit", "hi", "-a", "a", "-c", str(manifest), "--follow")
    assert waited.returncode == 1
    (line,) = waited.stderr.splitlines()
    assert line.startswith("error: session ") and f" failed: {reason}; check the API key" in line
    assert followed.returncode == 1
    said = followed.stdout + followed.stderr
    assert said.count(reason) == 1 and f"error: {reason}" in followed.stdout
    assert followed.stderr.strip().endswith("failed (the error is above)")
    for jargon in ("TurnFailed", "ModelHTTPError", "the task failed"):
        assert jargon not in said and jargon not in waited.stderr
