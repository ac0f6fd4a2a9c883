"""The job half of `WolfClient`: run a manifest's job and get its typed result.

A job run is a background session started with the job's rendered prompt; with `output`, the
session's answer is a JSON object the workflow validated against that schema before it ended
(`SessionResult.structured`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio.client import WorkflowFailureError

from agentwolf.client.parts import ClientCore
from agentwolf.workflows.types import SessionResult

if TYPE_CHECKING:
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.session_input import SessionInput


class JobFailed(RuntimeError):
    """A job run that ended without a valid result (failed, stopped by a limit, interrupted)."""


class JobResult(BaseModel):
    session_id: str
    outcome: str | None
    output: dict[str, Any] | str | None
    """The validated object for a job with `output`, else the answer's text."""


def job_output(result: SessionResult) -> dict[str, Any] | str | None:
    """The run's result: its validated object (a job with `output`), else its text; JobFailed when
    the run did not complete."""
    if result.outcome != "completed":
        raise JobFailed(f"job run {result.session_id} ended {result.outcome}: {result.output}")
    return result.structured if result.structured is not None else result.output


class JobMethods(ClientCore):
    """Jobs of a manifest or registry config, run as background sessions of this client's tenant."""

    async def _job_session(
        self,
        job: str,
        variables: dict[str, object],
        manifest: Manifest | str | Path | None,
        config_name: str | None,
    ) -> SessionInput:
        """The session a run of `job` starts (its id left to the caller): variables are bound here, so
        an unknown job or a bad variable is an error before anything starts."""
        from agentwolf.config.loading import load_manifest
        from agentwolf.config.manifest import Manifest
        from agentwolf.workflows.schedule import job_session  # pydantic-ai: only when a job runs

        if (manifest is None) == (config_name is None):
            raise ValueError("a job needs a manifest or a registry config name (one of them)")
        version = None
        if config_name is not None:
            current = await self.config_get(config_name)
            manifest, version = current.manifest, current.version
        elif not isinstance(manifest, Manifest):
            manifest = load_manifest(manifest)  # type: ignore[arg-type]
        assert isinstance(manifest, Manifest)
        return job_session(
            manifest, job, variables, tenant=self.tenant, config_name=config_name, version=version
        )

    async def start_job(
        self,
        job: str,
        variables: dict[str, object] | None = None,
        manifest: Manifest | str | Path | None = None,
        *,
        config_name: str | None = None,
        session_id: str | None = None,
        trigger: str | None = None,
        unique: bool = False,
    ) -> str:
        """Start a run of `job`; returns its session id (follow it like any session). `trigger`: the
        webhook that started it; `unique`: a `session_id` used before is refused (see start_session)."""
        session = await self._job_session(job, dict(variables or {}), manifest, config_name)
        return await self.start_session(
            session.agent,
            None if config_name else session.manifest,
            config_name=config_name,
            session_id=session_id,
            prompt=session.prompt,
            background=True,
            output_schema=session.output_schema,
            trigger=trigger,
            unique=unique,
        )

    async def run_job(
        self,
        job: str,
        variables: dict[str, object] | None = None,
        manifest: Manifest | str | Path | None = None,
        *,
        config_name: str | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any] | str | None:
        """Run `job` and return its result: the validated object when it has `output`, else its text."""
        session_id = await self.start_job(
            job, variables, manifest, config_name=config_name, session_id=session_id
        )
        return (await self.job_result(session_id)).output

    async def job_result(self, session_id: str) -> JobResult:
        """A job run's result (waits for it to finish): JobFailed when it has no valid one."""
        try:
            result = await self.result(session_id)
        except WorkflowFailureError as exc:
            raise JobFailed(f"job run {session_id} failed: {exc.cause}") from None
        return JobResult(session_id=session_id, outcome=result.outcome, output=job_output(result))
