"""Code mode (RFC-0051's sixth capability): the model writes a short Python script that calls the
agent's tools, and only what the script prints and returns comes back to the context.

The script runs in pydantic-monty (a Python interpreter in Rust, run in a subprocess: no file system,
network or imports beyond its standard modules, with memory and time limits). Execution pauses at
every call of a tool; this module runs a script until all its tasks wait on tool calls (or it ends),
and hands back the interpreter's snapshot with the calls, which the workflow runs as ordinary tool
calls before resuming the snapshot with their results (workflows/session/code.py).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import json
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import pydantic_monty as monty

from agentwolf.config.manifest import CodeModeSettings
from agentwolf.workflows.contracts import CODE, SESSION, SKILLS, SUBAGENTS, ToolOutcome, ToolSpec
from agentwolf.workflows.script import (
    OUTPUT_BYTES,
    SANDBOX_WAIT_S,
    ScriptCall,
    ScriptLimits,
    ScriptResult,
    ScriptResume,
    ScriptRound,
    ScriptStart,
    ScriptStep,
    function_name,
    parameter_order,
)

RUN_CODE = "run_code"

_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


def split_tools(tools: list[ToolSpec], settings: CodeModeSettings) -> tuple[list[ToolSpec], list[ToolSpec]]:
    """(offered to the model, callable from scripts): a script calls the agent's MCP and function
    tools (or the `tools` globs of them); the built-ins (skills, subagents, read_tool_output) and the
    tools left out stay offered directly, beside `run_code`."""
    callable_ = [t for t in tools if t.server not in (SKILLS, SUBAGENTS, SESSION)]
    if settings.tools is not None:
        callable_ = [t for t in callable_ if any(fnmatch.fnmatchcase(t.name, p) for p in settings.tools)]
    scripted = {t.name for t in callable_}
    return [t for t in tools if t.name not in scripted], callable_


def run_code_spec(script_tools: list[ToolSpec], settings: CodeModeSettings) -> ToolSpec:
    """`run_code(code)`, its description carrying the typed signatures of the functions a script may call."""
    stubs = "\n\n".join(signature(t) for t in script_tools) or "# (no tools: plain computation only)"
    return ToolSpec(
        name=RUN_CODE,
        server=CODE,
        tool=RUN_CODE,
        description=(
            "Run a Python script in a sandbox (no files, network or imports beyond the standard modules "
            "such as asyncio, json, re, math). Use it for work needing several tool calls: loop, filter "
            "and combine in the script, and only what it prints and its last expression come back. "
            "The tools below are async functions: `await` each call, and use `asyncio.gather(...)` for "
            "calls that may run at once. A call returns the tool's output (parsed when it is JSON, else "
            "text); a failed or refused call raises an exception. Limits for the whole script: "
            f"{settings.max_calls} tool calls (asking for one more ends the script), "
            f"{settings.timeout_s:g} s of computing, {settings.memory_mb} MB, "
            f"{OUTPUT_BYTES >> 20} MiB of printing.\n\n```python\n{stubs}\n```"
        ),
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python script."}},
            "required": ["code"],
        },
    )


def signature(spec: ToolSpec) -> str:
    """`async def name(a: int, b: str = 'x') -> Any` with the tool's description as its docstring."""
    properties: dict[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", ()))
    params = []
    for name in parameter_order(spec):
        schema = properties[name]
        hint = _hint(schema)
        if name in required:
            params.append(f"{name}: {hint}")
        else:
            params.append(f"{name}: {hint} = {schema.get('default')!r}")
    doc = spec.description.strip().replace('"""', "'''") or "(no description)"
    body = "\n    ".join(doc.splitlines())
    return f'async def {function_name(spec)}({", ".join(params)}) -> Any:\n    """{body}"""'


def _hint(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " | ".join(dict.fromkeys(_hint(s) for s in schema[union]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_hint({**schema, "type": k}) for k in kind)
    if kind == "array":
        return f"list[{_hint(schema.get('items', {}))}]"
    if kind == "object":
        return "dict[str, Any]"
    return _TYPES.get(kind or "", "Any")


Run = TypeVar("Run", ScriptStart, ScriptResume)


class KeptSnapshots:
    """The snapshots of the scripts this worker runs, by (scope, digest), so that history records a
    digest and not the interpreter's state at every tool call of a script. The oldest go past
    `max_bytes`; a resume that finds its snapshot gone runs the script again (`resume`)."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # runs call in from the sandbox threads

    def hold(self, scope: str, step: ScriptStep) -> ScriptStep:
        """`step` with its snapshot kept here and replaced by its digest."""
        if step.snapshot is None:
            return step
        digest = hashlib.sha256(step.snapshot).hexdigest()
        with self._lock:
            if (scope, digest) not in self._kept:
                self._kept[(scope, digest)] = step.snapshot
                self._bytes += len(step.snapshot)
            while self._bytes > self.max_bytes and len(self._kept) > 1:
                self._bytes -= len(self._kept.popitem(last=False)[1])
        return step.model_copy(update={"snapshot": None, "digest": digest})

    def take(self, scope: str, digest: str) -> bytes | None:
        with self._lock:
            return self._kept.get((scope, digest))


class Sandboxes:
    """The worker's warm sandbox processes, started at the first script and stopped with the worker
    (`HostRegistry.close`). Each script run checks one out as a fresh session (nothing a script
    leaves behind reaches the next); a process that dies is replaced, and each is recycled after
    `RECYCLE` sessions. Spawning a process per run cost more than the rest of a script's call.

    Runs go on threads of their own, one per process: a script waiting for a sandbox waits here, at
    most `wait_s`, and never holds a thread of the event loop's default executor, which the
    worker's DNS lookups and every other `to_thread` share (busy scripts once stalled them all)."""

    RECYCLE = 200

    def __init__(self, processes: int | None = None, wait_s: float = SANDBOX_WAIT_S) -> None:
        self.processes = processes or os.cpu_count() or 1
        self.wait_s = wait_s
        self._pool: monty.Monty | None = None
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(self.processes, thread_name_prefix="sandbox")
        self._free = asyncio.Semaphore(self.processes)
        self.kept = KeptSnapshots()

    async def run(self, step: Callable[[Run, Sandboxes], ScriptStep], inp: Run) -> ScriptStep:
        """`step(inp, self)` on a sandbox thread once one is free; a script that waited `wait_s` in
        vain is answered "sandbox busy". The thread is given back when the run ends, even if the
        caller stopped waiting (the run itself stops at its time limit)."""
        try:
            async with asyncio.timeout(self.wait_s):
                await self._free.acquire()
        except TimeoutError:
            return self.busy()
        loop = asyncio.get_running_loop()
        try:
            running = self._threads.submit(step, inp, self)
        except BaseException:
            self._free.release()
            raise
        running.add_done_callback(lambda _: loop.call_soon_threadsafe(self._free.release))
        return await asyncio.wrap_future(running)

    def busy(self) -> ScriptStep:
        return ScriptStep(
            error=f"sandbox busy: this worker's {self.processes} code-mode sandboxes ran other scripts for "
            f"{self.wait_s:g} s; the script was stopped (any tool calls it made ran). Try again shortly."
        )

    @contextmanager
    def session(self, limits: ScriptLimits) -> Iterator[tuple[monty.MontySession, monty.CollectString]]:
        sandbox_limits: monty.ResourceLimits = {
            "max_memory": limits.memory_mb * 1024 * 1024,
            "max_feed_duration_secs": limits.timeout_s,
        }
        with self._lock:
            if self._pool is None:
                self._pool = monty.Monty(
                    min_processes=1,
                    max_processes=self.processes,
                    checkout_timeout=self.wait_s,
                    max_checkouts_per_worker=self.RECYCLE,
                )
                self._pool.__enter__()
            pool = self._pool
        with pool.checkout(script_name="run_code.py", limits=sandbox_limits) as session:
            yield session, monty.CollectString(max_bytes=limits.output_bytes)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.__exit__(None, None, None)


def start(inp: ScriptStart, sandboxes: Sandboxes) -> ScriptStep:
    """Run a script until it waits on tool calls or ends (blocking: call it in a thread)."""
    try:
        with sandboxes.session(inp.limits) as (session, printed):
            try:
                step = _drive(session.feed_start(inp.code, print_callback=printed), inp.functions, printed)
            except monty.MontyError as exc:
                return _failed(exc, printed)
    except TimeoutError:  # no sandbox came free in time
        return sandboxes.busy()
    return step if inp.keep is None else sandboxes.kept.hold(inp.keep, step)


def resume(inp: ScriptResume, sandboxes: Sandboxes) -> ScriptStep:
    """Resume a snapshot with the results of the calls it waited on (blocking: call it in a thread).
    A kept snapshot (`inp.digest`) this worker does not hold (it restarted, or another worker ran
    the script so far) is rebuilt by running the script from its start on the recorded rounds."""
    packed, results = inp.snapshot, inp.results
    limits = inp.limits
    if inp.scope is not None and inp.digest is not None:
        kept = sandboxes.kept.take(inp.scope, inp.digest)
        packed, results = kept or b"", inp.rounds[-1].results
        if kept is None:  # the earlier runs' output is printed again, then cut: the whole budget
            limits = limits.model_copy(update={"output_bytes": OUTPUT_BYTES})
    try:
        with sandboxes.session(limits) as (session, printed):
            try:
                if not packed:
                    step = _replay(session, inp, printed)
                else:
                    dumped = zlib.decompress(packed) if inp.packed or inp.digest else packed
                    waiting = session.load_snapshot(dumped, print_callback=printed)
                    if not isinstance(waiting, monty.FutureSnapshot):
                        raise TypeError(f"a script's snapshot waits on futures, not {type(waiting).__name__}")
                    step = _drive(waiting.resume({r.id: _answer(r) for r in results}), inp.functions, printed)
            except monty.MontyError as exc:
                return _failed(exc, printed)
    except TimeoutError:
        return sandboxes.busy()
    return step if inp.scope is None else sandboxes.kept.hold(inp.scope, step)


REPLAY_DIVERGED = (
    "the script could not be resumed: this worker did not hold its state, and running it again on "
    "the recorded results of its calls made other calls (does it use time or randomness?). Its calls "
    "so far ran once; do the rest in another run_code call."
)


def _replay(session: monty.MontySession, inp: ScriptResume, printed: monty.CollectString) -> ScriptStep:
    """The script run again from its start, each round answered with its recorded results (no tool
    is called), then resumed with the last round's; only what it prints after that is its output."""
    snapshot: monty.SyncSnapshot = session.feed_start(inp.code, print_callback=printed)
    before = 0
    for round_ in inp.rounds:
        waiting, calls = _advance(snapshot, inp.functions)
        if not isinstance(waiting, monty.FutureSnapshot) or not _same_calls(calls, round_):
            return ScriptStep(error=REPLAY_DIVERGED)
        recorded = {r.id: r for r in round_.results}
        before = len(printed.output)
        snapshot = waiting.resume(
            {new.id: _answer(recorded[old.id]) for new, old in zip(calls, round_.calls, strict=True)}
        )
    step = _drive(snapshot, inp.functions, printed)
    return step.model_copy(update={"stdout": step.stdout[before:]})


def _same_calls(calls: list[ScriptCall], round_: ScriptRound) -> bool:
    return [(c.function, c.arguments) for c in calls] == [(c.function, c.arguments) for c in round_.calls]


def _drive(
    snapshot: monty.SyncSnapshot, functions: dict[str, list[str]], printed: monty.CollectString
) -> ScriptStep:
    """Run until every task of the script waits on tool calls (its snapshot, packed), or it ends."""
    done, calls = _advance(snapshot, functions)
    if isinstance(done, monty.MontyComplete):
        return ScriptStep(stdout=printed.output, output=_render(done.output))
    return ScriptStep(snapshot=zlib.compress(done.dump(), 1), packed=True, calls=calls, stdout=printed.output)


def _advance(
    snapshot: monty.SyncSnapshot, functions: dict[str, list[str]]
) -> tuple[monty.MontyComplete | monty.FutureSnapshot, list[ScriptCall]]:
    """Answer what the host need not decide (file system: refused; unknown names: NameError; each
    tool call: a future) until every task of the script waits on tool calls (with those calls), or
    it ends."""
    calls: list[ScriptCall] = []
    while True:
        if isinstance(snapshot, monty.MontyComplete):
            return snapshot, calls
        if isinstance(snapshot, monty.FutureSnapshot):
            waiting = set(snapshot.pending_call_ids)
            return snapshot, [c for c in calls if c.id in waiting]
        if isinstance(snapshot, monty.NameLookupSnapshot):
            snapshot = snapshot.resume()  # NameError in the script
        elif snapshot.is_os_function:
            snapshot = snapshot.resume_not_handled()
        elif (params := functions.get(snapshot.function_name)) is None:
            snapshot = snapshot.resume(
                {"exc_type": "NameError", "message": f"name {snapshot.function_name!r} is not defined"}
            )
        else:
            name = snapshot.function_name
            try:
                arguments = _arguments(name, params, snapshot.args, snapshot.kwargs)
            except TypeError as exc:
                snapshot = snapshot.resume({"exc_type": "TypeError", "message": str(exc)})
                continue
            calls.append(ScriptCall(id=snapshot.call_id, function=name, arguments=arguments))
            snapshot = snapshot.resume({"future": ...})


def _arguments(name: str, params: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if len(args) > len(params):
        raise TypeError(f"{name}() takes {len(params)} arguments but {len(args)} were given")
    arguments = dict(zip(params, args, strict=False))
    for key, value in kwargs.items():
        if key in arguments:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        if key not in params:
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
        arguments[key] = value
    return arguments


def _answer(result: ScriptResult) -> monty.ExternalSettledResult:
    """A tool's output for the script (JSON parsed), or the exception its failure raises there."""
    if result.outcome == ToolOutcome.DENIED:
        return {"exc_type": "PermissionError", "message": result.content}
    if result.outcome != ToolOutcome.SUCCESS:
        return {"exc_type": "RuntimeError", "message": result.content}
    try:
        return {"return_value": json.loads(result.content)}
    except ValueError:
        return {"return_value": result.content}


def _render(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _failed(exc: monty.MontyError, printed: monty.CollectString) -> ScriptStep:
    shown = exc.display() if isinstance(exc, monty.MontyRuntimeError | monty.MontySyntaxError) else str(exc)
    return ScriptStep(stdout=printed.output, error=shown)
