"""Which share of `wolf serve`'s admission (limits.py) a request counts in: who sends it.

- Probes (`/healthz`, `/health`, `/ready`) and the console's login page with its assets (GET):
  none. They wait on no body and no stream (`/ready` answers from a cache: app.py).
- A known API key, as a bearer token or behind a console sign-in: that key's share.
- Without keys (`--no-auth`, loopback only): a share per bearer token presented, one for none.
- Anything else (an unknown key, a webhook until its signature checks, when hooks.py moves it to
  its hook's share): the anonymous share, a small one. Clients without a key who hold requests
  open lock out only each other, never the probes or the people signed in.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Scope

from agentwolf.protocols.auth import digest
from agentwolf.protocols.capacity import Admission, Share
from agentwolf.protocols.console.signin import OPEN, PREFIX, SAFE_METHODS, principal_from_cookie
from agentwolf.protocols.middleware import UNGUARDED
from agentwolf.protocols.served import Served


def share_of(served: Served, admission: Admission, scope: Scope) -> Share | None:
    path = scope["path"]
    if path in UNGUARDED or (scope["method"] in SAFE_METHODS and path.startswith(OPEN)):
        return None
    request = Request(scope)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    if served.open_tenant is not None:
        return admission.share(digest(token) if token else "open")
    principal = served.keys.principal(token) if token else None
    if principal is None and (path == PREFIX or path.startswith(PREFIX + "/")):
        principal = principal_from_cookie(served, request)
    return admission.share(principal.key) if principal is not None else admission.anonymous
