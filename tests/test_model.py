"""The reference model alone against SPEC sections 2 and 3: hand-made outcomes, no board."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from taskboard import (
    BlockedError,
    Lease,
    LeaseLostError,
    NotFoundError,
    State,
    TakenError,
    Task,
    TerminalError,
)
from taskboard.model import (
    Allowed,
    BoardModel,
    Call,
    ContractViolation,
    Op,
    Outcome,
    format_duration,
    is_live,
    readable_duration,
)
from taskboard.model._returns import check_until

START = datetime(2000, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
MS = timedelta(milliseconds=1)
TTL = timedelta(seconds=10)
TOKEN_OPS = (Op.RELEASE, Op.COMPLETE, Op.FAIL, Op.RENEW)
ENDING_OPS = (Op.RELEASE, Op.COMPLETE, Op.FAIL)
AFTER = {Op.RELEASE: State.OPEN, Op.COMPLETE: State.DONE, Op.FAIL: State.FAILED}
CLAUSE = {
    Op.RELEASE: "SPEC 3.2",
    Op.COMPLETE: "SPEC 3.3",
    Op.FAIL: "SPEC 3.6",
    Op.RENEW: "SPEC 3.5",
}


# -- helpers -----------------------------------------------------------------------------------


def fresh(*tasks: Task, **kwargs: object) -> BoardModel:
    """A model of a board holding ``tasks`` (default: one open task ``t``), first snapshot seen."""
    model = BoardModel.start(tasks or (Task("t"),), **kwargs)  # type: ignore[arg-type]
    return model.reconcile(model.tasks)


def claimed_task(
    model: BoardModel,
    task_id: str,
    agent: str,
    now: datetime,
    *,
    token: str,
    fence: int,
    ttl: timedelta = timedelta(0),
    seq: int | None = None,
) -> Task:
    """The task a correct board returns from this claim."""
    old = model.task(task_id)
    assert old is not None
    until = None if ttl == timedelta(0) else now + ttl
    return dataclasses.replace(
        old,
        state=State.CLAIMED,
        owner=agent,
        lease=Lease(token, fence, until),
        seq=old.seq + 1 if seq is None else seq,
    )


def claim(
    model: BoardModel,
    task_id: str = "t",
    agent: str = "a1",
    now: datetime = START,
    *,
    token: str = "tok1",
    fence: int = 1,
    ttl: timedelta = timedelta(0),
) -> BoardModel:
    """Advance the model on a successful claim, as a correct board would report it."""
    got = claimed_task(model, task_id, agent, now, token=token, fence=fence, ttl=ttl)
    return model.advance(Call(Op.CLAIM, task_id, agent=agent, ttl=ttl), now, Outcome.returned(got))


def act(
    model: BoardModel,
    op: Op,
    token: str,
    now: datetime = START,
    task_id: str = "t",
    outcome: Outcome | None = None,
) -> BoardModel:
    """Advance the model on a release/complete/fail that returned None (or on ``outcome``)."""
    result = Outcome.returned(None) if outcome is None else outcome
    return model.advance(Call(op, task_id, token=token), now, result)


def snapshot(model: BoardModel, **seqs: int) -> list[Task]:
    """The snapshot the model predicts, with the given tasks' seq replaced."""
    return [dataclasses.replace(t, seq=seqs.get(t.id, t.seq)) for t in model.tasks]


def errors(allowed: Sequence[Allowed]) -> list[str | None]:
    return [a.error for a in allowed]


def violation(fn: object, *args: object, **kwargs: object) -> ContractViolation:
    with pytest.raises(ContractViolation) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    return info.value


def same(after: BoardModel, before: BoardModel) -> bool:
    """True when ``after`` predicts the same board as ``before`` (tasks, seqs, issued leases)."""
    return after.tasks == before.tasks and after.issued == before.issued


# -- SPEC 2: time ------------------------------------------------------------------------------


def test_live_iff_until_none_or_now_before_until() -> None:
    """SPEC 2: a lease is live iff until is None or now < until; at exactly until it expired."""
    until = START + TTL
    assert is_live(Lease("x", 1, None), START + timedelta(days=9999))
    assert is_live(Lease("x", 1, until), until - US)
    assert not is_live(Lease("x", 1, until), until)
    assert not is_live(Lease("x", 1, until), until + US)
    assert not is_live(None, START)


def test_naive_until_is_read_as_utc() -> None:
    """SPEC 2: a naive until read back from storage is compared as UTC, not rejected."""
    naive = (START + TTL).replace(tzinfo=None)
    assert is_live(Lease("x", 1, naive), START + TTL - US)
    assert not is_live(Lease("x", 1, naive), START + TTL)


def test_zero_ttl_means_until_none() -> None:
    """SPEC 2: a claim with ttl 0 must return until=None, a lease that never expires."""
    model = fresh()
    call = Call(Op.CLAIM, "t", agent="a1", ttl=timedelta(0))
    bad = claimed_task(model, "t", "a1", START, token="k", fence=1)
    bad = dataclasses.replace(bad, lease=Lease("k", 1, START))
    v = violation(model.advance, call, START, Outcome.returned(bad))
    assert v.clause == "SPEC 3.1"
    assert "zero ttl" in v.expected
    after = claim(model, ttl=timedelta(0))
    assert after.expect(Call(Op.CLAIM, "t", agent="a2"), START + timedelta(days=9999))[0].error == (
        "TakenError"
    )


