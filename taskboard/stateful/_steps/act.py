"""Acting with a token: renew, release, complete and fail, as the task's latest holder, as the
holder before it (stale), with a lease kept from earlier, or with a token that is not the
task's; and the same in parallel programs, as the thread's own claim's holder too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from taskboard._contract import State
from taskboard._operations import BY_OP
from taskboard.model import Call, Op, is_live
from taskboard.stateful._fields import Reader, read_count
from taskboard.stateful._generation import (
    HOLDERS,
    NEVER_ISSUED,
    RENEW_TTL_TICKS,
    TASK_IDS,
    TOKEN_OPS,
    TTL_TICKS,
    WRONG_TOKENS,
    LeaseRef,
    renew_ticks,
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
from taskboard.stateful._steps.claim import PROGRAM_TTL_TICKS
from taskboard.stateful._trace import forge, token_ref

__all__ = ["KIND", "PROGRAM_TOKENS", "ActStep"]

#: Whose token a program's action uses: the one this thread's own last claim of the task
#: returned, the task's latest lease's when the threads start, or the one before it.
PROGRAM_TOKENS = ("mine", "latest", "previous")
#: The choices as drawn in threads: the shared latest token twice as often as the others.
THREAD_TOKENS = ("latest", "mine", "latest", "previous")
#: The actions a program draws: most complete or renew, where races bite.
PROGRAM_ACTIONS = ("complete", "renew", "complete", "release", "fail")


def held_task(session: Runner, task: str) -> str:
    """``task`` when it is claimed (its lease live or expired); else the next task after it
    (in :data:`TASK_IDS`, round) whose lease is live, else the next that is claimed at all,
    else ``task``: the task a holder's renew acts on.

    A renew of a task nobody holds (never claimed, released, done, blocked) meets no lease
    at all, and with three tasks, their dependencies and tasks done for good that was most
    renews: one in eight met a live lease with its own token on a whole-second store, so a
    renew with ttl 0 seldom did (python-redis-lock's ``extend(0)``). On a coarse wall-clock
    unit leases last a unit or two of real sleep, and a held task's lease had often ended:
    a live one is preferred there. Renews with tokens no lease holds are what
    ``act_with_wrong_token`` and ``act_with_lease`` draw. Release, complete and fail keep
    their drawn task: acting on a held one more often ends leases sooner, and fewer are
    then live when a renew or an expiry comes."""
    start = TASK_IDS.index(task) if task in TASK_IDS else 0
    now = session.clock.now()
    claimed = []
    for candidate in TASK_IDS[start:] + TASK_IDS[:start]:
        held = session.model.task(candidate)
        if held is not None and held.state is State.CLAIMED:
            if candidate == task or is_live(held.lease, now):
                return candidate
            claimed.append(candidate)
    return claimed[0] if claimed else task


def act_as_holder(session: Runner, op: Op, task: str, holder: str, ttl_ticks: int = 0) -> None:
    """Act on ``task`` with its latest lease's token, or the one before it (``holder``)."""
    token = session.token_of(task, holder) or NEVER_ISSUED
    ttl = session.config.lease_ttl(ttl_ticks) if BY_OP[op].request else timedelta(0)
    session.perform(Call(op, task, token=token, ttl=ttl))


@precondition(lambda self: self._session.supports("renew"))
@rule(task=choice(TASK_IDS), ttl_ticks=RENEW_TTL_TICKS, holder=choice(HOLDERS))
def renew(self: Machine, task: str, ttl_ticks: int, holder: str) -> None:
    """Renew ``task`` (or the next task that is held, see :func:`held_task`) as its latest
    lease's holder, or as the holder before (stale)."""
    act_as_holder(self._session, Op.RENEW, held_task(self._session, task), holder, ttl_ticks)


@rule(task=choice(TASK_IDS), holder=choice(HOLDERS))
def release(self: Machine, task: str, holder: str) -> None:
    """Release ``task`` as its latest lease's holder, or as the holder before (stale)."""
    act_as_holder(self._session, Op.RELEASE, task, holder)


@rule(task=choice(TASK_IDS), holder=choice(HOLDERS))
def complete(self: Machine, task: str, holder: str) -> None:
    """Complete ``task`` as its latest lease's holder, or as the holder before (stale)."""
    act_as_holder(self._session, Op.COMPLETE, task, holder)


@precondition(lambda self: self._session.supports("fail"))
@rule(task=choice(TASK_IDS), holder=choice(HOLDERS))
def fail(self: Machine, task: str, holder: str) -> None:
    """Fail ``task`` as its latest lease's holder, or as the holder before (stale)."""
    act_as_holder(self._session, Op.FAIL, task, holder)


@rule(op=choice(TOKEN_OPS), lease=LEASES, ttl_ticks=TTL_TICKS)
def act_with_lease(self: Machine, op: str, lease: LeaseRef, ttl_ticks: int) -> None:
    """Act on a lease's task with its token: often a stale holder acting late."""
    session = self._session
    if session.supports(op):
        ticks = renew_ticks(ttl_ticks) if op == Op.RENEW else ttl_ticks
        ttl = session.config.lease_ttl(ticks)
        session.perform(Call(Op(op), lease.task_id, token=lease.token, ttl=ttl))


@rule(op=choice(TOKEN_OPS), task=choice(TASK_IDS), how=choice(WRONG_TOKENS))
def act_with_wrong_token(self: Machine, op: str, task: str, how: str) -> None:
    """Act on ``task`` with a token that is not its latest lease's: another task's latest
    token, or a forgery of its own (close to the real one, as a buggy compare would see)."""
    session = self._session
    if not session.supports(op):
        return
    unit = session.config.ttl_unit
    if how == "another task's":
        others = TASK_IDS[TASK_IDS.index(task) + 1 :] + TASK_IDS[: TASK_IDS.index(task)]
        token = next((t for o in others if (t := session.token_of(o, "latest"))), NEVER_ISSUED)
        session.perform(Call(Op(op), task, token=token, ttl=unit))
        return
    real = session.token_of(task, "latest")
    if real:
        ref = token_ref(real, session.labels, forgery=how, of=real)
    else:
        real, ref = NEVER_ISSUED, ""
    session.perform(Call(Op(op), task, token=forge(real, how), ttl=unit), ref)


@dataclass(frozen=True)
class ActStep(ProgramStep):
    """A program's ``op`` on ``task`` with a token named by whose it is (``PROGRAM_TOKENS``),
    for ``ttl_ticks`` TTL units where ``op`` is a renew."""

    action: str
    task: str
    token: str = "latest"
    ttl_ticks: int = 0

    @property
    def op(self) -> str:
        return self.action

    def run(self, session: Runner) -> None:
        if session.supports(self.op):
            session.perform(self.call(session, {}))

    def call(self, session: Runner, mine: Mapping[str, str]) -> Call:
        if self.token == "mine" and self.task in mine:
            token = mine[self.task]
        else:
            holder = "previous" if self.token == "previous" else "latest"
            token = session.token_of(self.task, holder) or NEVER_ISSUED
        ttl = session.config.lease_ttl(self.ttl_ticks)
        return session.holding.holdable(Call(Op(self.op), self.task, token=token, ttl=ttl))

    @property
    def own_token(self) -> bool:
        return self.token == "mine"

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "task": self.task, "token": self.token, "ttl_ticks": self.ttl_ticks}

    def __str__(self) -> str:
        return f"{self.op}({self.task!r}, token={self.token})"


