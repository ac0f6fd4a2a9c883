"""The session workflow's pure parts: its constants, the state of a running turn, helpers, and the
compact log of its event stream.

Nothing here calls `workflow.*`, reads a clock, draws random numbers or does I/O. The workflow imports
this module through `workflow.unsafe.imports_passed_through()` (like workflows/types.py), so its classes
and functions are created once per process: Temporal's sandbox re-runs a sandboxed module's body for
every workflow run, and each cached session kept its own copies (dataclasses build their methods with
`exec`), about 20 KB per session.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import sysconfig
import threading
import weakref
from collections import Counter
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError
from pydantic_ai.messages import ModelMessage, ModelRequestPart, ToolCallPart, ToolReturnPart
from temporalio.api.common.v1 import Payload
from temporalio.common import RetryPolicy
from temporalio.contrib.workflow_streams import WorkflowStreamItem
from temporalio.exceptions import ApplicationError

from agentwolf.workflows.contracts import CompiledAgent, ToolOutcome
from agentwolf.workflows.session_input import TurnSnapshot
from agentwolf.workflows.types import Counters, Prompt, TurnOutcome, Usage

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


COMPILE_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=6
)
TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
HEARTBEAT_TIMEOUT = timedelta(seconds=5)
LOCAL_TOOL_CALLS = "local-tool-calls"  # patch: known-fast tools run as local activities
SAFE_LOCAL_CALLS = "safe-local-calls"  # patch: ...only when they are safe to run twice
TOOL_OWN_TIME = "tool-own-time"  # patch: ...known fast by the time the call ran, not its round trip
SLASH_COMMANDS = "slash-commands"  # patch: prompts starting with `/` expand through an activity
CHILD_IDS = "child-ids"  # patch: subagent ids from the call's turn, step and position, not the model's id
WAIT_CHILDREN = "wait-children"  # patch: an interrupted or closed parent waits until its children stopped
RELEASE_SESSION_SERVERS = "release-session-servers"  # patch: a closing session stops its client's servers
GONE_SERVERS = "gone-servers"  # patch: a call to a server no longer in the session answers an error
BOUNDED_FAN_OUT = "bounded-fan-out"  # patch: a step's calls run at most N at once, calls past a cap refused
EVENT_TEXT_LIMIT = 2000
MODEL_TEXT_LIMIT = 65_536
CUT_MARK = "... [{} chars]"
PAGE_HEADER = 100  # room for read_tool_output's header inside the tool output limit
WAITING_SNAPSHOT_EVENTS = 100  # a run waiting for approval continues as new only past this many events
MODEL_TIMEOUT = timedelta(minutes=10)


@dataclass
class Turn:
    """What a turn has produced but not yet recorded, so that any ending can close it cleanly."""

    pending: list[ModelRequestPart]
    finished: dict[int, ToolReturnPart] = field(default_factory=dict)
    """Results by the call's position in `open_calls`: models may repeat a tool-call id."""
    open_calls: list[ToolCallPart] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    repeats: Counter[str] = field(default_factory=Counter)
    """Calls by tool and arguments, for the loop guard."""
    warned_budget: bool = False
    warnings: list[str] = field(default_factory=list)
    """Tools the loop guard warns about once this step's results are in."""

    def snapshot(self, prompt: Prompt, step: int) -> TurnSnapshot:
        return TurnSnapshot(
            prompt=prompt,
            step=step,
            usage=self.usage,
            open_calls=self.open_calls,
            finished=self.finished,
            pending=self.pending,
            repeats=dict(self.repeats),
            warned_budget=self.warned_budget,
            warnings=self.warnings,
        )

    @classmethod
    def resumed(cls, snapshot: TurnSnapshot) -> Turn:
        return cls(
            pending=list(snapshot.pending),
            finished=dict(snapshot.finished),
            open_calls=list(snapshot.open_calls),
            usage=snapshot.usage,
            repeats=Counter(snapshot.repeats),
            warned_budget=snapshot.warned_budget,
            warnings=list(snapshot.warnings),
        )


@dataclass
class Staleness:
    """Why the compiled agent is out of date, and a generation that tells a change that arrived
    during a compile from the one the compile was for (string identity cannot: equal strings may
    be one object, depending on a process-wide cache)."""

    reason: str | None = None
    generation: int = 0

    def mark(self, reason: str) -> None:
        self.reason = reason
        self.generation += 1

    def compiled(self, generation: int) -> None:
        """A compile that started at `generation` succeeded: fresh, unless something changed since."""
        if self.generation == generation:
            self.reason = None


