"""`wolf`: submit, follow, steer and interrupt agent sessions; run workers; the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 server unreachable.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from agentwolf.client import local_stack
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.loading import ManifestError, load_manifest
from agentwolf.worker.main import TASK_QUEUE
from agentwolf.workflows.types import Event

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False)
out = Console(no_color=bool(os.environ.get("NO_COLOR")) or None, highlight=False, soft_wrap=True)
err = Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")) or None, highlight=False)
T = TypeVar("T")

BUNDLED_CONFIG = Path(__file__).resolve().parents[2] / "config" / "wolf.yaml"

Agent = Annotated[str, typer.Option("--agent", "-a", help="Agent name from the config.")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Manifest file.")]
Tenant = Annotated[str, typer.Option("--tenant", help="Tenant owning the session.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
Address = Annotated[str | None, typer.Option("--address", envvar="TEMPORAL_ADDRESS", help="Temporal frontend.")]


class Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _config_path(config: Path | None) -> Path:
    if config is not None:
        return config
    if env := os.environ.get("WOLF_CONFIG"):
        return Path(env)
    return Path("wolf.yaml") if Path("wolf.yaml").exists() else BUNDLED_CONFIG


def _run(main: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(main())
    except Exit as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(exc.code) from None
    except ManifestError as exc:
        err.print(f"[red]config error:[/red]\n{exc}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


async def _client(address: str | None, tenant: str, *, start_local: bool = False) -> WolfClient:
    """Connect; with no address configured and nothing listening locally, bring up the local stack."""
    target = address or local_stack.DEFAULT_ADDRESS
    if start_local and address is None and not local_stack.listening(target):
        err.print("[yellow]no Temporal server on localhost:7233: starting the embedded local stack...[/yellow]")
        status = local_stack.up()
        err.print(f"server {status.address}, UI {status.ui}, worker pid {status.worker_pid}")
    elif start_local and address is None:
        local_stack.up()  # make sure the local worker runs too (idempotent)
    try:
        return await WolfClient.connect(address, tenant=tenant, task_queue=TASK_QUEUE)
    except RuntimeError as exc:
        raise Exit(3, f"cannot reach Temporal at {target}: {exc}") from None


def _print_event(event: Event, as_json: bool) -> None:
    if as_json:
        out.print(event.model_dump_json(exclude_none=True), soft_wrap=True)
        return
    k = event.kind
    if k == "turn_started":
        out.print(f"[bold]> {event.text}[/bold]")
    elif k == "model_text":
        out.print(event.text or "")
    elif k == "tool_call_started":
        out.print(f"[cyan]  -> {event.tool}({json.dumps(event.args)})[/cyan]")
    elif k == "tool_call_finished":
        colour = "green" if event.outcome == "success" else "red"
        result = (event.text or "").replace("\n", " ")[:120]
        out.print(f"[{colour}]  <- {event.tool} {event.outcome} in {event.duration_ms} ms: {result}[/{colour}]")
    elif k == "turn_finished":
        usage = event.usage
        tokens = f", {usage.total_tokens} tokens, {usage.tool_calls} tool calls" if usage else ""
        out.print(f"[dim]turn {event.outcome}{tokens}[/dim]")
    elif k in ("error", "limit_reached", "interrupted"):
        out.print(f"[red]{k}: {event.text}[/red]")
    else:
        out.print(f"[dim]{k}: {event.text or ''}[/dim]")


async def _follow(wolf: WolfClient, session_id: str, as_json: bool, until_turn_end: bool) -> None:
    async for _, event in wolf.events(session_id):
        _print_event(event, as_json)
        if event.kind == "session_closed" or (until_turn_end and event.kind == "turn_finished"):
            return


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
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Start a background task; prints its session id (last line)."""

    async def main() -> None:
        manifest = load_manifest(_config_path(config))
        if agent not in manifest.agents:
            raise Exit(2, f"unknown agent {agent!r} (agents in this config: {', '.join(sorted(manifest.agents))})")
        wolf = await _client(address, tenant, start_local=True)
        sid = await wolf.submit(prompt, agent, manifest, session_id=session, keep=keep)
        if follow:
            await _follow(wolf, sid, as_json, until_turn_end=keep)
        if wait or follow:
            await _print_result(wolf, sid, as_json, quiet=follow)
        out.print(json.dumps({"session_id": sid}) if as_json else sid)

    _run(main)


