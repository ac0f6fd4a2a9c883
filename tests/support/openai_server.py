"""A scripted OpenAI-compatible server on 127.0.0.1 (Responses API, which pydantic-ai's `openai:`
models use, and Chat Completions, for `openai-chat:`), so the real provider code runs in tests.
`reply(request) -> Reply` decides each answer; `tool_outputs(request)` reads either shape.

A request with `"stream": true` is answered as OpenAI streams: Chat Completions as SSE
`data: {chat.completion.chunk}` lines ending with `data: [DONE]` (usage in a last, choice-less chunk when
`stream_options.include_usage` is set, which pydantic-ai always sends); Responses as SSE events
`response.created`, `response.in_progress`, then per output item `response.output_item.added`,
its deltas (`response.reasoning_summary_text.delta`, `response.output_text.delta`,
`response.function_call_arguments.delta`) and done events, and `response.completed` with usage.
Thinking streams first, then text, then the tool calls (their JSON arguments in word-sized pieces).
Each delta waits `Reply.interval` after the one before, is written and flushed on its own, and
carries its send time (`time.time()`) as `"x_sent_at"`; the server also records it in `sent`
(text deltas) and `sent_events` (every delta). A client that disconnects mid-stream is counted
in `disconnects`."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.rate_limit import RateLimit


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay: float = 0.0
    """Seconds before the answer starts (before the response headers, streaming or not)."""
    status: int = 200
    """Not 200: an OpenAI error body with this status (never streamed), `text` as its message."""
    chunks: list[str] | None = None
    """Streaming only: the text deltas, in order (`text` defaults to their join). None: `text` split
    into word-sized chunks (each word with its surrounding whitespace)."""
    interval: float = 0.0
    """Streaming only: seconds between consecutive deltas (thinking, text and tool arguments)."""
    code: str | None = None
    """Not 200: the error's `code` (OpenAI's `context_length_exceeded`, ...)."""
    input_tokens: int | None = None
    """The usage's input tokens (default: a fixed figure)."""
    thinking: str | None = None
    """Reasoning before the text: streamed as reasoning summary deltas (Responses) or
    `reasoning_content` deltas (Chat Completions), both in word-sized chunks; non-streaming, a
    reasoning item / `reasoning_content` field."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers."""

    def __post_init__(self) -> None:
        if self.chunks is not None:
            joined = "".join(self.chunks)
            if self.text is None:
                self.text = joined
            elif self.text != joined:
                raise ValueError("Reply.chunks must join to Reply.text")

    def text_chunks(self) -> list[str]:
        if self.chunks is not None:
            return list(self.chunks)
        return words(self.text or "")


