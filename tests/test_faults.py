"""Infrastructure faults: the fault-injection wrapper, strict and tolerant mode, timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import (
    Board,
    BoardError,
    ClaimRequest,
    FailingBoard,
    LeaseLostError,
    ManualClock,
    RenewingBoard,
    State,
    TakenError,
    Task,
)
from taskboard._driver import BOARD_METHODS
from taskboard._fuzz import fuzz
from taskboard.faults import InjectedFault, InjectedFaultRecord, inject_faults
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import MUTANTS, RenewWithoutTokenCheck
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.model import ContractViolation
from taskboard.stateful import BoardMachine, CallTimeoutError, InfrastructureFault, replay_trace
from tests.async_hosts import AsyncDictBoard

QUICK = settings(max_examples=60, database=None, derandomize=True)


def run(machine: type[BoardMachine], chosen: settings = QUICK) -> None:
    run_state_machine_as_test(machine, settings=chosen)


def memory(tasks: Sequence[Task] = (Task("t1"),)) -> MemoryBoard:
    return MemoryBoard(tasks, ManualClock())


# -- the wrapper ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 1.5}, "rate must be in [0, 1]"),
        ({"rate": -0.1}, "rate must be in [0, 1]"),
        ({"kinds": ()}, "kinds must be some of"),
        ({"kinds": ("sideways",)}, "kinds must be some of"),
        ({"latency": timedelta(seconds=-1)}, "latency must not be negative"),
        ({"methods": ("claim", "delete")}, "['delete'] are not Board methods"),
    ],
)
def test_inject_faults_rejects_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    """inject_faults raises ValueError naming the bad setting, before wrapping anything."""
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        inject_faults(memory(), **kwargs)


def test_a_fault_before_the_call_leaves_the_board_unchanged() -> None:
    """kind "before": InjectedFault, took_effect False, and the board never saw the call."""
    inner = memory()
    board = inject_faults(inner, rate=1, kinds=["before"])
    with pytest.raises(InjectedFault) as raised:
        board.claim("t1", "a1", ClaimRequest())
    assert raised.value.took_effect is False
    assert raised.value.method == "claim"
    assert inner.list_tasks()[0].state is State.OPEN


def test_a_fault_after_the_call_loses_the_reply_of_a_call_that_took_effect() -> None:
    """kind "after": the claim is on the board, yet the caller gets InjectedFault."""
    inner = memory()
    board = inject_faults(inner, rate=1, kinds=["after"])
    with pytest.raises(InjectedFault, match="after it took effect") as raised:
        board.claim("t1", "a1", ClaimRequest())
    assert raised.value.took_effect is True
    assert isinstance(raised.value, ConnectionError)
    assert inner.list_tasks()[0].state is State.CLAIMED


def test_a_fault_after_a_rejected_call_replaces_the_contract_error() -> None:
    """kind "after" on a call the board rejects: the reply (the error) is lost too."""
    board = inject_faults(memory(), rate=1, kinds=["after"])
    with pytest.raises(InjectedFault, match="after the board rejected it") as raised:
        board.release("t1", "no such token")
    assert raised.value.took_effect is False


def test_latency_delays_the_call_and_then_lets_it_through() -> None:
    """kind "latency": the call is slower by the latency and returns normally."""
    board = inject_faults(memory(), rate=1, kinds=["latency"], latency=timedelta(milliseconds=50))
    started = time.monotonic()
    task = board.claim("t1", "a1", ClaimRequest())
    assert time.monotonic() - started >= 0.05
    assert task.state is State.CLAIMED


def test_the_same_seed_puts_the_same_faults_on_the_same_calls() -> None:
    """Faults are drawn per call from the seed: two runs of one call sequence match."""

    def faults(seed: int) -> list[InjectedFaultRecord]:
        board = inject_faults(memory(), rate=0.3, seed=seed, kinds=["before"])
        for _ in range(50):
            with contextlib.suppress(InjectedFault):
                board.list_tasks()
        return list(board.injected)  # type: ignore[attr-defined]

    assert faults(7) == faults(7)
    assert faults(7) != faults(8)
    assert 5 < len(faults(7)) < 30


def test_methods_limits_which_calls_fail() -> None:
    """Only the listed methods fail; the others never do."""
    board = inject_faults(memory(), rate=1, kinds=["before"], methods=["claim"])
    assert [t.id for t in board.list_tasks()] == ["t1"]
    with pytest.raises(InjectedFault):
        board.claim("t1", "a1", ClaimRequest())


def test_the_wrapper_has_renew_and_fail_exactly_when_the_board_has_them() -> None:
    """isinstance against RenewingBoard and FailingBoard answers as for the wrapped board."""

    class Minimal:
        def list_tasks(self) -> list[Task]:
            return []

        def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
            raise NotImplementedError

        def release(self, task_id: str, token: str) -> None: ...

        def complete(self, task_id: str, token: str) -> None: ...

    full = inject_faults(memory(), rate=0)
    bare = inject_faults(Minimal(), rate=0)
    assert isinstance(full, RenewingBoard)
    assert isinstance(full, FailingBoard)
    assert isinstance(bare, Board)
    assert not isinstance(bare, RenewingBoard)
    assert not isinstance(bare, FailingBoard)


def test_other_attributes_are_the_wrapped_boards() -> None:
    """close() and the policy pin pass through to the wrapped board."""
    inner = SQLiteBoard([Task("t1")], ManualClock())
    board = inject_faults(inner, rate=0)
    assert board.expired_lease_policy == "reject"  # type: ignore[attr-defined]
    board.close()  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="closed"):
        inner.list_tasks()


def test_the_wrapper_of_an_async_board_is_async() -> None:
    """An async board's wrapper has coroutine methods, and injects its faults when awaited."""
    board: Any = inject_faults(AsyncDictBoard([Task("t1")], ManualClock()), rate=1, kinds=["after"])

    async def claim() -> None:
        await board.claim("t1", "a1", ClaimRequest())

    with pytest.raises(InjectedFault, match="after it took effect"):
        asyncio.run(claim())
    assert asyncio.run(board.board.list_tasks())[0].state is State.CLAIMED


