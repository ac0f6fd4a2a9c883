"""Extend a worker in Python: plugins register `local:` models, function tools and eval evaluators.

A plugin is a module with a registration hook::

    from agentwolf.plugins import PluginRegistry

    def register(wolf: PluginRegistry) -> None:
        wolf.model("scripted", my_model)        # `model: local:scripted` in a manifest

        @wolf.tool
        def lookup(city: str) -> str:
            '''The population of a city.

            Args:
                city: the city's English name
            '''
            ...

        wolf.capability(MyCapability)           # `capabilities: [{MyCapability: {...}}]`

        @wolf.evaluator
        def cites_a_source(ctx: EvaluatorContext, min_sources: int = 1) -> bool:
            return ctx.output is not None and ctx.output.count("http") >= min_sources

A module without `register` that exports pydantic-ai capability classes (a third-party capability
package: `--plugin pydantic_ai_shields`) registers them all. A worker loads a plugin with
`wolf worker --plugin my_module` (or `wolf up --plugin`), or finds it as an
`agentwolf.plugins` entry point (`notes = "my_package.plugin"`, or `"my_package:register"`). Tools are
pydantic-ai function tools: the schema comes from the signature and the docstring. A manifest serves
them as one more tool source, `host.mcp_servers.<label>: {plugin: <name>}` (the module's name, or the
entry point's), so permission rules (`<label>:lookup`), `repeat_safe` and `call_timeout` hold as for
an MCP server, and each call runs as a `wolf.call_tool` activity on the worker. An evaluator is named
in an eval dataset as pydantic-evals names one (`"cites_a_source"`, `{"cites_a_source": {"min_sources":
2}}`) and runs in the `wolf.eval_score` activity: it returns a bool (pass), a number (a score in
[0, 1]) or an `EvaluationReason` (either, with why). A capability is a pydantic-ai capability
class (a dataclass subclassing `AbstractCapability`), named in an agent's `capabilities` by its
serialization name (docs/guides/capabilities.md).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any, TypeVar, overload

from pydantic_ai import Tool
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model

ENTRY_POINT_GROUP = "agentwolf.plugins"
HOOK = "register"

ModelFactory = Callable[[], Model]
LocalModel = Model | ModelFactory
"""A `local:` model: an instance, or a factory the worker calls when a host first builds it."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class EvaluatorContext:
    """What an evaluator judges: one eval case asked again (pydantic-evals' context, for text)."""

    name: str
    """The case's name (`<session>:turn-N`)."""
    inputs: str
    """The case's prompt."""
    output: str | None
    """The new answer."""
    expected_output: str | None
    recorded_output: str | None
    """The answer the recorded turn gave."""
    steps: list[dict[str, Any]]
    """The new trajectory: one `{"calls": ["tool {args}", ...], "text": answer or None}` per step."""


@dataclass(frozen=True)
class EvaluationReason:
    """An evaluator's verdict with why: `value` a bool (pass) or a score in [0, 1]."""

    value: bool | float
    reason: str | None = None


Evaluator = Callable[..., Any]
"""`(ctx: EvaluatorContext, *args, **kwargs) -> bool | float | EvaluationReason`, sync or async."""


class PluginError(ValueError):
    """A plugin that cannot be loaded or registers something invalid: the message names it and why
    (a ValueError, so the CLI prints it as a one-line error with exit code 2)."""


@dataclass(frozen=True)
class FunctionTool:
    """One registered function: the pydantic-ai tool (schema, validator) and whether a call may repeat."""

    tool: Tool[None]
    repeat_safe: bool = False