@pytest.mark.parametrize(
    ("resolution", "off", "accepted"),
    [
        (US, timedelta(0), True),
        (US, US, False),
        (US, -US, False),
        (MS, MS - US, True),
        (MS, -(MS - US), True),
        (MS, MS, False),
        (MS, -MS, False),
    ],
)
def test_until_is_now_plus_ttl_within_resolution(
    resolution: timedelta, off: timedelta, accepted: bool
) -> None:
    """SPEC 2: until = now + ttl; off by less than `resolution` is accepted, by it or more not."""
    model = fresh(resolution=resolution)
    call = Call(Op.CLAIM, "t", agent="a1", ttl=TTL)
    got = claimed_task(model, "t", "a1", START, token="k", fence=1, ttl=TTL)
    assert got.lease is not None
    got = dataclasses.replace(got, lease=dataclasses.replace(got.lease, until=START + TTL + off))
    if accepted:
        after = model.advance(call, START, Outcome.returned(got))
        assert after.reconcile([got]).task("t") is not None
    else:
        v = violation(model.advance, call, START, Outcome.returned(got))
        assert v.clause == "SPEC 3.1"
        assert "resolution" in v.expected


def test_positive_ttl_requires_an_until() -> None:
    """SPEC 2: ttl > 0 must give an until, not a lease that never expires."""
    model = fresh()
    got = claimed_task(model, "t", "a1", START, token="k", fence=1)  # until=None
    v = violation(model.advance, Call(Op.CLAIM, "t", agent="a1", ttl=TTL), START, Outcome(task=got))
    assert v.clause == "SPEC 3.1"


def test_liveness_is_judged_at_the_exact_now_plus_ttl() -> None:
    """SPEC 2: an until accepted within resolution still expires at exactly now + ttl."""
    model = fresh(resolution=MS)
    got = claimed_task(model, "t", "a1", START, token="k", fence=1, ttl=TTL)
    rounded_up = dataclasses.replace(got, lease=Lease("k", 1, START + TTL + 400 * US))
    model = model.advance(
        Call(Op.CLAIM, "t", agent="a1", ttl=TTL), START, Outcome.returned(rounded_up)
    )
    # A board that rounded the boundary up would still call the lease live here: it is not.
    assert errors(model.expect(Call(Op.CLAIM, "t", agent="a2"), START + TTL)) == [None]
    assert errors(model.expect(Call(Op.CLAIM, "t", agent="a2"), START + TTL - MS)) == ["TakenError"]


@pytest.mark.parametrize("rounded", [timedelta(0), MS], ids=["down", "up"])
def test_a_ttl_below_the_resolution_ends_where_the_board_rounded_it(rounded: timedelta) -> None:
    """SPEC 2: a ttl the store cannot keep exactly (half its resolution) ends at the until the
    board rounded it to, down or up, not at the exact now + ttl."""
    model = fresh(resolution=MS)
    half = MS / 2
    got = claimed_task(model, "t", "a1", START, token="k", fence=1, ttl=half)
    got = dataclasses.replace(got, lease=Lease("k", 1, START + rounded))
    model = model.advance(Call(Op.CLAIM, "t", agent="a1", ttl=half), START, Outcome.returned(got))
    takeover = Call(Op.CLAIM, "t", agent="a2")
    assert errors(model.expect(takeover, START + rounded)) == [None]
    if rounded:
        assert errors(model.expect(takeover, START + half)) == ["TakenError"]


# -- SPEC 3: a rejected operation changes nothing ----------------------------------------------


@pytest.mark.parametrize(
    "changed",
    [
        {"seq": 1},
        {"state": State.CLAIMED},
        {"owner": "a1"},
        {"title": "renamed"},
        {"deps": ("t",)},
        {"lease": Lease("k", 1, None)},
    ],
)
def test_rejected_operation_changes_nothing(changed: dict[str, Any]) -> None:
    """SPEC 3: after a rejected op the snapshot must equal the one before, seq included."""
    model = fresh(Task("t", title="x"))
    after = act(model, Op.RELEASE, "nope", outcome=Outcome.raised(LeaseLostError()))
    assert after == model
    assert after.reconcile(model.tasks) == model
    v = violation(after.reconcile, [dataclasses.replace(model.tasks[0], **changed)])
    assert v.clause.startswith("SPEC 3 and 3.8")


def test_rejected_operation_on_a_claimed_task_keeps_its_lease() -> None:
    """SPEC 3: a TakenError claim leaves the holder's lease, owner and seq as they were."""
    model = claim(fresh())
    model = model.reconcile(model.tasks)
    after = model.advance(
        Call(Op.CLAIM, "t", agent="a2"), START, Outcome.raised(TakenError("held"))
    )
    assert after.reconcile(model.tasks).tasks == model.tasks
    v = violation(after.reconcile, [dataclasses.replace(model.tasks[0], owner="a2")])
    assert v.clause.startswith("SPEC 3 and 3.8")


# -- SPEC 3.1: claim, check order --------------------------------------------------------------


