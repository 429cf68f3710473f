"""State per run: the listeners, stop conditions and first failures of one run are its own, so
two runs in one process (two threads, or a replay or fuzzing run inside another run) do not
hear each other's examples, stop each other, or take each other's failures."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis.errors import FlakyStrategyDefinition

from taskboard import Task
from taskboard._fuzz import FuzzOptions, fuzz
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import Call, ContractViolation, Op
from taskboard.stateful import BoardMachine, replay_trace
from taskboard.stateful._reports import failures_reported, unrepeated_failure
from taskboard.stateful._runstate import ExampleStats, current_run, separate_run
from taskboard.stateful._session import (
    Session,
    StopRequested,
    end_example,
    on_example_end,
    stop_when,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: How long a test's thread waits for the other before the test gives up (never reached).
PATIENCE = 30
MACHINE = BoardMachine.for_board(MemoryBoard, trace_target="")


def one_example() -> Session:
    """An example of one claim on a fresh MemoryBoard, ended (so its listeners hear of it)."""
    session = Session(MACHINE(), [Task("t1")], T0)
    try:
        session.perform(Call(Op.CLAIM, "t1", agent="a1", ttl=timedelta(seconds=10)))
    finally:
        end_example(session)
    return session


def in_threads(*bodies: Callable[[], None]) -> None:
    """Run each body in a thread of its own; raise the first error any of them raised (a
    StopRequested as an AssertionError, lest the KeyboardInterrupt end the test session)."""
    errors: list[BaseException] = []

    def guarded(body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:  # a StopRequested is a KeyboardInterrupt
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE)
    assert not any(thread.is_alive() for thread in threads)
    if errors and isinstance(errors[0], StopRequested):
        raise AssertionError("a thread's run was stopped") from errors[0]
    if errors:
        raise errors[0]


def test_runs_in_two_threads_hear_only_their_own_examples() -> None:
    """A listener in one thread does not hear the examples another thread's run ends while
    it listens."""
    heard_a: list[ExampleStats] = []
    heard_b: list[ExampleStats] = []
    a_listens, b_done = threading.Event(), threading.Event()

    def a() -> None:
        with on_example_end(heard_a.append):
            a_listens.set()
            assert b_done.wait(PATIENCE)
            one_example()

    def b() -> None:
        assert a_listens.wait(PATIENCE)
        with on_example_end(heard_b.append):
            one_example()
            end_example(None)
        b_done.set()

    in_threads(a, b)
    assert [example.steps for example in heard_a] == [1]
    assert [example.steps for example in heard_b] == [1, 0]


def test_a_stop_in_one_thread_does_not_stop_a_run_in_another() -> None:
    """A run whose stop condition is true stops; a run in another thread goes on meanwhile."""
    a_stopping, b_done = threading.Event(), threading.Event()
    stopped: list[bool] = []

    def a() -> None:
        with stop_when(lambda: True):
            a_stopping.set()
            assert b_done.wait(PATIENCE)
            with pytest.raises(StopRequested):
                one_example()
            stopped.append(True)

    def b() -> None:
        assert a_stopping.wait(PATIENCE)
        try:
            assert one_example().trace[0].outcome is not None
        finally:
            b_done.set()

    in_threads(a, b)
    assert stopped == [True]


@pytest.mark.skipif(
    bool(getattr(sys.flags, "thread_inherit_context", False)),
    reason="this Python hands a thread its starter's context, and with it the run",
)
def test_a_thread_begun_inside_a_run_is_no_part_of_it() -> None:
    """A thread starts with no run under way: the run it was started in does not hear its
    examples or stop them."""
    heard: list[ExampleStats] = []
    seen_in_thread: list[object] = []

    def body() -> None:
        seen_in_thread.append(current_run())
        one_example()

    with on_example_end(heard.append), stop_when(lambda: True):
        in_threads(body)
    assert seen_in_thread == [None]
    assert heard == []


def test_a_listener_with_no_run_under_way_begins_one_for_its_block() -> None:
    """Outside any run, on_example_end begins a run; stop_when and failures_reported inside
    it join that run; once the block ends no run is under way, and an example then is
    heard by no one and stopped by nothing."""
    heard: list[ExampleStats] = []
    assert current_run() is None
    with on_example_end(heard.append):
        run = current_run()
        assert run is not None
        with failures_reported(MACHINE), stop_when(lambda: False):
            assert current_run() is run
            assert len(run.stop_conditions) == 1
            one_example()
        assert run.stop_conditions == []
    assert current_run() is None
    assert run.listeners == []
    one_example()
    assert [example.steps for example in heard] == [1]


def test_a_run_begun_apart_inside_another_is_heard_and_stopped_apart() -> None:
    """Inside a run, separate_run begins one of its own: the outer listener and stop do not
    reach its examples, its listener does not hear the outer run's, and after it the outer
    run is under way again."""
    outer: list[ExampleStats] = []
    inner: list[ExampleStats] = []
    stop = [False]
    with on_example_end(outer.append), stop_when(lambda: stop[0]):
        around = current_run()
        stop[0] = True
        with separate_run() as apart, on_example_end(inner.append):
            assert current_run() is apart is not around
            one_example()
            one_example()
        assert current_run() is around
        with pytest.raises(StopRequested):
            one_example()
        stop[0] = False
        one_example()
    assert len(inner) == 2
    assert len(outer) == 1


def test_a_replay_inside_a_run_is_a_run_of_its_own() -> None:
    """replay_trace inside a run whose stop condition is true replays every step, and the
    run's listener does not count the replay's example as one of its own."""
    trace = one_example().to_trace()
    heard: list[ExampleStats] = []
    with on_example_end(heard.append), stop_when(lambda: True):
        try:
            result = replay_trace(trace, MemoryBoard)
        except StopRequested:
            pytest.fail("the run around the replay stopped it")
    assert result.passed
    assert result.steps_run == 1
    assert heard == []


def test_a_fuzzing_run_inside_a_run_is_a_run_of_its_own(tmp_path: Path) -> None:
    """A fuzzing run inside a run whose stop condition is true runs all its examples, and the
    run around it does not hear them."""
    heard: list[ExampleStats] = []
    options = FuzzOptions(seed=1, database=str(tmp_path / "db"), max_examples=5)
    with on_example_end(heard.append), stop_when(lambda: True):
        report = fuzz(
            "taskboard.hosts.memory:MemoryBoard",
            options.replace(mode="sequential"),
            progress=None,
        )
    assert report.failure is None
    assert report.examples == 5
    assert heard == []


def report_then_give_up_drawing(ready: threading.Event, go_on: threading.Event) -> None:
    """In a run for MACHINE: report a violation, wait, then end as a wall-clock replay that
    drew differently does (a FlakyStrategyDefinition carrying no failure)."""
    with failures_reported(MACHINE):
        session = Session(MACHINE(), [Task("t1")], T0)
        with contextlib.suppress(ContractViolation):
            session.fail_with(ContractViolation("SPEC 3.1", "TakenError", "a lease"), None)
        end_example(session)
        ready.set()
        assert go_on.wait(PATIENCE)
        raise FlakyStrategyDefinition("Inconsistent data generation!")


def test_a_run_in_another_thread_does_not_take_a_runs_first_failure() -> None:
    """A run of the same machine class beginning and ending in another thread leaves this
    run's first failure in place, so its FlakyStrategyDefinition still reports the
    violation it saw."""
    ready, go_on = threading.Event(), threading.Event()
    reported: list[BaseException] = []

    def a() -> None:
        try:
            report_then_give_up_drawing(ready, go_on)
        except ContractViolation as violation:
            reported.append(violation)

    def b() -> None:
        assert ready.wait(PATIENCE)
        try:
            with failures_reported(MACHINE):
                pass
        finally:
            go_on.set()

    in_threads(a, b)
    assert len(reported) == 1
    assert "did not recur" in str(reported[0])


def test_a_run_begun_apart_sees_no_failure_of_the_run_around_it() -> None:
    """The first failure a run reported is not lent to a run begun apart inside it."""
    with failures_reported(MACHINE):
        session = Session(MACHINE(), [Task("t1")], T0)
        with contextlib.suppress(ContractViolation):
            session.fail_with(ContractViolation("SPEC 3.1", "TakenError", "a lease"), None)
        end_example(session)
        flaky = FlakyStrategyDefinition("Inconsistent data generation!")
        with separate_run():
            assert unrepeated_failure(flaky, MACHINE) is None
        seen = unrepeated_failure(flaky, MACHINE)
        assert seen is not None
        assert "did not recur" in str(seen)
