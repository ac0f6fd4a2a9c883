"""Manifest loading: the RFC-0050 layout, the legacy flat layout, placeholders, and errors that
name the file, line and key path."""

from __future__ import annotations

import pytest

from agentwolf.config import ManifestError, parse_manifest, resolve_model
from agentwolf.config.placeholders import MissingVariable, resolve

GOOD = """\
host:
  models:
    providers: {openai: {api_key: "${OPENAI_API_KEY}", base_url: "http://127.0.0.1:11434/v1"}}
    aliases:
      fast: "openai:gpt-4o-mini"
      resilient: {type: fallback, models: [fast, "anthropic:claude-sonnet-4-0"]}
    defaults: {model: fast, temperature: 0.7, max_tokens: 4096}
  mcp_servers:
    time: {command: mcp-server-time, args: [], env: {}}
    remote: {url: "http://127.0.0.1:8931/mcp", headers: {Authorization: "Bearer ${TOKEN}"}}
agents:
  coder:
    model: resilient
    instructions: "..."
    capabilities: [{mcp: time}]
    limits: {max_steps: 40, token_budget: 200000}
    double_texting: queue
"""


def test_the_documented_layout_loads_with_placeholders_kept():
    m = parse_manifest(GOOD)
    assert m.host.models.providers["openai"].api_key == "${OPENAI_API_KEY}"
    assert m.host.mcp_servers["remote"].headers["Authorization"] == "Bearer ${TOKEN}"
    assert resolve_model(m.host.models, "resilient") == ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-0"]
    assert resolve_model(m.host.models, None) == ["openai:gpt-4o-mini"]


def test_identity_is_the_hash_of_the_canonical_form():
    reordered = GOOD.replace("    double_texting: queue\n", "").replace("agents:\n", "agents:\n")
    assert parse_manifest(GOOD).identity == parse_manifest(GOOD + "\n# comment\n").identity
    assert parse_manifest(GOOD).identity == parse_manifest(reordered).identity  # queue is the default
    assert parse_manifest(GOOD).identity != parse_manifest(GOOD.replace("0.7", "0.8")).identity


def test_flat_layout_loads_with_a_deprecation_warning():
    flat = (
        "mcp_servers:\n  time: {command: mcp-server-time}\n"
        "agents:\n  a: {model: test, capabilities: [{mcp: time}]}\n"
    )
    with pytest.warns(DeprecationWarning, match="flat layout"):
        m = parse_manifest(flat, source="old.yaml")
    assert "time" in m.host.mcp_servers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("agents: [1, 2", "f.yaml:1: invalid YAML"),
        ("agents:\n  a:\n    modle: fast\n", "f.yaml:3: agents.a.modle: unknown key"),
        (
            "host:\n  models:\n    aliases: {x: y, y: x}\n",
            "f.yaml:3: host.models.aliases.x: alias cycle: x -> y -> x",
        ),
        ("agents:\n  a:\n    model: nope\n", "f.yaml:3: agents.a.model: unknown model alias 'nope'"),
        (
            "agents:\n  a:\n    capabilities:\n      - mcp: ghost\n",
            "f.yaml:4: agents.a.capabilities.0.mcp: unknown MCP server 'ghost'",
        ),
        (
            "host:\n  mcp_servers:\n    s: {args: [x]}\n",
            "f.yaml:3: host.mcp_servers.s: an MCP server needs exactly one",
        ),
        (
            "agents:\n  a:\n    limits: {max_steps: 0}\n",
            "f.yaml:3: agents.a.limits.max_steps: Input should be greater than or equal to 1",
        ),
        ("- 1\n", "f.yaml:1: the manifest must be a mapping"),
    ],
)
def test_errors_name_file_line_and_key_path(text, expected):
    with pytest.raises(ManifestError) as exc:
        parse_manifest(text, source="f.yaml")
    assert str(exc.value).startswith(expected), str(exc.value)


def test_placeholders_resolve_on_the_worker_only():
    assert resolve("Bearer ${TOKEN}", {"TOKEN": "t"}) == "Bearer t"
    assert resolve("${MODEL:-test}", {}) == "test"
    with pytest.raises(MissingVariable, match="TOKEN is not set"):
        resolve("${TOKEN}", {})


def test_relative_skill_folders_are_relative_to_the_manifest_file(tmp_path):
    from agentwolf.config import load_manifest

    path = tmp_path / "conf" / "wolf.yaml"
    path.parent.mkdir()
    path.write_text(
        "host: {skills: {paths: [shared, ~/mine, /abs]}}\n"
        "agents:\n  a: {capabilities: [{skills: [local, '${HOME}/x']}, {skills: default}]}\n"
    )
    manifest = load_manifest(path)
    assert manifest.host.skills.paths == [str(path.parent / "shared"), "~/mine", "/abs"]
    first, second = manifest.agents["a"].capabilities
    assert first.paths == [str(path.parent / "local"), "${HOME}/x"]
    assert second.paths == [".claude/skills", "~/.claude/skills"]  # `default` follows the worker's directory
