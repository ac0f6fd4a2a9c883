"""`wolf.acp_home` and `wolf.acp_turn`: an external ACP agent's turn, on the worker host where its
process lives (a host-specific task queue), a step at a time: each step ends with the turn or with a
permission request that the workflow turns into a durable approval."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from acp import RequestError
from pydantic import ValidationError
from pydantic_ai.workspaces import LocalWorkspaceBackend
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.access import check_caller
from agentwolf.activities.session import SessionActivities
from agentwolf.activities.session_io import heartbeating
from agentwolf.config.manifest import AcpAgentConfig, McpServerConfig
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.hosts import workspaces
from agentwolf.hosts.acp_agents import AcpAgentGone, AcpModeRefused, AcpRun, agent_env, agent_home
from agentwolf.hosts.bubblewrap import SandboxUnavailable
from agentwolf.hosts.host import AgentHost
from agentwolf.isolation import unprivileged
from agentwolf.workflows.acp_types import AcpResume, AcpSession, AcpTurnInput, AcpTurnOutput
from agentwolf.workflows.contracts import LiveText

LOST_NOTE = (
    "(Your earlier state in this session was lost when the worker running you stopped. The conversation "
    "so far, as recorded:)\n{context}\n\n(Now, again:)\n{prompt}"
)


def home_queue(task_queue: str) -> str:
    """This host's own task queue: a worker restarted on the same host (`WOLF_HOST_ID`, else the host
    name) serves it again, so a turn waiting there finds its agent's files and sessions."""
    return f"{task_queue}@{os.environ.get('WOLF_HOST_ID') or socket.gethostname()}"


class AcpActivities:
    def __init__(self, sessions: SessionActivities) -> None:
        self.sessions = sessions

    @activity.defn(name="wolf.acp_home")
    async def home(self) -> str:
        """The queue of the host this runs on (the workflow records it as the agent's home)."""
        return home_queue(activity.info().task_queue)

    @activity.defn(name="wolf.acp_turn")
    async def turn(self, inp: AcpTurnInput) -> AcpTurnOutput:
        hosts = self.sessions.hosts
        check_caller(inp.ref.workflow_id, inp.ref.tenant, hosts.tenant)
        with hosts.serving(inp.ref.config_id, inp.ref.tenant):
            host = await self.sessions.host(inp.ref)
            config = hosts.manifests[inp.ref.config_id].agents[inp.agent].acp
            if config is None:
                raise ApplicationError(
                    f"{inp.agent} is not an ACP agent", type="ConfigError", non_retryable=True
                )
            return await self._turn(host, inp, config)

    async def _turn(self, host: AgentHost, inp: AcpTurnInput, config: AcpAgentConfig) -> AcpTurnOutput:
        workflow_id = inp.ref.workflow_id
        run, resumed = host.acp_runs.get(workflow_id), "live"
        if run is None or not run.alive:
            if run is not None:
                await run.close()
            run = host.acp_runs[workflow_id] = AcpRun(f"ACP agent {inp.agent}")
            run.workspace = await self._workspace(host, inp)
            resumed = await self._start(host, run, inp, config, inp.session or _left_by_last_attempt())
        elif inp.workspace is not None:
            await self._workspace(host, inp)  # restored if it went (a seed, a rewind)
        prompt = inp.prompt
        if resumed == "lost":
            prompt = LOST_NOTE.format(context=inp.context or "(nothing yet)", prompt=inp.prompt)
        attempt = activity.info().attempt

        def details() -> tuple[object, ...]:
            text, thinking = host.secrets.redact(run.text), host.secrets.redact(run.thinking)
            live = LiveText(turn_id=inp.turn_id, step=inp.step, attempt=attempt, text=text, thinking=thinking)
            return (live, *([AcpResume(session=run.session)] if run.session else []))

        try:
            out = await heartbeating(run.step(inp, prompt), details=details)
        except asyncio.CancelledError:  # an interrupt: session/cancel, and the agent ends its prompt
            await run.stop_prompt()
            raise
        except AcpAgentGone as exc:
            await run.close()
            host.acp_runs.pop(workflow_id, None)
            raise ApplicationError(host.secrets.redact(str(exc)), type="AcpAgentGone") from None
        return out.model_copy(update={"resumed": resumed, "text": host.secrets.redact(out.text)})

    async def _start(
        self,
        host: AgentHost,
        run: AcpRun,
        inp: AcpTurnInput,
        config: AcpAgentConfig,
        recorded: AcpSession | None,
    ) -> str:
        """Spawn the agent (under the worker policy, placeholders resolved here, in a home of its own)
        and attach its session in the manifest's mode."""
        try:
            program, args = host.secrets.policy.stdio_argv(
                McpServerConfig(command=config.command, args=config.args, env=config.env, cwd=config.cwd),
                host.manifest.host.allowed_commands,
            )
            command, argv = unprivileged(program, [host.secrets.resolve(a) for a in args])
            env = agent_env(
                agent_home(inp.ref.tenant, inp.agent),
                {k: host.secrets.resolve(v) for k, v in config.env.items()},
            )
        except (PolicyError, MissingVariable, FileNotFoundError) as exc:
            raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None
        cwd = os.path.abspath(os.path.expanduser(host.secrets.resolve(config.cwd or ".")))
        where = str(run.workspace[1]) if run.workspace else cwd  # the session works in its workspace
        try:
            loadable = await heartbeating(run.start(command, argv, env, cwd))
            return await heartbeating(
                run.open(recorded, where, loadable, config.mode, config.project_settings)
            )
        except AcpModeRefused as exc:
            await run.close()
            raise ApplicationError(
                host.secrets.redact(str(exc)), type="ConfigError", non_retryable=True
            ) from None
        except (OSError, RequestError, ConnectionError) as exc:
            await run.close()
            raise ApplicationError(
                host.secrets.redact(f"could not start the ACP agent {config.command!r}: {exc}"),
                type="AcpAgentGone",
            ) from None

    async def _workspace(
        self, host: AgentHost, inp: AcpTurnInput
    ) -> tuple[LocalWorkspaceBackend, Path] | None:
        """The session's workspace on this host, ready (restored from its last snapshot when missing,
        or when the call asks), for the agent's `fs/*` requests."""
        call = inp.workspace
        if call is None:
            return None
        root = workspaces.folder(inp.ref.tenant, inp.ref.workflow_id)
        try:
            ws = workspaces.backend(root, call.settings, self.sessions.hosts.policy.workspaces)
        except SandboxUnavailable as exc:
            raise ApplicationError(str(exc), type="SandboxUnavailable", non_retryable=True) from None
        async with workspaces.locked(root):
            await heartbeating(workspaces.prepare(call, root, ws, activity.client().data_converter))
        return ws, root


def _left_by_last_attempt() -> AcpSession | None:
    """The session a previous attempt made before its worker was lost (from its last heartbeat)."""
    details = activity.info().heartbeat_details
    try:
        return AcpResume.model_validate(details[1]).session if len(details) > 1 else None
    except ValidationError:
        return None
