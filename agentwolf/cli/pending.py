"""What a human `wolf status` adds under its summary line: each tool call that waits for approval,
with the commands that answer it (the live view says the same when the approval is asked)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwolf.workflows.types import SessionStatus

ARGS_SHOWN = 120
"""Characters of a waiting call's arguments shown; `wolf status --json` has them whole."""


def approval_lines(status: SessionStatus, tenant: str) -> list[str]:
    """One line per waiting call: tool, arguments, call id, since when, and how to answer it."""
    flag = "" if tenant == "default" else f" --tenant {tenant}"
    lines = []
    for p in status.pending_approvals:
        args = json.dumps(p.args, ensure_ascii=False)
        args = args if len(args) <= ARGS_SHOWN else args[: ARGS_SHOWN - 3] + "..."
        since = f" since {p.asked_at:%Y-%m-%d %H:%M:%S} UTC" if p.asked_at else ""
        sid, call = status.session_id, p.call_id
        lines.append(
            f"  waits for approval{since}: {p.tool}({args}) call {call}\n"
            f"    approve: wolf approve {sid} {call}{flag} (--always: this tool for the rest of the"
            f" session); deny: wolf deny {sid} {call}{flag} --reason ..."
        )
    return lines
