"""The console's registry and schedule pages: config versions with a diff between any two (each side
as `wolf config show` prints it: placeholders as written, literal secrets masked), the sessions that
run a config, and the tenant's schedules with their next firings, paused, resumed or fired now.

A key limited to some configs or agents is held to them here as on every other route
(`Principal.may_use`): it reads a config only whole (one it may use, every agent and team of it
too), and sees and operates only the schedules whose firings run what it may use (a job's agent of
a config it may use, or a prompt for a session it may reach). Anything else is "not found"."""

from __future__ import annotations

import asyncio
import difflib
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response

from agentwolf.access import Principal, TenantError
from agentwolf.client.configs import ConfigNotFound
from agentwolf.client.schedules import ScheduleNotFound
from agentwolf.client.wolf_client import SessionNotFound
from agentwolf.config.manifest import Manifest
from agentwolf.config.masking import masked
from agentwolf.protocols.console import listing
from agentwolf.protocols.console.views import done, form, page, refused_page
from agentwolf.protocols.served import ApiError, Served, principal_of, reach, served_of, target_of


def _may_read(principal: Principal, name: str, manifest: Manifest | None = None) -> bool:
    """Whether the key may read config `name` (with `manifest`: that version of it, whole)."""
    if principal.configs is not None and name not in principal.configs:
        return False
    named = [*manifest.agents, *manifest.teams] if manifest is not None else []
    return all(principal.may_use(name, agent) for agent in named)


async def _readable(served: Served, principal: Principal, name: str) -> bool:
    """`_may_read`, of the current version for a key limited to some agents."""
    if principal.agents is None or not _may_read(principal, name):
        return _may_read(principal, name)
    try:
        current = await served.wolf(principal).config_get(name)
    except ConfigNotFound:
        return False
    return _may_read(principal, name, current.manifest)


def shown(manifest: Any) -> list[str]:
    """A manifest's lines as `wolf config show` prints them."""
    return yaml.safe_dump(masked(manifest), sort_keys=False).rstrip().splitlines()


async def configs(request: Request) -> Response:
    served, principal = served_of(request), principal_of(request)
    found = await served.wolf(principal).config_list()
    readable = await asyncio.gather(*(_readable(served, principal, c.name) for c in found))
    listed = [c for c, ok in zip(found, readable, strict=True) if ok]
    return page(request, "configs.html", title="Configs", page="configs", configs=listed)


async def config(request: Request) -> Response:
    """One config: its versions, a diff between two of them (`?a=&b=`, default the last two), and the
    sessions that run it."""
    served, principal, name = served_of(request), principal_of(request), request.path_params["name"]
    if not _may_read(principal, name):
        return refused_page(request, f"config {name!r} not found")
    wolf = served.wolf(principal)
    try:
        history = await wolf.config_history(name)
    except ConfigNotFound:
        return refused_page(request, f"config {name!r} not found")
    versions = [v.version for v in history]
    try:
        a = int(request.query_params.get("a") or (versions[-2] if len(versions) > 1 else versions[-1]))
        b = int(request.query_params.get("b") or versions[-1])
    except ValueError:
        raise ApiError(400, "versions are numbers", code="invalid_value") from None
    if a not in versions or b not in versions:
        raise ApiError(404, f"config {name!r} has versions {versions}", "not_found_error", "not_found")
    older, newer = await asyncio.gather(wolf.config_get(name, a), wolf.config_get(name, b))
    if not (_may_read(principal, name, older.manifest) and _may_read(principal, name, newer.manifest)):
        return refused_page(request, f"config {name!r} not found")
    diff = list(
        difflib.unified_diff(
            shown(older.manifest), shown(newer.manifest), f"{name} v{a}", f"{name} v{b}", lineterm=""
        )
    )
    running = await listing.sessions_page(served.client, principal, listing.Filters(config=name), None)
    return page(
        request,
        "config.html",
        title=f"Config {name}",
        page="configs",
        name=name,
        history=list(reversed(history)),
        a=a,
        b=b,
        diff=diff,
        page_rows=running.rows,
        filtered=True,
        next_url=None,
        first_url=None,
    )


async def _may_operate(served: Served, principal: Principal, name: str) -> bool:
    """Whether the key may see and operate schedule `name` (ScheduleNotFound: it is gone)."""
    if principal.agents is None and principal.configs is None:
        return True
    runs = await served.wolf(principal).schedule_runs(name)
    if runs.session is not None:
        try:
            await reach(served, principal, runs.session)
        except (SessionNotFound, TenantError):
            return False
        return True
    return runs.agent is not None and (
        target_of(served, principal, runs.agent, runs.config_name, runs.config_id) is not None
    )


async def _listed(served: Served, principal: Principal, name: str) -> bool:
    try:
        return await _may_operate(served, principal, name)
    except ScheduleNotFound:  # deleted meanwhile
        return False


async def schedules(request: Request) -> Response:
    served, principal = served_of(request), principal_of(request)
    found = await served.wolf(principal).schedule_list()
    shown = await asyncio.gather(*(_listed(served, principal, s.name) for s in found))
    listed = [s for s, ok in zip(found, shown, strict=True) if ok]
    return page(request, "schedules.html", title="Schedules", page="schedules", schedules=listed)


SCHEDULE_ACTIONS = ("pause", "resume", "trigger")


async def schedule_act(request: Request) -> Response:
    name, action = request.path_params["name"], request.path_params["action"]
    await form(request)
    served, principal = served_of(request), principal_of(request)
    wolf = served.wolf(principal)
    if action not in SCHEDULE_ACTIONS:
        return refused_page(request, f"no action {action!r}")
    try:
        if not await _may_operate(served, principal, name):
            raise ScheduleNotFound(name)
        if action == "pause":
            await wolf.schedule_pause(name, "paused from the console")
        elif action == "resume":
            await wolf.schedule_resume(name, "resumed from the console")
        else:
            await wolf.schedule_trigger(name)
    except ScheduleNotFound:
        return refused_page(request, f"schedule {name!r} not found")
    said = {"pause": "paused", "resume": "resumed", "trigger": "fired"}[action]
    return done(request, "/console/schedules", f"schedule {name} {said}")