# -- strict mode ---------------------------------------------------------------------------------


def test_strict_mode_reports_injected_faults_as_infrastructure_faults() -> None:
    """A correct board behind 5% faults: an InfrastructureFault, never a ContractViolation."""
    machine = BoardMachine.for_board(
        lambda tasks, clock: inject_faults(MemoryBoard(tasks, clock), rate=0.05, seed=3),
        expired_lease_policy="accept",
    )
    with pytest.raises(InfrastructureFault) as raised:
        run(machine)
    fault = raised.value
    assert not isinstance(fault, ContractViolation)
    assert isinstance(fault.exception, InjectedFault)
    assert fault.__cause__ is fault.exception
    text = str(fault)
    assert "infrastructure fault at " in text
    assert "taskboard.faults" in text
    assert "tolerate_faults = True" in text
    assert fault.trace
    assert fault.trace[-1] == fault.step or "list_tasks()" in text


class KeyErrorBoard(MemoryBoard):
    """Raises KeyError for an unknown id, where the contract names NotFoundError."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if task_id not in {t.id for t in self.list_tasks()}:
            raise KeyError(task_id)
        return super().claim(task_id, agent, request)


def test_a_fault_report_names_the_step_what_the_contract_allowed_and_the_exception() -> None:
    """An exception the contract does not name is a fault; the report shows what was allowed."""
    machine = BoardMachine.for_board(KeyErrorBoard)
    with pytest.raises(InfrastructureFault) as raised:
        run(machine)
    fault = raised.value
    assert isinstance(fault.exception, KeyError)
    assert fault.step is not None
    assert fault.step.call is not None
    assert fault.step.call.task_id == "t404"
    text = str(fault)
    assert f"infrastructure fault at step {fault.step.index}" in text
    assert "the board raised KeyError, not a contract outcome" in text
    assert "allowed   NotFoundError (SPEC 3" in text
    assert "fault     KeyError: 't404'" in text


class FlakyListBoard(MemoryBoard):
    """list_tasks fails every third time with an OSError."""

    def __init__(self, tasks: Sequence[Task], clock: ManualClock) -> None:
        super().__init__(tasks, clock)
        self.reads = 0

    def list_tasks(self) -> list[Task]:
        self.reads += 1
        if self.reads % 3 == 0:
            raise OSError("connection reset by peer")
        return super().list_tasks()


def test_a_failed_snapshot_is_a_fault_after_the_step_it_followed() -> None:
    """list_tasks() raising a non-contract error is reported as a fault, not SPEC 3.7."""
    with pytest.raises(InfrastructureFault, match=r"infrastructure fault at list_tasks\(\)"):
        run(BoardMachine.for_board(FlakyListBoard))


def test_tolerant_mode_reads_the_snapshot_again_after_a_failed_read() -> None:
    """In tolerant mode a failed list_tasks() is read again, and the run passes."""
    run(BoardMachine.for_board(FlakyListBoard, tolerate_faults=True))


def test_a_failing_make_board_is_a_fault_at_set_up() -> None:
    """make_board raising ConnectionError: a fault at make_board, not a crash or a violation."""

    def unreachable(tasks: Sequence[Task], clock: ManualClock) -> Board:
        raise ConnectionError("connection refused")

    with pytest.raises(InfrastructureFault, match=r"infrastructure fault at make_board"):
        run(BoardMachine.for_board(unreachable))


# -- timeouts ------------------------------------------------------------------------------------


class HangingClaim(MemoryBoard):
    """claim waits forever, as on a lock nobody releases."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        threading.Event().wait()
        raise AssertionError("unreachable")


