"""Build pydantic-ai models on the worker from concrete specs, with the host's provider settings."""

from __future__ import annotations

import functools
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.providers import Provider, infer_provider, infer_provider_class

from agentwolf.config.manifest import ProviderConfig
from agentwolf.config.policy import Secrets
from agentwolf.config.suggest import listing
from agentwolf.plugins import LocalModel

LOCAL_PREFIX = "local:"


def build_model(
    specs: list[str],
    providers: Mapping[str, ProviderConfig],
    local_models: Mapping[str, LocalModel],
    secrets: Secrets,
    wrap: Callable[[Model, str], Model] | None = None,
) -> Model:
    """One model for a spec chain; several specs make a `FallbackModel` tried in order. `wrap(model,
    spec)` wraps each member (quotas, agentwolf/hosts/quotas.py).

    Specs and provider settings keep their placeholders until here, the moment of use. Slow: it
    imports the provider's client library and builds what its first answer would (`warm_openai`);
    hosts call it in a thread."""
    models = [_build_one(secrets.resolve(spec), providers, local_models, secrets) for spec in specs]
    if "openai" in sys.modules:
        warm_openai()
    if wrap is not None:
        models = [wrap(model, spec) for model, spec in zip(models, specs, strict=True)]
    return models[0] if len(models) == 1 else FallbackModel(*models)


def _build_one(
    spec: str,
    providers: Mapping[str, ProviderConfig],
    local_models: Mapping[str, LocalModel],
    secrets: Secrets,
) -> Model:
    if spec.startswith(LOCAL_PREFIX):
        name = spec.removeprefix(LOCAL_PREFIX)
        try:
            local = local_models[name]
        except KeyError:
            raise LookupError(
                f"model {spec!r} is not registered on this worker (registered: {listing(local_models)})"
            ) from None
        return local if isinstance(local, Model) else local()  # a plugin's factory, called per host

    def provider_factory(name: str) -> Provider[Any]:
        config = provider_config(providers, name)
        if config is None:
            return infer_provider(name)
        kwargs = {k: secrets.resolve(v) for k, v in config.model_dump(exclude_none=True).items()}
        if "base_url" in kwargs and "api_key" not in kwargs:
            # A manifest that points a provider elsewhere gets only the key it names: the worker's own
            # key (OPENAI_API_KEY & co, read by the provider itself) must not go to its URL.
            kwargs["api_key"] = NO_KEY
        return infer_provider_class(name)(**kwargs)

    return infer_model(spec, provider_factory=provider_factory)


NO_KEY = "none"


def provider_config(providers: Mapping[str, ProviderConfig], name: str) -> ProviderConfig | None:
    """The settings for provider `name`: its own entry, else the entry of a spelling of the same
    provider (`providers.openai` serves `openai-chat:` and `openai-responses:` specs too)."""
    if name in providers:
        return providers[name]
    try:
        wanted = infer_provider_class(name)
    except ValueError:
        return None
    for key, config in providers.items():
        try:
            if infer_provider_class(key) is wanted:
                return config
        except ValueError:
            continue
    return None


@functools.cache
def warm_openai() -> None:
    """Build the pydantic schemas of the openai library's response types now (once per process).

    The library defers them to first use: a worker's first streamed answer built them on the
    activity's event loop, about 3 s on a busy machine (10 s profiled), and held its heartbeats
    past the timeout, so Temporal ran the request again. Here, in the building thread, 1.2 s."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent

    seen: set[type[BaseModel]] = set()

    def rebuild(tp: object) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp not in seen:
                seen.add(tp)
                tp.model_rebuild()
            return
        for arg in typing.get_args(tp):
            rebuild(arg)

    for tp in (ResponseStreamEvent, Response, ChatCompletionChunk, ChatCompletion):
        rebuild(tp)
