"""What a model request cost in USD, computed on the worker from the response's usage.

A manifest price (`host.models.prices`, by model spec or alias name) wins; else a cost the provider
reported; else genai-prices' bundled data (never updated over the network: `UpdatePrices` is not
called, so the snapshot shipped with the package is the one used). A model nobody prices costs
None, not 0: the session counts it as an unpriced request.

The result travels in the activity's output, so the workflow's sums and budgets replay exactly.
`record` puts it in the worker's metrics, by tenant and model.
"""

from __future__ import annotations

from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel

from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.manifest import ModelPrice, ModelsConfig
from agentwolf.telemetry import metrics


def used_spec(model: Model, specs: list[str], response: ModelResponse) -> str | None:
    """The spec of the chain that answered: a fallback chain names it by the response's model name."""
    if not isinstance(model, FallbackModel):
        return specs[0] if specs else None
    names = [m.model_name for m in model.models]
    if response.model_name in names and len(names) == len(specs):
        return specs[names.index(response.model_name)]
    return None


def manifest_price(models: ModelsConfig, spec: str) -> ModelPrice | None:
    """The manifest's price for `spec`: its own entry, else an alias's whose chain holds it."""
    if spec in models.prices:
        return models.prices[spec]
    for name, price in models.prices.items():
        try:
            if spec in resolve_model(models, name):
                return price
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


COST_USD = metrics.Metric(
    "wolf_cost_usd", "USD of priced model requests, by model and tenant (the histogram's _sum)"
)
UNPRICED = metrics.Metric(
    "wolf_unpriced_requests", "Model requests no price is known for, by model and tenant"
)


def record(tenant: str, model: str, cost_usd: float | None) -> None:
    """This worker's spending in its Prometheus metrics (agentwolf.telemetry.metrics)."""
    if cost_usd is None:
        metrics.count(UNPRICED, model=model, tenant=tenant)
    else:
        metrics.observe(COST_USD, cost_usd, model=model, tenant=tenant)
