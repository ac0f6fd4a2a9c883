"""WolfClient's queries ride out the failures a retry clears, and only those."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowQueryFailedError

from agentwolf.client.transient import patiently

DEADLOCK = "[TMPRL1101] Potential deadlock detected: workflow didn't yield within 2 second(s)."


async def test_a_query_that_met_a_starved_activation_is_asked_again():
    """A loaded worker (or a long garbage collection) can hold an activation past the SDK's 2 s
    deadlock check: the query fails once, the worker replays the run, the next try answers."""
    tries = []

    async def query() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise WorkflowQueryFailedError(DEADLOCK)
        return "idle"

    assert await patiently(query) == "idle"
    assert len(tries) == 2


async def test_a_query_that_fails_for_good_fails_at_once():
    tries = []

    async def query() -> str:
        tries.append(1)
        raise WorkflowQueryFailedError("the status query raised: KeyError")

    with pytest.raises(WorkflowQueryFailedError, match="KeyError"):
        await patiently(query)
    assert len(tries) == 1
