"""Web origins a browser may call `wolf serve` from (CORS): `--cors-origin` and the policy's
`cors_origins:`.

An origin is compared with the `Origin` header byte for byte, so it is accepted only in the form a
browser sends (`scheme://host[:port]`, lower case, no default port, no path): a near miss such as
`http://localhost:3000/` would never match, so it is refused with the form to write instead. `*`
(every origin) is accepted only when written. `null` never is: sandboxed frames, `file:` pages and
redirects all send it, so allowing it would allow any page."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

ANY_ORIGIN = "*"
DEFAULT_PORTS = {"http": 80, "https": 443}


def web_origin(value: str) -> str:
    """`value` when it is `*` or an origin as browsers send it; otherwise ValueError saying why."""
    if value == ANY_ORIGIN:
        return value
    if value.strip().lower() == "null":
        raise ValueError(
            "the `null` origin cannot be allowed: sandboxed frames and file: pages of any site send it"
        )
    canonical = _canonical(value)
    if canonical is None:
        raise ValueError(
            f"{value!r} is not a web origin: write scheme://host[:port], e.g. http://localhost:3000"
        )
    if canonical != value:
        raise ValueError(f"{value!r} is not an origin as browsers send it: write {canonical!r}")
    return value


def _canonical(value: str) -> str | None:
    """How a browser serializes the origin of `value` (None: no http(s) origin there)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in DEFAULT_PORTS or not host or parts.username is not None or parts.password is not None:
        return None
    if not host.isascii():  # browsers send an international name in its ASCII (punycode) form
        try:
            host = host.encode("idna").decode()
        except UnicodeError:
            return None
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != DEFAULT_PORTS[scheme] else "")


WebOrigin = Annotated[str, AfterValidator(web_origin)]
"""A policy field's type: one origin, checked as `web_origin` checks it."""
