"""Landing at a lease's expiry: the clock moved to exactly a live lease's ``until`` (or one
tick before it; on the wall clock, just before or after it), then an act on its task at
once, as a rule; and in a program's prefix, the move the racing threads start from. Its
recorded steps are a clock move and the call (see the clock, claim and act kinds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from taskboard._contract import State
from taskboard.model import Call, Op, format_duration
from taskboard.stateful._fields import Reader, read_count
from taskboard.stateful._generation import (
    AGENTS,
    AT_EXPIRY,
    BOOLEANS,
    TASK_IDS,
    TTL_TICKS,
    renew_ticks,
)
from taskboard.stateful._hypothesis import choice
from taskboard.stateful._steps._base import (
    LEASES,
    Machine,
    ProgramDraw,
    ProgramStep,
    Runner,
    StepKind,
)
from taskboard.stateful._steps.claim import claim_lease, no_new_lease
from taskboard.stateful._trace import format_offset

__all__ = ["EXPIRY_LEAD", "KIND", "ExpiryStep", "expiring", "land_at_expiry"]

#: On the wall clock, how far before a lease's until the threads of an expiry race start, per
#: step of the lead + 1: they take a fraction of a millisecond to get going.
EXPIRY_LEAD = timedelta(microseconds=500)


def expiring(session: Runner) -> list[tuple[str, str, datetime]]:
    """The live leases that will expire, as (task, token, until); on the wall clock only
    those that end within the config's ``longest_wait`` TTL units (waiting is real). On
    the wall clock, when there is none, the leases that ended unclaimed (far enough back
    that a call now is wholly after their end): on a coarse unit a lease rarely outlives
    two clock steps, and acting on one late is the holder that slept past its TTL."""
    now = session.clock.now()
    config = session.config
    ending = [
        (t.id, t.lease.token, t.lease.until, t.state)
        for t in session.model.tasks
        if t.lease is not None and t.lease.until is not None
    ]
    if not config.wall:
        return [(task, token, until) for task, token, until, _ in ending if now < until]
    last = now + config.longest_wait * config.ttl_unit
    ahead = [(task, token, until) for task, token, until, _ in ending if now < until <= last]
    if ahead:
        return ahead
    settled = now - config.past_until
    return [
        (task, token, until)
        for task, token, until, state in ending
        if state is State.CLAIMED and until <= settled
    ]


def land_at_expiry(
    session: Runner,
    token: str,
    until: datetime,
    *,
    early: bool,
    lead: timedelta | None = None,
    why: str = "",
) -> None:
    """Move the clock to exactly ``until`` (``early``: one tick before it). On the wall
    clock, sleep to just before or just after ``until``, by the skew, the resolution and
    (before) the calls' latency, so the next call's window is on one side of it; or, given
    a ``lead``, to that long before it (racing threads then run across it). ``why`` ends
    the step's note. On the wall clock a lease that ended a while ago is acted on at once.
    """
    config = session.config
    now = session.clock.now()
    if config.wall:
        latency = max(session.latencies, default=timedelta(milliseconds=1))
        after = config.past_until
        if lead is not None:
            target, where = until - lead, f"{format_offset(lead)} before"
        elif early:
            before = after + 2 * latency
            target, where = until - before, f"{format_duration(before)} before"
        else:
            target, where = until + after, f"{format_duration(after)} after"
        if target <= now:  # it ended a while ago: act at once
            return
    else:
        target = until - config.resolution if early else until
        where = "one tick before" if early else "exactly at"
    note = f"to {where} {session.label(token)}'s until" + (f", {why}" if why else "")
    session.move_clock(max(target, now), note)


# On the wall clock whether a lease is still ahead depends on timing, and with tolerated
# faults on whether a claim met one, so the rule is then always enabled (Hypothesis needs
# the same rules enabled whenever an example replays).
@precondition(lambda self: self._session.config.outcomes_vary or bool(expiring(self._session)))
@rule(
    target=LEASES,
    which=choice(range(len(TASK_IDS))),
    early=BOOLEANS,
    then=choice(AT_EXPIRY),
    agent=choice(AGENTS),
    ttl_ticks=TTL_TICKS,
)
def at_expiry(self: Machine, which: int, early: bool, then: str, agent: str, ttl_ticks: int) -> Any:
    """Move the clock to exactly a live lease's ``until`` (or one tick before it), then act
    on its task at once: claim it as ``agent``, act with the lease's token, or nothing
    (boundary bugs live exactly here). On the wall clock, sleep to just before or after
    ``until``; with no lease ending soon, claim one of one TTL unit for ``agent`` first."""
    session = self._session
    ending = expiring(session)
    if not ending:  # outcomes vary (see the precondition): make a lease that ends soon
        claim_lease(session, TASK_IDS[which], agent, 1)
        ending = expiring(session)
    if not ending:
        return no_new_lease(session, TASK_IDS[which])
    task_id, token, until = ending[which % len(ending)]
    made = no_new_lease(session, task_id)  # the same count of leases whichever way it went
    land_at_expiry(session, token, until, early=early)
    if then == "claim":
        return claim_lease(session, task_id, agent, ttl_ticks)
    if then != "nothing" and session.supports(then):
        ticks = renew_ticks(ttl_ticks) if then == "renew" else ttl_ticks
        ttl = session.config.lease_ttl(ticks)
        session.perform(Call(Op(then), task_id, token=token, ttl=ttl))
    return made


@dataclass(frozen=True)
class ExpiryStep(ProgramStep):
    """A program's move of the clock to ``task``'s lease's until (``lead`` 0) or one tick
    before it, so that the threads race at its expiry; on the wall clock to ``lead + 1``
    times :data:`EXPIRY_LEAD` before it, so that they run across it. With no lease of
    ``task`` ending soon it moves nothing."""

    task: str
    lead: int = 0

    @property
    def op(self) -> str:
        return "expiry"

    def run(self, session: Runner) -> None:
        task = session.model.task(self.task)
        lease = task.lease if task is not None else None
        now = session.clock.now()
        if lease is None or lease.until is None or lease.until <= now:
            return
        config = session.config
        if config.wall and lease.until - now > config.longest_wait * config.ttl_unit:
            return
        land_at_expiry(
            session,
            lease.token,
            lease.until,
            early=self.lead > 0,
            lead=(self.lead + 1) * EXPIRY_LEAD,
            why="for the threads",
        )

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "task": self.task, "lead": self.lead}

    def __str__(self) -> str:
        return f"expiry({self.task!r}, lead={self.lead})"


class ExpiryKind(StepKind):
    """Landings at a lease's expiry (SPEC 2: the boundary)."""

    names = ("expiry",)

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        return {"at_expiry": at_expiry}

    def program_strategies(self, draw: ProgramDraw) -> tuple[st.SearchStrategy[ProgramStep], ...]:
        if not draw.in_prefix:
            return ()
        # The threads then race at a lease's expiry: a takeover against a renew or a complete.
        return (st.builds(ExpiryStep, draw.tasks, st.integers(0, 1)),)

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        # Traces of schema 3 named the lead ttl_ticks.
        lead = read_count(reader, "lead" if "lead" in reader.value else "ttl_ticks")
        return ExpiryStep(reader.get("task", str), lead)


KIND = ExpiryKind()
