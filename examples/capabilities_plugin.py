"""The seed's three example capabilities (RFC-0050), as pydantic-ai capabilities an AgentWolf worker
loads as a plugin: a model router, context injection and URI validation.

Each is an ordinary pydantic-ai capability (it runs in a plain `Agent` too, given deps with a
`model(name)` method for the router); in a session its hooks run inside the model request activity,
so what they decide (the model, the context sent, the rewritten answer) is recorded in that
activity's result and never decided twice (docs/guides/capabilities.md). Load it with
`PYTHONPATH=$PWD/examples wolf up --plugin capabilities_plugin`; examples/capabilities.yaml uses it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart
from pydantic_ai.models import ModelRequestContext

from agentwolf.plugins import PluginRegistry


@dataclass
class ModelRouter(AbstractCapability[Any]):
    """A model per turn, by how hard the turn's prompt looks: `smart` for long prompts or ones with
    a hard word, `fast` otherwise. Both are names of the manifest's models (aliases or specs).

    It decides in `before_model_request`, from the turn's prompt, so every step of a turn asks the
    same model; the choice is the recorded request's model (`wolf status` shows usage per model)."""

    fast: str
    smart: str
    words: int = 40
    """Prompts longer than this many words go to `smart`."""
    hard: list[str] = field(default_factory=lambda: ["prove", "design", "debug", "architecture"])

    def choose(self, prompt: str) -> str:
        text = prompt.lower()
        hard = len(text.split()) > self.words or any(word in text for word in self.hard)
        return self.smart if hard else self.fast

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        model = await ctx.deps.model(self.choose(ctx.prompt or ""))
        return dataclasses.replace(request_context, model=model)


@dataclass
class ContextInjection(AbstractCapability[Any]):
    """Before each model request, the files of `folder` whose names the prompt mentions (up to
    `limit`) go to the model as context, for this request only (the transcript keeps the prompt as
    the user wrote it)."""

    folder: str
    limit: int = 3

    def relevant(self, prompt: str) -> list[Path]:
        words = set(re.findall(r"[a-z0-9_-]+", prompt.lower()))
        files = sorted(p for p in Path(self.folder).expanduser().glob("*") if p.is_file())
        return [p for p in files if p.stem.lower() in words][: self.limit]

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        found = self.relevant(ctx.prompt or "")
        if not found:
            return request_context
        block = "\n\n".join(f"## {p.name}\n{p.read_text()}" for p in found)
        messages = list(request_context.messages)
        last = messages[-1]
        if isinstance(last, ModelRequest):
            part = SystemPromptPart(f"Context:\n{block}")
            messages[-1] = dataclasses.replace(last, parts=[part, *last.parts])
        return dataclasses.replace(request_context, messages=messages)


URI = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)\]>\"']*[^\s)\]>\"'.,;:!?]")
"""A URI in text, without the punctuation that ends its sentence."""


@dataclass
class URIValidation(AbstractCapability[Any]):
    """After each model response, every URI in its text that does not resolve is marked
    `[INVALID]`: a `file://` URI must name an existing file, any other must start with one of
    `known` (the resources the agent may cite)."""

    known: list[str] = field(default_factory=list)

    def exists(self, uri: str) -> bool:
        if uri.startswith("file://"):
            return Path(uri.removeprefix("file://")).exists()
        return any(uri.startswith(prefix) for prefix in self.known)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        parts = []
        for part in response.parts:
            if isinstance(part, TextPart):
                text = URI.sub(lambda m: m[0] if self.exists(m[0]) else f"{m[0]} [INVALID]", part.content)
                part = dataclasses.replace(part, content=text)
            parts.append(part)
        return dataclasses.replace(response, parts=parts)


def register(wolf: PluginRegistry) -> None:
    wolf.capability(ModelRouter)
    wolf.capability(ContextInjection)
    wolf.capability(URIValidation)
