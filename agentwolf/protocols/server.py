"""Run `wolf serve`: check the binding against the keys, connect, and serve with uvicorn."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.protocols.app import create_app
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.capacity import Capacity, Limited, protocol
from agentwolf.protocols.middleware import LOOPBACK_HOSTS
from agentwolf.protocols.served import Served
from agentwolf.protocols.shares import share_of
from agentwolf.protocols.sign_ins import SignIns


class BindingRefused(ValueError):
    pass


def loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


def check_binding(host: str, keys: ApiKeys, no_auth: bool, cors_origins: Sequence[str] = ()) -> None:
    """No keys: loopback only, and only when asked for (`--no-auth`), for pages of this machine only."""
    if no_auth and keys:
        raise BindingRefused("--no-auth with API keys configured: drop one of them")
    if no_auth and not loopback(host):
        raise BindingRefused(f"--no-auth is allowed on loopback only, not on {host}")
    remote = [o for o in cors_origins if urlsplit(o).hostname not in LOOPBACK_HOSTS]
    if no_auth and remote:
        raise BindingRefused(
            f"--no-auth answers only pages served from this machine, not from {', '.join(remote)}: "
            "serve with API keys for those"
        )
    if not keys and not no_auth:
        raise BindingRefused(
            "no API keys: set WOLF_API_KEYS=key=tenant,... or `api_keys:` in the worker policy, "
            "or serve on loopback with --no-auth"
        )


def served_by(
    wolf: WolfClient,
    source: Manifest | str,
    keys: ApiKeys,
    *,
    no_auth: bool,
    cors_origins: Sequence[str] = (),
    sign_ins: SignIns | None = None,
) -> Served:
    """What a front-end process serves: `source` (a manifest, or a registry config name) to `keys`'
    callers, or as `wolf`'s tenant without keys (`no_auth`), to the pages of `cors_origins` too;
    console sign-ins by `sign_ins` (default: under `WOLF_CONSOLE_SECRET`, sign_ins.py)."""
    return Served(
        client=wolf.client,
        task_queue=wolf.task_queue,
        keys=keys,
        manifest=source if isinstance(source, Manifest) else None,
        config_name=source if isinstance(source, str) else None,
        open_tenant=wolf.tenant if no_auth else None,
        hook_tenant=wolf.tenant,
        cors_origins=tuple(dict.fromkeys(cors_origins)),
        sign_ins=sign_ins or SignIns.from_env(),
    )


async def serve(
    wolf: WolfClient,
    source: Manifest | str,
    keys: ApiKeys,
    *,
    host: str,
    port: int,
    no_auth: bool,
    cors_origins: Sequence[str] = (),
    sign_ins: SignIns | None = None,
    forwarded_allow_ips: str | None = None,
    listening: Callable[[list[str]], None] = lambda front_ends: None,
) -> None:
    check_binding(host, keys, no_auth, cors_origins)
    served = served_by(wolf, source, keys, no_auth=no_auth, cors_origins=cors_origins, sign_ins=sign_ins)
    await serve_app(
        served, host=host, port=port, forwarded_allow_ips=forwarded_allow_ips, listening=listening
    )


class CannotListen(OSError):
    """The address is taken, or not this machine's."""


FRONT_ENDS = (  # (path prefix, how the banner names it)
    ("/v1/", "OpenAI /v1"),
    ("/agui/", "AG-UI /agui/AGENT"),
    ("/mcp", "MCP /mcp"),
    ("/a2a/", "A2A /a2a/AGENT"),
    ("/hooks/", "webhooks /hooks/NAME"),
    ("/console", "web console /console"),
)


def front_ends(app: Starlette) -> list[str]:
    """The front ends `app` mounts, named as the banner says them."""
    paths = [getattr(route, "path", "") for route in app.routes]
    return [name for prefix, name in FRONT_ENDS if any(p.startswith(prefix) for p in paths)]


async def serve_app(
    served: Served,
    *,
    host: str,
    port: int,
    routes: list[BaseRoute] | None = None,
    forwarded_allow_ips: str | None = None,
    listening: Callable[[list[str]], None] = lambda front_ends: None,
) -> None:
    """`create_app(served, routes)` with uvicorn until stopped; `listening(front_ends)` once the socket
    is bound (a taken port is a CannotListen, before anything says "serving"). A TLS proxy's
    `X-Forwarded-Proto` and `X-Forwarded-For` are believed from `forwarded_allow_ips` only
    (comma-separated addresses or networks, `*` for any; default: uvicorn's, `FORWARDED_ALLOW_IPS` or
    else 127.0.0.1)."""
    app = create_app(served, routes)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    with sock:
        listening(front_ends(app))
        config = server_config(
            app,
            host=host,
            port=port,
            cors_origins=served.cors_origins,
            forwarded_allow_ips=forwarded_allow_ips,
        )
        await uvicorn.Server(config).serve(sockets=[sock])


def server_config(
    app: Starlette,
    *,
    host: str,
    port: int,
    limits: Capacity | None = None,
    cors_origins: Collection[str] = (),
    **options: Any,
) -> uvicorn.Config:
    """uvicorn serving `app` (create_app's) within `limits` (agentwolf/protocols/capacity.py), each
    request counted in the share of who sends it (shares.py): its own h11 protocol holds the header
    deadline and the connection cap; `limit_concurrency` is only a backstop (its
    503 says no Retry-After), past the caps that answer first. Refusals carry the CORS headers of
    `cors_origins`, as the app's own answers do."""
    limits = limits or Capacity()
    return uvicorn.Config(
        Limited(app, limits, partial(share_of, app.state.served), cors_origins),
        host=host,
        port=port,
        http=protocol(limits),
        limit_concurrency=limits.max_connections + 1,
        log_level="warning",
        timeout_keep_alive=15,
        timeout_graceful_shutdown=5,
        **options,
    )
