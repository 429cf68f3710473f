"""The linearizability checker on hand-built concurrent histories: no boards, no threads."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskboard import Lease, State, Task
from taskboard.model import (
    BoardModel,
    Call,
    ContractViolation,
    LinearizabilityResult,
    Op,
    Operation,
    Outcome,
    check_history,
)

NOW = datetime(2000, 1, 1, tzinfo=UTC)
TTL = timedelta(seconds=30)
ZERO = timedelta(0)
OK = Outcome()


# -- building histories --------------------------------------------------------------------------


def held(
    task_id: str,
    agent: str,
    token: str,
    fence: int,
    seq: int,
    *,
    until: datetime | None = None,
    deps: tuple[str, ...] = (),
) -> Task:
    """A task as a claim returns it (or a snapshot shows it) while ``agent`` holds it."""
    return Task(
        task_id,
        deps=deps,
        state=State.CLAIMED,
        owner=agent,
        lease=Lease(token, fence, until),
        seq=seq,
    )


def won(
    task_id: str,
    agent: str,
    token: str,
    fence: int = 1,
    seq: int = 1,
    *,
    until: datetime | None = None,
    deps: tuple[str, ...] = (),
) -> Outcome:
    """A claim (or renew) that returned this task."""
    return Outcome(task=held(task_id, agent, token, fence, seq, until=until, deps=deps))


def raised(name: str) -> Outcome:
    """A call that raised the named contract error."""
    return Outcome(error=name)


def claim(task_id: str, agent: str, ttl: timedelta = ZERO) -> Call:
    """``claim(task_id, agent, ClaimRequest(ttl))``."""
    return Call(Op.CLAIM, task_id, agent=agent, ttl=ttl)


def act(op: Op, task_id: str, token: str, ttl: timedelta = ZERO) -> Call:
    """A release, complete, fail or renew by ``token``."""
    return Call(op, task_id, token=token, ttl=ttl)


def op(
    op_id: int,
    call: Call,
    outcome: Outcome | None,
    invoked: float,
    returned: float | None = None,
    thread: int | None = None,
) -> Operation:
    """An operation; by default it lasts one second, or forever when ambiguous."""
    if returned is None:
        returned = math.inf if outcome is None else invoked + 1
    return Operation(op_id, op_id if thread is None else thread, call, outcome, invoked, returned)


def fresh(*tasks: Task) -> BoardModel:
    """The model of a board holding ``tasks`` (one open ``t1`` by default)."""
    return BoardModel.start(tasks or (Task("t1"),))


def check(
    model: BoardModel,
    history: Sequence[Operation],
    final: Sequence[Task] | None = None,
    budget: float = 10.0,
) -> LinearizabilityResult:
    """Check with and without partitions: same verdict, and any witness really is one."""
    results = [
        check_history(model, history, NOW, final_snapshot=final, budget=budget, partition=p)
        for p in (True, False)
    ]
    assert results[0].verdict == results[1].verdict, results
    for result in results:
        if result:
            assert_witness(model, history, result, final)
    return results[0]


def assert_witness(
    model: BoardModel,
    history: Sequence[Operation],
    result: LinearizabilityResult,
    final: Sequence[Task] | None,
) -> None:
    """The order holds every definite operation once, respects real time, and replays."""
    by_id = {o.id: o for o in history}
    order = [by_id[i] for i in result.order]
    assert len(set(result.order)) == len(order)
    assert {o.id for o in history if not o.ambiguous} <= set(result.order)
    for k, first in enumerate(order):
        for later in order[k + 1 :]:
            assert not later.returned < first.invoked, (first, later)
    if final is None and any(o.ambiguous and o.call.op in (Op.CLAIM, Op.RENEW) for o in order):
        return  # applied with a placeholder lease nobody can observe
    final_by_id = {t.id: t for t in final or ()}
    for o in order:
        outcome = o.outcome
        if outcome is None:
            outcome = (
                OK
                if o.call.op not in (Op.CLAIM, Op.RENEW)
                else Outcome(task=final_by_id[o.call.task_id])
            )
        model = model.advance(o.call, NOW, outcome)
    if final is not None:
        model.reconcile(final)


# -- sequential and overlapping histories --------------------------------------------------------


def test_empty_history_is_linearizable() -> None:
    """No operations: the empty order is a witness."""
    result = check(fresh(), [])
    assert result.verdict == "linearizable"
    assert result.order == ()


def test_sequential_history_is_linearizable_in_its_own_order() -> None:
    """Operations one after another are accepted in the order they ran."""
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0),
        op(1, act(Op.RELEASE, "t1", "A"), OK, 2),
        op(2, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=3), 4),
        op(3, act(Op.COMPLETE, "t1", "A"), raised("LeaseLostError"), 6),
        op(4, act(Op.COMPLETE, "t1", "B"), OK, 8),
        op(5, claim("t1", "c"), raised("TerminalError"), 10),
    ]
    result = check(fresh(), history)
    assert result.verdict == "linearizable"
    assert result.order == (0, 1, 2, 3, 4, 5)


def test_sequential_history_with_a_wrong_outcome_is_not_linearizable() -> None:
    """A second claim that wins while the first lease is live has nowhere to go."""
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0),
        op(1, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=2), 2),
    ]
    result = check(fresh(), history)
    assert result.verdict == "not linearizable"
    assert result.order == (0,)
    assert result.stuck == (1,)
    assert "TakenError" in result.reasons[0]
    assert not result


def test_two_overlapping_claims_that_both_win_are_not_linearizable() -> None:
    """Both claims won: whichever goes second should have raised TakenError."""
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0, 2),
        op(1, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=1), 1, 3),
    ]
    result = check(fresh(), history)
    assert result.verdict == "not linearizable"
    assert result.order == (0,)
    assert result.stuck == (1,)
    assert len(result.reasons) == 1
    assert "TakenError" in result.reasons[0]
    assert "claimed by 'a'" in result.reasons[0]


@pytest.mark.parametrize("winner_first", [True, False])
def test_overlapping_claims_one_winner_one_taken_are_linearizable(winner_first: bool) -> None:
    """One claim wins and the other raises TakenError, whichever was invoked first."""
    winner = op(0, claim("t1", "a"), won("t1", "a", "A"), 0 if winner_first else 1, 3)
    loser = op(1, claim("t1", "b"), raised("TakenError"), 1 if winner_first else 0, 2)
    result = check(fresh(), [winner, loser])
    assert result.verdict == "linearizable"
    assert result.order == (0, 1)


def expired_holder() -> BoardModel:
    """``t1`` claimed by ``old`` with token ``OLD`` whose lease expired a second ago."""
    return fresh(held("t1", "old", "OLD", 1, 1, until=NOW - timedelta(seconds=1)))


def test_stale_release_overlapping_a_takeover_is_linearizable_before_it() -> None:
    """The expired holder's release (SPEC 3.4) may take effect before the takeover."""
    history = [
        op(0, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=3), 0, 2),
        op(1, act(Op.RELEASE, "t1", "OLD"), OK, 1, 3),
    ]
    result = check(expired_holder(), history)
    assert result.verdict == "linearizable"
    assert result.order == (1, 0)


