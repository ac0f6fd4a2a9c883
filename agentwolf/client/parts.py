"""What WolfClient's method groups (configs.py, jobs.py, schedules.py, forks.py) use of the client
they are part of, declared once: every group subclasses `ClientCore` instead of importing WolfClient
(a cycle) or restating its signatures; mypy checks the real definitions against these."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from temporalio.client import Client, WorkflowHandle

if TYPE_CHECKING:
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.configs.config_registry import ConfigVersion
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import SessionResult


class ClientCore(Protocol):
    """One tenant's view of a Temporal namespace, as the groups borrow it from each other."""

    client: Client
    tenant: str
    task_queue: str
    """Where this client's sessions and schedule firings run."""
    _owned: set[str]
    """Workflow ids checked to be this tenant's sessions."""

    async def _handle(self, session_id: str) -> WorkflowHandle[Any, SessionResult]:
        """A handle on one of this tenant's sessions (another tenant's is refused)."""
        ...

    async def _launch(
        self,
        inp: SessionInput,
        *,
        prompt: str | None,
        trigger: str | None = None,
        unique: bool = False,
        owner: str | None = None,
        memo: dict[str, Any] | None = None,
    ) -> None:
        """Start the session workflow of `inp` (wolf_client.py)."""
        ...

    async def start_session(
        self,
        agent: str,
        manifest: Manifest | str | Path | None = None,
        *,
        config_name: str | None = None,
        session_id: str | None = None,
        prompt: str | None = None,
        background: bool = False,
        output_schema: dict[str, Any] | None = None,
        trigger: str | None = None,
        unique: bool = False,
    ) -> str:
        """Start a session (wolf_client.py; these are the arguments a job run gives)."""
        ...

    async def result(self, session_id: str) -> SessionResult:
        """A session's result, once it has ended (wolf_client.py)."""
        ...

    async def config_get(self, name: str, version: int | None = None) -> ConfigVersion:
        """A version of a registry config, default the current one (configs.py)."""
        ...

    async def _job_session(
        self,
        job: str,
        variables: dict[str, object],
        manifest: Manifest | str | Path | None,
        config_name: str | None,
    ) -> SessionInput:
        """A job's session input, its variables bound and checked (jobs.py)."""
        ...

    async def start_job(self, job: str, *args: Any, **kwargs: Any) -> str:
        """Start a job run (jobs.py)."""
        ...
