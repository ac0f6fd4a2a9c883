"""The replay gate (`wolf check-replay`): replay recorded histories, and a sample of live sessions,
against this installation's workflow code, and name what a deploy of it would break.

A history that fails to replay is a session whose next workflow task on this code would fail as
nondeterministic: on an unversioned worker at once, on a versioned one whenever the session is moved
onto this build while a run is open (a rollback, an adopted session). Sessions that start or continue
as new on this build replay nothing older, so versioning covers command changes for them. The
long-lived workflows beside sessions (quota workflows, config registries, schedule fires, eval runs and
datasets) auto-upgrade: their next workflow task after a deploy replays on the new code, so the live
check samples every one of those types too."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.configs.config_registry import REGISTRY_WORKFLOW
from agentwolf.workflows.evals.datasets import DATASET_WORKFLOW
from agentwolf.workflows.evals.run import EVAL_WORKFLOW
from agentwolf.workflows.quotas import QUOTA_WORKFLOW
from agentwolf.workflows.schedule import SCHEDULE_WORKFLOW
from agentwolf.workflows.types import SESSION_WORKFLOW

LONG_LIVED = (QUOTA_WORKFLOW, REGISTRY_WORKFLOW, SCHEDULE_WORKFLOW, EVAL_WORKFLOW, DATASET_WORKFLOW)
"""The auto-upgrading workflow types (worker/deployment.py): a deploy replays their open runs at once."""


@dataclass
class Broken:
    """A history this code cannot replay: where it came from, and the first line of why."""

    source: str
    error: str


async def check_corpus(folder: Path) -> tuple[int, list[Broken]]:
    """Replay every `*.json` history in `folder` (its payload store in `folder/payloads`, read from a
    copy: replaying writes payloads again); returns how many replayed and the broken ones."""
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"no recorded histories (*.json) in {folder}")
    with tempfile.TemporaryDirectory(prefix="wolf-replay-") as store:
        if (folder / "payloads").is_dir():
            shutil.copytree(folder / "payloads", store, dirs_exist_ok=True)
        histories = {path.stem: _load(path) for path in paths}
        broken = await _replay(histories.items(), data_converter(store))
    return len(paths), broken


async def check_live(client: Client, sample: int, query: str | None = None) -> tuple[int, list[Broken]]:
    """Replay the current run of up to `sample` running sessions and up to `sample` of each
    long-lived type (the most recently started first), or of those `query` (a visibility query)
    finds; the broken ones are named by workflow id."""
    queries = [query] if query else [_running(kind) for kind in (SESSION_WORKFLOW, *LONG_LIVED)]
    histories: list[tuple[str, WorkflowHistory]] = []
    for found in queries:
        async for execution in client.list_workflows(found, limit=sample):
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            histories.append((execution.id, await handle.fetch_history()))
    return len(histories), await _replay(histories, client.data_converter)


def _running(workflow_type: str) -> str:
    return f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running'"


async def _replay(histories: Iterable[tuple[str, WorkflowHistory]], converter: DataConverter) -> list[Broken]:
    named = list(histories)
    by_run = {history.run_id: source for source, history in named}

    async def each() -> AsyncIterator[WorkflowHistory]:
        for _, history in named:
            yield history

    replayer = Replayer(workflows=WORKFLOWS, data_converter=converter, workflow_runner=SANDBOX)
    results = await replayer.replay_workflows(each(), raise_on_replay_failure=False)
    return [
        Broken(by_run.get(run_id, run_id), (str(exc).strip().splitlines() or [type(exc).__name__])[0])
        for run_id, exc in results.replay_failures.items()
    ]


def _load(path: Path) -> WorkflowHistory:
    """A history as `temporal workflow show -o json` or `WorkflowHistory.to_json()` writes it; its
    workflow id from the start event (sessions derive their tenant from it)."""
    text = path.read_text()
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started.get("workflowId") or path.stem, text)
