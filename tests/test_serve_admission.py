"""Who a request is decides where `wolf serve` counts it: a console user's requests in their key's
share, probes in none, anonymous traffic in a small share of its own. So clients without a key who
hold requests open cannot lock out the probes, the login page or signed-in people (real app under
uvicorn as `wolf serve` runs it); and `/ready` asks Temporal at most once a second or so."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from temporalio.api.taskqueue.v1 import PollerInfo
from temporalio.api.workflowservice.v1 import DescribeTaskQueueResponse

from agentwolf.protocols.app import create_app
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.capacity import Admission, Capacity, Refused
from agentwolf.protocols.served import Served
from tests.conftest import make_manifest
from tests.support.serving import console_cookie, serving

HELD = 48
HALF_SENT = (
    b"POST /hooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100000\r\n\r\n{"
)


async def test_anonymous_requests_held_open_leave_probes_login_and_signed_in_people_alone(client, task_queue):
    tenant = f"admit-{uuid.uuid4().hex[:8]}"  # its own: the sessions page lists no other test's configs
    keys = ApiKeys.load([], {"WOLF_API_KEYS": f"key-a={tenant}"})
    async with (
        serving(client, task_queue, make_manifest(), keys=keys, limits=Capacity()) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        cookie = await console_cookie(http, "key-a")
        port = int(base.rsplit(":", 1)[1])
        held = []
        try:
            for _ in range(HELD):  # bodies that never complete, as a slow or hostile client sends them
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(HALF_SENT)
                await writer.drain()
                held.append((reader, writer))
            await asyncio.sleep(0.5)
            health = await http.get("/health")
            login = await http.get("/console/login", headers={"Accept": "text/html"})
            page = await http.get("/console/sessions", headers={"Accept": "text/html"}, cookies=cookie)
            refused = await http.post("/hooks/y", content=b"{}")
        finally:
            for _, writer in held:
                writer.close()
    assert (health.status_code, login.status_code, page.status_code) == (200, 200, 200), page.text
    assert f"tenant <strong>{tenant}</strong>" in page.text
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"  # anonymous share full


def test_a_request_moves_to_another_share_only_when_that_one_has_room():
    """A webhook enters as anonymous and moves to its hook's share once its signature checks."""
    admission = Admission(Capacity(max_requests_per_key=1, max_anonymous=1))
    first = admission.enter(admission.anonymous)
    first.move(admission.share("hook:a"))
    second = admission.enter(admission.anonymous)  # the anonymous place is free again
    try:
        second.move(admission.share("hook:a"))
    except Refused as refused:
        assert refused.status == 429
    else:
        raise AssertionError("hook a had no room left")
    first.release()
    second.move(admission.share("hook:a"))
    second.release()
    assert admission.total == 0 and not admission.by_share


class CountingService:
    """Temporal's DescribeTaskQueue, counted (a worker polls)."""

    def __init__(self) -> None:
        self.calls = 0

    async def describe_task_queue(self, request: object, timeout: object = None) -> DescribeTaskQueueResponse:
        self.calls += 1
        await asyncio.sleep(0.05)
        poller = PollerInfo(identity="w")
        poller.last_access_time.GetCurrentTime()  # it polls now
        return DescribeTaskQueueResponse(pollers=[poller])


class CountingClient:
    namespace = "default"

    def __init__(self) -> None:
        self.workflow_service = CountingService()


async def test_ready_asks_temporal_once_for_many_probes():
    temporal = CountingClient()
    served = Served(client=temporal, task_queue="q", keys=ApiKeys([]), open_tenant="t")  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=create_app(served, routes=[]))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        answers = await asyncio.gather(*(http.get("/ready") for _ in range(20)))
        again = await http.get("/ready")
    assert {a.status_code for a in [*answers, again]} == {200}
    assert temporal.workflow_service.calls == 1