class PluginRegistry:
    """What a plugin's `register(wolf)` hook adds to the worker; `name` is how manifests name it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.models: dict[str, LocalModel] = {}
        self.tools: dict[str, FunctionTool] = {}
        self.evaluators: dict[str, Evaluator] = {}
        self.capabilities: dict[str, type] = {}

    def capability(self, cls: type) -> type:
        """Register a pydantic-ai capability class (usable as a class decorator), named in manifests
        by its serialization name (the class name unless it overrides `get_serialization_name`)."""
        from pydantic_ai.capabilities import AbstractCapability

        if not (isinstance(cls, type) and issubclass(cls, AbstractCapability)):
            raise PluginError(f"plugin {self.name!r}: {cls!r} is not a pydantic-ai capability class")
        name = cls.get_serialization_name()
        if name is None:
            raise PluginError(f"plugin {self.name!r}: capability {cls.__name__} has no serialization name")
        if name in self.capabilities:
            raise PluginError(f"plugin {self.name!r} registers capability {name!r} twice")
        self.capabilities[name] = cls
        return cls

    def model(self, name: str, model: LocalModel) -> None:
        """Register `local:<name>`: a pydantic-ai `Model`, or a zero-argument factory returning one."""
        if not (isinstance(model, Model) or callable(model)):
            raise PluginError(
                f"plugin {self.name!r}: model {name!r} is neither a pydantic-ai Model nor a factory"
            )
        if name in self.models:
            raise PluginError(f"plugin {self.name!r} registers model local:{name} twice")
        self.models[name] = model

    @overload
    def tool(self, function: F) -> F: ...

    @overload
    def tool(
        self, *, name: str | None = None, description: str | None = None, repeat_safe: bool = False
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        function: F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        repeat_safe: bool = False,
    ) -> F | Callable[[F], F]:
        """Register a plain typed function (sync or async) as a tool; usable as `@wolf.tool` or
        `@wolf.tool(name=..., repeat_safe=True)`. `repeat_safe` says running it twice does no harm
        (read-only or idempotent), so a fast call may run as a local activity.

        Tools run on the worker outside any agent run: they take no `RunContext`."""

        def add(fn: F) -> F:
            try:
                tool: Tool[None] = Tool(fn, takes_ctx=False, name=name, description=description)
            except UserError as exc:
                raise PluginError(f"plugin {self.name!r}: tool {fn.__name__!r}: {exc}") from None
            if tool.name in self.tools:
                raise PluginError(f"plugin {self.name!r} registers tool {tool.name!r} twice")
            self.tools[tool.name] = FunctionTool(tool, repeat_safe)
            return fn

        return add if function is None else add(function)

    @overload
    def evaluator(self, function: F) -> F: ...

    @overload
    def evaluator(self, *, name: str | None = None) -> Callable[[F], F]: ...

    def evaluator(self, function: F | None = None, *, name: str | None = None) -> F | Callable[[F], F]:
        """Register an eval evaluator (`@wolf.evaluator` or `@wolf.evaluator(name=...)`), named in
        datasets by `name` (default: the function's name)."""

        def add(fn: F) -> F:
            key = name or fn.__name__
            if key in self.evaluators:
                raise PluginError(f"plugin {self.name!r} registers evaluator {key!r} twice")
            self.evaluators[key] = fn
            return fn

        return add if function is None else add(function)


@dataclass
class Plugins:
    """Everything the plugins a worker loaded registered."""

    models: dict[str, LocalModel] = field(default_factory=dict)
    tools: dict[str, dict[str, FunctionTool]] = field(default_factory=dict)
    """Plugin name -> tool name -> tool (every loaded plugin has an entry, maybe empty)."""
    evaluators: dict[str, Evaluator] = field(default_factory=dict)
    capabilities: dict[str, type] = field(default_factory=dict)
    """pydantic-ai capability classes by serialization name."""

    def add(self, registry: PluginRegistry) -> None:
        if registry.name in self.tools:
            raise PluginError(f"plugin {registry.name!r} is loaded twice")
        clash = sorted(set(registry.models) & set(self.models))
        if clash:
            raise PluginError(
                f"plugin {registry.name!r} registers models another plugin registered: "
                f"{', '.join(f'local:{n}' for n in clash)}"
            )
        clash = sorted(set(registry.evaluators) & set(self.evaluators))
        if clash:
            raise PluginError(
                f"plugin {registry.name!r} registers evaluators another plugin registered: {', '.join(clash)}"
            )
        clash = sorted(set(registry.capabilities) & set(self.capabilities))
        if clash:
            raise PluginError(
                f"plugin {registry.name!r} registers capabilities another plugin registered: "
                f"{', '.join(clash)}"
            )
        self.capabilities.update(registry.capabilities)
        self.models.update(registry.models)
        self.tools[registry.name] = dict(registry.tools)
        self.evaluators.update(registry.evaluators)

    def describe(self) -> list[str]:
        """One line per plugin, for the worker's log."""
        return (
            [f"plugin {name}: tools {', '.join(tools) or 'none'}" for name, tools in self.tools.items()]
            + ([f"plugin models: {', '.join(f'local:{m}' for m in self.models)}"] if self.models else [])
            + ([f"plugin evaluators: {', '.join(self.evaluators)}"] if self.evaluators else [])
            + ([f"plugin capabilities: {', '.join(self.capabilities)}"] if self.capabilities else [])
        )


def load_plugins(
    modules: Sequence[str] = (), *, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
) -> Plugins:
    """Import and register `modules` and the `agentwolf.plugins` entry points (default: the installed
    ones); a plugin that fails to import or register raises PluginError naming it."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
    plugins = Plugins()
    for point in found:
        plugins.add(_registered(point.name, point.load, f"entry point {point.value!r}"))
    for module in modules:
        plugins.add(_registered(module, partial(importlib.import_module, module), "module"))
    return plugins


def _registered(name: str, load: Callable[[], object], what: str) -> PluginRegistry:
    try:
        loaded = load()
    except Exception as exc:
        raise PluginError(
            f"cannot load plugin {name!r} ({what}): importing it raised {type(exc).__name__}: {exc}"
        ) from exc
    hook = getattr(loaded, HOOK, None) if isinstance(loaded, ModuleType) else loaded
    if not callable(hook) and isinstance(loaded, ModuleType) and (found := _capability_classes(loaded)):
        hook = partial(_register_all, found)  # a package of pydantic-ai capabilities, used as it is
    if not callable(hook):
        raise PluginError(
            f"plugin {name!r} ({what}) has no `{HOOK}(wolf: PluginRegistry)` function and exports no "
            "pydantic-ai capability class"
        )
    registry = PluginRegistry(name)
    try:
        hook(registry)
    except PluginError:
        raise
    except Exception as exc:
        raise PluginError(f"plugin {name!r}: {HOOK}() raised {type(exc).__name__}: {exc}") from exc
    return registry


def _capability_classes(module: ModuleType) -> list[type]:
    """The pydantic-ai capability classes a module exports (`__all__`, else its public names) that a
    spec can name: a third-party capability package loads as a plugin unchanged."""
    from pydantic_ai.capabilities import AbstractCapability

    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = [getattr(module, n, None) for n in names]
    return [
        c
        for c in found
        if isinstance(c, type)
        and issubclass(c, AbstractCapability)
        and c is not AbstractCapability
        and "__dataclass_fields__" in vars(c)
        and not c.__module__.startswith("pydantic_ai.")
        and c.get_serialization_name() is not None
    ]


def _register_all(classes: list[type], wolf: PluginRegistry) -> None:
    for cls in classes:
        wolf.capability(cls)
