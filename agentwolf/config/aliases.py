"""Model alias resolution: an agent's `model` (alias, `provider:model`, or the host default)
to a concrete spec: one `provider:model` string, or a fallback chain of them."""

from __future__ import annotations

from agentwolf.config.manifest import FallbackAlias, ModelsConfig
from agentwolf.config.suggest import did_you_mean, listing, model_spec

# Names pydantic-ai (or the worker) understands without a provider prefix.
BUILTIN_MODELS = frozenset({"test"})


class AliasError(ValueError):
    """An alias that cannot be resolved: unknown, or part of a cycle."""


def resolve_model(models: ModelsConfig, name: str | None) -> list[str]:
    """Expand `name` to the ordered list of concrete model specs (one entry unless a fallback)."""
    name = name or models.defaults.model
    if not name:
        raise AliasError("no model: the agent names none and host.models.defaults.model is unset")
    return _expand(models, name, ())


def _expand(models: ModelsConfig, name: str, seen: tuple[str, ...]) -> list[str]:
    if name in seen:
        raise AliasError(f"alias cycle: {' -> '.join((*seen, name))}")
    target = models.aliases.get(name)
    if target is None:
        if ":" in name or name in BUILTIN_MODELS:
            return [name]
        hint = did_you_mean(name, models.aliases)
        if not hint and (spec := model_spec(name)):
            hint = f": a model is `provider:name`, did you mean {spec!r}?"
        raise AliasError(
            f"unknown model alias {name!r}{hint} (aliases in this config: {listing(models.aliases)})"
        )
    if isinstance(target, FallbackAlias):
        return [spec for member in target.models for spec in _expand(models, member, (*seen, name))]
    return _expand(models, target, (*seen, name))
