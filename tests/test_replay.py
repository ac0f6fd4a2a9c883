"""Recorded histories of every session feature replay against today's workflow code, through the data
converter production clients and workers use (`agentwolf.payloads.data_converter()`: pydantic JSON,
payloads over 256 KiB in external storage), its filesystem store pointed at the payloads the corpus
references, kept in tests/histories/payloads (`external_payload` references two). The replayer reads a
copy of that folder: replaying stores the big payloads the workflow sends again (an unchanged one
only gets a new mtime, a changed one a new file), which must not write into the repository.

Re-record with `python tests/histories/record.py` (runs the recording tests with
WOLF_RECORD_HISTORIES=1, then these); gate command-changing workflow edits with `workflow.patched()`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from agentwolf.payloads import DIGEST, THRESHOLD, data_converter, filesystem_root
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.types import workflow_id
from tests.conftest import HISTORIES, make_manifest, record_history
from tests.support.history import references as history_references
from tests.support.models import Script, sequence, text, tool

HISTORY_FILES = sorted(HISTORIES.glob("*.json"))
PAYLOADS = HISTORIES / "payloads"
"""The corpus's payload store: `<first two hex>/<sha256>` files, as `FilesystemDriver` keeps them."""


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of tests/histories/payloads for the replayer's store."""
    store = tmp_path_factory.mktemp("corpus-payloads")
    shutil.copytree(PAYLOADS, store, dirs_exist_ok=True)
    return store


def test_the_corpus_covers_every_feature():
    names = {p.stem for p in HISTORY_FILES}
    assert {
        "multi_step_turn",
        "steer",
        "interrupt_tool_call",
        "interrupt_model_request",
        "double_texting_queue",
        "double_texting_reject",
        "loop_guard",
        "token_budget",
        "failed_turn",
        "continue_as_new_first_run",
        "subagents",
        "team_sequential",
        "approval_denied",
        "approval_always",
        "config_changed",
        "config_unchanged",
        "config_registry_rollback",
        "config_registry_continue_as_new",
        "skills_hot_reload",
        "mcp_tools_changed",
        "slash_commands",
        "external_payload",
        "approval_wait_continue_as_new",
        "duplicate_call_ids",
        "workflow_cancel",
        "tool_output_cut",
        "streamed_turn",
        "job_output_retry",
        "usd_budget_turn",
        "session_servers",
        "schedule_fire_queue",
        "fanout_past_limits",
        "approval_answered_in_snapshot",
        "approval_wait_stale_agent",
        "background_refuses_prompt",
        "idle_close",
        "resumed_turn_interrupted",
        "schedule_fire_interrupt_once",
        "schedule_fire_registry_job",
        "schedule_fire_reserved_run_id",
        "schedule_fire_steer_once",
        "turn_task_raised",
        "workflow_cancel_session_servers",
        "turn_settings_idle_close",
        "acp_agent_turn",
        "acp_agent_loaded",
        "acp_agent_interrupt_release",
        "code_mode",
        "code_mode_approval",
        "code_mode_call_limit",
        "web_fetch",
        "context_compaction",
        "context_compaction_reactive",
        "context_compaction_continue_as_new",
        "context_folding",
        "limiter_priority_weights",
        "limiter_continue_as_new",
        "rewind_and_redo",
        "rewind_folded",
        "eval_run",
        "eval_run_scored",
        "eval_run_without_tenant",
        "eval_dataset",
        "limiter_paced",
        "last_activity",
        "limiter_news",
        "limiter_reserve",
        "flow_interactive_first",
        "projected_snapshot",
        "tool_own_time",
    } <= names


def test_the_corpus_keeps_every_payload_it_references_and_no_other():
    referenced = {d for path in HISTORY_FILES for d in references(_load(path))}
    assert referenced, "no recorded history holds an external-storage reference"
    kept = {f.name for f in PAYLOADS.glob("??/*") if DIGEST.fullmatch(f.name)}
    assert kept == referenced


@pytest.mark.parametrize("path", HISTORY_FILES, ids=[p.stem for p in HISTORY_FILES])
async def test_replay(path: Path, corpus_store: Path):
    replayer = Replayer(
        workflows=WORKFLOWS, data_converter=data_converter(str(corpus_store)), workflow_runner=SANDBOX
    )
    await replayer.replay_workflow(_load(path))


async def test_a_session_whose_tool_output_went_to_external_storage_replays(wolf, run_worker, client):
    """A tool output just over the threshold leaves a reference in history; the session replays with
    the production converter. With WOLF_RECORD_HISTORIES=1 it is saved as `external_payload`, with
    the payloads it references copied into tests/histories/payloads (and ones no history names removed)."""
    script = Script(sequence(tool("big", {"size": THRESHOLD}), text("done")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("fetch the big thing", "a", make_manifest())
        result = await wolf.result(sid)
    wid = workflow_id("default", sid)
    history = await client.get_workflow_handle(wid).fetch_history()
    assert result.outcome == "completed" and result.output == "done"
    digests = references(history)
    assert digests, "the tool output should have gone to external storage"
    live = Replayer(workflows=WORKFLOWS, data_converter=data_converter(), workflow_runner=SANDBOX)
    await live.replay_workflow(history)  # references resolved from the live store
    if os.environ.get("WOLF_RECORD_HISTORIES") == "1":
        await record_history(client, wid, "external_payload")
        store = filesystem_root()
        assert store is not None, "recording needs a filesystem payload store"
        for digest in digests:
            target = PAYLOADS / digest[:2] / digest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(store / digest[:2] / digest, target)
        _prune()


def references(history: WorkflowHistory) -> set[str]:
    """The digests of every external-storage reference in the history's payloads."""
    return {ref["claimData"]["sha256"] for ref in history_references(history)}


def _load(path: Path) -> WorkflowHistory:
    text = path.read_text()
    # The recorded id: workflows derive their tenant from it (and refuse a mismatching input).
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started["workflowId"], text)


def _prune() -> None:
    """Remove corpus payloads that no recorded history references any more (re-recording makes new ones)."""
    referenced = {d for path in HISTORIES.glob("*.json") for d in references(_load(path))}
    for file in PAYLOADS.glob("??/*"):
        if DIGEST.fullmatch(file.name) and file.name not in referenced:
            file.unlink()
    for folder in PAYLOADS.glob("??"):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
