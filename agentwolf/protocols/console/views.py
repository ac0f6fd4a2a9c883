"""How the console answers: pages rendered from its templates (Jinja2, autoescaped), the forms its
pages post, and what an action answers: JSON to console.js, a redirect back to a plain form."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from agentwolf.access import Principal
from agentwolf.protocols.console.signin import PREFIX
from agentwolf.protocols.served import ApiError, served_of

FORM_LIMIT = 64 * 1024
"""Bytes a console form may post (a prompt, a reason)."""

templates = Environment(
    loader=PackageLoader("agentwolf.protocols.console", "templates"),
    autoescape=select_autoescape(default=True),
)


def money(usd: float | None) -> str:
    return "unknown" if usd is None else f"{usd:.4f}"


def ago(when: datetime) -> str:
    """How long ago, as people say it ("2 min ago")."""
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def page(request: Request, template: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
    principal: Principal | None = request.scope.get("state", {}).get("principal")
    served = served_of(request)
    html = templates.get_template(template).render(
        prefix=PREFIX,
        tenant=principal.tenant if principal else None,
        can_sign_out=served.open_tenant is None,
        money=money,
        ago=ago,
        **context,
    )
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


async def form(request: Request) -> dict[str, str]:
    """The posted form (application/x-www-form-urlencoded: what the pages and console.js send)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ApiError(
            415, "send the form as application/x-www-form-urlencoded", code="unsupported_media_type"
        )
    body = await request.body()
    if len(body) > FORM_LIMIT:
        raise ApiError(413, f"console forms are limited to {FORM_LIMIT} bytes", code="body_too_large")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def scripted(request: Request) -> bool:
    """console.js asks for JSON answers; a plain form post gets a redirect back."""
    return "application/json" in request.headers.get("accept", "")


def done(request: Request, back: str, message: str) -> Response:
    if scripted(request):
        return JSONResponse({"ok": True, "message": message})
    return RedirectResponse(back, status_code=303)


def refused_page(request: Request, message: str) -> Response:
    if scripted(request) or "text/html" not in request.headers.get("accept", "text/html"):
        return ApiError(404, message, "not_found_error", "not_found").response()
    return page(request, "not_found.html", status_code=404, title="Not found", page="", message=message)
