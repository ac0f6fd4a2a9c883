"""`wolf serve`'s OpenAI-compatible API with the official `openai` client, on a real dev server and worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx2 as httpx
import openai
import pytest
from openai import AsyncOpenAI

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols.openai_api import SLOT, ResponseId, TurnView, turn_view
from agentwolf.protocols.served import ApiError
from agentwolf.workflows.types import Event, Usage
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.serving import serving

ANSWER = "The quick brown fox jumps over the lazy dog and keeps on running far away."


def api(base: str, key: str = "key-a") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0)


async def test_models_and_chat_completions_not_streamed(client, task_queue, run_worker):
    script = Script(sequence(tool("add", {"a": 1, "b": 2}), text("three")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        assert [m.id for m in (await oa.models.list()).data] == ["a"]
        assert (await oa.models.retrieve("a")).id == "a"
        raw = await oa.chat.completions.with_raw_response.create(
            model="a",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": [{"type": "text", "text": "what is 1+2?"}]},
            ],
        )
        completion = raw.parse()
        assert completion.object == "chat.completion"
        assert completion.choices[0].message.content == "three"
        assert completion.choices[0].finish_reason == "stop"
        assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
        assert (
            completion.usage.total_tokens
            == completion.usage.prompt_tokens + completion.usage.completion_tokens
        )
        session = raw.headers["x-wolf-session"]
        # A stateless request: the earlier messages went as context with the last one; its system
        # message is the turn's instructions (tests/test_serve_openai_settings.py).
        request = script.requests[0][-1]
        prompt = request.parts[-1].content
        assert "[assistant] hello" in prompt and prompt.endswith("what is 1+2?")
        assert "Be brief." not in prompt and "Be brief." in (request.instructions or "")
        # It ran as a background task: the session is done, the header names it.
        wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
        assert (await wolf.result(session)).output == "three"


async def test_chat_completions_stream_and_continue_a_durable_session(client, task_queue, run_worker):
    script = Script(sequence(text(ANSWER)), chunk_delay=0.1)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        # `X-Wolf-Session: new` starts a session that stays for more turns.
        raw = await oa.chat.completions.with_raw_response.create(
            model="a",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Wolf-Session": "new"},
        )
        session = raw.headers["x-wolf-session"]
        chunks = [c async for c in raw.parse()]
        contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert len(contents) >= 3, contents  # streamed in pieces, not as one answer
        assert "".join(contents) == ANSWER
        assert chunks[0].choices[0].delta.role == "assistant"
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish == ["stop"]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        # Continuing: only the last user message reaches the session, whose transcript has the rest.
        again = await oa.chat.completions.with_raw_response.create(
            model="a",
            messages=[{"role": "user", "content": "ignored history"}, {"role": "user", "content": "more"}],
            extra_headers={"X-Wolf-Session": session},
        )
        assert again.headers["x-wolf-session"] == session
        assert again.parse().choices[0].message.content == ANSWER
        assert script.requests[-1][-1].parts[-1].content == "more"
        assert len(script.requests[-1]) == 3  # go, the answer, more: one durable conversation


async def test_heartbeats_do_not_break_the_openai_client(client, task_queue, run_worker, monkeypatch):
    """An idle stream gets comment lines; the openai client must read through them (see _Heartbeat)."""
    monkeypatch.setattr(turn_view, "HEARTBEAT", 0.05)
    script = Script(sequence(text(ANSWER)), chunk_delay=0.2)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        stream = await oa.chat.completions.create(
            model="a", messages=[{"role": "user", "content": "go"}], stream=True
        )
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == ANSWER
        events = [e async for e in await oa.responses.create(model="a", input="go", stream=True)]
        assert events[-1].type == "response.completed" and events[-1].response.output_text == ANSWER
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}) as http:
            raw = await http.get(
                f"/v1/responses/{events[-1].response.id}", params={"stream": "true", "starting_after": "1"}
            )
        assert raw.status_code == 200


async def test_responses_previous_response_id_and_streaming_events(client, task_queue, run_worker):
    script = Script(sequence(tool("add", {"a": 1, "b": 2}), text(ANSWER), text("again")), chunk_delay=0.05)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        first = await oa.responses.create(model="a", input="what is 1+2?")
        assert first.status == "completed" and first.output_text == ANSWER
        assert [i.type for i in first.output] == ["mcp_call", "message"]
        assert first.output[0].name == "add" and first.output[0].output == "3"
        assert first.usage.input_tokens > 0
        second = await oa.responses.create(
            model="a", input="and now?", previous_response_id=first.id, stream=True
        )
        events = [e async for e in second]
        types = [e.type for e in events]
        assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
        seqs = [e.sequence_number for e in events]
        assert seqs == sorted(set(seqs))
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "again"
        completed = events[-1].response
        assert completed.output_text == "again" and completed.status == "completed"
        assert ResponseId.parse(completed.id).session == ResponseId.parse(first.id).session
        # Same session: the model saw the first exchange.
        assert len(script.requests[-1]) > 3
        assert (await oa.responses.retrieve(completed.id)).output_text == "again"


async def test_background_retrieve_and_cancel(client, task_queue, run_worker):
    script = Script(sequence(text(ANSWER * 20)), chunk_delay=0.1)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        started = await oa.responses.create(model="a", input="go", background=True)
        assert started.status in ("queued", "in_progress") and started.background
        await wait_for(lambda: script.calls)
        running = await oa.responses.retrieve(started.id)
        assert running.status == "in_progress"
        cancelled = await oa.responses.cancel(started.id)
        assert cancelled.status == "cancelled"
        assert (await oa.responses.retrieve(started.id)).status == "cancelled"
        # The session stays: the next response continues it.
        script.chunk_delay = 0
        script.decide = sequence(text("fine"))
        nxt = await oa.responses.create(model="a", input="short one", previous_response_id=started.id)
        assert nxt.output_text == "fine"


async def test_a_stream_resumes_with_starting_after(client, task_queue, run_worker):
    script = Script(sequence(text(ANSWER)), chunk_delay=0.15)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        stream = await oa.responses.create(model="a", input="go", stream=True)
        seen = []
        async for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta" and len(seen) > 5:
                break
        await stream.close()  # the client goes away mid-answer
        rid = seen[0].response.id
        resumed = [
            e
            async for e in await oa.responses.retrieve(
                rid, stream=True, starting_after=seen[-1].sequence_number
            )
        ]
        assert resumed[0].sequence_number > seen[-1].sequence_number
        everything = seen + resumed
        text_ = "".join(e.delta for e in everything if e.type == "response.output_text.delta")
        assert text_ == ANSWER  # nothing lost, nothing repeated
        assert everything[-1].type == "response.completed" and everything[-1].response.output_text == ANSWER
        # Resuming again from any point of the finished turn gives the same tail.
        middle = everything[len(everything) // 2].sequence_number
        tail = [e async for e in await oa.responses.retrieve(rid, stream=True, starting_after=middle)]
        joined = "".join(
            e.delta
            for e in everything
            if e.type == "response.output_text.delta" and e.sequence_number <= middle
        )
        joined += "".join(e.delta for e in tail if e.type == "response.output_text.delta")
        assert joined == ANSWER
        # Raw SSE: ids are the sequence numbers, and Last-Event-ID resumes like starting_after.
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}) as http:
            answer = await http.get(
                f"/v1/responses/{rid}", params={"stream": "true"}, headers={"Last-Event-ID": str(middle)}
            )
        ids = [int(line[3:].strip()) for line in answer.text.splitlines() if line.startswith("id:")]
        assert ids == [e.sequence_number for e in tail]


async def test_tenant_isolation(client, task_queue, run_worker):
    script = Script(sequence(text(ANSWER * 20)), chunk_delay=0.1)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        a, b = api(base), api(base, "key-b")
        mine = await a.responses.create(model="a", input="go", background=True)
        session = ResponseId.parse(mine.id).session
        for attempt in (
            b.responses.retrieve(mine.id),
            b.responses.retrieve(mine.id, stream=True),
            b.responses.cancel(mine.id),
            b.responses.create(model="a", input="x", previous_response_id=mine.id),
            b.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "x"}],
                extra_headers={"X-Wolf-Session": session},
            ),
            b.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "x"}],
                extra_headers={"X-Wolf-Session": f"wolf/tenant-a/{session}"},
            ),
        ):
            with pytest.raises(openai.NotFoundError):
                await attempt
        for never in (
            a.responses.retrieve(f"resp_{session}_99_0"),
            a.responses.retrieve(f"resp_{session}_99_0", stream=True),
        ):
            with pytest.raises(openai.NotFoundError):  # a turn the session never had
                await never
        # A's response still runs.
        assert (await a.responses.retrieve(mine.id)).status in ("queued", "in_progress")
        await a.responses.cancel(mine.id)


async def test_hostile_and_wrong_requests_get_clear_errors(client, task_queue, run_worker):
    manifest = make_manifest({"double_texting": "reject"})
    script = Script(sequence(text(ANSWER * 20)), chunk_delay=0.1)
    async with run_worker(local_models={"m": script.model}), serving(client, task_queue, manifest) as base:
        oa = api(base)
        headers = {"Authorization": "Bearer key-a", "Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=base, headers=headers) as http:
            cases = [
                (b"{not json", {}, 400, "invalid_json"),
                (b"[1, 2]", {}, 400, "invalid_json"),
                (b'{"model": "a", "messages": []}', {}, 400, "invalid_messages"),
                (b'{"messages": [{"role": "user", "content": "x"}]}', {}, 400, "missing_model"),
                (
                    b'{"model": "a", "messages": [{"role": "user", "content": "x"}]}',
                    {"Content-Type": "text/plain"},
                    415,
                    "unsupported_media_type",
                ),
                (
                    json.dumps(
                        {
                            "model": "a",
                            "messages": [
                                {
                                    "role": "user",
                                    "content": [{"type": "image_url", "image_url": {"url": "x"}}],
                                }
                            ],
                        }
                    ).encode(),
                    {},
                    400,
                    "unsupported_content",
                ),
                (
                    json.dumps(
                        {
                            "model": "a",
                            "messages": [{"role": "user", "content": "x"}],
                            "tools": [{"type": "function", "function": {"name": "f"}}],
                        }
                    ).encode(),
                    {},
                    400,
                    "unsupported_tools",
                ),
                (b"x" * (2 << 20), {}, 413, "body_too_large"),
            ]
            for content, extra, status, code in cases:
                answer = await http.post("/v1/chat/completions", content=content, headers=extra)
                assert answer.status_code == status, (content[:60], answer.text)
                assert answer.json()["error"]["code"] == code

            # A body sent in chunks past the limit is cut off too.
            async def chunks():
                for _ in range(40):
                    yield b"x" * (64 << 10)

            answer = await http.post("/v1/responses", content=chunks())
            assert answer.status_code == 413
            assert (await http.get("/v1/responses/not-an-id")).status_code == 404
            assert (await http.get("/v1/responses/resp_nosuch_1_0")).status_code == 404
        with pytest.raises(openai.NotFoundError) as err:
            await oa.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        assert err.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError):
            await oa.responses.create(model="a", input="x", previous_response_id=42)  # type: ignore[arg-type]
        # double_texting: reject -> 409 while a turn runs.
        running = await oa.responses.create(model="a", input="go", background=True)
        await wait_for(lambda: script.calls)
        with pytest.raises(openai.ConflictError) as busy:
            await oa.responses.create(model="a", input="more", previous_response_id=running.id)
        assert busy.value.code == "session_busy"
        await oa.responses.cancel(running.id)
        # And the server still serves everyone.
        assert [m.id for m in (await oa.models.list()).data] == ["a"]


async def test_too_many_queued_prompts_get_429_with_retry_after(client, task_queue, run_worker):
    manifest = make_manifest(sessions={"max_queued": 1})
    script = Script(sequence(text(ANSWER * 20)), chunk_delay=0.1)
    async with run_worker(local_models={"m": script.model}), serving(client, task_queue, manifest) as base:
        oa = api(base)
        running = await oa.responses.create(model="a", input="go", background=True)
        await wait_for(lambda: script.calls)
        queued = await oa.responses.create(
            model="a", input="next", previous_response_id=running.id, background=True
        )
        assert (await oa.responses.retrieve(queued.id)).status == "queued"
        with pytest.raises(openai.RateLimitError) as limited:
            await oa.with_options(max_retries=0).responses.create(
                model="a", input="third", previous_response_id=running.id
            )
        assert limited.value.response.headers["retry-after"]
        await oa.responses.cancel(running.id)


def test_sequence_numbers_are_positions():
    rid = ResponseId("s_1", 3, 10)
    assert ResponseId.parse(str(rid)) == rid
    assert str(rid) == "resp_s_1_3_10"
    assert SLOT > 2_000_000  # a step's text (payloads are at most 2 MB) fits in a slot
    for bad in ("resp_x", "resp_a/b_1_0", "resp_s_x_0", "other"):
        with pytest.raises(ApiError):
            ResponseId.parse(bad)


def _synthetic_turn() -> list[tuple[int, Event]]:
    """A turn as a live follower reads it: a first attempt streams, is superseded, the retry streams again."""
    at = datetime.now(UTC)

    def e(kind: str, **kw: object) -> Event:
        return Event(kind=kind, at=at, turn_id="turn-1", step=0, **kw)  # type: ignore[arg-type]

    return [
        (0, e("turn_started", text="go")),
        (0, e("text_delta", attempt=1, index=0, text="The quick ")),
        (0, e("text_delta", attempt=1, index=10, text="brown ")),
        (0, e("attempt_superseded", attempt=1)),
        (0, e("text_delta", attempt=2, index=0, text="The quick brown fox ")),
        (0, e("text_delta", attempt=2, index=20, text="jumps.")),
        (1, e("model_text", text="The quick brown fox jumps.")),
        (
            2,
            e(
                "turn_finished",
                text="The quick brown fox jumps.",
                outcome="completed",
                usage=Usage(input_tokens=3, output_tokens=5),
            ),
        ),
    ]


def _run_view(after: int = -1, events: list[tuple[int, Event]] | None = None) -> list[tuple[int, str, dict]]:
    view = TurnView(ResponseId("s", 1, 0), "a", after=after)
    outs = view.start()
    for offset, event in events or _synthetic_turn():
        outs += view.feed(offset, event)
    return outs


def test_a_retried_attempt_continues_where_the_sent_text_ended_and_resumes_are_exact():
    outs = _run_view()
    seqs = [s for s, _, _ in outs]
    assert seqs == sorted(set(seqs))
    deltas = "".join(b["delta"] for _, t, b in outs if t == "response.output_text.delta")
    assert deltas == "The quick brown fox jumps."
    assert outs[-1][1] == "response.completed" and outs[-1][2]["response"]["usage"]["total_tokens"] == 8
    # A follower that reconnects reads the running step's text whole from its start; finished steps
    # come as one delta before their model_text. From any sequence number, the tail is exact.
    replayed = [
        (0, _synthetic_turn()[0][1]),
        (0, _synthetic_turn()[4][1].model_copy(update={"text": "The quick brown fox jumps.", "index": 0})),
        *_synthetic_turn()[6:],
    ]
    for after in seqs:
        have = "".join(b["delta"] for s, t, b in outs if t == "response.output_text.delta" and s <= after)
        for source in (None, replayed):
            tail = _run_view(after, source)
            assert all(s > after for s, _, _ in tail)
            assert (
                have + "".join(b["delta"] for _, t, b in tail if t == "response.output_text.delta")
                == "The quick brown fox jumps."
            )
            assert [t for _, t, _ in tail[-1:]] == (["response.completed"] if after < seqs[-1] else [])


def test_a_broken_subscription_is_taken_up_again_exactly():
    """`_stream` restarts the view from the turn's start after a broken subscription."""
    events = _synthetic_turn()
    view = TurnView(ResponseId("s", 1, 0), "a")
    outs = view.start()
    for offset, event in events[:3]:
        outs += view.feed(offset, event)
    view.restart(outs[-1][0])
    for offset, event in events:  # the running step's text comes again from its start
        outs += view.feed(offset, event)
    assert (
        "".join(b["delta"] for _, t, b in outs if t == "response.output_text.delta")
        == "The quick brown fox jumps."
    )
    assert [s for s, _, _ in outs] == sorted({s for s, _, _ in outs})
