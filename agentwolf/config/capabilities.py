"""pydantic-ai capabilities named in a manifest: which types a name may mean, and building them.

A name means, in this order of precedence: a type a worker's plugin registered
(`wolf.capability(MyCapability)`), a type an `agentwolf.capabilities` entry point names, a built-in
of pydantic-ai (`CAPABILITY_TYPES`); each by its serialization name (the class name unless it says
otherwise). Specs are built the way `Agent.from_spec` builds them, so arguments are checked the same
way and a spec file written for pydantic-ai means the same thing here. pydantic-ai is imported on
first use: a client that loads a config without such capabilities never pays for it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import inspect
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, get_type_hints

from pydantic import PydanticSchemaGenerationError, TypeAdapter, ValidationError

from agentwolf.config.manifest import WOLF_CAPABILITIES, PydanticCapability
from agentwolf.config.suggest import did_you_mean

if TYPE_CHECKING:
    from pydantic_ai.capabilities import AbstractCapability

ENTRY_POINT_GROUP = "agentwolf.capabilities"

CapabilityTypes = Mapping[str, "type[AbstractCapability[Any]]"]


UNFIT = {
    "MCP": "it connects to the server from inside each run; use `{mcp: <server>}` with the server under "
    "`host.mcp_servers`: pooled per host, under permission rules and approvals",
    "ModelFallback": "it retries on another model within one request; name a fallback alias "
    "(`host.models.aliases.<name>: {type: fallback, models: [...]}`), which the provider quotas see",
    "BatchModelRequests": "a batch answers after minutes or hours, past a model request activity's lifetime",
    "LocalWorkspace": "its files would live on whichever worker ran the call; a session's workspace is "
    "pinned to one host",
    "FileUnderstanding": "it runs a nested agent inside the model request, outside the session's record",
    "WebFetch": "its local fallback fetches from the worker unchecked; use `{web: {fetch: true}}`, which the "
    "worker policy checks at every hop",
    "XSearch": "a native tool of xAI models only, and its local fallback runs unchecked on the worker",
}
"""pydantic-ai built-ins that do not fit a durable session, and why (docs/guides/capabilities.md)."""


class CapabilityError(ValueError):
    """A capability spec that names no known type or whose arguments its type refuses; says which."""


def capability_types(plugins: CapabilityTypes | None = None) -> dict[str, type[AbstractCapability[Any]]]:
    """Every type a spec may name here: pydantic-ai's built-ins, the entry points', the plugins'."""
    from pydantic_ai.capabilities import CAPABILITY_TYPES

    return {**CAPABILITY_TYPES, **_entry_point_types(), **(plugins or {})}


@cache
def _entry_point_types() -> dict[str, type[AbstractCapability[Any]]]:
    from pydantic_ai.capabilities import AbstractCapability

    found: dict[str, type[AbstractCapability[Any]]] = {}
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as exc:
            raise CapabilityError(
                f"entry point {point.name!r} ({ENTRY_POINT_GROUP}: {point.value}) cannot be imported: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(loaded, type) and issubclass(loaded, AbstractCapability)):
            raise CapabilityError(
                f"entry point {point.name!r} ({ENTRY_POINT_GROUP}) names {point.value}, which is not a "
                "pydantic-ai capability class"
            )
        found[loaded.get_serialization_name() or point.name] = loaded
    return found


def build(spec: PydanticCapability, types: CapabilityTypes) -> AbstractCapability[Any]:
    """One capability from its spec, as `Agent.from_spec` would build it; CapabilityError says why not."""
    from pydantic_ai.agent import _capabilities_from_spec
    from pydantic_ai.agent.spec import AgentSpec

    name = spec.name
    if name not in types:
        raise CapabilityError(unknown(name, types))
    if name in UNFIT and _is_builtin(types[name]):
        raise CapabilityError(f"capability {name!r} does not fit a durable session: {UNFIT[name]}")
    custom = [cls for key, cls in types.items() if key == name]
    try:
        parsed = AgentSpec.model_validate({"capabilities": [spec.root]})
        _check_types(types[name], parsed.capabilities[0].args, parsed.capabilities[0].kwargs)
        return _capabilities_from_spec(parsed, custom, {})[0]
    except Exception as exc:  # whatever the type's constructor raises is the spec's fault
        raise CapabilityError(f"capability {name!r}: {_reason(exc)}") from None


def _check_types(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Each argument against its field's type, where pydantic can check that type (pydantic-ai's
    `from_spec` passes arguments through unchecked; its spec schema would have refused them)."""
    if not dataclasses.is_dataclass(cls) or "from_spec" in _own_members(cls):
        return
    try:
        bound = inspect.signature(cls).bind(*args, **kwargs)
        hints = get_type_hints(cls)
    except (TypeError, NameError):
        return  # the constructor says what is wrong
    for key, value in bound.arguments.items():
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(hints[key])
        except (KeyError, PydanticSchemaGenerationError, TypeError, NameError):
            continue
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            problem = "; ".join(e["msg"] for e in exc.errors()[:3])
            raise ValueError(f"argument {key}={value!r}: {problem}") from None


def _own_members(cls: type) -> set[str]:
    """Members defined below pydantic-ai's AbstractCapability (which defines `from_spec` itself)."""
    from pydantic_ai.capabilities import AbstractCapability

    return {
        m
        for c in cls.__mro__
        if c is not AbstractCapability and issubclass(c, AbstractCapability)
        for m in vars(c)
    }


def _is_builtin(cls: type) -> bool:
    return cls.__module__.startswith("pydantic_ai.")


def unknown(name: str, types: CapabilityTypes) -> str:
    known = sorted(types)
    return (
        f"unknown capability {name!r}{did_you_mean(name, [*known, *WOLF_CAPABILITIES])}: AgentWolf's are "
        f"{', '.join(WOLF_CAPABILITIES)}; pydantic-ai's and the installed ones {', '.join(known)}; a "
        f"plugin's (`wolf.capability(cls)`) or an `{ENTRY_POINT_GROUP}` entry point's by its class name"
    )


def check(spec: PydanticCapability) -> str | None:
    """What is wrong with `spec` as far as this process can tell (None: nothing). A name no installed
    type has may be a worker plugin's, which only the worker knows: refused here only when it looks
    like a misspelling of a known one (one or two letters off), else left to the worker's compile."""
    types = capability_types()
    if spec.name not in types:
        misspelt = difflib.get_close_matches(spec.name, [*types, *WOLF_CAPABILITIES], n=1, cutoff=0.85)
        return unknown(spec.name, types) if misspelt else None
    try:
        build(spec, types)
    except CapabilityError as exc:
        return str(exc)
    return None


def _reason(exc: Exception) -> str:
    text = str(exc)
    prefix = "Failed to instantiate capability "
    if text.startswith(prefix) and ": " in text:
        text = text.split(": ", 1)[1]
    return " ".join(text.split())
