"""Eval verbs: `wolf eval capture` turns recorded turns into cases, `wolf eval run` asks them again of
a config or model with the recorded tool results and scores them, `wolf eval datasets` lists the
tenant's registry datasets (client/evals.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.common import ConfigOpt, Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err, out
from agentwolf.cli.errors import check_worker

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.evals.cases import EvalReport, Evaluation

app = typer.Typer()
eval_app = typer.Typer(
    help="Evals from recorded sessions: capture turns as cases, run them with recorded tool results.",
    no_args_is_help=True,
)
app.add_typer(eval_app, name="eval")

Dataset = Annotated[
    str,
    typer.Option(
        "--dataset",
        metavar="NAME|FILE",
        help="The dataset: a name (the tenant's registry) or a path (a JSON Lines file, e.g. ./evals.jsonl).",
    ),
]


@eval_app.command("capture")
@verb
async def eval_capture(
    session_id: str,
    conn: Connection,
    dataset: Dataset,
    turn: Annotated[
        int | None,
        typer.Option("--turn", metavar="N", help="The turn to capture (default: the last finished)."),
    ] = None,
    expect_exact: Annotated[
        str | None,
        typer.Option("--expect-exact", metavar="TEXT", help="The answer must be TEXT (EqualsExpected)."),
    ] = None,
    expect_contains: Annotated[
        str | None, typer.Option("--expect-contains", metavar="TEXT", help="The answer must contain TEXT.")
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option("--judge", metavar="RUBRIC", help="An LLM judge grades the answer by RUBRIC."),
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option("--judge-model", metavar="M", help="The judge's model (default: the agent's)."),
    ] = None,
    evaluator: Annotated[
        list[str] | None,
        typer.Option("--evaluator", metavar="NAME", help="A plugin's evaluator (repeatable)."),
    ] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Add a recorded turn to a dataset: the transcript before it, its prompt, its tool calls with
    their results, its answer, and how to score it again. Every case checks that its trajectory stays
    the recorded one (SameTrajectory); the options add evaluators, and the file's `evaluators` can be
    edited (pydantic-evals' names: EqualsExpected, Equals, Contains, MatchesSchema, LLMJudge, or a
    plugin's).

    Example: wolf eval capture 3f2a9c1b7d4e --turn 2 --dataset regressions --judge "answers in Celsius"
    """
    from agentwolf.client import evals

    specs: list[object] = [{"Contains": expect_contains}] if expect_contains is not None else []
    if judge is not None:
        specs.append({"LLMJudge": {"rubric": judge, "model": judge_model} if judge_model else judge})
    specs += evaluator or []
    wolf = await conn.client(tenant)
    await check_worker(wolf, required=True, session_id=session_id)
    case = await evals.capture(wolf, session_id, turn, expected_output=expect_exact, evaluators=specs)
    size = await evals.save(wolf, case, dataset)
    names = ", ".join(e.name for e in case.evaluators)
    if as_json:
        scored = [e.name for e in case.evaluators]
        info = {"case": case.name, "steps": len(case.steps), "tool_calls": len(case.calls)}
        out().print(json.dumps({**info, "evaluators": scored, "dataset": dataset, "cases": size}))
        return
    out().print(
        f"captured {case.name}: {len(case.steps)} steps, {len(case.calls)} tool calls, scored by {names} "
        f"-> {dataset} ({size} cases)"
    )


@eval_app.command("datasets")
@verb
async def eval_datasets(conn: Connection, tenant: Tenant = "default", as_json: Json = False) -> None:
    """List the tenant's registry datasets (datasets in files are not listed).

    Example: wolf eval datasets
    """
    from agentwolf.cli.tables import print_table
    from agentwolf.client import evals

    found = await evals.datasets(await conn.client(tenant))
    if as_json:
        out().print(json.dumps([d.model_dump(mode="json") for d in found]), soft_wrap=True)
        return
    print_table(["DATASET", "CASES"], [[d.name, str(d.cases)] for d in found])


@eval_app.command("run")
@verb
async def eval_run(
    dataset: str,
    conn: Connection,
    config: ConfigOpt = None,
    model: Annotated[str | None, typer.Option("--model", metavar="M", help="Ask this model instead.")] = None,
    live_tools: Annotated[
        bool, typer.Option("--live-tools", help="Let divergent calls with side effects run.")
    ] = False,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Ask each case of DATASET (a registry name or a file) again, of a config (NAME[@VERSION] or a
    file) or model: tool calls that match the recording get its results and run nothing; a divergent
    call runs only if its tool is read-only (or with --live-tools). Prints each case's evaluators'
    verdicts, its score (their mean) and where its trajectory diverged.

    Example: wolf eval run regressions --config prod@4
    """
    wolf = await conn.client(tenant)
    manifest = await _manifest(wolf, config)
    report = await run_dataset(wolf, dataset, manifest, model=model, live_tools=live_tools)
    if as_json:
        cases = [c.model_dump() for c in report.cases]
        body = {"score": report.score, "evaluators": report.by_evaluator(), "cases": cases}
        out().print(json.dumps(body), soft_wrap=True)
    else:
        print_report(report)
    if report.score < 1.0:
        raise Exit(
            1, f"score {report.score:.2f}: {sum(c.score < 1 for c in report.cases)} cases scored below 1"
        )


async def _manifest(wolf: WolfClient, config: str | None) -> Manifest:
    from agentwolf.cli.sources import config_source, registry_ref

    ref = registry_ref(config)
    if ref is not None:
        return (await wolf.config_get(*ref)).manifest
    source = config_source(config)
    assert not isinstance(source, str)
    return source


async def run_dataset(
    wolf: WolfClient, dataset: str, manifest: Manifest, *, model: str | None = None, live_tools: bool = False
) -> EvalReport:
    from agentwolf.client import evals

    await check_worker(wolf, required=True)
    return await evals.run(
        wolf, await evals.load(wolf, dataset), manifest, model=model, live_tools=live_tools
    )


def print_report(report: EvalReport) -> None:
    from agentwolf.cli.render import inert
    from agentwolf.cli.tables import print_table

    rows = [
        [
            inert(c.name),
            f"{c.score:.2f}",
            inert(c.divergence or "same trajectory"),
            inert("; ".join(_verdict(e) for e in c.evaluations) or "-"),
            str(c.requests),
        ]
        for c in report.cases
    ]
    print_table(["CASE", "SCORE", "TRAJECTORY", "EVALUATORS", "REQUESTS"], rows)
    means = ", ".join(f"{name} {score:.2f}" for name, score in report.by_evaluator().items())
    err().print(f"score {report.score:.2f} over {len(report.cases)} cases" + (f" ({means})" if means else ""))


def _verdict(evaluation: Evaluation) -> str:
    from agentwolf.workflows.evals.cases import SAME_TRAJECTORY

    value = evaluation.value
    shown = ("pass" if value else "FAIL") if isinstance(value, bool) else f"{value:.2f}"
    shown_beside = evaluation.name == SAME_TRAJECTORY  # its reason is the TRAJECTORY column
    why = f": {evaluation.reason}" if evaluation.reason and not shown_beside and value is not True else ""
    return f"{evaluation.name} {shown}{why}"
