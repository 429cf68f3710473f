"""Shrinking by replay: a failing trace cut down on fresh boards, and what the run then says."""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import FlakyStrategyDefinition
from hypothesis.reporting import current_reporter, with_reporter
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Task
from taskboard._cli import _summary
from taskboard._fuzz import FuzzOptions, fuzz
from taskboard._fuzz.progress import Progress
from taskboard._fuzz.report import FuzzReport, run_notes
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import RenewWithoutTokenCheck
from taskboard.model import Call, ContractViolation, Op
from taskboard.stateful import BoardMachine, Trace, load_trace
from taskboard.stateful._hypothesis import is_empty_program, shrinking_for_at_most
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session import Session, end_example
from taskboard.stateful._shrink import merged_clock_moves, shrink_by_replay, sub_trace

MS = timedelta(milliseconds=1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@contextlib.contextmanager
def session_of(board: type, **attributes: object) -> Iterator[Session]:
    session = Session(BoardMachine.for_board(board, **attributes)(), [Task("t1"), Task("t2")], T0)
    try:
        yield session
    finally:
        end_example(session)


def recorded_trace() -> Trace:
    """claim t1 (L1), the clock 5 ms on, claim t2 (L2), renew t2 with L2, release t1 with L1."""
    with session_of(MemoryBoard) as session:
        session.perform(Call(Op.CLAIM, "t1", agent="a1", ttl=100 * MS))
        session.move_clock(T0 + 5 * MS, "")
        session.perform(Call(Op.CLAIM, "t2", agent="a2", ttl=100 * MS))
        session.perform(Call(Op.RENEW, "t2", token=session.token_of("t2", "latest"), ttl=MS))
        session.perform(Call(Op.RELEASE, "t1", token=session.token_of("t1", "latest")))
        return session.to_trace()


def test_a_sub_trace_renumbers_leases_and_moves_later_steps_earlier() -> None:
    """Dropping the first claim and the clock move: steps are numbered from 1, the later
    ones move 5 ms earlier, L2 becomes L1, and a token of the dropped claim becomes a literal
    no claim returned."""
    trace = recorded_trace()
    assert [s.token_ref for s in trace.steps] == ["", "", "", "L2", "L1"]
    cut = sub_trace(trace, [2, 3, 4])
    assert [s.index for s in cut.steps] == [1, 2, 3]
    assert [s.at for s in cut.steps] == [T0, T0, T0]
    assert [s.token_ref for s in cut.steps] == ["", "L1", "=never-issued-1"]


def test_neighbouring_clock_moves_merge_into_one() -> None:
    """Two clock moves in a row become one that ends where the second ended; a call and a
    clock move do not merge."""
    with session_of(MemoryBoard) as session:
        session.move_clock(T0 + 2 * MS, "")
        session.move_clock(T0 + 7 * MS, "")
        session.perform(Call(Op.CLAIM, "t1", agent="a1", ttl=MS))
        trace = session.to_trace()
    merged = merged_clock_moves(trace, 0)
    assert merged is not None
    assert [s.advance for s in merged.steps] == [7 * MS, None]
    assert merged_clock_moves(trace, 1) is None


def long_failing_trace() -> Trace:
    """A RenewWithoutTokenCheck failure as Hypothesis found it, unshrunk."""
    machine = BoardMachine.for_board(RenewWithoutTokenCheck, trace_target="")
    unshrunk = settings(
        max_examples=50, database=None, derandomize=True, deadline=None, phases=[Phase.generate]
    )
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(machine, settings=unshrunk)
    assert caught.value.recording is not None
    return caught.value.recording


def test_a_long_manual_trace_shrinks_to_the_same_clause_in_a_few_steps() -> None:
    """Shrinking by replay cuts a long failing trace to a few steps that fail with the same
    clause on a fresh board, told on the way."""
    trace = long_failing_trace()
    told: list[tuple[int, int]] = []
    shrunk = shrink_by_replay(
        trace,
        RenewWithoutTokenCheck,
        seconds=60,
        on_progress=lambda steps, first, left: told.append((steps, first)),
    )
    assert shrunk.violation is not None
    assert trace.verdict is not None
    assert shrunk.violation.clause == trace.verdict.clause
    assert len(shrunk.trace.steps) <= 3 < len(trace.steps)
    assert (shrunk.failed, shrunk.tried) == (1, 1)
    assert told[-1] == (len(shrunk.trace.steps), len(trace.steps))
    assert not shrunk.cut


def test_a_stop_request_ends_shrinking_by_replay_with_the_trace_so_far() -> None:
    """Asked to stop (Ctrl-C), shrinking tries no more candidates: the failing trace is kept
    as it was, and the result says shrinking was cut short."""
    trace = long_failing_trace()
    shrunk = shrink_by_replay(trace, RenewWithoutTokenCheck, seconds=60, stopped=lambda: True)
    assert shrunk.cut
    assert shrunk.violation is not None
    assert shrunk.replays <= 2  # the trace itself, and at most the cut after its failing step


def test_a_trace_a_fixed_board_passes_is_not_shrunk() -> None:
    """On a board that keeps the contract no replay fails: nothing is kept, and the trace is
    the one given."""
    trace = long_failing_trace()
    shrunk = shrink_by_replay(trace, MemoryBoard, seconds=60)
    assert shrunk.violation is None
    assert shrunk.trace == trace
    assert shrunk.failed == 0


def test_a_flaky_failure_whose_trace_replays_is_not_called_unrepeated() -> None:
    """When Hypothesis's replay drew differently but the trace itself fails again, the report
    is the replay's, with how often it failed, and never says "did not recur"."""
    machine_cls = BoardMachine.for_board(RenewWithoutTokenCheck, trace_target="")

    def run_failing_then_drawing_differently() -> None:
        with failures_reported(machine_cls):
            session = Session(machine_cls(), [Task("t1")], T0)
            with contextlib.suppress(ContractViolation):
                session.perform(Call(Op.CLAIM, "t1", agent="a1", ttl=5 * MS))
                session.perform(Call(Op.RENEW, "t1", token="forged", ttl=5 * MS))
            end_example(session)
            raise FlakyStrategyDefinition("Inconsistent data generation!")

    with pytest.raises(ContractViolation) as caught:
        run_failing_then_drawing_differently()
    report = str(caught.value)
    assert "did not recur" not in report
    assert "failed again in 3 of 3 replays" in report
    assert caught.value.clause == "SPEC 3.5"


def test_the_status_line_shows_shrinking_and_the_rate_of_finding() -> None:
    """While a failure shrinks, the status line says how far it got in place of the time left,
    and counts failures."""
    stream = io.StringIO()
    meter = Progress(stream, time.monotonic(), 60)
    meter.show(3, 0, 300, 1, "shrinking: 14 steps \u2192 5, 23 s left")
    line = stream.getvalue()
    assert "failures 1" in line
    assert "shrinking: 14 steps \u2192 5, 23 s left" in line


def test_the_summary_separates_finding_from_shrinking() -> None:
    """The summary counts steps per second over finding only, then says how long shrinking
    took and how the trace was shrunk by replay."""
    report = FuzzReport(
        examples=3,
        steps=300,
        seconds=50.0,
        find_seconds=2.0,
        shrink_runs=40,
        replay_shrink="shrunk by replay from 40 steps to 4 in 60 replays",
        failure="contract violation at step 4",
    )
    summary = _summary(report)
    assert "300 steps in 2.0s to find it (150 steps/s" in summary
    assert (
        "then 48.0s to shrink it: 40 Hypothesis runs; shrunk by replay from 40 steps to 4 in "
        "60 replays" in summary
    )


def test_a_mixed_run_without_parallel_programs_says_so_and_why() -> None:
    """A mixed run whose budget ran out in its first parallel program says no parallel
    programs ran, why (the shortest lease among it), and that no clients were opened."""
    report = FuzzReport(
        examples=20, seconds=60.0, mode="mixed", shortest_lease=50 * MS, clients=True
    )
    notes = run_notes(report)
    assert "no parallel programs ran" in notes[0]
    assert "budget ran out before one finished" in notes[0]
    assert "shortest lease at 50ms" in notes[0]
    assert "no clients were opened" in notes[1]
    found = FuzzReport(examples=2, seconds=5.0, find_seconds=1.0, mode="mixed")
    assert "found before the first parallel program finished" in run_notes(found)[0]
    assert run_notes(FuzzReport(mode="mixed", parallel_runs=3)) == []
    assert run_notes(FuzzReport(mode="sequential")) == []


def test_an_empty_program_is_not_shown_as_the_steps_leading_up() -> None:
    """Hypothesis's "Steps leading up to this error" listing no step (only the machine made
    and torn down) is left out of a run's output; one with steps is shown."""
    empty = (
        "Steps leading up to this error:\n  state = ExecMachine[./myboard]()\n  state.teardown()"
    )
    steps = "Steps leading up to this error:\n  state = M()\n  state.claim(a=1)\n  state.teardown()"
    assert is_empty_program(empty)
    assert not is_empty_program(steps)
    shown: list[object] = []
    with with_reporter(shown.append), shrinking_for_at_most(5):
        current_reporter()(empty)
        current_reporter()(steps)
    assert shown == [steps]


def test_fuzz_shrinks_by_replay_what_hypothesis_left_within_the_shrink_budget(
    tmp_path: Path,
) -> None:
    """With a shrink budget too short for Hypothesis, the run shrinks the trace by replay,
    says so in the summary and writes the shorter trace."""
    options = FuzzOptions(
        max_examples=40, shrink_budget=1, seed=1, mode="sequential", trace_dir=str(tmp_path)
    )
    report = fuzz("taskboard.hosts.mutants:RenewWithoutTokenCheck", options, progress=None)
    assert report.trace_file is not None
    shrunk = re.match(r"shrunk by replay from (\d+) steps to (\d+)", report.replay_shrink)
    assert shrunk is not None, report.replay_shrink
    assert int(shrunk.group(2)) < int(shrunk.group(1))
    assert "note: shrunk by replay from" in (report.failure or "")
    # How far it gets in the second left depends on the machine's load: the file holds it.
    assert len(load_trace(report.trace_file).steps) == int(shrunk.group(2))


class Terminal(io.StringIO):
    """A status line's stream that says it is a terminal, so that every update is written."""

    def isatty(self) -> bool:
        return True


def test_a_run_shows_shrinking_on_its_status_line() -> None:
    """While Hypothesis shrinks a failure, the status line counts it and says from how many
    steps to how many it got, in place of the time left."""
    terminal = Terminal()
    options = FuzzOptions(max_examples=40, shrink_budget=2, seed=1, mode="sequential")
    fuzz("taskboard.hosts.mutants:RenewWithoutTokenCheck", options, progress=terminal)
    shrinking = [line for line in terminal.getvalue().split("\r") if "shrinking: " in line]
    assert shrinking
    assert "failures 1" in shrinking[-1]
    assert re.search(r"shrinking: \d+ steps → \d+, \d+ s left", shrinking[-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    # Half a minute each: CI runs one seed, the deep run all five.
    "seed",
    [pytest.param(seed, marks=pytest.mark.deep) for seed in (1, 3, 4, 5)] + [2],
)
def test_a_slow_wall_clock_board_is_reported_in_five_steps_or_fewer(
    seed: int, tmp_path: Path
) -> None:
    """A wall-clock board whose calls take a few milliseconds, with a bug unrelated to time,
    is reported in at most 5 steps, and the report says in how many of how many replays the
    trace failed."""
    options = FuzzOptions(
        budget=60, shrink_budget=60, seed=seed, clock="wall", trace_dir=str(tmp_path)
    )
    report = fuzz("tests.slow_boards:SlowRenewWithoutTokenCheck", options, progress=None)
    assert report.failure is not None
    assert report.trace_file is not None
    assert len(load_trace(report.trace_file).steps) <= 5, report.failure
    if report.replay_shrink:  # Hypothesis alone may already have left five steps or fewer
        assert re.search(r"the trace failed in \d of \d replays", report.replay_shrink)
