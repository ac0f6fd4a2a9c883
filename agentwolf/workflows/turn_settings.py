"""What one turn asks of the model beyond the agent's own config: generation settings, an answer
format and instructions, as an OpenAI-compatible request gave them (protocols/openai_api/settings.py).

They ride on the turn's `Prompt` and reach every model request of that turn only
(`ModelRequestInput.settings`), where the worker lays them over the agent's settings
(hosts/turn_settings.py). Light on purpose, like workflows/types.py: clients import it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class AnswerFormat(BaseModel):
    """The answer's shape: any JSON object (`json_object`), or one valid against `json_schema`."""

    type: Literal["json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None
    strict: bool | None = None


class TurnSettings(BaseModel):
    """Unset fields leave the agent's own settings (the manifest's) as they are."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, int] | None = None
    parallel_tool_calls: bool | None = None
    thinking: bool | Literal["minimal", "low", "medium", "high", "xhigh"] | None = None
    """Reasoning effort (False: none), pydantic-ai's unified `thinking` setting."""
    answer_format: AnswerFormat | None = None
    instructions: str | None = None
    """Added to the agent's instructions (a stateless request's system and developer messages)."""

    def model_settings(self) -> dict[str, Any]:
        """The set generation settings, keyed as pydantic-ai's `ModelSettings`."""
        return self.model_dump(exclude_none=True, exclude={"answer_format", "instructions"})
