"""One duration grammar for every verb that takes one: `payloads gc --older-than`, `schedule
--every/--jitter` and `usage --since` (which also takes a date) read `7d`, `1h30m`, `2w`, `PT8H`
alike, and refuse anything else with the same sentence (issue 24)."""

from __future__ import annotations

import json
import uuid

from agentwolf.client.durations import FORMS
from agentwolf.client.wolf_client import WolfClient
from tests.conftest import make_manifest
from tests.support.models import Script, text
from tests.test_cli import _wolf


async def test_every_verb_refuses_a_bad_duration_with_the_same_forms(client, tmp_path):
    address = client.service_client.config.target_host
    manifest = tmp_path / "wolf.yaml"
    manifest.write_text("agents:\n  a:\n    model: test\njobs:\n  j: {agent: a, prompt: hi}\n")
    runs = {
        "--older-than": await _wolf(
            address, "payloads", "gc", "--older-than", "7 days", WOLF_PAYLOAD_STORE=str(tmp_path)
        ),
        "every": await _wolf(
            address, "schedule", "create", "s", "--every", "7 days", "--job", "j", "--config", str(manifest)
        ),
        "--since": await _wolf(address, "usage", "--since", "7 days"),
    }
    for what, run in runs.items():
        assert run.returncode == 2, run.stderr
        assert FORMS in " ".join(run.stderr.split()), (what, run.stderr)
    listed = await _wolf(address, "schedule", "list", "--json")
    assert "s" not in [s["name"] for s in json.loads(listed.stdout)]  # nothing was created


async def test_usage_since_takes_a_duration_ago(client, task_queue, run_worker):
    tenant = f"since-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
    address = client.service_client.config.target_host
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        await wolf.result(await wolf.submit("hi", "a", make_manifest()))
        reports = {
            since: json.loads(
                (await _wolf(address, "usage", "--tenant", tenant, "--since", since, "--json")).stdout
            )
            for since in ("1h", "PT1H", "2000-01-01")
        }
    assert [r["sessions"] for r in reports.values()] == [1, 1, 1]
    assert reports["1h"]["total"]["requests"] == 1
