"""The console's pages and the actions their forms post: server-rendered HTML (Jinja2, autoescaped)
over the same WolfClient calls and tenant checks as the APIs. Forms work without scripts (a 303 back
to the page); console.js sends them with `fetch` instead and keeps the page."""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args
from urllib.parse import quote, urlencode, urlsplit

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.access import TenantError
from agentwolf.client.usage import UsageKey, usage_report
from agentwolf.client.wolf_client import SessionNotFound
from agentwolf.protocols import turns
from agentwolf.protocols.console import budgets, listing, operations, stream, usage_chart
from agentwolf.protocols.console.signin import PREFIX, SignedIn, may_keep_key, sign_in, sign_out
from agentwolf.protocols.console.views import done, form, money, page, refused_page, scripted
from agentwolf.protocols.served import ApiError, Target, principal_of, reach, served_of
from agentwolf.workflows.types import PendingApproval, SessionStatus, workflow_id

TEMPORAL_UI = "http://localhost:8233"
"""Where the Temporal UI is, unless WOLF_TEMPORAL_UI says (the Temporal CLI dev server's default)."""
EVENTS_SHOWN = 500
"""Events a session page replays at first (the latest ones): a session of a thousand turns opens as
fast as a short one; a link replays them all."""
OFFSET_WAIT = 2.0
"""Seconds the page waits to learn how many events there are (none: it replays them all)."""


# Signing in


async def login_page(request: Request) -> Response:
    if served_of(request).open_tenant is not None:
        return RedirectResponse(f"{PREFIX}/sessions", status_code=303)
    wanted = _next(request.query_params.get("next"))
    return page(request, "login.html", title="Sign in", page="login", next=wanted)


def _next(wanted: str | None) -> str:
    """Where to go after signing in: a console page only (never another site)."""
    if wanted and wanted.startswith(f"{PREFIX}/") and "//" not in wanted and "\\" not in wanted:
        return wanted
    return f"{PREFIX}/sessions"


async def login(request: Request) -> Response:
    posted = await form(request)
    served, key, after = served_of(request), posted.get("key", "").strip(), _next(posted.get("next"))
    if served.open_tenant is not None:
        return RedirectResponse(after, status_code=303)
    refused = {"title": "Sign in", "page": "login", "next": after}
    if not may_keep_key(request):
        error = "sign in over HTTPS: a key sent over plain HTTP can be read on the way"
        return page(request, "login.html", status_code=400, error=error, **refused)
    principal = served.keys.principal(key) if key else None
    if principal is None:
        error = "that API key is not one this server knows"
        return page(request, "login.html", status_code=401, error=error, **refused)
    return sign_in(RedirectResponse(after, status_code=303), served, principal)


async def logout(request: Request) -> Response:
    return sign_out(RedirectResponse(f"{PREFIX}/login", status_code=303), served_of(request), request)


