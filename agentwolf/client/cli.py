"""`wolf`: submit, follow, steer and interrupt agent sessions; run workers; the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 server unreachable.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from agentwolf.client import live_view, local_stack
from agentwolf.client.payload_gc import collect_garbage, parse_duration
from agentwolf.client.render import inert
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.loading import ManifestError, load_manifest
from agentwolf.config.manifest import Manifest
from agentwolf.config.masking import masked
from agentwolf.config.policy import load_policy
from agentwolf.payloads import filesystem_root, store_location
from agentwolf.tenants import check_tenant, namespace_for
from agentwolf.worker.host import HostRegistry
from agentwolf.worker.main import TASK_QUEUE
from agentwolf.workflows.registry import PushResult, VersionInfo, check_config_name, is_config_name, pushable

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False)
# No markup, highlighting or emoji codes (`:smile:`) unless a line asks: session text prints as it is.
out = Console(
    no_color=bool(os.environ.get("NO_COLOR")) or None,
    highlight=False,
    soft_wrap=True,
    markup=False,
    emoji=False,
)
err = Console(
    stderr=True,
    no_color=bool(os.environ.get("NO_COLOR")) or None,
    highlight=False,
    soft_wrap=True,
    markup=False,
    emoji=False,
)

BUNDLED_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "wolf.yaml"
"""The example config and its skills ship inside the package, so `wolf submit` works from any folder."""

Agent = Annotated[str, typer.Option("--agent", "-a", help="Agent name from the config.")]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config", "-c", help="Registry config NAME, or a manifest file (has a '.' or '/', or exists)."
    ),
]
Tenant = Annotated[str, typer.Option("--tenant", envvar="WOLF_TENANT", help="Tenant owning the session.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
Address = Annotated[
    str | None, typer.Option("--address", envvar="TEMPORAL_ADDRESS", help="Temporal frontend.")
]


class Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _literal(text: str) -> str:
    """Session or server text inside a markup line: its `[` is not markup, its controls are shown, not sent."""
    return escape(inert(text))


def _config_path(config: Path | None) -> Path:
    if config is not None:
        return config
    if env := os.environ.get("WOLF_CONFIG"):
        return Path(env)
    return Path("wolf.yaml") if Path("wolf.yaml").exists() else BUNDLED_CONFIG


def _config_source(config: str | None) -> Manifest | str:
    """`--config` (else WOLF_CONFIG): a registry config name, or a manifest loaded from a file.

    Registry names have no '.' or '/'; a path that exists is always a file."""
    value = config or os.environ.get("WOLF_CONFIG")
    if value and is_config_name(value) and not Path(value).exists():
        return value
    return load_manifest(_config_path(Path(value) if value else None))


def _registry_ref(target: str | None) -> tuple[str, int | None] | None:
    """`NAME` or `NAME@VERSION` (a registry config), else None (a manifest file)."""
    value = target or os.environ.get("WOLF_CONFIG")
    if not value or Path(value).exists():
        return None
    name, _, version = value.partition("@")
    if not is_config_name(name) or (version and not version.isdigit()):
        return None
    return name, int(version) if version else None


def _run(main: Callable[[], Awaitable[object]]) -> NoReturn:
    """Run a command and leave with its exit code.

    The process ends with `os._exit`: temporalio's core threads can still call into Python while
    the interpreter finalizes, which intermittently aborts a CLI that has already done its work.
    """
    code = 0
    try:
        asyncio.run(main())
    except Exit as exc:
        err.print(f"[red]error:[/red] {_literal(str(exc))}", markup=True)
        code = exc.code
    except ManifestError as exc:
        err.print(f"[red]config error:[/red] {_literal(str(exc))}", markup=True)
        code = 2
    except ValueError as exc:  # refused by the client: unknown agent, no such pending call...
        err.print(f"[red]error:[/red] {_literal(str(exc))}", markup=True)
        code = 2
    except RPCError as exc:  # unknown session, rejected update, missing search attribute...
        err.print(f"[red]error:[/red] {_literal(exc.message)}", markup=True)
        code = 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _client(
    address: str | None, tenant: str, *, start_local: bool = False, task_queue: str = TASK_QUEUE
) -> WolfClient:
    """Connect; with no address configured and nothing listening locally, bring up the local stack."""
    target = address or local_stack.local_address()
    if start_local and address is None:
        if not local_stack.listening(target):
            err.print(
                f"[yellow]no Temporal server on {target}: starting the embedded local stack...[/yellow]",
                markup=True,
            )
        status = local_stack.up()  # idempotent: also makes sure the local worker runs
        if "server" in status.started:
            err.print(f"server {status.address}, UI {status.ui}, worker pid {status.worker_pid}")
        if status.changed:
            err.print(f"restarted the local worker: {', '.join(status.changed)} changed since it started")
    try:
        return await WolfClient.connect(target, tenant=tenant, task_queue=task_queue)
    except RuntimeError as exc:
        raise Exit(3, f"cannot reach Temporal at {target}: {exc}") from None


def _check_agent(manifest: Manifest, agent: str) -> None:
    if agent not in manifest.agents and agent not in manifest.teams:
        known = ", ".join(sorted([*manifest.agents, *manifest.teams]))
        raise Exit(2, f"unknown agent {agent!r} (agents and teams in this config: {known})")


async def _follow(wolf: WolfClient, session_id: str, as_json: bool, until_turn_end: bool) -> None:
    """Stream the session's events (`live_view`); on Ctrl-C say how to reattach."""
    if as_json:
        err.print(inert(f"session {session_id}"))
    else:
        out.print(Text("session ", "dim") + Text(inert(session_id), "bold"))
    try:
        await live_view.follow(
            wolf.events(session_id), out, session_id, as_json=as_json, until_turn_end=until_turn_end
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        tenant = "" if wolf.tenant == "default" else f" --tenant {wolf.tenant}"
        err.print(inert(f"detached; the session keeps running. Reattach: wolf follow {session_id}{tenant}"))
        raise


@app.command()
def submit(
    prompt: str,
    agent: Agent = "assistant",
    config: ConfigOpt = None,
    session: Annotated[str | None, typer.Option("--session", help="Session id (default: random).")] = None,
    tenant: Tenant = "default",
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream the events.")] = False,
    wait: Annotated[bool, typer.Option("--wait", "-w", help="Block until the result.")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the session open after its turn.")] = False,
    pin: Annotated[
        bool, typer.Option("--pin", help="Stay on the registry config's current version.")
    ] = False,
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Start a background task; prints its session id (last line)."""

    async def main() -> None:
        source = _config_source(config)
        if isinstance(source, Manifest):
            _check_agent(source, agent)
        wolf = await _client(address, tenant, start_local=True)
        sid = await wolf.submit(
            prompt, agent, session_id=session, keep=keep, pinned=pin, **_source_args(source)
        )
        if follow:
            await _follow(wolf, sid, as_json, until_turn_end=keep)
        if wait or follow:
            await _print_result(wolf, sid, as_json, quiet=follow)
        out.print(json.dumps({"session_id": sid}) if as_json else sid)

    _run(main)


def _source_args(source: Manifest | str) -> dict[str, Any]:
    return {"config_name": source} if isinstance(source, str) else {"manifest": source}


async def _print_result(wolf: WolfClient, sid: str, as_json: bool, quiet: bool = False) -> None:
    try:
        result = await wolf.result(sid)
    except WorkflowFailureError as exc:
        raise Exit(1, f"session {sid} failed: {exc.cause}") from None
    if as_json and not quiet:
        out.print(result.model_dump_json(), soft_wrap=True)
    elif not quiet:
        out.print(inert(result.output or ""))
    if result.outcome not in (None, "completed"):
        raise Exit(1, f"session {sid} ended: {result.outcome}")


@app.command()
def follow(
    session_id: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False
) -> None:
    """Live stream of a session's events; Ctrl-C detaches and leaves the session running."""

    async def main() -> None:
        await _follow(await _client(address, tenant), session_id, as_json, until_turn_end=False)

    _run(main)


@app.command()
def result(
    session_id: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False
) -> None:
    """Wait for a session's result and print it."""

    async def main() -> None:
        await _print_result(await _client(address, tenant), session_id, as_json)

    _run(main)


@app.command()
def status(
    session_id: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False
) -> None:
    """A session's state, current turn and counters."""

    async def main() -> None:
        st = await (await _client(address, tenant)).status(session_id)
        if as_json:
            out.print(st.model_dump_json(), soft_wrap=True)
        else:
            c = st.counters
            out.print(
                inert(
                    f"{st.session_id} [{st.agent}] {st.state}  turns={c.turns} steps={c.steps} "
                    f"tokens={c.usage.total_tokens} tool_calls={c.usage.tool_calls} last={st.last_outcome}"
                )
            )

    _run(main)


@app.command()
def steer(
    session_id: str, message: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False
) -> None:
    """Inject a user message before the running turn's next model request."""
    _run(lambda: _signal(address, tenant, session_id, as_json, lambda w: w.steer(session_id, message)))


@app.command()
def interrupt(
    session_id: str,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Cancel the running turn; the session goes idle with a valid transcript."""
    _run(lambda: _signal(address, tenant, session_id, as_json, lambda w: w.interrupt(session_id, reason)))


@app.command()
def approve(
    session_id: str,
    call_id: str,
    always: Annotated[
        bool, typer.Option("--always", help="Allow this tool for the rest of the session.")
    ] = False,
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Let a tool call that waits for approval run."""
    _run(
        lambda: _signal(
            address, tenant, session_id, as_json, lambda w: w.approve(session_id, call_id, always=always)
        )
    )


@app.command()
def deny(
    session_id: str,
    call_id: str,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Refuse a tool call that waits for approval; the model sees the refusal."""
    _run(lambda: _signal(address, tenant, session_id, as_json, lambda w: w.deny(session_id, call_id, reason)))


@app.command()
def close(
    session_id: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False
) -> None:
    """Finish a session."""
    _run(lambda: _signal(address, tenant, session_id, as_json, lambda w: w.close(session_id)))


async def _signal(
    address: str | None,
    tenant: str,
    session_id: str,
    as_json: bool,
    send: Callable[[WolfClient], Awaitable[None]],
) -> None:
    await send(await _client(address, tenant))
    if as_json:
        out.print(json.dumps({"ok": True, "session_id": session_id}))


@app.command()
def worker(
    address: Address = None,
    namespace: Annotated[str | None, typer.Option("--namespace", envvar="TEMPORAL_NAMESPACE")] = None,
    task_queue: Annotated[str, typer.Option("--task-queue")] = TASK_QUEUE,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant", help="Serve only this tenant, in its namespace when WOLF_TENANT_NAMESPACES maps one."
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy", help="Worker policy file (default: $WOLF_POLICY, else $WOLF_HOME/policy.yaml)."
        ),
    ] = None,
) -> None:
    """Run a worker in the foreground (for any Temporal cluster); a worker serves one namespace."""
    from agentwolf.worker.__main__ import configure_logging, serve

    configure_logging()

    async def main() -> None:
        if tenant:
            check_tenant(tenant)
        await serve(
            address,
            (namespace_for(tenant) if tenant else None) or namespace,
            task_queue,
            tenant=tenant,
            policy=policy,
        )

    _run(main)


@app.command()
def up(as_json: Json = False) -> None:
    """Start the embedded local stack (dev server on SQLite + a worker) in the background."""
    st = local_stack.up()
    info: dict[str, Any] = {
        "address": st.address,
        "ui": st.ui,
        "server_pid": st.server_pid,
        "worker_pid": st.worker_pid,
        "started": st.started,
        "data": str(local_stack.data_dir()),
    }
    if st.changed:
        info["restarted_worker_because"] = f"{', '.join(st.changed)} changed since it started"
    out.print(json.dumps(info) if as_json else "\n".join(f"{k}: {v}" for k, v in info.items()))


@app.command()
def down(as_json: Json = False) -> None:
    """Stop the embedded local stack."""
    stopped = local_stack.down()
    out.print(
        json.dumps({"stopped": stopped})
        if as_json
        else f"stopped: {', '.join(stopped) or 'nothing was running'}"
    )


config_app = typer.Typer(
    help="Check and inspect manifests; push, list and roll back registry configs.", no_args_is_help=True
)
app.add_typer(config_app, name="config")


@app.command()
def commands(
    agent: Agent = "assistant",
    config: ConfigOpt = None,
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """An agent's slash commands (its skills, its MCP servers' prompts) and skills, looked up here."""

    async def main() -> None:
        source = _config_source(config)
        if isinstance(source, str):
            source = (await (await _client(address, tenant)).config_get(source)).manifest
        _check_agent(source, agent)
        hosts = HostRegistry(host_idle_timeout=float("inf"))
        try:
            host = hosts.ensure(source, tenant)
            scope = await host.scope(source, agent, "wolf-commands", "-")
            listed = await host.registry.commands(scope)
            manager = host.registry.skills(scope)
            skills = await manager.list_skills()
            problems = [*manager.shadowed, *manager.problems]
            problems += [p for root in host.skill_roots.values() for p in root.problems]
        finally:
            await hosts.close()
        if as_json:
            out.print(
                json.dumps(
                    {
                        "commands": [
                            {"name": f"/{c.name}", "origin": c.origin, "description": c.description}
                            for c in listed
                        ],
                        "skills": [
                            {"name": s.name, "origin": s.origin, "uri": s.uri, "description": s.description}
                            for s in skills
                        ],
                        "problems": problems,
                    }
                )
            )
            return
        table = Table("command", "from", "description", box=None)
        for command in listed:
            table.add_row(inert(f"/{command.name}"), inert(command.origin), inert(command.description))
        out.print(table if listed else f"{agent} has no slash commands")
        if skills:
            out.print(inert(f"skills: {', '.join(s.name for s in skills)}"))
        for problem in problems:
            err.print(f"[yellow]warning:[/yellow] {_literal(problem)}", markup=True)

    _run(main)


@config_app.command("validate")
def config_validate(
    file: Path,
    tenant: Tenant = "default",
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Worker policy to check against (default: $WOLF_POLICY, else $WOLF_HOME/policy.yaml).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Check a manifest; errors name the file, line and key path, and what the worker policy would
    refuse for the tenant (placeholders, commands, env) is listed (exit 2 either way)."""

    async def main() -> None:
        manifest = load_manifest(file)
        worker_policy = load_policy(policy)
        refused = worker_policy.problems(manifest, check_tenant(tenant))
        info = {
            "ok": not refused,
            "agents": sorted(manifest.agents),
            "identity": manifest.identity,
            "refused": refused,
        }
        if as_json:
            out.print(json.dumps(info))
        elif refused:
            err.print(inert(f"{file}: valid, but the worker policy ({worker_policy.source}) refuses:"))
            for problem in refused:
                err.print(inert(f"  {problem}"))
        else:
            out.print(f"ok: agents {', '.join(info['agents']) or 'none'}; identity {manifest.identity}")
        if refused:
            raise Exit(2, f"{len(refused)} thing(s) in {file} would be refused by the worker policy")

    _run(main)


@config_app.command("show")
def config_show(
    target: Annotated[str | None, typer.Argument(help="FILE, or NAME[@VERSION] from the registry.")] = None,
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """The manifest with placeholders as written (never resolved) and literal secrets masked."""

    async def main() -> None:
        ref = _registry_ref(target)
        if ref is None:
            view = masked(load_manifest(_config_path(Path(target) if target else None)))
            out.print(
                json.dumps(view, indent=2)
                if as_json
                else inert(yaml.safe_dump(view, sort_keys=False).rstrip())
            )
            return
        found = await (await _client(address, tenant)).config_get(*ref)
        info = found.model_dump(mode="json", exclude={"manifest"})
        view = masked(found.manifest)
        if as_json:
            out.print(json.dumps({**info, "manifest": view}, indent=2))
        else:
            out.print(inert(f"# {found.name} v{found.version} ({_describe(found)})"))
            out.print(inert(yaml.safe_dump(view, sort_keys=False).rstrip()))

    _run(main)


def _describe(info: VersionInfo) -> str:
    note = f", {info.note}" if info.note else ""
    return f"identity {info.identity}, pushed {info.pushed_at:%Y-%m-%d %H:%M:%S}{note}"


def _print_push(result: PushResult, as_json: bool) -> None:
    if as_json:
        out.print(result.model_dump_json())
    elif result.created:
        out.print(
            inert(
                f"{result.name} v{result.version} (identity {result.identity}); running sessions take it at their next turn"
            )
        )
    else:
        out.print(inert(f"unchanged: {result.name} v{result.version} already has this content"))


@config_app.command("push")
def config_push(
    name: str,
    file: Path,
    note: Annotated[str, typer.Option("--note", help="Why this version (shown by history).")] = "",
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Push FILE as the next version of registry config NAME (identical content: no new version)."""

    async def main() -> None:
        manifest = pushable(file)  # file:line errors before anything is sent
        wolf = await _client(address, tenant, start_local=True)
        _print_push(await wolf.config_push(check_config_name(name), manifest, note=note), as_json)

    _run(main)


@config_app.command("rollback")
def config_rollback(
    name: str,
    version: int,
    note: Annotated[str, typer.Option("--note")] = "",
    tenant: Tenant = "default",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Push a new version of NAME with VERSION's content (versions only go up)."""

    async def main() -> None:
        _print_push(await (await _client(address, tenant)).config_rollback(name, version, note=note), as_json)

    _run(main)


@config_app.command("list")
def config_list(tenant: Tenant = "default", address: Address = None, as_json: Json = False) -> None:
    """The tenant's registry configs and their current versions."""

    async def main() -> None:
        configs = await (await _client(address, tenant)).config_list()
        if as_json:
            out.print(json.dumps([c.model_dump(mode="json") for c in configs]))
            return
        table = Table("config", "version", "identity", "pushed", "note", box=None)
        for c in configs:
            table.add_row(
                inert(c.name), str(c.version), c.identity, f"{c.pushed_at:%Y-%m-%d %H:%M:%S}", inert(c.note)
            )
        out.print(table)

    _run(main)


@config_app.command("history")
def config_history(
    name: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False
) -> None:
    """Every version of NAME: identity, when, note, and how many running sessions were told."""

    async def main() -> None:
        versions = await (await _client(address, tenant)).config_history(name)
        if as_json:
            out.print(json.dumps([v.model_dump(mode="json") for v in versions]))
            return
        table = Table("version", "identity", "pushed", "sessions told", "note", box=None)
        for v in versions:
            told = "" if v.notified is None else str(v.notified)
            table.add_row(str(v.version), v.identity, f"{v.pushed_at:%Y-%m-%d %H:%M:%S}", told, inert(v.note))
        out.print(table)

    _run(main)


payloads_app = typer.Typer(
    help="The filesystem payload store (WOLF_PAYLOAD_STORE): retention.", no_args_is_help=True
)
app.add_typer(payloads_app, name="payloads")


@payloads_app.command("gc")
def payloads_gc(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", help="Only payloads stored longer ago than this: 7d, 12h, 30m, 45s, 2w."
        ),
    ] = "7d",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be removed; remove nothing.")
    ] = False,
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Remove stored payloads older than --older-than that no running workflow (any namespace) references."""

    async def main() -> None:
        age = parse_duration(older_than)
        root = filesystem_root()
        if root is None:
            raise Exit(
                2,
                f"payload store {store_location()!r} is not a folder: wolf payloads gc collects only the filesystem "
                "store; give an s3:// or gs:// bucket a lifecycle rule that expires objects older than your sessions' retention",
            )
        wolf = await _client(address, "default")
        report = await collect_garbage(wolf.client, root, age, dry_run=dry_run)
        if as_json:
            out.print(report.model_dump_json())
            return
        verb = "would remove" if dry_run else "removed"
        out.print(
            f"{verb} {len(report.removed)} payloads ({report.removed_bytes:,} bytes) older than {older_than} from {root}"
        )
        out.print(
            f"kept {report.kept_referenced} referenced by running workflows ({report.kept_referenced_bytes:,} bytes) "
            f"and {report.kept_young} younger than {older_than} ({report.kept_young_bytes:,} bytes); "
            f"searched {report.running_workflows} running workflows"
        )

    _run(main)


@app.command("list")
def list_sessions(
    state: Annotated[
        str | None, typer.Option("--state", help="idle, running, waiting_approval, done")
    ] = None,
    agent: Annotated[str | None, typer.Option("--agent", "-a")] = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help="Registry config name.")] = None,
    tenant: Tenant = "default",
    limit: Annotated[int, typer.Option("--limit")] = 50,
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Sessions of a tenant, newest first (Temporal visibility)."""

    async def main() -> None:
        wolf = await _client(address, tenant)
        sessions = await wolf.list_sessions(state=state, agent=agent, config=config, limit=limit)
        if as_json:
            out.print(json.dumps([s.model_dump(mode="json") for s in sessions]))
            return
        table = Table("session", "agent", "state", "status", "parent", "config", "started", box=None)
        for s in sessions:
            started = s.started.strftime("%Y-%m-%d %H:%M:%S") if s.started else ""
            row = (
                s.session_id,
                s.agent or "",
                s.state or "",
                s.status,
                s.parent or "",
                s.config or "",
                started,
            )
            table.add_row(*map(inert, row))
        out.print(table)

    _run(main)


@app.command()
def chat(
    agent: Agent = "assistant",
    config: ConfigOpt = None,
    session: Annotated[str | None, typer.Option("--session", help="Attach to an existing session.")] = None,
    tenant: Tenant = "default",
    address: Address = None,
) -> None:
    """Interactive multi-turn session: Ctrl-C interrupts the running turn (twice exits), /exit leaves."""

    from agentwolf.client import chat as chat_ui  # prompt_toolkit: only for this command

    async def main() -> None:
        wolf = await _client(address, tenant, start_local=True)
        if session:
            sid, offset = session, await wolf.event_offset(session)
        else:
            source = _config_source(config)
            if isinstance(source, Manifest):
                _check_agent(source, agent)
            sid, offset = await wolf.start_session(agent, **_source_args(source)), 0
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            try:
                await chat_ui.run_lines(wolf, sid, offset, out, err)
            finally:
                if not session:
                    await wolf.close(sid)
            out.print(sid)
            return
        out.print(
            Text("session ", "dim")
            + Text(inert(sid), "bold")
            + Text(" (/help, /exit; Tab completes commands)", "dim")
        )
        running = False
        if session:
            for line in chat_ui.transcript_lines(await wolf.transcript(sid)):
                out.print(line)
            running = (await wolf.status(sid)).state in ("running", "waiting_approval")
        try:
            await chat_ui.Chat(wolf, sid, err).run(offset, running)
        finally:
            if not session:
                await wolf.close(sid)
        out.print(sid)

    _run(main)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (non-loopback needs API keys).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8088,
    config: ConfigOpt = None,
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant of --no-auth requests.")] = "default",
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Serve without API keys (loopback only).")
    ] = False,
    policy: Annotated[str | None, typer.Option("--policy", help="Policy file with `api_keys:`.")] = None,
    task_queue: Annotated[str, typer.Option("--task-queue", help="The workers' task queue.")] = TASK_QUEUE,
    address: Address = None,
) -> None:
    """Serve agents over HTTP: OpenAI-compatible /v1 and AG-UI /agui (API keys from WOLF_API_KEYS or the policy)."""
    from agentwolf.config.policy import load_policy
    from agentwolf.protocols.auth import ApiKeys

    try:
        from agentwolf.protocols.main import BindingRefused, check_binding
        from agentwolf.protocols.main import serve as run_server
    except ImportError as exc:
        err.print(
            f"error: wolf serve needs its extra: pip install 'agentwolf[serve]' ({exc.name} is missing)"
        )
        raise typer.Exit(2) from None

    async def main() -> None:
        try:
            keys = ApiKeys.load(load_policy(policy).api_keys)
            check_binding(host, keys, no_auth)
        except (ValueError, BindingRefused) as exc:
            raise Exit(2, str(exc)) from None
        source = _config_source(config)
        wolf = await _client(address, tenant, start_local=True, task_queue=task_queue)
        err.print(f"serving on http://{host}:{port} (OpenAI: /v1, AG-UI: /agui/AGENT); Ctrl-C stops")
        await run_server(wolf, source, keys, host=host, port=port, no_auth=no_auth)

    _run(main)


@app.command()
def dev() -> None:
    """The embedded local stack in the foreground until Ctrl-C."""
    st = local_stack.up()
    out.print(f"server {st.address}, UI {st.ui}, worker pid {st.worker_pid}; Ctrl-C stops both")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        out.print(f"stopped: {', '.join(local_stack.down()) or 'nothing'}")


if __name__ == "__main__":
    app(sys.argv[1:])
