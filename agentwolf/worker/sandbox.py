"""The workflow sandbox, compiling each workflow module once per process instead of once per run.

Temporal's sandbox re-imports a workflow's module (and every module it imports that is not passed
through) for each workflow run, so module state never leaks between runs. Python's import compiles
the source again for each of those imports when there is no bytecode cache (PYTHONDONTWRITEBYTECODE,
a read-only install) and unmarshals fresh code objects otherwise: for the session workflow that was
about 7 ms of CPU per run and some 115 KB of code objects held by every cached run.

Code objects are immutable and hold no module state: a run's functions, classes and globals are
still its own (the module body still executes in the run's sandbox, under its restrictions), only
the compiled code is shared. So the runner keeps one code object per module file, for the modules
of the packages its workflows are defined in, and only for imports made inside the sandbox.

The sandbox also enters a run by `exec` of a short source string: for each activation, and, on the
event loop's thread, for each payload the worker decodes or encodes (the data converter asks the run
for its serialization context). `exec` of a string compiles it every time; at 50 busy sessions
those compiles were about a tenth of the worker's GIL time, so each string is compiled once.

That hook overrides a private method of temporalio's (`_Instance._run_code`). It runs only on the
temporalio releases it was tested on (TESTED_TEMPORALIO), or, on another release, once a start-up
self-test ran one activation of a tiny workflow through it; otherwise runs are Temporal's own (only
slower), and the worker says so.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import CodeType, ModuleType
from typing import Any

import temporalio
from temporalio import workflow
from temporalio.api.common.v1.message_pb2 import Payloads
from temporalio.api.failure.v1.message_pb2 import Failure
from temporalio.bridge.proto.workflow_activation import workflow_activation_pb2 as activation
from temporalio.converter import DataConverter
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance

from agentwolf.worker.sandbox_probe import SandboxProbe

log = logging.getLogger(__name__)

TESTED_TEMPORALIO = ("1.35.0",)
"""temporalio releases `_CompiledInstance` was tested on; on another it must pass the self-test first."""


class _CachedSourceLoader(importlib.machinery.SourceFileLoader):
    """A source loader whose compiled code comes from (and goes to) the finder's cache."""

    def __init__(self, fullname: str, path: str, cache: WorkflowCodeCache) -> None:
        super().__init__(fullname, path)
        self.cache = cache

    def get_code(self, fullname: str) -> CodeType | None:
        return self.cache.code(self.path, lambda: super(_CachedSourceLoader, self).get_code(fullname))