class AsyncHangingClaim(AsyncDictBoard):
    """claim awaits forever, as on a reply that never comes."""

    async def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.mark.parametrize("board", [HangingClaim, AsyncHangingClaim])
def test_a_call_that_hangs_is_cut_off_and_reported_once(board: type[Any]) -> None:
    """A hung call ends the run with one timeout report, without a timeout per shrink step."""
    case = BoardMachine.for_board(board, call_timeout=timedelta(seconds=0.3)).TestCase
    case.settings = settings(QUICK, max_examples=1000)
    started = time.monotonic()
    with pytest.raises(InfrastructureFault) as raised:
        case("runTest").runTest()
    elapsed = time.monotonic() - started
    assert isinstance(raised.value.exception, CallTimeoutError)
    assert "a call hung" in str(raised.value)
    assert "within the per-call timeout of 0.3 s" in str(raised.value)
    # Generous: one timeout (0.3 s) plus Hypothesis's shrinking of instant failures. A
    # retry per shrink step would take 0.3 s each, well past this bound.
    assert elapsed < 15, elapsed


def test_a_timeout_is_not_tolerated() -> None:
    """Tolerant mode still ends the run on a timeout: the cut-off call may land later."""
    machine = BoardMachine.for_board(
        HangingClaim, call_timeout=timedelta(seconds=0.2), tolerate_faults=True
    )
    with pytest.raises(InfrastructureFault, match="a call hung"):
        machine.TestCase("runTest").runTest()


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"call_timeout": 5}, "call_timeout must be a positive timedelta or None"),
        ({"call_timeout": timedelta(0)}, "call_timeout must be a positive timedelta or None"),
        ({"tolerate_faults": "yes"}, "tolerate_faults must be True, False or a tuple"),
        ({"tolerate_faults": ()}, "tolerate_faults must be True, False or a tuple"),
        ({"tolerate_faults": (KeyError, 3)}, "tolerate_faults must be True, False or a tuple"),
    ],
)
def test_bad_fault_settings_are_rejected_before_anything_runs(
    attributes: dict[str, Any], message: str
) -> None:
    """A bad call_timeout or tolerate_faults is a TypeError naming it, before any board is made."""
    made: list[object] = []

    def factory(tasks: Sequence[Task], clock: ManualClock) -> Board:
        made.append(tasks)
        return MemoryBoard(tasks, clock)

    with pytest.raises(TypeError, match=message):
        run(BoardMachine.for_board(factory, **attributes))
    assert made == []


