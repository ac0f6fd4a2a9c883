"""`POST /hooks/{name}`: the served config's webhooks (`hooks:` in the manifest) start job runs or
prompt sessions, as the server's hook tenant.

A webhook carries no API key: it proves itself with `X-Wolf-Signature-256: sha256=<hex>` (or
GitHub's `X-Hub-Signature-256`), the HMAC-SHA256 of the raw body under the hook's secret, a variable
the worker policy allows for that tenant. A missing or wrong signature is 401 and starts nothing.
`Idempotency-Key` (or GitHub's `X-GitHub-Delivery`) makes a redelivery start nothing: 202 with the
first request's ids, kept by Temporal's workflow id rules, not by this process (WolfClient.hook_fire).
Without a key the body's digest is the key, so a captured request sent again starts nothing either
(a sender that posts the same body twice on purpose must give each its own key). A secret shorter
than `MIN_SECRET` characters (an empty variable, say) is no secret: the hook answers 503.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentwolf.client.wolf_client import SessionNotFound
from agentwolf.config.jobs import JobError
from agentwolf.config.manifest import Manifest
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError, WorkerPolicy, load_policy
from agentwolf.protocols.app import ApiError, Served, not_found, served_of
from agentwolf.protocols.auth import Principal
from agentwolf.tenants import TenantError

log = logging.getLogger(__name__)

PREFIX = "/hooks/"
SIGNATURE_HEADERS = ("x-wolf-signature-256", "x-hub-signature-256")
KEY_HEADERS = ("idempotency-key", "x-github-delivery")
MIN_SECRET = 16


def signed(secret: str, body: bytes, header: str | None) -> bool:
    """`header` is `sha256=<hex HMAC-SHA256 of body>` under `secret` (compared in constant time)."""
    scheme, _, given = (header or "").partition("=")
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return scheme == "sha256" and hmac.compare_digest(expected.encode(), given.strip().lower().encode())


def routes(policy: WorkerPolicy | None = None) -> list[BaseRoute]:
    """The webhook route; `policy` decides which secrets hooks may name (default: `load_policy()`'s)."""
    rules = policy or load_policy()

    async def hook(request: Request) -> Response:
        served = served_of(request)
        name = request.path_params["name"]
        wolf = served.wolf(Principal(served.hook_tenant))
        manifest = await _manifest(served)
        spec = manifest.hooks.get(name) if manifest else None
        if spec is None:
            raise not_found(f"hook {name!r}")
        body = await request.body()
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
        if not signed(secret, body, header):
            raise ApiError(
                401, "missing or wrong signature (X-Wolf-Signature-256: sha256=<hex>)", "authentication_error"
            )
        try:
            payload = json.loads(body) if body else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
        key = next((request.headers[h] for h in KEY_HEADERS if request.headers.get(h)), None)
        key = key or "body:" + hashlib.sha256(body).hexdigest()
        try:
            run = await wolf.hook_fire(
                name,
                spec,
                payload,
                key=key,
                manifest=served.manifest,
                config_name=None if served.manifest else served.config_name,
            )
        except (SessionNotFound, TenantError):
            raise not_found(f"session {spec.session!r}") from None
        except JobError as exc:
            raise ApiError(400, f"hook {name!r}: {exc}", code="invalid_payload") from None
        return JSONResponse(run.model_dump(), status_code=202)

    return [Route(PREFIX + "{name}", hook, methods=["POST"])]


async def _manifest(served: Served) -> Manifest | None:
    if served.manifest is not None:
        return served.manifest
    if served.config_name is None:
        return None
    return (await served.wolf(Principal(served.hook_tenant)).config_get(served.config_name)).manifest
