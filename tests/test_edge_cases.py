"""Odd but legal boards get no false alarm; broken runs and bad input are reported, not crashed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, ClaimRequest, Clock, Lease, ManualClock, State, Task
from taskboard.boardtest import BoardContract
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import BoardModel
from taskboard.stateful import (
    BoardMachine,
    ContractViolation,
    TraceFileError,
    load_trace,
    parse_trace,
    replay_trace,
    run_parallel_state_machine,
    trace_to_json,
    write_trace,
)
from taskboard.stateful._session import Session

QUICK = settings(
    max_examples=30, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(HealthCheck),
)  # fmt: skip


def _naive(task: Task) -> Task:
    if task.lease is None or task.lease.until is None:
        return task
    until = task.lease.until.replace(tzinfo=None)
    return dataclasses.replace(task, lease=dataclasses.replace(task.lease, until=until))


class NaiveUntilSortedDepsBoard(MemoryBoard):
    """Correct, but returns naive-UTC ``until`` and dependencies in sorted order."""

    def _shown(self, task: Task) -> Task:
        return _naive(dataclasses.replace(task, deps=tuple(sorted(task.deps))))

    def list_tasks(self) -> list[Task]:
        return [self._shown(t) for t in super().list_tasks()]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        return self._shown(super().claim(task_id, agent, request))

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        return self._shown(super().renew(task_id, token, request))


class TestNaiveUntilSortedDepsContract(BoardContract):
    expired_lease_policy = "accept"
    criteria_rounds = 3

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return NaiveUntilSortedDepsBoard(tasks, clock)


def test_dependency_order_is_not_part_of_the_contract() -> None:
    """The model compares dependencies as a set: a board may list them in its own order."""
    model = BoardModel.start([Task("a"), Task("b"), Task("c", deps=("b", "a"))])
    model.reconcile([Task("a"), Task("b"), Task("c", deps=("a", "b"))])


def test_a_lease_the_board_starts_with_can_be_taken_over() -> None:
    """An initial, already expired lease is no second live holder once someone takes over."""

    class StartsClaimed(BoardMachine):
        def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> Board:
            return MemoryBoard(tasks, clock)

    machine = StartsClaimed()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    old = Lease("initial-token", 4, start - timedelta(seconds=1))
    machine.session = Session(
        machine, [Task("t1", state=State.CLAIMED, owner="a0", lease=old)], start
    )
    machine.session.observe(None)
    machine.claim("t1", "a1", 5)
    machine.teardown()


class SlowBoard(MemoryBoard):
    """Correct, with a 20 ms round trip on every call."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        time.sleep(0.02)
        return super().claim(task_id, agent, request)

    def complete(self, task_id: str, token: str) -> None:
        time.sleep(0.02)
        super().complete(task_id, token)


def test_parallel_mode_has_no_per_example_deadline() -> None:
    """A slow but correct board is not failed by Hypothesis's deadline in parallel mode."""
    with_deadline = settings(QUICK, max_examples=5, deadline=timedelta(milliseconds=50))
    run_parallel_state_machine(BoardMachine.for_board(SlowBoard), settings=with_deadline)


