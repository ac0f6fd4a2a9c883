"""The web capability on the worker: `web_fetch` (a page as Markdown) and `web_search`.

Where a fetch may go is the worker policy's decision, never the manifest's or the model's: each hop
(the URL, then every redirect) resolves its host, refuses loopback, link-local and private addresses
unless `web_private` names them, and connects to the address it checked (the hostname still names
the site for TLS and `Host`), so a name that resolves differently on a second look gains nothing.
Pages are read up to a byte cap and the whole fetch, redirects included, ends at a deadline.

HTML becomes Markdown with html-to-markdown (a Rust converter without dependencies: fast on pages of
megabytes, drops scripts and styles, keeps tables and links); a PDF becomes its text with pypdf
(pure Python, no dependencies).
"""

from __future__ import annotations

import asyncio
import fnmatch
import io
import json
import socket
from typing import Any

import html_to_markdown
import httpx
import pypdf

from agentwolf.config.manifest import WebSearchSettings, WebSettings
from agentwolf.config.policy import PolicyError, Secrets, WorkerPolicy, is_private

MAX_REDIRECTS = 5
ACCEPT = "text/html, text/*;q=0.9, */*;q=0.5"
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")


class WebError(Exception):
    """Why a fetch or search gave nothing: the model reads it as the tool's error."""


async def fetch(url: str, max_chars: int, settings: WebSettings, policy: WorkerPolicy) -> str:
    """The page at `url` as Markdown (text as it is), at most `max_chars` characters."""
    try:
        async with asyncio.timeout(settings.timeout_s):
            return await _fetch(url, max_chars, settings, policy)
    except TimeoutError:
        raise WebError(f"fetching {url} took longer than {settings.timeout_s:g}s") from None
    except httpx.HTTPError as exc:
        raise WebError(f"fetching {url} failed: {exc}") from None


async def _fetch(url: str, max_chars: int, settings: WebSettings, policy: WorkerPolicy) -> str:
    """Each hop on a client of its own: a connection made for one checked name is never reused for
    another at the same address."""
    for _ in range(MAX_REDIRECTS + 1):
        try:
            target = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise WebError(f"{url!r}: {exc}") from None
        if target.scheme not in ("http", "https") or not target.host:
            raise WebError(f"{url!r}: web_fetch takes an http:// or https:// URL")
        address = await _checked_address(target, policy)
        async with httpx.AsyncClient(trust_env=False, timeout=settings.timeout_s) as client:
            request = client.build_request(
                "GET",
                target.copy_with(host=address),
                headers={"Host": target.netloc.decode("ascii"), "Accept": ACCEPT},
                extensions={"sni_hostname": target.raw_host.decode("ascii")},
            )
            response = await client.send(request, stream=True)
            try:
                if response.is_redirect and "location" in response.headers:
                    url = str(target.join(response.headers["location"]))
                    continue
                body, whole = await _read(response, settings.max_bytes)
            finally:
                await response.aclose()
        return await asyncio.to_thread(_page, str(target), response, body, whole, max_chars)
    raise WebError(f"more than {MAX_REDIRECTS} redirects from {url}")


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


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the body, and whether that is all of it."""
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), False
    return bytes(body), True


def _page(url: str, response: httpx.Response, body: bytes, whole: bool, max_chars: int) -> str:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/pdf" and response.status_code < 400:
        text = _pdf_text(url, body, whole)
    elif kind and not kind.startswith(TEXT_TYPES):
        raise WebError(f"{url}: {kind} is not a page web_fetch reads")
    else:
        text = body.decode(response.charset_encoding or "utf-8", errors="replace")
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in text[:1000].lower()):
        options = html_to_markdown.ConversionOptions(
            base_url=url,  # links the model can follow
            inline_data_media=html_to_markdown.InlineDataMedia.ALT_TEXT_ONLY,  # no base64 images
        )
        text = html_to_markdown.convert(text, options).content or ""
    if response.status_code >= 400:
        raise WebError(f"{url}: HTTP {response.status_code}\n{text[:500]}")
    notes = [] if whole else [f"the page is larger than {len(body)} bytes: only those were read"]
    if len(text) > max_chars:
        notes.append(f"{max_chars} of {len(text)} characters shown")
        text = text[:max_chars]
    return f"[{url}]\n\n{text}" + "".join(f"\n\n[cut: {n}]" for n in notes)


def _pdf_text(url: str, body: bytes, whole: bool) -> str:
    if not whole:
        raise WebError(f"{url}: the PDF is larger than {len(body)} bytes (`max_bytes`): not read")
    try:
        pages = pypdf.PdfReader(io.BytesIO(body)).pages
        return "\n\n".join(page.extract_text() for page in pages)
    except pypdf.errors.PyPdfError as exc:
        raise WebError(f"{url}: an unreadable PDF ({exc})") from None


async def search(query: str, settings: WebSearchSettings, timeout: float, secrets: Secrets) -> str:
    """Results from an HTTP search API in Brave Search's shape (`web.results[]`: title, url,
    description), numbered, one per paragraph."""
    assert settings.url is not None
    try:
        key = secrets.resolve(settings.api_key) if settings.api_key else None
        url = secrets.resolve(settings.url)
    except PolicyError as exc:
        raise WebError(str(exc)) from None
    headers = {"Accept": "application/json", **({"X-Subscription-Token": key} if key else {})}
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
            response = await client.get(url, params={"q": query, "count": 10}, headers=headers)
        response.raise_for_status()
        results: list[dict[str, Any]] = response.json().get("web", {}).get("results", [])
    except (httpx.HTTPError, json.JSONDecodeError, AttributeError) as exc:
        raise WebError(f"web search failed: {exc}") from None
    lines = [
        f"{i}. {r.get('title', '')}\n   {r.get('url', '')}\n   {r.get('description', '')}"
        for i, r in enumerate(results, 1)
    ]
    return "\n\n".join(lines) or f"no results for {query!r}"
