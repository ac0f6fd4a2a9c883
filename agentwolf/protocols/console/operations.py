"""The console's registry and schedule pages: config versions with a diff between any two (each side
as `wolf config show` prints it: placeholders as written, literal secrets masked), the sessions that
run a config, and the tenant's schedules with their next firings, paused, resumed or fired now."""

from __future__ import annotations

import asyncio
import difflib
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response

from agentwolf.access import Principal
from agentwolf.client.configs import ConfigNotFound
from agentwolf.client.schedules import ScheduleNotFound
from agentwolf.config.masking import masked
from agentwolf.protocols.console import listing
from agentwolf.protocols.console.views import done, form, page, refused_page
from agentwolf.protocols.served import ApiError, principal_of, served_of


def _may_read(principal: Principal, name: str) -> bool:
    return principal.configs is None or name in principal.configs


def shown(manifest: Any) -> list[str]:
    """A manifest's lines as `wolf config show` prints them."""
    return yaml.safe_dump(masked(manifest), sort_keys=False).rstrip().splitlines()


async def configs(request: Request) -> Response:
    principal = principal_of(request)
    found = await served_of(request).wolf(principal).config_list()
    listed = [c for c in found if _may_read(principal, c.name)]
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


async def schedules(request: Request) -> Response:
    found = await served_of(request).wolf(principal_of(request)).schedule_list()
    return page(request, "schedules.html", title="Schedules", page="schedules", schedules=found)


SCHEDULE_ACTIONS = ("pause", "resume", "trigger")


async def schedule_act(request: Request) -> Response:
    name, action = request.path_params["name"], request.path_params["action"]
    await form(request)
    wolf = served_of(request).wolf(principal_of(request))
    if action not in SCHEDULE_ACTIONS:
        return refused_page(request, f"no action {action!r}")
    try:
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
