"""Import cost guards: `wolf status` and programs embedding `WolfClient` pay for Temporal's client,
not for pydantic-ai's agent machinery (~430 ms), workflow streams, jsonschema or YAML; `wolf --help` pays
for neither Temporal nor pydantic (nor asyncio). Checked in a fresh interpreter, so no other test's
imports count."""

from __future__ import annotations

import json
import subprocess
import sys

CLIENT_HEAVY = (
    "pydantic_ai",
    "temporalio.contrib.workflow_streams",
    "jsonschema",
    "yaml",
    "agentwolf.workflows.session.workflow",
)
HELP_HEAVY = ("temporalio", "pydantic", "rich", "agentwolf.protocols", "mcp", "asyncio")
STATUS_HEAVY = (
    "pydantic_ai",
    "mcp",
    "agentwolf.protocols",
    "agentwolf.workflows.session.workflow",
    "prompt_toolkit",
    "agentwolf.config.manifest",  # about 150 ms of pydantic model building: a session's config
    "rich",  # its lines are plain: rich's console is 17 ms of import
    "psutil",  # the no-worker check reads /proc on Linux: 11 ms
    *(f"agentwolf.cli.{name}" for name in ("interactive", "configs", "stack", "evals", "jobs", "editor")),
)
STATUS_VERB = """
import typer.main
from agentwolf.cli import app
import agentwolf.cli.errors, agentwolf.cli.pending, agentwolf.cli.render, agentwolf.client.wolf_client
import agentwolf.ops.local_stack
typer.main.get_command(app).get_command(None, "status")
"""


def imported(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """Which of `prefixes` (modules and their submodules) running `statement` loads, in a fresh
    interpreter."""
    code = (
        f"import json, sys\n{statement}\nprefixes = {prefixes!r}\n"
        "hit = {p for m in sys.modules for p in prefixes if m == p or m.startswith(p + '.')}\n"
        "print(json.dumps(sorted(hit)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_client_imports_no_agent_machinery():
    statement = "import agentwolf.client.wolf_client\nfrom agentwolf.client import WolfClient, connect"
    assert imported(statement, CLIENT_HEAVY) == []


def test_the_guard_sees_what_a_session_start_imports():
    """The probe is not blind: a session's start input (`start_session` imports it) brings pydantic-ai."""
    assert imported("import agentwolf.workflows.session_input", CLIENT_HEAVY) == [
        "pydantic_ai",
        "temporalio.contrib.workflow_streams",
    ]


def test_help_imports_neither_temporal_nor_pydantic():
    assert imported("import agentwolf.cli", HELP_HEAVY) == []


def test_wolf_status_imports_no_front_end_nor_agent_machinery():
    """The `status` verb built, with every module its body imports: the CLI's floor stands on the
    SDK, not on protocols/ (which `wolf serve`, `mcp` and `acp` load inside their verbs), and reads
    a session without building the manifest models, nor importing the other verbs' modules."""
    assert imported(STATUS_VERB, STATUS_HEAVY) == []
    assert imported(STATUS_VERB + "import agentwolf.cli.stack", ("agentwolf.protocols",)) == []
    assert imported("import agentwolf.protocols.app", ("agentwolf.cli", "prompt_toolkit")) == []
