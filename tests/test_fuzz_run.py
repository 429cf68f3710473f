"""What a fuzzing run honours and says: the machine's own settings, the example count and the
budget to the step, the database left clean by a stop, and how races were run."""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import settings

from taskboard import Board, ClaimRequest, Clock, Task
from taskboard._cli import _summary
from taskboard._fuzz import FuzzOptions, UsageError, fuzz
from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import BoardMachine

MEMORY = "taskboard.hosts.memory:MemoryBoard"


@settings(stateful_step_count=5)
class FiveSteps(BoardMachine):
    """A machine whose own settings ask for five steps an example."""

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)


class SlowBoard(MemoryBoard):
    """Correct, but every call takes 30 ms: an example of 100 steps takes seconds."""

    def list_tasks(self) -> list[Task]:
        time.sleep(0.03)
        return super().list_tasks()

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        time.sleep(0.03)
        return super().claim(task_id, agent, request)


class MemoryWithClients(MemoryBoard):
    """MemoryBoard whose only client is itself: the races run on 'a client each'."""

    def open_client(self) -> MemoryBoard:
        return self


def quiet(tmp_path: Path, **changes: object) -> FuzzOptions:
    return FuzzOptions(
        seed=1, database=str(tmp_path / "db"), trace_dir=str(tmp_path / "traces")
    ).replace(**changes)


def test_the_machines_own_settings_are_honoured_and_said(tmp_path: Path) -> None:
    """@settings(stateful_step_count=5) on the machine class bounds fuzz's examples, and the
    report says the setting came from the machine."""
    report = fuzz(
        "tests.test_fuzz_run:FiveSteps",
        quiet(tmp_path, max_examples=30, mode="sequential"),
        progress=None,
    )
    assert report.failure is None
    assert report.examples == 30
    # Five rules an example; at_expiry adds a clock step to its call, start adds none.
    assert report.steps <= 30 * 10
    assert "stateful_step_count=5" in report.settings
    assert "from the machine's own settings" in report.settings
    plain = fuzz(MEMORY, quiet(tmp_path, max_examples=5, mode="sequential"), progress=None)
    assert "from the machine" not in plain.settings
    assert "up to 100 steps an example" in plain.settings


@pytest.mark.parametrize(("mode", "count"), [("sequential", 50), ("mixed", 20), ("parallel", 7)])
def test_max_examples_runs_exactly_that_many(tmp_path: Path, mode: str, count: int) -> None:
    """--max-examples N runs N examples and parallel program runs together, not one more."""
    report = fuzz(MEMORY, quiet(tmp_path, max_examples=count, mode=mode), progress=None)
    assert report.failure is None
    assert report.examples + report.parallel_runs == count


def test_a_mixed_run_begins_with_a_parallel_program(tmp_path: Path) -> None:
    """A mixed run's first examples are one parallel program's three runs, so races are
    tried from the first example on; sequential examples follow."""
    first = fuzz(MEMORY, quiet(tmp_path, max_examples=3), progress=None)
    assert (first.parallel_runs, first.examples) == (3, 0)
    then = fuzz(MEMORY, quiet(tmp_path, max_examples=5), progress=None)
    assert (then.parallel_runs, then.examples) == (3, 2)


def test_the_budget_stops_a_slow_board_on_time_and_leaves_the_database_clean(
    tmp_path: Path,
) -> None:
    """A budget of 1.5 s on a board whose examples take seconds stops within a step or two of
    it, and the example it stopped is not filed in the database as a failure."""
    started = time.monotonic()
    report = fuzz(
        "tests.test_fuzz_run:SlowBoard", quiet(tmp_path, budget=1.5, mode="sequential"),
        progress=None,
    )  # fmt: skip
    assert report.failure is None
    assert not report.interrupted
    assert time.monotonic() - started < 4.0
    assert report.steps > 0
    assert not [p for p in (tmp_path / "db").rglob("*") if p.is_file()]


def test_the_status_line_counts_parallel_programs(tmp_path: Path) -> None:
    """In parallel mode the status line moves: it counts programs, not only examples."""
    stream = io.StringIO()
    report = fuzz(MEMORY, quiet(tmp_path, max_examples=6, mode="parallel"), progress=stream)
    assert report.parallel_programs == 2
    assert "parallel programs 2" in stream.getvalue().splitlines()[-1]


def test_the_report_says_how_races_were_run(tmp_path: Path) -> None:
    """The summary says whether racing threads shared one board or had a client each."""
    shared = fuzz(MEMORY, quiet(tmp_path, max_examples=4), progress=None)
    assert "share one board" in shared.races
    assert "races: threads share one board" in _summary(shared)
    clients = fuzz(
        "tests.test_fuzz_run:MemoryWithClients", quiet(tmp_path, max_examples=4), progress=None
    )
    assert "a client of its own" in clients.races
    sequential = fuzz(MEMORY, quiet(tmp_path, max_examples=4, mode="sequential"), progress=None)
    assert "races were not checked" in _summary(sequential)


def test_a_board_without_renew_gets_no_advice_about_renews(tmp_path: Path) -> None:
    """The key transitions a board without renew and fail can never reach are left out, and
    the summary says why."""
    report = fuzz(
        "tests.test_boardtest:NoRenewBoard",
        quiet(tmp_path, max_examples=20, mode="sequential"),
        progress=None,
    )
    assert report.operations == frozenset()
    text = _summary(report).split("key transitions:", 1)[1]
    assert "renew" not in text.replace("no renew() and no fail()", "")
    assert "claim of a failed task" not in text
    assert "the board has no renew() and no fail()" in text


def test_clock_skew_on_the_manual_clock_is_a_usage_error(tmp_path: Path) -> None:
    """--clock-skew means nothing on the manual clock: a usage error, not a silent no-op."""
    with pytest.raises(UsageError, match="wall clock only"):
        fuzz(MEMORY, quiet(tmp_path, clock_skew=5.0), progress=None)
    report = fuzz(
        MEMORY, quiet(tmp_path, clock="wall", clock_skew=2.0, max_examples=2), progress=None
    )
    assert report.clock_mode == "wall"


def test_fuzz_leaves_the_machine_class_as_it_was(tmp_path: Path) -> None:
    """The options are set on a subclass of the run's own: the target's class is untouched."""
    before = dict(vars(FiveSteps))
    fuzz(
        "tests.test_fuzz_run:FiveSteps",
        quiet(tmp_path, max_examples=2, tolerate_faults=True, call_timeout=3.0),
        progress=None,
    )
    assert dict(vars(FiveSteps)) == before
    assert FiveSteps.tolerate_faults is False


def test_a_failure_found_at_the_last_example_is_still_shrunk_and_reported(tmp_path: Path) -> None:
    """The example count and the budget stop the search, not the shrinking of what it found:
    the failure is reported shrunk, and the shrinking runs are not counted as examples."""
    report = fuzz(
        "taskboard.hosts.mutants:RenewWithoutTokenCheck",
        quiet(tmp_path, max_examples=40, mode="sequential"),
        progress=None,
    )
    assert report.failure is not None
    assert "contract violation" in report.failure
    assert report.trace_file is not None
    assert report.examples <= 40
    assert report.shrink_runs > 0
    assert f"to shrink it: {report.shrink_runs} Hypothesis run" in _summary(report)
