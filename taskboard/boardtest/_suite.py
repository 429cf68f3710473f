"""BoardContract: the whole contract suite as one pytest class a host subclasses."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, ClassVar

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard._clock import Clock, ClockMode, ManualClock, SystemClock, as_utc
from taskboard._contract import Board, ClaimRequest, FailingBoard, RenewingBoard, State, Task
from taskboard._criteria import concurrent_claim, duplicate_token_submit
from taskboard._driver import Driver, _Driven, close_driven, driven, make_driven
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)
from taskboard.model import ExpiredLeasePolicy
from taskboard.stateful import BoardMachine, run_parallel_state_machine
from taskboard.stateful._config import wall_ttl_unit
from taskboard.stateful._generation import grid_start
from taskboard.stateful._machine import close_own
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session import sleep_until
from taskboard.stateful._trace import NEMESIS_HOOKS

__all__ = ["BoardContract"]

OpenBoard = Callable[..., Board]


class BoardContract:
    """Subclass this in your test suite and define :meth:`make_board`; pytest does the rest.

    ::

        from taskboard.boardtest import BoardContract

        class TestMyBoard(BoardContract):
            def make_board(self, tasks, clock):
                return MyBoard(tasks, clock)

    The class brings every check taskboard has: an example test per SPEC
    clause (each docstring names its clause), the :class:`~taskboard.stateful.BoardMachine`
    run, and both concurrency criteria over several rounds. A board that is
    not a :class:`~taskboard.RenewingBoard` *fails* (renew is part of the
    contract this suite verifies; a skip would pass "not tested" off as
    "passed"). The fail-path tests run on a :class:`~taskboard.FailingBoard` and
    are skipped, with the reason, on a board without ``fail``.

    Class attributes to set:

    * ``clock_resolution``, ``clock_mode``, ``clock_skew``, ``expired_lease_policy``,
      ``call_timeout``, ``tolerate_faults``, ``durable`` and ``nemesis``: as on
      ``BoardMachine``. With ``clock_mode = "wall"``
      (SPEC 7) the boards get a :class:`~taskboard.SystemClock`, the example tests'
      tick is the machine's wall-clock TTL unit, and their ``clock.advance(delta)``
      sleeps (at most :data:`WALL_LONGEST_SLEEP` ticks) to just past the target.
    * ``machine_settings``: Hypothesis settings for the state-machine run;
      ``None`` (default) follows the loaded profile, so ``--hypothesis-profile``
      or ``settings.load_profile`` set the depth.
    * ``parallel_settings``: the same for the parallel mode (each program runs
      three times on fresh boards, so ``None``, the default, takes the loaded
      profile with at most 50 examples).
    * ``criteria_rounds`` and ``criteria_participants``: how many races each
      criterion runs, and how many threads race in each.
    """

    clock_resolution: ClassVar[timedelta] = timedelta(milliseconds=1)
    clock_mode: ClassVar[ClockMode] = BoardMachine.clock_mode
    clock_skew: ClassVar[timedelta] = BoardMachine.clock_skew
    expired_lease_policy: ClassVar[ExpiredLeasePolicy] = "either"
    call_timeout: ClassVar[timedelta | None] = BoardMachine.call_timeout
    tolerate_faults: ClassVar[bool | tuple[type[Exception], ...]] = BoardMachine.tolerate_faults
    durable: ClassVar[bool] = BoardMachine.durable
    nemesis: ClassVar[tuple[str, ...] | None] = BoardMachine.nemesis
    machine_settings: ClassVar[settings | None] = None
    parallel_settings: ClassVar[settings | None] = None

    #: The clients :meth:`clients_of` opened and not yet closed, each with its board's driver.
    _clients_opened: list[tuple[Any, Driver]]
    criteria_rounds: ClassVar[int] = 20
    criteria_participants: ClassVar[int] = 8

    # -- hooks -------------------------------------------------------------------------------

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Any:
        """Return a fresh, isolated Board holding ``tasks`` that reads time only from ``clock``.

        May be ``async def``, and the board's methods may be coroutines.
        """
        raise NotImplementedError(
            f"{type(self).__qualname__} must define make_board(self, tasks, clock) returning a "
            "fresh Board that holds `tasks` and reads time only from `clock`"
        )

    def close_board(self, board: Any) -> Any:
        """Release what :meth:`make_board` acquired; runs after every test that made a board.

        May be ``async def``; ``board`` is what :meth:`make_board` returned.
        """

    def open_client(self, board: Any) -> Any:
        """Optional (SPEC 8): another client of the same storage as ``board``, as another
        process would open it. When defined, the parallel mode runs every thread on a client
        of its own, and both criteria race one client per participant. May be ``async def``.
        """
        raise NotImplementedError

    def close_client(self, client: Any) -> Any:
        """Release what :meth:`open_client` acquired: by default the client's own ``aclose()``
        or ``close()``, unless the client is the board itself. May be ``async def``."""
        return None if client in getattr(self, "_boards_made", ()) else close_own(client)

    def restart_storage(self, board: Any) -> Any:
        """Optional (SPEC 9): stop the storage and start it again, keeping what it persists;
        return the board to use from then on, or ``None`` to keep ``board``. When defined,
        the state-machine and parallel runs restart the storage now and then, and judge the
        snapshot after it by :attr:`durable`. May be ``async def``."""
        raise NotImplementedError

    def drop_connections(self, board: Any) -> Any:
        """Optional (SPEC 9): kill ``board``'s live connections from the server's side; the
        board must reconnect by itself (set :attr:`tolerate_faults` for the call that meets
        the dropped connection). When defined, the runs drop connections now and then. May
        be ``async def``."""
        raise NotImplementedError

    @property
    def has_clients(self) -> bool:
        """True when the class defines :meth:`open_client` (SPEC 8)."""
        return type(self).open_client is not BoardContract.open_client

    def clients_of(self, board: Board, count: int) -> list[Board] | None:
        """``count`` clients of ``board`` (one made by ``open_board``), closed after the test;
        ``None`` when the class defines no :meth:`open_client`."""
        if not self.has_clients:
            return None
        assert isinstance(board, _Driven), "clients_of takes a board from open_board"
        clients = []
        for _ in range(count):
            raw = board.driver.call(self.open_client, board.board)
            self._clients_opened.append((raw, board.driver))
            clients.append(driven(raw, board.driver))
        return clients

    def _close_clients(self, *, raising: bool = True) -> list[Exception]:
        """Close every client :meth:`clients_of` opened so far (so that a criterion's rounds
        do not pile up connections); the errors, raised as a group when ``raising``."""
        errors: list[Exception] = []
        opened = self._clients_opened
        self._clients_opened = []
        for client, driver in opened:
            try:
                driver.call(self.close_client, client)
            except Exception as exc:
                errors.append(exc)
        if errors and raising:
            raise ExceptionGroup("close_client failed", errors)
        return errors

    # -- fixtures ------------------------------------------------------------------------------

    @pytest.fixture
    def clock(self) -> ManualClock:
        """A manual clock on the resolution grid; in wall mode, one that sleeps to move."""
        if self.clock_mode == "wall":
            return _SleepingClock(self.tick, self.clock_skew + self.clock_resolution)
        return ManualClock(grid_start(self.tick))

    @pytest.fixture
    def open_board(self, clock: ManualClock) -> Iterator[OpenBoard]:
        """``open_board(*tasks)`` makes a board on ``clock``; every board is closed afterwards.

        The board comes back synchronous whatever the host's is: an async board runs on
        an event loop of its own, made before ``make_board`` and stopped after
        ``close_board``; calls are cut off after ``call_timeout``.
        """
        opened: list[tuple[Any, Driver]] = []
        self._boards_made: list[Any] = []
        self._clients_opened = []

        def factory(*tasks: Task) -> Board:
            made, board, driver = make_driven(
                self.make_board, (list(tasks), clock), self.call_timeout
            )
            opened.append((made, driver))
            self._boards_made.append(made)
            return board

        yield factory
        errors = self._close_clients(raising=False)  # clients first, then their boards
        for made, driver in opened:  # each board is closed, whatever the others do
            try:
                close_driven(self.close_board, made, driver)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup("close_client or close_board failed", errors)

    @property
    def tick(self) -> timedelta:
        """One unit of the host's clock resolution; in wall mode, :data:`WALL_TICK_UNITS` of the
        machine's TTL unit, so that "one tick before until" survives a loaded machine's sleeps."""
        if self.clock_mode == "wall":
            return WALL_TICK_UNITS * wall_ttl_unit(self.clock_resolution, self.clock_skew)
        return self.clock_resolution

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def snapshot(board: Board) -> dict[str, Task]:
        """``list_tasks()`` by id."""
        return {t.id: t for t in board.list_tasks()}

    def claim(self, board: Board, task_id: str, agent: str = "a1", ticks: int = 10) -> Task:
        """Claim for ``ticks`` clock ticks (0: no expiry) and return what the board returned."""
        return board.claim(task_id, agent, ClaimRequest(ticks * self.tick))

    @staticmethod
    def token(task: Task) -> str:
        """The lease token of a task that must have a lease."""
        assert task.lease is not None, f"expected a lease on {task}"
        return task.lease.token

    @staticmethod
    def fence(task: Task) -> int:
        """The lease fence of a task that must have a lease."""
        assert task.lease is not None, f"expected a lease on {task}"
        return task.lease.fence

    @staticmethod
    def renewing(board: Board) -> RenewingBoard:
        """The board as a RenewingBoard; a test failure (not a skip) when it is not one."""
        if not isinstance(board, RenewingBoard):
            pytest.fail(
                f"{type(board).__qualname__} has no renew(task_id, token, request): boardtest "
                "verifies RenewingBoard, and fails rather than skips, since a skip would "
                "pass 'not tested' off as 'passed'"
            )
        return board

    @staticmethod
    def failing(board: Board) -> FailingBoard:
        """The board as a FailingBoard; skips the test, with the reason, when it is not one."""
        if not isinstance(board, FailingBoard):
            pytest.skip(f"{type(board).__qualname__} has no fail(): SPEC 3.6 is optional")
        return board

    def assert_rejected_unchanged(
        self, board: Board, error: type[Exception], action: Callable[[], object]
    ) -> None:
        """``action`` raises ``error`` and the snapshot, seq included, stays as it was (SPEC 3)."""
        before = self.snapshot(board)
        with pytest.raises(error):
            action()
        assert self.snapshot(board) == before, "a rejected operation changed the board (SPEC 3)"

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

    # -- the machine and the criteria ----------------------------------------------------------

    def _machine_class(self, suffix: str, trace_target: str | None = None) -> type[BoardMachine]:
        """A BoardMachine on this class's hooks and settings, named after the class; its
        traces name this class (``module:Name``), which ``taskboard replay`` accepts."""
        cls = type(self)
        if trace_target is None:
            importable = "<" not in cls.__qualname__
            trace_target = f"{cls.__module__}:{cls.__qualname__}" if importable else ""
        clients: dict[str, Any] = {}
        if self.has_clients:
            clients = {"open_client": self.open_client, "close_client": self.close_client}
        for hook in NEMESIS_HOOKS.values():
            if getattr(cls, hook) is not getattr(BoardContract, hook):
                clients[hook] = getattr(self, hook)
        machine = BoardMachine.for_board(
            self.make_board,
            close=self.close_board,
            **clients,
            clock_resolution=self.clock_resolution,
            clock_mode=self.clock_mode,
            clock_skew=self.clock_skew,
            expired_lease_policy=self.expired_lease_policy,
            call_timeout=self.call_timeout,
            tolerate_faults=self.tolerate_faults,
            durable=self.durable,
            nemesis=self.nemesis,
            trace_target=trace_target,
        )
        machine.__name__ = machine.__qualname__ = f"{type(self).__name__}{suffix}"
        return machine

    def test_state_machine(self) -> None:
        """SPEC 6: BoardMachine finds no divergence from the model (depth from the profile)."""
        machine = self._machine_class("Machine")
        chosen = self.machine_settings or settings()
        phases = tuple(p for p in chosen.phases if p is not Phase.explain)
        with failures_reported(machine):
            run_state_machine_as_test(machine, settings=settings(chosen, phases=phases))

    def test_parallel_histories_are_linearizable(self) -> None:
        """SPEC 3 and 5: calls from several threads at once behave as some order of single calls."""
        machine = self._machine_class("ParallelMachine")
        profile = settings()
        chosen = self.parallel_settings or settings(
            profile, max_examples=min(50, profile.max_examples)
        )
        run_parallel_state_machine(machine, settings=chosen)

    def test_concurrent_claims_have_exactly_one_winner(self, open_board: OpenBoard) -> None:
        """SPEC 5: agents (names repeating) race to claim one task: exactly one wins, each round."""
        agents = ["a1", "a2"] * (self.criteria_participants // 2) or ["a1"]
        for round_ in range(self.criteria_rounds):
            board = open_board(Task("race"))
            clients = self.clients_of(board, len(agents))
            winners = concurrent_claim(board, "race", agents, clients=clients)
            self._close_clients()
            assert winners == 1, f"round {round_ + 1}: {winners} agents won the same claim"

    def test_duplicate_token_submit_has_exactly_one_success(self, open_board: OpenBoard) -> None:
        """SPEC 5: workers completing with one token at once: exactly one succeeds, each round."""
        for round_ in range(self.criteria_rounds):
            board = open_board(Task("race"))
            clients = self.clients_of(board, self.criteria_participants)
            successes = duplicate_token_submit(
                board, "race", self.criteria_participants, clients=clients
            )
            self._close_clients()
            assert successes == 1, f"round {round_ + 1}: {successes} completes with one token"


#: In wall mode, an example test's tick in the machine's TTL units: 20 ms with the defaults, so
#: the tests' margins outlast a sleep that overshoots on a loaded machine.
WALL_TICK_UNITS = 4
#: In wall mode, the longest an example test's ``clock.advance`` sleeps, in ticks.
WALL_LONGEST_SLEEP = 10


class _SleepingClock(ManualClock):
    """The wall clock for the example tests in wall mode (SPEC 7): moving it sleeps.

    ``advance(delta)`` sleeps ``delta`` (at most :data:`WALL_LONGEST_SLEEP` ticks: "however
    long we wait" need not be days) and then ``landing`` more, the skew and resolution
    past the target, so that "at until" lands after the board's until, not on it.
    """

    def __init__(self, tick: timedelta, landing: timedelta) -> None:
        super().__init__(SystemClock().now())
        self._tick = tick
        self._landing = landing
        self._wall: Clock = SystemClock()

    def now(self) -> datetime:
        return self._wall.now()

    def advance(self, delta: timedelta) -> datetime:
        target = self.now() + min(delta, WALL_LONGEST_SLEEP * self._tick) + self._landing
        sleep_until(self._wall, target)
        return self.now()

    def set(self, when: datetime) -> datetime:
        sleep_until(self._wall, when + self._landing)
        return self.now()

    def __repr__(self) -> str:
        return "SystemClock()"
