"""Temporal's connection conventions: a TOML profile (TEMPORAL_CONFIG_FILE) names the server and no
local stack starts; `wolf setup` registers the search attributes on a fresh namespace, idempotently;
a namespace without them, or without a worker, is reported with the fix."""

from __future__ import annotations

import json
import socket
import uuid
from datetime import timedelta
from pathlib import Path

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.service import RPCError

from agentwolf.workflows.types import SEARCH_ATTRIBUTES, workflow_id
from tests.conftest import wait_for
from tests.test_cli import _scripted_manifest, _wolf


def _profile_env(tmp_path: Path, address: str, namespace: str = "default") -> dict[str, str]:
    """A Temporal config file with profile `wolftest`, and a local stack that would start elsewhere."""
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.wolftest]\naddress = "{address}"\nnamespace = "{namespace}"\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        unused = s.getsockname()[1]
    return {
        "TEMPORAL_CONFIG_FILE": str(config),
        "WOLF_HOME": str(tmp_path / "home"),
        "WOLF_LOCAL_ADDRESS": f"127.0.0.1:{unused}",
    }


async def test_a_profile_names_the_server_and_no_local_stack_starts(client, tmp_path):
    env = _profile_env(tmp_path, client.service_client.config.target_host)
    config = str(_scripted_manifest(tmp_path))
    for how in ({"TEMPORAL_PROFILE": "wolftest"}, {"args": ("--profile", "wolftest")}):
        args = how.pop("args", ())
        started = await _wolf(None, "submit", "hi", "-a", "a", "-c", config, "--json", *args, **env, **how)
        assert started.returncode == 0, started.stderr
        assert "starting the embedded local stack" not in started.stderr
        handle = client.get_workflow_handle(workflow_id("default", json.loads(started.stdout)["session_id"]))
        await handle.describe()  # the session is on the profile's server
        await handle.terminate()  # no later test's worker on the default queue should run it
    home = tmp_path / "home"
    assert not (home / "server.pid").exists() and not (home / "worker.pid").exists()


async def _fresh_namespace(client) -> str:
    name = f"wolf-setup-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=name, workflow_execution_retention_period=Duration(seconds=86400))
    )

    async def known() -> bool:
        try:
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=name), timeout=timedelta(seconds=2)
            )
        except RPCError:
            return False
        return True

    await wait_for(known, timeout=30, interval=0.2)
    return name


async def test_setup_registers_the_search_attributes_once_and_their_lack_names_the_fix(client, tmp_path):
    address = client.service_client.config.target_host
    namespace = await _fresh_namespace(client)
    env = _profile_env(tmp_path, address, namespace)
    config = str(_scripted_manifest(tmp_path))
    submit = ("submit", "hi", "-a", "a", "-c", config, "--profile", "wolftest")

    lacking = await _wolf(None, *submit, **env)
    assert lacking.returncode == 2 and "wolf setup" in lacking.stderr, lacking.stderr
    assert "Traceback" not in lacking.stderr

    first = await _wolf(None, "setup", "--profile", "wolftest", "--json", **env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "namespace": namespace,
        "added": [key.name for key in SEARCH_ATTRIBUTES],
    }
    again = await _wolf(None, "setup", "--address", address, "--namespace", namespace, **env)
    assert again.returncode == 0 and "already has" in again.stdout, again.stderr

    # Now sessions start there; no worker polls that namespace, and the verbs say so with the fix.
    started = await _wolf(None, *submit, "--json", **env)
    assert started.returncode == 0, started.stderr
    assert "no worker polls" in started.stderr and "wolf up" in started.stderr
    sid = json.loads(started.stdout)["session_id"]
    status = await _wolf(None, "status", sid, "--profile", "wolftest", **env)
    assert status.returncode == 3 and "wolf worker" in status.stderr, status.stderr
