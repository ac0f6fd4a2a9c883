"""MkDocs hook: the reference pages integrators look up, generated from the code at every build:
session events (`EventKind`, the fields each kind's emitters set, its tier), the worker policy
(`WorkerPolicy`'s JSON Schema, shown as the manifest reference is) and environment variables (every
`WOLF_*` the package names, with the modules that name it). A kind, event field or variable the code
has and this file does not describe fails the build, and so does a description of one the code lost."""

from __future__ import annotations

import ast
import functools
import re
import typing
from collections import defaultdict
from pathlib import Path

from hooks import schema_section  # docs/hooks.py: the manifest reference's tables
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

PACKAGE = Path(__file__).resolve().parents[1] / "agentwolf"
VARIABLE = re.compile(r"WOLF_[A-Z0-9_]+")

EVENTS = {
    "turn_started": "A turn began; `text` is its prompt.",
    "compiled": "The agent was compiled for the turn (instructions, tools, skills); `text` says what, "
    "and why when it was recompiled.",
    "model_text": "A step's text from the model, whole: the step's `text_delta`s join to exactly it.",
    "tool_call_started": "A tool call began. `parent` names the `run_code` call a code-mode script made "
    "it from.",
    "tool_call_finished": "A tool call ended: its `outcome`, `duration_ms` and result (`text`, cut).",
    "tool_call_cut": "A tool call in flight when its worker was lost: `outcome` `repeated` (safe to "
    "repeat, run again) or `not_repeated` (the model was told it may or may not have run).",
    "steer_applied": "A steer reached the model at a step boundary; `text` is the steer.",
    "limit_warning": "A limit is near, or tool calls were refused (per step, budgets); the turn goes on.",
    "limit_reached": "A limit ended the turn (`max_steps`, a budget), or an idle session closed.",
    "interrupted": "The turn was interrupted; `text` is the reason.",
    "approval_requested": "A tool call waits for a person (`wolf approve` / `deny`).",
    "approval_resolved": "The wait ended: `outcome` `approved` or `denied`, `text` the reason given.",
    "child_started": "A subagent session started: `tool` is the agent, `call_id` the child's session id, "
    "`text` its task.",
    "child_finished": "The subagent session ended with `outcome`; `text` is its answer.",
    "config_changed": "A registry config update reached the session: `outcome` `recompile`, "
    "`unchanged` or `refused`.",
    "extensions_changed": "MCP servers' tools or skills changed; the agent is recompiled at the next step.",
    "command_expanded": "A slash command became the prompt: `tool` is the command, `text` the expansion.",
    "agent_resumed": "An external (ACP) agent's session was resumed on its host (`outcome` `loaded`) or "
    "prompted again with the transcript.",
    "context_compacted": "Old tool results were stubbed (`tier` 1) or older turns summarised (`tier` 2); "
    "`before_tokens` and `after_tokens` estimate the context.",
    "error": "Something failed and was said: a refused result the model retries, a failed compaction, "
    "a prompt or steer dropped at close (`outcome` `dropped`), or the turn's failure.",
    "turn_finished": "The turn ended: `outcome` (`completed`, `interrupted`, `limit`, `failed`), the "
    "output as `text`, the turn's `usage`.",
    "session_closed": "The session ended: `outcome` and the whole session's `usage`.",
    "text_delta": "A chunk of a step's text while the model writes it; `index` is where it starts in "
    "that `attempt`'s text.",
    "thinking_delta": "A chunk of the model's thinking, as `text_delta`.",
    "attempt_superseded": "Drop that `attempt`'s text: its request is retried or was interrupted.",
    "tool_progress": "MCP progress of a running tool call (`progress`, `total`, `text`), at most 10 a "
    "second.",
    "rate_limited": "The step's model request waits for its provider's limits; `text` says until when.",
}

FIELDS = {
    "kind": "The event kind (the headings below).",
    "at": "When it happened (UTC, ISO 8601).",
    "turn_id": "The turn it belongs to.",
    "step": "The model step within the turn.",
    "text": "The kind's text (prompts, answers, reasons); cut past a limit in durable events.",
    "tool": "The tool, agent or command the event is about.",
    "call_id": "The tool call (or child session) it is about.",
    "model": "The model that answered the step, where a capability routed it to another (`model_text`).",
    "args": "The tool call's arguments.",
    "duration_ms": "How long the call took.",
    "outcome": "How it ended.",
    "usage": "Requests, tokens, tool calls and USD (`cost_usd`, null when no request was priced).",
    "attempt": "Live events: the model request's (or tool call's) attempt.",
    "index": "Deltas: where `text` starts in the attempt's text.",
    "progress": "`tool_progress`: the progress the tool reported.",
    "total": "`tool_progress`: the total, when the tool knows it.",
    "parent": "Calls a code-mode script made: the `run_code` call they are nested in (absent otherwise).",
    "tier": "`context_compacted`: 1 or 2 (absent otherwise).",
    "before_tokens": "`context_compacted`: the context before (absent otherwise).",
    "after_tokens": "`context_compacted`: the context after (absent otherwise).",
}

