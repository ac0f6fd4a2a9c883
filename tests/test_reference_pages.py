"""The reference pages docs/reference_hooks.py generates at every docs build: each must cover what
the code has (every `WOLF_*` variable it reads, every event kind, the policy's keys), so a page
cannot fall behind the code."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest

from agentwolf.config.policy import load_policy
from agentwolf.workflows.types import LIVE_KINDS, EventKind
from tests.support.needs import import_or_skip

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def pages() -> ModuleType:
    import_or_skip("mkdocs", "mkdocs (the docs group)")
    sys.path.insert(0, str(DOCS))  # as mkdocs loads a hook: beside its sibling, docs/hooks.py
    try:
        import reference_hooks
    finally:
        sys.path.remove(str(DOCS))
    return reference_hooks


def test_every_wolf_variable_the_code_reads_is_in_the_environment_table(pages: ModuleType):
    read = pages.wolf_variables()
    # Read every way the code does: os.environ, a typer envvar=, a module constant.
    assert "agentwolf.protocols.auth" in read["WOLF_API_KEYS"]
    assert "agentwolf.cli.common" in read["WOLF_TENANT"]
    assert "agentwolf.payloads" in read["WOLF_PAYLOAD_STORE"]
    assert set(pages.ENVIRONMENT) == set(read)
    page = pages.environment_reference()
    for name in read:
        assert re.search(rf"^\| `{name}` \|", page, re.MULTILINE), name


def test_every_event_kind_is_on_the_events_page_with_its_tier_and_fields(pages: ModuleType):
    page = pages.events_reference()
    for kind in typing.get_args(EventKind):
        tier = "live" if kind in LIVE_KINDS else "durable"
        row = re.search(rf"^\| \[`{kind}`\]\(#{kind}\) \| (\w+) \| (.*) \|$", page, re.MULTILINE)
        assert row and row.group(1) == tier, kind
        assert f"### {kind}\n" in page
    fields = pages.event_fields()
    assert fields["tool_call_finished"] >= {"tool", "call_id", "duration_ms", "outcome", "text"}
    assert fields["text_delta"] >= {"attempt", "index", "text"}
    assert fields["limit_reached"] >= {"text"}  # published under a condition: `"error" if ... else`


def test_the_policy_page_shows_every_key_and_an_example_that_loads(pages: ModuleType, tmp_path: Path):
    from agentwolf.config.policy import WorkerPolicy

    page = pages.policy_reference()
    for key in set(WorkerPolicy.model_fields) - {"source"}:
        assert f"| `{key}` |" in page, key
    for key in ("sha256", "tenant", "configs", "agents"):  # an api_keys entry
        assert f"| `{key}` |" in page, key
    (example,) = re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    (tmp_path / "policy.yaml").write_text(example)
    policy = load_policy(tmp_path / "policy.yaml")
    assert policy.allows_secret("acme", "ACME_TOKEN") and policy.allows_secret("other", "OPENAI_API_KEY")
    assert policy.api_keys[0].agents == {"assistant"}
