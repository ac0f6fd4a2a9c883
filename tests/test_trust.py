"""Trust boundaries a manifest (or a crafted workflow input) cannot cross: secrets, commands, tenants,
skill-brought servers, permission rules, providers. Each test plays the attacker with real parts."""

from __future__ import annotations

import base64
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from pydantic_ai.messages import ToolCallPart
from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agentwolf.activities.session import SessionActivities
from agentwolf.config.manifest import Manifest, McpServerConfig, Permissions
from agentwolf.config.policy import PolicyError, WorkerPolicy, load_policy
from agentwolf.extensions.pool import McpPool, McpUnavailable
from agentwolf.hosts.host import HostRegistry
from agentwolf.workflows.session.workflow import SessionWorkflow
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import workflow_id
from tests.conftest import TOOLS_SERVER, make_manifest, tools_server, wait_for, worker_process
from tests.support.models import Script, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.test_cli import _wolf
from tests.test_providers import _port_open

CANARIES = {
    "CANARY_MODEL": "gpt-canary-model-5d1f",
    "CANARY_KEY": "sk-canary-key-9a7c3e",
    "CANARY_TOKEN": "canary-token-0b8e2f",
    "CANARY_QUERY": "canary-query-4c6d1a",
    "CANARY_ARG": "canary-arg-77e0b1",
    "CANARY_ENV": "canary-env-3f9a2c",
}
CANARY_POLICY = WorkerPolicy(secrets={"*": ["CANARY_*"]}, source="test policy")


def history_text(history) -> str:
    """Every payload of a history, decoded (`to_json()` keeps payload bytes base64: a plain search
    there can never find a secret)."""
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "data" and isinstance(value, str):
                    found.append(base64.b64decode(value).decode(errors="replace"))
                elif key == "metadata" and isinstance(value, dict):
                    found.extend(base64.b64decode(v).decode(errors="replace") for v in value.values())
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(history.to_json()))
    return "\n".join(found)


def test_history_text_finds_what_to_json_hides():
    """The scanner itself can fail: a value inside a payload is invisible in `to_json()`, found here."""
    from google.protobuf.json_format import MessageToJson
    from temporalio.api.history.v1 import History

    history = History()
    event = history.events.add()
    event.workflow_execution_started_event_attributes.input.payloads.add(data=b'"needle-123"')

    class Fetched:
        def to_json(self) -> str:
            return MessageToJson(history)

    assert "needle-123" not in Fetched().to_json()
    assert "needle-123" in history_text(Fetched())


# -- 1, 2, 7: secrets are resolved at the moment of use and never leave the worker ------------------


