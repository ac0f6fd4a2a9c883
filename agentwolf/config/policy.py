"""The worker's own policy: what a manifest may reach on this worker.

A manifest is code on the worker (it names commands, URLs, environment variables), and whoever
writes it may be a tenant the operator does not trust. So its limits come from the worker, never
from the manifest: which `${VAR}` placeholders each tenant may use, which stdio commands MCP servers
may run, and whether a manifest may give them an environment or a working directory. A manifest's
own `host.allowed_commands` can only narrow the policy. HTTP MCP servers may be held to a `urls`
allowlist; those whose config comes from an editor or a skill file never reach loopback, link-local
or private addresses unless the policy says `private_urls: true`.

The policy is read from `--policy FILE`, else `$WOLF_POLICY`, else `$WOLF_HOME/policy.yaml`; without
one, the built-in default lets manifests use only the example config's variables and run any command
(a single-user machine, where the manifest author is the operator).
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import logging
import os
import shlex
import shutil
import socket
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.config.origins import WebOrigin
from agentwolf.config.placeholders import has_placeholder, names, resolve, substitute
from agentwolf.config.quotas import QuotaPolicy, renamed
from agentwolf.paths import data_dir

POLICY_ENV = "WOLF_POLICY"
ANY_TENANT = "*"
DEFAULT_SECRETS = ["WOLF_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"]
"""What the example config uses: allowed for every tenant unless the policy sets `default_secrets: false`."""

CODE_ENV = [
    "PATH", "LD_*", "DYLD_*", "PYTHON*", "NODE_*", "NPM_CONFIG_*", "PERL5*", "PERLLIB", "RUBY*", "GEM_*",
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS", "CLASSPATH", "GIT_*", "LUA_*", "TCLLIBPATH", "GCONV_PATH", "UV_*", "PIP_*",
]  # fmt: skip
"""Variables that make an interpreter or the loader run code the command line did not name
(matched case-insensitively): refused in a manifest's `env` unless the policy sets `code_env: true`."""

SECRET_MIN_LEN = 8
"""Resolved values at least this long are redacted from tool output, errors and logs (shorter ones
would mangle ordinary text)."""


class PolicyError(ValueError):
    """What a manifest asks for and the worker policy refuses."""


class SecretRefused(PolicyError):
    def __init__(self, name: str, tenant: str, source: str) -> None:
        super().__init__(
            f"${{{name}}} is not allowed for tenant {tenant!r} by the worker policy ({source}); "
            f"the operator lists the variables manifests may use under `secrets:`"
        )
        self.name = name


class ApiKeyEntry(BaseModel):
    """A key `wolf serve` accepts: its SHA-256 (hex), never the key; the tenant it acts as, and
    optionally the only configs (registry names, `served` for the served config) and agents it may use."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The key's SHA-256, in hex (`printf %s "$KEY" | sha256sum`)."""
    tenant: str
    """The tenant its requests act as."""
    configs: frozenset[str] | None = None
    """The only registry configs it may use (`served` for the config `wolf serve` serves); None: any."""
    agents: frozenset[str] | None = None
    """The only agents it may use; None: any."""
    subject: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@+:-]{0,127}$")
    """Whom it acts for: the owner of the sessions it starts, whose long-term memory they use (None:
    the request's `user` within this key, else the key itself)."""


class WorkspacePolicy(BaseModel):
    """Where workspace agents' commands run on this worker."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
    """`bubblewrap`: commands run sandboxed (a worker without it refuses workspace agents); `none`:
    they run as plain processes of the worker's user, in the workspace folder, isolating nothing."""
    network: bool = False
    """Let sandboxed commands use the network (all of it: there is no per-address rule yet)."""
    read_only: list[str] = []
    """Host folders sandboxed commands see read-only besides `/usr` (a toolchain, a virtualenv)."""
    path: list[str] = []
    """PATH entries put before `/usr/local/bin:/usr/bin:/bin` in sandboxed commands."""


class WorkerPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    secrets: dict[str, list[str]] = {}
    """Tenant (or `*` for every tenant) -> variable names (glob patterns) manifests may reference,
    besides the default ones."""
    default_secrets: bool = True
    """The example config's variables (`DEFAULT_SECRETS`) stay allowed for every tenant: a first policy
    that allows one MCP token must not break the demo. A fleet serving tenants sets it false."""
    commands: list[str] | None = None
    """Stdio commands MCP servers may run; None: any command on PATH. `prog` allows that program with
    any arguments; `prog arg1 arg2` allows exactly that command line."""
    server_env: bool = True
    """Manifests may set `env` for stdio servers (code-loading variables stay refused)."""
    server_cwd: bool = True
    """Manifests may set `cwd` for stdio servers."""
    code_env: bool = False
    """Allow code-loading variables (`CODE_ENV`) in a manifest's `env`."""
    urls: list[str] | None = None
    """URLs (glob patterns, e.g. `https://mcp.example.com/*`) HTTP MCP servers may use, a manifest's
    and an editor's alike; None: any URL."""
    private_urls: bool = False
    """Let MCP servers whose config the operator did not write (an editor's, a skill file's) reach
    loopback, link-local and private addresses (this machine's services, the internal network);
    manifest servers may unless `urls` says otherwise."""
    web_private: list[str] = []
    """Addresses (`ip:port` globs, e.g. `10.1.2.3:*`, `*` for all) `web_fetch` may reach although they
    are loopback, link-local or private; checked on the address each request connects to, redirects too."""
    web_max_bytes: int = Field(20_000_000, ge=1000)
    """The most bytes (decoded) `web_fetch` reads of a page, whatever a manifest's `max_bytes` says."""
    web_max_chars: int = Field(500_000, ge=100)
    """The most characters of a page `web_fetch` returns, whatever the model's `max_chars` says."""
    api_keys: list[ApiKeyEntry] = []
    """Keys `wolf serve` accepts (besides `WOLF_API_KEYS`)."""
    cors_origins: list[WebOrigin] = []
    """Web origins whose pages may call `wolf serve` from a browser (besides `--cors-origin`);
    `*` for any. None by default: no cross-origin access."""
    workspaces: WorkspacePolicy = WorkspacePolicy()
    """How workspace agents' commands run here: the sandbox, its network, extra read-only folders."""
    quotas: QuotaPolicy = QuotaPolicy()
    """Provider quotas, tenant weights and how long a turn may wait for them (formerly `flow:`)."""
    source: str = "built-in default policy"

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        return renamed(data, "flow", "quotas", "")

    @field_validator("commands")
    @classmethod
    def _parse(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or ():
            if not shlex.split(entry):
                raise ValueError("an empty command")
        return value

    def allows_secret(self, tenant: str, name: str) -> bool:
        defaults = DEFAULT_SECRETS if self.default_secrets else []
        patterns = [*defaults, *self.secrets.get(ANY_TENANT, ()), *self.secrets.get(tenant, ())]
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    def secrets_for(self, tenant: str, env: Mapping[str, str] | None = None) -> Secrets:
        return Secrets(self, tenant, os.environ if env is None else env)

    def stdio_argv(self, config: McpServerConfig, narrowed: list[str] | None) -> tuple[str, list[str]]:
        """The program path and arguments of a stdio server, or a PolicyError saying what is refused."""
        assert config.command is not None
        if has_placeholder(config.command) or not config.command.strip():
            raise PolicyError(f"command {config.command!r}: a command must be a plain program name or path")
        program = command_path(config.command)
        if self.commands is not None and not any(
            _matches(entry, program, config.args) for entry in self.commands
        ):
            raise PolicyError(
                f"command {config.command!r} with arguments {config.args} is not allowed by the worker "
                "policy "
                f"({self.source}; allowed: {self.commands})"
            )
        if narrowed is not None and not any(_matches(entry, program, config.args) for entry in narrowed):
            raise PolicyError(f"command {config.command!r} is not in host.allowed_commands")
        if config.env and not self.server_env:
            raise PolicyError(
                f"the worker policy ({self.source}) does not let manifests set `env` for MCP servers"
            )
        if config.cwd and not self.server_cwd:
            raise PolicyError(
                f"the worker policy ({self.source}) does not let manifests set `cwd` for MCP servers"
            )
        if not self.code_env:
            loading = sorted(k for k in config.env if is_code_env(k))
            if loading:
                raise PolicyError(
                    f"env {', '.join(loading)} can make the server run code its command line does not name; "
                    f"refused by the worker policy ({self.source}; `code_env: true` allows it)"
                )
        return program, list(config.args)

    def check_url(self, url: str) -> None:
        """An HTTP MCP server's URL: http or https, and one the `urls` allowlist names."""
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise PolicyError(f"MCP server URL {url!r}: an http:// or https:// URL with a host")
        if self.urls is not None and not any(fnmatch.fnmatchcase(url, p) for p in self.urls):
            raise PolicyError(
                f"MCP server URL {url!r} is not allowed by the worker policy ({self.source}; allowed: "
                f"{self.urls})"
            )

    async def check_reach(self, url: str) -> None:
        """An untrusted server's URL (an editor's, a skill file's) must not lead to this machine or a
        private network unless `private_urls` allows it: every address its host resolves to is
        checked, so a name that points at 127.0.0.1 is refused as 127.0.0.1 is."""
        if self.private_urls:
            return
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise PolicyError(f"MCP server URL {url!r}: cannot resolve {host!r} ({exc})") from None
        for address in {str(info[4][0]) for info in found}:
            if is_private(address):
                raise PolicyError(
                    f"MCP server URL {url!r}: {host} is {address}, a loopback, link-local or private "
                    f"address; servers from editors and skill files may not reach this machine or "
                    f"private networks (worker policy {self.source}; `private_urls: true` allows it)"
                )

    def problems(self, manifest: Manifest, tenant: str) -> list[str]:
        """What this policy would refuse in `manifest` for `tenant` (for `wolf config validate`)."""
        found = []
        for name in sorted(set(names(manifest.model_dump_json()))):
            if name != "tenant" and not self.allows_secret(tenant, name):
                found.append(
                    f"${{{name}}}: not allowed for tenant {tenant!r} by the worker policy ({self.source})"
                )
        for server, config in manifest.host.mcp_servers.items():
            try:
                if config.command is not None:
                    self.stdio_argv(config, manifest.host.allowed_commands)
                elif config.url is not None and not has_placeholder(config.url):
                    self.check_url(config.url)
            except (PolicyError, FileNotFoundError) as exc:
                found.append(f"host.mcp_servers.{server}: {exc}")
        for name, agent in manifest.agents.items():
            if agent.acp is None:
                continue
            try:  # an ACP agent's command is held to the rules of an MCP server's
                self.stdio_argv(McpServerConfig(**agent.acp.model_dump()), manifest.host.allowed_commands)
            except (PolicyError, FileNotFoundError) as exc:
                found.append(f"agents.{name}.acp: {exc}")
        return found


NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
"""NAT64's well-known prefix (RFC 6052): the last 32 bits are the IPv4 address it reaches."""
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
"""NAT64's local-use prefix (RFC 8215): translation inside one network, never global."""
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def is_private(address: str) -> bool:
    """Loopback, link-local, private or multicast; an IPv6 address that carries an IPv4 one (mapped,
    IPv4-compatible, NAT64, 6to4, Teredo) is private when any IPv4 address it carries is, since
    Python counts NAT64 and 6to4 addresses as global whatever they lead to."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_multicast or not ip.is_global:
        return True
    if isinstance(ip, ipaddress.IPv4Address):
        return False
    return ip in NAT64_LOCAL or any(is_private(str(inner)) for inner in _carried(ip))


def _carried(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to or stands for."""
    last = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return [
        *([last] if ip in NAT64_WELL_KNOWN or ip in IPV4_COMPATIBLE else []),
        *([ip.sixtofour] if ip.sixtofour else []),
        *(ip.teredo or ()),
    ]


def is_code_env(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name.upper(), p) for p in CODE_ENV)