ENVIRONMENT = {
    "WOLF_HOME": (
        "every process",
        "The data folder: the local stack's files and logs, the default payload store, `policy.yaml`, "
        "the chat history. Default `$XDG_DATA_HOME/agentwolf`, else `~/.local/share/agentwolf`.",
    ),
    "WOLF_POLICY": (
        "worker, `wolf serve`, `wolf mcp`, `config validate`",
        "The [worker policy](policy.md) file (else `$WOLF_HOME/policy.yaml`, else the built-in default). "
        "Read at start: restart to apply a change.",
    ),
    "WOLF_PAYLOAD_STORE": (
        "worker and every client",
        "Where payloads over 256 KiB go: a folder, `s3://bucket/prefix` or `gs://bucket/prefix`. The same "
        "for every worker and client of a namespace ([payload stores](../features/payloads.md)).",
    ),
    "WOLF_TENANT_NAMESPACES": (
        "worker, clients",
        "`tenant=namespace,...`: tenants whose sessions live in a namespace of their own.",
    ),
    "WOLF_TRACE_CONTENT": (
        "worker (the local stack passes it on)",
        "`1` records prompts, completions and tool payloads in trace spans. Not for production "
        "([observability](../features/observability.md)).",
    ),
    "WOLF_HOST_ID": (
        "worker",
        "This host's identity for ACP agents' home task queue (default: the host name). Keep it stable "
        "across restarts (a StatefulSet's pod name, not a Deployment's).",
    ),
    "WOLF_MODEL": (
        "the bundled example manifest",
        "Its model, `${WOLF_MODEL:-local:demo}`. The default policy allows it as a placeholder, and the "
        "local stack restarts its worker when it changes.",
    ),
    "WOLF_API_KEYS": (
        "`wolf serve`",
        "`key=tenant,...`: API keys it accepts, besides the policy's `api_keys`.",
    ),
    "WOLF_CONSOLE_SECRET": (
        "`wolf serve` (console)",
        "At least 32 characters: the key console sign-in tokens are signed with. Give every `wolf serve` "
        "process behind one address the same (else each draws its own, and a sign-in holds on one).",
    ),
    "WOLF_TEMPORAL_UI": (
        "`wolf serve` (console)",
        "The Temporal UI the console links sessions to. Default `http://localhost:8233`.",
    ),
    "WOLF_CONFIG": (
        "CLI",
        "The manifest file or registry config name verbs use without `--config` (else `./wolf.yaml`, "
        "else the bundled example).",
    ),
    "WOLF_TENANT": ("CLI", "The tenant of session verbs without `--tenant`. Default `default`."),
    "WOLF_USER": (
        "CLI",
        "Who `wolf submit`, `wolf chat` and `wolf memory` act for without `--user`: the session's owner, "
        "whose long-term memory it uses. Default: the login name.",
    ),
    "WOLF_MEMORY_STORE": (
        "worker, CLI",
        "The long-term memory store when the config names none (`host.memory.store`): `sqlite:///path` "
        "or `postgresql://...`. Default: `memory.db` in the data folder.",
    ),
    "WOLF_TASK_QUEUE": (
        "CLI verbs without a `--task-queue` option",
        "The task queue their work goes to. Default `agentwolf`.",
    ),
    "WOLF_LOCAL_ADDRESS": (
        "CLI, local stack",
        "The embedded local stack's Temporal address. Default `localhost:7233`; its UI is on port + 1000.",
    ),
    "WOLF_DEBUG": ("CLI", "`1` prints a traceback after an unexpected error."),
}