# -- tolerant mode -------------------------------------------------------------------------------


def tolerant(factory: Any, **attributes: Any) -> type[BoardMachine]:
    return BoardMachine.for_board(factory, tolerate_faults=True, **attributes)


@pytest.mark.slow
@pytest.mark.parametrize("host", [MemoryBoard, SQLiteBoard])
def test_tolerant_mode_passes_a_correct_board_behind_faults(host: type[Any]) -> None:
    """5% faults of every kind on a correct host: tolerant mode finds no violation."""

    def faulty(tasks: Sequence[Task], clock: ManualClock) -> Board:
        # One seed for every board: a replayed example must meet the same faults.
        board = inject_faults(host(tasks, clock), rate=0.05, seed=5)
        boards.append(board)
        return board

    boards: list[Any] = []
    machine = tolerant(faulty, expired_lease_policy=host.expired_lease_policy)
    run(machine, settings(QUICK, max_examples=150))
    assert sum(len(b.injected) for b in boards) > 20


def test_faults_that_differ_between_runs_of_an_example_do_not_make_the_draws_flaky() -> None:
    """Tolerant mode: a claim that met a fault on one run of an example and not on another
    (a restart's timing, a dropped connection) changes no draw, so Hypothesis raises no
    FlakyStrategyDefinition."""
    seeds = itertools.count()

    def faulty(tasks: Sequence[Task], clock: ManualClock) -> Board:
        # A new seed for every board: the faults fall elsewhere each time an example runs.
        # Reads never fail, so that no run ends on five failed reads in a row.
        operations = [m for m in BOARD_METHODS if m != "list_tasks"]
        return inject_faults(
            MemoryBoard(tasks, clock), rate=0.2, seed=next(seeds), methods=operations
        )

    run(tolerant(faulty), settings(QUICK, max_examples=200))
    assert next(seeds) >= 200


@pytest.mark.deep
@pytest.mark.parametrize("host", [MemoryBoard, SQLiteBoard])
def test_a_deep_tolerant_run_over_a_correct_board_finds_no_violation(host: type[Any]) -> None:
    """Deep: 2,000 examples behind 5% faults of every kind, zero violations."""
    machine = tolerant(
        lambda tasks, clock: inject_faults(host(tasks, clock), rate=0.05, seed=11),
        expired_lease_policy=host.expired_lease_policy,
    )
    run(machine, settings(QUICK, max_examples=2000, derandomize=False))