def test_claim_unknown_id_is_not_found_first() -> None:
    """SPEC 3.1 step 1: an unknown id is NotFoundError, even with an empty agent."""
    model = fresh()
    allowed = model.expect(Call(Op.CLAIM, "zz", agent=""), START)
    assert errors(allowed) == ["NotFoundError"]
    assert allowed[0].clause == "SPEC 3.1"
    assert same(model.advance(Call(Op.CLAIM, "zz"), START, Outcome.raised(NotFoundError())), model)


@pytest.mark.parametrize("op", TOKEN_OPS)
def test_token_ops_on_unknown_id_are_not_found(op: Op) -> None:
    """SPEC 3.2/3.3/3.5/3.6: every token operation on an unknown id is NotFoundError."""
    model = claim(fresh())
    assert errors(model.expect(Call(op, "zz", token="tok1"), START)) == ["NotFoundError"]
    v = violation(act, model, op, "tok1", START, "zz", Outcome.raised(LeaseLostError()))
    assert "NotFoundError" in v.expected


def test_claim_terminal_before_blocked_and_empty_agent() -> None:
    """SPEC 3.1 step 2: a DONE task is TerminalError even with open deps and an empty agent."""
    model = fresh(Task("d"), Task("t", deps=("d",), state=State.DONE))
    allowed = model.expect(Call(Op.CLAIM, "t", agent=""), START)
    assert errors(allowed) == ["TerminalError"]
    assert allowed[0].clause == "SPEC 3.1 step 2"
    v = violation(model.advance, Call(Op.CLAIM, "t"), START, Outcome.raised(BlockedError()))
    assert v.clause == "SPEC 3.1 step 2"


@pytest.mark.parametrize("dep_state", [State.OPEN, State.CLAIMED, State.FAILED])
def test_claim_blocked_by_any_dep_not_done(dep_state: State) -> None:
    """SPEC 3.1 step 3: a dependency not DONE (FAILED included) is BlockedError."""
    lease = Lease("d-tok", 1, None) if dep_state is State.CLAIMED else None
    owner = "x" if lease else ""
    model = fresh(Task("d", state=dep_state, owner=owner, lease=lease), Task("t", deps=("d",)))
    allowed = model.expect(Call(Op.CLAIM, "t", agent="a1"), START)
    assert errors(allowed) == ["BlockedError"]
    assert allowed[0].clause == "SPEC 3.1 step 3"
    assert f"is {dep_state}" in allowed[0].reason
    v = violation(claim, model)
    assert v.clause == "SPEC 3.1 step 3"


def test_claim_with_done_deps_succeeds() -> None:
    """SPEC 3.1: a task whose dependencies are all DONE can be claimed."""
    model = fresh(Task("d", state=State.DONE), Task("t", deps=("d",)))
    assert errors(model.expect(Call(Op.CLAIM, "t", agent="a1"), START)) == [None]
    assert claim(model).task("t").state is State.CLAIMED  # type: ignore[union-attr]


def test_claim_blocked_before_taken() -> None:
    """SPEC 3.1 step 3 before 4: a live-claimed task with an open dependency is BlockedError."""
    held = Task("t", deps=("d",), state=State.CLAIMED, owner="x", lease=Lease("k", 1, None))
    model = fresh(Task("d"), held)
    assert errors(model.expect(Call(Op.CLAIM, "t", agent="a1"), START)) == ["BlockedError"]


@pytest.mark.parametrize("agent", ["a2", "a1", ""])
def test_claim_of_live_lease_is_taken(agent: str) -> None:
    """SPEC 3.1 step 4: a live lease is TakenError, for the same agent name and before step 5."""
    model = claim(fresh(), ttl=TTL)
    allowed = model.expect(Call(Op.CLAIM, "t", agent=agent), START + TTL - US)
    assert errors(allowed) == ["TakenError"]
    assert allowed[0].clause == "SPEC 3.1 step 4"
    assert ("same agent name" in allowed[0].reason) == (agent == "a1")
    got = claimed_task(model, "t", agent, START, token="tok2", fence=2)
    v = violation(model.advance, Call(Op.CLAIM, "t", agent=agent), START, Outcome.returned(got))
    assert v.clause == "SPEC 3.1 step 4"


def test_claim_with_empty_agent_is_value_error_last() -> None:
    """SPEC 3.1 step 5: an empty agent is ValueError, only once steps 1-4 pass."""
    model = fresh()
    allowed = model.expect(Call(Op.CLAIM, "t", agent=""), START)
    assert errors(allowed) == ["ValueError"]
    assert allowed[0].clause == "SPEC 3.1 step 5"
    assert same(
        model.advance(Call(Op.CLAIM, "t"), START, Outcome.raised(ValueError("empty"))), model
    )
    got = claimed_task(model, "t", "", START, token="k", fence=1)
    v = violation(model.advance, Call(Op.CLAIM, "t", agent=""), START, Outcome.returned(got))
    assert v.clause == "SPEC 3.1 step 5"


def test_claim_of_open_task_may_not_fail() -> None:
    """SPEC 3.1: claiming an OPEN task with done deps must succeed; an error is a violation."""
    model = fresh()
    for exc in (TakenError(), ValueError(), BlockedError(), TerminalError(), NotFoundError()):
        v = violation(model.advance, Call(Op.CLAIM, "t", agent="a1"), START, Outcome.raised(exc))
        assert v.clause == "SPEC 3.1"


