"""Workflow code runs in Temporal's sandbox: a clock, random or I/O call in it fails the workflow task
instead of silently breaking replay. The session's layers are passed through (created once per
process), so the sandbox never sees their calls: they are checked here instead."""

from __future__ import annotations

import ast
import functools
import pkgutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import temporalio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox._runner import _Instance

import agentwolf.workflows
from agentwolf.worker.bootstrap import SANDBOX, VERSIONED_WORKFLOWS, WORKFLOWS
from agentwolf.worker.sandbox import CODE_CACHE, CachingSandboxedWorkflowRunner, compiled_once
from agentwolf.worker.sandbox_probe import SandboxProbe
from tests.conftest import SUPPORT, wait_for
from tests.support.clock_workflow import ClockWorkflow


def _passed_through(module: str) -> bool:
    names = SANDBOX.restrictions.passthrough_modules
    return any(module == name or module.startswith(name + ".") for name in names)


def test_workflow_modules_are_sandboxed():
    workflow_code = [
        m.name for m in pkgutil.walk_packages(agentwolf.workflows.__path__, "agentwolf.workflows.")
    ]
    assert {
        "agentwolf.workflows.session.workflow",
        "agentwolf.workflows.configs.config_registry",
        "agentwolf.workflows.session.stream",
    } <= set(workflow_code)
    assert [m for m in workflow_code if m != "agentwolf.workflows.types" and _passed_through(m)] == []


async def test_a_clock_read_in_workflow_code_fails_the_task_on_every_run(client: Client, task_queue: str):
    """The second run executes the module's code compiled for the first (agentwolf/worker/sandbox.py),
    and the sandbox's entry strings compiled once: still inside the sandbox, still caught."""
    reused = compiled_once.cache_info().hits
    async with Worker(client, task_queue=task_queue, workflows=[ClockWorkflow], workflow_runner=SANDBOX):
        for _ in range(2):
            handle = await client.start_workflow(
                ClockWorkflow.run, id=f"clock-{uuid.uuid4().hex[:8]}", task_queue=task_queue
            )
            try:
                failure = await wait_for(functools.partial(_task_failure, handle))
            finally:
                await handle.terminate()
            assert "datetime.datetime.now" in failure, failure
    assert str(SUPPORT / "clock_workflow.py") in CODE_CACHE.cached()
    assert compiled_once.cache_info().hits > reused


async def _task_failure(handle: WorkflowHandle) -> str | None:
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return event.workflow_task_failed_event_attributes.failure.message
    return None


async def test_workflow_modules_are_compiled_once_per_process(client: Client):
    """Preparing the workflows (worker start) loads them in the sandbox: from then on every run executes
    the compiled code of the sandboxed modules, and only of those."""
    Worker(client, task_queue=f"tq-{uuid.uuid4().hex[:8]}", workflows=WORKFLOWS, workflow_runner=SANDBOX)
    workflows = Path(agentwolf.workflows.__file__).parent
    session = workflows / "session"
    compiled = {Path(p) for p in CODE_CACHE.cached()}
    assert {
        session / "workflow.py",
        session / "stream.py",
        workflows / "configs" / "config_registry.py",
    } <= compiled
    assert workflows / "types.py" not in compiled  # passed through: the host's module, never re-run
    # Only modules that define workflows (and the stream they share) run per workflow run: a helper
    # imported as `from package import module` slipped past the passthrough (branches.py did).
    defining = {Path(sys.modules[w.__module__].__file__).name for w in {*WORKFLOWS, *VERSIONED_WORKFLOWS}}
    assert {p.name for p in compiled if p.parent in (workflows, session)} <= {
        *defining,
        "stream.py",
        "__init__.py",
    }
    assert CODE_CACHE.covers("agentwolf.workflows.session.workflow") and not CODE_CACHE.covers("agentwolfish")


