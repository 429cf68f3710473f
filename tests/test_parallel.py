"""The parallel mode: concurrent histories checked for linearizability against the model."""

from __future__ import annotations

import subprocess
import sys
import unittest
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from taskboard import Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import CheckThenWriteComplete, NonAtomicClaim
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import TRACE_DIR_ENV, BoardMachine, ContractViolation
from taskboard.stateful._parallel import run_parallel_state_machine

#: The parallel mode's default depth here: the CI profile's settings, fewer examples.
PARALLEL = settings(
    max_examples=60, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
)  # fmt: skip


@pytest.mark.parametrize(
    "board", [NonAtomicClaim, CheckThenWriteComplete], ids=lambda b: b.__name__
)
def test_parallel_mode_catches_the_concurrency_mutants(board: type[MemoryBoard]) -> None:
    """The races the two criteria find are found by the parallel machine itself."""
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(BoardMachine.for_board(board), settings=PARALLEL)
    report = str(caught.value)
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


def test_a_violation_writes_an_html_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a trace dir set, a non-linearizable history is also drawn as an HTML timeline."""
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(BoardMachine.for_board(NonAtomicClaim), settings=PARALLEL)
    pages = list(tmp_path.glob("timeline-*.html"))
    assert len(pages) == 1
    assert caught.value.trace_file == str(pages[0])
    page = pages[0].read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    assert "not linearizable" in page
    assert "#d33" in page  # the call that cannot be placed is drawn red


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
