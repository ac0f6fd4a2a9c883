"""What keeps a cached session small (agentwolf/workflows/session/turn.py): sessions share their manifest and
compiled agent (`shared`: one instance per exact content, so sharing is invisible to a run), and the
event stream keeps its log serialized (`CompactLog`: reads give back equal items)."""

from __future__ import annotations

import gc
import weakref

from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStreamItem

from agentwolf.config.manifest import Manifest
from agentwolf.workflows.session import turn


def _manifest(*agents: str) -> Manifest:
    return Manifest.model_validate({"agents": {a: {"model": "test"} for a in agents}})


def test_equal_content_is_one_instance():
    first, second = _manifest("a", "b"), _manifest("a", "b")
    assert first is not second
    assert turn.shared(first) is first
    assert turn.shared(second) is first


def test_same_identity_in_another_order_is_not_shared():
    """Dict order is part of what a run can observe (iteration, what it sends on): only equal JSON is
    shared."""
    ab, ba = turn.shared(_manifest("a", "b")), _manifest("b", "a")
    assert ab.identity == ba.identity
    assert turn.shared(ba) is ba
    assert list(turn.shared(_manifest("b", "a")).agents) == ["b", "a"]


def test_the_table_keeps_no_model_alive():
    model = _manifest("gone")
    assert turn.shared(model) is model
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_compact_log_reads_back_equal_items():
    items = [
        WorkflowStreamItem(
            topic=f"t{i % 2}",
            data=Payload(metadata={"encoding": b"json/plain", "n": str(i).encode()}, data=b"x" * i),
        )
        for i in range(5)
    ]
    log = turn.CompactLog(items[:3])
    log.append(items[3])
    log.append(items[4])
    assert len(log) == 5
    assert log[1] == items[1] and log[-1] == items[4]
    assert log[2:] == items[2:] and log[:0] == []
    assert list(log) == items
