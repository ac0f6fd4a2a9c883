"""The web console on `wolf serve` (/console): sessions, a live session view with steer, interrupt
and inline approvals, an approvals inbox and usage, in a browser. Server-rendered pages plus one small
script (static/console.js, no build step, nothing fetched from elsewhere); live updates come over the
session's event stream as SSE; no data of its own (Temporal visibility and the sessions answer)."""

from agentwolf.protocols.console.pages import routes

__all__ = ["routes"]
