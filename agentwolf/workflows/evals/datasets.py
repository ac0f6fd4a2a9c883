"""EvalDataset: one named eval dataset of one tenant, kept in the registry as a long-lived workflow
(as configs are, workflows/configs/config_registry.py).

Workflow id `wolf-dataset/<tenant>/<name>`: the tenant comes from the id the client builds from the
tenant it serves, so another tenant's client names another workflow and finds nothing. Cases are
added by an update (`wolf eval capture --dataset NAME`) and read by a query (`wolf eval run NAME`);
the history stays bounded: the run continues as new, its cases carried over, when it grows. Cases
hold transcripts: a large dataset's state goes to the payload store like any large payload.
Deterministic code only."""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentwolf.workflows.evals.cases import EvalCase

DATASET_WORKFLOW = "EvalDataset"


def dataset_id(tenant: str, name: str) -> str:
    return f"wolf-dataset/{tenant}/{name}"


class DatasetInput(BaseModel):
    """Start arguments, and the snapshot a continue-as-new hands to the next run."""

    name: str
    cases: list[EvalCase] = []
    max_history_events: int = Field(2000, ge=10)


@workflow.defn(name=DATASET_WORKFLOW)
class EvalDatasetWorkflow:
    @workflow.init
    def __init__(self, inp: DatasetInput) -> None:
        self.inp = inp
        self.kept = list(inp.cases)

    @workflow.run
    async def run(self, inp: DatasetInput) -> None:
        await workflow.wait_condition(
            lambda: (
                workflow.info().is_continue_as_new_suggested()
                or workflow.info().get_current_history_length() > inp.max_history_events
            )
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        # The size goes along by name: the memo a continued run inherits need not hold the last upsert.
        workflow.continue_as_new(inp.model_copy(update={"cases": self.kept}), memo={"cases": len(self.kept)})

    @workflow.update
    def add(self, case: EvalCase) -> int:
        """Append a case; the dataset's size, which `wolf eval datasets` reads from visibility."""
        self.kept.append(case)
        workflow.upsert_memo({"cases": len(self.kept)})
        return len(self.kept)

    @workflow.query
    def cases(self) -> list[EvalCase]:
        return self.kept
