"""`wolf config ...` (manifests and the config registry) and `wolf commands`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.common import Agent, ConfigOpt, Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err, literal, out
from agentwolf.cli.sources import config_path, config_source, pick_agent, registry_ref

if TYPE_CHECKING:
    from agentwolf.workflows.configs.config_registry import PushResult, VersionInfo

app = typer.Typer()
config_app = typer.Typer(
    help="Check and inspect manifests; push, list and roll back registry configs.", no_args_is_help=True
)
app.add_typer(config_app, name="config")

Policy = Annotated[
    str | None,
    typer.Option(
        "--policy",
        metavar="FILE",
        help="Worker policy file (default: $WOLF_POLICY, else $WOLF_HOME/policy.yaml).",
    ),
]


@app.command()
@verb
async def commands(
    conn: Connection,
    agent: Agent = None,
    config: ConfigOpt = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """An agent's slash commands (its skills, its MCP servers' prompts) and skills, looked up here.

    Example: wolf commands -a assistant -c wolf.yaml
    """
    from agentwolf.cli.render import inert
    from agentwolf.hosts.host import HostRegistry

    source = config_source(config)
    if isinstance(source, str):
        source = (await (await conn.client(tenant)).config_get(source)).manifest
    agent = pick_agent(source, agent)
    hosts = HostRegistry(host_idle_timeout=float("inf"))
    try:
        host = hosts.ensure(source, tenant)
        scope = await host.scope(source, agent, "wolf-commands", "-")
        listed = await host.registry.commands(scope)
        manager = host.registry.skills(scope)
        skills = await manager.list_skills()
        problems = [*manager.shadowed, *manager.problems]
        problems += [p for root in host.skill_roots.values() for p in root.problems]
    finally:
        await hosts.close()
    files = [
        {"name": name, "description": a.description, "file": a.file}
        for name, a in sorted(source.agents.items())
        if a.file is not None
    ]
    if as_json:
        commands = [{"name": f"/{c.name}", "origin": c.origin, "description": c.description} for c in listed]
        skill_list = [
            {"name": s.name, "origin": s.origin, "uri": s.uri, "description": s.description} for s in skills
        ]
        out().print(
            json.dumps(
                {"commands": commands, "skills": skill_list, "agent_files": files, "problems": problems}
            )
        )
        return
    from rich.table import Table

    table = Table("command", "from", "description", box=None)
    for command in listed:
        table.add_row(inert(f"/{command.name}"), inert(command.origin), inert(command.description))
    out().print(table if listed else f"{agent} has no slash commands")
    if skills:
        out().print(inert(f"skills: {', '.join(s.name for s in skills)}"))
    for agent_file in files:
        out().print(inert(f"agent {agent_file['name']} ({agent_file['file']}): {agent_file['description']}"))
    for problem in problems:
        err().print(f"[yellow]warning:[/yellow] {literal(problem)}", markup=True)


@config_app.command("validate")
@verb
async def config_validate(
    file: Path, tenant: Tenant = "default", policy: Policy = None, as_json: Json = False
) -> None:
    """Check a manifest; errors name the file, line and key path, and what the worker policy would
    refuse for the tenant (placeholders, commands, env) is listed (exit 2 either way).

    Example: wolf config validate wolf.yaml --tenant acme
    """

    from agentwolf.access import check_tenant_name
    from agentwolf.cli.render import inert
    from agentwolf.config.loading import ManifestError, load_manifest
    from agentwolf.config.policy import load_policy

    try:
        manifest = load_manifest(file)
    except ManifestError as exc:  # --json: the problems as data too (the sentence still goes to stderr)
        if as_json:
            errors = [asdict(p) for p in exc.problems] or [{"message": str(exc)}]
            out().print(json.dumps({"ok": False, "errors": errors}))
        raise
    worker_policy = load_policy(policy)
    refused = worker_policy.problems(manifest, check_tenant_name(tenant))
    agents = sorted(manifest.agents)
    if as_json:
        info = {"ok": not refused, "agents": agents, "identity": manifest.identity, "refused": refused}
        out().print(json.dumps(info))
    elif refused:
        err().print(inert(f"{file}: valid, but the worker policy ({worker_policy.source}) refuses:"))
        for problem in refused:
            err().print(inert(f"  {problem}"))
    else:
        out().print(f"ok: agents {', '.join(agents) or 'none'}; identity {manifest.identity}")
    if refused:
        raise Exit(2, f"{len(refused)} thing(s) in {file} would be refused by the worker policy")


@config_app.command("show")
@verb
async def config_show(
    conn: Connection,
    target: Annotated[str | None, typer.Argument(help="FILE, or NAME[@VERSION] from the registry.")] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """The manifest with placeholders as written (never resolved) and literal secrets masked.

    Example: wolf config show prod@3 --json
    """
    import yaml

    from agentwolf.cli.render import inert
    from agentwolf.config.loading import load_manifest
    from agentwolf.config.masking import masked

    ref = registry_ref(target)
    if ref is None:
        view = masked(load_manifest(config_path(Path(target) if target else None)))
        out().print(
            json.dumps(view, indent=2) if as_json else inert(yaml.safe_dump(view, sort_keys=False).rstrip())
        )
        return
    found = await (await conn.client(tenant)).config_get(*ref)
    view = masked(found.manifest)
    if as_json:
        out().print(
            json.dumps({**found.model_dump(mode="json", exclude={"manifest"}), "manifest": view}, indent=2)
        )
    else:
        out().print(inert(f"# {found.name} v{found.version} ({_describe(found)})"))
        out().print(inert(yaml.safe_dump(view, sort_keys=False).rstrip()))


def _describe(info: VersionInfo) -> str:
    note = f", {info.note}" if info.note else ""
    return f"identity {info.identity}, pushed {info.pushed_at:%Y-%m-%d %H:%M:%S}{note}"


def _print_push(result: PushResult, as_json: bool) -> None:
    from agentwolf.cli.render import inert

    if as_json:
        out().print(result.model_dump_json())
    elif result.created:
        out().print(
            inert(
                f"{result.name} v{result.version} (identity {result.identity}); "
                "running sessions take it at their next turn"
            )
        )
    else:
        out().print(inert(f"unchanged: {result.name} v{result.version} already has this content"))


@config_app.command("push")
@verb
async def config_push(
    name: str,
    file: Path,
    conn: Connection,
    note: Annotated[
        str, typer.Option("--note", metavar="TEXT", help="Why this version (shown by history).")
    ] = "",
    eval_dataset: Annotated[
        str | None,
        typer.Option("--eval", metavar="DATASET", help="Run this eval dataset (a name or a file) first."),
    ] = None,
    min_score: Annotated[
        float, typer.Option("--min-score", metavar="S", help="With --eval: refuse below this score (0-1).")
    ] = 1.0,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Push FILE as the next version of registry config NAME (identical content: no new version).
    With --eval, the dataset runs against FILE first and a score below --min-score refuses the push.

    Example: wolf config push prod wolf.yaml --note "stricter rules" --eval evals.jsonl --min-score 0.9
    """
    from agentwolf.workflows.configs.config_registry import pushable
    from agentwolf.workflows.types import check_config_name

    manifest = pushable(file)  # file:line errors before anything is sent
    wolf = await conn.client(tenant, start_local=True)
    if eval_dataset is not None:
        from agentwolf.cli.evals import print_report, run_dataset

        report = await run_dataset(wolf, eval_dataset, manifest)
        print_report(report)
        if report.score < min_score:
            raise Exit(
                1, f"not pushed: {file} scores {report.score:.2f} on {eval_dataset}, below {min_score}"
            )
    _print_push(await wolf.config_push(check_config_name(name), manifest, note=note), as_json)