class WriteHalfOnFault(MemoryBoard):
    """On a dropped connection, claim leaves the task CLAIMED with no owner or lease."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        task = super().claim(task_id, agent, request)
        if task.lease is not None and task.lease.fence == 2:
            self._tasks[task_id] = dataclasses.replace(task, owner="", lease=None)
            raise ConnectionError("connection dropped mid-write")
        return task


def test_tolerant_mode_reports_a_snapshot_that_matches_neither_outcome() -> None:
    """A fault that leaves a half-written task: a violation naming both candidate states."""
    with pytest.raises(ContractViolation) as raised:
        run(tolerant(WriteHalfOnFault, expired_lease_policy="accept"))
    text = str(raised.value)
    assert "failed with an infrastructure fault" in text
    assert "matches neither" in text
    assert "infrastructure fault: the call's effect is unknown" in text


#: The mutants whose bug a single thread can reach on the manual clock (the others are races,
#: for the criteria, or need the wall clock and the declarations their class carries).
SEQUENTIAL_MUTANTS = [
    m
    for m in MUTANTS
    if not getattr(m, "concurrent", False) and getattr(m, "clock_mode", "manual") == "manual"
]


@pytest.mark.slow
@pytest.mark.parametrize("mutant", SEQUENTIAL_MUTANTS, ids=lambda m: m.__name__)
def test_faults_do_not_hide_a_mutant(mutant: type[MemoryBoard]) -> None:
    """Every sequential mutant behind 5% faults is still caught in tolerant mode."""
    machine = tolerant(
        lambda tasks, clock: inject_faults(mutant(tasks, clock), rate=0.05, seed=1),
        expired_lease_policy=mutant.expired_lease_policy,
    )
    with pytest.raises(ContractViolation):
        run(machine, settings(QUICK, max_examples=300))


def test_renew_without_token_check_behind_faults_is_caught_in_strict_mode_too() -> None:
    """Strict mode on a faulty mutant: the run fails, as a violation or a fault, never passes."""
    machine = BoardMachine.for_board(
        lambda tasks, clock: inject_faults(RenewWithoutTokenCheck(tasks, clock), rate=0.05),
        expired_lease_policy="accept",
    )
    # Whether it fails is the point, not how short its trace shrinks: no shrinking, which on a
    # board behind faults replays each candidate through its injected latencies.
    with pytest.raises((ContractViolation, InfrastructureFault)):
        run(machine, settings(QUICK, phases=[Phase.generate]))


def test_lease_lost_after_a_tolerated_fault_is_still_a_contract_outcome() -> None:
    """A contract error is never taken for a fault: LeaseLostError stays an outcome."""
    board = inject_faults(memory(), rate=0)
    with pytest.raises(LeaseLostError):
        board.release("t1", "nobody's")


# -- review: what a fault must not do ------------------------------------------------------------


class BareBoardErrorClaim(MemoryBoard):
    """Rejects a live claim with a bare BoardError where the contract names TakenError."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        try:
            return super().claim(task_id, agent, request)
        except TakenError:
            raise BoardError("conflict") from None


def test_a_bare_board_error_is_judged_by_the_contract_not_tolerated() -> None:
    """Any BoardError is an outcome for the model to judge, even in tolerant mode."""
    with pytest.raises(ContractViolation, match="TakenError"):
        run(tolerant(BareBoardErrorClaim, expired_lease_policy="accept"))


def test_a_tuple_tolerates_only_the_listed_faults() -> None:
    """tolerate_faults=(ConnectionError,): a KeyError from the host's code is still a fault."""
    with pytest.raises(InfrastructureFault, match="KeyError") as raised:
        run(
            BoardMachine.for_board(
                KeyErrorBoard, tolerate_faults=(ConnectionError,), expired_lease_policy="accept"
            )
        )
    assert "add KeyError to tolerate_faults" in str(raised.value)


class TimingOutRelease(MemoryBoard):
    """release raises the driver-level TimeoutError a socket read gives."""

    def release(self, task_id: str, token: str) -> None:
        raise TimeoutError("timed out reading the reply")


def test_a_board_timeout_is_not_tolerated() -> None:
    """A TimeoutError from the board's own driver ends the run even in tolerant mode."""
    with pytest.raises(InfrastructureFault, match="TimeoutError") as raised:
        run(tolerant(TimingOutRelease, expired_lease_policy="accept"))
    assert "Timeouts are never tolerated" in str(raised.value)


class FailingClose(MemoryBoard):
    """close() fails: the connection is already gone."""

    def close(self) -> None:
        raise ConnectionError("connection already closed")


def test_a_failing_close_board_is_a_fault_at_close_board() -> None:
    """close_board raising, with nothing else wrong, is reported as a fault at close_board."""
    with pytest.raises(InfrastructureFault, match=r"infrastructure fault at close_board"):
        run(BoardMachine.for_board(FailingClose, expired_lease_policy="accept"))


class HangingClaimAndClose(HangingClaim):
    """close() waits on the lock the hung claim holds."""

    def close(self) -> None:
        threading.Event().wait()


