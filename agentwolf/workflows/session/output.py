"""A job's typed result: the model gives it by calling the output tool, the workflow checks it.

The model request offers `final_result` as pydantic-ai output tool (its parameters are the job's
`output` schema, text answers not allowed), as pydantic-ai's `StructuredDict` would; but the check
is the full JSON Schema (`jsonschema`: `enum`, `pattern`, bounds...), which pydantic-ai does not
enforce. A result that fails goes back to the model as a retry prompt naming every problem, in the
same turn, so the agent's `max_steps` bounds the retries. Pure and deterministic: imported passed
through, like loop.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from pydantic_ai.messages import ModelRequestPart, ModelResponse, RetryFeedbackPart, RetryInfo, ToolReturnPart

OUTPUT_TOOL = "final_result"
OUTPUT_DESCRIPTION = "Give the final result of the task. Its arguments are the result."
ASK_FOR_TOOL = f"Give your answer by calling the `{OUTPUT_TOOL}` tool; a text answer is not accepted."


def check_result(schema: dict[str, Any], value: object) -> list[str]:
    """What makes `value` invalid against `schema` (every keyword enforced, `enum` included); [] if valid."""
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<result>'}: {e.message}" for e in errors]


@dataclass(frozen=True)
class Verdict:
    """`result` when the answer is the turn's (valid) result; else `parts` go back to the model (a
    retry); neither: an ordinary step whose tool calls run."""

    result: dict[str, Any] | None = None
    parts: list[ModelRequestPart] | None = None
    problems: str = ""


def judge(response: ModelResponse, schema: dict[str, Any], now: Any) -> Verdict:
    """What a response of a session with an output schema means. `now`: the workflow's clock."""
    calls = [c for c in response.tool_calls if c.tool_name == OUTPUT_TOOL]
    if not calls:
        if response.tool_calls:
            return Verdict()
        retry = RetryFeedbackPart(ASK_FOR_TOOL, retry=RetryInfo("no_output"), timestamp=now)
        return Verdict(parts=[retry], problems="a text answer")
    call = calls[0]
    try:
        value: object = call.args_as_dict(raise_if_invalid=True)
        problems = check_result(schema, value)
    except (ValueError, AssertionError) as exc:  # not JSON, or JSON but not an object
        value, problems = None, [f"the arguments are not a JSON object: {exc}"]
    others = [c for c in response.tool_calls if c is not call]
    note = "not run: the final result was given" if not problems else "not run: give the final result"
    parts: list[ModelRequestPart] = [
        ToolReturnPart(tool_name=c.tool_name, content=note, tool_call_id=c.tool_call_id, timestamp=now)
        for c in others
    ]
    if problems:
        text = "The result does not fit the required schema:\n" + "\n".join(f"- {p}" for p in problems)
        refused = ToolReturnPart(
            tool_name=OUTPUT_TOOL,
            content=text,
            tool_call_id=call.tool_call_id,
            timestamp=now,
            outcome="retried",
            retry=RetryInfo("validation_error"),
        )
        return Verdict(parts=[refused, *parts], problems="; ".join(problems))
    done = ToolReturnPart(
        tool_name=OUTPUT_TOOL,
        content="Final result processed.",
        tool_call_id=call.tool_call_id,
        timestamp=now,
    )
    return Verdict(result=value, parts=[done, *parts])  # type: ignore[arg-type]


def structured(
    schema: dict[str, Any] | None, outcome: str | None, output: str | None
) -> dict[str, Any] | None:
    """The session's typed result: the completed turn's answer when it is a JSON object valid against
    `schema`, else None. Checked again here, never trusted: a team's answer is its members' text, and
    an exception here (it runs as the workflow returns) failed the workflow task for ever."""
    if schema is None or outcome != "completed" or not output:
        return None
    try:
        value = json.loads(output)
        return value if isinstance(value, dict) and not check_result(schema, value) else None
    except Exception:  # noqa: BLE001 - not JSON, or a schema jsonschema cannot use: no typed result
        return None
