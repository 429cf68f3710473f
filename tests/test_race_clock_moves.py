"""A move of the manual or virtual clock inside a controlled race (issue 33): the clock
crosses a lease's until between two turns, as a turn of its own, so an expiry racing a
renew is explored, reported and replayed as exactly as two claims racing."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from taskboard import Clock
from taskboard._schedule import CLOCK, RaceScheduler
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import (
    BoardMachine,
    ContractViolation,
    parse_trace,
    replay_trace,
    run_parallel_state_machine,
    trace_to_json,
    violations_in,
)
from taskboard.stateful._generation import TASK_IDS
from taskboard.stateful._parallel import run_program
from taskboard.stateful._steps import ActStep, ClaimStep, ExpiryStep, ParallelProgram


class _Stamped:
    """A clock that, in a thread holding a stamp, reads the stamp instead of the time."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.local = threading.local()

    def now(self) -> datetime:
        stamp: datetime | None = getattr(self.local, "stamp", None)
        return stamp or self.clock.now()


class ClockBeforeBegin(SQLiteBoard):
    """Bug: every operation reads the clock before ``BEGIN IMMEDIATE`` waits for the write
    lock, SQLite's own ``now()`` before ``FOR UPDATE``: a renew that read the time before a
    release committed in between extends a lease that release found expired."""

    def __init__(self, tasks: Any, clock: Any, path: Path, **options: Any) -> None:
        stamped = clock if isinstance(clock, _Stamped) else _Stamped(clock)
        super().__init__(tasks, stamped, path, **options)  # type: ignore[arg-type]

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        stamped: _Stamped = self._clock  # type: ignore[assignment]
        stamped.local.stamp = stamped.clock.now()
        try:
            with super()._transaction() as conn:
                yield conn
        finally:
            stamped.local.stamp = None


def quick(examples: int) -> settings:
    """Derandomized settings for ``examples`` programs, no database."""
    return settings(
        max_examples=examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
    )  # fmt: skip


def on_files(board: type[SQLiteBoard], directory: Path) -> type[BoardMachine]:
    """A controlled machine whose boards are ``board`` on a fresh file in ``directory`` each."""
    directory.mkdir(exist_ok=True)
    paths = (directory / f"board{n}.db" for n in itertools.count())
    return BoardMachine.for_board(
        lambda tasks, clock: board(tasks, clock, next(paths)),
        race_scheduling="controlled",
        trace_target="",
    )


#: A lease of one tick, the clock one tick before its until; a renew starts, the clock moves
#: to the until (before turn 1), and a release starts and runs to its end before the renew
#: takes SQLite's write lock.
RENEW_ACROSS_THE_MOVE = ParallelProgram(
    dict.fromkeys(TASK_IDS, ()),
    (ClaimStep(TASK_IDS[0], "a1", 1), ExpiryStep(TASK_IDS[0], 1)),
    ((ActStep("renew", TASK_IDS[0], "latest", 5),), (ActStep("release", TASK_IDS[0], "latest"),)),
    schedule=(0, 0, 1, 1, 1, 1, 1, 1),
)


def test_a_renew_across_the_clock_move_fails_every_run_and_replays(tmp_path: Path) -> None:
    """The clock-before-BEGIN board fails the program on 10 runs of 10; the report lists the
    move as a turn and each call's side of it; the trace replays it 10 times of 10."""
    machine = on_files(ClockBeforeBegin, tmp_path)
    for _ in range(10):
        with pytest.raises(ContractViolation) as caught:
            run_program(machine, RENEW_ACROSS_THE_MOVE, record=False)
    violation = violations_in(caught.value)[0]
    report = str(violation)
    assert "2. clock jumps to exactly L1's until" in report
    assert "renew('t1', token=L1, ttl=5ms) -> ok fence=1  (across the clock's move)" in report
    assert "release('t1', token=L1) -> LeaseLostError  (after the clock's move)" in report
    recording = violation.recording
    assert recording is not None
    trace = parse_trace(trace_to_json(recording))
    assert trace.program == recording.program
    paths = (tmp_path / f"replay{n}.db" for n in itertools.count())
    for _ in range(10):
        result = replay_trace(
            trace, lambda tasks, clock: ClockBeforeBegin(tasks, clock, next(paths))
        )
        assert (result.passed, result.steps_run) == (False, 1)


def test_without_the_move_or_with_the_reference_board_the_program_passes(tmp_path: Path) -> None:
    """The same race with the clock already at the until (lead 0: no move) passes on the
    clock-before-BEGIN board, and with the move on SQLiteBoard: the move finds the bug."""
    still = dataclasses.replace(
        RENEW_ACROSS_THE_MOVE, prefix=(RENEW_ACROSS_THE_MOVE.prefix[0], ExpiryStep(TASK_IDS[0]))
    )
    assert run_program(on_files(ClockBeforeBegin, tmp_path), still, record=False) is True
    reference = on_files(SQLiteBoard, tmp_path / "reference")
    assert run_program(reference, RENEW_ACROSS_THE_MOVE, record=False)


def test_correct_boards_give_no_false_alarm_when_the_clock_moves_mid_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLiteBoard and MemoryBoard under control on the manual clock: no violation, and the
    clock did move inside some of the races."""
    moves: list[int] = []
    cross = RaceScheduler._cross

    def counted(self: RaceScheduler) -> None:
        cross(self)
        if self.turns and self.turns[-1].agent == CLOCK and len(moves) < len(self.turns):
            moves.append(len(self.turns))

    monkeypatch.setattr(RaceScheduler, "_cross", counted)
    run_parallel_state_machine(on_files(SQLiteBoard, tmp_path), settings=quick(25))
    memory = BoardMachine.for_board(MemoryBoard, race_scheduling="controlled")
    run_parallel_state_machine(memory, settings=quick(25))
    assert moves