OTHER_ENVIRONMENT = [
    (
        "`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS`, "
        "`TEMPORAL_TLS_CLIENT_CERT_PATH`, `TEMPORAL_TLS_CLIENT_KEY_PATH`, "
        "`TEMPORAL_TLS_SERVER_CA_CERT_PATH`, `TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`",
        "every process that connects (temporalio's envconfig)",
        "The Temporal connection, as every Temporal tool reads it; flags win "
        "([deploying](../features/deploy.md#connecting-to-temporal)).",
    ),
    (
        "`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME` and the other `OTEL_*`",
        "worker, clients",
        "Traces over OTLP/HTTP ([observability](../features/observability.md)).",
    ),
    (
        "`OPENAI_API_KEY`, `ANTHROPIC_API_KEY` and other providers' keys",
        "worker (pydantic-ai), or a manifest's `${VAR}`",
        "Model credentials; a manifest may name only those the [policy](policy.md) allows.",
    ),
    (
        "`AWS_*`; `GOOGLE_APPLICATION_CREDENTIALS`",
        "worker and clients with a bucket payload store",
        "The S3 (boto) or Cloud Storage credentials.",
    ),
    (
        "`FORWARDED_ALLOW_IPS`",
        "`wolf serve` (uvicorn)",
        "Addresses whose `X-Forwarded-*` headers are trusted (default loopback): a TLS proxy's.",
    ),
    (
        "`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`",
        "worker (glibc)",
        "Set, they replace the worker's own malloc tuning.",
    ),
    ("`NO_COLOR`", "CLI", "Any value turns colour off."),
]


@functools.cache
def _trees(needle: str) -> list[tuple[str, ast.Module]]:
    """The package's modules whose source holds `needle`, parsed (module name, tree)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if needle in (text := path.read_text()):
            module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            found.append((module.removesuffix(".__init__"), ast.parse(text)))
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of docstring constants (a module's, class's, function's, or an attribute's)."""
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            ids |= {
                id(s.value) for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
            }
    return ids


def wolf_variables() -> dict[str, list[str]]:
    """Every `WOLF_*` name the package's code holds as a string (docstrings aside), with the modules."""
    found: dict[str, set[str]] = defaultdict(set)
    for module, tree in _trees("WOLF_"):
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and VARIABLE.fullmatch(value) and id(node) not in skip:
                found[value].add(module)
    return {name: sorted(modules) for name, modules in sorted(found.items())}


