"""Claims: a task claimed for an agent for a number of TTL units, a takeover of an earlier
lease's task, and the same in parallel programs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import multiple, rule

from taskboard.model import Call, Op
from taskboard.stateful._fields import Reader, read_count
from taskboard.stateful._generation import (
    AGENTS,
    BOOLEANS,
    NEVER_ISSUED,
    TASK_IDS,
    TTL_TICKS,
    LeaseRef,
)
from taskboard.stateful._hypothesis import choice
from taskboard.stateful._steps._base import (
    LEASES,
    Machine,
    ProgramDraw,
    ProgramStep,
    Runner,
)
from taskboard.stateful._steps._calls import CallKind

__all__ = ["KIND", "PROGRAM_TTL_TICKS", "ClaimStep", "claim_lease", "no_new_lease"]

#: Lease lengths a program's claims and actions draw, in TTL units.
PROGRAM_TTL_TICKS = (0, 1, 5, 10_000)


def no_new_lease(session: Runner, task_id: str) -> Any:
    """What a claim that returned no lease adds to the ``leases`` bundle: nothing, or, where an
    outcome may differ between runs of one example (the wall clock, tolerated faults), the
    task's latest lease (one never issued if it has none): what Hypothesis draws may not
    differ."""
    if not session.config.outcomes_vary:
        return multiple()
    latest = session.latest_lease(task_id)
    if latest is None:
        return LeaseRef("never issued", task_id, NEVER_ISSUED, 0, "")
    label = session.label(latest.token)
    return LeaseRef(label, task_id, latest.token, latest.fence, latest.agent)


def claim_lease(session: Runner, task: str, agent: str, ttl_ticks: int) -> Any:
    """Claim ``task`` for ``agent`` for ``ttl_ticks`` TTL units; the lease it returned, for the
    ``leases`` bundle (see :func:`no_new_lease` for a claim that returned none)."""
    outcome = session.perform(
        Call(Op.CLAIM, task, agent=agent, ttl=session.config.lease_ttl(ttl_ticks))
    )
    if outcome.task is None or outcome.task.lease is None or not outcome.ok:
        return no_new_lease(session, task)
    lease = outcome.task.lease
    return LeaseRef(session.labels[lease.token], task, lease.token, lease.fence, agent)


@rule(target=LEASES, task=choice(TASK_IDS), agent=choice(AGENTS), ttl_ticks=TTL_TICKS)
def claim(self: Machine, task: str, agent: str, ttl_ticks: int) -> Any:
    """Claim a task for an agent, for ``ttl_ticks`` clock ticks (0: no expiry)."""
    return claim_lease(self._session, task, agent, ttl_ticks)


@rule(target=LEASES, lease=LEASES, same_agent=BOOLEANS, ttl_ticks=TTL_TICKS)
def reclaim(self: Machine, lease: LeaseRef, same_agent: bool, ttl_ticks: int) -> Any:
    """Claim the task of an earlier lease again, as the same agent name or another one:
    a takeover once that lease has expired, and a same-name holder with a new token."""
    agent = lease.agent if same_agent else ("a2" if lease.agent == "a1" else "a1")
    return claim_lease(self._session, lease.task_id, agent, ttl_ticks)


@dataclass(frozen=True)
class ClaimStep(ProgramStep):
    """A program's claim of ``task`` for ``agent``, for ``ttl_ticks`` TTL units."""

    task: str
    agent: str = "a1"
    ttl_ticks: int = 0

    @property
    def op(self) -> str:
        return "claim"

    def run(self, session: Runner) -> None:
        session.perform(self.call(session, {}))

    def call(self, session: Runner, mine: Mapping[str, str]) -> Call:
        # A racing thread's call does not pass through perform: it asks for a holdable lease
        # here (see LeaseLimits).
        ttl = session.config.lease_ttl(self.ttl_ticks)
        return session.holding.holdable(Call(Op.CLAIM, self.task, agent=self.agent, ttl=ttl))

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "task": self.task, "agent": self.agent, "ttl_ticks": self.ttl_ticks}

    def __str__(self) -> str:
        return f"claim({self.task!r}, agent={self.agent!r}, ttl={self.ttl_ticks})"


class ClaimKind(CallKind):
    """Claims (SPEC 3.1), takeovers included."""

    names = ("claim",)

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        return {"claim": claim, "reclaim": reclaim}

    def program_strategies(self, draw: ProgramDraw) -> tuple[st.SearchStrategy[ProgramStep], ...]:
        claims = st.builds(
            ClaimStep, draw.tasks, st.sampled_from(AGENTS), st.sampled_from(PROGRAM_TTL_TICKS)
        )
        # The prefix mostly claims: the threads then race for what it holds.
        return (claims, claims) if draw.in_prefix else (claims,)

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        return ClaimStep(
            reader.get("task", str), reader.get("agent", str), read_count(reader, "ttl_ticks")
        )


KIND = ClaimKind()
