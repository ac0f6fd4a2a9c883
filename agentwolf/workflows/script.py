"""What crosses the boundary between a code-mode `run_code` call in the workflow and the sandbox
activities (`wolf.code_start`, `wolf.code_resume`): the script's pending tool calls, their results, and
the interpreter's snapshot between them (opaque bytes; a large one goes to the payload store like any
large payload).

Each activity runs the script until it waits on tool calls (or ends), so every call the script makes
is the workflow's ordinary tool call, recorded in history: a worker lost mid-script resumes from the
last snapshot and repeats none of them.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentwolf.workflows.contracts import ToolOutcome, ToolSpec


class ScriptCall(BaseModel):
    """A tool call the script waits on: `id` is the sandbox's, `arguments` the tool's JSON object."""

    id: int
    function: str
    arguments: dict[str, Any]


class ScriptResult(BaseModel):
    """How one of the script's calls ended: a value for the script, or an exception raised in it."""

    id: int
    content: str
    outcome: ToolOutcome = ToolOutcome.SUCCESS


OUTPUT_BYTES = 1 << 20
"""What one script may print in all; past it, `print` raises MemoryError in the script."""

SANDBOX_WAIT_S = 30.0
"""How long a script waits for one of the worker's sandboxes before it is answered "sandbox busy"."""


class ScriptLimits(BaseModel):
    """What this run of the sandbox may use: `output_bytes` is what the script's earlier runs left of
    its budget (the sandbox's clock for `timeout_s` is carried in the snapshot)."""

    memory_mb: int
    timeout_s: float
    output_bytes: int = OUTPUT_BYTES


class ScriptRound(BaseModel):
    """One wait of the script: the calls it made and how they ended. A resume on a worker that does
    not keep the script's snapshot runs the script again from its start on these (no call repeated)."""

    calls: list[ScriptCall]
    results: list[ScriptResult]


class ScriptStart(BaseModel):
    code: str
    functions: dict[str, list[str]]
    """The tools the script may call, each with its parameters in signature order (for positional calls)."""
    limits: ScriptLimits
    keep: str | None = None
    """Keep the snapshot on this worker under this scope (the `run_code` call in its run): the step
    then carries only the snapshot's digest, and history no snapshot (code-mode-kept patch)."""


class ScriptResume(BaseModel):
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    snapshot: bytes = b""
    packed: bool = False
    """The snapshot is zlib-compressed (as the sandbox hands it back since the snapshots were packed)."""
    functions: dict[str, list[str]]
    results: list[ScriptResult] = []
    limits: ScriptLimits
    scope: str | None = None
    digest: str | None = None
    """With `scope`: the kept snapshot to resume (ScriptStart.keep), in place of `snapshot`; the
    current round's results are then the last of `rounds`."""
    code: str = ""
    rounds: list[ScriptRound] = []
    """Every round so far, this one last: what a worker without the kept snapshot runs the script on."""


class ScriptStep(BaseModel):
    """Where the script stopped: waiting on `calls` (with its `snapshot`), or done (`output` or `error`)."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    snapshot: bytes | None = None
    packed: bool = False
    """`snapshot` is zlib-compressed: each one is recorded in history (a local activity's result), and
    an interpreter's state compresses about sevenfold."""
    digest: str | None = None
    """In place of `snapshot`: the snapshot is kept on the worker that made it (ScriptStart.keep)."""
    calls: list[ScriptCall] = []
    stdout: str = ""
    output: str | None = None
    """The script's last expression, rendered (JSON where it can be)."""
    error: str | None = None
    """The script raised (or broke a limit): its traceback, for the model to fix the script."""


def parameter_order(spec: ToolSpec) -> list[str]:
    """A tool's parameters as its Python signature lists them: required first, each group in schema order."""
    properties = list(spec.parameters.get("properties", {}))
    required = set(spec.parameters.get("required", ()))
    return [p for p in properties if p in required] + [p for p in properties if p not in required]


def function_name(spec: ToolSpec) -> str:
    """The tool's name as a script calls it: a Python identifier (`get-weather` -> `get_weather`)."""
    name = re.sub(r"\W", "_", spec.name)
    return f"{name}_" if keyword.iskeyword(name) or name[:1].isdigit() else name
