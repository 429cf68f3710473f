"""Tests for the two concurrency criteria, against small in-test boards."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest

from taskboard import (
    BlockedError,
    ClaimRequest,
    CriterionError,
    Lease,
    LeaseLostError,
    ManualClock,
    NotFoundError,
    State,
    TakenError,
    Task,
    TerminalError,
    concurrent_claim,
    duplicate_token_submit,
)

AGENTS = ["a", "b", "a", "c", "a", "b", "c", "a"]  # names repeat on purpose
SHORT = 0.3  # seconds: the timeout used where a participant is meant to hang
GATE_WAIT = 10.0  # seconds a hanging participant blocks at most, should teardown never open it


class LockedBoard:
    """A correct board: every operation reads, checks and writes under one lock."""

    def __init__(self, *task_ids: str, deps: dict[str, tuple[str, ...]] | None = None) -> None:
        self.clock = ManualClock()
        self.lock = threading.Lock()
        self.tasks = {tid: Task(tid, deps=(deps or {}).get(tid, ())) for tid in task_ids}
        self.tokens = itertools.count(1)
        self.fences: dict[str, int] = {}
        self.claims: list[tuple[str, str, ClaimRequest]] = []

    def list_tasks(self) -> list[Task]:
        with self.lock:
            return list(self.tasks.values())

    def check_claim(self, task_id: str, agent: str) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            raise NotFoundError(task_id)
        if task.state is State.DONE:
            raise TerminalError(task_id)
        if any(self.tasks[dep].state is not State.DONE for dep in task.deps):
            raise BlockedError(task_id)
        lease = task.lease
        live = lease is not None and (lease.until is None or self.clock.now() < lease.until)
        if task.state is State.CLAIMED and live:
            raise TakenError(task_id)
        if not agent:
            raise ValueError("empty agent")

    def write_claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        fence = self.fences.get(task_id, 0) + 1
        self.fences[task_id] = fence
        until = self.clock.now() + request.ttl if request.ttl > timedelta(0) else None
        lease = Lease(f"tok-{next(self.tokens)}", fence, until)
        task = self.tasks[task_id]
        task = replace(task, state=State.CLAIMED, owner=agent, lease=lease, seq=task.seq + 1)
        self.tasks[task_id] = task
        return task

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self.lock:
            self.claims.append((task_id, agent, request))
            self.check_claim(task_id, agent)
            return self.write_claim(task_id, agent, request)

    def check_token(self, task_id: str, token: str) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            raise NotFoundError(task_id)
        if task.state is not State.CLAIMED or task.lease is None or task.lease.token != token:
            raise LeaseLostError(task_id)

    def write_end(self, task_id: str, state: State) -> None:
        task = self.tasks[task_id]
        self.tasks[task_id] = replace(task, state=state, owner="", lease=None, seq=task.seq + 1)

    def release(self, task_id: str, token: str) -> None:
        with self.lock:
            self.check_token(task_id, token)
            self.write_end(task_id, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        with self.lock:
            self.check_token(task_id, token)
            self.write_end(task_id, State.DONE)


class NonAtomicClaimBoard(LockedBoard):
    """Reads and checks, does some I/O, then writes: two agents can both see OPEN."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self.lock:
            self.check_claim(task_id, agent)
        time.sleep(0.001)
        with self.lock:
            return self.write_claim(task_id, agent, request)


class CheckThenWriteCompleteBoard(LockedBoard):
    """Validates the token, does some I/O, then writes DONE: one token can complete twice."""

    def complete(self, task_id: str, token: str) -> None:
        with self.lock:
            self.check_token(task_id, token)
        time.sleep(0.001)
        with self.lock:
            self.write_end(task_id, State.DONE)


class FlakyBoard(LockedBoard):
    """Its connection drops for the agent named "flaky" and, if asked, for every complete."""

    def __init__(self, *task_ids: str, drop_complete: bool = False, **kw: object) -> None:
        super().__init__(*task_ids, **kw)  # type: ignore[arg-type]
        self.drop_complete = drop_complete

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if agent in ("flaky", "duplicate-token-submit") and not self.drop_complete:
            raise ConnectionError(f"connection reset while claiming for {agent}")
        return super().claim(task_id, agent, request)

    def complete(self, task_id: str, token: str) -> None:
        if self.drop_complete:
            raise ConnectionError("connection reset while completing")
        super().complete(task_id, token)