def test_stale_release_after_a_takeover_is_not_linearizable() -> None:
    """Invoked after the takeover returned, the stale release must fail: it succeeded."""
    history = [
        op(0, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=2), 0, 2),
        op(1, act(Op.RELEASE, "t1", "OLD"), OK, 3, 4),
    ]
    result = check(expired_holder(), history)
    assert result.verdict == "not linearizable"
    assert result.order == (0,)
    assert result.stuck == (1,)
    assert "LeaseLostError" in result.reasons[0]
    assert "earlier lease" in result.reasons[0]


def test_stale_complete_overlapping_a_successful_takeover_is_never_linearizable() -> None:
    """Completed first, the task is done and the takeover must fail; second, the complete must."""
    history = [
        op(0, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=2), 0, 2),
        op(1, act(Op.COMPLETE, "t1", "OLD"), OK, 1, 3),
    ]
    result = check(expired_holder(), history)
    assert result.verdict == "not linearizable"
    assert result.stuck == (1,)


def test_stale_complete_with_a_terminal_claim_depends_on_the_order() -> None:
    """A claim that saw the task done is fine only if the stale complete can go first."""
    complete = op(1, act(Op.COMPLETE, "t1", "OLD"), OK, 1, 3)
    taken = op(0, claim("t1", "b"), raised("TerminalError"), 0, 2)
    assert check(expired_holder(), [taken, complete]).verdict == "linearizable"
    late = dataclasses.replace(complete, invoked=2.5, returned=3)
    result = check(expired_holder(), [taken, late])
    assert result.verdict == "not linearizable"
    assert result.stuck == (0,)
    assert "TerminalError" in str(result.reasons)


