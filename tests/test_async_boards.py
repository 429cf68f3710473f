"""Async boards (coroutine methods) under BoardMachine, BoardContract and the criteria."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import ClaimRequest, ManualClock, Task, concurrent_claim, duplicate_token_submit
from taskboard._fuzz import fuzz
from taskboard.boardtest import BoardContract
from taskboard.model import ContractViolation
from taskboard.stateful import BoardMachine, InfrastructureFault, run_parallel_state_machine
from tests.async_hosts import AsyncDictBoard

QUICK = settings(max_examples=100, database=None, derandomize=True)


class TestAsyncDictBoardContract(BoardContract):
    """The whole suite on an async board made and closed by ``async def`` hooks."""

    expired_lease_policy = "accept"
    machine_settings = settings(max_examples=60, derandomize=True, database=None)
    parallel_settings = settings(max_examples=15, derandomize=True, database=None)
    criteria_rounds = 5

    async def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> AsyncDictBoard:
        asyncio.get_running_loop()  # made on the loop the board's calls run on
        return AsyncDictBoard(tasks, clock)

    async def close_board(self, board: AsyncDictBoard) -> None:
        await board.aclose()


class LoopWitness(BoardMachine):
    """Records the loop (and thread) make_board, the calls and close_board ran on."""

    expired_lease_policy = "accept"
    seen: ClassVar[list[tuple[str, asyncio.AbstractEventLoop, threading.Thread]]] = []

    async def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> Any:
        self.seen.append(("make", asyncio.get_running_loop(), threading.current_thread()))
        witness = self

        class Board(AsyncDictBoard):
            async def list_tasks(self) -> list[Task]:
                loop = asyncio.get_running_loop()
                witness.seen.append(("call", loop, threading.current_thread()))
                return await super().list_tasks()

        return Board(tasks, clock)

    async def close_board(self, board: Any) -> None:
        self.seen.append(("close", asyncio.get_running_loop(), threading.current_thread()))
        await board.aclose()


def test_one_loop_per_example_runs_make_board_every_call_and_close_board() -> None:
    """Each example gets its own loop, run in the machine's own thread (no hand-off to
    another thread for each call), closed after close_board."""
    LoopWitness.seen = []
    run_state_machine_as_test(LoopWitness, settings=settings(QUICK, max_examples=5))
    examples: list[list[tuple[str, asyncio.AbstractEventLoop, threading.Thread]]] = []
    for entry in LoopWitness.seen:
        if entry[0] == "make":
            examples.append([])
        examples[-1].append(entry)
    assert len(examples) == 5
    loops = set()
    for entries in examples:
        assert entries[0][0] == "make"
        assert entries[-1][0] == "close"
        assert len({loop for _, loop, _ in entries}) == 1
        assert all(thread is threading.main_thread() for _, _, thread in entries)
        loop = entries[0][1]
        assert loop.is_closed()
        loops.add(loop)
    assert len(loops) == 5


def test_a_sync_factory_may_return_an_async_board() -> None:
    """for_board with a plain class whose methods are coroutines: driven on a loop, passes."""
    run_state_machine_as_test(
        BoardMachine.for_board(AsyncDictBoard, expired_lease_policy="accept"), settings=QUICK
    )


@pytest.mark.slow
def test_an_async_renew_without_token_check_is_caught() -> None:
    """The async mutant (renew ignores the token) is caught through BoardMachine."""

    def mutant(tasks: Sequence[Task], clock: ManualClock) -> AsyncDictBoard:
        return AsyncDictBoard(tasks, clock, check_renew_token=False)

    machine = BoardMachine.for_board(mutant, expired_lease_policy="accept")
    with pytest.raises(ContractViolation) as raised:
        run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=300))
    violation = raised.value
    assert violation.step is not None
    assert violation.step.call is not None
    assert violation.step.call.op == "renew"
    assert "LeaseLostError" in violation.expected


def test_the_criteria_interleave_an_async_claim_at_its_await() -> None:
    """concurrent_claim on an async board whose claim awaits between check and write: >1 wins."""
    board = AsyncDictBoard([Task("race")], ManualClock(), atomic_claim=False)
    assert concurrent_claim(board, "race", ["a1", "a2"] * 4) > 1


def test_the_criteria_pass_an_atomic_async_board() -> None:
    """Both criteria on a correct async board: exactly one winner, exactly one success."""
    assert concurrent_claim(AsyncDictBoard([Task("race")], ManualClock()), "race", ["a"] * 8) == 1
    board = AsyncDictBoard([Task("race")], ManualClock())
    assert duplicate_token_submit(board, "race", 8) == 1


def test_criteria_take_the_board_by_keyword_too() -> None:
    """The criteria keep their signature: board= by keyword works for sync and async boards."""
    board = AsyncDictBoard([Task("race")], ManualClock())
    assert concurrent_claim(board=board, task_id="race", agents=["a", "b"]) == 1


def test_an_async_make_board_that_raises_is_a_fault_at_set_up() -> None:
    """An async make_board raising ConnectionError is reported as an infrastructure fault."""

    async def unreachable(tasks: Sequence[Task], clock: ManualClock) -> AsyncDictBoard:
        raise ConnectionError("connection refused")

    with pytest.raises(InfrastructureFault, match="make_board") as raised:
        run_state_machine_as_test(BoardMachine.for_board(unreachable), settings=QUICK)
    assert isinstance(raised.value.exception, ConnectionError)


class CoreOnlyAsyncBoard:
    """An async board with the four Board methods only: no renew, no fail."""

    def __init__(self, tasks: Sequence[Task], clock: ManualClock) -> None:
        self.inner = AsyncDictBoard(tasks, clock)

    async def list_tasks(self) -> list[Task]:
        return await self.inner.list_tasks()

    async def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        return await self.inner.claim(task_id, agent, request)

    async def release(self, task_id: str, token: str) -> None:
        await self.inner.release(task_id, token)

    async def complete(self, task_id: str, token: str) -> None:
        await self.inner.complete(task_id, token)


def test_parallel_mode_on_an_async_board_without_renew_or_fail() -> None:
    """Threads whose operations the board lacks never hold a start line the others wait at."""
    machine = BoardMachine.for_board(CoreOnlyAsyncBoard, expired_lease_policy="accept")
    run_parallel_state_machine(machine, settings=settings(QUICK, max_examples=30))


def test_fuzz_runs_an_async_board_target(tmp_path: Path) -> None:
    """taskboard fuzz takes an async board class as its target, with no wrapper."""
    report = fuzz(
        "tests.async_hosts:AsyncDictBoard",
        budget=60,
        max_examples=30,
        seed=1,
        database=str(tmp_path / "db"),
        trace_dir=str(tmp_path / "traces"),
        progress=None,
    )
    assert report.failure is None
    assert report.examples + report.parallel_runs == 30  # a mixed run: races first
    assert report.parallel_runs == 3
    assert report.transitions[("open", "claim", "ok")] > 0


@pytest.mark.parametrize("timeout", [None, timedelta(seconds=0.3)], ids=["untimed", "timed"])
def test_a_call_from_another_thread_moves_the_loop_to_its_own_thread(
    timeout: timedelta | None,
) -> None:
    """A loop driver runs calls from its own thread in place (the fast path, timed or not);
    the first call from another thread moves the loop to a thread of its own, where later
    calls run, as tasks, from any thread."""
    from taskboard._driver import LoopDriver

    async def where() -> threading.Thread:
        return threading.current_thread()

    driver = LoopDriver(timeout)
    try:
        assert driver.call(where) is threading.main_thread()
        seen: list[threading.Thread] = []
        other = threading.Thread(target=lambda: seen.append(driver.call(where)))
        other.start()
        other.join(10)
        assert seen
        assert seen[0] is not threading.main_thread()
        assert seen[0] is not other
        assert driver.call(where) is seen[0]
    finally:
        driver.close()
    assert driver.loop.is_closed()


def test_an_async_call_past_the_timeout_is_cut_off_in_place() -> None:
    """In the driver's own thread an awaiting call past the timeout is cancelled, and one
    that blocks the loop itself is cut off by the watchdog: both are CallTimeoutError."""
    import time
    from datetime import timedelta

    from taskboard._driver import CallTimeoutError, LoopDriver

    async def awaits() -> None:
        await asyncio.sleep(5)

    async def blocks() -> None:
        time.sleep(5)

    driver = LoopDriver(timedelta(seconds=0.2))
    try:
        for hangs in (awaits, blocks):
            started = time.monotonic()
            with pytest.raises(CallTimeoutError):
                driver.call(hangs)
            assert time.monotonic() - started < 2, hangs.__name__
        assert driver.call(asyncio.sleep, 0) is None
    finally:
        driver.close()
