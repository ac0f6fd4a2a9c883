"""An MCP server whose `answer` tool answers badly, as the call's arguments say: a real MCP server
(`--child`: tools `echo` and `answer`) behind a stdio proxy that passes every message through except
`tools/call` of `answer`, which it answers itself:

    malformed      a line that is not JSON
    not-jsonrpc    JSON that is not JSON-RPC
    invalid-utf8   bytes that are not UTF-8
    wrong-id       a result for another request id (this call is never answered)
    no-result-type a 2025-shaped result (no `resultType`) on a 2026-07-28 session
    null-result    `"result": null`
    bad-content    `content` that is not a list
    unknown-block  a content block of an unknown type
    error          a JSON-RPC error with `message` (and `code`)
    is-error       a valid tool result flagged `isError` with `text`
    huge           a valid text result of `size` copies of `char`
    slow           a valid result after `seconds`
    never          nothing at all
    crash          the whole server exits mid-call

`python hostile_server.py` (stdio). Appends each mode it served to $WOLF_HOSTILE_LOG when set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

if len(sys.argv) > 1 and sys.argv[1] == "--child":
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("wolf-hostile")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def answer(
        mode: str,
        message: str = "",
        code: int = -32000,
        text: str = "",
        size: int = 0,
        char: str = "x",
        seconds: float = 0,
    ) -> str:
        """Answers as `mode` says (the proxy in front of this server answers it)."""
        return "the proxy did not intercept this call"

    server.run("stdio")
    sys.exit(0)


out = sys.stdout.buffer
lock = threading.Lock()


def send(data: bytes) -> None:
    with lock:
        out.write(data)
        out.flush()


def reply(request_id: object, **body: object) -> None:
    send(json.dumps({"jsonrpc": "2.0", "id": request_id, **body}, ensure_ascii=False).encode() + b"\n")


def result(text: str, *, is_error: bool = False) -> dict:
    """A valid tool result for the protocol the client negotiates here (2026-07-28)."""
    valid = {"content": [{"type": "text", "text": text}], "isError": is_error, "resultType": "complete"}
    return (
        valid if is_error else {**valid, "structuredContent": {"result": text}}
    )  # `answer` declares an output schema


# Modes whose answer does not depend on the call: raw bytes instead of a message, or a fixed result.
RAW = {
    "malformed": b"this is not json {{{\n",
    "not-jsonrpc": b"[1, 2, 3]\n",
    "invalid-utf8": b"\xff\xfe\xfa not utf-8 \x80\n",
}
FIXED: dict[str, object] = {
    "no-result-type": {"content": [{"type": "text", "text": "2025 style"}], "isError": False},
    "null-result": None,
    "bad-content": {"content": "not a list", "resultType": "complete"},
    "unknown-block": {"content": [{"type": "hologram", "payload": [1, 2, 3]}], "resultType": "complete"},
}


def hostile(request_id: object, args: dict) -> None:
    mode = args.get("mode")
    if log := os.environ.get("WOLF_HOSTILE_LOG"):
        with open(log, "a") as f:
            f.write(f"{mode}\n")
    if mode in RAW:
        send(RAW[mode])
    elif mode in FIXED:
        reply(request_id, result=FIXED[mode])
    elif mode == "wrong-id":
        reply(
            f"{request_id}-other" if isinstance(request_id, str) else int(request_id) + 1000,  # type: ignore[arg-type]
            result=result("not yours"),
        )
    elif mode == "error":
        reply(request_id, error={"code": int(args.get("code", -32000)), "message": args.get("message", "")})
    elif mode == "is-error":
        reply(request_id, result=result(str(args.get("text", "")), is_error=True))
    elif mode == "huge":
        text = str(args.get("char") or "x") * int(args.get("size", 0))
        reply(request_id, result=result(text))
    elif mode == "slow":
        time.sleep(float(args.get("seconds", 0)))
        reply(request_id, result=result("slow but fine"))
    elif mode == "crash":
        os._exit(3)
    elif mode != "never":
        reply(request_id, error={"code": -32602, "message": f"unknown mode {mode!r}"})


def from_client(child: subprocess.Popen[bytes]) -> None:
    assert child.stdin is not None
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if (
            isinstance(message, dict)
            and message.get("method") == "tools/call"
            and (message.get("params") or {}).get("name") == "answer"
        ):
            args = message["params"].get("arguments") or {}
            threading.Thread(target=hostile, args=(message.get("id"), args), daemon=True).start()
            continue
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()


def main() -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    threading.Thread(target=from_client, args=(child,), daemon=True).start()
    assert child.stdout is not None
    for line in child.stdout:
        send(line)
    os._exit(child.wait())


if __name__ == "__main__":
    main()
