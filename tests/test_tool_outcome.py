"""Tool outcomes are a typed value (workflows/contracts.ToolOutcome) whose wire format is the strings the
transcript and events always carried: histories, digests and followers see the same bytes."""

from __future__ import annotations

import typing
from datetime import UTC, datetime

from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart

from agentwolf.payloads import data_converter
from agentwolf.workflows.contracts import ToolCallOutput, ToolOutcome
from agentwolf.workflows.types import Event

AT = datetime(2026, 11, 30, tzinfo=UTC)


def test_every_outcome_is_one_pydantic_ai_knows():
    known = typing.get_args(typing.get_type_hints(ToolReturnPart)["outcome"])
    assert {o.value for o in ToolOutcome} <= set(known)


def test_the_transcript_and_events_serialize_as_the_plain_strings():
    converter = data_converter().payload_converter
    for outcome in ToolOutcome:
        typed, plain = (
            ModelRequest(
                parts=[ToolReturnPart("t", "out", tool_call_id="c", timestamp=AT, outcome=value)],  # type: ignore[arg-type]
                timestamp=AT,
            )
            for value in (outcome, outcome.value)
        )
        assert ModelMessagesTypeAdapter.dump_json([typed]) == ModelMessagesTypeAdapter.dump_json([plain])
        event, plain_event = (
            Event(kind="tool_call_finished", at=AT, outcome=value) for value in (outcome, outcome.value)
        )
        assert converter.to_payloads([event]) == converter.to_payloads([plain_event])


def test_a_call_that_ran_takes_its_outcome_from_the_result():
    assert ToolCallOutput(content="ok").outcome is ToolOutcome.SUCCESS
    assert ToolCallOutput(content="boom", is_error=True).outcome is ToolOutcome.FAILED
