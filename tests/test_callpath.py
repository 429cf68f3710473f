"""The one call path (make_call, its interceptors) and the one race engine (threads, processes)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from taskboard import ClaimRequest, ManualClock, Task
from taskboard._callpath import Interceptor, make_call
from taskboard._race import Preset, WorkerPool, race_on_threads, worker_pool
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.model import Call, Op
from taskboard.stateful import BoardMachine
from taskboard.stateful._client_clocks import ClientClock
from taskboard.stateful._parallel import _run_threads
from taskboard.stateful._session import Session
from taskboard.stateful._steps import ParallelProgram
from taskboard.strategies import grid_start

HOUR = timedelta(hours=1)
CLAIM = Call(Op.CLAIM, "t1", agent="a1", ttl=HOUR)


def memory(*ids: str) -> MemoryBoard:
    return MemoryBoard([Task(i) for i in ids or ("t1",)], ManualClock())


class Dropping(MemoryBoard):
    """Every claim fails as a dropped connection would."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        raise ConnectionError("dropped")


def recording(name: str, log: list[str]) -> Interceptor:
    def intercept(call: Call) -> Generator[None, object, None]:
        log.append(f"{name} before {call.op}")
        try:
            returned = yield
        except BaseException as exc:
            log.append(f"{name} saw {type(exc).__name__}")
            raise
        log.append(f"{name} saw {type(returned).__name__}")

    return intercept


def test_make_call_records_the_outcome_and_when() -> None:
    """A returned call's record holds the outcome, the value and both pairs of stamps."""
    clock = ManualClock()
    made = make_call(CLAIM, memory(), clock=clock)
    assert made.outcome.ok
    assert not made.ambiguous
    assert isinstance(made.value, Task)
    assert made.outcome.task == made.value
    assert made.invoked <= made.returned
    assert made.started == made.ended == clock.now()


def test_a_contract_error_is_an_outcome_and_a_fault_is_ambiguous() -> None:
    """A contract error is a definite outcome; an exception the contract does not name is an
    ambiguous one; neither is raised, and both keep the exception."""
    taken = memory()
    taken.claim("t1", "other", ClaimRequest())
    rejected = make_call(CLAIM, taken)
    assert rejected.outcome.error == "TakenError"
    assert not rejected.ambiguous
    dropped = make_call(CLAIM, Dropping([Task("t1")], ManualClock()))
    assert dropped.ambiguous
    assert isinstance(dropped.error, ConnectionError)
    assert dropped.portable().error is None
    assert dropped.portable().outcome == dropped.outcome


def test_interceptors_wrap_the_call_the_first_outermost() -> None:
    """Each interceptor runs before the call and sees its outcome after, in nested order."""
    log: list[str] = []
    made = make_call(CLAIM, memory(), [recording("outer", log), recording("inner", log)])
    assert made.outcome.ok
    assert log == ["outer before claim", "inner before claim", "inner saw Task", "outer saw Task"]


def test_interceptors_see_what_the_call_raised() -> None:
    """An exception from the board is thrown in at each interceptor's yield, then recorded."""
    log: list[str] = []
    made = make_call(CLAIM, Dropping([Task("t1")], ManualClock()), [recording("only", log)])
    assert made.ambiguous
    assert log == ["only before claim", "only saw ConnectionError"]


def test_an_interceptor_that_raises_before_the_call_stops_it() -> None:
    """Raising before the yield is the call's outcome, and the board is never called."""

    def refuse(call: Call) -> Generator[None, object, None]:
        raise ConnectionRefusedError("no route")
        yield

    board = memory()
    made = make_call(CLAIM, board, [refuse])
    assert made.ambiguous
    assert isinstance(made.error, ConnectionRefusedError)
    assert board.list_tasks()[0].lease is None


def test_an_interceptor_that_raises_after_the_call_replaces_its_outcome() -> None:
    """Raising after the yield turns a call that took effect into that exception (a lost reply)."""

    def lose_reply(call: Call) -> Generator[None, object, None]:
        yield
        raise ConnectionResetError("reply lost")

    board = memory()
    made = make_call(CLAIM, board, [lose_reply])
    assert isinstance(made.error, ConnectionResetError)
    assert board.list_tasks()[0].lease is not None


def test_an_interceptor_that_returns_leaves_an_exception_standing() -> None:
    """An interceptor that catches the call's exception and returns does not swallow it."""

    def swallow(call: Call) -> Generator[None, object, None]:
        try:
            yield
        except Exception:
            return

    made = make_call(CLAIM, Dropping([Task("t1")], ManualClock()), [swallow])
    assert isinstance(made.error, ConnectionError)


def test_a_malformed_interceptor_is_a_type_error_outcome() -> None:
    """An interceptor that yields twice, or never, makes the call's outcome a TypeError."""

    def twice(call: Call) -> Generator[None, object, None]:
        yield
        yield

    def never(call: Call) -> Generator[None, object, None]:
        return
        yield

    assert "more than once" in str(make_call(CLAIM, memory(), [twice]).error)
    assert "did not yield" in str(make_call(CLAIM, memory(), [never]).error)


def test_a_keyboard_interrupt_propagates_after_the_interceptors_saw_it() -> None:
    """A BaseException is no outcome: the interceptors see it, then make_call raises it."""
    log: list[str] = []

    class Interrupted(MemoryBoard):
        def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make_call(CLAIM, Interrupted([Task("t1")], ManualClock()), [recording("only", log)])
    assert log == ["only before claim", "only saw KeyboardInterrupt"]


