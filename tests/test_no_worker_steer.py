"""A steer or a prompt while no worker polls the session's task queue: a signal needs no worker, so
`wolf steer` accepts it (saying that no worker polls now), `WolfClient.prompt_or_leave` (`wolf chat`)
leaves the prompt as one, and the session takes it once a worker polls again."""

from __future__ import annotations

import signal

from agentwolf.workflows.types import workflow_id
from tests.conftest import openai_manifest, record_history, tools_server, wait_for, worker_process
from tests.support.models import user_texts
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.polls import idle
from tests.test_cli import _wolf


async def test_steer_while_no_worker_polls_is_accepted_and_runs_later(env, wolf, task_queue):
    with ScriptedOpenAI(lambda request: Reply(text="heard you")) as server:
        manifest = openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
        first = worker_process(env, task_queue)
        second = None
        try:
            sid = await wolf.start_session("a", manifest)
            await wait_for(lambda: idle(wolf, sid), timeout=120)
            first.send_signal(signal.SIGKILL)
            first.wait()
            address = env.client.service_client.config.target_host
            steered = await _wolf(address, "steer", sid, "use the staging database", "--json")
            assert steered.returncode == 0, steered.stderr
            assert "no worker polls" in steered.stderr and "waits until one does" in steered.stderr
            assert not server.requests  # nothing ran yet
            second = worker_process(env, task_queue)
            await wait_for(lambda: idle(wolf, sid, turns=1), timeout=120)
            transcript = await wolf.transcript(sid)
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(60)
    prompts = user_texts(transcript)
    assert prompts == ["use the staging database"]
    assert len(server.requests) == 1


async def test_a_prompt_while_no_worker_polls_is_left_and_runs_once_when_one_does(env, wolf, task_queue):
    with ScriptedOpenAI(lambda request: Reply(text="heard you")) as server:
        manifest = openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
        first = worker_process(env, task_queue)
        second = None
        try:
            sid = await wolf.start_session("a", manifest)
            await wait_for(lambda: idle(wolf, sid), timeout=120)
            first.send_signal(signal.SIGKILL)
            first.wait()
            assert await wolf.prompt_or_leave(sid, "what changed since yesterday?") is None  # left
            assert not server.requests  # nothing ran yet
            second = worker_process(env, task_queue)
            await wait_for(lambda: idle(wolf, sid, turns=1), timeout=120)
            transcript = await wolf.transcript(sid)
            await record_history(wolf.client, workflow_id("default", sid), "prompt_later")
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(60)
    assert user_texts(transcript) == ["what changed since yesterday?"]
    assert len(server.requests) == 1
