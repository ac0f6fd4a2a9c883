"""Quotas: a provider endpoint's budgets shared by every worker of a task queue, kept by one
long-lived workflow per endpoint (`workflow.py`); `messages.py` holds what workers and the workflow
say to each other. The worker's side is agentwolf/hosts/quotas.py; the budgets' settings
agentwolf/config/quotas.py."""

from agentwolf.workflows.quotas.messages import (
    LIMITER_WORKFLOW,
    Ask,
    Cooldown,
    Grant,
    Learned,
    Lease,
    LimiterState,
    LimiterStatus,
    News,
    Poll,
    Polled,
    Release,
    Usage,
    Waiting,
    limiter_id,
)
from agentwolf.workflows.quotas.workflow import LimiterWorkflow

__all__ = [
    "LIMITER_WORKFLOW",
    "Ask",
    "Cooldown",
    "Grant",
    "Learned",
    "Lease",
    "LimiterState",
    "LimiterStatus",
    "LimiterWorkflow",
    "News",
    "Poll",
    "Polled",
    "Release",
    "Usage",
    "Waiting",
    "limiter_id",
]
