"""The quota workflow's ledger: what the window holds and what it lets through, read off the
workflow's state (`QuotaState`) and the patches its run took; it changes nothing itself, so the
workflow (workflow.py) decides every grant, and this module can be read as the budget's rules
alone. Deterministic code only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.quotas import INTERACTIVE

from agentwolf.workflows.quotas.messages import PROBE_WAIT, Ask, Lease, QuotaState, Usage


@dataclass
class Ledger:
    """The budget's rules over one run's state; the flags are the patches that run took."""

    state: QuotaState
    paced: bool
    reserving: bool
    probing: bool

    def limits(self) -> tuple[int | None, int | None, int | None]:
        """Configured limits, else learnt ones."""
        limits, learned = self.state.limits, self.state.learned
        return (
            limits.rpm or learned.rpm,
            limits.input_tpm or learned.input_tpm,
            limits.output_tpm or learned.output_tpm,
        )

    def window(self) -> timedelta:
        """The configured window; (probing runs) the provider's when it states one and the entry
        sets no number of its own."""
        limits, learned = self.state.limits, self.state.learned
        configured = (limits.rpm, limits.input_tpm, limits.output_tpm)
        if self.probing and learned.window is not None and configured == (None, None, None):
            return learned.window
        return limits.window

    def unknown(self) -> bool:
        """Probing runs: no limit configured or learnt, and no answer of the provider seen yet."""
        s = self.state
        return (
            self.probing
            and not s.answered
            and self.limits() == (None, None, None)
            and not s.limits.concurrency
        )

    def probe_until(self, now: datetime) -> datetime | None:
        """While the limits are unknown and a request is out: until when it goes alone (PROBE_WAIT
        after its grant: an answer slow in coming, or a dead worker's, holds nobody back longer)."""
        if not self.unknown():
            return None
        out = [
            lease.granted_at
            for lease in self.state.leases
            if lease.ended_at is None and lease.expires_at > now
        ]
        return min(out) + PROBE_WAIT if out else None

    def use(self, now: datetime) -> Usage:
        window = self.window()
        use = Usage()
        for lease in self.state.leases:
            if lease.end() + window <= now:
                continue
            if lease.ended_at is None and lease.expires_at > now:
                use.active += 1
            if lease.sent:
                use.requests += 1
                use.input_tokens += lease.input_tokens
                use.output_tokens += lease.output_tokens
        return use

    def refusal(self, ask: Ask, now: datetime) -> str:
        """Why `ask` cannot be granted now ('' if it can). A request larger than a whole budget goes
        alone (into an empty window)."""
        s = self.state
        if s.cooldown_until is not None and s.cooldown_until > now:
            return "cooldown"
        rpm, itpm, otpm = self.limits()
        use = self.use(now)
        if rpm is not None and use.requests + 1 > rpm:
            return "rpm"
        if itpm is not None and use.input_tokens and use.input_tokens + ask.input_tokens > itpm:
            return "input_tpm"
        if otpm is not None and use.output_tokens and use.output_tokens + ask.output_tokens > otpm:
            return "output_tpm"
        if s.limits.concurrency is not None and use.active + 1 > s.limits.concurrency:
            return "concurrency"
        if (until := self.probe_until(now)) is not None and until > now:  # its answer may say more
            return "probing"
        if self.reserved(ask, use, now):
            return "reserved"
        if self.pacing(now) and not (self.reserving and ask.priority <= INTERACTIVE):
            return self.binding(ask)
        return ""

    def holding(self, now: datetime) -> bool:
        """The reserve is kept for interactive requests: one asked within the last window."""
        s = self.state
        if not self.reserving or s.limits.reserve <= 0 or s.interactive_at is None:
            return False
        return s.interactive_at + self.window() > now

    def reserved(self, ask: Ask, use: Usage, now: datetime) -> bool:
        """A job or background request would take what is left to interactive requests (a whole
        reserved request or slot: of 10 requests, 15 % keeps one)."""
        if ask.priority <= INTERACTIVE or not self.holding(now):
            return False
        rpm, itpm, otpm = self.limits()
        share = self.state.limits.reserve
        budgets = [
            (rpm, use.requests, 1, True),
            (self.state.limits.concurrency, use.active, 1, True),
            (itpm, use.input_tokens, ask.input_tokens, False),
            (otpm, use.output_tokens, ask.output_tokens, False),
        ]
        for limit, used, more, counted in budgets:
            if limit is not None and used:  # an empty window admits one, whatever its size
                kept = int(limit * share) if counted else limit * share
                if used + more > limit - kept:
                    return True
        return False

    def pacing(self, now: datetime) -> bool:
        """Requests kept waiting and the last grant's interval has not passed."""
        s = self.state
        return self.paced and s.contended and s.paced_at is not None and s.paced_at > now

    def shares(self, use: Ask | Lease) -> dict[str, float]:
        """A request's share of each budget it is counted in."""
        rpm, itpm, otpm = self.limits()
        shares = {"rpm": 1 / rpm if rpm else 0.0}
        shares["input_tpm"] = use.input_tokens / itpm if itpm else 0.0
        shares["output_tpm"] = use.output_tokens / otpm if otpm else 0.0
        return shares

    def share(self, use: Ask | Lease) -> float:
        """The share of the binding budget, at most a whole window's (the pace between grants)."""
        if isinstance(use, Lease) and not use.sent:
            return 0.0
        return min(max(self.shares(use).values()), 1.0)

    def binding(self, ask: Ask) -> str:
        shares = self.shares(ask)
        return max(shares, key=lambda k: shares[k])

    def queue(self) -> list[Ask]:
        """Waiting requests in the order they are served: priority, tenant's fair start, arrival."""
        return sorted(self.state.queue, key=self.place)

    def place(self, ask: Ask) -> tuple[int, float, datetime, str]:
        return (ask.priority, self.start(ask.tenant), ask.since, ask.lease_id)

    def start(self, tenant: str) -> float:
        """The tenant's start tag: its virtual time (before the patch: never behind the system's)."""
        s = self.state
        if self.paced:
            return s.virtual.get(tenant, s.clock)
        return max(s.clock, s.virtual.get(tenant, 0.0))

    def cost(self, ask: Ask) -> float:
        """A grant's share of the binding budget (requests or input tokens; paced runs: or output)."""
        shares = self.shares(ask)
        if not self.paced:
            shares["output_tpm"] = 0.0
        return max(shares.values()) or 1.0

    def next_free(self, now: datetime) -> datetime:
        """When the window next frees room: a lease leaving it, or one expiring."""
        s = self.state
        times = [lease.end() + self.window() for lease in s.leases]
        if (probed := self.probe_until(now)) is not None and probed > now:
            times.append(probed)
        times += [lease.expires_at for lease in s.leases if lease.ended_at is None and lease.expires_at > now]
        if s.cooldown_until is not None and s.cooldown_until > now:
            times.append(s.cooldown_until)
        if self.pacing(now) and s.paced_at is not None:
            times.append(s.paced_at)
        if self.holding(now) and s.interactive_at is not None:  # jobs may use the reserve then
            times.append(s.interactive_at + self.window())
        return min(times, default=now)