class HangingBoard(LockedBoard):
    """Its calls for the agent named "stuck" (or, if asked, every complete) block on a gate."""

    def __init__(self, gate: threading.Event, *task_ids: str, hang: str = "claim") -> None:
        super().__init__(*task_ids)
        self.gate = gate
        self.hang = hang

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if self.hang == "claim" and agent in ("stuck", "duplicate-token-submit"):
            self.gate.wait(GATE_WAIT)
        return super().claim(task_id, agent, request)

    def complete(self, task_id: str, token: str) -> None:
        if self.hang == "complete":
            self.gate.wait(GATE_WAIT)
        super().complete(task_id, token)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event hanging participants block on; opened at teardown so their threads end."""
    event = threading.Event()
    yield event
    event.set()


# --- the criteria judge correct and broken boards -------------------------------------------


def test_correct_board_has_exactly_one_claim_winner_every_round() -> None:
    """An atomic claim yields one winner per round, with repeating agent names."""
    for _ in range(50):
        assert concurrent_claim(LockedBoard("t1"), "t1", AGENTS) == 1


def test_correct_board_has_exactly_one_complete_success_every_round() -> None:
    """An atomic complete lets one submitter of a shared token through per round."""
    for _ in range(50):
        board = LockedBoard("t1")
        assert duplicate_token_submit(board, "t1", 8) == 1
        assert board.list_tasks()[0].state is State.DONE


def test_non_atomic_claim_is_caught_with_several_winners() -> None:
    """A read-sleep-write claim shows more than one winner within a few rounds."""
    counts = [concurrent_claim(NonAtomicClaimBoard("t1"), "t1", AGENTS) for _ in range(5)]
    assert max(counts) > 1, counts


def test_check_then_write_complete_is_caught_with_several_successes() -> None:
    """A validate-sleep-write complete lets one token succeed more than once within a few rounds."""
    counts = [duplicate_token_submit(CheckThenWriteCompleteBoard("t1"), "t1", 8) for _ in range(5)]
    assert max(counts) > 1, counts


def test_zero_winners_is_returned_not_raised() -> None:
    """Every agent losing with TakenError is a count of 0 for the caller to judge, not an error."""
    board = LockedBoard("t1")
    board.claim("t1", "holder", ClaimRequest())
    assert concurrent_claim(board, "t1", AGENTS) == 0


def test_zero_successes_is_returned_not_raised() -> None:
    """Every submitter losing with LeaseLostError is a count of 0, not an error."""

    class RejectingBoard(LockedBoard):
        def complete(self, task_id: str, token: str) -> None:
            raise LeaseLostError(task_id)

    assert duplicate_token_submit(RejectingBoard("t1"), "t1", 4) == 0


def test_claims_carry_the_ttl() -> None:
    """Every agent's claim, and the set-up claim, ask for ClaimRequest(ttl)."""
    ttl = timedelta(minutes=5)
    board = LockedBoard("t1", "t2")
    assert concurrent_claim(board, "t1", AGENTS, ttl) == 1
    assert duplicate_token_submit(board, "t2", 3, ttl) == 1
    assert {req for _, _, req in board.claims} == {ClaimRequest(ttl)}
    assert [agent for tid, agent, _ in board.claims if tid == "t2"] == ["duplicate-token-submit"]
    winner = next(t for t in board.list_tasks() if t.id == "t1")
    assert winner.lease is not None
    assert winner.lease.until == board.clock.now() + ttl


# --- faults and inconclusive runs -------------------------------------------------------------


def test_connection_error_is_an_infrastructure_fault_not_a_loser() -> None:
    """A ConnectionError from one agent raises CriterionError("infrastructure fault") holding it."""
    agents = ["flaky", *AGENTS[1:]]
    with pytest.raises(CriterionError) as info:
        concurrent_claim(FlakyBoard("t1"), "t1", agents)
    err = info.value
    assert err.verdict == "infrastructure fault"
    assert len(err.exceptions) == 1
    assert isinstance(err.exceptions[0], ConnectionError)
    assert "1 winner, 6 losers raising TakenError and 1 other outcome" in err.message
    assert any("agent #0" in note for note in err.exceptions[0].__notes__)


