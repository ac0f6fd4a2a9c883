"""Who answered, and what it cost: a fallback chain's answer is priced as the member that gave it,
and the members it moved on from count where they reported usage (core review, finding 15)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelRequest, ModelRequestAttempt, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import RequestUsage

from agentwolf.activities.cost import attempts_cost, request_cost, used_spec
from agentwolf.config.manifest import ModelsConfig

SPECS = ["local:first", "local:second"]
MODELS = ModelsConfig.model_validate(
    {
        "prices": {
            "local:first": {"input_per_mtok": 1, "output_per_mtok": 1},
            "local:second": {"input_per_mtok": 100, "output_per_mtok": 100},
        }
    }
)


def _down(messages, info):
    raise ModelHTTPError(503, "gpt-4o", "overloaded")


def _answer(messages, info):
    return ModelResponse(parts=[TextPart("hi")], usage=RequestUsage(input_tokens=10_000, output_tokens=0))


def _chain() -> FallbackModel:
    """Two members serving one model name (one provider's model at two endpoints)."""
    return FallbackModel(
        FunctionModel(_down, model_name="gpt-4o"), FunctionModel(_answer, model_name="gpt-4o")
    )


async def test_the_member_that_answered_is_priced_though_both_serve_one_model_name():
    """By name, the first member (1 USD/Mtok) was charged for the second's (100 USD/Mtok) answer."""
    chain = _chain()
    response = await model_request(chain, [ModelRequest(parts=[UserPromptPart("x")])])
    assert used_spec(chain, SPECS, response) == "local:second"
    assert request_cost(response, used_spec(chain, SPECS, response), MODELS) == 1.0


def test_members_a_fallback_moved_on_from_count_what_they_reported():
    chain = _chain()
    rejected = ModelRequestAttempt(
        model_name="gpt-4o",
        provider_name="function",
        outcome="rejected",
        timestamp=datetime.now(UTC),
        duration=timedelta(seconds=1),
        usage=RequestUsage(input_tokens=500_000, output_tokens=500_000),
    )
    response = ModelResponse(parts=[TextPart("hi")], model_name="gpt-4o", failed_attempts=[rejected])
    assert used_spec(chain, SPECS, response) == "local:second"
    assert attempts_cost(chain, SPECS, response, MODELS) == 1.0  # the first member's price, its tokens
    raised = ModelResponse(parts=[TextPart("hi")], failed_attempts=[rejected.__class__(
        model_name="gpt-4o", outcome="error", timestamp=rejected.timestamp, duration=rejected.duration
    )])  # fmt: skip
    assert attempts_cost(chain, SPECS, raised, MODELS) == 0.0  # it raised: nothing reported
