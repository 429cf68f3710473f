"""The parallel mode: concurrent histories checked for linearizability against the model."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import unittest
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky

from taskboard import Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import CheckThenWriteComplete, NonAtomicClaim
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import (
    TRACE_DIR_ENV,
    BoardMachine,
    ContractViolation,
    TraceFileError,
    load_trace,
    parse_trace,
    replay_trace,
    run_parallel_state_machine,
    trace_to_json,
    violations_in,
)
from taskboard.stateful._steps import ActStep, ClaimStep, ParallelProgram

#: The CI profile's settings for the parallel mode: derandomized, 200 programs.
PARALLEL = settings(
    max_examples=200, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
)  # fmt: skip


@pytest.mark.parametrize(
    "board", [NonAtomicClaim, CheckThenWriteComplete], ids=lambda b: b.__name__
)
def test_parallel_mode_catches_the_concurrency_mutants(board: type[MemoryBoard]) -> None:
    """The races the two criteria find are found by the parallel machine itself."""
    # A race that shows on search but not on Hypothesis's final replay surfaces as Flaky.
    with pytest.raises((ContractViolation, Flaky)) as caught:
        run_parallel_state_machine(BoardMachine.for_board(board), settings=PARALLEL)
    report = str(violations_in(caught.value)[0])
    assert "no sequential order" in report
    assert "cannot come next" in report
    assert "per thread" in report


@pytest.mark.parametrize("board", [MemoryBoard, SQLiteBoard], ids=lambda b: b.__name__)
def test_reference_hosts_are_linearizable(board: type[MemoryBoard]) -> None:
    """Correct hosts give linearizable histories: no false alarm."""
    run_parallel_state_machine(BoardMachine.for_board(board), settings=PARALLEL)


def test_parallel_test_case_runs_the_parallel_mode() -> None:
    """MyMachine.ParallelTestCase is a unittest case that fails on a racy board."""
    case = BoardMachine.for_board(NonAtomicClaim).ParallelTestCase
    assert issubclass(case, unittest.TestCase)
    result = unittest.TestResult()
    case().run(result)
    assert len(result.failures) + len(result.errors) == 1


def test_a_violation_writes_a_trace_and_an_html_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a trace dir set, the program goes into a trace file and the history into HTML."""
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(BoardMachine.for_board(NonAtomicClaim), settings=PARALLEL)
    traces = list(tmp_path.glob("trace-*.json"))
    pages = list(tmp_path.glob("timeline-*.html"))
    assert len(traces) == len(pages) == 1
    assert caught.value.trace_file == str(traces[0])
    page = pages[0].read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    assert "not linearizable" in page
    assert "#d33" in page  # the call that cannot be placed is drawn red
    trace = load_trace(traces[0])
    assert trace.program is not None
    assert len(trace.program.threads) >= 2
    assert parse_trace(trace_to_json(trace)) == trace


def test_a_parallel_trace_replays_by_rerunning_its_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """replay_trace reruns a parallel trace's program: a racy board fails, a correct one passes."""
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    with pytest.raises(ContractViolation):
        run_parallel_state_machine(BoardMachine.for_board(NonAtomicClaim), settings=PARALLEL)
    trace = load_trace(next(tmp_path.glob("trace-*.json")))
    assert not replay_trace(trace, NonAtomicClaim).passed
    passed = replay_trace(trace, MemoryBoard)
    assert passed.passed, passed.report


def test_fuzz_parallel_finds_a_race(tmp_path: Path) -> None:
    """taskboard fuzz --parallel runs the parallel mode and exits 1 on a racy board."""
    result = subprocess.run(
        [sys.executable, "-m", "taskboard", "fuzz", "taskboard.hosts.mutants:NonAtomicClaim",
         "--parallel", "--budget", "60s", "--seed", "1", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no sequential order of these calls" in result.stdout


class PlainBoard:
    """MemoryBoard without renew and fail: only the four Board methods."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._inner = MemoryBoard(tasks, clock)
        self.list_tasks = self._inner.list_tasks
        self.claim = self._inner.claim
        self.release = self._inner.release
        self.complete = self._inner.complete


def test_boards_without_optional_methods_are_never_called_on_them() -> None:
    """Programs skip renew and fail on a board that lacks them, in the prefix and the threads."""
    run_parallel_state_machine(BoardMachine.for_board(PlainBoard), settings=PARALLEL)


@pytest.mark.deep
@pytest.mark.parametrize("board", [MemoryBoard, SQLiteBoard], ids=lambda b: b.__name__)
def test_reference_hosts_stay_linearizable_over_many_programs(board: type[MemoryBoard]) -> None:
    """Five hundred programs, each run three times: still no false alarm."""
    run_parallel_state_machine(
        BoardMachine.for_board(board), settings=settings(PARALLEL, max_examples=500)
    )


def test_a_bad_program_in_a_trace_is_named_by_its_path() -> None:
    """A parallel trace with a bad operation is a TraceFileError naming the field."""
    machine = BoardMachine.for_board(MemoryBoard)()
    machine.start(deps={"t1": (), "t2": (), "t3": ()}, start_ticks=0)
    program = ParallelProgram({"t1": (), "t2": (), "t3": ()}, (), ((ClaimStep("t1"),),))
    trace = dataclasses.replace(machine.to_trace(), program=program)
    text = trace_to_json(trace).replace('"op": "claim"', '"op": "clam"')
    with pytest.raises(TraceFileError, match=r"program\.threads\[0\]\[0\]\.op: 'clam'"):
        parse_trace(text, "bad.json")


def test_operations_that_need_not_race_move_into_the_prefix() -> None:
    """After shrinking, a thread's scene-setting first call moves into the sequential prefix."""
    from taskboard.stateful._parallel import _move_into_prefix

    release = ActStep("release", "t1", token="latest")
    program = ParallelProgram(
        {"t1": (), "t2": (), "t3": ()},
        (),
        ((release, ClaimStep("t1", "a1")), (ClaimStep("t1", "a2"),)),
    )
    simpler = _move_into_prefix(BoardMachine.for_board(NonAtomicClaim), program)
    assert simpler.prefix == (release,)
    assert simpler.threads == (
        (ClaimStep("t1", "a1"),),
        (ClaimStep("t1", "a2"),),
    )
