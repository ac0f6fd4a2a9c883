"""What the `wolf` CLI says when something is wrong or waits: one sentence in the user's words,
never a Rust debug dump or a Python repr (issue 24, the first-day review's 9b-9d)."""

from __future__ import annotations

import json
import socket
import uuid

import pytest

from agentwolf.connection import TemporalUnreachable, connect
from tests.conftest import make_manifest, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.test_cli import _wolf


def _refusing_address() -> str:
    """A loopback port nothing listens on (bound and closed: refused, not filtered)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    "verb", [["status", "x"], ["list"], ["submit", "hi", "--config", "MANIFEST"], ["config", "list"]]
)
async def test_an_unreachable_server_is_one_sentence_that_says_what_to_do(verb, tmp_path):
    address = _refusing_address()
    manifest = tmp_path / "wolf.yaml"
    manifest.write_text("agents:\n  assistant:\n    model: test\n")
    args = [str(manifest) if a == "MANIFEST" else a for a in verb]
    run = await _wolf(None, *args, "--address", address)
    assert run.returncode == 3, run.stderr
    said = " ".join(run.stderr.split())
    assert said.startswith(f"error: cannot reach Temporal at {address}: connection refused")
    assert "`wolf up`" in said and "--address" in said and "TEMPORAL_ADDRESS" in said
    assert "tonic" not in said and "Os {" not in said and run.stderr.count("\n") == 1


async def test_connect_names_why_for_a_host_that_does_not_resolve():
    with pytest.raises(TemporalUnreachable) as caught:
        await connect("no-such-host.invalid:7233")
    assert (
        str(caught.value)
        == "cannot reach Temporal at no-such-host.invalid:7233: the host name does not resolve"
    )
    assert "tonic" in str(caught.value.__cause__)  # the bridge's dump stays reachable (WOLF_DEBUG, logs)


async def test_human_status_shows_each_waiting_approval_and_how_to_answer_it(
    client, wolf, run_worker, tmp_path
):
    address = client.service_client.config.target_host
    rules = [{"tool": "record", "action": "confirm"}]
    manifest = make_manifest(
        {"permissions": {"rules": rules}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(tmp_path / "effects"))},
    )
    script = Script(sequence(tool("record", {"tag": "x" * 300}, "call-7"), text("done")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        fresh = await _wolf(address, "status", sid)
        assert fresh.returncode == 0, fresh.stderr
        assert "last=" not in fresh.stdout  # no turn has ended: not `last=None`
        await wolf.prompt(sid, "record it")
        await wait_for(lambda: _waiting(wolf, sid))
        run = await _wolf(address, "status", sid)
        assert run.returncode == 0, run.stderr
        head, asked, how = run.stdout.splitlines()
        assert "waiting_approval" in head and "last=" not in head
        assert asked.startswith("  waits for approval since ") and ': record({"tag": "xxx' in asked
        assert asked.endswith("...) call call-7") and len(asked) < 200  # long arguments are cut
        assert f"approve: wolf approve {sid} call-7 " in how and f"deny: wolf deny {sid} call-7 " in how
        wrong = await _wolf(address, "approve", sid, "call-0")
        assert wrong.returncode == 2
        assert f"no tool call 'call-0' waits for approval in session {sid!r} (waiting: call-7)" in " ".join(
            wrong.stderr.split()
        )
        await wolf.approve(sid, "call-7")
        await wait_for(lambda: _last(wolf, sid))
        done = await _wolf(address, "status", sid, "--json")
        assert json.loads(done.stdout)["pending_approvals"] == []
        await wolf.close(sid)


async def _waiting(wolf, sid):
    return (await wolf.status(sid)).pending_approvals


async def _last(wolf, sid):
    return (await wolf.status(sid)).last_outcome


async def test_the_manifest_schema_describes_every_key_for_users():
    run = await _wolf(None, "config", "schema", "--json")
    assert run.returncode == 0, run.stderr
    schema = json.loads(run.stdout)
    objects = [("Manifest", schema), *schema["$defs"].items()]
    described = {
        f"{name}.{key}": prop.get("description", "")
        for name, obj in objects
        for key, prop in obj.get("properties", {}).items()
    }
    assert len(described) > 80 and [k for k, d in described.items() if not d] == []
    assert [name for name, obj in objects if not obj.get("description")] == []  # each section says what it is
    assert described["Limits.max_steps"] == "Model requests a turn may make before it stops."
    developer_words = ("dump", "keep their identity", "local activity", "agentwolf/")
    assert [k for k, d in described.items() if any(w in d for w in developer_words)] == []


async def test_config_errors_come_in_line_order_with_a_did_you_mean(tmp_path):
    bad = tmp_path / "wolf.yaml"
    # pydantic checks `host` before `agents`: the file says them the other way round.
    bad.write_text("agents:\n  a:\n    limits: {max_step: 3}\n    modle: x\nhost:\n  sesions: {}\n")
    run = await _wolf("127.0.0.1:1", "config", "validate", str(bad))
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"config error: {bad}:3: agents.a.limits.max_step: unknown key (did you mean 'max_steps'?)",
        f"{bad}:4: agents.a.modle: unknown key (did you mean 'model'?)",
        f"{bad}:6: host.sesions: unknown key (did you mean 'sessions'?)",
    ]
    as_json = await _wolf("127.0.0.1:1", "config", "validate", str(bad), "--json")
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {
        "ok": False,
        "errors": [
            {
                "line": 3,
                "path": "agents.a.limits.max_step",
                "message": "unknown key (did you mean 'max_steps'?)",
            },
            {"line": 4, "path": "agents.a.modle", "message": "unknown key (did you mean 'model'?)"},
            {"line": 6, "path": "host.sesions", "message": "unknown key (did you mean 'sessions'?)"},
        ],
    }


async def test_a_bare_model_name_and_a_misspelt_agent_get_a_did_you_mean(tmp_path):
    manifest = tmp_path / "wolf.yaml"
    manifest.write_text("agents:\n  assistant:\n    model: gpt-4o\n")
    run = await _wolf("127.0.0.1:1", "config", "validate", str(manifest))
    assert run.returncode == 2
    assert (
        "agents.assistant.model: unknown model alias 'gpt-4o': a model is `provider:name`, did you mean "
        in (run.stderr)
    )
    assert "'openai:gpt-4o'? (aliases in this config: none)" in run.stderr
    manifest.write_text("agents:\n  assistant:\n    model: test\n  coder:\n    model: test\n")
    typo = await _wolf("127.0.0.1:1", "submit", "hi", "--agent", "asistant", "--config", str(manifest))
    assert typo.returncode == 2
    assert typo.stderr.strip() == (
        "error: unknown agent 'asistant' (did you mean 'assistant'?) (agents and teams in this config: "
        "assistant, coder)"
    )


async def test_a_bad_choice_is_said_without_pydantic_s_words():
    run = await _wolf("127.0.0.1:1", "list", "--state", "bogus")
    assert run.returncode == 2
    assert "Invalid value for '--state': 'bogus' is not one of 'idle', 'running'" in run.stderr
    assert "Value error" not in run.stderr


async def test_following_an_unknown_session_prints_only_the_error(client):
    run = await _wolf(client.service_client.config.target_host, "follow", "no-such-session")
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert "session 'no-such-session' not found in tenant 'default'" in run.stderr


async def test_wolf_list_is_newest_first_running_or_not(client, task_queue, run_worker):
    from agentwolf.client.wolf_client import WolfClient

    tenant = f"order-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
    address = client.service_client.config.target_host
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        older = await wolf.start_session("a", make_manifest())  # stays running
        newer = await wolf.submit("hi", "a", make_manifest())  # done: visibility lists it after `older`
        await wolf.result(newer)
        await wait_for(lambda: _listed(wolf, 2))
        run = await _wolf(address, "list", "--tenant", tenant, "--json")
        limited = await _wolf(address, "list", "--tenant", tenant, "--limit", "1", "--json")
        await wolf.close(older)
    assert [s["session_id"] for s in json.loads(run.stdout)] == [newer, older]
    assert [s["session_id"] for s in json.loads(limited.stdout)] == [newer]


async def _listed(wolf, count: int) -> bool:
    return len(await wolf.list_sessions()) == count


async def test_help_groups_the_verbs_and_cuts_no_description():
    run = await _wolf(None, "--help", COLUMNS="200")
    assert run.returncode == 0, run.stderr
    sections = {}
    for block in run.stdout.split("\n\n"):
        head, _, body = block.partition(":\n")
        sections[head.strip()] = [
            line.split()[0]
            for line in body.splitlines()
            if line.startswith("  ") and not line.startswith("   ")
        ]
    assert sections["Sessions"][:3] == ["submit", "follow", "result"] and "chat" in sections["Sessions"]
    assert sections["Front ends"] == ["serve", "mcp", "acp"]
    assert {"up", "down", "worker"} <= set(sections["Running AgentWolf"])
    assert "..." not in run.stdout.partition("\n")[2]  # (the usage line says `[ARGS]...`)
    assert "Live stream of a session's events; Ctrl-C detaches and leaves the session running." in " ".join(
        run.stdout.split()
    )


async def test_options_and_arguments_read_as_names():
    submit = " ".join((await _wolf(None, "submit", "--help")).stdout.split())
    for shown in ("PROMPT", "--agent AGENT", "--config NAME|FILE", "--address HOST:PORT", "--tenant TENANT"):
        assert shown in submit
    follow = " ".join((await _wolf(None, "follow", "--help")).stdout.split())
    assert "--json Machine-readable output: JSON Lines, one JSON object per event." in follow


async def test_wolf_debug_also_prints_the_connection_library_s_own_error():
    run = await _wolf(None, "status", "x", "--address", _refusing_address(), WOLF_DEBUG="1")
    assert run.returncode == 3
    first, sentence = run.stderr.strip().split("\n", 1)
    assert first.startswith("the connection library said: Failed client connect") and "tonic" in first
    assert sentence.startswith("error: cannot reach Temporal at ")