def _kinds_of(node: ast.expr | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _kinds_of(node.body) + _kinds_of(node.orelse)
    return []


def _keywords(call: ast.Call) -> set[str]:
    return {k.arg for k in call.keywords if k.arg and k.arg not in ("kind", "at")}


def _is_event(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "Event"


def event_fields() -> dict[str, set[str]]:
    """The fields each kind's emitters set: workflow `publish(kind, text, **fields)` calls (which add
    `turn_id` and `step`), `Event(kind=...)` constructions, and helpers that build an Event of the kind
    they are given (the deltas)."""
    fields: dict[str, set[str]] = defaultdict(set)
    for _, tree in _trees("Event") + _trees(".publish("):
        builders = {
            f.name: _keywords(call)
            for f in tree.body
            if isinstance(f, ast.FunctionDef)
            for call in ast.walk(f)
            if isinstance(call, ast.Call) and _is_event(call)
            if any(k.arg == "kind" and isinstance(k.value, ast.Name) for k in call.keywords)
        }
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "publish" and call.args:
                named = {"turn_id" if k == "turn" else k for k in _keywords(call)}
                named |= {"turn_id", "step"} | ({"text"} if len(call.args) > 1 else set())
                for kind in _kinds_of(call.args[0]):
                    fields[kind] |= named
            elif _is_event(call):
                kind_arg = next((k.value for k in call.keywords if k.arg == "kind"), None)
                for kind in _kinds_of(kind_arg):
                    fields[kind] |= _keywords(call)
            elif isinstance(func, ast.Name) and func.id in builders and call.args:
                for kind in _kinds_of(call.args[0]):
                    fields[kind] |= builders[func.id]
    return fields


def _check(what: str, described: set[str], actual: set[str]) -> None:
    if described != actual:
        missing, stale = sorted(actual - described), sorted(described - actual)
        raise PluginError(
            f"docs/reference_hooks.py: {what} out of step with the code: describe {missing}, drop {stale}"
        )


def events_reference() -> str:
    from agentwolf.workflows.types import LIVE_KINDS, Event, EventKind

    kinds = list(typing.get_args(EventKind))
    _check("EVENTS", set(EVENTS), set(kinds))
    _check("FIELDS", set(FIELDS), set(Event.model_fields))
    emitted = event_fields()
    lines = [
        "# Events reference",
        "",
        "Generated from the code: every kind of `EventKind` (`agentwolf/workflows/types.py`), with the",
        "fields its emitters set. Every event has `kind` and `at`; the fields a kind does not set are null.",
        "`WolfClient.events()` yields them as `Event` models. `wolf follow --json` prints one JSON Lines",
        "record each, its stream `offset` first and null fields left out. The front ends translate them",
        "([sessions](../features/sessions.md#live-output)).",
        "",
        "Two tiers:",
        "",
        "- **durable**: published on the session's Workflow Stream and kept in its history; a follower reads",
        "  them from any offset, across continue-as-new and worker restarts.",
        "- **live**: read from the running activity's heartbeat details while a turn runs, never written",
        "  to history; `events(sid, live=False)` leaves them out. Each carries the offset of the durable",
        "  event before it.",
        "",
        "| kind | tier | fields besides `kind` and `at` |",
        "|---|---|---|",
    ]
    for kind in kinds:
        tier = "live" if kind in LIVE_KINDS else "durable"
        names = [f for f in Event.model_fields if f in emitted.get(kind, set())]
        lines.append(f"| [`{kind}`](#{kind}) | {tier} | {', '.join(f'`{n}`' for n in names)} |")
    lines += ["", "## Kinds", ""]
    for kind in kinds:
        lines += [f"### {kind}", "", EVENTS[kind], ""]
    lines += ["## Fields", "", "| field | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {FIELDS[name]} |" for name in Event.model_fields]
    return "\n".join(lines) + "\n"


POLICY_INTRO = """\
# Worker policy reference

Generated from the `WorkerPolicy` model (`agentwolf/config/policy.py`), as the
[manifest reference](manifest.md) is from the manifest's. The policy is the operator's: what the
manifests a worker runs may reach ([security model](../features/security.md)). It is read from
`--policy FILE`, else `$WOLF_POLICY`, else `$WOLF_HOME/policy.yaml`, once, when the process starts.

!!! caution "`secrets:` adds to the default secrets unless `default_secrets: false`"
    Manifests may use `${WOLF_MODEL}`, `${OPENAI_API_KEY}`, `${OPENAI_BASE_URL}` and
    `${ANTHROPIC_API_KEY}` (what the bundled example uses) besides what `secrets:` lists. A fleet that
    runs others' manifests sets `default_secrets: false` and lists every variable they may use.

```yaml
default_secrets: false
secrets:
  "*": [WOLF_MODEL, OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY]
  acme: [ACME_*]
commands: [mcp-server-time, "npx -y @modelcontextprotocol/server-filesystem /srv/shared"]
urls: ["https://mcp.example.com/*"]
api_keys:
  - sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    tenant: acme
    agents: [assistant]
flow:
  tenants: {acme: 2}
```

An `api_keys` entry holds a key's SHA-256, never the key:
`printf %s "$KEY" | sha256sum`. `WOLF_API_KEYS=key=tenant,...` adds keys without `configs` or
`agents` limits.

"""


def policy_reference() -> str:
    from agentwolf.config.policy import WorkerPolicy

    schema = WorkerPolicy.model_json_schema()
    schema["properties"].pop("source")  # set by the loader: where the policy came from
    parts = [POLICY_INTRO, schema_section("Top level", schema, "##")]
    parts += [schema_section(name, definition, "##") for name, definition in sorted(schema["$defs"].items())]
    return "\n".join(parts)


def environment_reference() -> str:
    named = wolf_variables()
    _check("ENVIRONMENT", set(ENVIRONMENT), set(named))
    lines = [
        "# Environment variables",
        "",
        "Every `WOLF_*` variable the code reads, generated with the modules that name it (a build fails",
        "when the code reads one this page does not describe). Flags win over variables.",
        "",
        "| variable | read by | meaning | in the code |",
        "|---|---|---|---|",
    ]
    for name, (reader, meaning) in ENVIRONMENT.items():
        modules = ", ".join(f"`{m}`" for m in named[name])
        lines.append(f"| `{name}` | {reader} | {meaning} | {modules} |")
    lines += [
        "",
        "## Other variables AgentWolf honours",
        "",
        "| variables | read by | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| {names} | {reader} | {meaning} |" for names, reader, meaning in OTHER_ENVIRONMENT]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    pages = {
        "reference/events.md": events_reference(),
        "reference/policy.md": policy_reference(),
        "reference/environment.md": environment_reference(),
    }
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files