def command_path(command: str) -> str:
    """Find a command on PATH, else beside this interpreter (a venv's console scripts)."""
    found = shutil.which(command) or shutil.which(command, path=str(Path(sys.executable).parent))
    if found is None:
        raise FileNotFoundError(f"command {command!r} not found on PATH")
    return found


def _matches(entry: str, program: str, args: list[str]) -> bool:
    """The same executable (compared by real path: spellings and symlinks do not matter), and the
    same arguments when the entry names any."""
    words = shlex.split(entry)
    try:
        allowed = command_path(words[0])
    except FileNotFoundError:
        return False
    return os.path.realpath(allowed) == os.path.realpath(program) and (len(words) == 1 or words[1:] == args)


@dataclass
class Secrets:
    """Resolves placeholders for one tenant under the policy; remembers what it handed out so that
    it can be redacted from anything that leaves the worker."""

    policy: WorkerPolicy
    tenant: str
    env: Mapping[str, str]
    values: set[str] = field(default_factory=set)

    def resolve(self, value: str) -> str:
        for name in names(value):
            if not self.policy.allows_secret(self.tenant, name):
                raise SecretRefused(name, self.tenant, self.policy.source)
        resolved = resolve(value, self.env)
        if resolved != value:
            self.hide(self.env.get(name, "") for name in names(value))
        return resolved

    def shown(self, value: str) -> str:
        """`value` resolved as far as that shows no secret, for names that leave the worker (a model
        label in history, events, metrics): a placeholder whose variable is unset becomes its default
        (the manifest's own text), one the policy allows becomes its value unless that value is one
        `hide` keeps from leaving the worker; others stay as written (`${NAME}`). Never raises."""

        def choose(name: str, default: str | None) -> str | None:
            if not self.policy.allows_secret(self.tenant, name):
                return None
            if name not in self.env:
                return default
            return None if is_secret(self.env[name]) else self.env[name]

        return self.redact(substitute(value, choose))

    def hide(self, secrets: Iterable[str]) -> None:
        """Redact these values (as long as `SECRET_MIN_LEN`) from what leaves the worker, logs included."""
        for secret in secrets:
            if is_secret(secret):
                self.values.add(secret)
                REDACTED.add(secret)

    def redact(self, text: str) -> str:
        return redact(text, self.values)


