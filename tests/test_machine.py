"""BoardMachine: correct hosts pass, hooks are checked, reports read like bug reports."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, ClaimRequest, Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import _HookedBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import BoardMachine, ContractViolation
from taskboard.strategies import LeaseRef

QUICK = settings(
    max_examples=100,
    database=None,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
)


class MemoryMachine(BoardMachine):
    expired_lease_policy = "accept"

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)


class SQLiteMachine(BoardMachine):
    expired_lease_policy = "reject"

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return SQLiteBoard(tasks, clock)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, SQLiteBoard)
        board.close()


class EitherPolicySQLiteMachine(SQLiteMachine):
    expired_lease_policy = "either"


TestMemoryBoard = MemoryMachine.TestCase
TestSQLiteBoard = SQLiteMachine.TestCase
TestSQLiteBoardUnpinned = EitherPolicySQLiteMachine.TestCase
TestSQLiteBoardUnpinned = pytest.mark.slow(TestSQLiteBoardUnpinned)


@pytest.mark.deep
@pytest.mark.parametrize("machine", [MemoryMachine, SQLiteMachine])
def test_reference_hosts_pass_a_thousand_examples(machine: type[BoardMachine]) -> None:
    """Both reference hosts pass 1,000 examples with zero false alarms."""
    run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=1000))


def test_policy_pinned_against_the_board_is_caught() -> None:
    """A board that accepts SPEC 3.4 actions fails a machine pinned to "reject"."""

    class Pinned(MemoryMachine):
        expired_lease_policy = "reject"

    with pytest.raises(ContractViolation, match=r"SPEC 3\.4"):
        run_state_machine_as_test(Pinned, settings=QUICK)


def test_missing_make_board_names_the_hook() -> None:
    """A subclass without make_board gets a TypeError that names the hook."""

    class NoBoard(BoardMachine):
        pass

    with pytest.raises(TypeError, match=r"NoBoard must define make_board\(self, tasks, clock\)"):
        NoBoard()


def test_make_board_returning_a_non_board_is_a_clear_error() -> None:
    """make_board returning something that is not a Board is a TypeError naming it."""

    class NotABoard(BoardMachine):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            return object()  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"make_board returned <object object"):
        run_state_machine_as_test(NotABoard, settings=settings(QUICK, max_examples=1))


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-1), 0.001])
def test_bad_clock_resolution_is_rejected(bad: object) -> None:
    """clock_resolution must be a positive timedelta."""
    machine = type("BadResolution", (MemoryMachine,), {"clock_resolution": bad})
    with pytest.raises(TypeError, match="clock_resolution must be a positive timedelta"):
        machine()


def test_bad_expired_lease_policy_is_rejected() -> None:
    """expired_lease_policy must be one of the three SPEC 3.4 choices."""
    machine = type("BadPolicy", (MemoryMachine,), {"expired_lease_policy": "sometimes"})
    with pytest.raises(TypeError, match="expired_lease_policy must be"):
        machine()


def test_close_board_runs_once_per_board() -> None:
    """close_board receives every board make_board made, at teardown."""
    made: list[Board] = []
    closed: list[Board] = []

    class Counting(MemoryMachine):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            made.append(MemoryBoard(tasks, clock))
            return made[-1]

        def close_board(self, board: Board) -> None:
            closed.append(board)

    run_state_machine_as_test(Counting, settings=settings(QUICK, max_examples=10))
    assert made
    assert [id(b) for b in closed] == [id(b) for b in made]


class WholeSecondsBoard(_HookedBoard):
    """A correct host that keeps time in whole seconds, as many SQLite hosts do: the
    ``until`` it keeps, judges by and reports is truncated to the second."""

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        until = super()._until(now, ttl)
        return until.replace(microsecond=0) if until is not None else None


class WholeSecondsMachine(MemoryMachine):
    clock_resolution = timedelta(seconds=1)

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return WholeSecondsBoard(tasks, clock)


def test_coarse_resolution_host_passes_at_its_declared_resolution() -> None:
    """A whole-seconds host gets no false alarm when it declares clock_resolution = 1 s."""
    run_state_machine_as_test(WholeSecondsMachine, settings=QUICK)


def test_coarse_resolution_host_fails_at_a_finer_resolution() -> None:
    """The same host is caught when the machine draws times at the default 1 ms."""

    class Undeclared(WholeSecondsMachine):
        clock_resolution = BoardMachine.clock_resolution

    with pytest.raises(ContractViolation, match="until"):
        run_state_machine_as_test(Undeclared, settings=QUICK)


class RenewWithoutTokenCheck(MemoryBoard):
    """Renews whatever lease the task has, whoever asks."""

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        task = next((t for t in self.list_tasks() if t.id == task_id), None)
        if task is not None and task.lease is not None:
            token = task.lease.token
        return super().renew(task_id, token, request)


def test_failure_report_names_step_clause_expectation_and_trace() -> None:
    """A violation reads like a bug report: step, clause, expected and why, board, trace."""

    class Buggy(MemoryMachine):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            return RenewWithoutTokenCheck(tasks, clock)

    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(Buggy, settings=QUICK)
    report = str(caught.value)
    assert report.startswith("contract violation at step ")
    for heading in ("  step ", "  clause    SPEC 3.5", "  expected  LeaseLostError", "  board "):
        assert heading in report
    assert "trace (clock starts at" in report
    assert " >> " in report
    assert "renew(" in report


class CoverageMachine(MemoryMachine):
    """Sums the transitions every example reached."""

    reached: ClassVar[Counter[tuple[str, str, str]]] = Counter()

    def teardown(self) -> None:
        self.reached.update(self.transitions)
        super().teardown()


@pytest.mark.parametrize(
    "transition",
    [
        ("claimed, expired", "claim", "ok"),
        ("claimed, at until", "claim", "ok"),
        ("claimed, at until", "renew (current token)", "LeaseLostError"),
        ("claimed, live", "renew (current token)", "ok"),
        ("claimed, live", "release (stale token)", "LeaseLostError"),
        ("claimed, live", "complete (stale token)", "LeaseLostError"),
        ("claimed, live", "renew (stale token)", "LeaseLostError"),
        ("claimed, live", "complete (forged token)", "LeaseLostError"),
        ("claimed, expired", "release (current token)", "ok"),
        ("failed", "claim", "ok"),
        ("open", "claim", "BlockedError"),
        ("open", "claim (empty agent)", "ValueError"),
        ("unknown id", "claim", "NotFoundError"),
    ],
    ids=" / ".join,
)
def test_machine_reaches_boundaries_takeovers_and_stale_tokens(
    transition: tuple[str, str, str], reached: Counter[tuple[str, str, str]]
) -> None:
    """Default runs reach exact-expiry claims and renews, takeovers and stale-token actions."""
    assert reached[transition] > 0, f"never reached; reached: {dict(reached)}"


@pytest.fixture(scope="module")
def reached() -> Counter[tuple[str, str, str]]:
    """The transitions 400 derandomized examples against MemoryBoard reach."""
    CoverageMachine.reached.clear()
    run_state_machine_as_test(CoverageMachine, settings=settings(QUICK, max_examples=400))
    return CoverageMachine.reached


def test_lease_refs_read_well_in_printed_programs() -> None:
    """Bundle values say which lease they are, for Hypothesis's printed steps."""
    ref = LeaseRef("L2", "t1", "tok", 3, "a1")
    assert repr(ref) == "<L2: lease of 't1' for 'a1', fence 3>"


def test_for_board_builds_a_machine_from_a_factory() -> None:
    """BoardMachine.for_board takes the factory's pins and closes boards with close()."""
    machine = BoardMachine.for_board(SQLiteBoard)
    assert machine.expired_lease_policy == "reject"
    assert machine.__name__ == "SQLiteBoardMachine"
    run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=5))


def test_for_board_attributes_and_close_hook_win() -> None:
    """Keyword attributes override the factory's, and close= replaces board.close()."""
    closed: list[Board] = []
    machine = BoardMachine.for_board(
        MemoryBoard, close=closed.append, clock_resolution=timedelta(seconds=1)
    )
    assert machine.clock_resolution == timedelta(seconds=1)
    assert machine.expired_lease_policy == "accept"
    run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=3))
    assert closed
    assert all(isinstance(board, MemoryBoard) for board in closed)


def test_for_board_machines_have_distinct_database_keys() -> None:
    """Machines for different factories do not share example-database entries."""
    from hypothesis.internal.reflection import function_digest

    memory = BoardMachine.for_board(MemoryBoard)
    sqlite = BoardMachine.for_board(SQLiteBoard)
    assert function_digest(memory) != function_digest(sqlite)
