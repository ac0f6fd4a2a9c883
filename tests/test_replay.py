"""Recorded histories of every session feature replay against today's workflow code.

Re-record with `python tests/histories/record.py` (runs the recording tests with
WOLF_RECORD_HISTORIES=1); gate command-changing workflow edits with `workflow.patched()`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agentwolf.worker.main import SANDBOX, WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_the_corpus_covers_every_feature():
    names = {p.stem for p in HISTORIES}
    assert {
        "multi_step_turn", "steer", "interrupt_tool_call", "interrupt_model_request", "double_texting_queue",
        "double_texting_reject", "loop_guard", "token_budget", "failed_turn", "continue_as_new_first_run",
        "subagents", "team_sequential", "approval_denied", "approval_always",
        "config_changed", "config_unchanged", "config_registry_rollback", "config_registry_continue_as_new",
        "skills_hot_reload", "mcp_tools_changed", "slash_commands",
    } <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_replay(path: Path):
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter, workflow_runner=SANDBOX)
    text = path.read_text()
    # The recorded id: workflows derive their tenant from it (and refuse a mismatching input).
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    history = WorkflowHistory.from_json(started["workflowId"], text)
    await replayer.replay_workflow(history)