async def test_secrets_reach_their_use_and_nothing_else(
    wolf, run_worker, http_tools_server, monkeypatch, caplog, tmp_path
):
    caplog.set_level(logging.DEBUG)
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    # A tool that echoes a secret it was given (its env) must not carry it into history either.

    def reply(request):
        done = tool_outputs(request)
        if not done:
            # Both servers list the same tools: their names carry the server.
            return Reply(
                tool_calls=[("local__env", {"name": "SECRET"}), ("web__echo", {"text": "over http"})]
            )
        return Reply(text="done: " + " | ".join(done))

    await wait_for(lambda: _port_open(http_tools_server))
    with ScriptedOpenAI(reply) as server:
        manifest = Manifest.model_validate(
            {
                "host": {
                    # `providers.openai` must serve the `openai-chat:` spec too (finding 7).
                    "models": {
                        "providers": {"openai": {"api_key": "${CANARY_KEY}", "base_url": server.base_url}}
                    },
                    "mcp_servers": {
                        "local": {
                            "command": sys.executable,
                            "args": [TOOLS_SERVER, "stdio", "${CANARY_ARG}"],
                            "env": {"SECRET": "${CANARY_ENV}"},
                        },
                        "web": {
                            "url": http_tools_server + "?k=${CANARY_QUERY}",
                            "headers": {"Authorization": "Bearer ${CANARY_TOKEN}"},
                        },
                    },
                },
                "agents": {
                    "a": {
                        "model": "openai-chat:${CANARY_MODEL}",
                        "capabilities": [{"mcp": "local"}, {"mcp": "web"}],
                    }
                },
            }
        )
        path = tmp_path / "wolf.yaml"
        path.write_text(json.dumps(manifest.model_dump(mode="json")))
        async with run_worker(policy=CANARY_POLICY):
            sid = await wolf.submit("go", "a", manifest)
            result = await wolf.result(sid)
            status = (await wolf.status(sid)).model_dump_json()
            events = [event.model_dump_json() async for _, event in wolf.events(sid)]
    # Used where they belong: the provider got the key and the model name; the tool got its env.
    assert server.requests[0]["model"] == CANARIES["CANARY_MODEL"]
    assert server.headers[0]["authorization"] == f"Bearer {CANARIES['CANARY_KEY']}"
    assert result.output == "done: **** | over http"  # the echoed secret was redacted on the worker
    history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    recorded = history_text(history)
    assert "${CANARY_MODEL}" in recorded  # placeholders travel; values do not
    show = await _wolf(None, "config", "show", str(path), "--json")
    assert show.returncode == 0, show.stderr
    for where, content in {
        "history": recorded,
        "events": "\n".join(events),
        "status": status,
        "logs": caplog.text,
        "config show": show.stdout,
    }.items():
        for name, value in CANARIES.items():
            assert value not in content, f"{name} leaked into {where}"


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ({"model": "openai:${WORKER_SECRET}"}, "${WORKER_SECRET} is not allowed for tenant 'default'"),
        ({"model": "openai:${UNSET_CANARY}"}, "environment variable UNSET_CANARY is not set"),
        ({"model": "openai:${WORKER_SECRET:-fallback}"}, "${WORKER_SECRET} is not allowed"),
    ],
)
async def test_a_placeholder_the_policy_refuses_or_that_is_unset_fails_clearly(
    wolf, run_worker, monkeypatch, field, expected
):
    monkeypatch.setenv("WORKER_SECRET", "sk-worker-secret-1234")
    manifest = Manifest.model_validate({"agents": {"a": field}})
    async with run_worker(
        policy=CANARY_POLICY.model_copy(update={"secrets": {"*": ["CANARY_*", "UNSET_*"]}})
    ):
        sid = await wolf.submit("hi", "a", manifest)
        with pytest.raises(WorkflowFailureError) as failure:
            await wolf.result(sid)
    assert expected in str(failure.value.cause)
    assert "sk-worker-secret-1234" not in str(failure.value.cause)


async def test_mcp_servers_placeholders_are_policy_checked_at_use():
    pool = _pool(
        {
            "s": tools_server(TOKEN="${WORKER_SECRET}"),
            "h": {"url": "http://127.0.0.1:9/mcp?${WORKER_SECRET}"},
        },
        secrets=CANARY_POLICY.secrets_for("acme", {"WORKER_SECRET": "sk-worker-secret-1234"}),
    )
    try:
        for server in ("s", "h"):
            with pytest.raises(
                McpUnavailable, match=r"\$\{WORKER_SECRET\} is not allowed for tenant 'acme'"
            ) as exc:
                await pool.list_tools(server)
            assert exc.value.permanent and "sk-worker-secret" not in str(exc.value)
    finally:
        await pool.close()