async def home(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/sessions", status_code=303)


# Sessions


async def sessions(request: Request) -> Response:
    served, principal, query = served_of(request), principal_of(request), request.query_params
    filters = listing.Filters(
        state=query.get("state", "") if query.get("state", "") in listing.STATES else "",
        agent=query.get("agent", "").strip(),
        config=query.get("config", "").strip(),
        search=query.get("search", "").strip(),
        sort=query.get("sort", "") if query.get("sort", "") in listing.SORTS else "",
    )
    listed = listing.sessions_page(served.client, principal, filters, query.get("page"))
    targets: list[Target] = []
    if query.get("fragment"):
        found = await listed
    else:  # the agents a new session may run, asked alongside
        found, targets = await asyncio.gather(listed, served.models(principal))
    kept = {k: v for k, v in vars(filters).items() if v}
    here = {**kept, "page": query["page"]} if query.get("page") else kept
    context: dict[str, Any] = {
        "page_rows": found.rows,
        "filtered": bool(kept.keys() - {"sort"}),
        "sorted_here": found.sorted_here,
        "next_url": _list_url({**kept, "page": found.next_token}) if found.next_token else None,
        "first_url": _list_url(kept) if query.get("page") else None,
    }
    if query.get("fragment"):
        return page(request, "session_rows.html", **context)
    fragment = _list_url({**here, "fragment": "1"})
    return page(
        request,
        "sessions.html",
        title="Sessions",
        page="sessions",
        filters=filters,
        states=listing.STATES,
        agents=[t.model for t in targets],
        fragment_url=fragment,
        **context,
    )


def _list_url(query: dict[str, str]) -> str:
    return f"{PREFIX}/sessions?{urlencode(query)}"


async def figures(request: Request) -> Response:
    """Turns, tokens, USD and badges of the listed sessions (`?id=...` repeated, at most a page)."""
    ids = request.query_params.getlist("id")[: listing.PAGE_SIZE]
    found = await listing.figures(served_of(request), principal_of(request), ids)
    return JSONResponse({sid: vars(f) for sid, f in found.items()})


async def start(request: Request) -> Response:
    posted = await form(request)
    served, principal = served_of(request), principal_of(request)
    text = posted.get("prompt", "").strip()
    if not text:
        raise ApiError(400, "say something to start the session with", code="empty_prompt")
    target = await served.resolve(principal, posted.get("agent", ""))
    ref = await turns.start(served.wolf(principal), target, text)
    where = f"{PREFIX}/sessions/{quote(ref.session_id, safe='')}"
    if scripted(request):
        return JSONResponse({"ok": True, "session_id": ref.session_id, "url": where})
    return RedirectResponse(where, status_code=303)


async def _reach(request: Request) -> SessionStatus:
    """The session in the path, if this key may see it (else SessionNotFound, as the APIs answer)."""
    sid = request.path_params["session_id"]
    try:
        status, _ = await reach(served_of(request), principal_of(request), sid)
    except TenantError:
        raise SessionNotFound(sid) from None
    return status


async def session(request: Request) -> Response:
    sid = request.path_params["session_id"]
    try:
        status = await _reach(request)
    except SessionNotFound:
        return refused_page(request, f"session {sid!r} not found")
    served = served_of(request)
    base = f"{PREFIX}/sessions/{quote(status.session_id, safe='')}"
    head = 0
    if request.query_params.get("history") != "all":
        with contextlib.suppress(RPCError, WorkflowQueryFailedError, TimeoutError):
            async with asyncio.timeout(OFFSET_WAIT):
                head = await served.wolf(principal_of(request)).event_offset(status.session_id)
    shown_from = max(0, head - EVENTS_SHOWN)
    ui = os.environ.get("WOLF_TEMPORAL_UI", TEMPORAL_UI).rstrip("/")
    wid = workflow_id(status.tenant, status.session_id)
    usage = status.counters.total
    config = f"{status.config_name} v{status.config_version}" if status.config_name else "file"
    return page(
        request,
        "session.html",
        title=f"Session {status.session_id}",
        page="session",
        status=status,
        usage=usage,
        cost=money(usage.cost_usd),
        config=config,
        events_url=f"{base}/events?from={shown_from}",
        shown_from=shown_from,
        events_head=head,
        whole_url=f"{base}?history=all",
        actions_url=base,
        temporal_url=f"{ui}/namespaces/{quote(served.client.namespace, safe='')}/workflows/"
        + quote(wid, safe=""),
    )


FILE_SHOWN = 500_000
"""Characters of a file the Files view shows (the rest: `wolf workspace cat`)."""


async def files(request: Request) -> Response:
    """A workspace's files as of a turn's snapshot (`?at=TURN`, default the latest), and one file
    (`&path=`), read from the payload store like `wolf workspace`."""
    sid = request.path_params["session_id"]
    try:
        status = await _reach(request)
    except SessionNotFound:
        return refused_page(request, f"session {sid!r} not found")
    wolf = served_of(request).wolf(principal_of(request))
    base = f"{PREFIX}/sessions/{quote(status.session_id, safe='')}"
    query = request.query_params
    shots = await wolf.workspace_snapshots(status.session_id)
    turns = sorted({s.turn for s in shots})
    asked = int(query["at"]) if query.get("at", "").isdigit() else None
    at = max((t for t in turns if asked is None or t <= asked), default=None)
    listed: list[tuple[str, Any, Any]] = []
    path, content = query.get("path"), None
    if at is not None:
        entries = await wolf.workspace_files(status.session_id, at)
        listed = [(p, e.get("s", ""), e.get("t")) for p, e in sorted(entries.items()) if e["k"] != "d"]
        if path:
            with contextlib.suppress(FileNotFoundError):
                data = await wolf.workspace_read(status.session_id, path, at)
                text = data.decode("utf-8", errors="replace")
                content = (
                    text if len(text) <= FILE_SHOWN else text[:FILE_SHOWN] + "\n[cut: wolf workspace cat]"
                )
    return page(
        request,
        "files.html",
        title=f"Files of {status.session_id}",
        page="session",
        session_id=status.session_id,
        session_url=base,
        files_url=f"{base}/files",
        turns=turns,
        at=at,
        files=listed,
        path=path,
        content=content,
    )


async def by_workflow_id(request: Request) -> Response:
    """A session's full workflow id in the path (`wolf/<tenant>/<id>`, as the Temporal UI shows it):
    the session's own page when it is this key's tenant's, else "not found"."""
    path = request.path_params["path"]
    tenant, _, sid = path.removeprefix("wolf/").partition("/")
    if path.startswith("wolf/") and tenant == principal_of(request).tenant and sid and "/" not in sid:
        return RedirectResponse(f"{PREFIX}/sessions/{quote(sid, safe='')}", status_code=303)
    return refused_page(request, f"session {path!r} not found")


async def nothing_here(request: Request) -> Response:
    """Any other console address: the console's own "not found" page (JSON to scripts)."""
    return refused_page(request, f"no console page at {request.url.path!r}")


async def act(request: Request) -> Response:
    """prompt, steer, interrupt, close, approve, deny: what the session page's forms post."""
    sid, action = request.path_params["session_id"], request.path_params["action"]
    posted = await form(request)
    try:
        status = await _reach(request)
    except SessionNotFound:
        return refused_page(request, f"session {sid!r} not found")
    wolf = served_of(request).wolf(principal_of(request))
    sid, text = status.session_id, posted.get("text", "").strip()
    came_from = urlsplit(request.headers.get("referer", "")).path
    back = came_from if came_from.startswith(f"{PREFIX}/") else f"{PREFIX}/sessions/{quote(sid, safe='')}"
    try:
        if action in ("prompt", "steer") and not text:
            raise ValueError("write a message first")
        if action == "prompt":
            await turns.prompt(wolf, sid, text)
            message = "sent as a new turn"
        elif action == "steer":
            await wolf.steer(sid, text)
            message = "steer sent: the running turn reads it before its next model request"
        elif action == "interrupt":
            await wolf.interrupt(sid, "interrupted from the console")
            message = "interrupt sent"
        elif action == "close":
            await wolf.close(sid)
            message = "close sent"
        elif action == "approve":
            await wolf.approve(sid, posted.get("call_id", ""), always=posted.get("always") == "1")
            message = "approved"
        elif action == "deny":
            await wolf.deny(sid, posted.get("call_id", ""), posted.get("reason", "").strip() or None)
            message = "denied"
        else:
            return refused_page(request, f"no action {action!r}")
    except (ValueError, turns.Refused) as exc:
        raise ApiError(409, str(exc), code="refused") from None
    return done(request, back, message)


# Approvals and usage


async def approvals(request: Request) -> Response:
    served, principal = served_of(request), principal_of(request)
    waiting = await listing.sessions_page(
        served.client, principal, listing.Filters(state="waiting_approval"), None, size=100
    )

    async def pending(sid: str) -> list[PendingApproval] | None:
        try:
            status, _ = await reach(served, principal, sid)
        except (SessionNotFound, TenantError):
            return []
        except (RPCError, WorkflowQueryFailedError):
            return None
        return status.pending_approvals

    found = await asyncio.gather(*(pending(row.session_id) for row in waiting.rows))
    context: dict[str, Any] = {
        "pending": [
            (row.session_id, p) for row, ps in zip(waiting.rows, found, strict=True) for p in ps or []
        ],
        "unreadable": sum(ps is None for ps in found),
    }
    if request.query_params.get("fragment"):
        return page(request, "approval_rows.html", **context)
    return page(
        request,
        "approvals.html",
        title="Approvals",
        page="approvals",
        fragment_url=f"{PREFIX}/approvals?fragment=1",
        **context,
    )


USAGE_KEYS: tuple[UsageKey, ...] = tuple(k for k in get_args(UsageKey) if k != "tenant")


async def usage(request: Request) -> Response:
    """What the tenant's sessions spent over a range, as `wolf usage --json --since <its start>`
    counts it: a chart per hour or day (usage_chart.py), a row per group, and the budgets."""
    served, principal, query = served_of(request), principal_of(request), request.query_params
    if principal.agents is not None or principal.configs is not None:
        refusal = "usage covers the whole tenant: this key may use only some of it"
        raise ApiError(403, refusal, "permission_error")
    by = query.get("by", "agent")
    by = by if by in USAGE_KEYS else "agent"
    range_ = next((r for r in usage_chart.RANGES if r.name == query.get("range")), usage_chart.DEFAULT_RANGE)
    since = range_.start(datetime.now(UTC))
    spending = await served.wolf(principal).spending(since=since)
    report = usage_report(spending, since=since, by=by)
    budgets_, flagged = await budgets.budgets(served, principal, spending)
    return page(
        request,
        "usage.html",
        title="Usage",
        page="usage",
        report=report,
        keys=USAGE_KEYS,
        ranges=usage_chart.RANGES,
        chart=usage_chart.chart(spending, by, range_, since),
        budgets=budgets_,
        flagged=flagged,
        near=round(100 * budgets.NEAR),
    )


def routes() -> list[BaseRoute]:
    """Everything under /console, behind the console's own sign-in (signin.py)."""
    return [
        Mount(
            PREFIX,
            routes=[
                Route("/", home, methods=["GET"]),
                Route("/login", login_page, methods=["GET"]),
                Route("/login", login, methods=["POST"]),
                Route("/logout", logout, methods=["POST"]),
                Route("/sessions", sessions, methods=["GET"]),
                Route("/sessions", start, methods=["POST"]),
                Route("/figures", figures, methods=["GET"]),
                Route("/sessions/{session_id}", session, methods=["GET"]),
                Route("/sessions/{session_id}/events", stream.events, methods=["GET"]),
                Route("/sessions/{session_id}/files", files, methods=["GET"]),
                Route("/sessions/{session_id}/{action}", act, methods=["POST"]),
                Route("/sessions/{path:path}", by_workflow_id, methods=["GET"]),
                Route("/approvals", approvals, methods=["GET"]),
                Route("/usage", usage, methods=["GET"]),
                Route("/configs", operations.configs, methods=["GET"]),
                Route("/configs/{name}", operations.config, methods=["GET"]),
                Route("/schedules", operations.schedules, methods=["GET"]),
                Route("/schedules/{name}/{action}", operations.schedule_act, methods=["POST"]),
                Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
                Route("/{path:path}", nothing_here),
            ],
            middleware=[Middleware(SignedIn)],
        )
    ]
