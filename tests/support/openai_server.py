"""A scripted OpenAI-compatible server on 127.0.0.1 (Responses API, which pydantic-ai's `openai:`
models use, and Chat Completions, for `openai-chat:`), so the real provider code runs in tests.
`reply(request) -> Reply` decides each answer; `tool_outputs(request)` reads either shape."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay: float = 0.0
    status: int = 200


class ScriptedOpenAI:
    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        """Each request's HTTP headers (which API key arrived)."""
        self._calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                answer = outer.reply(body)
                if answer.delay:
                    time.sleep(answer.delay)
                outer._calls += 1
                model = body.get("model", "scripted")
                if self.path.endswith("/responses"):
                    payload = outer._response(answer, model)
                else:
                    payload = outer._completion(answer, model)
                data = json.dumps(payload).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _response(self, answer: Reply, model: str) -> dict[str, Any]:
        if answer.status != 200:
            return {"error": {"message": answer.text or "scripted failure", "type": "invalid_request_error"}}
        output: list[dict[str, Any]] = []
        if answer.text is not None:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{self._calls}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            )
        for i, (name, args) in enumerate(answer.tool_calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{self._calls}_{i}",
                    "call_id": f"call_{self._calls}_{i}",
                    "name": name,
                    "arguments": json.dumps(args),
                    "status": "completed",
                }
            )
        return {
            "id": f"resp_{self._calls}",
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 100,
                "output_tokens": 20,
                "total_tokens": 120,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    def _completion(self, answer: Reply, model: str) -> dict[str, Any]:
        if answer.status != 200:
            return {"error": {"message": answer.text or "scripted failure", "type": "invalid_request_error"}}
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{self._calls}_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(answer.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{self._calls}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if answer.tool_calls else "stop"}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }

    def __enter__(self) -> ScriptedOpenAI:  # noqa: PYI034
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def tool_outputs(request: dict[str, Any]) -> list[str]:
    """The tool results the model was sent, in order (Responses or Chat Completions shape)."""
    if "input" in request:
        return [item["output"] for item in request["input"] if item.get("type") == "function_call_output"]
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]
