"""bench/streaming.py's pydantic-ai baseline: `Agent(..., capabilities=[TemporalDurability(...)])` on the
real OpenAI provider, pointed at the bench's scripted streaming server.

Two agents on the same model: `stream` publishes its events to the Workflow Stream topic `events`
(`event_stream_topic`, default 100 ms batches from inside the model activity; its workflow hosts an
`AgentEventStream`), `plain` has no topic (its model activity makes one whole, unstreamed request).

The worker process sets BENCH_OPENAI_URL (the scripted server) and BENCH_OPENAI_API (`chat` for
Chat Completions, `responses` for the Responses API) before importing this module. Temporal's
sandbox re-runs this module for every workflow run; reading the environment at import is allowed
there (os is restricted only while workflow code runs).
"""

from __future__ import annotations

import os
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import AgentEventStream, PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

TOPIC = "events"
URL = os.environ.get("BENCH_OPENAI_URL", "http://127.0.0.1:9/v1")
API = os.environ.get("BENCH_OPENAI_API", "chat")
CONFIG = {"start_to_close_timeout": timedelta(minutes=10)}


def _model() -> OpenAIChatModel | OpenAIResponsesModel:
    provider = OpenAIProvider(base_url=URL, api_key="k")
    if API == "responses":
        return OpenAIResponsesModel("gpt-4o-mini", provider=provider)
    return OpenAIChatModel("gpt-4o-mini", provider=provider)


STREAM_AGENT = Agent(
    _model(),
    name="stream",
    capabilities=[TemporalDurability(event_stream_topic=TOPIC, activity_config=CONFIG)],
)
PLAIN_AGENT = Agent(_model(), name="plain", capabilities=[TemporalDurability(activity_config=CONFIG)])


@workflow.defn
class PaiStreamTurn(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (STREAM_AGENT,)

    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.events = AgentEventStream()

    @workflow.run
    async def run(self, prompt: str) -> str:
        async with self.events:
            result = await STREAM_AGENT.run(prompt)
        return result.output


@workflow.defn
class PaiPlainTurn(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (PLAIN_AGENT,)

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await PLAIN_AGENT.run(prompt)
        return result.output
