"""A local web server for the web capability's tests: `with WebServer() as web:` serves on
127.0.0.1 from a thread.

    /page            an HTML page (a heading, a link, a table, a script)
    /text            plain text
    /redirect?to=U   302 to U
    /loop            302 to itself
    /huge            10 MB of text, streamed
    /slow            headers, then a byte every half second for a minute
    /binary          application/octet-stream
    /pdf             a one-page PDF saying "Wolves hunt in packs"
    /search?q=Q      Brave Search's JSON shape; 401 without the header X-Subscription-Token: KEY
    /bomb            50 MB of text in 50 KB of gzip (a decompression bomb)
    /long            an HTML page of 1.3 MB: 30,000 numbered paragraphs

`?encoding=gzip` (or `deflate`) sends any of these so encoded, as most sites do; `?encoding=br` says
br over bytes that are not.

`hits` lists the paths served, in order.
"""

from __future__ import annotations

import functools
import gzip
import json
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGE = b"""<html><head><title>Wolves</title><script>alert('no')</script></head><body>
<h1>Grey wolves</h1><p>They live in <a href="/packs">packs</a> of <b>six</b>.</p>
<img alt="a wolf" src="data:image/png;base64,iVBORw0KGgo=">
<table><tr><th>pack</th><th>size</th></tr><tr><td>north</td><td>7</td></tr></table></body></html>"""
KEY = "search-key-123456"


def pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (Helvetica), with a correct cross-reference table; a 2 KB comment
    makes it larger than the smallest `max_bytes`."""
    stream = f"BT /F1 24 Tf 72 700 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n%" + b"w" * 2000 + b"\n"), []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@functools.cache
def bomb() -> bytes:
    """50 MB of text as about 50 KB of gzip."""
    return gzip.compress(b"w" * 50_000_000)


class _Quiet(ThreadingHTTPServer):
    """Clients that hang up early (the capped and timed-out fetches) are expected, not errors."""

    daemon_threads = True
    owner: WebServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    server: _Quiet
    encoding = ""

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        parts = urlsplit(self.path)
        self.server.owner.hits.append(parts.path)
        serve = getattr(self, f"_{parts.path.strip('/')}", None)
        query = parse_qs(parts.query)
        self.encoding = query.get("encoding", [""])[0]
        if serve is None:
            self._send(404, "text/plain", b"not found")
        else:
            serve(query)

    def _page(self, query: dict[str, list[str]]) -> None:
        self._send(200, "text/html; charset=utf-8", PAGE)

    def _text(self, query: dict[str, list[str]]) -> None:
        self._send(200, "text/plain", b"just text")

    def _redirect(self, query: dict[str, list[str]]) -> None:
        self.send_response(302)
        self.send_header("Location", query["to"][0])
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _loop(self, query: dict[str, list[str]]) -> None:
        self._redirect({"to": ["/loop"]})

    def _huge(self, query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        for _ in range(100):
            self.wfile.write(b"w" * 100_000)

    def _slow(self, query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        for _ in range(120):
            if self.server.owner.stopping.wait(0.5):
                return
            self.wfile.write(b".")
            self.wfile.flush()

    def _pdf(self, query: dict[str, list[str]]) -> None:
        self._send(200, "application/pdf", pdf("Wolves hunt in packs"))

    def _binary(self, query: dict[str, list[str]]) -> None:
        self._send(200, "application/octet-stream", b"\x00\x01")

    def _search(self, query: dict[str, list[str]]) -> None:
        if self.headers.get("X-Subscription-Token") != KEY:
            self._send(401, "application/json", b'{"error": "no key"}')
            return
        q = query["q"][0]
        results = [
            {"title": f"{q} {i}", "url": f"https://example.com/{i}", "description": f"about {q}"}
            for i in (1, 2)
        ]
        self._send(200, "application/json", json.dumps({"web": {"results": results}}).encode())

    def _long(self, query: dict[str, list[str]]) -> None:
        paragraphs = "".join(f"<p>paragraph {i} about <b>wolves</b></p>" for i in range(30_000))
        self._send(200, "text/html", f"<html><body>{paragraphs}</body></html>".encode())

    def _bomb(self, query: dict[str, list[str]]) -> None:
        self._send(200, "text/plain", bomb(), "gzip")

    def _send(self, status: int, kind: str, body: bytes, encoded: str = "") -> None:
        encoders: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "deflate": zlib.compress}
        encode = encoders.get(self.encoding, bytes if self.encoding else None)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if encode is not None and not encoded:
            body, encoded = encode(body), self.encoding
        if encoded:
            self.send_header("Content-Encoding", encoded)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class WebServer:
    def __init__(self) -> None:
        self.hits: list[str] = []
        self.stopping = threading.Event()
        self.httpd = _Quiet(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> WebServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
