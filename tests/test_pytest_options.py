"""The pytest plugin's --taskboard-seed and --taskboard-budget, for the machine runs of a
test session."""

from __future__ import annotations

import unittest
from collections.abc import Sequence

import pytest
from hypothesis import settings

from taskboard import Board, Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import BoardMachine
from taskboard.stateful._session_options import SessionOptions, choose


def _boards_made(options: SessionOptions) -> list[str]:
    """The initial tasks of every board a fresh machine's TestCase made (three examples by
    its settings), run in this process with the session ``options``."""
    made: list[str] = []

    class RecordingMachine(BoardMachine):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            made.append(" ".join(f"{t.id}<{','.join(t.deps)}" for t in tasks))
            return MemoryBoard(tasks, clock)

    case = RecordingMachine.TestCase
    case.settings = settings(max_examples=3, derandomize=False, database=None)
    choose(options)
    try:
        result = unittest.TestResult()
        case("runTest").run(result)
    finally:
        choose(SessionOptions())
    assert result.wasSuccessful(), result.errors + result.failures
    return made


def test_a_seed_repeats_the_examples_of_a_machine_test() -> None:
    """The session's seed gives a machine's TestCase the same examples on every run, and
    another seed others."""
    first = _boards_made(SessionOptions(seed=5))
    assert first == _boards_made(SessionOptions(seed=5))
    assert first != _boards_made(SessionOptions(seed=6))


def test_a_budget_runs_more_examples_than_the_settings_ask() -> None:
    """The session's budget makes a machine's TestCase run until it is spent, past its
    three examples, and pass when nothing was found."""
    assert len(_boards_made(SessionOptions())) <= 3 + 1  # its count (and a replay at most)
    assert len(_boards_made(SessionOptions(budget=0.5))) > 3


def test_the_plugin_passes_the_options_on(pytester: pytest.Pytester) -> None:
    """pytest --taskboard-seed and --taskboard-budget reach the session's machine runs."""
    pytester.makepyfile(
        test_options="""
        from taskboard.stateful._session_options import chosen

        def test_chosen():
            assert (chosen().seed, chosen().budget) == (7, 90.0)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--taskboard-seed", "7", "--taskboard-budget", "1m30s"
    )
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_a_failure_found_within_a_budget_is_reported(pytester: pytest.Pytester) -> None:
    """A board that breaks the contract fails its test under a budget too, with the report."""
    pytester.makepyfile(
        test_broken="""
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.mutants import RenewWithoutTokenCheck

        class TestBroken(BoardContract):
            def make_board(self, tasks, clock):
                return RenewWithoutTokenCheck(tasks, clock)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--taskboard-budget", "30s", "-k", "test_state_machine"
    )
    result.assert_outcomes(failed=1)
    assert "clause    SPEC 3.5" in result.stdout.str()


def test_a_bad_budget_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """--taskboard-budget that is no duration stops pytest with a usage error."""
    result = pytester.runpytest_subprocess("--taskboard-budget", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--taskboard-budget" in result.stderr.str()
