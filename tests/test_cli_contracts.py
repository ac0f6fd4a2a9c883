"""The CLI's contracts: help and version, exit codes for bad input, one JSON document per `--json`,
TSV when piped, error sentences, and `wolf config schema`."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import typer.main
import yaml

from agentwolf.cli import app
from agentwolf.cli.sources import BUNDLED_CONFIG
from tests.test_cli import _scripted_manifest, _wolf


def _commands(group=None, prefix=""):
    """Every verb, through click's lookup (`wolf` builds a verb when it is first looked up)."""
    group = group or typer.main.get_command(app)
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if hasattr(command, "commands"):
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_every_verb_has_an_example_in_its_help():
    verbs = dict(_commands())
    assert {"submit", "status", "list", "setup", "config schema", "payloads gc"} <= set(verbs)
    missing = [name for name, command in verbs.items() if "Example: wolf " not in (command.help or "")]
    assert not missing


def test_tenant_and_task_queue_read_their_variables_on_every_verb():
    """WOLF_TENANT and WOLF_TASK_QUEUE mean the same on every verb that acts for a tenant or sends
    work: `wolf serve` included (its console showed no sessions for a user who had set WOLF_TENANT).
    The worker's `--tenant` is another concept ("serve only this tenant") and reads no variable."""
    wanted = {"tenant": "WOLF_TENANT", "task_queue": "WOLF_TASK_QUEUE"}
    wrong = [
        f"{name} --{param.name}: {param.envvar}"
        for name, command in _commands()
        for param in command.params
        if param.name in wanted
        and param.envvar != wanted[param.name]
        and (name, param.name) != ("worker", "tenant")
    ]
    assert not wrong


async def test_version_short_help_and_completion():
    version = await _wolf(None, "--version")
    assert version.returncode == 0 and version.stdout.startswith("wolf ")
    short = await _wolf(None, "status", "-h")
    assert short.returncode == 0 and "Example: wolf status" in short.stdout and "--profile" in short.stdout
    top = await _wolf(None, "-h")
    assert "--install-completion" in top.stdout


async def test_bad_input_exits_2_with_a_sentence(tmp_path):
    bogus = await _wolf("127.0.0.1:1", "list", "--state", "bogus")
    assert bogus.returncode == 2 and "bogus" in bogus.stderr
    for args in (("submit", "  "), ("steer", "some-session", "")):
        run = await _wolf("127.0.0.1:1", *args)  # refused before connecting: no server needed
        assert run.returncode == 2, (args, run.stderr)
        assert "is empty" in run.stderr and "Traceback" not in run.stderr


async def test_config_schema_is_one_document_the_bundled_config_validates_against():
    compact = await _wolf(None, "config", "schema", "--json")
    assert compact.returncode == 0 and len(compact.stdout.strip().splitlines()) == 1
    schema = json.loads(compact.stdout)
    pretty = await _wolf(None, "config", "schema")
    assert json.loads(pretty.stdout) == schema
    jsonschema.validate(yaml.safe_load(BUNDLED_CONFIG.read_text()), schema)
    try:
        jsonschema.validate({"agents": {"a": {"modle": "x"}}}, schema)
    except jsonschema.ValidationError as exc:
        assert "modle" in exc.message
    else:
        raise AssertionError("a misspelt key passed the schema")


