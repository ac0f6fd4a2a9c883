"""A model chain's context window, resolved on the worker when an agent compiles (recorded in the
compiled agent, so workflow code only reads it): the manifest's `host.models.context_windows`, else
genai-prices' bundled model data (never updated over the network), else None (learnt later from a
provider's context-length error)."""

from __future__ import annotations

from genai_prices.data_snapshot import get_snapshot

from agentwolf.activities.cost import for_model
from agentwolf.config.manifest import ModelsConfig

_PROVIDERS = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "google-gla": "google",
    "google-vertex": "google",
}


def context_window(models: ModelsConfig, specs: list[str], resolved: list[str]) -> int | None:
    """The smallest window of the chain (a fallback may answer with any member); None when one
    member's is unknown. `resolved`: the specs with placeholders resolved, for the genai-prices lookup."""
    windows = [
        for_model(models, models.context_windows, spec) or known_window(name)
        for spec, name in zip(specs, resolved, strict=True)
    ]
    return min(windows) if windows and all(w is not None for w in windows) else None  # type: ignore[type-var]


def known_window(spec: str) -> int | None:
    """genai-prices' `context_window` for a `provider:model` spec, if it knows the model."""
    provider, _, model = spec.rpartition(":")
    snapshot = get_snapshot()
    for provider_id in (_PROVIDERS.get(provider, provider) or None, None):
        try:
            return snapshot.find_provider_model(model, None, provider_id, None)[1].context_window
        except LookupError:
            continue
    return None
