"""LoopDriver's fast path: in its own thread a call's task takes its first step at once,
and the loop runs only when the coroutine waits for something.

Each test would fail if the fast path broke: a coroutine that never waits must not turn
the loop, and everything a coroutine sees of asyncio (the running loop, its task, its
context, async generators' hooks, timeouts, cancellation) must be as if the loop ran it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import threading
import time
import traceback
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from taskboard._driver import CallTimeoutError, LoopDriver

TIMEOUT = timedelta(seconds=0.3)

WHERE = contextvars.ContextVar[str]("WHERE", default="caller")


@pytest.fixture(params=[None, TIMEOUT], ids=["no timeout", "timeout"])
def driver(request: pytest.FixtureRequest) -> Iterator[LoopDriver]:
    made = LoopDriver(request.param)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def timed() -> Iterator[LoopDriver]:
    made = LoopDriver(TIMEOUT)
    try:
        yield made
    finally:
        made.close()


def count_turns(driver: LoopDriver) -> list[int]:
    """A counter of the times the driver's loop is run (``run_forever``) from now on."""
    turns = [0]
    loop: Any = driver.loop
    run_forever = loop.run_forever

    def counted() -> None:
        turns[0] += 1
        run_forever()

    loop.run_forever = counted
    return turns


# -- a coroutine that never waits ----------------------------------------------------------------


def test_a_coroutine_that_never_waits_returns_without_turning_the_loop(
    driver: LoopDriver,
) -> None:
    """Its result comes from the task's first step, taken in place: the loop never runs."""
    turns = count_turns(driver)

    async def instant(value: int) -> int:
        return value * 2

    assert [driver.call(instant, n) for n in range(5)] == [0, 2, 4, 6, 8]
    assert turns == [0]


def test_a_coroutine_run_in_place_sees_the_loop_its_task_and_its_own_context(
    driver: LoopDriver,
) -> None:
    """As on the loop: the running loop is the driver's, current_task() is a task of it,
    the thread is the caller's, and a context variable it sets stays in its task."""
    seen: dict[str, Any] = {}

    async def look() -> None:
        seen["loop"] = asyncio.get_running_loop()
        seen["running"] = asyncio.get_running_loop().is_running()
        task = asyncio.current_task()
        seen["task"] = task
        seen["task loop"] = task.get_loop() if task is not None else None
        seen["thread"] = threading.current_thread()
        seen["where before"] = WHERE.get()
        WHERE.set("board")

    hooks = sys.get_asyncgen_hooks()
    assert driver.call(look) is None
    assert seen["loop"] is driver.loop
    assert seen["running"] is True
    assert isinstance(seen["task"], asyncio.Task)
    assert seen["task loop"] is driver.loop
    assert seen["thread"] is threading.current_thread()
    assert seen["where before"] == "caller"
    assert WHERE.get() == "caller"
    # ...and nothing of the loop stays set up in the caller's thread afterwards.
    assert asyncio._get_running_loop() is None
    assert not driver.loop.is_running()
    assert sys.get_asyncgen_hooks() == hooks


def test_a_plain_function_through_a_loop_driver_runs_on_the_loop(driver: LoopDriver) -> None:
    """A sync function (a host's plain close_board, say) is called inside the task too."""
    turns = count_turns(driver)
    assert driver.call(asyncio.get_running_loop) is driver.loop
    assert turns == [0]


def test_an_exception_raised_before_any_await_keeps_the_boards_traceback(
    driver: LoopDriver,
) -> None:
    async def refuses_at_once() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused") as raised:
        driver.call(refuses_at_once)
    names = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert names[-1] == "refuses_at_once"


def test_a_failed_call_leaves_no_reference_cycle_behind(driver: LoopDriver) -> None:
    """The task of a call that raised is freed when the exception is, by reference
    counting: no cycle (task, its exception, the traceback's frames, the task) is left for
    the garbage collector, a failed call at a time."""
    tasks: list[weakref.ref[asyncio.Task[Any]]] = []

    async def refuses() -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(weakref.ref(task))
        del task  # this frame is in the exception's traceback too
        raise ValueError("refused")

    gc.collect()
    gc.disable()
    try:
        with pytest.raises(ValueError, match="refused"):
            driver.call(refuses)
        assert tasks[0]() is None
    finally:
        gc.enable()


def test_asyncio_timeout_and_locks_work_in_the_first_step(driver: LoopDriver) -> None:
    """redis.asyncio enters asyncio.timeout (which needs current_task()) and takes locks
    before its first real await: both work in a step taken in place."""
    lock = asyncio.Lock()

    async def guarded() -> str:
        async with asyncio.timeout(5), lock:
            return "done"

    async def too_slow() -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)

    turns = count_turns(driver)
    assert driver.call(guarded) == "done"
    assert turns == [0]
    with pytest.raises(TimeoutError) as raised:
        driver.call(too_slow)
    assert type(raised.value) is TimeoutError  # the board's own, not the driver's
    assert driver.call(guarded) == "done"  # the lock was released, the loop still works


def test_a_task_started_by_a_call_that_never_waits_takes_its_first_step(
    driver: LoopDriver,
) -> None:
    """Callbacks a finished call scheduled get the turn of the loop they would have had."""
    steps: list[str] = []
    background: list[asyncio.Task[None]] = []

    async def work() -> None:
        steps.append("background started")
        await asyncio.sleep(0)
        steps.append("background went on")

    async def starts() -> str:
        background.append(asyncio.get_running_loop().create_task(work()))
        return "started"

    assert driver.call(starts) == "started"
    assert steps[:1] == ["background started"]
    driver.call(asyncio.sleep, 0)
    assert steps == ["background started", "background went on"]
    assert background[0].done()


