"""Cached sessions share their manifest and compiled agent (agentwolf/workflows/turn.py `shared`):
one instance per exact content, so sharing is invisible to a run."""

from __future__ import annotations

import gc

from agentwolf.config.manifest import Manifest
from agentwolf.workflows import turn


def _manifest(*agents: str) -> Manifest:
    return Manifest.model_validate({"agents": {a: {"model": "test"} for a in agents}})


def test_equal_content_is_one_instance():
    first, second = _manifest("a", "b"), _manifest("a", "b")
    assert first is not second
    assert turn.shared(first) is first
    assert turn.shared(second) is first


def test_same_identity_in_another_order_is_not_shared():
    """Dict order is part of what a run can observe (iteration, what it sends on): only equal JSON is shared."""
    ab, ba = turn.shared(_manifest("a", "b")), _manifest("b", "a")
    assert ab.identity == ba.identity
    assert turn.shared(ba) is ba
    assert list(turn.shared(_manifest("b", "a")).agents) == ["b", "a"]


def test_unused_models_leave_the_table():
    before = len(turn._SHARED)
    turn.shared(_manifest("gone"))
    gc.collect()
    assert len(turn._SHARED) == before
