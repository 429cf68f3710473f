"""SpecExamples: one example test per SPEC clause, each docstring naming its clause.

Small, fixed scenarios on a board from ``open_board``, each checking one clause by hand; the
state machine and the criteria, which explore, are BoardContract's own
(:mod:`taskboard.boardtest._suite`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from taskboard._clock import ManualClock, as_utc
from taskboard._contract import ClaimRequest, FailingBoard, State, Task
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)
from taskboard.boardtest._harness import ContractHarness, ExampleMismatch, OpenBoard
from taskboard.model import CONTRACT_ERRORS

__all__ = ["SpecExamples", "reporting_clauses"]

#: The exceptions a board raises as contract outcomes: one an example did not expect is the
#: board's answer, not a crash of the test.
_OUTCOMES = tuple(CONTRACT_ERRORS.values())


def example_failure(clause: str, expected: str, did: str) -> str:
    """An example test's failure as it reads: its clause, what it expected, what the board did."""
    return f"{clause}\n  expected  {expected}\n  board     {did}"


def _reported(test: Callable[..., None]) -> Callable[..., None]:
    """``test``, failing with its docstring's clause, what it expected and what the board did,
    where it would fail with a bare ``DID NOT RAISE`` or ``AssertionError``."""
    clause = " ".join((test.__doc__ or test.__name__).split())

    @functools.wraps(test)  # pytest reads the fixtures the test asks for through it
    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        try:
            test(self, *args, **kwargs)
        except ExampleMismatch as mismatch:
            pytest.fail(example_failure(clause, mismatch.expected, mismatch.did))
        except AssertionError as exc:
            detail = str(exc).strip() or "did otherwise (see the assertion above)"
            pytest.fail(example_failure(clause, "what the clause says", detail))
        except _OUTCOMES as exc:
            pytest.fail(
                example_failure(
                    clause, "the call to succeed", f"raised {type(exc).__name__}: {exc}"
                )
            )

    return run


def reporting_clauses(cls: type) -> type:
    """``cls`` with each of its ``test_`` methods failing as :func:`_reported` says."""
    for name, test in list(vars(cls).items()):
        if name.startswith("test_") and callable(test):
            setattr(cls, name, _reported(test))
    return cls