# -- SPEC 3.1: claim, what a success must return -----------------------------------------------


def claim_violation(model: BoardModel, **changes: Any) -> ContractViolation:
    """The violation raised when a claim of ``t`` by a1 returns a task with ``changes``."""
    got = claimed_task(model, "t", "a1", START, token="fresh", fence=99)
    got = dataclasses.replace(got, **changes)
    return violation(model.advance, Call(Op.CLAIM, "t", agent="a1"), START, Outcome.returned(got))


def test_claim_success_adopts_what_the_board_returned() -> None:
    """SPEC 3.1: a claim sets CLAIMED, owner=agent, the board's token/fence, and seq grows."""
    model = fresh(Task("t", title="x", deps=()), Task("u"))
    after = claim(model, token="minted", fence=7, ttl=TTL)
    task = after.task("t")
    assert task == Task("t", "x", (), State.CLAIMED, "a1", Lease("minted", 7, START + TTL), 1)
    assert after.lease_of("minted") is not None
    after.reconcile(after.tasks)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"state": State.OPEN}, "CLAIMED"),
        ({"owner": "a2"}, "owner 'a1'"),
        ({"owner": ""}, "owner 'a1'"),
        ({"lease": None}, "new lease"),
        ({"lease": Lease("", 99, None)}, "non-empty token"),
        ({"lease": Lease("fresh", "2", None)}, "integer fence"),  # type: ignore[arg-type]
        ({"title": "renamed"}, "title"),
        ({"deps": ("u",)}, "deps"),
        ({"id": "u"}, "the task 't'"),
    ],
)
def test_claim_success_must_return_the_claimed_task(changes: dict[str, Any], expected: str) -> None:
    """SPEC 3.1: the returned task is CLAIMED by the agent, with a token, title/deps unchanged."""
    v = claim_violation(fresh(Task("t", title="x"), Task("u")), **changes)
    assert v.clause == "SPEC 3.1"
    assert expected in v.expected


def test_claim_must_return_a_task() -> None:
    """SPEC 3.1: a successful claim returns the task, not None."""
    model = fresh()
    v = violation(model.advance, Call(Op.CLAIM, "t", agent="a1"), START, Outcome.returned(None))
    assert v.clause == "SPEC 3.1"
    assert v.observed == "returned no Task"


@pytest.mark.parametrize("seq", [0, -1])
def test_claim_seq_must_grow(seq: int) -> None:
    """SPEC 3.1/3.8: the task a claim returns has a greater seq than last seen."""
    v = claim_violation(fresh(), seq=seq)
    assert v.clause == "SPEC 3.1, SPEC 3.8"


def test_claim_token_never_issued_before_for_any_task() -> None:
    """SPEC 3.1: a token issued before, for this task or another, is rejected."""
    model = fresh(Task("t"), Task("u"))
    model = claim(model, "u", token="used-on-u", fence=1)
    model = claim(model, "t", token="used-on-t", fence=1)
    model = act(model, Op.RELEASE, "used-on-t")
    for token in ("used-on-u", "used-on-t"):
        v = violation(claim, model, "t", "a2", START, token=token, fence=5)
        assert v.clause == "SPEC 3.1"
        assert "never issued before" in v.expected
    claim(model, "t", "a2", token="new", fence=5)


def test_claim_token_of_an_initial_lease_counts_as_issued() -> None:
    """SPEC 3.1: a token already held in the initial tasks is not fresh."""
    model = fresh(Task("u", state=State.CLAIMED, owner="x", lease=Lease("old", 1, None)), Task("t"))
    v = violation(claim, model, "t", token="old", fence=1)
    assert "never issued before" in v.expected


def test_fence_grows_across_release_complete_fail_and_takeover() -> None:
    """SPEC 3.1: each claim's fence exceeds every earlier fence of that task, whatever ended it."""
    model = claim(fresh(), token="k1", fence=0)  # the first value is free
    model = act(model, Op.RELEASE, "k1")
    for fence in (0, -1):
        v = violation(claim, model, token="k2", fence=fence)
        assert v.clause == "SPEC 3.1"
        assert "greater than every earlier fence" in v.expected
    model = claim(model, token="k2", fence=5, ttl=TTL)
    # Takeover after expiry: the fence must still grow.
    later = START + TTL
    assert violation(claim, model, "t", "a2", later, token="k3", fence=5).clause == "SPEC 3.1"
    model = claim(model, "t", "a2", later, token="k3", fence=6)
    model = act(model, Op.FAIL, "k3", later)
    assert violation(claim, model, "t", "a3", later, token="k4", fence=6).clause == "SPEC 3.1"
    assert claim(model, "t", "a3", later, token="k4", fence=7).task("t").lease.fence == 7  # type: ignore[union-attr]


def test_fence_of_an_initial_lease_bounds_the_next_claim() -> None:
    """SPEC 3.1: the fence of a lease present at start counts as issued for its task."""
    held = Task("t", state=State.CLAIMED, owner="x", lease=Lease("old", 4, START))
    model = fresh(held)
    assert violation(claim, model, token="k", fence=4).clause == "SPEC 3.1"
    claim(model, token="k", fence=5)


