"""The model side of provider quotas: `QuotaModel` wraps a provider's model so each request takes a
lease first, gives it back with the real usage and what the response's headers say, and on a 429
posts the cooldown; a request's `Waits` (its priority, and what it waits for, for the activity's
heartbeat) reach its model by `bind`. The
fleet's side (`Leases`: polling the quota workflows, signalling them) is `Quotas` in quotas.py."""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from temporalio import activity

from agentwolf.config.quotas import DEFAULT_PRIORITY, EndpointQuota, QuotaPolicy
from agentwolf.hosts.quotas_headers import HEARD, learned
from agentwolf.workflows.quotas import Ask, Grant, Release


@dataclass
class Endpoint:
    """One (base URL, API key, model): the unit a quota workflow budgets."""

    id: str
    label: str
    limits: EndpointQuota


@dataclass
class Wait:
    """What a model request waits for, for heartbeat details."""

    reason: str
    resumes_at: datetime | None


@dataclass
class Waits:
    """One model request's wait, if any (set by `QuotaModel`, read by the heartbeat), and its
    session's priority when the request carried it (`bind` hands it to the request's model)."""

    now: Wait | None = None
    priority: int | None = None


class Leases(Protocol):
    """What a `QuotaModel` asks of the fleet's quota workflows (`Quotas` in quotas.py)."""

    policy: QuotaPolicy

    async def acquire(self, endpoint: Endpoint, ask: Ask, waits: Waits | None = None) -> Grant: ...
    async def priority(self, info: activity.Info, carried: int | None = None) -> int: ...
    def release(self, endpoint: Endpoint, release: Release) -> None: ...
    def opened(self, endpoint: Endpoint, heard: list[Mapping[str, str]]) -> None: ...
    def rate_limited(self, endpoint: Endpoint, exc: ModelHTTPError, release: Release) -> None: ...


def _estimate(messages: list[ModelMessage], parameters: ModelRequestParameters) -> int:
    """Input tokens, about: a token per four bytes of the request's JSON (reconciled afterwards)."""
    size = len(ModelMessagesTypeAdapter.dump_json(messages))
    size += sum(
        len(str(t.parameters_json_schema)) + len(t.description or "") for t in parameters.tool_defs.values()
    )
    return size // 4 + 1


class QuotaModel(WrapperModel):
    """A model whose requests take a lease from their endpoint's quota workflow first."""

    def __init__(
        self, wrapped: Model, quotas: Leases, endpoint: Endpoint, tenant: str, waits: Waits | None = None
    ) -> None:
        super().__init__(wrapped)
        self.quotas = quotas
        self.endpoint = endpoint
        self.tenant = tenant
        self.waits = waits
        """The request's own (`bind`); None on the host's shared model."""

    async def _ask(
        self,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        since: datetime,
        lease_id: str,
    ) -> Ask:
        info = activity.info() if activity.in_activity() else None
        carried = self.waits.priority if self.waits is not None else None
        priority = await self.quotas.priority(info, carried) if info else carried or DEFAULT_PRIORITY
        max_tokens = (settings or {}).get("max_tokens")
        return Ask(
            lease_id=lease_id,
            session=info.workflow_id or "" if info else "",
            tenant=self.tenant,
            weight=self.quotas.policy.weight(self.tenant),
            priority=priority,
            input_tokens=_estimate(messages, params),
            output_tokens=max_tokens or self.endpoint.limits.output_reserve,
            since=since,
            limits=self.endpoint.limits,
        )

    async def _lease(
        self,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        since: datetime,
    ) -> Ask:
        ask = await self._ask(messages, settings, params, since, uuid.uuid4().hex)
        try:
            await self.quotas.acquire(self.endpoint, ask, self.waits)
        except BaseException:
            self.quotas.release(self.endpoint, Release(lease_id=ask.lease_id, sent=False))
            raise
        return ask

    def _done(self, ask: Ask, response: ModelResponse | None, heard: list[Mapping[str, str]]) -> None:
        usage = response.usage if response is not None else None
        self.quotas.release(
            self.endpoint,
            Release(
                lease_id=ask.lease_id,
                ended_at=datetime.now(UTC),
                input_tokens=(usage.input_tokens if usage else 0) or ask.input_tokens,
                output_tokens=(usage.output_tokens if usage else 0)
                or (0 if response is None else ask.output_tokens),
                learned=learned(heard[-1]) if heard else None,
            ),
        )

    def _refused(self, ask: Ask, exc: ModelHTTPError) -> None:
        """A 429: the cooldown for everyone, the lease back (the request reached the provider)."""
        learnt = learned(exc.headers or {})
        release = Release(
            lease_id=ask.lease_id, input_tokens=ask.input_tokens, learned=learnt, ended_at=datetime.now(UTC)
        )
        self.quotas.rate_limited(self.endpoint, exc, release)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        since = datetime.now(UTC)
        while True:
            ask = await self._lease(messages, model_settings, model_request_parameters, since)
            heard: list[Mapping[str, str]] = []
            listening = HEARD.set(heard)
            try:
                response = await self.wrapped.request(messages, model_settings, model_request_parameters)
            except ModelHTTPError as exc:
                if exc.status_code == 429:
                    self._refused(ask, exc)
                    continue
                self._done(ask, None, heard)
                raise
            except BaseException:
                self._done(ask, None, heard)
                raise
            finally:
                HEARD.reset(listening)
            self._done(ask, response, heard)
            return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        since = datetime.now(UTC)
        while True:
            ask = await self._lease(messages, model_settings, model_request_parameters, since)
            stack = AsyncExitStack()
            heard: list[Mapping[str, str]] = []
            listening = HEARD.set(heard)  # the response's headers come as the stream opens
            try:
                stream = await stack.enter_async_context(
                    self.wrapped.request_stream(
                        messages, model_settings, model_request_parameters, run_context
                    )
                )
            except ModelHTTPError as exc:
                await stack.aclose()
                if exc.status_code == 429:
                    self._refused(ask, exc)
                    continue
                self._done(ask, None, heard)
                raise
            except BaseException:
                await stack.aclose()
                self._done(ask, None, heard)
                raise
            finally:
                HEARD.reset(listening)
            self.quotas.opened(self.endpoint, heard)
            break
        try:
            async with stack:
                yield stream
        except ModelHTTPError as exc:
            if exc.status_code == 429:  # refused mid-stream: cool down; the activity's retry sends again
                self._refused(ask, exc)
            else:
                self._done(ask, None, heard)
            raise
        except BaseException:
            self._done(ask, None, heard)
            raise
        self._done(ask, stream.get(), heard)


def bind(model: Model, waits: Waits) -> Model:
    """`model` for one request: its quota-controlled members ask with the priority in `waits` and
    note their waits there. Shallow copies: the host's model is shared by concurrent requests."""
    if isinstance(model, QuotaModel):
        bound = copy.copy(model)
        bound.waits = waits
        return bound
    if isinstance(model, FallbackModel):
        chain = copy.copy(model)
        chain.models = [bind(member, waits) for member in model.models]
        return chain
    return model
