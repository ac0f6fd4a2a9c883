"""The host's side of a model request (hosts/model_requests.py, hosts/quotas_model.py): what a request
carries to the provider's quota workflow travels in its arguments, not in ambient state."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.test import TestModel

from agentwolf.config.quotas import DEFAULT_PRIORITY, INTERACTIVE, EndpointQuota, QuotaPolicy
from agentwolf.hosts import quotas
from agentwolf.hosts.quotas import Endpoint, QuotaModel, Quotas


async def test_a_request_s_priority_reaches_the_limiter_through_the_model_it_is_bound_to():
    """`quotas.bind` hands one request's waits (and with them its session's priority) to every
    quota-controlled member of the host's model; the host's shared model stays unbound, so two
    requests at once never see each other's priority."""
    fleet = Quotas(None, "q", QuotaPolicy())  # type: ignore[arg-type]
    limited = QuotaModel(TestModel(), fleet, Endpoint("e", "e", EndpointQuota()), "t")
    shared = FallbackModel(limited, TestModel())
    waits = quotas.Waits(priority=INTERACTIVE)
    bound = quotas.bind(shared, waits)
    assert isinstance(bound, FallbackModel) and bound is not shared
    member = bound.models[0]
    assert isinstance(member, QuotaModel) and member.waits is waits and member.wrapped is limited.wrapped
    since = datetime.now(UTC)
    asked = await member._ask([], None, ModelRequestParameters(), since, "lease")
    assert asked.priority == INTERACTIVE
    unbound = await limited._ask([], None, ModelRequestParameters(), since, "lease")
    assert unbound.priority == DEFAULT_PRIORITY and limited.waits is None