def test_takeover_after_expiry() -> None:
    """SPEC 3.1: a CLAIMED task whose lease expired (at exactly until) can be taken over."""
    model = claim(fresh(), token="k1", fence=1, ttl=TTL)
    allowed = model.expect(Call(Op.CLAIM, "t", agent="a2"), START + TTL)
    assert errors(allowed) == [None]
    assert allowed[0].reason.startswith("takeover:")
    model = claim(model, "t", "a2", START + TTL, token="k2", fence=2)
    assert model.task("t").owner == "a2"  # type: ignore[union-attr]
    # The stale holder's token no longer works, for any action.
    for op in TOKEN_OPS:
        assert errors(model.expect(Call(op, "t", token="k1"), START + TTL)) == ["LeaseLostError"]
        v = violation(act, model, op, "k1", START + TTL)
        assert v.clause == CLAUSE[op]
    assert "earlier lease" in model.expect(Call(Op.RELEASE, "t", token="k1"), START)[0].reason


# -- SPEC 3.2 / 3.3 / 3.6: release, complete, fail ---------------------------------------------


@pytest.mark.parametrize("op", ENDING_OPS)
def test_ending_op_with_the_current_token(op: Op) -> None:
    """SPEC 3.2/3.3/3.6: by the live token: state per op, owner and lease cleared, seq grows."""
    model = claim(fresh(Task("t"), Task("u")), ttl=TTL)
    model = model.reconcile(model.tasks)
    allowed = model.expect(Call(op, "t", token="tok1"), START)
    assert errors(allowed) == [None]
    after = act(model, op, "tok1")
    assert after.task("t") == Task("t", state=AFTER[op], seq=1)
    v = violation(after.reconcile, snapshot(after))
    assert v.clause == f"{CLAUSE[op]} ({op} took effect)"
    after.reconcile(snapshot(after, t=2))
    v = violation(after.reconcile, snapshot(after, t=2, u=1))
    assert v.clause.startswith("SPEC 3 and 3.8")


@pytest.mark.parametrize("op", ENDING_OPS)
def test_ending_op_rejects_wrong_token_or_unclaimed(op: Op) -> None:
    """SPEC 3.2/3.3/3.6: not CLAIMED or a token mismatch is LeaseLostError; success is a breach."""
    model = fresh(Task("t"), Task("u"))
    assert errors(model.expect(Call(op, "t", token="x"), START)) == ["LeaseLostError"]
    model = claim(model, "u", token="u-tok")
    model = claim(model, "t", token="t-tok")
    allowed = model.expect(Call(op, "t", token="u-tok"), START)
    assert errors(allowed) == ["LeaseLostError"]
    assert "belongs to task 'u'" in allowed[0].reason
    assert "never issued" in model.expect(Call(op, "t", token="x"), START)[0].reason
    assert same(act(model, op, "x", outcome=Outcome.raised(LeaseLostError())), model)
    v = violation(act, model, op, "u-tok")
    assert "LeaseLostError" in v.expected


def test_release_keeps_fence_history() -> None:
    """SPEC 3.2: after a release the next claim's fence is still greater."""
    model = act(claim(fresh(), token="k", fence=3), Op.RELEASE, "k")
    assert model.task("t") == Task("t", seq=1)  # seq as the claim returned it; must grow
    assert violation(claim, model, token="k2", fence=3).clause == "SPEC 3.1"


@pytest.mark.parametrize("op", TOKEN_OPS)
def test_complete_is_terminal(op: Op) -> None:
    """SPEC 3.3: after complete every claim is TerminalError and every token op LeaseLostError."""
    model = act(claim(fresh()), Op.COMPLETE, "tok1")
    assert errors(model.expect(Call(Op.CLAIM, "t", agent="a2"), START)) == ["TerminalError"]
    assert errors(model.expect(Call(op, "t", token="tok1"), START)) == ["LeaseLostError"]
    assert violation(claim, model, "t", "a2", token="k2", fence=2).clause == "SPEC 3.1 step 2"


def test_failed_task_can_be_claimed_again() -> None:
    """SPEC 3.6: FAILED is not terminal: a new claim succeeds, with a greater fence."""
    model = act(claim(fresh(), token="k1", fence=1), Op.FAIL, "k1")
    allowed = model.expect(Call(Op.CLAIM, "t", agent="a2"), START)
    assert errors(allowed) == [None]
    assert "failed and may be claimed again" in allowed[0].reason
    assert violation(claim, model, "t", "a2", token="k2", fence=1).clause == "SPEC 3.1"
    model = claim(model, "t", "a2", token="k2", fence=2)
    assert model.task("t").state is State.CLAIMED  # type: ignore[union-attr]


# -- SPEC 3.4: an expired lease nobody took over -----------------------------------------------


@pytest.mark.parametrize("op", ENDING_OPS)
def test_expired_current_token_either_policy(op: Op) -> None:
    """SPEC 3.4 [either]: expect() gives two Allowed; success and LeaseLostError both advance."""
    model = claim(fresh(), ttl=TTL)
    now = START + TTL  # exactly at until: expired
    allowed = model.expect(Call(op, "t", token="tok1"), now)
    assert len(allowed) == 2
    assert errors(allowed) == [None, "LeaseLostError"]
    assert {a.clause for a in allowed} == {"SPEC 3.4"}
    assert act(model, op, "tok1", now).task("t").state is AFTER[op]  # type: ignore[union-attr]
    assert same(act(model, op, "tok1", now, outcome=Outcome.raised(LeaseLostError())), model)


