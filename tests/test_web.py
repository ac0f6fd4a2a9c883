"""The web capability: web_fetch converts, caps and refuses as the worker policy says (checked on
the address each hop connects to, redirects included); web_search asks a configured search API."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agentwolf.config.manifest import WebSearchSettings, WebSettings
from agentwolf.config.policy import WorkerPolicy, is_private
from agentwolf.extensions.web import WebError, fetch, search
from agentwolf.plugins import PluginRegistry, Plugins
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server
from tests.support.models import Script, sequence, text, tool
from tests.support.polls import tool_returns
from tests.support.web_server import KEY, WebServer

SETTINGS = WebSettings()


def _allowing(*servers: WebServer) -> WorkerPolicy:
    return WorkerPolicy(web_private=[f"127.0.0.1:{s.port}" for s in servers])


async def test_a_page_becomes_markdown():
    with WebServer() as web:
        page = await fetch(f"{web.url}/page", 10_000, SETTINGS, _allowing(web))
        plain = await fetch(f"{web.url}/text", 10_000, SETTINGS, _allowing(web))
        document = await fetch(f"{web.url}/pdf", 10_000, SETTINGS, _allowing(web))
        with pytest.raises(WebError, match="the PDF is larger than 1000 bytes"):
            await fetch(f"{web.url}/pdf", 10_000, WebSettings(max_bytes=1000), _allowing(web))
    assert page.startswith(f"[{web.url}/page]\n\n")
    assert "# Grey wolves" in page and f"[packs]({web.url}/packs)" in page and "**six**" in page
    assert (
        "| north | 7    |" in page
        and "title: Wolves" in page
        and "alert" not in page
        and "base64" not in page
    )
    assert plain == f"[{web.url}/text]\n\njust text"
    assert document == f"[{web.url}/pdf]\n\nWolves hunt in packs"


async def test_loopback_is_refused_unless_the_policy_names_it():
    with WebServer() as web:
        with pytest.raises(WebError, match=r"refused: .* leads to 127.0.0.1, a loopback"):
            await fetch(f"{web.url}/page", 10_000, SETTINGS, WorkerPolicy())
        with pytest.raises(WebError, match="refused: .* leads to 127.0.0.1"):  # a name is no way round
            await fetch(f"http://localhost:{web.port}/page", 10_000, SETTINGS, WorkerPolicy())
    assert web.hits == []


async def test_a_redirect_to_a_forbidden_address_is_refused():
    with WebServer() as web, WebServer() as inside:
        target = f"{inside.url}/page"
        with pytest.raises(WebError, match=f"refused: {inside.url}/page leads to 127.0.0.1"):
            await fetch(f"{web.url}/redirect?to={target}", 10_000, SETTINGS, _allowing(web))
        followed = await fetch(f"{web.url}/redirect?to={target}", 10_000, SETTINGS, _allowing(web, inside))
    assert web.hits == ["/redirect", "/redirect"]
    assert inside.hits == ["/page"]  # only when the policy allowed it
    assert followed.startswith(f"[{inside.url}/page]")


async def test_a_huge_page_is_capped_and_a_slow_one_timed_out():
    with WebServer() as web:
        capped = await fetch(f"{web.url}/huge", 1_000_000, WebSettings(max_bytes=200_000), _allowing(web))
        short = await fetch(f"{web.url}/huge", 5_000, SETTINGS, _allowing(web))
        with pytest.raises(WebError, match=r"took longer than 1s"):
            await fetch(f"{web.url}/slow", 10_000, WebSettings(timeout_s=1), _allowing(web))
        with pytest.raises(WebError, match="application/octet-stream is not a page"):
            await fetch(f"{web.url}/binary", 10_000, SETTINGS, _allowing(web))
    assert "w" * 200_000 in capped and "w" * 200_001 not in capped
    assert capped.endswith("[cut: the page is larger than 200000 bytes: only those were read]")
    assert (
        "w" * 5_000 in short
        and "w" * 5_001 not in short
        and "[cut: 5000 of 5000000 characters shown]" in short
    )
    with pytest.raises(WebError, match="web_fetch takes an http"):
        await fetch("file:///etc/passwd", 100, SETTINGS, WorkerPolicy())
    with pytest.raises(WebError, match="Invalid port"):
        await fetch("http://a:b:c/", 100, SETTINGS, WorkerPolicy())


async def test_a_compressed_page_is_decoded_and_a_bomb_stays_capped():
    """Most sites compress what they send: the model gets the page, not its encoding. The byte cap
    counts decoded bytes, so 50 KB of gzip that decode to 50 MB are read as `max_bytes`."""
    with WebServer() as web:
        policy = _allowing(web)
        gzipped = await fetch(f"{web.url}/page?encoding=gzip", 10_000, SETTINGS, policy)
        deflated = await fetch(f"{web.url}/page?encoding=deflate", 10_000, SETTINGS, policy)
        document = await fetch(f"{web.url}/pdf?encoding=gzip", 10_000, SETTINGS, policy)
        bomb = await fetch(f"{web.url}/bomb", 100, WebSettings(max_bytes=1_000_000), policy)
        with pytest.raises(WebError, match="encoded as br, which web_fetch does not decode"):
            await fetch(f"{web.url}/page?encoding=br", 10_000, SETTINGS, policy)
    for page in (gzipped, deflated):
        assert "# Grey wolves" in page and "**six**" in page and "| north | 7    |" in page
    assert document.endswith("\n\nWolves hunt in packs")
    assert bomb.endswith(
        "[cut: the page is larger than 1000000 bytes: only those were read]\n\n"
        "[cut: 100 of 1000000 characters shown]"
    )


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:127.0.0.1",  # IPv4-mapped
        "64:ff9b::a00:1",  # NAT64 (well-known prefix) of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
        "64:ff9b:1::a00:1",  # NAT64, local-use prefix
        "64:ff9b:1:203:7100::",  # local-use prefix, another layout (any address in it is local)
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
        "2001:0:5ef5:79fd:0:0:80ff:fffe",  # Teredo, client 127.0.0.1
        "::127.0.0.1",  # IPv4-compatible
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
        "fe80::1%eth0",
    ],
)
def test_ipv6_forms_of_a_private_ipv4_address_are_private(address):
    assert is_private(address)


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])
def test_public_addresses_stay_public(address):
    assert not is_private(address)


async def test_an_ipv6_spelling_of_loopback_is_refused_before_connecting():
    with WebServer() as web:
        for host in ("[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]"):
            with pytest.raises(WebError, match=r"refused: .* leads to .*, a loopback"):
                await fetch(f"http://{host}:{web.port}/page", 10_000, SETTINGS, _allowing(web))
    assert web.hits == []


async def test_the_worker_policy_caps_what_a_manifest_and_the_model_ask_for():
    """A manifest's `max_bytes` and the model's `max_chars` are held to the worker policy's ceilings."""
    policy = WorkerPolicy(web_max_bytes=200_000, web_max_chars=1_000)
    with WebServer() as web:
        policy = policy.model_copy(update={"web_private": [f"127.0.0.1:{web.port}"]})
        page = await fetch(f"{web.url}/huge", 10**9, WebSettings(max_bytes=10**12), policy)
    assert "w" * 1_000 in page and "w" * 1_001 not in page
    assert page.endswith(
        "[cut: the page is larger than 200000 bytes: only those were read]\n\n"
        "[cut: 1000 of 200000 characters shown]"
    )
    assert WorkerPolicy().web_max_bytes == 20_000_000 and WorkerPolicy().web_max_chars == 500_000