def test_two_completes_with_one_token_both_succeeding_are_not_linearizable() -> None:
    """Duplicate token submit: only one complete may win."""
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0),
        op(1, act(Op.COMPLETE, "t1", "A"), OK, 2, 4, thread=1),
        op(2, act(Op.COMPLETE, "t1", "A"), OK, 3, 5, thread=2),
    ]
    result = check(fresh(), history)
    assert result.verdict == "not linearizable"
    assert result.order == (0, 1)
    assert result.stuck == (2,)
    assert "LeaseLostError" in result.reasons[0]


def test_real_time_order_is_respected() -> None:
    """A call that returned before another was invoked cannot be reordered after it."""
    taken = op(0, claim("t1", "a"), raised("TakenError"), 0, 1)
    winner = op(1, claim("t1", "b"), won("t1", "b", "B"), 2, 3)
    result = check(fresh(), [taken, winner])
    assert result.verdict == "not linearizable"
    assert result.order == ()
    assert result.stuck == (0,)
    overlapping = dataclasses.replace(winner, invoked=0.5)
    assert check(fresh(), [taken, overlapping]).order == (1, 0)


def test_touching_intervals_are_concurrent() -> None:
    """Precedence is strict: a call invoked exactly when another returned overlaps it."""
    taken = op(0, claim("t1", "a"), raised("TakenError"), 0, 1)
    winner = op(1, claim("t1", "b"), won("t1", "b", "B"), 1, 2)
    assert check(fresh(), [taken, winner]).order == (1, 0)


@pytest.mark.parametrize("ending", [Op.RELEASE, Op.COMPLETE, Op.FAIL])
@pytest.mark.parametrize("accepted", [True, False])
def test_spec_3_4_either_answer_is_linearizable(ending: Op, accepted: bool) -> None:
    """The current token of an expired lease: success and LeaseLostError are both allowed."""
    outcome = OK if accepted else raised("LeaseLostError")
    history = [op(0, act(ending, "t1", "OLD"), outcome, 0)]
    assert check(expired_holder(), history).verdict == "linearizable"


def test_spec_3_4_pinned_by_the_model_policy() -> None:
    """A model pinned to reject turns an accepted stale release into a violation."""
    model = BoardModel.start(
        [held("t1", "old", "OLD", 1, 1, until=NOW - timedelta(seconds=1))], policy="reject"
    )
    result = check(model, [op(0, act(Op.RELEASE, "t1", "OLD"), OK, 0)])
    assert result.verdict == "not linearizable"
    assert "SPEC 3.4" in result.reasons[0]


def test_spec_3_4_two_overlapping_releases_of_an_expired_lease() -> None:
    """One stale release wins under SPEC 3.4, the other then finds the task open."""
    history = [
        op(0, act(Op.RELEASE, "t1", "OLD"), raised("LeaseLostError"), 0, 2),
        op(1, act(Op.RELEASE, "t1", "OLD"), OK, 1, 3),
    ]
    assert check(expired_holder(), history).verdict == "linearizable"


# -- ambiguous operations ------------------------------------------------------------------------


def claimed_then_ambiguous_release() -> list[Operation]:
    """``a`` claims t1, then its release times out."""
    return [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0),
        op(1, act(Op.RELEASE, "t1", "A"), None, 2),
    ]


def test_timed_out_release_that_the_final_snapshot_shows_applied() -> None:
    """The final snapshot shows t1 open: the release took effect."""
    final = [Task("t1", seq=2)]
    result = check(fresh(), claimed_then_ambiguous_release(), final)
    assert result.verdict == "linearizable"
    assert result.order == (0, 1)


def test_timed_out_release_that_the_final_snapshot_shows_not_applied() -> None:
    """The final snapshot still shows a's lease: the release never happened."""
    final = [held("t1", "a", "A", 1, 1)]
    result = check(fresh(), claimed_then_ambiguous_release(), final)
    assert result.verdict == "linearizable"
    assert result.order == (0,)


