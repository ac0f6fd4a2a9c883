"""An AgentWolf plugin: a notebook the agent can write to, and an offline model that uses it."""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentwolf.plugins import PluginRegistry

NOTES: list[str] = []


def add_note(text: str) -> str:
    """Write a note down.

    Args:
        text: what to remember
    """
    NOTES.append(text)
    return f"noted ({len(NOTES)} so far)"


def delete_notes() -> str:
    """Forget every note."""
    NOTES.clear()
    return "all notes deleted"


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in for a real model: notes the prompt down, then reports what the tool said."""
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):
        return ModelResponse(parts=[TextPart(f"Done: {last.model_response_str()}")])
    if isinstance(last, UserPromptPart):
        return ModelResponse(parts=[ToolCallPart("add_note", {"text": str(last.content)})])
    return ModelResponse(parts=[TextPart("I cannot take notes right now.")])


def register(wolf: PluginRegistry) -> None:
    wolf.tool(add_note)
    wolf.tool(delete_notes)
    wolf.model("notes-demo", FunctionModel(scripted))
