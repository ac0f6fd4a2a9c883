"""`POST /hooks/{name}`: the served config's webhooks (`hooks:` in the manifest) start job runs or
prompt sessions, as the server's hook tenant.

A webhook carries no API key: it proves itself with `X-Wolf-Signature-256: sha256=<hex>` (or
GitHub's `X-Hub-Signature-256`), the HMAC-SHA256 of the raw body under the hook's secret, a variable
the worker policy allows for that tenant; with `X-Wolf-Timestamp: <unix seconds>` the HMAC covers
`<timestamp>.<body>` and a timestamp more than `TOLERANCE` seconds off is refused, so a captured
request expires. A missing or wrong signature, and a hook this server does not have, are the same
401 (no hook names to probe), decided before any Temporal call: the hook table is read once per
`TABLE_TTL` per process. Until its signature checks, a request counts in the anonymous share of the
server's admission (shares.py), then in its hook's own.

What was signed is what dedupes: the run's id derives from the body's digest (with the timestamp,
when signed), so a redelivery or a captured request sent again starts nothing, whatever
`Idempotency-Key` or `X-GitHub-Delivery` it carries (unsigned headers an attacker can change; kept by
Temporal's workflow id rules, not by this process: WolfClient.hook_fire). A sender that posts one
body twice on purpose signs a timestamp. A secret shorter than `MIN_SECRET` characters (an empty
variable, say) is no secret: the hook answers 503.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentwolf.access import Principal, TenantError
from agentwolf.client.configs import ConfigNotFound
from agentwolf.client.wolf_client import SessionNotFound
from agentwolf.config.jobs import Hook, JobError
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError, WorkerPolicy, load_policy
from agentwolf.protocols.capacity import Refused, place_of
from agentwolf.protocols.served import ApiError, Served, not_found, served_of

log = logging.getLogger(__name__)

PREFIX = "/hooks/"
SIGNATURE_HEADERS = ("x-wolf-signature-256", "x-hub-signature-256")
TIMESTAMP_HEADER = "x-wolf-timestamp"
MIN_SECRET = 16
TOLERANCE = 300
"""Seconds a signed timestamp may be off this server's clock."""
TABLE_TTL = 5.0
"""Seconds a registry config's hook table is reused: unsigned floods cost no registry queries."""
UNAUTHENTICATED = "missing or wrong signature (X-Wolf-Signature-256: sha256=<hex>)"


def signed(secret: str, body: bytes, header: str | None) -> bool:
    """`header` is `sha256=<hex HMAC-SHA256 of body>` under `secret` (compared in constant time)."""
    scheme, _, given = (header or "").partition("=")
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return scheme == "sha256" and hmac.compare_digest(expected.encode(), given.strip().lower().encode())


def signed_content(body: bytes, timestamp: str | None) -> bytes | None:
    """What the signature covers: the body, or `<timestamp>.<body>` for a timestamp within
    `TOLERANCE` of now (None for a stale or malformed one)."""
    if timestamp is None:
        return body
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > TOLERANCE:
        return None
    return timestamp.encode() + b"." + body


class HookTable:
    """The served config's hooks: a file's as they are; a registry config's read at most once per
    `TABLE_TTL` (one reader at a time), an absent config having none."""

    def __init__(self) -> None:
        self.hooks: dict[str, Hook] = {}
        self.expires = 0.0
        self.lock = asyncio.Lock()

    async def get(self, served: Served, name: str) -> Hook | None:
        if served.manifest is not None or served.config_name is None:
            return served.manifest.hooks.get(name) if served.manifest else None
        async with self.lock:
            if time.monotonic() >= self.expires:
                self.hooks = await self._read(served, served.config_name)
                self.expires = time.monotonic() + TABLE_TTL
        return self.hooks.get(name)

    @staticmethod
    async def _read(served: Served, config_name: str) -> dict[str, Hook]:
        try:
            return (await served.wolf(Principal(served.hook_tenant)).config_get(config_name)).manifest.hooks
        except ConfigNotFound:
            return {}


def routes(policy: WorkerPolicy | None = None) -> list[BaseRoute]:
    """The webhook route; `policy` decides which secrets hooks may name (default: `load_policy()`'s)."""
    rules = policy or load_policy()

    table = HookTable()

    async def hook(request: Request) -> Response:
        served = served_of(request)
        name = request.path_params["name"]
        body = await request.body()
        spec = await table.get(served, name)
        if spec is None:
            raise ApiError(401, UNAUTHENTICATED, "authentication_error")
        wolf = served.wolf(Principal(served.hook_tenant))
        try:
            secret = rules.secrets_for(wolf.tenant).resolve(f"${{{spec.secret}}}")
            if len(secret) < MIN_SECRET:
                raise PolicyError(f"{spec.secret} is shorter than {MIN_SECRET} characters")
        except (PolicyError, MissingVariable) as exc:
            log.error("hook %r cannot check signatures: %s", name, exc)
            raise ApiError(
                503, f"hook {name!r} has no usable secret on this server", "server_error"
            ) from None
        header = next((request.headers[h] for h in SIGNATURE_HEADERS if h in request.headers), None)
        timestamp = request.headers.get(TIMESTAMP_HEADER)
        content = signed_content(body, timestamp)
        if content is None or not signed(secret, content, header):
            raise ApiError(401, UNAUTHENTICATED, "authentication_error")
        if (place := place_of(request.scope)) is not None:  # counted as anonymous until now
            try:
                place.move(place.admission.share(f"hook:{name}", f"hook {name!r}"))
            except Refused as refused:
                return refused.response()
        try:
            payload = json.loads(body) if body else {}
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
        try:
            run = await wolf.hook_fire(
                name,
                spec,
                payload,
                key=("body:" if timestamp is None else "signed:") + hashlib.sha256(content).hexdigest(),
                manifest=served.manifest,
                config_name=None if served.manifest else served.config_name,
            )
        except (SessionNotFound, TenantError):
            raise not_found(f"session {spec.session!r}") from None
        except JobError as exc:
            raise ApiError(400, f"hook {name!r}: {exc}", code="invalid_payload") from None
        return JSONResponse(run.model_dump(), status_code=202)

    return [Route(PREFIX + "{name}", hook, methods=["POST"])]