class WorkflowCodeCache(importlib.abc.MetaPathFinder):
    """A meta path finder that answers only inside the workflow sandbox, only for source modules of
    the packages it was told about, and hands out specs whose loader compiles each file once."""

    def __init__(self) -> None:
        self.packages: set[str] = set()
        self._code: dict[str, CodeType | None] = {}
        self._lock = threading.Lock()

    def add_package(self, package: str) -> None:
        self.packages.add(package)

    def covers(self, fullname: str) -> bool:
        return any(fullname == p or fullname.startswith(p + ".") for p in self.packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not workflow.unsafe.in_sandbox() or not self.covers(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader or not spec.origin:
            return None  # not a plain source file: the default machinery answers as usual
        spec.loader = _CachedSourceLoader(fullname, spec.origin, self)
        return spec

    def code(self, path: str, compile_code: Callable[[], CodeType | None]) -> CodeType | None:
        with self._lock:
            if path not in self._code:
                self._code[path] = compile_code()
            return self._code[path]

    def cached(self) -> list[str]:
        """The files compiled so far (for tests and diagnostics)."""
        with self._lock:
            return list(self._code)


CODE_CACHE = WorkflowCodeCache()


def _install() -> None:
    if CODE_CACHE not in sys.meta_path:
        sys.meta_path.insert(0, CODE_CACHE)


@functools.lru_cache(maxsize=256)
def compiled_once(source: str) -> CodeType:
    return compile(source, "<string>", "exec")  # what exec(source) compiles it to


class _CompiledInstance(_Instance):
    """Temporal's sandboxed run, executing its entry strings compiled once per process."""

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        super()._run_code(compiled_once(code), **extra_globals)  # type: ignore[arg-type]  # exec takes both


def _private_hook_fits() -> bool:
    """Whether temporalio's private run class still has the shapes `_CompiledInstance` relies on (a
    temporalio release may change them: then runs are Temporal's own, only slower)."""
    try:
        init = inspect.signature(_Instance.__init__).parameters
        run = inspect.signature(_Instance._run_code).parameters
    except AttributeError:
        return False
    return list(init)[1:] == ["instance_details", "runner_class", "restrictions"] and list(run) == [
        "self",
        "code",
        "extra_globals",
    ]


def _runs_a_workflow(runner_class: type[WorkflowRunner], restrictions: SandboxRestrictions) -> bool:
    """The self-test: `_CompiledInstance` creates a sandboxed run of SandboxProbe and completes it in
    one activation with the answer it was given (created on the running event loop, activated on a
    thread of its own, as the worker does).
    Built inside the call from what this release offers: any change raises here, not at import."""
    from temporalio.worker.workflow_sandbox._runner import _fake_info  # what its own check runs with

    converter = DataConverter.default
    details = WorkflowInstanceDetails(
        payload_converter_factory=converter._new_payload_converter,
        failure_converter_class=converter.failure_converter_class,
        interceptor_classes=[],
        defn=workflow._Definition.must_from_class(SandboxProbe),
        info=_fake_info,
        randomness_seed=1,
        extern_functions={},
        disable_eager_activity_execution=False,
        worker_level_failure_exception_types=[],
        patch_activation_callback=None,
        last_completion_result=Payloads(),
        last_failure=Failure(),
    )
    start = activation.InitializeWorkflow(
        workflow_type="wolf.sandbox_probe",
        workflow_id="wolf-sandbox-probe",
        arguments=converter.payload_converter.to_payloads(["ok"]),
        randomness_seed=1,
    )
    instance = _CompiledInstance(details, runner_class, restrictions)
    job = activation.WorkflowActivation(
        run_id="wolf-sandbox-probe", jobs=[activation.WorkflowActivationJob(initialize_workflow=start)]
    )
    with ThreadPoolExecutor(1) as thread:  # as the worker does: an activation owns its thread's loop
        done = thread.submit(instance.activate, job).result()
    commands = done.successful.commands
    return len(commands) == 1 and converter.payload_converter.from_payloads(
        [commands[0].complete_workflow_execution.result]
    ) == ["ok"]


@dataclass(frozen=True)
class CachingSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """Temporal's sandboxed runner, with the modules of each prepared workflow's top-level package,
    and the sandbox's own entry strings, compiled once per process (see the module docstring)."""

    _compiled: list[bool] = field(default_factory=list, init=False, compare=False, repr=False)
    """Whether the entry strings are compiled once: decided at the first prepared workflow."""

    @property
    def compiles_entries(self) -> bool:
        return bool(self._compiled and self._compiled[0])

    def prepare_workflow(self, defn: workflow._Definition) -> None:
        CODE_CACHE.add_package(defn.cls.__module__.split(".", 1)[0])
        _install()
        if not self._compiled:
            self._compiled.append(self._entries_fit())
        super().prepare_workflow(defn)

    def _entries_fit(self) -> bool:
        """On a tested temporalio, whether the private hook still has its shapes; on another, whether
        it runs the self-test's workflow too. Else Temporal's own runs, said once."""
        version = temporalio.__version__
        fits = _private_hook_fits()
        if fits and version not in TESTED_TEMPORALIO:
            try:
                fits = _runs_a_workflow(self.runner_class, self.restrictions)
            except Exception as exc:  # whatever the release changed: its own runs are the safe way
                log.debug("the sandbox self-test failed: %r", exc)
                fits = False
        if not fits:
            log.warning(
                "temporalio %s: workflow runs use Temporal's own sandbox entry (tested: %s); they work, "
                "with a little more CPU per activation",
                version,
                ", ".join(TESTED_TEMPORALIO),
            )
        return fits

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if not self.compiles_entries:
            return super().create_instance(det)
        return _CompiledInstance(det, self.runner_class, self.restrictions)
