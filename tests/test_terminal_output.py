"""Terminal control sequences from a session (model text, tool output, config names) are shown, not sent."""

from __future__ import annotations

import json
import re
import sys

import yaml

from agentwolf.cli.render import inert
from tests.conftest import TOOLS_SERVER, wait_for
from tests.test_cli import _wolf

# Clear screen, cursor home, an OSC 52 clipboard write, a one-byte C1 CSI, backspaces, a carriage
# return overwriting the line, DEL, a right-to-left override and a bidi isolate.
EVIL = (
    "clear\x1b[2J home\x1b[H clip\x1b]52;c;SGVsbG8=\x07 csi\x9b31m back\x08\x08"
    " cr\rover del\x7f rtl\u202eevil\u2066"
)
SHOWN = [
    r"\x1b[2J",
    r"\x1b[H",
    r"\x1b]52;c;SGVsbG8=\x07",
    r"\x9b31m",
    r"\x08\x08",
    r"\x0dover",
    r"\x7f",
    r"\u202eevil\u2066",
]
AGENT = "a\x1b[2J\u202e"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_inert_escapes_every_control_and_nothing_else():
    controls = [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    for c in controls:
        expected = chr(c) if chr(c) in "\n\t" else (rf"\x{c:02x}" if c < 0x100 else rf"\u{c:04x}")
        assert inert(chr(c)) == expected, hex(c)
    plain = "".join(chr(c) for c in range(0x20, 0x3000) if c not in controls)
    assert inert(plain) == plain  # printable text, backslashes, brackets and non-Latin letters untouched


def _no_raw_controls(text: str) -> None:
    found = RAW.search(text)
    assert found is None, f"raw {found.group()!r} reaches the terminal: {text!r}"


async def test_follow_result_status_and_list_show_controls_and_json_keeps_them(client, tmp_path):
    from agentwolf.worker.bootstrap import TASK_QUEUE, create_worker
    from tests.support.models import Script, sequence, text, tool

    config = tmp_path / "wolf.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "host": {"mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}}},
                "agents": {AGENT: {"model": "local:m", "capabilities": [{"mcp": "tools"}]}},
            }
        )
    )
    address = client.service_client.config.target_host
    script = Script(sequence(tool("echo", {"text": EVIL}), text(EVIL)))
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE, local_models={"m": script.model})
    tenant = ("--tenant", "inert")
    async with worker:
        started = await _wolf(
            address, "submit", f"show {EVIL}", "-a", AGENT, "-c", str(config), "--json", *tenant
        )
        assert started.returncode == 0, started.stderr
        sid = json.loads(started.stdout.splitlines()[-1])["session_id"]

        result = await _wolf(address, "result", sid, *tenant)
        follow = await _wolf(address, "follow", sid, *tenant)
        status = await _wolf(address, "status", sid, *tenant)
        listed = await wait_for(lambda: _listed(address, sid, tenant), timeout=20)
        for run in (result, follow, status, listed):
            assert run.returncode == 0, run.stderr
            _no_raw_controls(run.stdout + run.stderr)
        assert all(shown in result.stdout for shown in SHOWN), result.stdout
        turn, model_text, tool_output = (
            _line(follow.stdout, "> show"),
            _line(follow.stdout, "clear"),
            _line(follow.stdout, "<- echo"),
        )
        for line in (turn, model_text, tool_output):
            assert all(shown in line for shown in SHOWN), line
        assert inert(AGENT) in status.stdout and inert(AGENT) in listed.stdout

        # JSON is exact: it decodes to the very text the model and the tool produced.
        events = [
            json.loads(line)
            for line in (await _wolf(address, "follow", sid, "--json", *tenant)).stdout.splitlines()
        ]
        assert [e["text"] for e in events if e["kind"] in ("model_text", "tool_call_finished")] == [
            EVIL,
            EVIL,
        ]
        assert json.loads((await _wolf(address, "result", sid, "--json", *tenant)).stdout)["output"] == EVIL
        assert json.loads((await _wolf(address, "status", sid, "--json", *tenant)).stdout)["agent"] == AGENT
        await hosts.close()


async def _listed(address: str, sid: str, tenant: tuple[str, ...]):
    run = await _wolf(address, "list", *tenant)
    return run if sid in run.stdout else None


def _line(output: str, marker: str) -> str:
    return next(line for line in output.splitlines() if marker in line)
