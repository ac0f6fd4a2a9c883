"""Who uses the console: the API key a person typed on its login page, as a sign-in token
(protocols/sign_ins.py: never the key itself) in an HTTP-only, Secure, SameSite=Strict cookie named
`__Host-` (so no other host, a sibling subdomain included, can set one for this console), mapped to
the key's principal exactly as the APIs map a bearer key (or, with `--no-auth`, the served tenant for
clients on this machine only). Signing out revokes the token.

Pages of other sites cannot act through it: the cookie is never sent on their requests
(SameSite=Strict), and every request that changes something must come from the console's own
origin (its `Origin` header), which also refuses a forged login."""

from __future__ import annotations

from urllib.parse import quote as url_quote
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentwolf.access import Principal
from agentwolf.protocols.middleware import LOOPBACK_HOSTS, loopback_only
from agentwolf.protocols.served import ApiError, Served

PREFIX = "/console"
COOKIE = "__Host-wolf_console"
OPEN = (f"{PREFIX}/login", f"{PREFIX}/static/")
"""Paths answered before signing in: the login page and the assets it needs."""
SAFE_METHODS = frozenset({"GET", "HEAD"})


def principal_from_cookie(served: Served, request: Request) -> Principal | None:
    if served.open_tenant is not None:
        loopback_only(request)
        return Principal(served.open_tenant)
    token = request.cookies.get(COOKIE)
    return served.sign_ins.principal(token, served.keys) if token else None


def same_origin(request: Request) -> None:
    """Refuse a request that changes something unless the console's own page sent it."""
    origin = request.headers.get("origin")
    if origin is None or urlsplit(origin).netloc != request.headers.get("host"):
        raise ApiError(403, "the console takes changes only from its own pages", "permission_error")


def may_keep_key(request: Request) -> bool:
    """A key travels only over HTTPS, or to this machine (a browser keeps a Secure cookie there too)."""
    return request.url.scheme == "https" or urlsplit("//" + request.headers.get("host", "")).hostname in (
        LOOPBACK_HOSTS
    )


def sign_in(response: Response, served: Served, principal: Principal) -> Response:
    token = served.sign_ins.issue(principal)
    response.set_cookie(
        COOKIE, token, max_age=served.sign_ins.ttl, path="/", secure=True, httponly=True, samesite="strict"
    )
    return response


def sign_out(response: Response, served: Served, request: Request) -> Response:
    if (token := request.cookies.get(COOKIE)) is not None:
        served.sign_ins.revoke(token)
    response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
    return response


class SignedIn:
    """Sets the request's principal from the cookie before any console route runs; a page asked for
    without one goes to the login page, anything else gets 401. Every answer says it may not be framed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        served: Served = scope["app"].state.served
        try:
            if request.method not in SAFE_METHODS:
                same_origin(request)
            if not scope["path"].startswith(OPEN):
                principal = principal_from_cookie(served, request)
                if principal is None:
                    await self._refused(request)(scope, receive, send)
                    return
                scope.setdefault("state", {})["principal"] = principal
        except ApiError as exc:
            await exc.response()(scope, receive, send)
            return
        await self.app(scope, receive, self._headers(send))

    @staticmethod
    def _refused(request: Request) -> Response:
        if request.method in SAFE_METHODS and "text/html" in request.headers.get("accept", ""):
            wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"{PREFIX}/login?next={url_quote(wanted, safe='')}", status_code=303)
        refusal = ApiError(401, "sign in to the console first", "authentication_error", "not_signed_in")
        return refusal.response()

    @staticmethod
    def _headers(send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    (b"content-security-policy", CSP),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-content-type-options", b"nosniff"),
                ]
            await send(message)

        return sending


CSP = b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
"""Only the console's own scripts and styles run (none inline); no page may frame it."""
