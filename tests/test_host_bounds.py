"""A worker's memory is bounded by more than counts: transcript copies by bytes (worker-wide), a busy
host's config keys, and an editor's session servers apart from the shared MCP servers (core review,
finding 18)."""

from __future__ import annotations

import sys

from pydantic_ai.messages import ModelMessagesTypeAdapter

from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.config.session_servers import SESSION_SERVER
from agentwolf.extensions.pool import McpPool
from agentwolf.hosts.host_registry import MAX_CONFIGS_PER_HOST, HostRegistry
from agentwolf.hosts.transcripts import CachedTranscript, TranscriptCache
from tests.conftest import TOOLS_SERVER, make_manifest
from tests.support.models import Script, sequence, text, tool


def _copy(size: int) -> CachedTranscript:
    return CachedTranscript([], "d", [], size)


def test_transcript_copies_are_bounded_by_bytes_least_recently_used_first():
    cache = TranscriptCache(max_count=100, max_bytes=1000)
    for name in "abc":
        cache.put(name, _copy(400))
    assert cache.get("a") is None and cache.get("b") and cache.bytes == 800
    cache.put("huge", _copy(5000))  # the newest stays, alone, even past the bound
    assert len(cache) == 1 and cache.get("huge") and cache.bytes == 5000
    cache.pop("huge")
    assert len(cache) == 0 and cache.bytes == 0


async def test_the_cached_copy_counts_about_the_bytes_of_the_transcript(wolf, run_worker):
    script = Script(sequence(tool("big", {"size": 200_000}), text("done")))
    async with run_worker(local_models={"m": script.model}) as hosts:
        sid = await wolf.submit("go", "a", make_manifest())
        await wolf.result(sid)
        whole = len(ModelMessagesTypeAdapter.dump_json(await wolf.transcript(sid)))
        (host,) = hosts.hosts()
        assert host.transcripts is hosts.transcripts  # one cache, one bound, for the worker
        counted = hosts.transcripts.bytes
    assert abs(counted - whole) < whole / 100  # the last request's copy is the whole transcript


def test_a_busy_host_keeps_a_bounded_number_of_config_keys():
    hosts = HostRegistry()
    configs = [
        Manifest.model_validate({"agents": {"a": {"model": "local:m", "instructions": f"v{i}"}}})
        for i in range(3 * MAX_CONFIGS_PER_HOST)
    ]
    first = configs[0]
    with hosts.serving(first.identity, "t"):  # an activity of the first config runs all along
        for manifest in configs:
            host = hosts.ensure(manifest, "t")
    assert hosts.hosts() == [host]  # one host section: one host
    kept = {config_id for config_id, _ in hosts._hosts}
    assert len(kept) == MAX_CONFIGS_PER_HOST + 1 and first.identity in kept
    assert set(hosts.manifests) == kept
    assert configs[-1].identity in kept


async def test_session_servers_never_evict_shared_ones_nor_the_other_way():
    server = McpServerConfig(command=sys.executable, args=[TOOLS_SERVER])
    editor = [f"{SESSION_SERVER}tools@{n}" for n in ("1", "2")]
    pool = McpPool({"shared": server, **dict.fromkeys(editor, server)}, max_clients=1, max_session_clients=1)
    try:
        await pool.call_tool("shared", "echo", {"text": "x"})
        await pool.call_tool(editor[0], "echo", {"text": "x"})
        assert sorted(pool.live_servers()) == sorted(["shared", editor[0]])
        await pool.call_tool(editor[1], "echo", {"text": "x"})  # the other editor session's server
        assert sorted(pool.live_servers()) == sorted(["shared", editor[1]])
    finally:
        await pool.close()
