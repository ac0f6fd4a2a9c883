"""ConfigRegistry: the versions of one named config of one tenant, as a long-lived workflow.

Workflow id `wolf-config/<tenant>/<name>`: configs are per tenant because a manifest names MCP
server commands, URLs and secret placeholders that one tenant must not read or change for another,
and because tenants may live in their own namespaces (see `agentwolf.access`).

Versions are numbered 1, 2, 3... and never reused; a rollback pushes a new version equal to the old
content. Pushing the content the current version already has creates nothing (CI can push on every
run without disturbing sessions). After a new version the registry signals the running sessions
of the config (`wolf.config_notify`); sessions apply it at their next turn boundary. The history
stays bounded: the run continues as new when it grows, keeping every version's metadata and the
last `keep_manifests` manifests. Deterministic code only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.loading import ManifestError, load_manifest, reference_problems
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.configs.config_update import ConfigUpdate

NOTIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=10
)


def config_problems(manifest: Manifest) -> list[str]:
    """`key.path: problem` lines for what keeps a manifest out of the registry."""
    problems = reference_problems(manifest)
    if not manifest.agents and not manifest.teams:
        problems.append("agents: a registry config needs at least one agent or team")
    return problems


def pushable(manifest: Manifest | str | Path) -> Manifest:
    """Load (errors as `file:line: key.path: problem`) and check a manifest before pushing it."""
    source = "<manifest>"
    if not isinstance(manifest, Manifest):
        source = f"{manifest}:1"  # what load_manifest accepts only fails at the root
        manifest = load_manifest(manifest, anchor=False)
    problems = config_problems(manifest)
    if problems:
        raise ManifestError("\n".join(f"{source}: {p}" for p in problems))
    return manifest


class VersionInfo(BaseModel):
    version: int
    identity: str
    pushed_at: datetime
    note: str = ""
    notified: int | None = None
    """Running sessions signalled about this version; None until then (or when a newer version
    superseded it before the registry got to it)."""


class ConfigVersion(VersionInfo):
    name: str
    manifest: Manifest


class PushRequest(BaseModel):
    manifest: Manifest
    note: str = ""


class RollbackRequest(BaseModel):
    version: int
    note: str = ""


class PushResult(BaseModel):
    name: str
    version: int
    identity: str
    created: bool
    """False when the current version already had this content (nothing was pushed)."""


class RegistryInput(BaseModel):
    """Start arguments, and the snapshot a continue-as-new hands to the next run."""

    tenant: str
    name: str
    keep_manifests: int = Field(50, ge=1)
    max_history_events: int = Field(2000, ge=10)
    versions: list[VersionInfo] = []
    manifests: dict[int, Manifest] = {}
    notified: int = 0
    """The newest version the running sessions were told about."""


class NotifyInput(BaseModel):
    tenant: str
    update: ConfigUpdate


REGISTRY_WORKFLOW = "ConfigRegistry"


@workflow.defn(name=REGISTRY_WORKFLOW)
class ConfigRegistryWorkflow:
    @workflow.init
    def __init__(self, inp: RegistryInput) -> None:
        self.inp = inp
        self.versions = [v.model_copy() for v in inp.versions]
        self.manifests = dict(inp.manifests)
        self.notified = inp.notified

    @workflow.run
    async def run(self, inp: RegistryInput) -> None:
        while True:
            await workflow.wait_condition(lambda: self._unsent() or self._too_long())
            if self._unsent():
                await self._notify()
                continue
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(
                self.inp.model_copy(
                    update={"versions": self.versions, "manifests": self.manifests, "notified": self.notified}
                )
            )

    # -- inputs --------------------------------------------------------------------------------

    @workflow.update
    def push(self, req: PushRequest) -> PushResult:
        return self._add(req.manifest, req.note)

    @push.validator
    def _check_push(self, req: PushRequest) -> None:
        problems = config_problems(req.manifest)
        if problems:
            raise ValueError("\n".join(problems))

    @workflow.update
    def rollback(self, req: RollbackRequest) -> PushResult:
        """A new version with an older version's content (versions never go backwards)."""
        return self._add(self.manifests[req.version], req.note or f"rollback to v{req.version}")

    @rollback.validator
    def _check_rollback(self, req: RollbackRequest) -> None:
        self._kept(req.version)

    @workflow.query
    def current(self) -> ConfigVersion | None:
        return self._kept(self.versions[-1].version) if self.versions else None

    @workflow.query
    def history(self) -> list[VersionInfo]:
        return self.versions

    @workflow.query
    def get(self, version: int) -> ConfigVersion:
        return self._kept(version)

    # -- helpers -------------------------------------------------------------------------------

    def _add(self, manifest: Manifest, note: str) -> PushResult:
        last = self.versions[-1] if self.versions else None
        if last is not None and last.identity == manifest.identity:
            return PushResult(name=self.inp.name, version=last.version, identity=last.identity, created=False)
        info = VersionInfo(
            version=last.version + 1 if last else 1,
            identity=manifest.identity,
            pushed_at=workflow.now(),
            note=note,
        )
        self.versions.append(info)
        self.manifests[info.version] = manifest
        for old in sorted(self.manifests)[: -self.inp.keep_manifests]:
            del self.manifests[old]
        # `wolf config list` reads the current version from visibility, without a query per config.
        workflow.upsert_memo({"current": info.model_dump(mode="json")})
        return PushResult(name=self.inp.name, version=info.version, identity=info.identity, created=True)

    def _kept(self, version: int) -> ConfigVersion:
        info = next((v for v in self.versions if v.version == version), None)
        if info is None:
            latest = self.versions[-1].version if self.versions else "none"
            raise ValueError(f"config {self.inp.name!r} has no version {version} (latest: {latest})")
        if version not in self.manifests:
            raise ValueError(
                f"config {self.inp.name!r} v{version}: its content is no longer kept "
                f"(the registry keeps the last {self.inp.keep_manifests} versions' manifests)"
            )
        return ConfigVersion(**info.model_dump(), name=self.inp.name, manifest=self.manifests[version])

    def _unsent(self) -> bool:
        return bool(self.versions) and self.versions[-1].version > self.notified

    def _too_long(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self.inp.max_history_events
        )

    async def _notify(self) -> None:
        """Tell the running sessions about the newest version (versions pushed meanwhile coalesce)."""
        info = self.versions[-1]
        update = ConfigUpdate(name=self.inp.name, version=info.version, manifest=self.manifests[info.version])
        try:
            info.notified = await workflow.execute_activity(
                "wolf.config_notify",
                NotifyInput(tenant=self.inp.tenant, update=update),
                result_type=int,
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=NOTIFY_RETRY,
            )
        except ActivityError as err:
            # The registry must outlive a failed notification; sessions catch up with the next version.
            workflow.logger.warning(
                "could not notify the sessions of %s v%s: %s", self.inp.name, info.version, err.cause
            )
        self.notified = info.version