def test_after_a_hang_the_board_is_not_closed() -> None:
    """A board hung in a call is left alone at teardown: one timeout, not one per close."""
    case = BoardMachine.for_board(
        HangingClaimAndClose, call_timeout=timedelta(seconds=0.3)
    ).TestCase
    case.settings = settings(QUICK, max_examples=1000)
    started = time.monotonic()
    with pytest.raises(InfrastructureFault, match="a call hung"):
        case("runTest").runTest()
    assert time.monotonic() - started < 15


class CoroutineClaim(MemoryBoard):
    """claim returns a coroutine from a plain method (a sync decorator on async code)."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Any:
        async def claimed() -> Task:
            return MemoryBoard.claim(self, task_id, agent, request)

        return claimed()


def test_a_coroutine_from_a_plain_method_is_a_clear_fault() -> None:
    """A sync-looking method returning a coroutine: a fault that says why, never awaited."""
    with pytest.raises(InfrastructureFault, match="returned an awaitable"):
        run(BoardMachine.for_board(CoroutineClaim, expired_lease_policy="accept"))


def test_an_outer_alarm_keeps_running_through_board_calls() -> None:
    """pytest-timeout's alarm (any outer ITIMER_REAL) is not paused by the per-call timeout."""
    import signal

    fired: list[float] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        started = time.monotonic()
        board = BoardMachine.for_board(MemoryBoard)
        # A paused (or re-armed) alarm would not go off while calls keep coming; the margin
        # is for a loaded machine, where a signal handler may run late.
        deadline = started + 6
        while not fired and time.monotonic() < deadline:
            run(board, settings(QUICK, max_examples=2))
        assert fired, "the outer alarm never went off"
        assert fired[0] - started < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class FlakyOnce(MemoryBoard):
    """The first claim of the process meets a network blip; no later call does."""

    blipped = False

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if not FlakyOnce.blipped:
            FlakyOnce.blipped = True
            raise ConnectionError("a blip")
        return super().claim(task_id, agent, request)


FlakyOnce.expired_lease_policy = "accept"  # type: ignore[misc]


def test_fuzz_reports_a_fault_that_does_not_recur_as_a_fault(tmp_path: Path) -> None:
    """A blip Hypothesis cannot replay (Flaky) in a sequential example is still a fault
    (exit 3), not a violation."""
    FlakyOnce.blipped = False
    report = fuzz(
        "tests.test_faults:FlakyOnce",
        budget=60,
        max_examples=50,
        mode="sequential",
        seed=1,
        database=str(tmp_path / "db"),
        trace_dir=str(tmp_path / "traces"),
        progress=None,
    )
    assert report.fault is True
    assert report.failure is not None
    assert "a blip" in report.failure


def test_replaying_on_an_unreachable_board_is_a_fault_not_a_verdict(tmp_path: Path) -> None:
    """replay_trace on a board that cannot be made raises InfrastructureFault."""
    machine = BoardMachine.for_board(MemoryBoard, expired_lease_policy="accept")
    instance = machine()
    instance.start(deps={"t1": (), "t2": (), "t3": ()}, start_ticks=0)
    instance.claim("t1", "a1", 5)
    trace = instance.to_trace()
    instance.teardown()

    def unreachable(tasks: Sequence[Task], clock: ManualClock) -> Board:
        raise ConnectionError("connection refused")

    with pytest.raises(InfrastructureFault, match="make_board"):
        replay_trace(trace, unreachable)


def test_the_per_call_timeout_arms_no_interval_timer_and_still_cuts_off() -> None:
    """A call through the direct driver finds no interval timer armed (the watchdog thread
    does the timing), and a call that sleeps past the timeout is still cut off."""
    import signal

    from taskboard._driver import CallTimeoutError, DirectDriver

    driver = DirectDriver(timedelta(seconds=0.2))
    try:
        assert driver.call(lambda: signal.getitimer(signal.ITIMER_REAL)) == (0.0, 0.0)
        started = time.monotonic()
        with pytest.raises(CallTimeoutError, match="did not return within"):
            driver.call(time.sleep, 5)
        assert time.monotonic() - started < 2
        assert driver.call(lambda: "fine") == "fine"  # the next call is not cut off
    finally:
        driver.close()
