"""What every verb shares: the option types, and `verb`, the one decorator that runs a
verb's coroutine, connects it to Temporal and turns failures into one sentence and an exit code.

Exit codes: 0 ok, 1 the session failed (or a bug: one line, the traceback only with WOLF_DEBUG=1),
2 usage or config error, 3 Temporal or a worker unreachable, 130 interrupted. Heavy modules
(temporalio, pydantic-ai, rich tables) are imported where a verb needs them, so `wolf --help` stays
fast."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, NoReturn

import typer

from agentwolf.cli.connection import CONNECTION_OPTIONS, Connection
from agentwolf.cli.console import Exit, err, fail, literal

Agent = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        metavar="AGENT",
        help="Agent name from the config (default: its only agent, else 'assistant').",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        metavar="NAME|FILE",
        help="Registry config NAME, or a manifest file (has a '.' or '/', or exists).",
    ),
]
Tenant = Annotated[
    str,
    typer.Option("--tenant", "-t", envvar="WOLF_TENANT", metavar="TENANT", help="Tenant owning the session."),
]
User = Annotated[
    str | None,
    typer.Option(
        "--user",
        "-u",
        envvar="WOLF_USER",
        metavar="USER",
        help="Who the session is for: whose long-term memory it uses (default: your login name).",
    ),
]
Json = Annotated[bool, typer.Option("--json", "-j", help="Machine-readable output: one JSON document.")]


def owner_of(user: str | None) -> str:
    """The owner a CLI session is started for: `--user`, else the login name."""
    import getpass

    return user or getpass.getuser()


JsonLines = Annotated[
    bool, typer.Option("--json", "-j", help="Machine-readable output: JSON Lines, one JSON object per event.")
]


def _exit_code(exc: BaseException) -> int:
    """Print what went wrong as a sentence (an exception's class name only for a bug); its exit code."""
    from temporalio.service import RPCError

    from agentwolf.cli.errors import explain_rpc, explain_unreachable
    from agentwolf.cli.extras import extra_of, install_hint
    from agentwolf.config.loading import ManifestError
    from agentwolf.connection import TemporalUnreachable
    from agentwolf.ops.local_stack import StackError
    from agentwolf.telemetry.tracing import TracingUnavailable

    if isinstance(exc, Exit):
        return fail(str(exc), exc.code)
    if isinstance(exc, TemporalUnreachable):  # any verb, `wolf worker` included
        if os.environ.get("WOLF_DEBUG") == "1":
            err().print(f"the connection library said: {exc.__cause__}")
        return fail(explain_unreachable(exc), 3)
    if isinstance(exc, StackError):
        return fail(str(exc), 3)
    if isinstance(exc, TracingUnavailable):
        return fail(str(exc), 2)
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        extra = extra_of(exc.name)
        fix = install_hint(extra) if extra else f"install the package that provides {exc.name}"
        return fail(f"this needs {exc.name}, which is not installed: {fix}", 2)
    if isinstance(exc, ManifestError):
        err().print(f"[red]config error:[/red] {literal(str(exc))}", markup=True)
        return 2
    if isinstance(exc, ValueError):  # refused by the client: unknown agent, no such pending call...
        return fail(str(exc), 2)
    if isinstance(exc, RPCError):  # unknown session, rejected update, missing search attribute...
        return fail(*explain_rpc(exc))
    if os.environ.get("WOLF_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc)
    return fail(f"unexpected {type(exc).__name__}: {exc} (WOLF_DEBUG=1 prints where)", 1)


def run(main: Callable[[], Awaitable[object]]) -> NoReturn:
    """Run a verb's coroutine and leave with its exit code.

    The process ends with `os._exit`: temporalio's core threads can still call into Python while
    the interpreter finalizes, which intermittently aborts a CLI that has already done its work.
    `os._exit` skips atexit, so the spans still queued (the verb's root span) are flushed first.
    """
    import asyncio

    from agentwolf.telemetry import tracing

    code = 0
    try:
        asyncio.run(main())  # type: ignore[arg-type]
    except (KeyboardInterrupt, asyncio.CancelledError):
        code = 130
    except Exception as exc:  # noqa: BLE001 - every failure leaves as one sentence
        code = _exit_code(exc)
    tracing.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def verb(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Make an async verb a Typer command that runs it with `run`.

    A parameter `conn: Connection` becomes Temporal's connection options (`--address`, `--namespace`,
    `--profile`, `--tls`, `--api-key`, read through temporalio.envconfig) and arrives as a `Connection`."""
    signature = inspect.signature(fn, eval_str=True)
    takes_conn = "conn" in signature.parameters
    params = [p for p in signature.parameters.values() if p.name != "conn"]
    if takes_conn:
        params += CONNECTION_OPTIONS

    @functools.wraps(fn)
    def command(**kwargs: Any) -> None:
        if takes_conn:
            kwargs["conn"] = Connection(**{p.name: kwargs.pop(p.name) for p in CONNECTION_OPTIONS})
        run(lambda: fn(**kwargs))

    del command.__wrapped__  # Typer reads the signature below, not the coroutine's
    command.__signature__ = signature.replace(parameters=params, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command
