"""What a failing test shows under pytest: the report, not taskboard's internals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import pytest
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Clock, SystemClock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import BoardMachine, ContractViolation
from tests.test_machine import QUICK

MACHINE = """
from taskboard.hosts.mutants import RenewWithoutTokenCheck
from taskboard.stateful import BoardMachine


class BrokenMachine(BoardMachine):
    def make_board(self, tasks, clock):
        return RenewWithoutTokenCheck(tasks, clock)


TestBroken = BrokenMachine.TestCase
"""

CONTRACT = """
from taskboard.boardtest import BoardContract
from taskboard.hosts.mutants import RenewWithoutTokenCheck


class TestBroken(BoardContract):
    def make_board(self, tasks, clock):
        return RenewWithoutTokenCheck(tasks, clock)
"""


@pytest.mark.parametrize(
    ("source", "test"), [(MACHINE, "TestBroken"), (CONTRACT, "TestBroken::test_state_machine")]
)
def test_a_failure_shows_the_report_without_taskboards_frames(
    pytester: pytest.Pytester, source: str, test: str
) -> None:
    """A machine's TestCase or a BoardContract failing under pytest shows the violation and
    its trace under the public class path; no frame of the machine's internals, no
    Hypothesis frame, no explain-phase line pointing into taskboard."""
    pytester.makepyfile(test_board=source)
    result = pytester.runpytest_subprocess(f"test_board.py::{test}", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "taskboard.model.ContractViolation: contract violation at step" in output
    assert "clause    SPEC 3.5" in output
    assert "trace (clock starts at" in output
    for internal in ("def _perform", "self.model.advance", "hypothesis/stateful.py", "_model.py"):
        assert internal not in output, internal
    assert "Explanation:" not in output
    assert len([line for line in output.splitlines() if line.startswith(">")]) <= 2


class _ShiftedClock:
    """A clock ``shift`` away from another: a board's local time in another zone."""

    def __init__(self, clock: Clock, shift: timedelta) -> None:
        self.clock, self.shift = clock, shift

    def now(self) -> datetime:
        return self.clock.now() + self.shift


def _first_violation(factory: Callable[[Sequence[Task], Clock], Board]) -> str:
    machine = BoardMachine.for_board(factory)
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(machine, settings=QUICK)
    return str(caught.value)


def test_an_until_hours_off_is_reported_in_hours_with_a_time_zone_hint() -> None:
    """A board whose leases end 8 hours early reads as hours off, with a time-zone hint."""
    report = _first_violation(
        lambda tasks, clock: MemoryBoard(tasks, _ShiftedClock(clock, -timedelta(hours=8)))
    )
    assert "off by -8 h 0 min" in report
    assert "hint      the lease ends 8 h from the board's now + ttl: a time zone?" in report
    assert "until -8 h 0 min" in report  # the trace's lease, in hours too
    assert "server's clock" not in report


def test_a_board_on_real_time_under_the_manual_clock_is_told_to_try_wall() -> None:
    """A board that reads real time (its server's clock) on the manual clock gets the hint
    to try --clock wall or --clock virtual."""
    report = _first_violation(lambda tasks, clock: MemoryBoard(tasks, SystemClock()))
    assert "hint      is this board on its server's clock?" in report
    assert "try `--clock wall` or `--clock virtual`" in report


def test_an_until_a_little_off_gets_no_hint() -> None:
    """An until off by less than a minute is a plain bug: no guess at a time zone or clock."""
    report = _first_violation(
        lambda tasks, clock: MemoryBoard(tasks, _ShiftedClock(clock, timedelta(seconds=5)))
    )
    assert "off by 5 s" in report
    assert "hint " not in report
