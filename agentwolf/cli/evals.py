"""Eval verbs: `wolf eval capture` turns recorded turns into cases, `wolf eval run` asks them again of
a config or model with the recorded tool results (client/evals.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.common import ConfigOpt, Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err, out
from agentwolf.cli.errors import check_worker

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.evals import EvalReport

app = typer.Typer()
eval_app = typer.Typer(
    help="Evals from recorded sessions: capture turns as cases, run them with recorded tool results.",
    no_args_is_help=True,
)
app.add_typer(eval_app, name="eval")

Dataset = Annotated[Path, typer.Option("--dataset", metavar="FILE", help="The dataset: a JSON Lines file.")]


@eval_app.command("capture")
@verb
async def eval_capture(
    session_id: str,
    conn: Connection,
    dataset: Dataset,
    turn: Annotated[
        int | None, typer.Option("--turn", help="The turn to capture (default: the last finished).")
    ] = None,
    expect_contains: Annotated[
        str | None, typer.Option("--expect-contains", metavar="TEXT", help="The answer must contain TEXT.")
    ] = None,
    tenant: Tenant = "default",
) -> None:
    """Add a recorded turn to a dataset: the transcript before it, its prompt, its tool calls with
    their results, its answer.

    Example: wolf eval capture 3f2a9c1b7d4e --turn 2 --dataset evals.jsonl
    """
    from agentwolf.client import evals

    wolf = await conn.client(tenant)
    await check_worker(wolf, required=True, session_id=session_id)
    case = await evals.capture(wolf, session_id, turn, expect_contains=expect_contains)
    evals.save(case, dataset)
    out().print(f"captured {case.name}: {len(case.steps)} steps, {len(case.calls)} tool calls -> {dataset}")


@eval_app.command("run")
@verb
async def eval_run(
    dataset: Path,
    conn: Connection,
    config: ConfigOpt = None,
    model: Annotated[str | None, typer.Option("--model", metavar="M", help="Ask this model instead.")] = None,
    live_tools: Annotated[
        bool, typer.Option("--live-tools", help="Let divergent calls with side effects run.")
    ] = False,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Ask each case of DATASET again, of a config (NAME[@VERSION] or a file) or model: tool calls
    that match the recording get its results and run nothing; a divergent call runs only if its tool
    is read-only (or with --live-tools). Prints each case's score and where its trajectory diverged.

    Example: wolf eval run evals.jsonl --config prod@4
    """
    wolf = await conn.client(tenant)
    manifest = await _manifest(wolf, config)
    report = await run_dataset(wolf, dataset, manifest, model=model, live_tools=live_tools)
    if as_json:
        body = {"score": report.score, "cases": [c.model_dump() for c in report.cases]}
        out().print(json.dumps(body), soft_wrap=True)
    else:
        print_report(report)
    if report.score < 1.0:
        raise Exit(1, f"score {report.score:.2f}: {sum(c.score < 1 for c in report.cases)} cases diverged")


async def _manifest(wolf: WolfClient, config: str | None) -> Manifest:
    from agentwolf.cli.sources import config_source, registry_ref

    ref = registry_ref(config)
    if ref is not None:
        return (await wolf.config_get(*ref)).manifest
    source = config_source(config)
    assert not isinstance(source, str)
    return source


async def run_dataset(
    wolf: WolfClient, dataset: Path, manifest: Manifest, *, model: str | None = None, live_tools: bool = False
) -> EvalReport:
    from agentwolf.client import evals

    await check_worker(wolf, required=True)
    return await evals.run(wolf, evals.load(dataset), manifest, model=model, live_tools=live_tools)


def print_report(report: EvalReport) -> None:
    from agentwolf.cli.render import inert
    from agentwolf.cli.tables import print_table

    rows = [
        [inert(c.name), f"{c.score:.0f}", inert(c.divergence or "same trajectory"), str(c.requests)]
        for c in report.cases
    ]
    print_table(["CASE", "SCORE", "TRAJECTORY", "REQUESTS"], rows)
    err().print(f"score {report.score:.2f} over {len(report.cases)} cases")