@pytest.mark.parametrize("op", ENDING_OPS)
def test_expired_current_token_accept_policy(op: Op) -> None:
    """SPEC 3.4: a host pinning "accept" must succeed; LeaseLostError is a violation."""
    model = claim(fresh(policy="accept"), ttl=TTL)
    now = START + TTL + MS
    assert errors(model.expect(Call(op, "t", token="tok1"), now)) == [None]
    act(model, op, "tok1", now)
    v = violation(act, model, op, "tok1", now, "t", Outcome.raised(LeaseLostError()))
    assert v.clause == "SPEC 3.4"


@pytest.mark.parametrize("op", ENDING_OPS)
def test_expired_current_token_reject_policy(op: Op) -> None:
    """SPEC 3.4: a host pinning "reject" must raise LeaseLostError; success is a violation."""
    model = claim(fresh(policy="reject"), ttl=TTL)
    now = START + TTL
    assert errors(model.expect(Call(op, "t", token="tok1"), now)) == ["LeaseLostError"]
    assert same(act(model, op, "tok1", now, outcome=Outcome.raised(LeaseLostError())), model)
    v = violation(act, model, op, "tok1", now)
    assert v.clause == "SPEC 3.4"


# -- SPEC 3.5: renew ---------------------------------------------------------------------------


def renew_result(model: BoardModel, now: datetime, ttl: timedelta, **changes: Any) -> Task:
    """The task a correct board returns from renewing ``t``, with ``changes`` applied."""
    old = model.task("t")
    assert old is not None
    assert old.lease is not None
    until = None if ttl == timedelta(0) else now + ttl
    task = dataclasses.replace(
        old, lease=dataclasses.replace(old.lease, until=until), seq=old.seq + 1
    )
    return dataclasses.replace(task, **changes)


def renew(model: BoardModel, now: datetime, ttl: timedelta, got: Task) -> BoardModel:
    return model.advance(Call(Op.RENEW, "t", token="tok1", ttl=ttl), now, Outcome.returned(got))


@pytest.mark.parametrize("policy", ["either", "accept", "reject"])
def test_renew_rejects_not_claimed_mismatch_and_expired(policy: str) -> None:
    """SPEC 3.5: not CLAIMED, token mismatch, or expired (at exactly until) is LeaseLostError."""
    model = fresh(policy=policy)
    assert errors(model.expect(Call(Op.RENEW, "t", token="tok1"), START)) == ["LeaseLostError"]
    model = claim(model, ttl=TTL)
    assert errors(model.expect(Call(Op.RENEW, "t", token="other"), START)) == ["LeaseLostError"]
    for now in (START + TTL, START + TTL + MS):
        allowed = model.expect(Call(Op.RENEW, "t", token="tok1", ttl=TTL), now)
        assert errors(allowed) == ["LeaseLostError"]
        assert allowed[0].clause == "SPEC 3.5"
        assert "never revives" in allowed[0].reason
        v = violation(renew, model, now, TTL, renew_result(model, now, TTL))
        assert v.clause == "SPEC 3.5"
    assert errors(model.expect(Call(Op.RENEW, "t", token="tok1"), START + TTL - US)) == [None]


@pytest.mark.parametrize("new_ttl", [timedelta(0), TTL, 3 * TTL])
def test_renew_recomputes_until_and_keeps_the_lease(new_ttl: timedelta) -> None:
    """SPEC 3.5: renew keeps token, fence and owner, sets until from now + ttl, seq grows."""
    model = claim(fresh(Task("t"), Task("u")), token="tok1", fence=4, ttl=TTL)
    model = model.reconcile(model.tasks)
    now = START + TTL - MS
    after = renew(model, now, new_ttl, renew_result(model, now, new_ttl))
    until = None if new_ttl == timedelta(0) else now + new_ttl
    assert after.task("t") == Task("t", "", (), State.CLAIMED, "a1", Lease("tok1", 4, until), 2)
    after.reconcile(after.tasks)
    assert violation(after.reconcile, snapshot(after, t=1)).clause == "SPEC 3.5 (renew took effect)"
    live = after.expect(Call(Op.CLAIM, "t", agent="a2"), START + TTL)
    assert errors(live) == ["TakenError"]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"lease": Lease("tok2", 4, None)}, "same token"),
        ({"lease": Lease("tok1", 5, None)}, "same fence"),
        ({"owner": "a2"}, "owner unchanged"),
        ({"state": State.OPEN}, "still CLAIMED"),
        ({"lease": None}, "renewed lease"),
        ({"lease": Lease("tok1", 4, START)}, "zero ttl"),
        ({"title": "renamed"}, "title"),
    ],
)
def test_renew_must_not_change_the_lease_identity(changes: dict[str, Any], expected: str) -> None:
    """SPEC 3.5: a renew returning a new token, a bumped fence or another owner is rejected."""
    model = claim(fresh(), token="tok1", fence=4)
    got = renew_result(model, START, timedelta(0), **changes)
    v = violation(renew, model, START, timedelta(0), got)
    assert v.clause == "SPEC 3.5"
    assert expected in v.expected