def test_policy_secrets_are_per_tenant_and_files_load(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("secrets: {'*': [SHARED_*], acme: [ACME_TOKEN]}\ncommands: [mcp-server-time]\n")
    policy = load_policy(path)
    assert policy.allows_secret("acme", "ACME_TOKEN") and policy.allows_secret("beta", "SHARED_X")
    assert not policy.allows_secret("beta", "ACME_TOKEN")
    (tmp_path / "bad.yaml").write_text("secrets: [not, a, map]\n")
    with pytest.raises(PolicyError, match="bad.yaml: invalid worker policy"):
        load_policy(tmp_path / "bad.yaml")


def test_a_first_policy_extends_the_default_secrets_unless_it_says_otherwise(tmp_path):
    """The docs' first policy (one MCP token) must not refuse the example config's ${WOLF_MODEL}."""
    path = tmp_path / "policy.yaml"
    path.write_text('secrets: {"*": [TOKEN]}\n')
    policy = load_policy(path)
    assert all(policy.allows_secret("default", n) for n in ("TOKEN", "WOLF_MODEL", "OPENAI_API_KEY"))
    assert not policy.allows_secret("default", "AWS_SECRET_ACCESS_KEY")
    path.write_text('secrets: {"*": [TOKEN]}\ndefault_secrets: false\n')
    strict = load_policy(path)
    assert strict.allows_secret("default", "TOKEN") and not strict.allows_secret("default", "WOLF_MODEL")


def _pool(servers: dict, **options) -> McpPool:
    return McpPool({name: McpServerConfig.model_validate(c) for name, c in servers.items()}, **options)


# -- 3: commands, env and cwd are the worker's call, whatever the manifest says ---------------------

POLICY = WorkerPolicy(
    commands=[f"{sys.executable} {TOOLS_SERVER}", "mcp-server-time"], server_cwd=False, source="test policy"
)


@pytest.mark.parametrize(
    ("config", "refusal"),
    [
        ({"command": "bash", "args": ["-c", "id"]}, "not allowed by the worker policy"),
        ({"command": "/bin/sh"}, "not allowed by the worker policy"),
        ({"command": sys.executable, "args": ["-c", "print(1)"]}, "not allowed by the worker policy"),
        ({"command": sys.executable, "args": [TOOLS_SERVER, "extra"]}, "not allowed by the worker policy"),
        ({"command": "${SHELL}"}, "a plain program name"),
        ({"command": "mcp-server-time; id"}, "not found on PATH"),
        ({"command": "./mcp-server-time"}, "not found on PATH"),
        ({"command": "npx", "args": ["-c", "id"]}, "not"),
        (
            {"command": "mcp-server-time", "env": {"PYTHONPATH": "/tmp/evil"}},
            "PYTHONPATH can make the server run code",
        ),
        ({"command": "mcp-server-time", "env": {"LD_PRELOAD": "/tmp/evil.so"}}, "LD_PRELOAD"),
        ({"command": "mcp-server-time", "env": {"node_options": "--require /tmp/x"}}, "node_options"),
        (
            {"command": "mcp-server-time", "env": {"npm_config_script_shell": "/tmp/x"}},
            "npm_config_script_shell",
        ),
        ({"command": "mcp-server-time", "env": {"PATH": "/tmp/evil:/usr/bin"}}, "PATH"),
        ({"command": "mcp-server-time", "env": {"BASH_ENV": "/tmp/x"}}, "BASH_ENV"),
        ({"command": "mcp-server-time", "cwd": "/tmp"}, "does not let manifests set `cwd`"),
    ],
)
async def test_command_policy_refuses_bypass_spellings(config, refusal, tmp_path):
    marker = tmp_path / "ran"
    pool = _pool(
        {"s": {**config, "env": {**config.get("env", {}), "MARK": str(marker)}}},
        secrets=POLICY.secrets_for("t"),
    )
    try:
        with pytest.raises(McpUnavailable, match=refusal) as exc:
            await pool.list_tools("s")
        assert exc.value.permanent
        assert pool.connects == {}  # nothing was started
    finally:
        await pool.close()


async def test_the_manifest_can_narrow_the_command_policy_but_never_widen_it():
    secrets = POLICY.secrets_for("t")
    allowed = _pool({"s": tools_server()}, secrets=secrets)
    narrowed = _pool({"s": tools_server()}, secrets=secrets, allowed_commands=["mcp-server-time"])
    widened = _pool({"s": {"command": "bash"}}, secrets=secrets, allowed_commands=["bash"])
    try:
        assert "echo" in {t.name for t in await allowed.list_tools("s")}
        with pytest.raises(McpUnavailable, match="not in host.allowed_commands"):
            await narrowed.list_tools("s")
        with pytest.raises(McpUnavailable, match="not allowed by the worker policy"):
            await widened.list_tools("s")
    finally:
        for pool in (allowed, narrowed, widened):
            await pool.close()


async def test_mcp_children_cannot_read_the_workers_environment(env, task_queue, wolf):
    """A worker process started with a secret in its environment; its MCP child tries /proc."""
    secret = f"sk-worker-env-{uuid.uuid4().hex}"

    def reply(request):
        done = tool_outputs(request)
        return Reply(text="seen: " + done[0]) if done else Reply(tool_calls=[("parent_environ", {})])

    with ScriptedOpenAI(reply) as server:
        manifest = Manifest.model_validate(
            {
                "host": {
                    "models": {"providers": {"openai": {"api_key": "k", "base_url": server.base_url}}},
                    "mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}},
                },
                "agents": {"a": {"model": "openai-chat:m", "capabilities": [{"mcp": "tools"}]}},
            }
        )
        proc = worker_process(env, task_queue, extra_env={"WORKER_ONLY_SECRET": secret})
        try:
            sid = await wolf.submit("look around", "a", manifest)
            result = await wolf.result(sid)
        finally:
            proc.terminate()
            proc.wait(15)
    assert secret not in result.output
    assert "environ: PermissionError" in result.output and "mem: PermissionError" in result.output, (
        result.output
    )


# -- 4: the tenant is the workflow id's --------------------------------------------------------------


async def test_a_session_whose_input_names_another_tenant_is_refused(wolf, run_worker):
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}) as hosts:
        handle = await wolf.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(
                session_id="spoof",
                tenant="victim",
                agent="a",
                manifest=make_manifest(),
                prompt="hi",
                background=True,
            ),
            id=workflow_id("attacker", f"spoof-{uuid.uuid4().hex[:6]}"),
            task_queue=wolf.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        assert "refused" in str(failure.value.cause) and "'attacker'" in str(failure.value.cause)
        assert not [h for h in hosts.hosts() if h.tenant == "victim"]


