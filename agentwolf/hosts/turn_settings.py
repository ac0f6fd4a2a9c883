"""A turn's own settings (workflows/turn_settings.py) laid over the agent's, as pydantic-ai takes them.

Generation settings are pydantic-ai `ModelSettings` keys, which each model class maps to its
provider's request (or drops where the provider has none). An answer format is pydantic-ai's
native structured output (`json_schema`: the provider's own schema-constrained output) or prompted
output (`json_object`: the provider's JSON mode), each where the model's profile has it."""

from __future__ import annotations

from typing import cast

from pydantic_ai.output import OutputMode, OutputObjectDefinition
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings

from agentwolf.workflows.turn_settings import TurnSettings

ANSWER_NAME = "answer"
"""The schema's name when the request gave none (OpenAI requires one)."""


def merged_settings(agent: ModelSettings, turn: TurnSettings | None) -> ModelSettings:
    """The agent's settings with the turn's on top."""
    if turn is None:
        return agent
    return cast(ModelSettings, {**agent, **turn.model_settings()})


def instructions(agent: str, turn: TurnSettings | None) -> str:
    """The agent's instructions, then the turn's."""
    return "\n\n".join(filter(None, [agent, turn.instructions if turn else None]))


def answer_format(
    turn: TurnSettings | None, profile: ModelProfile
) -> tuple[OutputMode, OutputObjectDefinition | None]:
    """`ModelRequestParameters.output_mode` and `.output_object` for the turn's answer format on a
    model with this profile (the answer is text in all of them). What the provider cannot constrain
    (no JSON mode, no schema-constrained output), pydantic-ai's prompted output asks for in the
    instructions, with the schema."""
    answer = turn.answer_format if turn else None
    if answer is None:
        return "text", None
    if answer.type == "json_object":
        if profile.get("supports_json_object_output"):
            return "prompted", None  # JSON mode, no schema to describe
        return "prompted", OutputObjectDefinition(json_schema={"type": "object"}, name=ANSWER_NAME)
    schema = OutputObjectDefinition(
        json_schema=answer.json_schema or {"type": "object"},
        name=answer.name or ANSWER_NAME,
        description=answer.description,
        strict=answer.strict,
    )
    return ("native" if profile.get("supports_json_schema_output") else "prompted"), schema