async def test_a_long_html_page_is_cut_before_its_conversion():
    """Converting HTML is the costly part: what the model asks for bounds how much of it is converted
    (about 50 HTML characters per character asked for, at least a million), and the result says so."""
    with WebServer() as web:
        short = await fetch(f"{web.url}/long", 1_000, SETTINGS, _allowing(web))
        whole = await fetch(f"{web.url}/long", 100_000, SETTINGS, _allowing(web))
    assert "paragraph 0 about **wolves**" in short and "paragraph 29999" not in short
    assert short.endswith(
        "[cut: the HTML was cut at 1000000 of 1248916 characters before conversion (a larger "
        "max_chars converts more)]\n\n[cut: 1000 of 807403 characters shown]"
    )
    assert "before conversion" not in whole and whole.endswith("[cut: 100000 of 1008889 characters shown]")


def test_pages_are_parsed_off_the_loops_default_executor():
    """The loop's default executor (DNS lookups, to_thread everywhere in the worker) never parses
    a page: pages go to the web capability's own bounded pool."""
    ran: list[str] = []

    class Recording(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            inner = fn.args[0] if isinstance(fn, functools.partial) else fn
            ran.append(getattr(inner, "__name__", repr(inner)))
            return super().submit(fn, *args, **kwargs)

    async def fetch_on_a_recorded_loop(web: WebServer) -> str:
        asyncio.get_running_loop().set_default_executor(Recording(2))
        return await fetch(f"{web.url}/page", 10_000, SETTINGS, _allowing(web))

    with WebServer() as web:
        page = asyncio.run(fetch_on_a_recorded_loop(web))
    assert "# Grey wolves" in page
    assert ran and set(ran) <= {"getaddrinfo"}


async def test_a_redirect_loop_ends():
    with WebServer() as web, pytest.raises(WebError, match=f"more than 5 redirects from {web.url}/loop"):
        await fetch(f"{web.url}/loop", 100, SETTINGS, _allowing(web))
    assert web.hits == ["/loop"] * 6


async def test_search_asks_the_configured_api_with_its_key(monkeypatch):
    monkeypatch.setenv("SEARCH_KEY", KEY)
    with WebServer() as web:
        policy = WorkerPolicy(secrets={"*": ["SEARCH_KEY"]}, web_private=[f"127.0.0.1:{web.port}"])
        settings = WebSearchSettings(url=f"{web.url}/search", api_key="${SEARCH_KEY}")
        found = await search("wolves", settings, 10, policy, policy.secrets_for("default"))
        with pytest.raises(WebError, match="not allowed for tenant"):
            refused = WebSearchSettings(url=f"{web.url}/search", api_key="${HOME}")
            await search("wolves", refused, 10, policy, policy.secrets_for("default"))
    assert found.split("\n\n") == [
        "1. wolves 1\n   https://example.com/1\n   about wolves",
        "2. wolves 2\n   https://example.com/2\n   about wolves",
    ]


async def test_a_search_url_is_held_to_the_address_check(monkeypatch):
    """The manifest names the search API's URL: it may lead only where a fetch may (no blind
    requests to the worker's own or internal services)."""
    monkeypatch.setenv("SEARCH_KEY", KEY)
    policy = WorkerPolicy(secrets={"*": ["SEARCH_KEY"]})
    with WebServer() as web:
        for host in (f"127.0.0.1:{web.port}", f"localhost:{web.port}", f"[::127.0.0.1]:{web.port}"):
            settings = WebSearchSettings(url=f"http://{host}/search", api_key="${SEARCH_KEY}")
            with pytest.raises(WebError, match=r"refused: .* leads to .*, a loopback"):
                await search("wolves", settings, 10, policy, policy.secrets_for("default"))
    assert web.hits == []


async def _session(
    wolf, run_worker, web: WebServer, script: Script, *capabilities: dict, record: str | None = None
) -> None:
    manifest = make_manifest(
        {"capabilities": [{"mcp": "tools"}, *capabilities]}, mcp_servers={"tools": tools_server()}
    )
    async with run_worker(local_models={"m": script.model}, policy=_allowing(web)):
        sid = await wolf.submit("read", "a", manifest)
        await wolf.result(sid)
        if record:
            await record_history(wolf.client, workflow_id("default", sid), record)


async def test_a_session_fetches_within_its_policy(wolf, run_worker):
    with WebServer() as web, WebServer() as inside:
        script = Script(
            sequence(
                tool("web_fetch", {"url": f"{web.url}/page"}, "f1"),
                tool("web_fetch", {"url": f"{web.url}/redirect?to={inside.url}/page"}, "f2"),
                text("done"),
            )
        )
        await _session(wolf, run_worker, web, script, {"web": {}}, record="web_fetch")
    assert {"web_fetch", "add"} <= script.offered[0] and "web_search" not in script.offered[0]
    page, refused = (r for m in script.requests[1:] for r in tool_returns(m[-1:]))
    assert page.outcome == "success" and "# Grey wolves" in page.content
    assert refused.outcome == "failed" and "leads to 127.0.0.1" in refused.content
    assert inside.hits == []


async def test_a_script_fetches_pages_under_the_same_policy(wolf, run_worker):
    code = """
page = await web_fetch(url="{web}/text")
print(page.splitlines()[-1])
try:
    await web_fetch("{web}/redirect?to={inside}/page")
except RuntimeError as e:
    print("refused" if "leads to 127.0.0.1" in str(e) else e)
"""
    with WebServer() as web, WebServer() as inside:
        run = tool("run_code", {"code": code.format(web=web.url, inside=inside.url)}, "rc")
        script = Script(sequence(run, text("done")))
        await _session(wolf, run_worker, web, script, {"web": {}}, {"code_mode": {"tools": ["web_*"]}})
    assert "web_fetch" not in script.offered[0]  # scripts call it
    (result,) = tool_returns(script.requests[1][-1:])
    assert result.content == "just text\nrefused\n"
    assert inside.hits == []


async def test_search_through_a_server_tool_and_through_an_api(wolf, run_worker, monkeypatch):
    """`web_search` is an MCP (here: a plugin's) tool under that name, or `wolf.web` asking an API."""
    monkeypatch.setenv("SEARCH_KEY", KEY)
    registry = PluginRegistry("finder")

    @registry.tool
    def find(query: str) -> str:
        """Search."""
        return f"found {query}"

    plugins = Plugins()
    plugins.add(registry)
    with WebServer() as web:
        api = {"url": f"{web.url}/search", "api_key": "${SEARCH_KEY}"}
        for search_settings, expected in (
            ({"mcp": "finder", "tool": "find"}, "found wolves"),
            (api, "1. wolves 1\n   https://example.com/1\n   about wolves"),
        ):
            script = Script(sequence(tool("web_search", {"query": "wolves"}, "s1"), text("done")))
            manifest = make_manifest(
                {"capabilities": [{"web": {"fetch": False, "search": search_settings}}]},
                mcp_servers={"finder": {"plugin": "finder"}},
            )
            policy = WorkerPolicy(secrets={"*": ["SEARCH_KEY"]}, web_private=[f"127.0.0.1:{web.port}"])
            async with run_worker(local_models={"m": script.model}, plugins=plugins, policy=policy):
                sid = await wolf.submit("find", "a", manifest)
                await wolf.result(sid)
            assert script.offered[0] == {"web_search"}
            (result,) = tool_returns(script.requests[1][-1:])
            assert result.outcome == "success" and result.content.startswith(expected)


def test_a_search_server_the_host_does_not_have_is_a_config_error():
    from agentwolf.config import parse_manifest
    from agentwolf.config.loading import ManifestError

    with pytest.raises(ManifestError, match=r"capabilities.0.web.search.mcp: unknown MCP server 'nope'"):
        parse_manifest("agents:\n  a:\n    capabilities: [{web: {search: {mcp: nope}}}]\n", source="x.yaml")