def test_blocked_task_is_inconclusive_and_carries_every_error() -> None:
    """Every agent rejected with BlockedError raises CriterionError("inconclusive") with all 8."""
    board = LockedBoard("t1", "dep", deps={"t1": ("dep",)})
    with pytest.raises(CriterionError) as info:
        concurrent_claim(board, "t1", AGENTS)
    assert info.value.verdict == "inconclusive"
    assert len(info.value.exceptions) == len(AGENTS)
    assert all(isinstance(exc, BlockedError) for exc in info.value.exceptions)
    assert info.value.message.startswith("inconclusive: ")


def test_a_non_exception_from_a_participant_is_an_infrastructure_fault() -> None:
    """A SystemExit inside a claim is wrapped in a RuntimeError: an infrastructure fault."""

    class ExitingBoard(LockedBoard):
        def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
            raise SystemExit(3)

    with pytest.raises(CriterionError) as info:
        concurrent_claim(ExitingBoard("t1"), "t1", ["a", "b"])
    assert info.value.verdict == "infrastructure fault"
    assert all(isinstance(exc, RuntimeError) for exc in info.value.exceptions)
    assert all(isinstance(exc.__cause__, SystemExit) for exc in info.value.exceptions)


def test_failed_setup_claim_of_a_done_task_is_inconclusive() -> None:
    """Set-up claim of a DONE task: CriterionError("inconclusive") holding the TerminalError."""
    board = LockedBoard("t1")
    board.complete("t1", board.claim("t1", "x", ClaimRequest()).lease.token)  # type: ignore[union-attr]
    with pytest.raises(CriterionError) as info:
        duplicate_token_submit(board, "t1", 4)
    assert info.value.verdict == "inconclusive"
    assert [type(exc) for exc in info.value.exceptions] == [TerminalError]
    assert "could not set up" in info.value.message


def test_failed_setup_claim_from_the_connection_is_an_infrastructure_fault() -> None:
    """A ConnectionError from the set-up claim raises CriterionError("infrastructure fault")."""
    with pytest.raises(CriterionError) as info:
        duplicate_token_submit(FlakyBoard("t1"), "t1", 4)
    assert info.value.verdict == "infrastructure fault"
    assert [type(exc) for exc in info.value.exceptions] == [ConnectionError]


def test_setup_claim_without_a_lease_is_an_infrastructure_fault() -> None:
    """A set-up claim that returns no lease token raises CriterionError holding a TypeError."""

    class LeaselessBoard(LockedBoard):
        def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
            super().claim(task_id, agent, request)
            return Task(task_id)

    with pytest.raises(CriterionError) as info:
        duplicate_token_submit(LeaselessBoard("t1"), "t1", 4)
    assert info.value.verdict == "infrastructure fault"
    assert [type(exc) for exc in info.value.exceptions] == [TypeError]


def test_connection_error_from_complete_is_an_infrastructure_fault() -> None:
    """Every submitter failing with ConnectionError is collected, none counted as a loser."""
    with pytest.raises(CriterionError) as info:
        duplicate_token_submit(FlakyBoard("t1", drop_complete=True), "t1", 5)
    assert info.value.verdict == "infrastructure fault"
    assert len(info.value.exceptions) == 5
    assert "0 successes, 0 losers" in info.value.message


def test_except_star_splits_the_group_and_keeps_the_verdict() -> None:
    """except* splits the ConnectionError from the BlockedErrors; each part keeps the verdict."""
    board = FlakyBoard("t1", "dep", deps={"t1": ("dep",)})
    picked: dict[str, BaseExceptionGroup[BaseException]] = {}
    try:
        concurrent_claim(board, "t1", ["flaky", *AGENTS[1:]])
    except* ConnectionError as group:
        picked["connection"] = group
    except* BlockedError as group:
        picked["blocked"] = group
    connection, blocked = picked["connection"], picked["blocked"]
    assert isinstance(connection, CriterionError)
    assert isinstance(blocked, CriterionError)
    assert len(connection.exceptions) == 1
    assert len(blocked.exceptions) == len(AGENTS) - 1
    assert connection.verdict == blocked.verdict == "infrastructure fault"


# --- never hang -------------------------------------------------------------------------------