@reporting_clauses
class SpecExamples(ContractHarness):
    """The per-clause example tests of :class:`~taskboard.boardtest.BoardContract`."""

    # -- SPEC 3.7 and 3.1 ----------------------------------------------------------------------

    def test_board_is_a_renewing_board(self, open_board: OpenBoard) -> None:
        """SPEC 1: a board under this suite implements renew (RenewingBoard)."""
        self.renewing(open_board(Task("t1")))

    def test_list_tasks_shows_every_initial_task(self, open_board: OpenBoard) -> None:
        """SPEC 3.7: list_tasks() shows every task as given: id, title, deps, open, no lease."""
        board = open_board(Task("t1", title="first"), Task("t2", deps=("t1",)))
        tasks = self.snapshot(board)
        assert sorted(tasks) == ["t1", "t2"]
        assert (tasks["t1"].title, tasks["t2"].deps) == ("first", ("t1",))
        for task in tasks.values():
            assert (task.state, task.owner, task.lease) == (State.OPEN, "", None)

    def test_claim_of_an_unknown_id_is_not_found(self, open_board: OpenBoard) -> None:
        """SPEC 3.1 step 1: claim of an id no task has is NotFoundError and changes nothing."""
        board = open_board(Task("t1"))
        self.assert_rejected_unchanged(board, NotFoundError, lambda: self.claim(board, "nope"))

    def test_claim_of_a_done_task_is_terminal(self, open_board: OpenBoard) -> None:
        """SPEC 3.1 step 2: claim of a DONE task is TerminalError, for good."""
        board = open_board(Task("t1"))
        board.complete("t1", self.token(self.claim(board, "t1")))
        self.assert_rejected_unchanged(board, TerminalError, lambda: self.claim(board, "t1"))

    def test_claim_with_an_unfinished_dependency_is_blocked(self, open_board: OpenBoard) -> None:
        """SPEC 3.1 step 3: a dependency that is open, claimed or failed blocks the claim."""
        board = open_board(Task("dep"), Task("t1", deps=("dep",)))
        self.assert_rejected_unchanged(board, BlockedError, lambda: self.claim(board, "t1"))
        dep = self.claim(board, "dep")
        self.assert_rejected_unchanged(board, BlockedError, lambda: self.claim(board, "t1"))
        if isinstance(board, FailingBoard):
            board.fail("dep", self.token(dep))
            self.assert_rejected_unchanged(board, BlockedError, lambda: self.claim(board, "t1"))
            dep = self.claim(board, "dep")
        board.complete("dep", self.token(dep))
        assert self.claim(board, "t1").state == State.CLAIMED

    def test_claim_of_a_live_lease_is_taken_even_for_the_same_agent(
        self, open_board: OpenBoard
    ) -> None:
        """SPEC 3.1 step 4: a live lease makes any claim TakenError, same agent name included."""
        board = open_board(Task("t1"))
        self.claim(board, "t1", "a1")
        for agent in ("a1", "a2"):
            self.assert_rejected_unchanged(
                board, TakenError, partial(self.claim, board, "t1", agent)
            )

    def test_claim_with_an_empty_agent_is_a_value_error_checked_last(
        self, open_board: OpenBoard
    ) -> None:
        """SPEC 3.1 step 5: an empty agent is ValueError, but only after the other checks."""
        board = open_board(Task("t1"), Task("t2"))
        self.assert_rejected_unchanged(board, ValueError, lambda: self.claim(board, "t1", ""))
        self.claim(board, "t2", "a1")
        self.assert_rejected_unchanged(board, TakenError, lambda: self.claim(board, "t2", ""))
        self.assert_rejected_unchanged(board, NotFoundError, lambda: self.claim(board, "x", ""))

    def test_claim_returns_the_task_as_list_tasks_shows_it(self, open_board: OpenBoard) -> None:
        """SPEC 3.1: claim sets CLAIMED, owner, lease, a greater seq; returns the listed task."""
        board = open_board(Task("t1", title="x"))
        before = self.snapshot(board)["t1"]
        got = self.claim(board, "t1", "a1")
        assert got == self.snapshot(board)["t1"]
        assert (got.state, got.owner, got.title) == (State.CLAIMED, "a1", "x")
        assert got.lease is not None
        assert got.lease.token
        assert got.seq > before.seq

    def test_positive_ttl_expires_at_now_plus_ttl_on_the_board_clock(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 2: a positive ttl gives until = the board's now + ttl."""
        board = open_board(Task("t1"))
        clock.advance(3 * self.tick)
        got = self.claim(board, "t1", ticks=7)
        assert got.lease is not None
        assert got.lease.until is not None
        assert abs(as_utc(got.lease.until) - (clock.now() + 7 * self.tick)) < self.tick

    def test_zero_ttl_never_expires(self, open_board: OpenBoard, clock: ManualClock) -> None:
        """SPEC 2: ttl == 0 gives until=None, and the lease stays live however long we wait."""
        board = open_board(Task("t1"))
        got = self.claim(board, "t1", ticks=0)
        assert got.lease is not None
        assert got.lease.until is None
        clock.advance(timedelta(days=400))
        self.assert_rejected_unchanged(board, TakenError, lambda: self.claim(board, "t1", "a2"))

    def test_claim_one_tick_before_until_is_taken(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 2: the lease is still live one clock tick before until."""
        board = open_board(Task("t1"))
        self.claim(board, "t1", ticks=5)
        clock.advance(4 * self.tick)
        self.assert_rejected_unchanged(board, TakenError, lambda: self.claim(board, "t1", "a2"))

    def test_claim_at_exactly_until_is_a_takeover(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 2 and 3.1: at exactly until the lease has expired, and a claim takes over."""
        self.needs_leases_to_expire()
        board = open_board(Task("t1"))
        first = self.claim(board, "t1", "a1", ticks=5)
        clock.advance(5 * self.tick)
        second = self.claim(board, "t1", "a2", ticks=5)
        assert second.owner == "a2"
        assert self.token(second) != self.token(first)
        assert self.fence(second) > self.fence(first)

    def test_takeover_by_the_same_agent_name_mints_a_new_token(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.1: tokens identify leases, not agents: the same name gets a new token."""
        self.needs_leases_to_expire()
        board = open_board(Task("t1"))
        first = self.claim(board, "t1", "a1", ticks=1)
        clock.advance(self.tick)
        second = self.claim(board, "t1", "a1", ticks=1)
        assert self.token(second) != self.token(first)
        assert self.fence(second) > self.fence(first)

    def test_tokens_are_never_reused_across_tasks(self, open_board: OpenBoard) -> None:
        """SPEC 3.1: a token is never issued twice by one board, for any task."""
        board = open_board(Task("t1"), Task("t2"), Task("t3"))
        tokens = []
        for task_id in ("t1", "t2", "t3"):
            got = self.claim(board, task_id, "a1")
            tokens.append(self.token(got))
            board.release(task_id, tokens[-1])
            tokens.append(self.token(self.claim(board, task_id, "a1")))
        assert len(set(tokens)) == len(tokens)

    # -- SPEC 3.2 and 3.3 ----------------------------------------------------------------------

    def test_release_reopens_the_task(self, open_board: OpenBoard) -> None:
        """SPEC 3.2: release makes the task OPEN with no owner and no lease, and grows seq."""
        board = open_board(Task("t1"))
        got = self.claim(board, "t1")
        board.release("t1", self.token(got))
        after = self.snapshot(board)["t1"]
        assert (after.state, after.owner, after.lease) == (State.OPEN, "", None)
        assert after.seq > got.seq

    def test_fence_grows_across_release_and_reclaim(self, open_board: OpenBoard) -> None:
        """SPEC 3.1 and 3.2: fence history survives release: the next claim's fence is greater."""
        board = open_board(Task("t1"))
        fences = []
        for _ in range(3):
            got = self.claim(board, "t1")
            fences.append(self.fence(got))
            board.release("t1", self.token(got))
        assert fences == sorted(set(fences)), f"fences did not grow: {fences}"

    def test_release_with_a_stale_token_is_lease_lost(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.2: a stale holder's late release is LeaseLostError and leaves the new lease."""
        self.needs_leases_to_expire()
        board = open_board(Task("t1"))
        stale = self.claim(board, "t1", "a1", ticks=1)
        clock.advance(self.tick)
        self.claim(board, "t1", "a1", ticks=10)
        self.assert_rejected_unchanged(
            board, LeaseLostError, lambda: board.release("t1", self.token(stale))
        )

    def test_actions_on_an_unclaimed_task_are_lease_lost(self, open_board: OpenBoard) -> None:
        """SPEC 3.2 and 3.3: release or complete of an open task is LeaseLostError."""
        board = open_board(Task("t1"))
        for action in (board.release, board.complete):
            self.assert_rejected_unchanged(
                board, LeaseLostError, partial(action, "t1", "no-such-token")
            )

    def test_actions_on_an_unknown_id_are_not_found(self, open_board: OpenBoard) -> None:
        """SPEC 3.2 and 3.3: release or complete of an unknown id is NotFoundError."""
        board = open_board(Task("t1"))
        for action in (board.release, board.complete):
            self.assert_rejected_unchanged(board, NotFoundError, partial(action, "nope", "token"))

    def test_another_tasks_token_is_lease_lost(self, open_board: OpenBoard) -> None:
        """SPEC 3.2 and 3.3: a token is only good for the task it was issued for."""
        board = open_board(Task("t1"), Task("t2"))
        self.claim(board, "t1")
        other = self.claim(board, "t2")
        self.assert_rejected_unchanged(
            board, LeaseLostError, lambda: board.complete("t1", self.token(other))
        )

    def test_complete_is_terminal(self, open_board: OpenBoard) -> None:
        """SPEC 3.3: complete makes the task DONE; every later action is LeaseLostError."""
        board = open_board(Task("t1"))
        got = self.claim(board, "t1")
        board.complete("t1", self.token(got))
        after = self.snapshot(board)["t1"]
        assert (after.state, after.owner, after.lease) == (State.DONE, "", None)
        assert after.seq > got.seq
        for action in (board.release, board.complete):
            self.assert_rejected_unchanged(
                board, LeaseLostError, partial(action, "t1", self.token(got))
            )

    def test_a_stale_holder_cannot_complete_the_new_holders_work(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.3: after a takeover the old token cannot complete; the new one can."""
        self.needs_leases_to_expire()
        board = open_board(Task("t1"))
        stale = self.claim(board, "t1", "a1", ticks=2)
        clock.advance(2 * self.tick)
        fresh = self.claim(board, "t1", "a2", ticks=10)
        self.assert_rejected_unchanged(
            board, LeaseLostError, lambda: board.complete("t1", self.token(stale))
        )
        board.complete("t1", self.token(fresh))
        assert self.snapshot(board)["t1"].state == State.DONE

    def test_expired_lease_nobody_took_over(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.4: release by the current token of an expired lease follows the host's policy."""
        self.needs_leases_to_expire()
        board = open_board(Task("t1"))
        got = self.claim(board, "t1", ticks=1)
        clock.advance(self.tick)
        before = self.snapshot(board)
        try:
            board.release("t1", self.token(got))
        except LeaseLostError:
            assert self.expired_lease_policy != "accept", "policy 'accept' but the board rejected"
            assert self.snapshot(board) == before, "a rejected operation changed the board"
        else:
            assert self.expired_lease_policy != "reject", "policy 'reject' but the board accepted"
            assert self.snapshot(board)["t1"].state == State.OPEN

    # -- SPEC 3.5 ------------------------------------------------------------------------------

    def test_renew_recomputes_until_from_the_board_clock(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.5: renew sets until = now + ttl, keeps token, fence and owner, grows seq."""
        board = open_board(Task("t1"))
        got = self.claim(board, "t1", "a1", ticks=5)
        clock.advance(3 * self.tick)
        renewed = self.renewing(board).renew("t1", self.token(got), ClaimRequest(9 * self.tick))
        assert renewed == self.snapshot(board)["t1"]
        assert renewed.lease is not None
        assert renewed.lease.until is not None
        assert abs(as_utc(renewed.lease.until) - (clock.now() + 9 * self.tick)) < self.tick
        assert (self.token(renewed), self.fence(renewed), renewed.owner) == (
            self.token(got),
            self.fence(got),
            "a1",
        )
        assert renewed.seq > got.seq

    def test_renew_with_zero_ttl_removes_the_expiry(self, open_board: OpenBoard) -> None:
        """SPEC 3.5 and 2: renew with ttl 0 gives until=None, exactly as in claim."""
        board = open_board(Task("t1"))
        got = self.claim(board, "t1", ticks=5)
        renewed = self.renewing(board).renew("t1", self.token(got), ClaimRequest(timedelta(0)))
        assert renewed.lease is not None
        assert renewed.lease.until is None

    def test_renew_at_exactly_until_is_lease_lost(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.5: renew never revives a lease; at exactly until it has expired."""
        self.needs_leases_to_expire()
        board = self.renewing(open_board(Task("t1")))
        got = self.claim(board, "t1", ticks=5)
        clock.advance(5 * self.tick)
        self.assert_rejected_unchanged(
            board,
            LeaseLostError,
            lambda: board.renew("t1", self.token(got), ClaimRequest(5 * self.tick)),
        )

    def test_renew_with_a_stale_token_does_not_extend_the_new_lease(
        self, open_board: OpenBoard, clock: ManualClock
    ) -> None:
        """SPEC 3.5: a stale holder's renew is LeaseLostError and leaves the new holder's lease."""
        self.needs_leases_to_expire()
        board = self.renewing(open_board(Task("t1")))
        stale = self.claim(board, "t1", "a1", ticks=1)
        clock.advance(self.tick)
        self.claim(board, "t1", "a1", ticks=3)
        self.assert_rejected_unchanged(
            board,
            LeaseLostError,
            lambda: board.renew("t1", self.token(stale), ClaimRequest(100 * self.tick)),
        )

    def test_renew_of_an_unclaimed_or_unknown_task_is_rejected(self, open_board: OpenBoard) -> None:
        """SPEC 3.5: renew of an open task is LeaseLostError; of an unknown id NotFoundError."""
        board = self.renewing(open_board(Task("t1")))
        request = ClaimRequest(self.tick)
        self.assert_rejected_unchanged(
            board, LeaseLostError, lambda: board.renew("t1", "token", request)
        )
        self.assert_rejected_unchanged(
            board, NotFoundError, lambda: board.renew("nope", "token", request)
        )

    # -- SPEC 3.6 ------------------------------------------------------------------------------

    def test_fail_marks_failed_and_the_task_can_be_claimed_again(
        self, open_board: OpenBoard
    ) -> None:
        """SPEC 3.6: fail makes the task FAILED (not terminal); a new claim gets a greater fence."""
        board = self.failing(open_board(Task("t1")))
        got = self.claim(board, "t1")
        board.fail("t1", self.token(got))
        after = self.snapshot(board)["t1"]
        assert (after.state, after.owner, after.lease) == (State.FAILED, "", None)
        assert after.seq > got.seq
        again = self.claim(board, "t1", "a2")
        assert self.fence(again) > self.fence(got)

    def test_fail_with_a_stale_token_is_lease_lost(self, open_board: OpenBoard) -> None:
        """SPEC 3.6: fail checks the token like complete does."""
        board = self.failing(open_board(Task("t1")))
        got = self.claim(board, "t1")
        board.release("t1", self.token(got))
        self.claim(board, "t1")
        self.assert_rejected_unchanged(
            board, LeaseLostError, lambda: board.fail("t1", self.token(got))
        )

    # -- SPEC 3.8 ------------------------------------------------------------------------------

    def test_seq_of_other_tasks_does_not_move(self, open_board: OpenBoard) -> None:
        """SPEC 3.8: an operation on one task leaves every other task, seq included, as it was."""
        board = open_board(Task("t1"), Task("t2"))
        before = self.snapshot(board)["t2"]
        got = self.claim(board, "t1")
        board.release("t1", self.token(got))
        assert self.snapshot(board)["t2"] == before