@config_app.command("rollback")
@verb
async def config_rollback(
    name: str,
    version: int,
    conn: Connection,
    note: Annotated[str, typer.Option("--note", metavar="TEXT", help="Why (shown by history).")] = "",
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Push a new version of NAME with VERSION's content (versions only go up).

    Example: wolf config rollback prod 2 --note "v3 broke search"
    """
    _print_push(await (await conn.client(tenant)).config_rollback(name, version, note=note), as_json)


@config_app.command("list")
@verb
async def config_list(conn: Connection, tenant: Tenant = "default", as_json: Json = False) -> None:
    """The tenant's registry configs and their current versions.

    Example: wolf config list --json
    """
    from agentwolf.cli.tables import print_table

    configs = await (await conn.client(tenant)).config_list()
    if as_json:
        out().print(json.dumps([c.model_dump(mode="json") for c in configs]))
        return
    print_table(
        ("config", "version", "identity", "pushed", "note"),
        [(c.name, str(c.version), c.identity, f"{c.pushed_at:%Y-%m-%d %H:%M:%S}", c.note) for c in configs],
    )


@config_app.command("history")
@verb
async def config_history(
    name: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Every version of NAME: identity, when, note, and how many running sessions were told.

    Example: wolf config history prod
    """
    from agentwolf.cli.tables import print_table

    versions = await (await conn.client(tenant)).config_history(name)
    if as_json:
        out().print(json.dumps([v.model_dump(mode="json") for v in versions]))
        return
    print_table(
        ("version", "identity", "pushed", "sessions told", "note"),
        [
            (
                str(v.version),
                v.identity,
                f"{v.pushed_at:%Y-%m-%d %H:%M:%S}",
                "" if v.notified is None else str(v.notified),
                v.note,
            )
            for v in versions
        ],
    )


@config_app.command("schema")
@verb
async def config_schema(as_json: Json = False) -> None:
    """The manifest's JSON Schema, for editor completion and checks (indented; --json: one line).

    Example: wolf config schema > wolf.schema.json   (then in wolf.yaml:
    # yaml-language-server: $schema=./wolf.schema.json)
    """
    from agentwolf.config.manifest import Manifest

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **Manifest.model_json_schema()}
    out().print(json.dumps(schema, indent=None if as_json else 2), soft_wrap=True)
