"""Temporal's connection options, as every Temporal tool reads them (temporalio.envconfig): flags win
over the profile (`--profile`, else TEMPORAL_PROFILE, from TEMPORAL_CONFIG_FILE or the default file)
and the environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS...).

Only when none of them names a server does a verb use the embedded local stack, and start it when
the verb needs one."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.console import Exit, err
from agentwolf.defaults import TASK_QUEUE

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient

_PANEL = "Temporal connection"


def _option(name: str, annotation: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


CONNECTION_OPTIONS = [
    _option(
        "address",
        Annotated[
            str | None,
            typer.Option(
                "--address",
                metavar="HOST:PORT",
                help="Temporal frontend HOST:PORT (else the profile's).",
                rich_help_panel=_PANEL,
            ),
        ],
    ),
    _option(
        "namespace",
        Annotated[
            str | None,
            typer.Option(
                "--namespace", "-n", metavar="NAMESPACE", help="Temporal namespace.", rich_help_panel=_PANEL
            ),
        ],
    ),
    _option(
        "profile",
        Annotated[
            str | None,
            typer.Option(
                "--profile",
                metavar="PROFILE",
                help="Profile in the Temporal config file (TOML).",
                rich_help_panel=_PANEL,
            ),
        ],
    ),
    _option(
        "tls",
        Annotated[
            bool | None,
            typer.Option(
                "--tls/--no-tls", help="Connect with TLS.", show_default=False, rich_help_panel=_PANEL
            ),
        ],
    ),
    _option(
        "api_key",
        Annotated[
            str | None,
            typer.Option(
                "--api-key",
                metavar="KEY",
                help="API key (implies TLS).",
                show_default=False,
                rich_help_panel=_PANEL,
            ),
        ],
    ),
]


@dataclass(frozen=True)
class Connection:
    """The connection options a verb was given."""

    address: str | None = None
    namespace: str | None = None
    profile: str | None = None
    tls: bool | None = None
    api_key: str | None = None

    def configured_address(self) -> str | None:
        """The server the flags, profile or environment name; None: the embedded local stack's."""
        from agentwolf.connection import connect_config

        try:
            config = connect_config(
                self.address, self.namespace, self.profile, api_key=self.api_key, tls=self.tls
            )
        except (RuntimeError, OSError) as exc:  # the bridge's ConfigError: no such profile, bad file
            raise Exit(2, f"cannot load the Temporal client config: {exc}") from None
        named = config.get("target_host")
        if named is None and (self.profile or os.environ.get("TEMPORAL_PROFILE")):
            return "localhost:7233"  # a profile without an address means Temporal's default, not ours
        return named

    async def client(
        self, tenant: str, *, start_local: bool = False, task_queue: str | None = None
    ) -> WolfClient:
        """Connect; with no server configured and `start_local`, bring the embedded local stack up.
        Work goes to `task_queue`, else $WOLF_TASK_QUEUE (workers started with `--task-queue`), else
        the default queue."""
        from agentwolf.client.wolf_client import WolfClient

        task_queue = task_queue or os.environ.get("WOLF_TASK_QUEUE") or TASK_QUEUE

        target = self.configured_address()
        if target is None:
            from agentwolf.ops import local_stack

            target = local_stack.local_address()
            if start_local:
                if not local_stack.listening(target):
                    note = f"no Temporal server on {target}: starting the embedded local stack..."
                    err().print(f"[yellow]{note}[/yellow]", markup=True)
                # Idempotent: also makes sure the local worker runs (and waits until it polls), but
                # never restarts it: this shell's variables may lack the running worker's credentials.
                status = await local_stack.start()
                if "server" in status.started:
                    err().print(f"server {status.address}, UI {status.ui}, worker pid {status.worker_pid}")
                if status.kept_env:
                    err().print(f"note: {kept_env_note(status.kept_env)}")
        return await WolfClient.connect(  # TemporalUnreachable: said in words by common.run
            target,
            namespace=self.namespace,
            profile=self.profile,
            api_key=self.api_key,
            tls=self.tls,
            tenant=tenant,
            task_queue=task_queue,
        )


def kept_env_note(names: list[str]) -> str:
    """What to say when this shell's variables differ from those the running local worker uses."""
    return (
        f"the local worker keeps the {', '.join(names)} it started with (this shell's differ);"
        " `wolf up --restart` restarts it with this shell's"
    )