def test_workflow_payload_models_are_complete_at_import():
    """Each workflow run has its own payload converter, which builds a TypeAdapter per type. For a model
    pydantic could not complete when its class was created (a forward reference to a later class) that
    means generating its whole schema again for every run: SessionInput took 25-120 ms and ~1 MB per
    cached session. Checked in a fresh interpreter: any validation elsewhere would complete the models."""
    code = (
        "import inspect, pydantic\n"
        "import agentwolf.workflows.contracts as a, agentwolf.workflows.types as w\n"
        "import agentwolf.workflows.session_input as s, agentwolf.config.manifest as m\n"
        "print([f'{x.__module__}.{x.__name__}' for mod in (a, w, s, m) for x in vars(mod).values()\n"
        "       if inspect.isclass(x) and issubclass(x, pydantic.BaseModel) and x.__module__ == "
        "mod.__name__\n"
        "       and not x.__pydantic_complete__])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


NONDETERMINISTIC_MODULES = {
    *("time", "random", "secrets", "uuid", "os", "socket", "subprocess", "io", "pathlib", "shutil"),
    *("tempfile", "urllib", "http", "httpx", "requests", "mcp", "concurrent", "multiprocessing"),
}
CLOCK_CALLS = {"now", "utcnow", "today", "fromtimestamp", "time", "monotonic", "perf_counter"}
"""Attribute calls that read a clock, unless on `workflow` (`workflow.now()` is replay-safe)."""
UNSAFE_BUILTINS = {"open", "input", "hash", "id", "exec", "eval"}
"""I/O, and values that differ between processes (str hashes are salted, ids are addresses)."""


def nondeterminism(source: str) -> list[str]:
    """`line: what` for each clock, randomness, environment or I/O use in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            names = []
        found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in NONDETERMINISTIC_MODULES]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS:
            if not (isinstance(func.value, ast.Name) and func.value.id == "workflow"):
                found.append(f"{node.lineno}: {ast.unparse(func)}()")
        elif isinstance(func, ast.Name) and func.id in UNSAFE_BUILTINS:
            found.append(f"{node.lineno}: {func.id}()")
    return found


def test_the_check_finds_clocks_randomness_and_io():
    source = textwrap.dedent(
        """
        import os, random
        from datetime import datetime
        from temporalio import workflow
        a = datetime.now(); b = workflow.now(); c = asyncio.get_running_loop().time()
        d = open("f"); e = hash("s"); f = random.random()
        """
    )
    assert nondeterminism(source) == [
        "2: import os", "2: import random", "5: datetime.now()", "5: asyncio.get_running_loop().time()",
        "6: open()", "6: hash()",
    ]  # fmt: skip


def _passed_through_workflow_modules(client: Client) -> list[Path]:
    """Workflow modules the sandbox does not compile once the workers' workflows are prepared."""
    Worker(client, task_queue=f"tq-{uuid.uuid4().hex[:8]}", workflows=WORKFLOWS, workflow_runner=SANDBOX)
    compiled = {Path(p) for p in CODE_CACHE.cached()}
    folder = Path(agentwolf.workflows.__file__).parent
    return sorted(f for f in folder.rglob("*.py") if f not in compiled and f.name != "__init__.py")


async def test_passed_through_workflow_modules_use_no_clock_randomness_or_io(client: Client):
    modules = _passed_through_workflow_modules(client)
    names = {m.stem for m in modules}
    assert {"core", "tools", "loop", "turn", "output", "contracts", "session_input", "types"} <= names
    found = {m.name: problems for m in modules if (problems := nondeterminism(m.read_text()))}
    assert found == {}


async def test_an_untested_temporalio_runs_the_compiled_entries_only_after_the_self_test(
    client: Client, task_queue: str, monkeypatch
):
    """`_CompiledInstance` overrides a private temporalio method. On a release it was not tested on
    it runs only if a workflow runs through it at start-up: a release whose `_run_code` keeps the
    signature but wants source text (it compiles it) gets Temporal's own runs, which still work."""
    monkeypatch.setattr(temporalio, "__version__", "1.99.0")
    fits = CachingSandboxedWorkflowRunner(restrictions=SANDBOX.restrictions)
    Worker(client, task_queue=f"tq-{uuid.uuid4().hex[:8]}", workflows=[SandboxProbe], workflow_runner=fits)
    assert fits.compiles_entries  # the hook still works on that release: the self-test says so

    run_code = _Instance._run_code

    def wants_text(self: _Instance, code: str, **extra_globals: Any) -> None:
        run_code(self, compile(code, "<string>", "exec"), **extra_globals)  # type: ignore[arg-type]

    monkeypatch.setattr(_Instance, "_run_code", wants_text)
    runner = CachingSandboxedWorkflowRunner(restrictions=SANDBOX.restrictions)
    async with Worker(client, task_queue=task_queue, workflows=[SandboxProbe], workflow_runner=runner):
        answer = await client.execute_workflow(
            SandboxProbe.run, "hello", id=f"probe-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
    assert answer == "hello" and not runner.compiles_entries