async def test_list_is_tsv_when_piped_json_is_one_document_and_errors_are_sentences(client, tmp_path):
    from agentwolf.worker.bootstrap import TASK_QUEUE, create_worker
    from tests.conftest import wait_for
    from tests.support.models import Script, text

    address = client.service_client.config.target_host
    config = str(_scripted_manifest(tmp_path))
    script = Script(lambda s: text("hi"))
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE, local_models={"m": script.model})
    tenant = ("--tenant", "piped")
    async with worker:
        sid = "a-long-session-id-that-a-table-would-cut-0123456789"
        done = await _wolf(
            address, "submit", "x", "-a", "a", "-c", config, "--session", sid, "--wait", "--json", *tenant
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["session_id"] == sid  # exactly one document

        async def tsv_rows():
            run = await _wolf(address, "list", *tenant)
            return [line.split("\t") for line in run.stdout.splitlines()]

        rows = await wait_for(lambda: _with(tsv_rows(), sid), timeout=20)
        assert rows[0][:3] == ["session", "agent", "state"] and [sid, "a", "done"] == rows[1][:3]
        listed = await _wolf(address, "list", "--json", *tenant)
        assert [s["session_id"] for s in json.loads(listed.stdout)] == [sid]

        name = f"cfg-{tmp_path.name[-8:]}"
        pushed = await _wolf(address, "config", "push", name, config, "--json", *tenant)
        assert json.loads(pushed.stdout)["version"] == 1, pushed.stderr
        rollback = await _wolf(address, "config", "rollback", name, "99", *tenant)
        assert rollback.returncode == 2
        assert "has no version 99" in rollback.stderr
        assert "Error:" not in rollback.stderr and "Traceback" not in rollback.stderr, rollback.stderr
        await hosts.close()


async def _with(rows, sid):
    found = await rows
    return found if any(row[0] == sid for row in found[1:]) else None


async def test_unknown_profile_is_a_usage_error(tmp_path):
    config = tmp_path / "temporal.toml"
    config.write_text('[profile.other]\naddress = "127.0.0.1:1"\n')
    run = await _wolf(None, "status", "x", "--profile", "missing", TEMPORAL_CONFIG_FILE=str(config))
    assert run.returncode == 2 and "missing" in run.stderr and "Traceback" not in run.stderr, run.stderr


def _value_names(name, command):
    """The words of `wolf NAME -h` that name values: those of its usage line after the verb, and the
    first column of its Arguments and Options."""
    import re

    from typer._click import Context

    ctx = Context(command, info_name=f"wolf {name}", terminal_width=300, max_content_width=300)
    text = command.get_help(ctx)
    usage, _, rest = text.partition("\n")
    words = usage.split()[3 + name.count(" ") :]
    for section in re.findall(r"^(?:Arguments|Options):\n((?:  .*\n?)+)", rest, re.MULTILINE):
        rows = [line for line in section.splitlines() if not line.startswith("   ")]  # not help lines
        words += [w for line in rows for w in re.split(r"\s{2,}", line.strip())[0].split()]
    return words


def test_help_names_values_in_capitals_never_by_type_or_in_braces():
    """`{PROMPT}`, `SESSION_ID <str>`, `--var <list[str]>`, `[target]`: the help showed Typer's types
    and braces, and some names in lower case."""
    wrong = []
    for name, command in _commands():
        words = _value_names(name, command)
        assert words or not command.params, name
        for word in words:
            value = word.strip(",")
            if value.startswith("-") or value in ("[OPTIONS]", "/"):
                continue
            choice = value.startswith("[") and value.endswith("]") and "|" in value
            if not choice and (value != value.upper() or any(c in value for c in "<>{}")):
                wrong.append(f"{name}: {value}")
    assert not wrong


SHORT_FORMS = {"--json": "-j", "--tenant": "-t", "--keep": "-k", "--session": "-s", "--reason": "-r"}
NO_JSON = {"chat", "dev", "serve", "worker", "mcp", "acp"}
"""The verbs docs/hooks.py says take no --json: they run until stopped or hold a terminal."""


def test_every_verb_takes_json_and_every_common_option_has_its_short_form():
    missing = []
    for name, command in _commands():
        flags = {o: param.opts for param in command.params for o in param.opts}
        if name not in NO_JSON and "--json" not in flags:
            missing.append(f"{name}: --json")
        missing += [
            f"{name}: {long} {short}"
            for long, short in SHORT_FORMS.items()
            if short not in flags.get(long, [short])
        ]
    assert not missing


def test_every_option_says_what_it_does():
    bare = [
        f"{name} {param.opts[0]}"
        for name, command in _commands()
        for param in command.params
        if param.param_type_name == "option" and not param.hidden and not param.help
    ]
    assert not bare


async def test_a_group_lists_its_verbs_with_their_first_sentence_whole():
    """`wolf schedule -h` cut "Create a schedule: (--cron EXPR | --every 15m) (--job JOB..." short."""
    for group in ("config", "eval", "schedule", "deploy", "payloads"):
        listing = await _wolf(None, group, "-h")
        text = " ".join(listing.stdout.split())
        verbs = [(n, c) for n, c in _commands() if n.startswith(f"{group} ")]
        assert verbs, group
        for name, command in verbs:
            assert " ".join(command.get_short_help_str(limit=200).split()) in text, name


async def test_the_agent_is_the_manifest_s_only_one_unless_named(tmp_path):
    """With one's own one-agent manifest, `wolf submit` said "unknown agent 'assistant'" until `-a`."""
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"agents": {"helper": {"model": "local:demo"}}}))
    run = await _wolf("127.0.0.1:1", "submit", "hi", "-c", str(one))
    assert run.returncode == 3, run.stderr  # past the agent check: Temporal is unreachable
    two = tmp_path / "two.yaml"
    two.write_text(
        yaml.safe_dump({"agents": {"helper": {"model": "local:demo"}, "other": {"model": "local:demo"}}})
    )
    run = await _wolf("127.0.0.1:1", "submit", "hi", "-c", str(two))
    assert run.returncode == 2 and "--agent" in run.stderr and "helper, other" in run.stderr, run.stderr
    run = await _wolf("127.0.0.1:1", "submit", "hi", "-c", str(two), "-a", "helpr")
    assert run.returncode == 2 and "unknown agent 'helpr'" in run.stderr and "helper" in run.stderr, (
        run.stderr
    )


def _wolf_on(typer_change: str, *args: str) -> tuple[str, bool]:
    """`wolf ARGS` in a fresh interpreter whose typer is changed by `typer_change` (Python run before
    `wolf` is imported): its output, and whether every verb module was imported."""
    code = (
        "import sys, io, contextlib, typer, typer.main\n"
        f"{typer_change}\n"
        "from agentwolf.cli import app\n"
        "out = io.StringIO()\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(out):\n"
        f"    app({list(args)!r})\n"
        "print(out.getvalue())\n"
        "print('agentwolf.cli.quotas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output, _, loaded = done.stdout.rstrip().rpartition("\n")
    return output, loaded == "True"


def test_wolf_is_built_the_documented_way_when_typers_internals_do_not_fit():
    """The verbs built on first use stand on typer's internals: on a release they were not tested on
    they are used once a start-up check passes; a release that moved one gets every verb built at
    start (all modules imported), and `wolf` works as before."""
    untested = "typer.__version__ = '0.99.0'"
    output, everything = _wolf_on(untested, "status", "--help")
    assert "Example: wolf status" in output and not everything  # still built on first use
    moved = (  # a release without `typer.main.solve_typer_info_defaults` (typer itself keeps working)
        f"{untested}; import types; proxy = types.ModuleType('typer.main'); "
        "proxy.__dict__.update(vars(typer.main)); del proxy.solve_typer_info_defaults; "
        "sys.modules['typer.main'] = proxy"
    )
    output, everything = _wolf_on(moved, "status", "--help")
    assert "Example: wolf status" in output and "--json" in output and everything
    output, _ = _wolf_on(moved, "--help")
    assert all(verb in output for verb in ("submit", "status", "check-replay", "quotas"))
