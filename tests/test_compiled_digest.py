"""The compiled agent's digest is computed once per object (a round asks for it twice, on both sides
of the model request) and never goes stale: assigning a field or copying with changes recomputes it."""

from __future__ import annotations

import hashlib
import json

from agentwolf.workflows.contracts import CompiledAgent, ToolSpec


def _fresh(compiled: CompiledAgent) -> str:
    body = compiled.model_dump(mode="json", exclude={"labels"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def test_the_digest_follows_every_change_and_ignores_labels() -> None:
    tool = ToolSpec(name="add", server="tools", tool="add")
    compiled = CompiledAgent(agent="a", models=["local:m"], instructions="be brief", tools=[tool])
    first = compiled.digest
    assert first == _fresh(compiled) == compiled.digest

    compiled.tools = [tool, ToolSpec(name="echo", server="tools", tool="echo")]  # as compile does
    assert compiled.digest == _fresh(compiled) != first

    copied = compiled.model_copy(update={"instructions": "be thorough"})
    assert copied.digest == _fresh(copied) != compiled.digest
    assert compiled.model_copy().digest == compiled.digest

    again = CompiledAgent.model_validate_json(compiled.model_dump_json())
    assert again.digest == compiled.digest
    compiled.labels = ["m (local)"]  # shown to users, not part of the identity
    assert compiled.digest == again.digest
