"""What a board can hold (issue 31): declared lease limits and the ones learned from its
``unsupported`` answers, the TTL asked for in their place, what a run reports of them; the
renews that land on a live current lease, by boundary TTL; holder actions that find a held
task; and the first clause found kept when shrinking moves to another."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from taskboard import ClaimRequest, Clock, Lease, State, Task
from taskboard._cli import _summary, main
from taskboard._fuzz import FuzzOptions, fuzz
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import ContractViolation, Op
from taskboard.stateful import LeaseLimits
from taskboard.stateful._generation import CLAIM_TICKS, RENEW_TICKS, renew_ticks
from taskboard.stateful._reports import Report, found_clause, with_first_found
from taskboard.stateful._runstate import separate_run
from taskboard.stateful._steps.act import held_task
from taskboard.stateful._tracefile import Verdict

MS = timedelta(milliseconds=1)
S = timedelta(seconds=1)
#: A lease that outlives any example, as the machine's config computes it on a 1 ms unit.
OUTLIVING = 10_000 * MS


class NeverExpiring(MemoryBoard):
    """A lock that never expires (portalocker's): a claim or a renew with a TTL is answered
    ``unsupported`` before anything changes."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if request.ttl:
            raise NotImplementedError("this lock never expires")
        return super().claim(task_id, agent, request)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        if request.ttl:
            raise NotImplementedError("this lock never expires")
        return super().renew(task_id, token, request)


def never_expiring(tasks: Sequence[Task], clock: Clock) -> NeverExpiring:
    """The same board, declaring what it holds."""
    return NeverExpiring(tasks, clock)


never_expiring.lease_limits = LeaseLimits(expiring=False)  # type: ignore[attr-defined]


class RefusesAfterWriting(MemoryBoard):
    """Bug: claims a task with a TTL, and then says it cannot hold such a lease."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        claimed = super().claim(task_id, agent, request)
        if request.ttl:
            raise NotImplementedError("this lock never expires")
        return claimed


def quiet(tmp_path: Path, **changes: object) -> FuzzOptions:
    return FuzzOptions(
        seed=1,
        database=str(tmp_path / "db"),
        trace_dir=str(tmp_path / "traces"),
        max_examples=30,
        mode="sequential",
    ).replace(**changes)


def holdable(limits: LeaseLimits, op: Op, ttl: timedelta) -> timedelta:
    return limits.holdable(op, ttl, MS, OUTLIVING)


def test_a_board_that_holds_any_lease_is_asked_for_the_ttl_drawn() -> None:
    """Without limits every TTL, 0 and sub-resolution included, is asked for as drawn."""
    for ttl in (timedelta(0), MS // 2, MS, 20 * MS):
        assert holdable(LeaseLimits(), Op.CLAIM, ttl) == ttl
        assert holdable(LeaseLimits(), Op.RENEW, ttl) == ttl
    assert not LeaseLimits().limited
    assert LeaseLimits().describe() == "any lease"


def test_each_declared_limit_gives_the_nearest_lease_the_board_holds() -> None:
    """No expiry only: every TTL becomes 0; no claim without expiry: 0 becomes the longest
    lease held; no renew to no expiry touches renews only; whole units round up; the
    shortest and longest TTLs bound the rest; release and complete are left alone."""
    forever = LeaseLimits(expiring=False)
    assert holdable(forever, Op.CLAIM, 5 * MS) == timedelta(0)
    assert holdable(forever, Op.RENEW, MS // 2) == timedelta(0)
    assert holdable(forever, Op.RELEASE, 5 * MS) == 5 * MS
    expiring = LeaseLimits(no_expiry=False, longest=S)
    assert holdable(expiring, Op.CLAIM, timedelta(0)) == S
    assert holdable(LeaseLimits(no_expiry=False), Op.CLAIM, timedelta(0)) == OUTLIVING
    renewing = LeaseLimits(renew_to_no_expiry=False)
    assert holdable(renewing, Op.CLAIM, timedelta(0)) == timedelta(0)
    assert holdable(renewing, Op.RENEW, timedelta(0)) == OUTLIVING
    whole = LeaseLimits(whole_units=True)
    assert holdable(whole, Op.CLAIM, MS // 2) == MS
    assert holdable(whole, Op.CLAIM, timedelta(0)) == timedelta(0)
    bounded = LeaseLimits(shortest=10 * MS, longest=S)
    assert holdable(bounded, Op.CLAIM, MS) == 10 * MS
    assert holdable(bounded, Op.RENEW, 2 * S) == S
    assert bounded.describe() == "TTLs of 10ms or more, TTLs of 1s or less"


def test_limits_that_hold_no_lease_at_all_are_refused() -> None:
    """A board must hold some lease, and a TTL bound must be a positive duration."""
    with pytest.raises(ValueError, match="must hold leases"):
        LeaseLimits(expiring=False, no_expiry=False)
    with pytest.raises(ValueError, match="longest"):
        LeaseLimits(longest=timedelta(0))


def test_each_unsupported_answer_teaches_the_limit_it_shows() -> None:
    """A refused claim with ttl 0: no expiry is not held; a refused renew with ttl 0: no renew
    to no expiry; a sub-resolution TTL: whole units; a short TTL: a shortest twice as long;
    one as long as a lease that outlives the example: no expiring lease at all."""

    def learned(op: Op, ttl: timedelta, limits: LeaseLimits | None = None) -> LeaseLimits:
        return (limits or LeaseLimits()).learned_from(op, ttl, MS, OUTLIVING)

    assert learned(Op.CLAIM, timedelta(0)) == LeaseLimits(no_expiry=False)
    assert learned(Op.RENEW, timedelta(0)) == LeaseLimits(renew_to_no_expiry=False)
    assert learned(Op.CLAIM, MS // 2) == LeaseLimits(whole_units=True)
    assert learned(Op.CLAIM, 5 * MS) == LeaseLimits(shortest=10 * MS)
    assert learned(Op.RENEW, 5 * MS, LeaseLimits(shortest=40 * MS)) == LeaseLimits(shortest=40 * MS)
    assert learned(Op.CLAIM, OUTLIVING) == LeaseLimits(expiring=False)
    assert learned(Op.RELEASE, timedelta(0)) == LeaseLimits()


def test_a_declared_limit_spends_no_call_on_a_lease_the_board_cannot_hold(
    tmp_path: Path,
) -> None:
    """A board that declares leases without expiry only is never asked for another: nothing
    is refused, the TTLs drawn are changed before the call, and the summary says so."""
    report = fuzz("tests.test_lease_limits:never_expiring", quiet(tmp_path), progress=None)
    assert report.failure is None
    assert report.refused == 0
    assert report.adapted > 0
    assert report.declared_limits == "leases without expiry only"
    assert "lease limits: declared leases without expiry only; learned nothing more" in (
        _summary(report)
    )


def test_unsupported_answers_are_learned_and_then_not_asked_again(tmp_path: Path) -> None:
    """An undeclared board that answers NotImplementedError to every lease with a TTL is no
    fault: the run learns it holds leases without expiry only, after a handful of refusals
    (each doubles the shortest TTL tried, and one that outlives the example ends it), and
    asks for none with a TTL after that."""
    report = fuzz("tests.test_lease_limits:NeverExpiring", quiet(tmp_path), progress=None)
    assert report.failure is None
    assert report.declared_limits == ""
    assert report.limits == "leases without expiry only"
    assert 0 < report.refused <= 16
    assert report.adapted > 10 * report.refused
    assert f"  {report.refused} call(s) refused as unsupported" in _summary(report)


def test_an_unsupported_answer_that_changed_the_board_is_a_violation(tmp_path: Path) -> None:
    """A board that says it cannot hold a lease must have changed nothing: one that claimed
    the task anyway is caught by the snapshot after the call."""
    report = fuzz(
        "tests.test_lease_limits:RefusesAfterWriting",
        quiet(tmp_path, max_examples=10, shrink_budget=1.0),
        progress=None,
    )
    assert report.failure is not None
    assert not report.fault
    assert "unsupported: a lease the board cannot hold" in report.failure


def test_the_coverage_table_counts_boundary_ttls_of_renews_on_a_live_current_lease(
    tmp_path: Path,
) -> None:
    """Of the renews that meet their task's live lease with its own token, the report counts
    each boundary TTL (0, below one unit, one unit), and the summary lists them with shares."""
    options = quiet(tmp_path, max_examples=60)
    report = fuzz("taskboard.hosts.memory:MemoryBoard", options, progress=None)
    for ttl in ("0", "below one unit", "one unit"):
        assert report.renew_ttls[ttl] > 0
    table = _summary(report).split("renews on a live current lease, by ttl", 1)[1]
    assert f"ttl 0 {' ' * 20}" in table
    assert f"({sum(report.renew_ttls.values())} in all)" in table


def test_a_holder_action_on_a_task_nobody_holds_acts_on_the_next_held_task() -> None:
    """A holder's renew acts on the drawn task when it is claimed (live or expired), else on
    the next task in task order, round, whose lease is live, else on the next claimed one;
    with none claimed, on the drawn task."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    states = {"t1": State.OPEN, "t2": State.DONE, "t3": State.CLAIMED}
    live = Lease("live", 1, now + S)
    ended = Lease("ended", 1, now - S)

    def session(leases: dict[str, Lease] | None = None, **changed: State) -> Any:
        tasks = {**states, **changed}
        held = leases or {}
        model = SimpleNamespace(
            task=lambda task_id: Task(task_id, state=tasks[task_id], lease=held.get(task_id))
        )
        return SimpleNamespace(model=model, clock=SimpleNamespace(now=lambda: now))

    assert held_task(session(), "t1") == "t3"
    assert held_task(session(), "t3") == "t3"
    assert held_task(session(t1=State.CLAIMED), "t2") == "t3"
    assert held_task(session(t3=State.OPEN, t1=State.CLAIMED), "t2") == "t1"
    assert held_task(session(t3=State.FAILED), "t2") == "t2"
    both = {"t1": live, "t3": ended}
    assert held_task(session(both, t1=State.CLAIMED), "t2") == "t1"
    assert held_task(session(both, t1=State.CLAIMED), "t3") == "t3"


def test_a_renew_drawn_with_a_claims_ttl_asks_for_no_expiry_as_often_as_the_renew_rule() -> None:
    """Where one draw of :data:`TTL_TICKS` serves a claim or a renew (``at_expiry``,
    ``act_with_lease``), the renew asks for what the renew rule draws at the same place:
    two units become no expiry, every other length stays."""
    assert [renew_ticks(ticks) for ticks in CLAIM_TICKS] == list(RENEW_TICKS)
    assert RENEW_TICKS.count(0) == 2 * CLAIM_TICKS.count(0)


def _report(clause: str, step: int) -> Report:
    verdict = Verdict(step, clause, f"what {clause} wants", "did otherwise", f"body {clause}")
    return Report(verdict, None, (), None)


def test_a_failure_that_shrank_to_another_clause_reports_both_and_prefers_the_first() -> None:
    """When the shrunk failure is of another clause than the one first found in the run, its
    report gets a note naming the first (clause, step, what the board did) and the bug found
    is the first clause; the same clause gets no note."""

    class Machine:
        pass

    with separate_run() as run:
        run.first_failures[Machine] = _report("SPEC 3.2", 9)
        shrunk = _report("SPEC 3.1", 2).error()
        noted = with_first_found(shrunk, Machine)
        assert isinstance(noted, ContractViolation)
        assert "shrinking moved to another clause" in str(noted)
        assert "violation of SPEC 3.2 at step 9" in str(noted)
        assert noted.clause == "SPEC 3.1"
        assert found_clause(noted) == "SPEC 3.2"
        same = _report("SPEC 3.2", 3).error()
        assert with_first_found(same, Machine) is same
        assert found_clause(same) == "SPEC 3.2"


def test_lease_limits_on_the_command_line_set_the_machines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``taskboard fuzz --lease-limits no-expiry-only`` declares what the board holds: the
    undeclared board is then never refused; a word it does not know is a usage error (exit 2,
    one line naming the words it takes), before anything runs."""
    common = ["--max-examples", "10", "--seed", "1", "--mode", "sequential", "--quiet"]
    common += ["--database", str(tmp_path / "db"), "--trace-dir", str(tmp_path / "traces")]
    target = "tests.test_lease_limits:NeverExpiring"
    assert main(["fuzz", target, "--lease-limits", "no-expiry-only", *common]) == 0
    out = capsys.readouterr().out
    assert "lease limits: declared leases without expiry only; learned nothing more" in out
    assert "  0 call(s) refused" in out
    assert main(["fuzz", target, "--lease-limits", "sometimes", *common]) == 2
    err = capsys.readouterr().err
    assert "--lease-limits: unknown lease limit 'sometimes'" in err
    assert "no-expiry-only" in err
    assert not (tmp_path / "traces").exists()


def test_racing_threads_ask_only_for_leases_the_board_holds(tmp_path: Path) -> None:
    """The calls of a parallel program's threads, which do not pass through the session's
    perform, are changed to a lease the board holds too: none is refused (an ambiguous
    outcome in the history), and claims and renews go through."""
    options = quiet(tmp_path, max_examples=12, mode="parallel")
    report = fuzz("tests.test_lease_limits:never_expiring", options, progress=None)
    assert report.failure is None
    assert report.parallel_runs > 0
    assert not [key for key in report.concurrent_calls if key[1] == "ambiguous"]
    assert report.concurrent_calls[("claim", "ok")] > 0
