"""Tenants: a client serves one tenant and refuses another's sessions; the tenant -> namespace map."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from agentwolf.access import TenantError, namespace_for, tenant_namespaces
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.workflows.session.workflow import SessionWorkflow
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import AGENT_ATTR, TENANT_ATTR, workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, text


async def test_a_client_cannot_read_steer_or_interrupt_another_tenants_session(
    client, task_queue, run_worker
):
    acme = WolfClient(client, tenant=f"acme-{uuid.uuid4().hex[:6]}", task_queue=task_queue)
    beta = WolfClient(client, tenant=f"beta-{uuid.uuid4().hex[:6]}", task_queue=task_queue)
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        sid = await beta.start_session("a", make_manifest())
        full = workflow_id(beta.tenant, sid)
        for call in (
            lambda: acme.status(full),
            lambda: acme.steer(full, "psst"),
            lambda: acme.interrupt(full),
            lambda: acme.transcript(full),
            lambda: acme.prompt(full, "hi"),
            lambda: acme.close(full),
        ):
            with pytest.raises(
                TenantError, match=f"belongs to tenant '{beta.tenant}', not to '{acme.tenant}'"
            ):
                await call()
        with pytest.raises(TenantError, match="belongs to tenant"):
            await anext(acme.events(full))
        # A bare session id names a session of the client's own tenant: there is none.
        for call in (lambda: acme.status(sid), lambda: acme.steer(sid, "psst"), lambda: acme.interrupt(sid)):
            with pytest.raises(SessionNotFound, match=f"session '{sid}' not found in tenant '{acme.tenant}'"):
                await call()
        # Its own tenant reaches it by either form.
        assert (await beta.status(full)).session_id == sid
        await wait_for(lambda: _listed(beta, sid))
        assert sid not in {s.session_id for s in await acme.list_sessions()}
        assert {s.tenant for s in await beta.list_sessions()} == {beta.tenant}
        await beta.close(sid)
        await beta.result(sid)


async def _listed(wolf, sid):
    return sid in {s.session_id for s in await wolf.list_sessions()}


async def test_a_session_whose_tenant_attribute_differs_is_refused(client, task_queue):
    """An id in tenant acme but WolfTenant beta (started by something else): the attribute wins."""
    acme = WolfClient(client, tenant="acme", task_queue=task_queue)
    sid = f"forged-{uuid.uuid4().hex[:6]}"
    handle = await client.start_workflow(
        SessionWorkflow.run,
        SessionInput(session_id=sid, tenant="beta", agent="a", manifest=make_manifest()),
        id=workflow_id("acme", sid),
        task_queue=task_queue,  # no worker: the session never runs, describe is enough
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(TENANT_ATTR, "beta"), SearchAttributePair(AGENT_ATTR, "a")]
        ),
    )
    try:
        with pytest.raises(TenantError, match="belongs to tenant 'beta', not to 'acme'"):
            await acme.steer(sid, "hi")
    finally:
        await handle.terminate()


def test_tenant_names_and_the_namespace_map():
    for bad in ("a/b", "", "../x", "-x"):
        with pytest.raises(TenantError, match="invalid tenant name"):
            WolfClient(None, tenant=bad)  # type: ignore[arg-type]
    env = {"WOLF_TENANT_NAMESPACES": " acme=acme-ns, beta = beta-ns ,"}
    assert tenant_namespaces(env) == {"acme": "acme-ns", "beta": "beta-ns"}
    assert namespace_for("acme", env) == "acme-ns" and namespace_for("other", env) is None
    for bad in ("acme", "acme=", "a/b=ns"):
        with pytest.raises(TenantError):
            tenant_namespaces({"WOLF_TENANT_NAMESPACES": bad})


async def test_a_mapped_tenant_lives_in_its_own_namespace(env, client, task_queue, monkeypatch):
    """Hard isolation: the client puts the tenant's sessions in its namespace; a worker serves it."""
    from datetime import timedelta

    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
    from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
    from temporalio.client import Client
    from temporalio.service import RPCError

    from agentwolf.payloads import data_converter
    from agentwolf.worker.bootstrap import create_worker
    from agentwolf.workflows.types import ACTIVE_ATTR, SEARCH_ATTRIBUTES, workflow_id

    namespace = f"iso-{uuid.uuid4().hex[:6]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=timedelta(days=1))
    )
    # Set up as before WolfActive existed: sessions start and finish without it (no `wolf setup` yet).
    older = [a for a in SEARCH_ATTRIBUTES if a != ACTIVE_ATTR]
    request = AddSearchAttributesRequest(
        namespace=namespace, search_attributes={a.name: int(a.indexed_value_type) for a in older}
    )
    for attempt in range(50):  # a new namespace takes a moment to be usable
        try:
            await client.operator_service.add_search_attributes(request)
            break
        except RPCError:
            if attempt == 49:
                raise
            await asyncio.sleep(0.2)
    monkeypatch.setenv("WOLF_TENANT_NAMESPACES", f"iso={namespace}")
    address = client.service_client.config.target_host
    wolf = await WolfClient.connect(address, tenant="iso", task_queue=task_queue)
    assert wolf.client.namespace == namespace
    served = await Client.connect(address, namespace=namespace, data_converter=data_converter())
    worker, hosts = create_worker(
        served, task_queue=task_queue, local_models={"m": Script(lambda s: text("isolated")).model}
    )
    async with worker:
        sid = await wolf.submit("hi", "a", make_manifest())
        assert (await wolf.result(sid)).output == "isolated"  # its state changes set no WolfActive
        described = await served.get_workflow_handle(workflow_id("iso", sid)).describe()
        assert ACTIVE_ATTR not in described.typed_search_attributes and not wolf._stamps_activity
        await hosts.close()
    shared = WolfClient(client, tenant="iso", task_queue=task_queue)  # the default namespace
    with pytest.raises(SessionNotFound):
        await shared.status(sid)