def test_callbacks_left_by_an_earlier_call_run_before_the_next_call(
    driver: LoopDriver,
) -> None:
    """A callback still pending when a call returned runs before the next call's coroutine,
    as when the loop ran every call."""
    order: list[str] = []

    async def chains() -> None:
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: loop.call_soon(order.append, "left over"))

    async def records() -> None:
        order.append("next call")

    driver.call(chains)
    driver.call(records)
    assert order == ["left over", "next call"]


def test_async_generators_started_in_place_are_closed_with_the_loop() -> None:
    """The loop's async generator hooks are set for a step taken in place: the loop knows
    the generator and finalizes it at close (shutdown_asyncgens)."""
    finalized: list[bool] = []
    kept: list[AsyncIterator[int]] = []

    async def numbers() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finalized.append(True)

    async def first() -> int:
        generator = numbers()
        kept.append(generator)
        return await generator.__anext__()  # its first item is there at once

    driver = LoopDriver(TIMEOUT)
    turns = count_turns(driver)
    assert driver.call(first) == 1
    assert turns == [0]
    assert not finalized
    driver.close()
    assert finalized == [True]


# -- a coroutine that waits midway ---------------------------------------------------------------


def test_a_coroutine_that_waits_midway_gets_its_result(driver: LoopDriver) -> None:
    """Past its first step the same task goes on on the loop: same task, same context."""
    seen: list[object] = []
    turns = count_turns(driver)

    async def waits(value: int) -> int:
        WHERE.set("board")
        task = asyncio.current_task()
        seen.append(threading.current_thread())
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # a bare yield
        future = loop.create_future()
        loop.call_soon(future.set_result, value)
        got: int = await future  # a future the loop resolves
        await asyncio.sleep(0.01)  # a timer
        assert asyncio.current_task() is task
        assert WHERE.get() == "board"
        seen.append(threading.current_thread())
        return got + 1

    assert driver.call(waits, 41) == 42
    assert seen == [threading.current_thread()] * 2
    assert turns == [1]
    assert WHERE.get() == "caller"
    assert driver.call(waits, 1) == 2


def test_an_exception_raised_after_an_await_keeps_the_boards_traceback(
    driver: LoopDriver,
) -> None:
    async def refuses_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    with pytest.raises(KeyError, match="later") as raised:
        driver.call(refuses_later)
    names = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert names[-1] == "refuses_later"


def test_a_boards_own_timeout_error_after_an_await_is_not_the_drivers(
    timed: LoopDriver,
) -> None:
    async def own_timeout() -> None:
        await asyncio.sleep(0)
        raise TimeoutError("the server said so")

    with pytest.raises(TimeoutError, match="the server said so") as raised:
        timed.call(own_timeout)
    assert type(raised.value) is TimeoutError


# -- timeouts --------------------------------------------------------------------------------------


def cut_off_in_time(driver: LoopDriver, hangs: Callable[[], Any]) -> CallTimeoutError:
    started = time.monotonic()
    with pytest.raises(CallTimeoutError, match=r"per-call timeout of 0\.3 s") as raised:
        driver.call(hangs)
    assert time.monotonic() - started < 3
    return raised.value


def test_a_call_that_runs_in_place_then_waits_forever_is_cancelled(timed: LoopDriver) -> None:
    """Its first step ran in place; the wait after it is cancelled at the timeout, and the
    coroutine sees the cancellation (its clean-up runs)."""
    steps: list[str] = []

    async def hangs() -> None:
        steps.append("ran in place")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            steps.append("cancelled")
            raise

    cut_off_in_time(timed, hangs)
    assert steps == ["ran in place", "cancelled"]
    assert timed.call(asyncio.sleep, 0, "still works") == "still works"
    assert not timed.wedged


def test_a_coroutine_that_blocks_before_any_await_is_cut_off(timed: LoopDriver) -> None:
    """The first step, taken in place, is watched as a direct call is."""

    async def blocks() -> None:
        time.sleep(5)

    stuck = cut_off_in_time(timed, blocks)
    assert stuck.__cause__ is not None  # where the board was when it was cut off
    assert timed.call(asyncio.sleep, 0, "still works") == "still works"


def test_a_coroutine_that_blocks_after_an_await_is_cut_off(timed: LoopDriver) -> None:
    async def blocks_later() -> None:
        await asyncio.sleep(0)
        time.sleep(5)

    cut_off_in_time(timed, blocks_later)
    assert timed.call(asyncio.sleep, 0, "still works") == "still works"


def test_the_timeout_counts_the_first_step_too() -> None:
    """A call that spends most of its time in place, then waits, is cut off at the one
    deadline, not a full timeout after its first await."""

    async def slow_then_waits() -> None:
        time.sleep(0.8)  # under the timeout
        await asyncio.sleep(5)

    driver = LoopDriver(timedelta(seconds=1))
    try:
        started = time.monotonic()
        with pytest.raises(CallTimeoutError):
            driver.call(slow_then_waits)
        assert time.monotonic() - started < 1.5  # not 0.8 + 1
    finally:
        driver.close()


def test_a_coroutine_that_finishes_despite_the_cancellation_returns_its_result(
    timed: LoopDriver,
) -> None:
    """As with asyncio.wait_for: a coroutine that swallows the cancellation and returns
    has its result returned."""

    async def stubborn() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "finished anyway"
        return "slept"

    assert timed.call(stubborn) == "finished anyway"
