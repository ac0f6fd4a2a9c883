"""`jobs:` and `hooks:` in the manifest: validation, variable binding, templates, result checks."""

from __future__ import annotations

import hashlib
import json

import pytest

from agentwolf.config.jobs import JobError
from agentwolf.config.loading import ManifestError, parse_manifest
from agentwolf.workflows.session.output import check_result

MANIFEST = """
agents:
  coder: {model: "local:m"}
jobs:
  triage:
    agent: coder
    prompt: "Triage {issue_url} for {repo} ({count}, {urgent}, {{literal}})."
    vars:
      issue_url: {type: string}
      repo: {type: string, default: main}
      count: {type: integer, default: 3}
      urgent: {type: boolean, default: false}
    output:
      type: object
      properties: {severity: {enum: [low, medium, high]}, summary: {type: string}}
      required: [severity, summary]
hooks:
  new-issue:
    job: triage
    vars: {issue_url: "{body.issue.html_url}", repo: "{body.repository.name}"}
    secret: HOOK_SECRET
  poke:
    session: s1
    prompt: "New issue {body.issue.title}"
    when_busy: steer
    secret: HOOK_SECRET
"""


def test_a_job_renders_its_prompt_with_typed_defaults() -> None:
    job = parse_manifest(MANIFEST).job("triage")
    assert job.render({"issue_url": "u", "count": "7"}) == "Triage u for main (7, false, {literal})."
    assert job.bind({"issue_url": "u", "urgent": "TRUE"})["urgent"] is True


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"issue_url": "u", "nope": 1}, "unknown variable 'nope'"),
        ({}, "missing variable 'issue_url' (string)"),
        ({"issue_url": "u", "count": "many"}, "variable 'count': 'many' is not an integer"),
        ({"issue_url": "u", "count": True}, "variable 'count': True is not an integer"),
        ({"issue_url": 5}, "variable 'issue_url': 5 is not a string"),
        ({"issue_url": "u", "urgent": "yes"}, "variable 'urgent': 'yes' is not a boolean"),
    ],
)
def test_bad_variables_are_refused_with_the_reason(values: dict[str, object], problem: str) -> None:
    with pytest.raises(JobError, match="this job's variables: issue_url: string") as err:
        parse_manifest(MANIFEST).job("triage").render(values)
    assert problem in str(err.value)


def test_an_unknown_job_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown job 'nope' \(jobs in this config: triage\)"):
        parse_manifest(MANIFEST).job("nope")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("agent: coder\n    prompt", "agent: ghost\n    prompt"),
            r":6: jobs\.triage\.agent: unknown agent 'ghost'",
        ),
        (("job: triage", "job: ghost"), r"hooks\.new-issue\.job: unknown job 'ghost'"),
        (
            ("{enum: [low, medium, high]}", "{type: strin}"),
            r"jobs\.triage\.output: .*not a valid JSON Schema",
        ),
        (("output:\n      type: object", "output:\n      type: array"), "the schema needs `type: object`"),
        (
            ("{issue_url} for", "{ghost} for"),
            r"undeclared variables ghost \(declared: count, issue_url, repo, urgent\)",
        ),
        (("{issue_url} for", "{issue_url.__class__} for"), "undeclared variables"),
        (("default: main", "default: 5"), r"jobs\.triage\.vars\.repo: .*5 is not a string"),
        (("{type: integer, default: 3}", "{type: date}"), r"jobs\.triage\.vars\.count\.type"),
        (("secret: HOOK_SECRET\n  poke", "secret: 's3cr3t value'\n  poke"), "name the secret"),
        (('repo: "{body.repository.name}"', 'ghost: "x"'), r"job 'triage' has no variable 'ghost'"),
        (('issue_url: "{body.issue.html_url}", ', ""), r"job 'triage' needs issue_url: give them here"),
        (("session: s1\n", "session: s1\n    job: triage\n"), "exactly one of `job` or `session`"),
        (('"New issue {body.issue.title}"', '"{env.HOME}"'), "read the request body only"),
    ],
)
def test_bad_jobs_and_hooks_are_clear_errors(edit: tuple[str, str], message: str) -> None:
    old, new = edit
    assert old in MANIFEST
    with pytest.raises(ManifestError, match=message):
        parse_manifest(MANIFEST.replace(old, new, 1))


def test_hook_templates_read_the_body() -> None:
    manifest = parse_manifest(MANIFEST)
    body = {"issue": {"html_url": "https://x/1", "title": "Broken"}, "repository": {"name": "wolf"}}
    assert manifest.hooks["new-issue"].values(body) == {"issue_url": "https://x/1", "repo": "wolf"}
    assert manifest.hooks["poke"].text(body) == "New issue Broken"
    with pytest.raises(JobError, match="the request body has no 'body.issue.title'"):
        manifest.hooks["poke"].text({"issue": {}})


def test_results_are_checked_against_every_schema_keyword() -> None:
    schema = parse_manifest(MANIFEST).job("triage").output
    assert schema is not None
    assert check_result(schema, {"severity": "low", "summary": "ok"}) == []
    assert check_result(schema, {"severity": "urgent", "summary": "ok"}) == [
        "severity: 'urgent' is not one of ['low', 'medium', 'high']"
    ]
    assert check_result(schema, {"severity": "low"}) == ["<result>: 'summary' is a required property"]


def test_a_manifest_without_jobs_keeps_its_identity() -> None:
    """Identity is the config's cache key on workers: adding the `jobs`/`hooks` keys must not change it."""
    plain = parse_manifest("agents:\n  coder: {model: 'local:m'}\n")
    dump = plain.model_dump(mode="json")
    del dump["jobs"], dump["hooks"]
    canonical = json.dumps(dump, sort_keys=True, separators=(",", ":")).encode()
    assert plain.identity == hashlib.sha256(canonical).hexdigest()[:16]
    with_job = MANIFEST.split("hooks:")[0]
    assert parse_manifest(with_job).identity != parse_manifest(with_job.split("jobs:")[0]).identity