class RenewlessBoard:
    """A board without renew and fail."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._inner = MemoryBoard(tasks, clock)
        self.list_tasks = self._inner.list_tasks
        self.claim = self._inner.claim
        self.release = self._inner.release
        self.complete = self._inner.complete


def _recorded_failure(board: type, tmp_path: Path) -> Path:
    machine = BoardMachine.for_board(board)
    machine.trace_dir = str(tmp_path)
    from taskboard._profiles import CI, register_profiles

    register_profiles()
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(machine, settings=settings.get_profile(CI))
    assert caught.value.trace_file is not None
    return Path(caught.value.trace_file)


@pytest.mark.slow
def test_replay_skips_what_the_board_cannot_do_and_keeps_the_trace_pin(tmp_path: Path) -> None:
    """Replay on a board without renew skips renews (noted); a factory trace names itself."""
    from taskboard.hosts.mutants import RenewOfExpiredLease

    path = _recorded_failure(RenewOfExpiredLease, tmp_path)
    trace = load_trace(path)
    assert trace.target == "taskboard.hosts.mutants:RenewOfExpiredLease"
    result = replay_trace(trace, RenewlessBoard)
    assert result.passed, result.report
    assert any("skipped, the board has no renew()" in d for d in result.differences)


def test_replay_uses_the_traces_policy_for_a_board_without_one(tmp_path: Path) -> None:
    """A trace made under "reject" fails again on an unpinned board that accepts."""
    machine = BoardMachine.for_board(MemoryBoard, expired_lease_policy="reject")
    machine.trace_dir = str(tmp_path)
    with pytest.raises(ContractViolation, match=r"SPEC 3\.4") as caught:
        run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=200))
    trace = load_trace(caught.value.trace_file or "")
    assert trace.policy == "reject"

    def unpinned(tasks: Sequence[Task], clock: ManualClock) -> Board:
        return MemoryBoard(tasks, clock)

    assert not replay_trace(trace, unpinned).passed


def test_a_naive_until_is_written_as_utc_and_reads_back(tmp_path: Path) -> None:
    """Trace files write a board's naive until with its UTC offset, so they load again."""
    machine = BoardMachine.for_board(NaiveUntilSortedDepsBoard)()
    machine.start(deps={"t1": (), "t2": (), "t3": ()}, start_ticks=0)
    machine.claim("t1", "a1", 5)
    path = write_trace(machine.to_trace(), tmp_path)
    assert load_trace(path).steps[0].outcome is not None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.replace('"id": "t2"', '"id": "t1"', 1), "task ids must be unique"),
        (lambda t: t.replace('"token_ref": "L1"', '"token_ref": "L1:bogus"', 1), "unknown forgery"),
        (lambda t: t.replace('"ttl_us": 5000', '"ttl_us": 1000000000000000000', 1), "longer"),
    ],
    ids=["duplicate-ids", "bad-forgery", "huge-ttl"],
)
def test_more_bad_trace_files_are_trace_file_errors(change: object, message: str) -> None:
    """Duplicate task ids, unknown forgeries and absurd durations are named, not crashed on."""
    machine = BoardMachine.for_board(MemoryBoard)()
    machine.start(deps={"t1": (), "t2": (), "t3": ()}, start_ticks=0)
    machine.claim("t1", "a1", 5)
    machine.renew("t1", 5, "latest")
    text = change(trace_to_json(machine.to_trace()))  # type: ignore[operator]
    with pytest.raises(TraceFileError, match=message):
        parse_trace(text)


def _taskboard(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskboard", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
        env={k: v for k, v in os.environ.items() if k != "TASKBOARD_TRACE_DIR"},
    )  # fmt: skip


def test_fuzz_reports_workers_that_die_and_boards_that_raise(tmp_path: Path) -> None:
    """Dead workers are a failure (exit 1) and a make_board that raises is an infrastructure
    fault (exit 3): never a pass."""
    (tmp_path / "broken_boards.py").write_text(
        "import os\n"
        "def dies(tasks, clock):\n"
        "    os._exit(3)\n"
        "def raises(tasks, clock):\n"
        "    raise RuntimeError('no connection')\n",
        encoding="utf-8",
    )
    dead = _taskboard(tmp_path, "fuzz", "broken_boards:dies", "--workers", "2", "--quiet",
                      "--budget", "20s")  # fmt: skip
    assert dead.returncode == 1, dead.stdout + dead.stderr
    assert "stopped without a report" in dead.stdout
    raised = _taskboard(tmp_path, "fuzz", "broken_boards:raises", "--quiet", "--budget", "20s")
    assert raised.returncode == 3, raised.stdout + raised.stderr
    assert "infrastructure fault at make_board(tasks, clock)" in raised.stdout
    assert "RuntimeError: no connection" in raised.stdout
    assert "Traceback" not in raised.stderr


def test_fuzz_rejects_a_machine_with_bad_class_attributes(tmp_path: Path) -> None:
    """A target whose clock_resolution is not a timedelta is a usage error (exit 2)."""
    (tmp_path / "odd_boards.py").write_text(
        "from taskboard.hosts.memory import MemoryBoard\n"
        "class OddBoard(MemoryBoard):\n"
        "    clock_resolution = 5\n",
        encoding="utf-8",
    )
    result = _taskboard(tmp_path, "fuzz", "odd_boards:OddBoard", "--budget", "5s")
    assert result.returncode == 2
    assert "clock_resolution must be a positive timedelta" in result.stderr
    assert "Traceback" not in result.stderr
