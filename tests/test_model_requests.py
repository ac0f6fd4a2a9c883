"""The host's side of a model request (hosts/model_requests.py, hosts/flow.py): what a request
carries to the provider's limiter travels in its arguments, not in ambient state."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.test import TestModel

from agentwolf.config.limits import DEFAULT_PRIORITY, INTERACTIVE, EndpointLimits, FlowPolicy
from agentwolf.hosts import flow
from agentwolf.hosts.flow import Endpoint, Flow, FlowModel


async def test_a_request_s_priority_reaches_the_limiter_through_the_model_it_is_bound_to():
    """`flow.bind` hands one request's waits (and with them its session's priority) to every
    flow-controlled member of the host's model; the host's shared model stays unbound, so two
    requests at once never see each other's priority."""
    limited = FlowModel(TestModel(), Flow(None, "q", FlowPolicy()), Endpoint("e", "e", EndpointLimits()), "t")  # type: ignore[arg-type]
    shared = FallbackModel(limited, TestModel())
    waits = flow.Waits(priority=INTERACTIVE)
    bound = flow.bind(shared, waits)
    assert isinstance(bound, FallbackModel) and bound is not shared
    member = bound.models[0]
    assert isinstance(member, FlowModel) and member.waits is waits and member.wrapped is limited.wrapped
    since = datetime.now(UTC)
    asked = await member._ask([], None, ModelRequestParameters(), since, "lease")
    assert asked.priority == INTERACTIVE
    unbound = await limited._ask([], None, ModelRequestParameters(), since, "lease")
    assert unbound.priority == DEFAULT_PRIORITY and limited.waits is None
