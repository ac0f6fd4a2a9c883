"""A trace a `wolf` command starts keeps its root: the CLI ends with os._exit, which skips the
tracer provider's atexit shutdown, so it must export its queued spans itself."""

from __future__ import annotations

import json

from agentwolf.workflows.types import workflow_id
from tests.conftest import wait_for
from tests.support.otlp_receiver import OtlpReceiver
from tests.test_cli import _wolf


async def test_the_cli_exports_its_start_workflow_span_before_it_exits(env, tmp_path):
    receiver = OtlpReceiver()
    config = tmp_path / "wolf.yaml"
    config.write_text("agents:\n  a:\n    model: test\n")
    address = env.client.service_client.config.target_host
    try:
        started = await _wolf(
            address,
            *("submit", "hi", "-a", "a", "-c", str(config), "--json"),
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_BSP_SCHEDULE_DELAY="60000",  # nothing leaves on the batch timer before the CLI exits
            OTEL_SERVICE_NAME="wolf-cli",
        )
        assert started.returncode == 0, started.stderr
        sid = json.loads(started.stdout.splitlines()[-1])["session_id"]
        # No worker runs this session: end it, so nothing waits for one.
        await env.client.get_workflow_handle(workflow_id("default", sid)).terminate()

        def root_arrived() -> bool:
            return any(
                s.service == "wolf-cli" and str(s.attributes.get("temporalWorkflowID", "")).endswith(sid)
                for s in receiver.named("StartWorkflow:")
            )

        await wait_for(root_arrived, timeout=30)  # the CLI has exited: only its own flush sent it
    finally:
        receiver.close()