async def test_a_worker_for_one_tenant_serves_no_other(client, task_queue, run_worker):
    from agentwolf.client.wolf_client import WolfClient

    beta = WolfClient(client, tenant="beta", task_queue=task_queue)
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}, tenant="acme") as hosts:
        sid = await beta.submit("hi", "a", make_manifest())
        with pytest.raises(WorkflowFailureError) as failure:
            await beta.result(sid)
        assert "serves tenant 'acme' only, not 'beta'" in str(failure.value.cause)
        assert not hosts.hosts()


@workflow.defn(name="CraftedCall", sandboxed=False)
class CraftedCall:
    """An attacker's workflow calling `wolf.call_tool` with a crafted input."""

    @workflow.run
    async def run(self, inp: dict) -> dict:
        return await workflow.execute_activity(
            "wolf.call_tool", inp, result_type=dict, start_to_close_timeout=timedelta(seconds=30)
        )


@asynccontextmanager
async def _crafted_calls(client, task_queue) -> AsyncIterator[HostRegistry]:
    """A worker running `CraftedCall` workflows and the real `wolf.call_tool` activity."""
    hosts = HostRegistry()
    activities = SessionActivities(hosts)
    try:
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[CraftedCall],
            activities=[activities.call_tool],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            yield hosts
    finally:
        await hosts.close()


async def test_crafted_activity_input_cannot_spoof_a_tenant_or_replace_a_server(client, task_queue, tmp_path):
    marker = tmp_path / "evil-ran"
    manifest = make_manifest()
    evil = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w')"]}
    wid = workflow_id("attacker", f"crafted-{uuid.uuid4().hex[:6]}")
    base = {"server": "tools", "tool": "echo", "arguments": {"text": "hi"}, "call_id": "c1",
            "manifest": manifest.model_dump(mode="json")}  # fmt: skip
    async with _crafted_calls(client, task_queue) as hosts:
        ref = {"config_id": manifest.identity, "tenant": "attacker", "workflow_id": wid}
        # A skill's config in the input (the old `server_config`) must not replace the declared server.
        out = await client.execute_workflow(
            CraftedCall.run, {**base, "ref": ref, "server_config": evil}, id=wid, task_queue=task_queue
        )
        assert out["content"] == "hi" and not marker.exists()
        assert hosts.find(manifest.identity, "attacker").pool.servers["tools"].command == sys.executable
        assert hosts.find(manifest.identity, "attacker").pool.servers["tools"].args == [TOOLS_SERVER]
        # A ref naming another tenant (or another session) is refused.
        for forged in ({**ref, "tenant": "victim"}, {**ref, "workflow_id": workflow_id("victim", "x")}):
            with pytest.raises(WorkflowFailureError) as failure:
                await client.execute_workflow(
                    CraftedCall.run,
                    {**base, "ref": forged},
                    id=f"{wid}-{forged['tenant']}-{len(forged['workflow_id'])}",
                    task_queue=task_queue,
                )  # fmt: skip
            assert "TenantMismatch" in repr(failure.value.cause.cause) or "refused" in str(
                failure.value.cause.cause
            )
        assert hosts.find(manifest.identity, "victim") is None