def test_renew_seq_must_grow_and_a_task_be_returned() -> None:
    """SPEC 3.5/3.8: renew returns the task, with a greater seq."""
    model = claim(fresh())
    got = renew_result(model, START, timedelta(0), seq=1)
    assert violation(renew, model, START, timedelta(0), got).clause == "SPEC 3.5, SPEC 3.8"
    v = violation(model.advance, Call(Op.RENEW, "t", token="tok1"), START, Outcome.returned(None))
    assert v.clause == "SPEC 3.5"


# -- SPEC 3.7: snapshots -----------------------------------------------------------------------


def test_reconcile_accepts_any_order() -> None:
    """SPEC 3.7: a snapshot lists every task once, in any order."""
    model = fresh(Task("a"), Task("b"), Task("c"))
    assert model.reconcile(list(reversed(model.tasks))) == model


@pytest.mark.parametrize(
    ("items", "observed"),
    [
        ([Task("a")], "missing ['b']"),
        ([Task("a"), Task("b"), Task("c")], "unknown ['c']"),
        ([Task("a"), Task("b"), Task("a")], "'a' twice"),
        ([Task("a"), "b"], "returned 'b'"),
        ([Task("a"), {"id": "b"}], "returned {'id': 'b'}"),
    ],
)
def test_reconcile_rejects_missing_extra_duplicate_and_non_tasks(
    items: list[object], observed: str
) -> None:
    """SPEC 3.7: missing, extra or duplicated tasks and non-Task items are violations."""
    model = fresh(Task("a"), Task("b"))
    v = violation(model.reconcile, items)
    assert v.clause == "SPEC 3.7"
    assert observed in v.observed


# -- SPEC 3.8: seq ------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [0, 7, -3])
def test_first_snapshot_adopts_any_int_seq(seq: int) -> None:
    """SPEC 3.8: the first snapshot sets each seq; later ones must keep it without a change."""
    model = BoardModel.start([Task("t"), Task("u")])
    model = model.reconcile([Task("t", seq=seq), Task("u", seq=seq + 1)])
    assert model.task("t").seq == seq  # type: ignore[union-attr]
    model.reconcile(model.tasks)
    v = violation(model.reconcile, snapshot(model, t=seq + 1))
    assert v.clause.startswith("SPEC 3 and 3.8")


@pytest.mark.parametrize("seq", ["1", 1.0, True, None])
def test_seq_must_be_an_int(seq: object) -> None:
    """SPEC 3.8: a non-integer seq is a violation, even in the first snapshot."""
    model = BoardModel.start([Task("t")])
    v = violation(model.reconcile, [Task("t", seq=seq)])  # type: ignore[arg-type]
    assert "expected an integer" in v.observed


def test_claim_snapshot_shows_the_returned_seq() -> None:
    """SPEC 3.1/3.8: after a claim the snapshot shows exactly the seq the claim returned."""
    model = claim(fresh(Task("t"), Task("u")))
    model.reconcile(model.tasks)
    for seqs in ({"t": 2}, {"t": 0}, {"u": 1}):
        v = violation(model.reconcile, snapshot(model, **seqs))
        assert "seq=" in v.observed


def test_seq_grow_survives_a_later_rejected_op() -> None:
    """SPEC 3.8: a release's seq growth is still required after a rejected op on another task."""
    model = act(claim(fresh(Task("t"), Task("u"))), Op.RELEASE, "tok1")
    model = model.advance(Call(Op.CLAIM, "zz", agent="a"), START, Outcome.raised(NotFoundError()))
    assert "expected greater than 1" in violation(model.reconcile, snapshot(model)).observed
    model.reconcile(snapshot(model, t=2))


# -- outcomes that are no contract outcome -----------------------------------------------------


@pytest.mark.parametrize("op", [Op.CLAIM, *TOKEN_OPS])
def test_unexpected_exception_is_a_violation(op: Op) -> None:
    """SPEC 3: an exception that is no contract outcome (KeyError) is a violation."""
    model = claim(fresh())
    outcome = Outcome.raised(KeyError("x"))
    assert outcome.error == "KeyError"
    assert not outcome.is_contract_error
    v = violation(model.advance, Call(op, "t", agent="a2", token="tok1"), START, outcome)
    assert "KeyError" in v.observed


def test_outcome_raised_classifies_subclasses() -> None:
    """Outcome.raised: a subclass of TakenError counts as TakenError, and is accepted as such."""

    class StoreTakenError(TakenError):
        pass

    outcome = Outcome.raised(StoreTakenError("busy"))
    assert outcome.error == "TakenError"
    assert outcome.message == "busy"
    assert outcome.is_contract_error
    assert not outcome.ok
    model = claim(fresh())
    assert same(model.advance(Call(Op.CLAIM, "t", agent="a2"), START, outcome), model)
    assert Outcome.raised(NotFoundError()).error == "NotFoundError"  # not LookupError-as-other
    assert Outcome.raised(UnicodeError()).error == "ValueError"
    assert Outcome.returned(42) == Outcome()
    assert str(Outcome.raised(TakenError("busy"))) == "raised TakenError('busy')"
    assert str(Outcome.returned(None)) == "returned None"


