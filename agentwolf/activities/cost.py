"""What a model request cost in USD, computed on the worker from the response's usage.

A manifest price (`host.models.prices`, by model spec or alias name) wins; else a cost the provider
reported; else genai-prices' bundled data (never updated over the network: `UpdatePrices` is not
called, so the snapshot shipped with the package is the one used). A model nobody prices costs
None, not 0: the session counts it as an unpriced request.

The result travels in the activity's output, so the workflow's sums and budgets replay exactly.
`record` puts it in the worker's metrics, by tenant and model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel

from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.manifest import ModelPrice, ModelsConfig
from agentwolf.telemetry import metrics

V = TypeVar("V")


def used_spec(model: Model, specs: list[str], response: ModelResponse) -> str | None:
    """The spec of the chain member that answered. A fallback chain tries its members in order and
    records each one it moved on from (`failed_attempts`): the answer is the next one. Names cannot
    tell (two members may serve one model name, and providers answer dated names)."""
    if not isinstance(model, FallbackModel):
        return specs[0] if specs else None
    failed = [a.model_name for a in response.failed_attempts or ()]
    tried = [m.model_name for m in model.models[: len(failed)]]
    if len(model.models) == len(specs) and len(failed) < len(specs) and failed == tried:
        return specs[len(failed)]
    return None


def attempts_cost(model: Model, specs: list[str], response: ModelResponse, models: ModelsConfig) -> float:
    """USD of the chain members a fallback moved on from that reported usage (a rejected answer; one
    that raised reports none): the provider charged them, the response's own usage leaves them out."""
    total = 0.0
    chain = len(model.models) == len(specs) if isinstance(model, FallbackModel) else False
    for i, attempt in enumerate(response.failed_attempts or ()):
        if attempt.usage is not None:
            priced = ModelResponse(
                parts=[],
                usage=attempt.usage,
                model_name=attempt.model_name,
                provider_name=attempt.provider_name,
            )
            total += request_cost(priced, specs[i] if chain else None, models) or 0.0
    return total


def manifest_price(models: ModelsConfig, spec: str) -> ModelPrice | None:
    """The manifest's price for `spec`: its own entry, else an alias's whose chain holds it."""
    return for_model(models, models.prices, spec)


def for_model(models: ModelsConfig, table: Mapping[str, V], spec: str) -> V | None:
    """A manifest table's entry for `spec` (`prices`, `context_windows`): its own, else an alias's
    whose chain holds it."""
    if spec in table:
        return table[spec]
    for name, value in table.items():
        try:
            if spec in resolve_model(models, name):
                return value
        except AliasError:
            continue
    return None


def request_cost(response: ModelResponse, spec: str | None, models: ModelsConfig) -> float | None:
    """USD for one response, or None when neither the manifest, the provider nor genai-prices
    prices its model."""
    usage = response.usage
    price = manifest_price(models, spec) if spec else None
    if price is not None:
        return (usage.input_tokens * price.input_per_mtok + usage.output_tokens * price.output_per_mtok) / 1e6
    if usage.cost is not None:
        return float(usage.cost)
    if not response.model_name:
        return None
    try:
        return float(response.cost().total_price)
    except (LookupError, ValueError):  # unknown model or provider; usage the provider did not report
        return None


def record(tenant: str, model: str, cost_usd: float | None) -> None:
    """This worker's spending in its Prometheus metrics (agentwolf.telemetry.metrics), by model label."""
    if cost_usd is None:
        metrics.count(metrics.UNPRICED, model=model, tenant=tenant)
    else:
        metrics.observe(metrics.COST_USD, cost_usd, model=model, tenant=tenant)