async def test_a_worker_restores_a_skills_server_only_from_the_skill_file_it_reads(
    client, task_queue, tmp_path
):
    """A worker that did not compile the turn gets a skill server's label only: it starts the server
    from the skill file it reads itself, and a label whose digest matches no file starts nothing."""
    from agentwolf.hosts.servers import skill_server_label
    from tests.test_skills_in_sessions import manifest as skills_manifest
    from tests.test_skills_in_sessions import write_skill

    skills = tmp_path / "skills"
    config = {"command": sys.executable, "args": [TOOLS_SERVER]}
    write_skill(skills, "helped", extra=f"mcp-servers:\n  helper: {json.dumps(config)}\n")
    manifest = skills_manifest(skills, allow_skill_servers=True)
    label = skill_server_label("helped", "helper", McpServerConfig.model_validate(config))
    forged = label.rsplit("@", 1)[0] + "@00000000"

    async def call(server: str) -> dict:
        wid = workflow_id("default", f"restore-{uuid.uuid4().hex[:6]}")
        ref = {"config_id": manifest.identity, "tenant": "default", "workflow_id": wid}
        inp = {"server": server, "tool": "echo", "arguments": {"text": "hi"}, "call_id": "c1", "agent": "a",
               "turn_id": "t1", "manifest": manifest.model_dump(mode="json"), "ref": ref}  # fmt: skip
        return await client.execute_workflow(CraftedCall.run, inp, id=wid, task_queue=task_queue)

    async with _crafted_calls(client, task_queue) as hosts:
        out = await call(label)
        assert out["content"] == "hi" and not out["is_error"]
        out = await call(forged)
        assert out["is_error"] and "not declared" in out["content"]
        assert forged not in hosts.find(manifest.identity, "default").pool.servers


def test_declared_server_names_cannot_look_like_a_skills_server():
    for name in ("skill/srv@1234abcd", "a/b", "x@y", ""):
        with pytest.raises(ValueError, match="invalid MCP server names"):
            Manifest.model_validate({"host": {"mcp_servers": {name: {"command": "x"}}}})


# -- 6: permission rules hold on the tool's identity -------------------------------------------------


def test_rules_match_the_identity_and_ambiguity_fails_closed():
    rules = Permissions.model_validate(
        {
            "default": "allow",
            "rules": [{"tool": "shell", "action": "deny"}, {"tool": "write_.*", "action": "confirm"}],
        }
    )
    assert rules.decide("a__shell", {}, ("a", "shell"), shared=True) == "deny"
    assert rules.decide("b__write_file", {}, ("b", "write_file"), shared=True) == "confirm"
    strict = Permissions.model_validate(
        {"default": "deny", "rules": [{"tool": "read_file", "action": "allow"}]}
    )
    assert strict.decide("read_file", {}, ("files", "read_file")) == "allow"
    # Two servers list read_file: the bare name no longer says which one, so a person decides.
    assert strict.decide("evil__read_file", {}, ("evil", "read_file"), shared=True) == "confirm"
    pinned = Permissions.model_validate(
        {"default": "deny", "rules": [{"tool": "files:read_file", "action": "allow"}]}
    )
    assert pinned.decide("files__read_file", {}, ("files", "read_file"), shared=True) == "allow"
    assert pinned.decide("evil__read_file", {}, ("evil", "read_file"), shared=True) == "deny"