async def _print_result(wolf: WolfClient, sid: str, as_json: bool, quiet: bool = False) -> None:
    try:
        result = await wolf.result(sid)
    except WorkflowFailureError as exc:
        raise Exit(1, f"session {sid} failed: {exc.cause}") from None
    if as_json and not quiet:
        out.print(result.model_dump_json(), soft_wrap=True)
    elif not quiet:
        out.print(result.output or "")
    if result.outcome not in (None, "completed"):
        raise Exit(1, f"session {sid} ended: {result.outcome}")


@app.command()
def follow(session_id: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False) -> None:
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
def status(session_id: str, tenant: Tenant = "default", address: Address = None, as_json: Json = False) -> None:
    """A session's state, current turn and counters."""

    async def main() -> None:
        st = await _rpc((await _client(address, tenant)).status(session_id))
        if as_json:
            out.print(st.model_dump_json(), soft_wrap=True)
        else:
            c = st.counters
            out.print(
                f"{st.session_id} [{st.agent}] {st.state}  turns={c.turns} steps={c.steps} "
                f"tokens={c.usage.total_tokens} tool_calls={c.usage.tool_calls} last={st.last_outcome}"
            )

    _run(main)


@app.command()
def steer(session_id: str, message: str, tenant: Tenant = "default", address: Address = None) -> None:
    """Inject a user message before the running turn's next model request."""
    _run(lambda: _signal(address, tenant, lambda w: w.steer(session_id, message)))


@app.command()
def interrupt(
    session_id: str,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    tenant: Tenant = "default",
    address: Address = None,
) -> None:
    """Cancel the running turn; the session goes idle with a valid transcript."""
    _run(lambda: _signal(address, tenant, lambda w: w.interrupt(session_id, reason)))


@app.command()
def close(session_id: str, tenant: Tenant = "default", address: Address = None) -> None:
    """Finish a session."""
    _run(lambda: _signal(address, tenant, lambda w: w.close(session_id)))


async def _signal(address: str | None, tenant: str, send: Callable[[WolfClient], Awaitable[None]]) -> None:
    await _rpc(send(await _client(address, tenant)))


async def _rpc(call: Awaitable[T]) -> T:
    try:
        return await call
    except RPCError as exc:
        raise Exit(2, exc.message) from None


@app.command()
def worker(
    address: Address = None,
    namespace: Annotated[str | None, typer.Option("--namespace", envvar="TEMPORAL_NAMESPACE")] = None,
    task_queue: Annotated[str, typer.Option("--task-queue")] = TASK_QUEUE,
) -> None:
    """Run a worker in the foreground (for any Temporal cluster)."""
    import logging

    from agentwolf.worker.__main__ import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _run(lambda: serve(address, namespace, task_queue))


@app.command()
def up(as_json: Json = False) -> None:
    """Start the embedded local stack (dev server on SQLite + a worker) in the background."""
    st = local_stack.up()
    info: dict[str, Any] = {"address": st.address, "ui": st.ui, "server_pid": st.server_pid,
                            "worker_pid": st.worker_pid, "started": st.started, "data": str(local_stack.data_dir())}
    out.print(json.dumps(info) if as_json else "\n".join(f"{k}: {v}" for k, v in info.items()))


@app.command()
def down() -> None:
    """Stop the embedded local stack."""
    stopped = local_stack.down()
    out.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@app.command("validate")
def validate(config: Path) -> None:
    """Check a manifest; errors name the file, line and key path."""
    try:
        manifest = load_manifest(config)
    except ManifestError as exc:
        err.print(f"[red]config error:[/red]\n{exc}")
        raise typer.Exit(2) from None
    out.print(f"ok: {len(manifest.agents)} agents, identity {manifest.identity}")


if __name__ == "__main__":
    app(sys.argv[1:])