def words(text: str) -> list[str]:
    """`text` in word-sized pieces that join back to it."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


USAGE_RESPONSES = {
    "input_tokens": 100,
    "output_tokens": 20,
    "total_tokens": 120,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}
USAGE_CHAT = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}

# One streamed event: the JSON object, and for a delta its kind ("thinking", "text", "tool_args") and text.
_Event = tuple[dict[str, Any], str | None, str]


class ScriptedOpenAI:
    def __init__(
        self,
        reply: Callable[[dict[str, Any]], Reply],
        window: int | None = None,
        limit: RateLimit | None = None,
    ) -> None:
        """`window`: a context window in tokens (a request's JSON length / 4): a request past it is
        answered as OpenAI does, 400 `context_length_exceeded`, without asking `reply`, and answers
        report the request's tokens as their input usage. `limit`: provider rate limits
        (tests/support/rate_limit.py): refused requests never reach `reply`."""
        self.reply = reply
        self.window = window
        self.limit = limit
        self.tokens: list[int] = []
        """Window mode: every request's size in tokens, refused ones too."""
        self.refused = 0
        """Window mode: requests answered 400 as too long."""
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        """Each request's HTTP headers (which API key arrived)."""
        self.sent: list[tuple[float, str]] = []
        """Every streamed text delta as (time.time() just before it was written, delta), in order."""
        self.sent_events: list[tuple[float, str, str]] = []
        """Every streamed delta as (send time, kind: "thinking" | "text" | "tool_args", delta)."""
        self.disconnects = 0
        """Streams whose client went away before the last event."""
        self._calls = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                answer = outer._answer(body, self.headers.get("Authorization", ""))
                if answer.delay:
                    time.sleep(answer.delay)
                with outer._lock:
                    outer._calls += 1
                    n = outer._calls
                model = body.get("model", "scripted")
                responses_api = self.path.endswith("/responses")
                if body.get("stream") is True and answer.status == 200:
                    if responses_api:
                        events = outer._response_events(answer, model, n)
                    else:
                        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                        events = outer._completion_events(answer, model, n, include_usage)
                    self._stream(events, answer.interval, responses_api, answer.headers)
                    return
                if responses_api:
                    payload = outer._response(answer, model, n)
                else:
                    payload = outer._completion(answer, model, n)
                data = json.dumps(payload).encode()
                self.send_response(answer.status)
                _send_headers(self, answer.headers)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(
                self, events: Iterator[_Event], interval: float, named: bool, headers: dict[str, str]
            ) -> None:
                # HTTP/1.0 without Content-Length: the body ends when the connection closes.
                self.close_connection = True
                try:
                    self.send_response(200)
                    _send_headers(self, headers)
                    self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                    self.send_header("Cache-Control", "no-cache")
                    self.end_headers()
                    self.wfile.flush()
                    first_delta = True
                    for event, kind, delta in events:
                        if kind is not None:
                            if not first_delta and interval:
                                time.sleep(interval)
                            first_delta = False
                        sent_at = time.time()
                        event["x_sent_at"] = sent_at
                        head = f"event: {event['type']}\n" if named else ""
                        self.wfile.write(f"{head}data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                        if kind is not None:
                            outer.sent_events.append((sent_at, kind, delta))
                            if kind == "text":
                                outer.sent.append((sent_at, delta))
                    if not named:
                        self.wfile.write(b"data: [DONE]\n\n")
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    outer.disconnects += 1

        self._path = uuid.uuid4().hex[:12]
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _answer(self, body: dict[str, Any], key: str) -> Reply:
        """`reply`'s answer; in window mode, OpenAI's refusal of a request past the window; under
        `limit`, a 429 with the limit's headers."""
        if self.window is not None:
            tokens = len(json.dumps(body)) // 4
            self.tokens.append(tokens)
            if tokens > self.window:
                self.refused += 1
                return Reply(
                    status=400,
                    code="context_length_exceeded",
                    text=f"This model's maximum context length is {self.window} tokens. However, your "
                    f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
                )
            if self.limit is None:
                return dataclasses.replace(self.reply(body), input_tokens=tokens)
        if self.limit is None:
            return self.reply(body)
        tokens, headers, refused = self.limit.admit(body, key)
        if refused:
            return Reply(text="Rate limit reached", status=429, headers=headers)
        answer = self.reply(body)
        return dataclasses.replace(answer, input_tokens=tokens, headers={**headers, **answer.headers})

    @property
    def base_url(self) -> str:
        """Under a path of its own: another test's server on the same port later is another provider
        endpoint (quotas keeps a quota workflow per endpoint on the server's test's queue)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/{self._path}/v1"

    # Responses API

    def _response(self, answer: Reply, model: str, n: int | None = None) -> dict[str, Any]:
        n = self._calls if n is None else n
        if answer.status != 200:
            return _error(answer)
        output: list[dict[str, Any]] = []
        if answer.thinking is not None:
            output.append(_reasoning_item(n, answer.thinking))
        if answer.text is not None:
            output.append(_message_item(n, answer.text))
        for i, (name, args) in enumerate(answer.tool_calls):
            output.append(_function_call_item(n, i, name, json.dumps(args)))
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": _usage(USAGE_RESPONSES, "input_tokens", answer.input_tokens),
        }

    def _response_events(self, answer: Reply, model: str, n: int) -> Iterator[_Event]:
        final = self._response(answer, model, n)
        start = {**final, "status": "in_progress", "output": [], "usage": None}
        seq = iter(range(1_000_000))

        def event(type_: str, **fields: Any) -> dict[str, Any]:
            return {"type": type_, "sequence_number": next(seq), **fields}

        yield event("response.created", response=copy.deepcopy(start)), None, ""
        yield event("response.in_progress", response=copy.deepcopy(start)), None, ""
        for index, item in enumerate(final["output"]):
            item_id = item["id"]
            at = {"item_id": item_id, "output_index": index}
            if item["type"] == "reasoning":
                thinking = item["summary"][0]["text"]
                yield (
                    event("response.output_item.added", output_index=index, item={**item, "summary": []}),
                    None,
                    "",
                )
                empty = {"type": "summary_text", "text": ""}
                yield (
                    event("response.reasoning_summary_part.added", **at, summary_index=0, part=empty),
                    None,
                    "",
                )
                for piece in words(thinking):
                    e = event("response.reasoning_summary_text.delta", **at, summary_index=0, delta=piece)
                    yield e, "thinking", piece
                yield (
                    event("response.reasoning_summary_text.done", **at, summary_index=0, text=thinking),
                    None,
                    "",
                )
                part = {"type": "summary_text", "text": thinking}
                yield (
                    event("response.reasoning_summary_part.done", **at, summary_index=0, part=part),
                    None,
                    "",
                )
            elif item["type"] == "message":
                text = item["content"][0]["text"]
                added = {**item, "status": "in_progress", "content": []}
                yield event("response.output_item.added", output_index=index, item=added), None, ""
                empty = {"type": "output_text", "text": "", "annotations": []}
                yield event("response.content_part.added", **at, content_index=0, part=empty), None, ""
                for piece in answer.text_chunks():
                    e = event("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
                    yield e, "text", piece
                yield (
                    event("response.output_text.done", **at, content_index=0, text=text, logprobs=[]),
                    None,
                    "",
                )
                part = {"type": "output_text", "text": text, "annotations": []}
                yield event("response.content_part.done", **at, content_index=0, part=part), None, ""
            else:
                arguments = item["arguments"]
                added = {**item, "status": "in_progress", "arguments": ""}
                yield event("response.output_item.added", output_index=index, item=added), None, ""
                for piece in words(arguments):
                    yield (
                        event("response.function_call_arguments.delta", **at, delta=piece),
                        "tool_args",
                        piece,
                    )
                yield event("response.function_call_arguments.done", **at, arguments=arguments), None, ""
            yield event("response.output_item.done", output_index=index, item=item), None, ""
        yield event("response.completed", response=final), None, ""

    # Chat Completions

    def _completion(self, answer: Reply, model: str, n: int | None = None) -> dict[str, Any]:
        n = self._calls if n is None else n
        if answer.status != 200:
            return _error(answer)
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.thinking is not None:
            message["reasoning_content"] = answer.thinking
        if answer.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(answer.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if answer.tool_calls else "stop",
                }
            ],
            "usage": _usage(USAGE_CHAT, "prompt_tokens", answer.input_tokens),
        }

    def _completion_events(self, answer: Reply, model: str, n: int, include_usage: bool) -> Iterator[_Event]:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            if include_usage:
                c["usage"] = None
            return c

        yield chunk({"role": "assistant", "content": "", "refusal": None}), None, ""
        for piece in words(answer.thinking or ""):
            yield chunk({"reasoning_content": piece}), "thinking", piece
        for piece in answer.text_chunks():
            yield chunk({"content": piece}), "text", piece
        for i, (name, args) in enumerate(answer.tool_calls):
            call = {
                "index": i,
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            yield chunk({"tool_calls": [call]}), None, ""
            for piece in words(json.dumps(args)):
                yield (
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    "tool_args",
                    piece,
                )
        yield chunk({}, "tool_calls" if answer.tool_calls else "stop"), None, ""
        if include_usage:
            usage = _usage(USAGE_CHAT, "prompt_tokens", answer.input_tokens)
            yield {**chunk({}), "choices": [], "usage": usage}, None, ""

    def __enter__(self) -> ScriptedOpenAI:  # noqa: PYI034
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _error(answer: Reply) -> dict[str, Any]:
    error = {"message": answer.text or "scripted failure", "type": "invalid_request_error"}
    return {"error": error | ({"code": answer.code} if answer.code else {})}


def _send_headers(handler: BaseHTTPRequestHandler, headers: dict[str, str]) -> None:
    for name, value in headers.items():
        handler.send_header(name, value)


def _usage(usage: dict[str, Any], input_key: str, input_tokens: int | None) -> dict[str, Any]:
    return dict(usage) if input_tokens is None else {**usage, input_key: input_tokens}


def _reasoning_item(n: int, thinking: str) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": thinking}]
    return {"type": "reasoning", "id": f"rs_{n}", "summary": summary, "status": "completed"}


def _message_item(n: int, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _function_call_item(n: int, i: int, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{n}_{i}",
        "call_id": f"call_{n}_{i}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def tool_outputs(request: dict[str, Any]) -> list[str]:
    """The tool results the model was sent, in order (Responses or Chat Completions shape)."""
    if "input" in request:
        return [item["output"] for item in request["input"] if item.get("type") == "function_call_output"]
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]
