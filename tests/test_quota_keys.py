"""The quotas' keys under their name (`models.quotas`, the policy's `quotas:` and its `models:`)
and under their old ones (`models.limits`, `flow:`, `flow.limits`), read the same with a
deprecation warning and a log line (agentwolf/config/quotas.py `renamed`)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from agentwolf.config import ManifestError, parse_manifest
from agentwolf.config.policy import load_policy

ENTRY = '{match: "openai:*", rpm: 60}'


def _manifest(key: str) -> str:
    return f"host:\n  models:\n    {key}:\n      - {ENTRY}\nagents:\n  a: {{model: 'openai:gpt-4o-mini'}}\n"


def test_the_manifest_reads_quotas_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manifest = parse_manifest(_manifest("quotas"))
    assert [q.rpm for q in manifest.host.models.quotas] == [60]


def test_the_manifest_reads_the_old_limits_key_as_quotas_with_a_deprecation(caplog) -> None:
    with caplog.at_level(logging.WARNING), pytest.deprecated_call(match="models.quotas"):
        manifest = parse_manifest(_manifest("limits"))
    assert [q.rpm for q in manifest.host.models.quotas] == [60]
    assert "`models.limits` is deprecated" in caplog.text
    assert manifest.identity == parse_manifest(_manifest("quotas")).identity  # one config, either key


def test_the_manifest_refuses_both_spellings_at_once() -> None:
    text = f"host:\n  models:\n    quotas: [{ENTRY}]\n    limits: [{ENTRY}]\nagents:\n  a: {{model: x}}\n"
    with pytest.raises(ManifestError, match="both given"):
        parse_manifest(text)


def test_the_policy_reads_quotas_and_the_old_flow_section_alike(tmp_path: Path) -> None:
    new, old = tmp_path / "new.yaml", tmp_path / "old.yaml"
    new.write_text(f"quotas:\n  models: [{ENTRY}]\n  tenants: {{acme: 3}}\n")
    old.write_text(f"flow:\n  limits: [{ENTRY}]\n  tenants: {{acme: 3}}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        current = load_policy(new).quotas
    with pytest.deprecated_call(match="quotas.models"):
        former = load_policy(old).quotas
    assert current == former
    assert [q.rpm for q in former.models] == [60] and former.weight("acme") == 3
