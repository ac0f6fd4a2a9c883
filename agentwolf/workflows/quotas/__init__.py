"""Quotas: a provider endpoint's budgets shared by every worker of a task queue, kept by one
long-lived workflow per endpoint (`workflow.py`); `messages.py` holds what workers and the workflow
say to each other. The worker's side is agentwolf/hosts/quotas.py; the budgets' settings
agentwolf/config/quotas.py."""

from agentwolf.workflows.quotas.messages import (
    QUOTA_WORKFLOW,
    Ask,
    Cooldown,
    Grant,
    Learned,
    Lease,
    News,
    Poll,
    Polled,
    QuotaState,
    QuotaStatus,
    Release,
    Usage,
    Waiting,
    quota_workflow_id,
)
from agentwolf.workflows.quotas.workflow import QuotaWorkflow

__all__ = [
    "QUOTA_WORKFLOW",
    "Ask",
    "Cooldown",
    "Grant",
    "Learned",
    "Lease",
    "QuotaState",
    "QuotaStatus",
    "QuotaWorkflow",
    "News",
    "Poll",
    "Polled",
    "Release",
    "Usage",
    "Waiting",
    "quota_workflow_id",
]
