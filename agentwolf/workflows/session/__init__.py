"""The session workflow and its parts: `workflow.py` (SessionWorkflow: run loop, handlers), the parts
made in its `@workflow.init` (core.py, transcript_log.py, loop.py, tools.py, context.py, approvals.py,
acp.py, code.py, web.py) and their pure helpers (turn.py, turn_limits.py, cuts.py, branches.py,
output.py). Empty on purpose: the sandbox imports this package afresh for every run, and the parts are
imported passed through by their own module names (workflow.py)."""
