"""A local web server for the web capability's tests: `with WebServer() as web:` serves on
127.0.0.1 from a thread.

    /page            an HTML page (a heading, a link, a table, a script)
    /text            plain text
    /redirect?to=U   302 to U
    /huge            10 MB of text, streamed
    /slow            headers, then a byte every half second for a minute
    /binary          application/octet-stream
    /search?q=Q      Brave Search's JSON shape; 401 without the header X-Subscription-Token: KEY

`hits` lists the paths served, in order.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGE = b"""<html><head><title>Wolves</title><script>alert('no')</script></head><body>
<h1>Grey wolves</h1><p>They live in <a href="/packs">packs</a> of <b>six</b>.</p>
<table><tr><th>pack</th><th>size</th></tr><tr><td>north</td><td>7</td></tr></table></body></html>"""
KEY = "search-key-123456"


class _Quiet(ThreadingHTTPServer):
    """Clients that hang up early (the capped and timed-out fetches) are expected, not errors."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class WebServer:
    def __init__(self) -> None:
        self.hits: list[str] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                server.hits.append(parts.path)
                if parts.path == "/page":
                    self._send(200, "text/html; charset=utf-8", PAGE)
                elif parts.path == "/text":
                    self._send(200, "text/plain", b"just text")
                elif parts.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", query["to"][0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif parts.path == "/huge":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    for _ in range(100):
                        self.wfile.write(b"w" * 100_000)
                elif parts.path == "/slow":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    for _ in range(120):
                        if server.stopping.wait(0.5):
                            return
                        self.wfile.write(b".")
                        self.wfile.flush()
                elif parts.path == "/binary":
                    self._send(200, "application/octet-stream", b"\x00\x01")
                elif parts.path == "/search":
                    if self.headers.get("X-Subscription-Token") != KEY:
                        self._send(401, "application/json", b'{"error": "no key"}')
                        return
                    q = query["q"][0]
                    results = [
                        {"title": f"{q} {i}", "url": f"https://example.com/{i}", "description": f"about {q}"}
                        for i in (1, 2)
                    ]
                    self._send(200, "application/json", json.dumps({"web": {"results": results}}).encode())
                else:
                    self._send(404, "text/plain", b"not found")

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = _Quiet(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> WebServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
