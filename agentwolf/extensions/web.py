"""The web capability on the worker: `web_fetch` (a page as Markdown) and `web_search`.

Where a fetch may go is the worker policy's decision, never the manifest's or the model's: each hop
(the URL, then every redirect) resolves its host, refuses loopback, link-local and private addresses
unless `web_private` names them, and connects to the address it checked (the hostname still names
the site for TLS and `Host`), so a name that resolves differently on a second look gains nothing.
The search API's URL, which the manifest names, goes through the same check.

Pages are read up to a byte cap, counted on the decoded body: gzip and deflate (what the request
asks for) are undone with zlib's `max_length`, so a small compressed body cannot grow past the cap in
memory. The manifest's `max_bytes` and the model's `max_chars` are held to the worker policy's
ceilings, and the whole fetch, redirects and parse included, ends at a deadline.

HTML becomes Markdown with html-to-markdown (a Rust converter without dependencies: fast on pages of
megabytes, drops scripts and styles, keeps tables and links); a PDF becomes its text with pypdf
(pure Python, no dependencies), page by page until `max_chars`; of a long HTML page only as much as
`max_chars` can use is converted. Both run on a small pool of their
own, so big pages never take the threads DNS lookups and the rest of the worker share; a parse still
waiting when its fetch's deadline passes is dropped.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import io
import json
import os
import socket
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import html_to_markdown
import httpx
import pypdf

from agentwolf.config.manifest import WebSearchSettings, WebSettings
from agentwolf.config.policy import PolicyError, Secrets, WorkerPolicy, is_private

MAX_REDIRECTS = 5
ACCEPT = "text/html, text/*;q=0.9, */*;q=0.5"
ACCEPT_ENCODING = "gzip, deflate"
"""What zlib undoes with a bound; httpx would also offer br and zstd when installed, whose decoders
cannot bound what one chunk grows to."""
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
HTML_PER_CHAR, MIN_HTML = 50, 1_000_000
"""How much HTML is converted per character asked for (markup, scripts and styles make a page's HTML
many times its text), and at least: the rest is cut before the conversion, the costly part."""
PARSERS = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="wolf-web")
"""Where pages become text: bounded, and apart from the loop's default executor."""


class WebError(Exception):
    """Why a fetch or search gave nothing: the model reads it as the tool's error."""


async def fetch(url: str, max_chars: int, settings: WebSettings, policy: WorkerPolicy) -> str:
    """The page at `url` as Markdown (text as it is), at most `max_chars` characters (and never more
    than the policy's `web_max_chars`)."""
    try:
        async with asyncio.timeout(settings.timeout_s):
            return await _fetch(url, min(max_chars, policy.web_max_chars), settings, policy)
    except TimeoutError:
        raise WebError(f"fetching {url} took longer than {settings.timeout_s:g}s") from None
    except httpx.HTTPError as exc:
        raise WebError(f"fetching {url} failed: {exc}") from None


async def _fetch(url: str, max_chars: int, settings: WebSettings, policy: WorkerPolicy) -> str:
    """Each hop on a client of its own: a connection made for one checked name is never reused for
    another at the same address."""
    limit = min(settings.max_bytes, policy.web_max_bytes)
    for _ in range(MAX_REDIRECTS + 1):
        target = _http_url(url)
        async with httpx.AsyncClient(trust_env=False, timeout=settings.timeout_s) as client:
            response = await _send(client, target, policy, {"Accept": ACCEPT})
            try:
                if response.is_redirect and "location" in response.headers:
                    url = str(target.join(response.headers["location"]))
                    continue
                body, whole = await _read(response, limit, str(target))
            finally:
                await response.aclose()
        page = functools.partial(_page, str(target), response, body, whole, max_chars)
        return await asyncio.get_running_loop().run_in_executor(PARSERS, page)
    raise WebError(f"more than {MAX_REDIRECTS} redirects from {url}")


def _http_url(url: str, tool: str = "web_fetch") -> httpx.URL:
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise WebError(f"{url!r}: {exc}") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise WebError(f"{url!r}: {tool} takes an http:// or https:// URL")
    return target


async def _send(
    client: httpx.AsyncClient, target: httpx.URL, policy: WorkerPolicy, headers: dict[str, str]
) -> httpx.Response:
    """GET `target` from the address its host was checked to resolve to (its name still names the
    site for TLS and `Host`); the body is left to stream."""
    address = await _checked_address(target, policy)
    request = client.build_request(
        "GET",
        target.copy_with(host=address),
        headers={**headers, "Host": target.netloc.decode("ascii"), "Accept-Encoding": ACCEPT_ENCODING},
        extensions={"sni_hostname": target.raw_host.decode("ascii")},
    )
    return await client.send(request, stream=True)


