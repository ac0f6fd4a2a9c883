"""The session's context manager: keeps each model request inside the model's window by moving the
working context's view forward (workflows/compaction.py), before a request would overflow, when the
provider refuses one as too long, when asked (`wolf compact`), and at idle before a continue-as-new.

Imported passed through, like turn.py; calls only `workflow.*` and deterministic helpers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from agentwolf.workflows.archive import (
    ARCHIVE,
    ARCHIVE_MIN,
    ArchivedPart,
    ArchiveInput,
    fold_text,
    joined,
)
from agentwolf.workflows.compaction import (
    CHARS_PER_TOKEN,
    COMPACTION,
    CONTEXT_LENGTH_EXCEEDED,
    FOLDING,
    TARGET,
    ContextSizes,
    ContextView,
    Plan,
    cut_tool_outputs,
    instructions,
    plan,
)
from agentwolf.workflows.contracts import CompactInput, CompiledAgent, ModelRequestOutput
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.turn import (
    HEARTBEAT_TIMEOUT,
    MODEL_RETRY,
    MODEL_TIMEOUT,
    Turn,
    cause_message,
    short,
)

LEARNT_MARGIN = 0.9
"""A window learnt from a refusal that named none: this share of the refused request's estimate.
Not floored at the compiled window: such a refusal says the estimate falls short of the provider's
count, and the learnt window, in the estimate's measure, makes up for it; a floor would let the
provider refuse again and again, each refusal forcing a compaction. A wrong estimate is the bug to
fix (a rewind's stale sizes were one: `ContextKeeper.cut`)."""


ModelRequest = Callable[[CompiledAgent], Awaitable[ModelRequestOutput]]
"""The turn runner's model request (loop.py), which the keeper fits into the window."""


class ContextKeeper:
    """The working context's view, the token estimate behind it, and compaction."""

    def __init__(self, core: SessionCore) -> None:
        self.core = core
        inp = core.inp
        self.view: ContextView = inp.context.model_copy(deep=True) if inp.context else ContextView()
        self.tokens_per_char = 1 / CHARS_PER_TOKEN
        """Calibrated on the provider's reported input tokens; never below chars/4."""
        self.compact_requested = False
        self.sizes = ContextSizes()

    def cut(self, view: ContextView, *, sizes_too: bool = True) -> None:
        """The transcript was cut (a rewind): `view` is clamped to it, and the sizes measured so far
        go (those past the cut were of the messages set aside; `sizes_too` False: a rewind of a run
        recorded before they went too)."""
        self.view = view
        if sizes_too:
            self.sizes = ContextSizes()

    def sent_view(self) -> ContextView | None:
        """What model requests carry: None while the working context is the transcript itself."""
        return None if self.view.plain else self.view

    def window(self, compiled: CompiledAgent | None) -> int | None:
        return self.view.window or (compiled.context_window if compiled else None)

    def _fixed_chars(self, compiled: CompiledAgent) -> int:
        """What every request sends besides its messages: instructions (pinned notes too), tools."""
        tools = sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in compiled.tools)
        return len(instructions(compiled.instructions, self.view)) + tools

    def _sent_chars(self, compiled: CompiledAgent, view: ContextView, fixed: int | None = None) -> int:
        """About how many characters a request sends: what every one does, and the working context."""
        fixed = self._fixed_chars(compiled) if fixed is None else fixed
        return fixed + self.sizes.chars(
            self.core.log.transcript, view, compiled.tool_output_chars, self.core.log.archive.fold
        )

    def _tokens(self, compiled: CompiledAgent, view: ContextView, fixed: int | None = None) -> int:
        """The estimate, at the calibrated rate."""
        return int(self._sent_chars(compiled, view, fixed) * self.tokens_per_char)

    def context_tokens(self, compiled: CompiledAgent | None) -> int | None:
        """About how many tokens the next request sends (for status)."""
        if compiled is None:
            return None
        return self._tokens(compiled, self.view)

    def _calibrate(self, compiled: CompiledAgent, out: ModelRequestOutput, sent_chars: int) -> None:
        reported = out.response.usage.input_tokens
        if reported and sent_chars:
            self.tokens_per_char = min(1.0, max(1 / CHARS_PER_TOKEN, reported / sent_chars))

    async def request_fitting(
        self, compiled: CompiledAgent, turn: Turn, request: ModelRequest
    ) -> ModelRequestOutput:
        """The step's model request, its context compacted first if it would overflow; a provider's
        refusal as too long compacts further and asks again, until nothing is left to compact."""
        requested, self.compact_requested = self.compact_requested, False
        await self._fit(compiled, turn, force=requested)
        while True:
            sent = self._sent_chars(compiled, self.view)
            try:
                out = await request(compiled)
            except ActivityError as err:
                cause = err.cause
                if not (
                    isinstance(cause, ApplicationError)
                    and cause.type == CONTEXT_LENGTH_EXCEEDED
                    and self.core.limits().compaction != "off"
                    and workflow.patched(COMPACTION)
                ):
                    raise
                named = cause.details[0] if cause.details and isinstance(cause.details[0], int) else None
                learnt = named or int(sent * self.tokens_per_char * LEARNT_MARGIN)
                window = min(learnt, self.window(compiled) or learnt)
                self.view = self.view.model_copy(update={"window": window})
                if not await self._fit(compiled, turn, force=True):
                    raise
                continue
            self._calibrate(compiled, out, sent)
            return out

    async def _fit(self, compiled: CompiledAgent, turn: Turn | None, force: bool = False) -> bool:
        """Compact if the working context passes `limits.compact_at` of the window (`force`: shrink
        it anyway, by the cheapest tier that helps). True when the view moved."""
        limits = self.core.limits()
        window = self.window(compiled)
        if limits.compaction == "off" or window is None:
            return False

        fixed = self._fixed_chars(compiled)

        def measure(view: ContextView) -> int:
            return self._tokens(compiled, view, fixed)

        decided = plan(
            self.core.log.transcript,
            self.view,
            measure,
            limit=int(window * limits.compact_at),
            target=int(window * TARGET),
            force=force,
            until=self.core.log.synced_len,
            may_fold=lambda: workflow.patched(FOLDING),
        )
        if decided is None or not workflow.patched(COMPACTION):
            return False
        view = decided.view
        if decided.summarize is not None:
            out = await self._summarise(compiled, decided, window)
            self.core.count_request(turn or Turn(pending=[]), out)  # between turns: the session's only
            view = view.model_copy(update={"summary": out.response.text or ""})
        self.view = view.model_copy(update={"compactions": view.compactions + 1})
        self.core.log.summarised(self.view.summary_upto)
        after = measure(self.view)
        self.core.publish(
            "context_compacted",
            text=f"context compacted (tier {decided.tier}, {decided.what}): about {decided.before} -> "
            f"{after} tokens of {window}",
            tier=decided.tier,
            before_tokens=decided.before,
            after_tokens=after,
        )
        return True

    async def _summarise(self, compiled: CompiledAgent, decided: Plan, window: int) -> ModelRequestOutput:
        assert decided.summarize is not None
        start, end = decided.summarize
        return await workflow.execute_activity(
            "wolf.compact_summary",
            CompactInput(
                ref=self.core.ref(),
                compiled_digest=compiled.digest,
                base_len=self.core.log.synced_len,
                base_digest=self.core.log.synced_digest,
                view=self.view.model_copy(update={"stub_before": decided.view.stub_before}),
                start=start,
                end=end,
                budget=int(window * TARGET * CHARS_PER_TOKEN),
                turn_id=self.core.running.turn_id or "",
            ),
            result_type=ModelRequestOutput,
            start_to_close_timeout=MODEL_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
            summary=short(f"compact_summary messages {start}-{end}"),
        )

    async def archive_at_idle(self) -> None:
        """Before a continue-as-new: messages the working context no longer reads whole (summarised,
        or folded and stubbed for good) go to the payload store (archive.py), so the next run and
        the worker's copy leave them out of memory."""
        core, log, view = self.core, self.core.log, self.view
        compiled = core.compiled
        start = log.archive.length
        # Summarised, or folded and stubbed for good (a fold's lines then never change).
        end = min(view.first_sent, max(view.stub_before, view.summary_upto), log.synced_len)
        if compiled is None or end - start < ARCHIVE_MIN or not workflow.patched(ARCHIVE):
            return
        try:
            part = await self._archive_part(compiled, start, end)
        except ActivityError as err:  # the next continue-as-new tries again; nothing is lost meanwhile
            core.publish("error", text=f"archiving older messages failed: {cause_message(err)}")
            return
        if part is None:  # the worker has no payload store
            return
        archived = log.transcript[start:end]
        # As the worker folds them: from its copy with long results cut (a loaded skill's stay whole).
        shown = [*log.transcript[:start], *cut_tool_outputs(archived, compiled.tool_output_chars, start)]
        fold = (
            joined(log.archive.fold, fold_text(log.transcript, view, start, end, shown))
            if view.summary_upto < end
            else ""
        )
        log.archived(part, end, fold)
        self.view = view.model_copy(update={"archived": end})

    async def _archive_part(self, compiled: CompiledAgent, start: int, end: int) -> ArchivedPart | None:
        log = self.core.log
        return await workflow.execute_activity(
            "wolf.archive_transcript",
            ArchiveInput(
                ref=self.core.ref(),
                compiled_digest=compiled.digest,
                base_len=log.synced_len,
                base_digest=log.synced_digest,
                start=start,
                end=end,
            ),
            result_type=ArchivedPart | None,  # type: ignore[arg-type]
            start_to_close_timeout=MODEL_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
            summary=f"archive_transcript messages {start}-{end}",
        )

    async def compact_at_idle(self) -> None:
        """Between turns: what `wolf compact` asked for, or what the next request would need anyway
        (before a continue-as-new, so the summary is not on the next prompt's path)."""
        requested, self.compact_requested = self.compact_requested, False
        compiled = self.core.compiled
        if compiled is None or self.core.running.stale.reason:
            return
        try:
            await self._fit(compiled, None, force=requested)
        except ActivityError as err:  # no turn to fail: said, and the next request compacts again
            self.core.publish("error", text=f"compaction failed: {cause_message(err)}")