@dataclass
class RunningTurn:
    """The running turn as the turn runner (loop.py) keeps it: only the runner and its steps write
    it (`begin`, a step, `end`); the core stamps events with its turn and step and the other parts
    read it. Made from the start input: a turn that continued as new while it waited for approval
    resumes from `resume`, with its skills."""

    resume: TurnSnapshot | None = None
    """A turn to resume first: it continued as new while waiting for approval."""
    active_skills: list[str] = field(default_factory=list)
    """Skills loaded this turn: their `allowed-tools` limit the tools, their MCP servers join."""
    turn_id: str | None = None
    step: int = 0
    turn: Turn | None = None
    prompt: Prompt | None = None
    interrupt_reason: str | None = None
    """Why the run loop cancelled the turn (an interrupt, a close, the workflow's cancel)."""
    stale: Staleness = field(default_factory=Staleness)
    """Why the compiled agent is out of date (recompiled before the next model request)."""
    turns_this_run: int = 0

    @classmethod
    def restored(cls, resume: TurnSnapshot | None) -> RunningTurn:
        return cls(resume=resume, active_skills=list(resume.active_skills) if resume else [])

    def load_skill(self, name: str) -> bool:
        """The skill is active for the rest of the turn; False when it was already."""
        if name in self.active_skills:
            return False
        self.active_skills.append(name)
        return True


@dataclass(frozen=True)
class TurnEnd:
    """How a turn ended, as the turn runner hands it to the core (`SessionCore.end_turn`), which
    records it: like openai-agents' step results, a value instead of fields the runner writes."""

    turn_id: str
    outcome: TurnOutcome
    output: str | None
    usage: Usage
    closing: list[ModelRequestPart]
    """The last request's parts: a result for every call the turn left open (those that never ran
    say why) and what the model was still to be sent."""


def turn_end(turn: Turn, turn_id: str, outcome: TurnOutcome, output: str | None, now: datetime) -> TurnEnd:
    """The end of `turn`: every dangling tool call is closed, so the transcript stays valid for the
    next turn."""
    note = {"interrupted": "interrupted by the user", "limit": f"not run: {output}"}.get(outcome, "not run")
    closed = [
        turn.finished.get(index) or tool_return(call, note, ToolOutcome.INTERRUPTED, now)
        for index, call in enumerate(turn.open_calls)
    ]
    return TurnEnd(turn_id, outcome, output, turn.usage, [*closed, *turn.pending])


def tool_return(call: ToolCallPart, content: str, outcome: ToolOutcome, now: datetime) -> ToolReturnPart:
    return ToolReturnPart(
        tool_name=call.tool_name,
        content=content,
        tool_call_id=call.tool_call_id,
        timestamp=now,
        outcome=outcome,  # type: ignore[arg-type]
    )


