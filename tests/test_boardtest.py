"""BoardContract: the reference hosts pass it whole; a board without renew fails it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings

from taskboard import Board, ClaimRequest, Clock, LeaseLostError, ManualClock, Task
from taskboard.boardtest import BoardContract
from taskboard.boardtest._harness import ExampleMismatch
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard
from tests.servers import NEMESIS_MACHINE, NEMESIS_PARALLEL


class TestMemoryBoardContract(BoardContract):
    expired_lease_policy = "accept"

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)


class TestSQLiteBoardContract(BoardContract):
    expired_lease_policy = "reject"

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return SQLiteBoard(tasks, clock)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, SQLiteBoard)
        board.close()


class TestSQLiteFileBoardContract(BoardContract):
    """SQLiteBoard on a database file, a client (its own connections) per thread (SPEC 8).
    The in-memory class above runs the machine at the profile's depth; on a file, a
    quarter of it, so that the quick run stays quick."""

    expired_lease_policy = "reject"
    machine_settings = settings(max_examples=settings().max_examples // 4)

    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path: Path) -> None:
        self.paths = (tmp_path / f"board{n}.db" for n in itertools.count())

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return SQLiteBoard(tasks, clock, next(self.paths))

    def close_board(self, board: Board) -> None:
        assert isinstance(board, SQLiteBoard)
        board.close()

    def open_client(self, board: SQLiteBoard) -> SQLiteBoard:
        return board.open_client()


@pytest.mark.nemesis
@pytest.mark.slow
class TestSQLiteNemesisContract(BoardContract):
    """SQLiteBoard on a database file, restarted now and then (SPEC 9): every connection
    closed, and a new board opened on the same file with the same initial tasks (which
    inserts only missing tasks, so it resets nothing). SQLite has no server to cut
    connections off, so there is no drop."""

    expired_lease_policy = "reject"
    durable = True
    machine_settings = NEMESIS_MACHINE
    parallel_settings = NEMESIS_PARALLEL

    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path: Path) -> None:
        self.paths = (tmp_path / f"board{n}.db" for n in itertools.count())
        self.opened: dict[SQLiteBoard, tuple[list[Task], Clock, Path]] = {}

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> SQLiteBoard:
        path = next(self.paths)
        board = SQLiteBoard(tasks, clock, path)
        self.opened[board] = (list(tasks), clock, path)
        return board

    def close_board(self, board: SQLiteBoard) -> None:
        board.close()

    def open_client(self, board: SQLiteBoard) -> SQLiteBoard:
        return board.open_client()

    def restart_storage(self, board: SQLiteBoard) -> SQLiteBoard:
        tasks, clock, path = self.opened.pop(board)
        board.close()
        reopened = SQLiteBoard(tasks, clock, path)
        self.opened[reopened] = (tasks, clock, path)
        return reopened


class NoRenewBoard:
    """A board with everything but renew and fail."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._inner = MemoryBoard(tasks, clock)

    def list_tasks(self) -> list[Task]:
        return self._inner.list_tasks()

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        return self._inner.claim(task_id, agent, request)

    def release(self, task_id: str, token: str) -> None:
        self._inner.release(task_id, token)

    def complete(self, task_id: str, token: str) -> None:
        self._inner.complete(task_id, token)


class NoRenewContract(BoardContract):
    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return NoRenewBoard(tasks, clock)


def test_a_board_without_renew_fails_rather_than_skips() -> None:
    """The suite fails a board that is not a RenewingBoard, naming renew and why."""
    board = NoRenewBoard([Task("t1")], ManualClock())
    with pytest.raises(pytest.fail.Exception, match=r"has no renew.*fails rather than skips"):
        NoRenewContract().renewing(board)


def test_a_board_without_fail_skips_the_fail_tests_with_a_reason() -> None:
    """The fail-path tests skip on a board without fail(), saying SPEC 3.6 is optional."""
    board = NoRenewBoard([Task("t1")], ManualClock())
    with pytest.raises(pytest.skip.Exception, match=r"has no fail\(\): SPEC 3\.6 is optional"):
        NoRenewContract().failing(board)