# -- the model value ---------------------------------------------------------------------------


def test_advance_returns_a_new_model_and_leaves_the_old_one() -> None:
    """The model is immutable: advance and reconcile return new models, the old one unchanged."""
    model = fresh(Task("t"), Task("u"))
    before = dataclasses.replace(model)
    after = claim(model)
    assert after is not model
    assert model == before
    assert model.task("t") == Task("t")
    assert model.lease_of("tok1") is None
    assert errors(model.expect(Call(Op.CLAIM, "t", agent="a2"), START)) == [None]
    assert after.task("t").state is State.CLAIMED  # type: ignore[union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.policy = "accept"  # type: ignore[misc]


def test_start_validates_its_arguments() -> None:
    """BoardModel.start rejects duplicate ids, an unknown policy and a non-positive resolution."""
    with pytest.raises(ValueError, match="unique"):
        BoardModel.start([Task("t"), Task("t")])
    with pytest.raises(ValueError, match="policy"):
        BoardModel.start([Task("t")], policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="resolution"):
        BoardModel.start([Task("t")], resolution=timedelta(0))


def test_describe_texts() -> None:
    """describe(): what the model knows of a task at now, in words a human can check."""
    model = fresh(Task("t"), Task("u"), Task("v", state=State.FAILED))
    assert model.describe("zz", START) == "no task has id 'zz'"
    assert model.describe("t", START) == "task 't' is open"
    assert model.describe("v", START) == "task 'v' is failed"
    model = claim(model, "u", "a9", token="k", fence=3)
    assert model.describe("u", START) == (
        "task 'u' is claimed by 'a9' (fence 3) with a lease that never expires"
    )
    model = claim(model, "t", "a1", token="k1", fence=2, ttl=TTL)
    holder = "task 't' is claimed by 'a1' (fence 2)"
    assert model.describe("t", START) == f"{holder}, live for 10s more"
    assert model.describe("t", START + TTL - 5 * MS) == f"{holder}, live for 5ms more"
    assert model.describe("t", START + TTL) == (
        f"{holder}, expired just now: at exactly until a lease is expired (SPEC 2)"
    )
    assert model.describe("t", START + TTL + 7 * US) == f"{holder}, expired 7us ago"
    assert model.describe("t", START + TTL + timedelta(hours=2)) == f"{holder}, expired 2h ago"


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(hours=2), "2h"),
        (timedelta(days=1), "24h"),
        (timedelta(seconds=90), "90s"),
        (timedelta(seconds=1.5), "1500ms"),
        (timedelta(milliseconds=5), "5ms"),
        (timedelta(microseconds=7), "7us"),
        (timedelta(milliseconds=1, microseconds=1), "1001us"),
        (timedelta(seconds=-3), "-3s"),
        (timedelta(microseconds=-1), "-1us"),
    ],
)
def test_format_duration(delta: timedelta, text: str) -> None:
    """format_duration renders exactly, in the largest whole unit."""
    assert format_duration(delta) == text


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(microseconds=217), "217us"),
        (timedelta(microseconds=-8624), "-8.624ms"),
        (timedelta(seconds=1.5), "1.5 s"),
        (timedelta(seconds=59, microseconds=1), "59.000001 s"),
        (timedelta(minutes=2, seconds=3.5), "2 min 3.5 s"),
        (timedelta(microseconds=28_799_997_364), "8 h 0 min"),
        (timedelta(microseconds=-28_799_992_470), "-8 h 0 min"),
        (timedelta(microseconds=29_285_911_525_989), "338 d 23 h"),
    ],
)
def test_readable_duration(delta: timedelta, text: str) -> None:
    """readable_duration shows a second or more in seconds, minutes, hours or days."""
    assert readable_duration(delta) == text


def test_an_until_hours_off_reads_in_hours() -> None:
    """A returned until hours from now + ttl is reported as hours off, not microseconds."""
    with pytest.raises(ContractViolation) as caught:
        check_until(START + TTL - timedelta(hours=8), START, TTL, "SPEC 2", None, MS)
    assert "off by -8 h 0 min" in caught.value.observed


def test_call_str() -> None:
    """Call renders as the operation with its arguments, a long token shortened."""
    assert str(Call(Op.CLAIM, "t", agent="a1", ttl=TTL)) == "claim('t', agent='a1', ttl=10s)"
    assert str(Call(Op.RELEASE, "t", token="k")) == "release('t', token='k')"
    assert str(Call(Op.RENEW, "t", token="x" * 20)) == "renew('t', token='xxxxxxxxxx…', ttl=0s)"


def test_violation_message_names_clause_expectation_and_observation() -> None:
    """ContractViolation is an AssertionError reading 'clause: expected ...; the board ...'."""
    model = claim(fresh(), ttl=TTL)
    v = violation(model.advance, Call(Op.CLAIM, "t", agent="a1"), START, Outcome.returned(None))
    assert isinstance(v, AssertionError)
    assert str(v) == f"{v.clause}: expected {v.expected}; the board {v.observed}"
    assert "TakenError (SPEC 3.1 step 4: task 't' is claimed by 'a1'" in v.expected
