"""Names clients and workers share, kept free of imports so the CLI can read them without loading
the worker (see docs/architecture.md)."""

TASK_QUEUE = "agentwolf"
"""The task queue sessions run on unless a worker and its clients name another."""
