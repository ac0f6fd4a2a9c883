"""Listing verbs piped: tab-separated lines with a header, cells never cut (issue 24; `wolf list`
already did so, `wolf config list` and `wolf config history` cut names to 80 columns)."""

from __future__ import annotations

import uuid

from tests.conftest import wait_for
from tests.test_cli import _wolf
from tests.test_configs import _yaml

NAME = "a-config-name-long-enough-to-be-cut-by-a-table-".ljust(60, "x")


async def test_config_list_and_history_are_tsv_when_piped(client, tmp_path):
    from agentwolf.worker.bootstrap import TASK_QUEUE, create_worker

    address = client.service_client.config.target_host
    tenant = f"tsv-{uuid.uuid4().hex[:6]}"
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE)

    async def wolf(*args: str):
        return await _wolf(address, *args, WOLF_TENANT=tenant)

    async with worker:
        pushed = await wolf("config", "push", NAME, _yaml(tmp_path / "v1.yaml", "first"), "--note", "a note")
        assert pushed.returncode == 0, pushed.stderr
        listed = await wait_for(
            lambda: _rows(wolf("config", "list"), lambda rows: len(rows) == 2), timeout=20
        )
        history = await _rows(wolf("config", "history", NAME), lambda rows: True)
        await hosts.close()
    assert listed[0] == ["config", "version", "identity", "pushed", "note"]
    assert listed[1][:2] == [NAME, "1"] and listed[1][4] == "a note" and len(listed[1][2]) >= 12
    assert history[0] == ["version", "identity", "pushed", "sessions told", "note"]
    assert history[1][0] == "1" and history[1][1] == listed[1][2] and history[1][4] == "a note"


async def _rows(run, done):
    result = await run
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    return rows if done(rows) else None