class ActKind(CallKind):
    """Actions with a token (SPEC 3.2 to 3.5): renew, release, complete, fail."""

    names: ClassVar[tuple[str, ...]] = TOKEN_OPS

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        return {
            "renew": renew,
            "release": release,
            "complete": complete,
            "fail": fail,
            "act_with_lease": act_with_lease,
            "act_with_wrong_token": act_with_wrong_token,
        }

    def program_strategies(self, draw: ProgramDraw) -> tuple[st.SearchStrategy[ProgramStep], ...]:
        # Most actions complete or renew with the token the task has when the threads start.
        tokens = ("latest", "previous") if draw.in_prefix else THREAD_TOKENS
        actions = st.builds(
            ActStep,
            st.sampled_from(PROGRAM_ACTIONS),
            draw.tasks,
            st.sampled_from(tokens),
            st.sampled_from(PROGRAM_TTL_TICKS),
        )
        return (actions,)

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        token = reader.get("token", str)
        if token not in PROGRAM_TOKENS:
            raise reader.error("token", f"{token!r} is not one of {', '.join(PROGRAM_TOKENS)}")
        ticks = read_count(reader, "ttl_ticks") if "ttl_ticks" in reader.value else 0
        return ActStep(op, reader.get("task", str), token, ticks)


KIND = ActKind()
