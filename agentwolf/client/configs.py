"""The config-registry half of `WolfClient`: push, list, history, get, rollback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.client.parts import ClientCore
from agentwolf.workflows.types import CONFIG_ATTR, TENANT_ATTR, check_config_name, quote, registry_id

if TYPE_CHECKING:
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.configs.config_registry import (
        ConfigRegistryWorkflow,
        ConfigVersion,
        PushResult,
        VersionInfo,
    )

    Registry = WorkflowHandle[ConfigRegistryWorkflow, None]

T = TypeVar("T")


SERVED = "served"
"""What API keys call the config `wolf serve` serves (`configs: [served]`): no registry config may
take the name, or a key for the served config would reach it too."""


class ConfigNotFound(ValueError):
    pass


class ConfigQueryFailed(ValueError):
    """The registry did not answer a query (no worker, a failing query): not the same as no config."""


class ConfigSummary(BaseModel):
    """One registry config as `wolf config list` shows it (from visibility: no worker needed)."""

    name: str
    version: int
    identity: str
    pushed_at: datetime
    note: str = ""


class ConfigMethods(ClientCore):
    """Named, versioned configs of this client's tenant (one `ConfigRegistry` workflow per name)."""

    def _registry(self, name: str) -> Registry:
        from agentwolf.workflows.configs.config_registry import ConfigRegistryWorkflow

        return self.client.get_workflow_handle_for(
            ConfigRegistryWorkflow.run, registry_id(self.tenant, check_config_name(name))
        )

    async def config_push(self, name: str, manifest: Manifest | str | Path, *, note: str = "") -> PushResult:
        """Push a new version (the registry is created on the first push). Identical content creates
        nothing: the result says `created=False` and names the version that already has it."""
        if name == SERVED:
            raise ValueError(
                f"{SERVED!r} names the config wolf serve serves (API keys' `configs`): choose another"
            )
        from agentwolf.workflows.configs.config_registry import (
            ConfigRegistryWorkflow,
            PushRequest,
            RegistryInput,
            pushable,
        )

        manifest = pushable(manifest)
        start = WithStartWorkflowOperation(
            ConfigRegistryWorkflow.run,
            RegistryInput(tenant=self.tenant, name=check_config_name(name)),
            id=registry_id(self.tenant, name),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=self.task_queue,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(TENANT_ATTR, self.tenant), SearchAttributePair(CONFIG_ATTR, name)]
            ),
        )
        try:
            return await self.client.execute_update_with_start_workflow(
                ConfigRegistryWorkflow.push,
                PushRequest(manifest=manifest, note=note),
                start_workflow_operation=start,
            )
        except WorkflowUpdateFailedError as exc:
            raise ValueError(f"config {name!r} refused: {exc.cause}") from None

    async def config_list(self) -> list[ConfigSummary]:
        """This tenant's configs and their current versions, by name."""
        query = (
            f"WorkflowType = 'ConfigRegistry' AND {TENANT_ATTR.name} = {quote(self.tenant)}"
            " AND ExecutionStatus = 'Running'"
        )
        configs = []
        async for wf in self.client.list_workflows(query):
            current = (await wf.memo()).get("current")
            if current is not None:  # a registry whose first push was refused has no version
                configs.append(
                    ConfigSummary(name=wf.typed_search_attributes.get(CONFIG_ATTR) or "", **current)
                )
        return sorted(configs, key=lambda c: c.name)

    async def config_history(self, name: str) -> list[VersionInfo]:
        from agentwolf.workflows.configs.config_registry import ConfigRegistryWorkflow

        return await self._ask(name, lambda h: h.query(ConfigRegistryWorkflow.history))

    async def config_get(self, name: str, version: int | None = None) -> ConfigVersion:
        """A version's content (the current one by default)."""
        from agentwolf.workflows.configs.config_registry import ConfigRegistryWorkflow

        if version is not None:
            return await self._ask(name, lambda h: h.query(ConfigRegistryWorkflow.get, version))
        current = await self._ask(name, lambda h: h.query(ConfigRegistryWorkflow.current))
        if current is None:
            raise ConfigNotFound(f"config {name!r} has no version yet")
        return current

    async def config_rollback(self, name: str, version: int, *, note: str = "") -> PushResult:
        """Push a new version equal to `version`'s content (running sessions switch to it)."""
        from agentwolf.workflows.configs.config_registry import ConfigRegistryWorkflow, RollbackRequest

        request = RollbackRequest(version=version, note=note)
        return await self._ask(name, lambda h: h.execute_update(ConfigRegistryWorkflow.rollback, request))

    async def _ask(self, name: str, call: Callable[[Registry], Awaitable[T]]) -> T:
        """Run a query or update on the registry, with one-line errors for what callers get wrong."""
        try:
            return await call(self._registry(name))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ConfigNotFound(
                    f"no config named {name!r} in tenant {self.tenant!r} (wolf config push {name} FILE "
                    "creates it)"
                ) from None
            raise
        except WorkflowQueryFailedError as exc:
            raise ConfigQueryFailed(str(exc)) from exc
        except WorkflowUpdateFailedError as exc:
            # The registry's own sentence: str() of an ApplicationError prefixes its type (ValueError: ...).
            raise ValueError(getattr(exc.cause, "message", str(exc.cause))) from None