async def test_a_second_server_with_the_same_tool_name_does_not_lift_a_deny_rule(wolf, run_worker):
    script = Script(lambda s: tool("a__echo", {"text": "x"}) if s.calls == 1 else text("done"))
    manifest = Manifest.model_validate(
        {
            "host": {
                "mcp_servers": {"a": tools_server(), "b": tools_server()},
                "permissions": {"rules": [{"tool": "echo", "action": "deny"}]},
            },
            "agents": {"a": {"model": "local:m", "capabilities": [{"mcp": "a"}, {"mcp": "b"}]}},
        }
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", manifest)
        await wolf.result(sid)
        transcript = await wolf.transcript(sid)
    assert {"a__echo", "b__echo"} <= script.offered[0]
    returns = [
        p for m in transcript for p in getattr(m, "parts", []) if getattr(p, "tool_name", None) == "a__echo"
    ]
    assert any(isinstance(p, ToolCallPart) for p in returns)
    assert [p.content for p in returns if not isinstance(p, ToolCallPart)] == [
        "denied by policy: a__echo is not allowed for this agent"
    ]


# -- 7: a provider pointed elsewhere by the manifest never gets the worker's own key ----------------


async def test_a_manifest_base_url_does_not_receive_the_workers_provider_key(wolf, run_worker, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker-own-key-8f2a")
    with ScriptedOpenAI(lambda r: Reply(text="hello")) as server:
        manifest = Manifest.model_validate(
            {
                "host": {"models": {"providers": {"openai": {"base_url": server.base_url}}}},
                "agents": {"a": {"model": "openai-chat:m"}, "b": {"model": "openai-responses:m"}},
            }
        )
        async with run_worker():
            for agent in ("a", "b"):
                assert (await wolf.result(await wolf.submit("hi", agent, manifest))).output == "hello"
    assert len(server.headers) == 2  # both spellings used the manifest's provider settings
    assert all("sk-worker-own-key" not in h.get("authorization", "") for h in server.headers)


async def test_a_secret_streamed_piece_by_piece_never_reaches_a_follower(wolf, run_worker, monkeypatch):
    """A model (or a prompt injection) that echoes the provider key a few characters per chunk: the
    live text withholds a tail that could start a secret until the secret is whole and masked."""
    key = CANARIES["CANARY_KEY"]
    monkeypatch.setenv("CANARY_KEY", key)
    said = f"the key is {key} and that is all"
    chunks = [said[i : i + 3] for i in range(0, len(said), 3)]
    with ScriptedOpenAI(lambda request: Reply(chunks=chunks, interval=0.05)) as server:
        manifest = Manifest.model_validate(
            {
                "host": {
                    "models": {
                        "providers": {"openai": {"api_key": "${CANARY_KEY}", "base_url": server.base_url}}
                    }
                },
                "agents": {"a": {"model": "openai-chat:gpt-4o-mini"}},
            }
        )
        async with run_worker(policy=CANARY_POLICY):
            sid = await wolf.submit("go", "a", manifest)
            deltas = []
            async for _, event in wolf.events(sid):
                if event.kind == "text_delta":
                    deltas.append(event)
                if event.kind == "session_closed":
                    break
    assert server.headers[0]["authorization"] == f"Bearer {key}"
    assert sum(d.attempt is not None for d in deltas) >= 3  # it did stream
    joined = "".join(d.text or "" for d in deltas)
    assert joined == "the key is **** and that is all"
    for start in range(len(key) - 5):
        assert all(key[start : start + 6] not in (d.text or "") for d in deltas), key[start : start + 6]


def test_a_model_label_resolves_only_what_the_policy_lets_leave_the_worker():
    """Labels (CompiledAgent.labels, ModelRequestOutput.model, metrics) reach history and Prometheus:
    a placeholder shows its default when unset, its value only when the policy neither refuses the
    variable nor hides the value (as long as SECRET_MIN_LEN); otherwise it stays as written."""
    from agentwolf.activities.observe import model_label

    env = {"CANARY_MODEL": CANARIES["CANARY_MODEL"], "CANARY_SHORT": "gpt-4o", "WORKER_SECRET": "x"}
    secrets = CANARY_POLICY.secrets_for("default", env)
    assert model_label("${CANARY_UNSET:-openai:gpt-4o-mini}", secrets) == "openai:gpt-4o-mini"
    assert model_label("openai-chat:${CANARY_MODEL}", secrets) == "openai-chat:${CANARY_MODEL}"
    assert model_label("${CANARY_MODEL:-openai:x}", secrets) == "${CANARY_MODEL:-openai:x}"
    assert model_label("openai:${CANARY_SHORT}", secrets) == "openai:gpt-4o"
    assert model_label("openai:${WORKER_SECRET}", secrets) == "openai:${WORKER_SECRET}"  # refused
    assert model_label("openai:${WORKER_SECRET:-y}", secrets) == "openai:${WORKER_SECRET:-y}"
    assert model_label("local:demo", secrets) == "local:demo"
