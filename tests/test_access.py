"""The one home of tenancy (agentwolf/access.py), checked without a server: activities read the
tenant from the calling workflow's id, and input that claims another tenant or session, a caller
whose id names no tenant, or a tenant this worker does not serve is refused, never retried."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentwolf.access import TenantError, caller_tenant, check_caller, check_tenant_name, workflow_id
from agentwolf.activities.evals import eval_steps
from agentwolf.workflows.evals.run import StepsInput


def called_from(wid: str) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=wid)
    return env


def refused(env: ActivityEnvironment, fn: Callable[..., object], *args: object) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        env.run(fn, *args)
    assert caught.value.type == "TenantMismatch" and caught.value.non_retryable
    return caught.value


def test_activities_take_the_tenant_from_the_callers_id_and_refuse_any_other():
    acme = workflow_id("acme", "s1")
    assert acme == "wolf/acme/s1"
    assert called_from("wolf-config/acme/notes").run(caller_tenant, "acme") == "acme"
    assert called_from("wolf-fire/acme/nightly-1").run(caller_tenant) == "acme"
    # a registry of one tenant asked to act for another; a caller whose id names no tenant
    assert "'beta'" in str(refused(called_from("wolf-config/acme/notes"), caller_tenant, "beta"))
    refused(called_from("not-ours/acme/x"), caller_tenant)
    refused(called_from("wolf//x"), caller_tenant)

    called_from(acme).run(check_caller, acme, "acme", None)
    called_from(acme).run(check_caller, acme, "acme", "acme")
    # input naming another session, or the right session with a forged tenant
    message = str(refused(called_from(acme), check_caller, workflow_id("acme", "s2"), "acme", None))
    assert "wolf/acme/s2" in message and "wolf/acme/s1" in message
    refused(called_from(acme), check_caller, acme, "beta", None)
    # a worker that serves one tenant only
    assert "serves tenant 'beta' only" in str(refused(called_from(acme), check_caller, acme, "acme", "beta"))

    # a worker that serves one tenant only, for a caller that is not a session (an eval run)
    assert "serves tenant 'beta' only" in str(
        refused(called_from(workflow_id("acme", "_eval-1")), caller_tenant, "acme", "beta")
    )


async def test_an_eval_run_reads_the_steps_of_its_own_tenant_s_sessions_only():
    """`wolf.eval_steps` took any workflow id from its input and read that session's transcript."""
    run = called_from(workflow_id("acme", "_eval-1"))
    for session in (workflow_id("beta", "_eval-1.case-1"), "no-tenant-here"):
        with pytest.raises(ApplicationError) as caught:
            await run.run(eval_steps, StepsInput(workflow_id=session, start=0))
        assert caught.value.type == "TenantMismatch" and caught.value.non_retryable


@pytest.mark.parametrize("name", ["a/b", "", "../etc", "x" * 65, "-lead", "sp ace", "tab\t", "é"])
def test_tenant_names_that_could_not_be_part_of_an_id_are_refused(name):
    with pytest.raises(TenantError, match="invalid tenant name"):
        check_tenant_name(name)