async def _checked_address(url: httpx.URL, policy: WorkerPolicy) -> str:
    """The address to connect to: every address the host resolves to must be public, or one the
    policy's `web_private` names."""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        found = await asyncio.get_running_loop().getaddrinfo(url.host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise WebError(f"cannot resolve {url.host!r}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    for address in addresses:
        if is_private(address) and not any(
            fnmatch.fnmatchcase(f"{address}:{port}", p) for p in policy.web_private
        ):
            raise WebError(
                f"refused: {url} leads to {address}, a loopback, link-local or private address "
                f"(worker policy {policy.source}; `web_private` lists the ones web_fetch may reach)"
            )
    return addresses[0]


async def _read(response: httpx.Response, limit: int, url: str) -> tuple[bytes, bool]:
    """At most `limit` bytes of the decoded body, and whether that is all of it."""
    decoder = _Decoder(response.headers.get("content-encoding", ""), url)
    body, read = bytearray(), 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        body += decoder.decode(chunk, limit + 1 - len(body))
        if len(body) > limit or read > limit:
            return bytes(body[:limit]), False
        if decoder.ended:
            break
    return bytes(body), True


class _Decoder:
    """A body's content encoding undone, each call giving at most the room it is given (zlib's
    `max_length`: the rest of a chunk that would grow past it is never decompressed)."""

    def __init__(self, encoding: str, url: str) -> None:
        codings = [c for c in (c.strip().lower() for c in encoding.split(",")) if c not in ("", "identity")]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise WebError(f"{url}: the page is encoded as {encoding}, which web_fetch does not decode")
        self.url, self.encoding = url, encoding
        # 32: a gzip or zlib header, whichever comes; some servers send raw deflate (see decode).
        self.zlib = zlib.decompressobj(zlib.MAX_WBITS | 32) if codings else None
        self.started = False

    @property
    def ended(self) -> bool:
        """The compressed stream is complete: what follows is not the page."""
        return self.zlib is not None and self.zlib.eof

    def decode(self, chunk: bytes, room: int) -> bytes:
        if self.zlib is None:
            return chunk
        try:
            try:
                out = self.zlib.decompress(chunk, room)
            except zlib.error:
                if self.started:
                    raise
                self.zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self.zlib.decompress(chunk, room)
        except zlib.error as exc:
            raise WebError(f"{self.url}: the page's {self.encoding} encoding is broken ({exc})") from None
        self.started = True
        return out


def _page(url: str, response: httpx.Response, body: bytes, whole: bool, max_chars: int) -> str:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    notes = [] if whole else [f"the page is larger than {len(body)} bytes: only those were read"]
    if kind == "application/pdf" and response.status_code < 400:
        text, pages = _pdf_text(url, body, whole, max_chars)
        notes += [pages] if pages else []
    elif kind and not kind.startswith(TEXT_TYPES):
        raise WebError(f"{url}: {kind} is not a page web_fetch reads")
    else:
        text = body.decode(response.charset_encoding or "utf-8", errors="replace")
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in text[:1000].lower()):
        budget = max(MIN_HTML, HTML_PER_CHAR * max_chars)
        if len(text) > budget:
            notes.append(
                f"the HTML was cut at {budget} of {len(text)} characters before conversion (a larger "
                "max_chars converts more)"
            )
            text = text[:budget]
        options = html_to_markdown.ConversionOptions(
            base_url=url,  # links the model can follow
            inline_data_media=html_to_markdown.InlineDataMedia.ALT_TEXT_ONLY,  # no base64 images
        )
        text = html_to_markdown.convert(text, options).content or ""
    if response.status_code >= 400:
        raise WebError(f"{url}: HTTP {response.status_code}\n{text[:500]}")
    if len(text) > max_chars:
        notes.append(f"{max_chars} of {len(text)} characters shown")
        text = text[:max_chars]
    return f"[{url}]\n\n{text}" + "".join(f"\n\n[cut: {n}]" for n in notes)


def _pdf_text(url: str, body: bytes, whole: bool, max_chars: int) -> tuple[str, str]:
    """The PDF's text, read page by page until there is more than `max_chars`; and a note when
    pages were left unread."""
    if not whole:
        raise WebError(f"{url}: the PDF is larger than {len(body)} bytes (`max_bytes`): not read")
    try:
        pages = pypdf.PdfReader(io.BytesIO(body)).pages
        texts: list[str] = []
        for page in pages:
            if sum(map(len, texts)) > max_chars:
                break
            texts.append(page.extract_text())
    except pypdf.errors.PyPdfError as exc:
        raise WebError(f"{url}: an unreadable PDF ({exc})") from None
    unread = f"{len(texts)} of {len(pages)} pages read" if len(texts) < len(pages) else ""
    return "\n\n".join(texts), unread


async def search(
    query: str, settings: WebSearchSettings, timeout: float, policy: WorkerPolicy, secrets: Secrets
) -> str:
    """Results from an HTTP search API in Brave Search's shape (`web.results[]`: title, url,
    description), numbered, one per paragraph. The API's URL is the manifest's: it may lead only
    where a fetch may."""
    assert settings.url is not None
    try:
        key = secrets.resolve(settings.api_key) if settings.api_key else None
        url = secrets.resolve(settings.url)
    except PolicyError as exc:
        raise WebError(str(exc)) from None
    headers = {"Accept": "application/json", **({"X-Subscription-Token": key} if key else {})}
    try:
        target = _http_url(url, "web_search").copy_merge_params({"q": query, "count": 10})
        async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
            response = await _send(client, target, policy, headers)
            try:
                body, _ = await _read(response, policy.web_max_bytes, str(target))
            finally:
                await response.aclose()
        response.raise_for_status()
        results: list[dict[str, Any]] = json.loads(body).get("web", {}).get("results", [])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:  # ValueError: not JSON
        raise WebError(f"web search failed: {exc}") from None
    lines = [
        f"{i}. {r.get('title', '')}\n   {r.get('url', '')}\n   {r.get('description', '')}"
        for i, r in enumerate(results, 1)
    ]
    return "\n\n".join(lines) or f"no results for {query!r}"
