"""`wolf serve`'s CORS over plain HTTP: a listed origin's preflight is answered before auth and its
real requests still need a key; any other origin (`null`, look-alikes) gets no `Access-Control-*`
header, ever; `*` only when written; `--cors-origin` adds to the policy's `cors_origins`."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest

from agentwolf.config.origins import web_origin
from agentwolf.config.policy import PolicyError, WorkerPolicy, load_policy
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.capacity import Capacity
from agentwolf.protocols.server import BindingRefused, check_binding
from tests.conftest import make_manifest
from tests.support.serving import free_port, serve_process, serving

PAGE = "http://127.0.0.1:3000"
"""The listed origin."""
KEY = {"Authorization": "Bearer key-a"}
ASKED_HEADERS = "authorization, content-type, x-stainless-os, x-wolf-session"
"""What the OpenAI JS SDK and a wolf-aware page ask to send."""

LOOK_ALIKES = [
    "http://evil.example",
    "null",
    "http://127.0.0.1:3000.evil.example",
    "http://127.0.0.1:30001",
    "http://127.0.0.1:300",
    "https://127.0.0.1:3000",
    "HTTP://127.0.0.1:3000",
    "http://127.0.0.1:3000/",
    "http://127.0.0.1:3000, http://evil.example",
    "",
]
"""Origins a page of another site might send, near the listed one or not."""


def _preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": ASKED_HEADERS,
    }


def _cors_headers(answer: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in answer.headers.items() if k.lower().startswith("access-control-")}


async def test_a_listed_origin_s_preflight_is_answered_before_auth_and_requests_still_need_a_key(
    client, task_queue, caplog
):
    caplog.set_level(logging.INFO, logger="agentwolf.protocols.http")
    async with (
        serving(client, task_queue, make_manifest(), cors_origins=(PAGE,), limits=Capacity()) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        preflight = await http.options("/v1/chat/completions", headers=_preflight(PAGE))
        assert preflight.status_code == 200, preflight.text
        headers = _cors_headers(preflight)
        assert headers["access-control-allow-origin"] == PAGE
        assert {"GET", "POST", "DELETE"} <= set(headers["access-control-allow-methods"].split(", "))
        assert headers["access-control-allow-headers"] == ASKED_HEADERS
        assert headers["access-control-max-age"] == "600"
        assert "access-control-allow-credentials" not in headers  # keys ride in Authorization, no cookies
        assert "Origin" in preflight.headers["vary"]

        models = await http.get("/v1/models", headers={"Origin": PAGE, **KEY})
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "a"
        assert models.headers["access-control-allow-origin"] == PAGE
        exposed = models.headers["access-control-expose-headers"].split(", ")
        assert {"Retry-After", "X-Wolf-Session", "X-Wolf-Response"} <= set(exposed)

        for answer, status, code in (
            (await http.get("/v1/models", headers={"Origin": PAGE}), 401, "invalid_api_key"),
            (await http.get("/v1/nothing", headers={"Origin": PAGE, **KEY}), 404, "not_found"),
            (await http.put("/v1/models", headers={"Origin": PAGE, **KEY}), 405, "method_not_allowed"),
        ):
            # Auth and routing still apply, in JSON the page may read.
            assert answer.status_code == status and answer.json()["error"]["code"] == code
            assert answer.headers["access-control-allow-origin"] == PAGE
        assert "access-control-allow-origin" not in (await http.get("/v1/models", headers=KEY)).headers
    logged = [r.http for r in caplog.records if r.name == "agentwolf.protocols.http"]  # type: ignore[attr-defined]
    options = [f for f in logged if f["method"] == "OPTIONS"]
    assert options == [{**options[0], "path": "/v1/chat/completions", "status": 200, "key_id": "-"}]


@pytest.mark.parametrize("origin", LOOK_ALIKES)
async def test_other_origins_get_no_cors_header_and_are_never_reflected(client, task_queue, origin):
    async with (
        serving(client, task_queue, make_manifest(), cors_origins=(PAGE,), limits=Capacity()) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        preflight = await http.options("/v1/chat/completions", headers=_preflight(origin))
        assert preflight.status_code == 401  # answered as any keyless request: the browser's fetch fails
        assert preflight.json()["error"]["type"] == "authentication_error"
        served = await http.get("/v1/models", headers={"Origin": origin, **KEY})
        assert served.status_code == 200  # the key works; only a browser keeps the page from reading it
        for answer in (preflight, served):
            assert _cors_headers(answer) == {}, origin
            assert origin == "" or all(origin not in v for v in answer.headers.values())


async def test_any_origin_only_when_written_and_never_null(client, task_queue):
    async with (
        serving(client, task_queue, make_manifest(), cors_origins=("*",)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        preflight = await http.options("/v1/models", headers=_preflight("http://anywhere.example", "GET"))
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
        served = await http.get("/v1/models", headers={"Origin": "http://anywhere.example", **KEY})
        assert served.headers["access-control-allow-origin"] == "*"  # `*` itself: no reflection
        assert "access-control-allow-credentials" not in served.headers
        null = await http.options("/v1/models", headers=_preflight("null", "GET"))
        assert null.status_code == 401 and _cors_headers(null) == {}
        assert _cors_headers(await http.get("/v1/models", headers={"Origin": "null", **KEY})) == {}


async def test_by_default_no_origin_is_let_in(client, task_queue):
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        for origin in (PAGE, "http://localhost:3000"):
            preflight = await http.options("/v1/models", headers=_preflight(origin, "GET"))
            assert preflight.status_code == 401 and _cors_headers(preflight) == {}
            assert _cors_headers(await http.get("/v1/models", headers={"Origin": origin, **KEY})) == {}


async def test_without_keys_a_listed_page_of_this_machine_is_answered(client, task_queue):
    page = "http://localhost:5173"
    async with (
        serving(client, task_queue, make_manifest(), open_tenant="cors-open", cors_origins=(page,)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        preflight = await http.options("/v1/models", headers=_preflight(page, "GET"))
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == page
        served = await http.get("/v1/models", headers={"Origin": page})
        assert served.status_code == 200 and served.headers["access-control-allow-origin"] == page
        for origin, status, code in (
            ("http://localhost:8000", 405, "method_not_allowed"),  # not listed: OPTIONS meets the router
            ("http://evil.example", 403, None),  # --no-auth's own check: pages of this machine only
        ):
            other = await http.options("/v1/models", headers=_preflight(origin, "GET"))
            assert other.status_code == status and other.json()["error"]["code"] == code
            assert _cors_headers(other) == {}


def test_origins_are_written_as_browsers_send_them(tmp_path):
    for good in ("*", "http://localhost:3000", "https://app.example.com", "http://[::1]:8080"):
        assert web_origin(good) == good
    for bad, says in (
        ("null", "cannot be allowed"),
        ("http://localhost:3000/", "write 'http://localhost:3000'"),
        ("HTTP://Localhost:3000", "write 'http://localhost:3000'"),
        ("https://app.example.com:443", "write 'https://app.example.com'"),
        ("https://bücher.example", "write 'https://xn--bcher-kva.example'"),
        ("localhost:3000", "not a web origin"),
        ("ftp://example.com", "not a web origin"),
        ("http://user:pw@example.com", "not a web origin"),
        ("http://example.com:99999", "not a web origin"),
    ):
        with pytest.raises(ValueError, match=says):
            web_origin(bad)
    policy = tmp_path / "policy.yaml"
    policy.write_text("cors_origins: ['https://app.example.com', '*']\n")
    assert load_policy(policy).cors_origins == ["https://app.example.com", "*"]
    policy.write_text("cors_origins: ['null']\n")
    with pytest.raises(PolicyError, match="null"):
        load_policy(policy)
    assert WorkerPolicy().cors_origins == []  # no cross-origin access unless configured


def test_without_keys_only_pages_of_this_machine_may_be_listed():
    none = ApiKeys([])
    check_binding(
        "127.0.0.1", none, True, ["http://localhost:3000", "http://127.0.0.1:8000", "http://[::1]:1"]
    )
    for origins in (["https://app.example.com"], ["*"], ["http://localhost:3000", "http://10.0.0.2:3000"]):
        with pytest.raises(BindingRefused, match="only pages served from this machine"):
            check_binding("127.0.0.1", none, True, origins)
    check_binding("0.0.0.0", ApiKeys.load([], {"WOLF_API_KEYS": "k=t"}), False, ["*"])


async def test_the_flag_adds_to_the_policy_and_bad_origins_exit_2(client, tmp_path):
    """The real `wolf serve` process: `--cors-origin` and the policy's `cors_origins` both let a page
    in; an origin not written as browsers send it is refused before anything starts."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("cors_origins: ['http://localhost:3000']\n")
    wolf = str(Path(sys.executable).parent / "wolf")
    environ = {k: v for k, v in os.environ.items() if k not in ("WOLF_API_KEYS", "WOLF_POLICY")}
    environ |= {"TEMPORAL_ADDRESS": client.service_client.config.target_host, "NO_COLOR": "1"}
    base = ["serve", "--no-auth", "--policy", str(policy)]
    for origin, says in (("null", "cannot be allowed"), ("https://app.example.com", "this machine")):
        refused = await asyncio.to_thread(
            subprocess.run,
            [wolf, *base, "--cors-origin", origin],
            capture_output=True,
            text=True,
            env=environ,
            timeout=60,
        )
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    port = free_port()
    command = [wolf, *base, "--port", str(port), "--cors-origin", "http://127.0.0.1:5173"]
    async with serve_process(command, port, environ) as http:
        for origin, allowed in (
            ("http://localhost:3000", True),  # the policy's
            ("http://127.0.0.1:5173", True),  # the flag's
            ("http://localhost:8000", False),
        ):
            answer = await http.options("/v1/models", headers=_preflight(origin, "GET"))
            assert (answer.headers.get("access-control-allow-origin") == origin) is allowed, origin
            assert (answer.status_code == 200) is allowed


async def test_a_listed_page_reads_a_refusal_s_retry_after_and_others_get_no_cors_header(client, task_queue):
    # max_requests_per_key=0: every keyed request is refused before the app, as a busy key's would be.
    limits = Capacity(max_requests_per_key=0)
    async with (
        serving(client, task_queue, make_manifest(), cors_origins=(PAGE,), limits=limits) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        refused = await http.get("/v1/models", headers={"Origin": PAGE, **KEY})
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert refused.headers["access-control-allow-origin"] == PAGE
        assert "Retry-After" in refused.headers["access-control-expose-headers"].split(", ")
        assert refused.headers["retry-after"] == "2"
        other = await http.get("/v1/models", headers={"Origin": "https://evil.example", **KEY})
        assert other.status_code == 429 and _cors_headers(other) == {}