class TurnStopped(Exception):
    """A limit or a failure ended the turn; `outcome` says which."""

    def __init__(self, outcome: TurnOutcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


async def all_or_cancel(coros: list[Coroutine[Any, Any, T]], limit: int | None = None) -> list[T]:
    """Run in parallel, at most `limit` at once (started in order; None: all at once); if one fails
    for good, cancel the others (asyncio.gather would not). Results in the coroutines' order."""
    if limit is not None:
        gate = asyncio.Semaphore(limit)

        async def gated(coro: Coroutine[Any, Any, T]) -> T:
            try:
                async with gate:
                    return await coro
            finally:
                coro.close()  # cancelled at the gate: it never started

        coros = [gated(c) for c in coros]
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def event_args(call: ToolCallPart) -> dict[str, object]:
    """The call's arguments for an event: whole when small, else a cut of their JSON."""
    raw = call.args_as_json_str()
    if len(raw) > EVENT_TEXT_LIMIT:
        return {"_truncated": f"{raw[:EVENT_TEXT_LIMIT]}... [{len(raw)} chars]"}
    try:
        return call.args_as_dict(raise_if_invalid=True)
    except (ValueError, AssertionError):
        return {"_raw": raw}


def call_keys(calls: list[ToolCallPart]) -> list[str]:
    """What approvals answer: the model's call id, made unique by position where the model repeated it."""
    counts = Counter(c.tool_call_id for c in calls)
    return [
        c.tool_call_id if counts[c.tool_call_id] == 1 else f"{c.tool_call_id}#{i}"
        for i, c in enumerate(calls)
    ]


def shared_names(compiled: CompiledAgent) -> set[str]:
    """MCP tool names that more than one server lists."""
    counts = Counter(t.tool for t in compiled.tools)
    return {name for name, n in counts.items() if n > 1}


SUMMARY_CHARS = 120
"""Temporal UI summaries stay one short line (the server refuses a summary past 400 bytes)."""


def short(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line of `text`, cut to `limit` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


def model_name(compiled: CompiledAgent) -> str:
    """The first model of the chain without its provider (`gpt-4o-mini`), for activity summaries."""
    models = compiled.labels or compiled.models
    first = models[0] if models else "?"
    return first.split(":", 1)[-1] + (f" (+{len(models) - 1})" if len(models) > 1 else "")


def failed_counters(err: BaseException) -> Counters | None:
    """What a child session that failed had spent: its failure carries its counters as details."""
    cause = err.__cause__
    details = cause.details if isinstance(cause, ApplicationError) else ()
    try:
        return Counters.model_validate(details[0]) if details else None
    except ValidationError:
        return None


def cause_message(err: BaseException) -> str:
    """The innermost error message (an ActivityError wraps the activity's ApplicationError), without
    its type (`ConfigError: ...`): that is for logs, the message is for people."""
    while err.__cause__ is not None:
        err = err.__cause__
    return err.message if isinstance(err, ApplicationError) else str(err)


_SHARED: weakref.WeakValueDictionary[tuple[type, bytes], BaseModel] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared(model: M) -> M:
    """The process's one instance of a model with exactly this content (its JSON, byte for byte).

    Every session of a config carries the same manifest, and every session of an agent gets the same
    compiled agent: each deserialized copy cost a cached session about 12 KB (pydantic models keep a
    dict and a set of their fields each). Only for models the workflow never mutates (it replaces
    them, `model_copy`). Equal JSON means equal content, dict order included, and what is sent on
    (activity inputs, continue-as-new) serializes to the same bytes: sharing changes nothing a run
    can observe. Weak values: a model no session holds any more leaves the table."""
    key = (type(model), hashlib.sha256(model.__pydantic_serializer__.to_json(model)).digest())
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            _SHARED[key] = found = model
    return found  # type: ignore[return-value]


SHARED_TEXT_MIN = 256
"""Texts this long and longer are shared (`share_texts`); shorter ones would save less than a lookup costs."""
_MORTAL_INTERNS = sys.version_info[:2] != (3, 12) and not sysconfig.get_config_var("Py_GIL_DISABLED")
"""Interned strings leave the table with their last reference, except on 3.12 (PEP 683 made them
immortal there) and on free-threaded builds (which immortalise them too): there texts stay unshared,
or every tool result would live as long as the process."""


def share_texts(messages: Iterable[ModelMessage]) -> None:
    """Make each long text in `messages` (prompts, answers, tool results, call arguments) the
    process's one copy of it (`sys.intern`), in place.

    A worker holds a session's transcript twice, each decoded from its own payload: in the workflow's
    state and in its transcript cache (hosts/transcripts.py), and a continue-as-new decodes it once
    more while the old run's copy is still alive. Strings are immutable and equal ones are
    interchangeable: nothing a run can observe changes, and no text is kept longer than its last
    holder keeps it."""
    if not _MORTAL_INTERNS:
        return
    for message in messages:
        for part in message.parts:
            for name in ("content", "args"):
                text = getattr(part, name, None)
                if type(text) is str and len(text) >= SHARED_TEXT_MIN:
                    setattr(part, name, sys.intern(text))


class CompactLog:
    """A Workflow Stream's log kept serialized: `(topic, Payload bytes)` per item, materialized as
    `WorkflowStreamItem`s only when read (a poll, a snapshot for continue-as-new).

    A protobuf `Payload` object costs about 1.7 KB of memory whatever its size (its own upb arena, a
    metadata map), its serialized form a few hundred bytes: an idle session keeps every event of its
    run and up to `events_kept` carried over from the previous one. Reads return equal payloads, so
    followers and snapshots see exactly what they did. Supports what WorkflowStream does with its
    log: `len`, indexing and slicing, iteration, `append`."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[WorkflowStreamItem[Payload]] = ()) -> None:
        self._items: list[tuple[str, bytes]] = []
        for item in items:
            self.append(item)

    def append(self, item: WorkflowStreamItem[Payload]) -> None:
        self._items.append((item.topic, item.data.SerializeToString()))

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> WorkflowStreamItem[Payload]: ...
    @overload
    def __getitem__(self, index: slice) -> list[WorkflowStreamItem[Payload]]: ...

    def __getitem__(
        self, index: int | slice
    ) -> WorkflowStreamItem[Payload] | list[WorkflowStreamItem[Payload]]:
        if isinstance(index, slice):
            return [_item(entry) for entry in self._items[index]]
        return _item(self._items[index])

    def __iter__(self) -> Iterator[WorkflowStreamItem[Payload]]:
        return (_item(entry) for entry in self._items)


def _item(entry: tuple[str, bytes]) -> WorkflowStreamItem[Payload]:
    return WorkflowStreamItem(topic=entry[0], data=Payload.FromString(entry[1]))
