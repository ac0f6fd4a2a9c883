"""Connecting to Temporal as every Temporal tool does (temporalio.envconfig), with AgentWolf's data
converter: the one way clients, the CLI and workers connect, below all of them."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client
from temporalio.envconfig import ClientConfig, ClientConnectConfig

from agentwolf.payloads import data_converter
from agentwolf.telemetry import tracing


def connect_config(
    address: str | None = None,
    namespace: str | None = None,
    profile: str | None = None,
    *,
    api_key: str | None = None,
    tls: bool | None = None,
) -> ClientConnectConfig:
    """What every Temporal tool connects with (the profile from TEMPORAL_CONFIG_FILE or the default
    file, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS...); explicit arguments
    win. No `target_host` when nothing names one."""
    config = ClientConfig.load_client_connect_config(profile=profile)
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    if api_key:
        config["api_key"] = api_key
        config.setdefault("tls", True)  # as envconfig does for a profile's API key
    if tls is not None:
        config["tls"] = (config.get("tls") or True) if tls else False
    return config


async def connect(
    address: str | None = None,
    namespace: str | None = None,
    profile: str | None = None,
    *,
    api_key: str | None = None,
    tls: bool | None = None,
) -> Client:
    """Connect as `connect_config` says (localhost:7233 when nothing names a server), with
    AgentWolf's pydantic data converter, traced when `OTEL_*` asks for it (agentwolf.telemetry)."""
    config = connect_config(address, namespace, profile, api_key=api_key, tls=tls)
    config.setdefault("target_host", "localhost:7233")
    interceptors = tracing.interceptors()
    deadline = time.monotonic() + STARTING_GRACE
    while True:
        try:
            return await Client.connect(**config, data_converter=data_converter(), interceptors=interceptors)
        except RuntimeError as exc:
            if STARTING not in str(exc) or time.monotonic() > deadline:
                raise TemporalUnreachable(config["target_host"], str(exc)) from exc
            await asyncio.sleep(0.2)


class TemporalUnreachable(RuntimeError):
    """Connecting failed. Says why in words (the bridge's message is a Rust debug dump, kept as the
    `__cause__`); a RuntimeError, as the bridge's own connect error is."""

    def __init__(self, target: str, bridge_message: str) -> None:
        self.target = target
        self.reason = _reason(bridge_message)
        super().__init__(f"cannot reach Temporal at {target}: {self.reason}")


_REASONS = (  # (what the bridge's message contains, lowercased; what it means)
    ("connection refused", "connection refused, no server listens there"),
    ("dns error", "the host name does not resolve"),
    ("timed out", "no answer in time"),
    ("unauthenticated", "the server refused the credentials"),
    ("permission", "the server refused the credentials"),
    ("certificate", "the TLS handshake failed"),
    ("tls", "the TLS handshake failed"),
    ("get_system_info", "something answers there, but not a Temporal frontend"),
)


def _reason(bridge_message: str) -> str:
    lowered = bridge_message.lower()
    return next((meaning for key, meaning in _REASONS if key in lowered), "the connection failed")


# A server that just started listens before its frontend serves: its first connects say so, and
# are worth repeating for a while (`wolf up`, a restarted dev server), unlike any other failure.
STARTING = "Frontend is not healthy yet"
STARTING_GRACE = 30.0
