"""Payloads far over Temporal's 2 MB limit go to external storage; history keeps references."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_ai.messages import ToolReturnPart

from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest
from tests.support.history import payloads
from tests.support.models import Script, text, tool, user_texts

TEN_MB = 10_000_000
FIVE_MB = 5_000_000


def _largest_payload(history) -> int:
    return max((p.ByteSize() for p in payloads(history)), default=0)


async def test_a_10_mb_tool_output_and_a_5_mb_prompt_end_to_end(wolf, run_worker):
    def decide(s):
        if s.calls == 1:
            return tool("big", {"size": TEN_MB})
        (ret,) = [p for p in s.requests[-1][-1].parts if isinstance(p, ToolReturnPart)]
        return text(
            f"prompt {len(user_texts(s.requests[-1])[0])} chars, tool output {len(ret.content)} chars"
        )

    script = Script(decide)
    async with run_worker(local_models={"m": script.model}):
        # The model sees the whole output (the limit is raised): what is tested is the transport.
        sid = await wolf.submit(
            "y" * FIVE_MB, "a", make_manifest({"limits": {"tool_output_chars": 2 * TEN_MB}})
        )
        result = await wolf.result(sid)
        transcript = await wolf.transcript(sid)  # a 15 MB query answer, through the store too
        history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    assert result.output == f"prompt {FIVE_MB} chars, tool output {TEN_MB} chars"
    assert (
        sum(
            len(getattr(p, "content", ""))
            for m in transcript
            for p in m.parts
            if isinstance(getattr(p, "content", None), str)
        )
        >= TEN_MB + FIVE_MB
    )
    largest = _largest_payload(history)
    print(f"largest payload in history: {largest} bytes; history {history.to_json().__len__()} bytes of JSON")
    assert largest < 300 * 1024  # references and small payloads only: nothing near 2 MB
    store = Path(os.environ["WOLF_PAYLOAD_STORE"])
    assert any(f.stat().st_size > TEN_MB for f in store.rglob("*") if f.is_file())
