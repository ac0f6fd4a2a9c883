"""What WolfClient's method groups (forks.py, jobs.py) use of the client they are part of, declared
once: a group subclasses `ClientCore` instead of importing WolfClient (a cycle) or restating its
signatures under TYPE_CHECKING; mypy checks WolfClient's definitions against these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from temporalio.client import Client, WorkflowHandle

if TYPE_CHECKING:
    from agentwolf.workflows.configs.config_registry import ConfigVersion
    from agentwolf.workflows.session_input import SessionInput


class ClientCore(Protocol):
    """One tenant's view of a Temporal namespace (WolfClient and ConfigMethods implement it)."""

    client: Client
    tenant: str
    _owned: set[str]
    """Workflow ids checked to be this tenant's sessions."""

    async def _handle(self, session_id: str) -> WorkflowHandle[Any, Any]:
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
        """Start the session workflow of `inp`."""
        ...

    async def config_get(self, name: str, version: int | None = None) -> ConfigVersion:
        """A version of a registry config (default: the current one)."""
        ...