def test_timed_out_release_with_an_impossible_final_snapshot() -> None:
    """Neither applying nor skipping the release explains a done task."""
    final = [Task("t1", state=State.DONE, seq=2)]
    result = check(fresh(), claimed_then_ambiguous_release(), final)
    assert result.verdict == "not linearizable"
    assert result.stuck == ()
    assert result.reasons[0].startswith("the final snapshot:")


def test_timed_out_release_explains_a_later_claim() -> None:
    """A claim that won after the release was invoked needs the release applied."""
    history = [
        *claimed_then_ambiguous_release(),
        op(2, claim("t1", "b"), won("t1", "b", "B", fence=2, seq=3), 3),
    ]
    assert check(fresh(), history).order == (0, 1, 2)


def test_timed_out_claim_explains_a_taken_error_without_final_snapshot() -> None:
    """A claim that may have taken effect holds the task with a lease nobody saw."""
    history = [
        op(0, claim("t1", "a"), None, 0),
        op(1, claim("t1", "b"), raised("TakenError"), 1),
    ]
    assert check(fresh(), history).order == (0, 1)


def test_timed_out_claim_as_the_final_snapshot_shows_it() -> None:
    """The final snapshot shows the lease the timed-out claim got."""
    history = [
        op(0, claim("t1", "a", TTL), None, 0),
        op(1, claim("t1", "b"), raised("TakenError"), 1),
    ]
    final = [held("t1", "a", "UNSEEN", 7, 4, until=NOW + TTL)]
    assert check(fresh(), history, final).order == (0, 1)
    result = check(fresh(), history, [Task("t1")])
    assert result.verdict == "not linearizable"
    assert result.stuck == (1,)


def test_timed_out_claim_cannot_reuse_a_token_someone_else_got() -> None:
    """The final snapshot's token was returned to another claim: not the timed-out one's."""
    history = [
        op(0, claim("t1", "a"), None, 0),
        op(1, claim("t2", "b"), won("t2", "b", "B"), 0),
    ]
    final = [held("t1", "a", "B", 1, 1), held("t2", "b", "B", 1, 1)]
    result = check(fresh(Task("t1"), Task("t2")), history, final)
    assert result.verdict == "not linearizable"


def test_timed_out_renew_as_the_final_snapshot_shows_it() -> None:
    """A renew that timed out is applied when the final snapshot shows its new until."""
    history = [
        op(0, claim("t1", "a", TTL), won("t1", "a", "A", until=NOW + TTL), 0),
        op(1, act(Op.RENEW, "t1", "A", 2 * TTL), None, 2),
    ]
    renewed = [held("t1", "a", "A", 1, 5, until=NOW + 2 * TTL)]
    assert check(fresh(), history, renewed).order == (0, 1)
    as_claimed = [held("t1", "a", "A", 1, 1, until=NOW + TTL)]
    assert check(fresh(), history, as_claimed).order == (0,)


ambiguous_calls = st.builds(
    lambda kind, task, who, ttl: (
        claim(task, who, ttl) if kind is Op.CLAIM else act(kind, task, who.upper(), ttl)
    ),
    st.sampled_from(Op),
    st.sampled_from(["t1", "t2", "t3", "nope"]),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from([ZERO, TTL]),
)


@given(st.lists(st.tuples(ambiguous_calls, st.floats(0, 20)), max_size=6))
def test_ambiguous_operations_never_make_a_history_fail_on_their_own(
    extra: list[tuple[Call, float]],
) -> None:
    """Timed-out calls added anywhere to a linearizable history keep it linearizable."""
    base = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0, 2),
        op(1, claim("t1", "b"), raised("TakenError"), 1, 3),
        op(2, claim("t2", "b", TTL), won("t2", "b", "B", until=NOW + TTL), 4, 6),
        op(3, act(Op.RELEASE, "t1", "A"), OK, 5, 8),
        op(4, claim("t3", "c"), raised("BlockedError"), 7, 9),
        op(5, act(Op.COMPLETE, "t2", "B"), OK, 10, 12),
    ]
    history = base + [op(6 + k, call, None, at) for k, (call, at) in enumerate(extra)]
    model = fresh(Task("t1"), Task("t2"), Task("t3", deps=("t2",)))
    assert check(model, history).verdict == "linearizable"


