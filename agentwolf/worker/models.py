"""Build pydantic-ai models on the worker from concrete specs, with the host's provider settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.providers import Provider, infer_provider, infer_provider_class

from agentwolf.config.manifest import ProviderConfig
from agentwolf.config.placeholders import resolve

LOCAL_PREFIX = "local:"


def build_model(
    specs: list[str],
    providers: Mapping[str, ProviderConfig],
    local_models: Mapping[str, Model],
    env: Mapping[str, str] | None = None,
) -> Model:
    """One model for a spec chain; several specs make a `FallbackModel` tried in order."""
    models = [_build_one(spec, providers, local_models, env) for spec in specs]
    return models[0] if len(models) == 1 else FallbackModel(*models)


def _build_one(
    spec: str, providers: Mapping[str, ProviderConfig], local_models: Mapping[str, Model], env: Mapping[str, str] | None
) -> Model:
    if spec.startswith(LOCAL_PREFIX):
        name = spec.removeprefix(LOCAL_PREFIX)
        try:
            return local_models[name]
        except KeyError:
            raise LookupError(
                f"model {spec!r} is not registered on this worker (registered: {sorted(local_models) or 'none'})"
            ) from None

    def provider_factory(name: str) -> Provider[Any]:
        config = providers.get(name)
        if config is None:
            return infer_provider(name)
        kwargs = {k: resolve(v, env) for k, v in config.model_dump(exclude_none=True).items()}
        return infer_provider_class(name)(**kwargs)

    return infer_model(spec, provider_factory=provider_factory)
