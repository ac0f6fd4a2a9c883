"""One model label everywhere (issue 24): a model named through an alias whose target is a
placeholder (`${WOLF_MODEL:-openai:gpt-4o-mini}`) goes by its resolved spec in the worker's
Prometheus page, in `wolf usage --by model` and in the `compiled` event; the page follows
Prometheus' naming (`_total` counters, no `service_name` of the SDK's); piped tables are TSV."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import yaml

from agentwolf.worker.bootstrap import TASK_QUEUE
from tests.conftest import wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.test_cli import _wolf
from tests.test_telemetry import _free_port, _scrape

MODEL = "openai:gpt-4o-mini"
TENANT = ("--tenant", "labels")
LABEL = re.compile(r'model="([^"]*)"')


async def test_prometheus_model_label_is_wolf_usage_by_model_key(env, tmp_path):
    address = env.client.service_client.config.target_host
    port = _free_port()
    with ScriptedOpenAI(lambda request: Reply(text="hello there")) as server:
        config = tmp_path / "wolf.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "host": {
                        "models": {
                            "providers": {"openai": {"api_key": "k", "base_url": server.base_url}},
                            "aliases": {"fast": "${WOLF_MODEL:-" + MODEL + "}"},
                        },
                    },
                    "agents": {"a": {"model": "fast"}},
                }
            )
        )
        worker_env = {k: v for k, v in os.environ.items() if k != "WOLF_MODEL"}
        worker = subprocess.Popen(
            [sys.executable, "-m", "agentwolf.worker", "--address", address, "--task-queue", TASK_QUEUE]
            + ["--metrics-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**worker_env, "WOLF_HOME": str(tmp_path / "home")},
        )
        try:
            done = await _wolf(address, "submit", "hi", "-a", "a", "-c", str(config), "--wait", *TENANT)
            assert done.returncode == 0, done.stderr
            page = await wait_for(lambda: (p := _scrape(port)) and "wolf_cost_usd_sum" in p and p, timeout=60)
            usage = await _wolf(address, "usage", "--by", "model", *TENANT)
            follow = await _wolf(address, "follow", "--json", *TENANT, _session(done.stdout))
        finally:
            worker.terminate()
            worker.wait(15)
    ours = [line for line in page.splitlines() if line.startswith("wolf_")]
    labels = {m for line in ours for m in LABEL.findall(line)}
    assert labels == {MODEL}, ours  # steps, tokens and cost alike: not "gpt-4o-mini" nor the placeholder
    assert any(line.startswith("wolf_steps_total{") for line in ours)
    assert any(line.startswith("wolf_tokens_total{") for line in ours)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", page, re.M))
    counters = [name for name, kind in types.items() if kind == "counter"]
    assert counters and all(name.endswith("_total") for name in counters), counters
    assert "service_name=" not in page
    buckets = [line for line in ours if line.startswith("wolf_cost_usd_bucket{")]
    assert any('le="0.000001"' in line for line in buckets)  # a cheap request lands in a low bucket

    # Piped: tab-separated, a header line, whole keys; the model key is the page's label.
    assert usage.returncode == 0, usage.stderr
    rows = [line.split("\t") for line in usage.stdout.splitlines()]
    assert rows[0][:2] == ["model", "sessions"] and rows[-1][0] == "total"
    assert [row[0] for row in rows[1:-1]] == [MODEL]

    compiled = [json.loads(line) for line in follow.stdout.splitlines() if '"compiled"' in line]
    assert compiled and f"model {MODEL};" in compiled[0]["text"]


def _session(stdout: str) -> str:
    return re.search(r"\b[0-9a-f]{12}\b", stdout).group()  # type: ignore[union-attr]