def test_a_session_with_client_skew_installs_the_client_clocks() -> None:
    """A run with client_clock_skew has a ClientClock on its call path; one without, nothing."""
    for skew, installed in ((timedelta(0), ()), (timedelta(milliseconds=20), (ClientClock,))):
        machine = BoardMachine.for_board(MemoryBoard, clock_mode="wall", client_clock_skew=skew)
        session = Session(machine(), [Task("t1")], grid_start(timedelta(microseconds=1)))
        try:
            assert tuple(type(i) for i in session.interceptors) == installed
        finally:
            session.close()


# -- the race engine -------------------------------------------------------------------------------


def test_every_participant_makes_its_calls_with_its_own_tokens() -> None:
    """Each thread's makers see the tokens of its own claims, and every call is in its lane."""

    def complete_mine(mine: Mapping[str, str]) -> Call:
        return Call(Op.COMPLETE, "t1", token=mine.get("t1", "none"))

    board = memory()
    claim = Preset(Call(Op.CLAIM, "t1", agent="a1"))
    lanes = race_on_threads([board, board], [[claim, complete_mine], []], timeout=30)
    assert [len(lane.made) for lane in lanes] == [2, 0]
    assert all(lane.started and lane.finished and lane.crash is None for lane in lanes)
    assert [made.outcome.ok for made in lanes[0].made] == [True, True]


def test_a_participant_past_the_deadline_is_left_running() -> None:
    """A participant whose call has not returned at the deadline is reported unfinished."""
    gate = threading.Event()

    class Hanging(MemoryBoard):
        def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
            gate.wait(30)
            return super().claim(task_id, agent, request)

    board = Hanging([Task("t1")], ManualClock())
    try:
        lanes = race_on_threads([board], [[Preset(CLAIM)]], timeout=30, deadline=0.0)
    finally:
        gate.set()
    assert not lanes[0].finished
    assert lanes[0].made == ()


def test_a_maker_that_raises_ends_its_participant_with_a_crash() -> None:
    """An exception outside the board call is the lane's crash, not a call outcome."""

    def broken(mine: Mapping[str, str]) -> Call:
        raise LookupError("no such step")

    (lane,) = race_on_threads([memory()], [[broken]], timeout=30)
    assert isinstance(lane.crash, LookupError)
    assert lane.made == ()


class _TimeClock:
    """A clock that reads time.time(), as a library judging time on its client does."""

    def now(self) -> datetime:
        return datetime.fromtimestamp(time.time(), UTC)


def open_time_board() -> MemoryBoard:
    """In a worker process: a board whose leases start at the caller's time.time()."""
    return MemoryBoard([Task("t1")], _TimeClock())


def test_client_clocks_reach_worker_processes() -> None:
    """A ClientClock that pickles shifts time.time() inside a worker process's calls: the
    first agent's client runs an hour slow there."""
    no_leases: dict[str, str] = {}  # a claim's client is its agent's
    clock = ClientClock(HOUR, no_leases.get)
    with WorkerPool(1) as pool:
        (lane,) = pool.race(open_time_board, [[Preset(CLAIM)]], timeout=60, interceptors=[clock])
    (made,) = lane.made
    assert made.outcome.task is not None
    assert made.outcome.task.lease is not None
    until = made.outcome.task.lease.until
    assert made.started is not None
    assert until is not None
    assert abs(until - HOUR - made.started + HOUR) < timedelta(minutes=1)


def test_a_run_keeps_one_worker_pool_for_all_its_races() -> None:
    """worker_pool() inside a run's own gives the run's pool; a new run gets a new one."""
    with worker_pool() as run, worker_pool() as inner:
        assert inner is run
    with worker_pool() as later:
        assert later is not run


def exit_abruptly() -> MemoryBoard:
    """In a worker process: die as a crashed driver would."""
    os._exit(3)


def test_a_pool_whose_worker_died_starts_anew_for_the_next_race() -> None:
    """A worker that dies breaks its race with BrokenProcessPool; the next race gets a new pool."""
    with WorkerPool(1) as pool:
        with pytest.raises(BrokenProcessPool):
            pool.race(exit_abruptly, [[Preset(CLAIM)]], timeout=60)
        (lane,) = pool.race(open_time_board, [[Preset(CLAIM)]], timeout=60)
    assert lane.finished
    assert lane.made[0].outcome.ok


def test_a_run_with_client_skew_sends_its_client_clocks_to_the_worker_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--processes with client_clock_skew: the run's races in processes carry a ClientClock."""
    sent: list[Sequence[Interceptor]] = []

    def race(self: WorkerPool, *args: Any, interceptors: Sequence[Interceptor], **kw: Any) -> Any:
        sent.append(interceptors)
        return []

    monkeypatch.setattr(WorkerPool, "race", race)
    machine = BoardMachine.for_board(
        lambda tasks, clock: SQLiteBoard(tasks, clock, str(tmp_path / "board.db")),
        clock_mode="wall",
        client_clock_skew=HOUR,
        parallel_processes=True,
    )
    session = Session(machine(), [Task("t1")], grid_start(timedelta(microseconds=1)), parallel=True)
    try:
        _run_threads(session, ParallelProgram(deps={}, prefix=(), threads=((),)), variant=0)
    finally:
        session.close()
    assert [[type(i) for i in interceptors] for interceptors in sent] == [[ClientClock]]