def test_missing_make_board_names_the_hook() -> None:
    """A contract subclass without make_board says which hook to define."""

    class Empty(BoardContract):
        pass

    with pytest.raises(NotImplementedError, match=r"Empty must define make_board"):
        Empty().make_board([], ManualClock())


def test_every_clause_test_names_its_clause() -> None:
    """Every test in the suite has a docstring naming the SPEC clause it pins."""
    tests = [name for name in dir(BoardContract) if name.startswith("test_")]
    assert len(tests) >= 30
    for name in tests:
        doc = getattr(BoardContract, name).__doc__ or ""
        assert doc.startswith("SPEC "), f"{name} docstring does not name its clause: {doc!r}"


def test_close_board_runs_for_every_board_a_test_made(pytester: pytest.Pytester) -> None:
    """close_board runs after each test for each board that test made."""
    pytester.makepyfile(
        """
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.memory import MemoryBoard

        made, closed = [], []

        class TestIt(BoardContract):
            def make_board(self, tasks, clock):
                made.append(MemoryBoard(tasks, clock))
                return made[-1]

            def close_board(self, board):
                closed.append(board)

        def test_zz_all_closed():
            assert made and [id(b) for b in made] == [id(b) for b in closed]
        """
    )
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-k",
        "not state_machine and not criteria and not concurrent and not duplicate",
    )
    result.assert_outcomes(
        passed=len([n for n in dir(BoardContract) if n.startswith("test_")]) - 3 + 1
    )


def test_an_example_test_fails_with_its_clause_what_it_expected_and_what_the_board_did(
    pytester: pytest.Pytester,
) -> None:
    """A board that breaks an example fails it with the test's SPEC clause, what was
    expected and what the board did: no bare DID NOT RAISE, no bare contract error."""
    pytester.makepyfile(
        """
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.mutants import OffByOneExpiry

        class TestIt(BoardContract):
            def make_board(self, tasks, clock):
                return OffByOneExpiry(tasks, clock)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "renew_at_exactly_until or claim_at_exactly_until"
    )
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    assert "DID NOT RAISE" not in output
    assert "SPEC 3.5: renew never revives a lease; at exactly until it has expired." in output
    assert "expected  LeaseLostError, and the board unchanged (SPEC 3)" in output
    assert "board     returned 't1' claimed, owner='a1'" in output
    assert "SPEC 2 and 3.1: at exactly until the lease has expired, and a claim takes over." in (
        output
    )
    assert "board     raised TakenError" in output


def test_a_failed_assertion_in_an_example_shows_the_values(pytester: pytest.Pytester) -> None:
    """An example's own assertion fails with its clause and the values compared (the suite's
    asserts are rewritten as a test module's are)."""
    pytester.makepyfile(
        """
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.mutants import SeqNotBumpedOnRenew

        class TestIt(BoardContract):
            def make_board(self, tasks, clock):
                return SeqNotBumpedOnRenew(tasks, clock)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "renew_recomputes_until_from_the_board_clock"
    )
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "SPEC 3.5: renew sets until = now + ttl" in output
    assert "expected  what the clause says" in output
    assert "board     assert " in output  # the rewritten assertion, with its values


class _ReleaseChangesSeq(MemoryBoard):
    """Rejects a release with a bad token as it should, but bumps the task's seq first."""

    def release(self, task_id: str, token: str) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None:
                self._tasks[task_id] = replace(task, seq=task.seq + 1)
        super().release(task_id, token)


def test_a_rejection_that_changes_the_board_says_what_changed() -> None:
    """assert_rejected_unchanged names the task a rejected operation changed, before and
    after, and the error it raised."""

    class Contract(BoardContract):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            return _ReleaseChangesSeq(tasks, clock)

    board = _ReleaseChangesSeq([Task("t1")], ManualClock())
    with pytest.raises(ExampleMismatch) as caught:
        Contract().assert_rejected_unchanged(
            board, LeaseLostError, lambda: board.release("t1", "nope")
        )
    assert caught.value.expected == "LeaseLostError, and the board unchanged (SPEC 3)"
    assert caught.value.did == (
        "raised LeaseLostError, but changed the board: 't1' open, no lease, seq=1 "
        "(was 't1' open, no lease, seq=0)"
    )