def is_secret(value: str) -> bool:
    """Whether a resolved value is kept from leaving the worker (shorter ones would mangle ordinary
    text when redacted, and are shown)."""
    return len(value) >= SECRET_MIN_LEN


REDACTED: set[str] = set()
"""Every secret value this process resolved (for the log filter)."""
MASK = "****"


def redact(text: str, values: set[str] | None = None) -> str:
    for value in sorted(REDACTED if values is None else values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_logs() -> None:
    """Log records never carry a secret value this process resolved (a library may log a URL with
    its query, an error may echo a header): every record's message is redacted as it is made."""
    make = logging.getLogRecordFactory()
    if getattr(make, "redacting", False):
        return

    def redacting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if REDACTED:
            try:
                message = record.getMessage()
            except (TypeError, ValueError):
                return record
            if (clean := redact(message)) != message:
                record.msg, record.args = clean, None
        return record

    redacting.redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting)


NO_SECRETS = WorkerPolicy(default_secrets=False, source="no placeholders for configs from skill files")


def load_policy(path: str | Path | None = None) -> WorkerPolicy:
    """`path`, else `$WOLF_POLICY`, else `$WOLF_HOME/policy.yaml` when it exists, else the default."""
    explicit = path or os.environ.get(POLICY_ENV)
    file = Path(explicit) if explicit else data_dir() / "policy.yaml"
    if not explicit and not file.exists():
        return WorkerPolicy()
    try:
        data = yaml.safe_load(file.read_text()) or {}
        if not isinstance(data, dict):
            raise PolicyError(f"{file}: the policy must be a mapping")
        return WorkerPolicy.model_validate({**data, "source": str(file)})
    except OSError as exc:
        raise PolicyError(f"{file}: cannot read the worker policy: {exc.strerror or exc}") from exc
    except (yaml.YAMLError, ValidationError) as exc:
        raise PolicyError(f"{file}: invalid worker policy: {exc}") from exc