def test_hanging_claim_is_an_infrastructure_fault_within_the_timeout(gate: threading.Event) -> None:
    """A claim that never returns is reported as a TimeoutError naming it, not waited for."""
    started = time.monotonic()
    with pytest.raises(CriterionError) as info:
        concurrent_claim(HangingBoard(gate, "t1"), "t1", ["stuck", "a", "b"], timeout=SHORT)
    assert time.monotonic() - started < SHORT + 5
    err = info.value
    assert err.verdict == "infrastructure fault"
    assert len(err.exceptions) == 1
    assert isinstance(err.exceptions[0], TimeoutError)
    assert "agent #0" in str(err.exceptions[0])
    assert "'stuck'" in str(err.exceptions[0])
    assert "1 of them timed out" in err.message


def test_hanging_setup_claim_is_an_infrastructure_fault(gate: threading.Event) -> None:
    """A set-up claim that never returns raises CriterionError within the timeout."""
    started = time.monotonic()
    with pytest.raises(CriterionError) as info:
        duplicate_token_submit(HangingBoard(gate, "t1"), "t1", 3, timeout=SHORT)
    assert time.monotonic() - started < SHORT + 5
    assert info.value.verdict == "infrastructure fault"
    assert [type(exc) for exc in info.value.exceptions] == [TimeoutError]


def test_hanging_complete_is_an_infrastructure_fault(gate: threading.Event) -> None:
    """Submitters that never return are each reported as a TimeoutError, within the timeout."""
    started = time.monotonic()
    with pytest.raises(CriterionError) as info:
        duplicate_token_submit(HangingBoard(gate, "t1", hang="complete"), "t1", 3, timeout=SHORT)
    assert time.monotonic() - started < SHORT + 5
    assert info.value.verdict == "infrastructure fault"
    assert [type(exc) for exc in info.value.exceptions] == [TimeoutError] * 3


# --- argument validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agents", "error"),
    [
        ([], ValueError),
        (["a", ""], ValueError),
        (["a", 1], TypeError),
        ("abc", TypeError),
        ({"a", "b"}, TypeError),
    ],
)
def test_bad_agents_are_rejected_before_any_claim(agents: object, error: type[Exception]) -> None:
    """Empty, blank, non-string or string-as-list agents raise before the board is touched."""
    board = LockedBoard("t1")
    with pytest.raises(error):
        concurrent_claim(board, "t1", agents)  # type: ignore[arg-type]
    assert board.claims == []


@pytest.mark.parametrize(
    ("workers", "error"), [(0, ValueError), (-2, ValueError), (True, TypeError), (2.0, TypeError)]
)
def test_bad_workers_are_rejected_before_any_claim(workers: object, error: type[Exception]) -> None:
    """workers below 1 or not an int raise before the set-up claim."""
    board = LockedBoard("t1")
    with pytest.raises(error):
        duplicate_token_submit(board, "t1", workers)  # type: ignore[arg-type]
    assert board.claims == []


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
     ("5", TypeError), (timedelta(seconds=5), TypeError), (False, TypeError)],
)  # fmt: skip
def test_bad_timeouts_are_rejected(timeout: object, error: type[Exception]) -> None:
    """timeout must be a positive finite number of seconds, for both criteria."""
    board = LockedBoard("t1")
    with pytest.raises(error):
        concurrent_claim(board, "t1", AGENTS, timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(error):
        duplicate_token_submit(board, "t1", 2, timeout=timeout)  # type: ignore[arg-type]
    assert board.claims == []


def test_negative_ttl_and_bad_board_or_task_id_are_rejected() -> None:
    """A negative ttl, a board without the needed methods or a non-string id raise up front."""
    board = LockedBoard("t1")
    with pytest.raises(ValueError, match="negative"):
        concurrent_claim(board, "t1", AGENTS, timedelta(seconds=-1))
    with pytest.raises(ValueError, match="negative"):
        duplicate_token_submit(board, "t1", 2, timedelta(seconds=-1))
    with pytest.raises(TypeError, match="claim"):
        concurrent_claim(object(), "t1", AGENTS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="complete"):
        duplicate_token_submit(type("ClaimOnly", (), {"claim": board.claim})(), "t1", 2)
    with pytest.raises(TypeError, match="task_id"):
        concurrent_claim(board, 1, AGENTS)  # type: ignore[arg-type]
    assert board.claims == []
