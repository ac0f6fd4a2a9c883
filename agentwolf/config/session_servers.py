"""A session's own MCP servers (an editor's) as they travel through history: their labels, and the
secrets an editor passes with them (`env` and `headers` values), kept out of history.

A session's own servers (an editor's, `WolfClient.start_session(session_servers=...)` and
`join_servers`) travel in workflow input, activity input and results, continue-as-new and the
`compiled` query: everything there is readable by whoever reads the history or queries the tenant's
sessions. So the client seals the values: they go to the payload store its workers share (the
data converter's `ExternalStorage` driver, agentwolf/payloads.py), and every sealed value in the config
the session carries becomes `sealed:<driver>:<claim>`, a reference to them. A worker unseals them when
it connects the server and keeps them in memory only (and redacted from what leaves it).

What is sealed is bound to the session (its workflow id) and to the server's shape (command,
arguments, URL, working directory, the names of its variables and headers): a reference copied into
another session, or into a config that would hand the values to another program, is refused. A random
nonce keeps the stored object's digest from confirming a guessed value.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

from pydantic import BaseModel
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from agentwolf.config.manifest import McpServerConfig

SEALED = "sealed:"
SESSION_SERVER = "session:"
"""Labels of the servers a session's client brought: `session:<name>@<digest>` (declared names hold
no `:`), so a session's server never takes a declared one's place."""


def session_server_label(workflow_id: str, name: str, config: McpServerConfig) -> str:
    """The digest binds the label to one session and the exact config: no two sessions share a
    process, and a changed config is a new server."""
    digest = hashlib.sha256(f"{workflow_id}\n{config.model_dump_json()}".encode()).hexdigest()[:8]
    return f"{SESSION_SERVER}{name}@{digest}"


def server_name(label: str) -> str:
    return label.removeprefix(SESSION_SERVER).rpartition("@")[0]


class Compiled(BaseModel):
    """The part of a session's compiled agent (the `compiled` query) that names its own servers."""

    session_servers: dict[str, McpServerConfig] = {}
    """By label; their secrets sealed."""

    def by_name(self) -> dict[str, McpServerConfig]:
        return {server_name(label): config for label, config in self.session_servers.items()}


class SealError(ValueError):
    """Sealed values that cannot be had: no shared payload store, a reference that is not this
    session's or this server's, a store that lost them."""


class _Secrets(BaseModel):
    """What the payload store holds for one server."""

    workflow_id: str
    shape: str
    nonce: str
    env: dict[str, str] = {}
    headers: dict[str, str] = {}


def is_sealed(config: McpServerConfig) -> bool:
    return any(v.startswith(SEALED) for v in (*config.env.values(), *config.headers.values()))


def shape(config: McpServerConfig) -> str:
    """A digest of the config with its env and header values blanked: what the secrets are for."""
    blank = config.model_copy(
        update={"env": dict.fromkeys(config.env, ""), "headers": dict.fromkeys(config.headers, "")}
    )
    return hashlib.sha256(blank.model_dump_json().encode()).hexdigest()


def _storage(converter: DataConverter) -> ExternalStorage:
    if converter.external_storage is None or not converter.external_storage.drivers:
        raise SealError(
            "an editor's MCP server secrets need the payload store clients and workers share: use a "
            "client built with agentwolf.payloads.data_converter()"
        )
    return converter.external_storage


async def seal(
    converter: DataConverter, namespace: str, workflow_id: str, config: McpServerConfig
) -> McpServerConfig:
    """`config` with its env and header values replaced by a reference to them in the payload store."""
    if not (config.env or config.headers) or is_sealed(config):
        return config
    driver = _storage(converter).drivers[0]
    stored = _Secrets(
        workflow_id=workflow_id,
        shape=shape(config),
        nonce=secrets.token_hex(16),
        env=config.env,
        headers=config.headers,
    )
    target = StorageDriverWorkflowInfo(namespace=namespace, id=workflow_id)
    [claim] = await driver.store(
        StorageDriverStoreContext(target=target), [converter.payload_converter.to_payload(stored)]
    )
    # The claim stays readable (`sha256=<digest>`): `wolf payloads gc` keeps what running histories name.
    ref = f"{SEALED}{driver.name()}:{urlencode(sorted(claim.claim_data.items()), safe='/')}"
    return config.model_copy(
        update={"env": dict.fromkeys(config.env, ref), "headers": dict.fromkeys(config.headers, ref)}
    )


async def unseal(
    converter: DataConverter, workflow_id: str, config: McpServerConfig
) -> tuple[McpServerConfig, list[str]]:
    """`config` with its sealed values read back, and those values (to redact); a config without
    sealed values comes back as it is."""
    refs = {v for v in (*config.env.values(), *config.headers.values()) if v.startswith(SEALED)}
    if not refs:
        return config, []
    if len(refs) > 1:
        raise SealError("an MCP server's sealed values must come from one sealing")
    ref = refs.pop()
    driver_name, _, encoded = ref.removeprefix(SEALED).partition(":")
    driver = _driver(_storage(converter), driver_name)
    try:
        claim = dict(parse_qsl(encoded, strict_parsing=True))
        [payload] = await driver.retrieve(StorageDriverRetrieveContext(), [StorageDriverClaim(claim)])
        stored = converter.payload_converter.from_payload(payload, _Secrets)
    except Exception as exc:  # noqa: BLE001 - whatever the store says, the values cannot be had
        raise SealError(
            f"cannot read an MCP server's sealed values from the payload store ({type(exc).__name__}: "
            "clients and workers must share WOLF_PAYLOAD_STORE)"
        ) from None
    if stored.workflow_id != workflow_id or stored.shape != shape(config):
        raise SealError("an MCP server's sealed values belong to another session or another server")
    try:
        env = {k: stored.env[k] if v == ref else v for k, v in config.env.items()}
        headers = {k: stored.headers[k] if v == ref else v for k, v in config.headers.items()}
    except KeyError as exc:
        raise SealError(f"no sealed value for {exc.args[0]!r}") from None
    opened = config.model_copy(update={"env": env, "headers": headers})
    return opened, [*stored.env.values(), *stored.headers.values()]


async def same_secrets(
    converter: DataConverter, workflow_id: str, sealed: McpServerConfig, plain: McpServerConfig
) -> bool:
    """Whether `sealed` (a session's) is `plain` sealed: a re-joined unchanged server keeps its
    reference, its label and its process."""
    try:
        return (await unseal(converter, workflow_id, sealed))[0] == plain
    except SealError:
        return False


def _driver(storage: ExternalStorage, name: str) -> StorageDriver:
    drivers: Mapping[str, StorageDriver] = {d.name(): d for d in storage.drivers}
    if name not in drivers:
        raise SealError(f"sealed by payload store driver {name!r}, which this process does not have")
    return drivers[name]