# -- the final snapshot --------------------------------------------------------------------------


def test_final_snapshot_mismatch_fails_an_otherwise_fine_history() -> None:
    """Every order ends with a's lease, but the final snapshot shows b's."""
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0, 2),
        op(1, claim("t1", "b"), raised("TakenError"), 1, 3),
    ]
    assert check(fresh(), history, [held("t1", "a", "A", 1, 1)]).verdict == "linearizable"
    result = check(fresh(), history, [held("t1", "b", "A", 1, 1)])
    assert result.verdict == "not linearizable"
    assert result.order == (0, 1)
    assert result.stuck == ()
    assert "owner='b'" in result.reasons[0]


def test_final_snapshot_missing_a_task_is_not_linearizable() -> None:
    """A snapshot that lists other tasks than the board has fails before any search."""
    history = [op(0, claim("t1", "a"), won("t1", "a", "A"), 0)]
    result = check(fresh(Task("t1"), Task("t2")), history, [held("t1", "a", "A", 1, 1)])
    assert result.verdict == "not linearizable"
    assert result.explored == 0
    assert "SPEC 3.7" in result.reasons[0]


# -- partitions ----------------------------------------------------------------------------------


def test_cross_partition_duplicate_token_is_caught() -> None:
    """Independent tasks are checked apart, but a token may still be issued only once."""
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "SAME"), 0, 2),
        op(1, claim("t2", "b"), won("t2", "b", "SAME"), 1, 3),
    ]
    model = fresh(Task("t1"), Task("t2"))
    result = check_history(model, history, NOW)
    assert result.verdict == "not linearizable"
    assert result.stuck == (1,)
    assert "'SAME'" in result.reasons[0]
    assert "never issued before" in result.reasons[0]
    assert check_history(model, history, NOW, partition=False).verdict == "not linearizable"


def test_token_issued_before_the_history_is_caught_in_a_partition() -> None:
    """A claim returning a token another task held before the concurrent part is stale."""
    model = fresh(held("t1", "a", "OLD", 1, 1), Task("t2"))
    history = [op(0, claim("t2", "b"), won("t2", "b", "OLD"), 0)]
    result = check(model, history)
    assert result.verdict == "not linearizable"
    assert "already issued" in result.reasons[0]


def test_dependencies_tie_tasks_into_one_partition() -> None:
    """A claim that saw its dependency done must follow the complete, across tasks."""
    model = fresh(held("t1", "a", "A", 1, 1), Task("t2", deps=("t1",)))
    history = [
        op(0, claim("t2", "b"), won("t2", "b", "B", deps=("t1",)), 0, 1),
        op(1, act(Op.COMPLETE, "t1", "A"), OK, 2, 3),
    ]
    result = check(model, history)
    assert result.verdict == "not linearizable"
    assert "BlockedError" in result.reasons[0]


def test_operations_on_unknown_tasks_form_their_own_partition() -> None:
    """An id the board does not have is NotFoundError, whatever else runs."""
    history = [
        op(0, claim("nope", "a"), raised("NotFoundError"), 0),
        op(1, claim("t1", "a"), won("t1", "a", "A"), 0),
    ]
    assert check(fresh(), history).verdict == "linearizable"
    wrong = [op(0, act(Op.RELEASE, "nope", "A"), OK, 0)]
    result = check(fresh(), wrong)
    assert result.verdict == "not linearizable"
    assert "NotFoundError" in result.reasons[0]


def test_partition_witnesses_merge_in_real_time() -> None:
    """The merged witness keeps cross-partition real-time order."""
    model = fresh(Task("t1"), Task("t2"))
    history = [
        op(0, claim("t1", "a"), won("t1", "a", "A"), 0, 1),
        op(1, claim("t2", "b"), won("t2", "b", "B"), 2, 3),
        op(2, act(Op.RELEASE, "t1", "A"), OK, 4, 5),
        op(3, act(Op.RELEASE, "t2", "B"), OK, 4.5, 6),
    ]
    random.Random(0).shuffle(history)
    assert check(model, history).order == (0, 1, 2, 3)


