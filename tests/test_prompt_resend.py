"""A prompt whose update call a busy server cuts (`RPCError: context canceled`, seen under load) is
sent again with the same update id, and Temporal answers the repeat with the first one's outcome:
the turn runs once."""

from __future__ import annotations

from typing import Any

from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowUpdateInput,
    WorkflowUpdateHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.client.wolf_client import WolfClient
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text, user_texts
from tests.support.polls import idle


class CutAfterSending(Interceptor):
    """The server takes the first prompt update, then its answer is lost as under load."""

    def __init__(self) -> None:
        self.update_ids: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Cut(next, self.update_ids)


class _Cut(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, update_ids: list[str]) -> None:
        super().__init__(next)
        self.update_ids = update_ids

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle[Any]:
        handle = await super().start_workflow_update(input)
        self.update_ids.append(input.id or "")
        if len(self.update_ids) == 1:
            await handle.result()  # taken by the session: only its answer is lost
            raise RPCError("context canceled", RPCStatusCode.UNKNOWN, b"")
        return handle


async def test_a_prompt_cut_on_its_way_is_sent_again_and_runs_once(client, task_queue, run_worker):
    script = Script(sequence(text("hello"), text("again")))
    cutting = CutAfterSending()
    wolf = WolfClient(Client(**{**client.config(), "interceptors": [cutting]}), task_queue=task_queue)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        turn = await wolf.prompt(sid, "say hello")
        await wait_for(lambda: idle(wolf, sid, turns=1))
        transcript = await wolf.transcript(sid)
    assert turn
    assert len(cutting.update_ids) == 2 and len(set(cutting.update_ids)) == 1  # sent again, same id
    assert user_texts(transcript) == ["say hello"]
    assert len(script.requests) == 1