class Sim:
    """A correct in-memory board at a fixed now, small enough to trust by reading."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.fences = dict.fromkeys(self.tasks, 0)
        self.tokens: list[str] = []

    def run(self, call: Call) -> Outcome:
        """Apply ``call`` atomically; return what its caller sees."""
        task = self.tasks.get(call.task_id)
        if task is None:
            return raised("NotFoundError")
        until = NOW + call.ttl if call.ttl else None
        if call.op is Op.CLAIM:
            if task.state is State.DONE:
                return raised("TerminalError")
            if any(self.tasks[d].state is not State.DONE for d in task.deps):
                return raised("BlockedError")
            if task.state is State.CLAIMED:
                return raised("TakenError")
            self.fences[task.id] += 1
            token = f"tok{len(self.tokens)}"
            self.tokens.append(token)
            return self.store(
                task, State.CLAIMED, call.agent, Lease(token, self.fences[task.id], until)
            )
        if task.lease is None or task.lease.token != call.token:
            return raised("LeaseLostError")
        if call.op is Op.RENEW:
            lease = dataclasses.replace(task.lease, until=until)
            return self.store(task, State.CLAIMED, task.owner, lease)
        after = {Op.RELEASE: State.OPEN, Op.COMPLETE: State.DONE, Op.FAIL: State.FAILED}
        self.store(task, after[call.op], "", None)
        return OK

    def store(self, task: Task, state: State, owner: str, lease: Lease | None) -> Outcome:
        """Write the task back with a grown seq and return it."""
        new = dataclasses.replace(task, state=state, owner=owner, lease=lease, seq=task.seq + 1)
        self.tasks[task.id] = new
        return Outcome(task=new)


SIM_TASKS = (Task("t1"), Task("t2", deps=("t1",)), Task("t3"), Task("t4"))


@dataclass(frozen=True)
class Plan:
    """One call to make: which, on what, when it runs, where inside that it takes effect."""

    op: Op
    task: str
    agent: str
    token: int  # which usable token (by index) a release/complete/fail/renew passes
    ttl: timedelta
    invoked: int
    length: int
    point: float  # where in [invoked, invoked + length] it takes effect, as a fraction
    ambiguous: bool  # whether its caller never learns the outcome


plans = st.lists(
    st.builds(
        Plan,
        st.sampled_from(Op),
        st.sampled_from(["t1", "t2", "t3", "t4", "nope"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 5),
        st.sampled_from([ZERO, TTL]),
        st.integers(0, 12),
        st.integers(0, 4),
        st.floats(0, 1),
        st.booleans(),
    ),
    max_size=7,
)


def simulate(plans: list[Plan], ambiguous: bool) -> tuple[list[Operation], list[Task]]:
    """Run the planned calls against :class:`Sim` at their points in time; record a history."""
    sim = Sim(SIM_TASKS)
    schedule = sorted(
        range(len(plans)), key=lambda i: plans[i].invoked + plans[i].length * plans[i].point
    )
    history: dict[int, Operation] = {}
    hidden: set[str] = set()  # tokens only an ambiguous claim got: nobody can use them
    for i in schedule:
        plan = plans[i]
        usable = [t for t in sim.tokens if t not in hidden]
        token = usable[plan.token % len(usable)] if usable else "none"
        call = Call(plan.op, plan.task, agent=plan.agent, token=token, ttl=plan.ttl)
        outcome: Outcome | None = sim.run(call)
        returned = float(plan.invoked + plan.length)
        if ambiguous and plan.ambiguous:
            assert outcome is not None
            if plan.op is Op.CLAIM and outcome.task is not None and outcome.task.lease is not None:
                hidden.add(outcome.task.lease.token)
            outcome, returned = None, math.inf
        history[i] = Operation(i, i % 3, call, outcome, float(plan.invoked), returned)
    return [history[i] for i in range(len(plans))], list(sim.tasks.values())


def corrupt(history: list[Operation], which: int, how: int) -> list[Operation]:
    """Change one definite outcome: flip success and failure, or reuse a token."""
    definite = [k for k, o in enumerate(history) if o.outcome is not None]
    if not definite:
        return history
    k = definite[which % len(definite)]
    victim = history[k]
    assert victim.outcome is not None
    call = victim.call
    if victim.outcome.ok and how % 2 == 0:
        error = "TakenError" if call.op is Op.CLAIM else "LeaseLostError"
        outcome = raised(error)
    elif call.op in (Op.CLAIM, Op.RENEW):
        tokens = [
            o.outcome.task.lease.token
            for o in history
            if o.outcome and o.outcome.task and o.outcome.task.lease
        ]
        token = tokens[how % len(tokens)] if tokens and how % 3 else "forged"
        deps = next((t.deps for t in SIM_TASKS if t.id == call.task_id), ())
        until = NOW + call.ttl if call.ttl else None
        outcome = won(
            call.task_id, call.agent or "a", token, fence=9, seq=9, until=until, deps=deps
        )
    else:
        outcome = OK
    return [*history[:k], dataclasses.replace(victim, outcome=outcome), *history[k + 1 :]]


@given(
    plans,
    st.booleans(),
    st.booleans(),
    st.none() | st.tuples(st.integers(0, 6), st.integers(0, 5)),
)
def test_partitioning_agrees_with_the_whole_search(
    planned: list[Plan],
    ambiguous: bool,
    with_final: bool,
    corruption: tuple[int, int] | None,
) -> None:
    """Random small histories: the same verdict with and without partitions; valid ones pass."""
    history, final_tasks = simulate(planned, ambiguous)
    if corruption is not None:
        history = corrupt(history, *corruption)
    final = final_tasks if with_final else None
    result = check(BoardModel.start(SIM_TASKS), history, final, budget=60.0)
    assert result.verdict != "unknown"
    if corruption is None:
        assert result.verdict == "linearizable", result


# -- limits --------------------------------------------------------------------------------------


def test_budget_exhaustion_gives_unknown() -> None:
    """A search that cannot finish in time answers unknown, never linearizable."""
    # Every task depends on one done task, so all of them fall into one partition.
    hub = ("hub",)
    tasks = [Task("hub", state=State.DONE), *(Task(f"t{i}", deps=hub) for i in range(12))]
    history = [op(k, claim(f"t{k % 12}", f"a{k}"), None, k * 0.01) for k in range(60)]
    # Two winners of one task at the very end: no order works, but proving it takes long.
    history.append(op(60, claim("t0", "x"), won("t0", "x", "X", deps=hub), 10, 11))
    history.append(op(61, claim("t0", "y"), won("t0", "y", "Y", fence=2, deps=hub), 10, 11))
    model = BoardModel.start(tasks)
    for partition in (True, False):
        result = check_history(model, history, NOW, budget=0.05, partition=partition)
        assert result.verdict == "unknown"
        assert not result
        assert result.stuck == ()


def test_ten_thousand_operations_need_no_recursion() -> None:
    """A long history is searched with an explicit stack."""
    history = [op(0, claim("t1", "a"), won("t1", "a", "A"), 0)]
    for k in range(1, 9_999):
        history.append(op(k, act(Op.RENEW, "t1", "A"), won("t1", "a", "A", seq=k + 1), 2 * k))
    history.append(op(9_999, act(Op.RELEASE, "t1", "A"), OK, 20_000))
    result = check_history(fresh(), history, NOW, final_snapshot=[Task("t1", seq=10_001)])
    assert result.verdict == "linearizable"
    assert result.order == tuple(range(10_000))


def test_malformed_histories_are_rejected() -> None:
    """Duplicate ids and definite calls that return before they start raise ValueError."""
    call = claim("t1", "a")
    with pytest.raises(ValueError, match="unique"):
        check_history(fresh(), [op(0, call, OK, 0), op(0, call, OK, 2)], NOW)
    with pytest.raises(ValueError, match="returned at"):
        check_history(fresh(), [op(0, call, OK, 2, 1)], NOW)
    with pytest.raises(ValueError, match="invocation time"):
        check_history(fresh(), [op(0, call, OK, math.nan, 1)], NOW)


def test_the_model_is_not_changed_by_checking() -> None:
    """The checker only reads the model it starts from."""
    model = fresh()
    check(model, [op(0, claim("t1", "a"), won("t1", "a", "A"), 0)])
    assert model == fresh()
    with pytest.raises(ContractViolation):
        model.advance(claim("t1", "a"), NOW, raised("TakenError"))
