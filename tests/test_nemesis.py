"""The nemesis (SPEC 9): restarts and dropped connections as steps of the run, judged by the
model, in the machine, the parallel mode, traces, replay and the CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, ClaimRequest, Clock, ManualClock, Task
from taskboard._cli import main
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.nemesis_mutants import (
    NEMESIS_MUTANTS,
    FenceCounterInMemory,
    FileBoard,
    LeaseCacheNotRevalidated,
    LeasesInMemory,
    PeriodicSnapshotBoard,
    SnapshotClaimsDurable,
)
from taskboard.model import BoardModel, Call, ContractViolation, Op, Outcome
from taskboard.stateful import (
    SCHEMA_VERSION,
    BoardMachine,
    InfrastructureFault,
    load_trace,
    replay_trace,
    run_parallel_state_machine,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)
TOLERANT = {"tolerate_faults": (ConnectionResetError,)}
#: Derandomized, no database: each run is the same run.
QUICK = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.generate, Phase.shrink),
)


def machine_for(board: type[FileBoard], **attributes: Any) -> type[BoardMachine]:
    """A tolerant machine on ``board``, its nemesis hooks taken from the class."""
    return BoardMachine.for_board(board, **{**TOLERANT, **attributes})


def violation_of(machine: type[BoardMachine], chosen: settings = QUICK) -> ContractViolation:
    """The violation the machine reports (the test fails if it reports none)."""
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(machine, settings=chosen)
    return caught.value


# -- the model -------------------------------------------------------------------------------


def claimed_model(durable_ops: int = 1) -> tuple[BoardModel, list[Task]]:
    """A model after ``durable_ops`` claim/release rounds and one claim of t1, and the
    snapshots it held, oldest first."""
    board = MemoryBoard([Task("t1")], ManualClock(T0))
    model = BoardModel.start(board.list_tasks())
    model = model.reconcile(board.list_tasks())
    held = [board.list_tasks()[0]]
    for _ in range(durable_ops):
        claim = Call(Op.CLAIM, "t1", agent="a1", ttl=timedelta(0))
        task = board.claim("t1", "a1", ClaimRequest(timedelta(0)))
        model = model.advance(claim, T0, Outcome.returned(task)).reconcile(board.list_tasks())
        held.append(board.list_tasks()[0])
        assert task.lease is not None
        release = Call(Op.RELEASE, "t1", token=task.lease.token)
        board.release("t1", task.lease.token)
        model = model.advance(release, T0, Outcome.returned(None)).reconcile(board.list_tasks())
        held.append(board.list_tasks()[0])
    task = board.claim("t1", "a1", ClaimRequest(timedelta(0)))
    claim = Call(Op.CLAIM, "t1", agent="a1", ttl=timedelta(0))
    model = model.advance(claim, T0, Outcome.returned(task)).reconcile(board.list_tasks())
    held.append(board.list_tasks()[0])
    return model, held


def test_a_durable_restart_must_show_exactly_the_model() -> None:
    """SPEC 9: a durable board's snapshot after a restart equals the model's; an older one is
    a violation that says to declare durable = False."""
    model, held = claimed_model()
    restarted, lost = model.restart([held[-1]], durable=True)
    assert lost == frozenset()
    assert restarted.tasks == model.tasks
    with pytest.raises(ContractViolation) as caught:
        model.restart([held[0]], durable=True)
    assert caught.value.clause.startswith("SPEC 9")
    assert "durable = False" in caught.value.observed


def test_a_board_that_is_not_durable_may_fall_back_to_any_state_since_the_restart() -> None:
    """SPEC 9: not durable, each earlier state is accepted, the model goes on from it, and the
    lease it lost is returned."""
    model, held = claimed_model()
    current = model.tasks[0]
    assert current.lease is not None
    for earlier in held[:-1]:
        restarted, lost = model.restart([earlier], durable=False)
        assert restarted.tasks == (earlier,)
        assert lost == frozenset({current.lease.token})


def test_a_board_that_is_not_durable_may_not_show_a_state_it_never_held() -> None:
    """SPEC 9: a forged lease, or a state from before the previous restart, is a violation."""
    model, held = claimed_model()
    lease = held[-1].lease
    assert lease is not None
    forged = Task("t1", state=held[-1].state, owner="a1", lease=lease.__class__("x", 9, None))
    with pytest.raises(ContractViolation, match="SPEC 9"):
        model.restart([forged], durable=False)
    after_first, _ = model.restart([held[-1]], durable=False)
    with pytest.raises(ContractViolation, match=r"held since the last restart"):
        after_first.restart([held[0]], durable=False)


def test_fences_stay_greater_after_a_restart_lost_them() -> None:
    """SPEC 9: after falling back to an older state, a claim must still beat every fence."""
    model, held = claimed_model()
    restarted, _ = model.restart([held[0]], durable=False)
    stale = Task("t1", state=held[-1].state, owner="a2", lease=held[1].lease, seq=held[0].seq + 1)
    claim = Call(Op.CLAIM, "t1", agent="a2", ttl=timedelta(0))
    with pytest.raises(ContractViolation, match=r"token never issued before|fence greater"):
        restarted.advance(claim, T0, Outcome.returned(stale))


# -- the machine -----------------------------------------------------------------------------


def test_the_durable_file_board_passes_with_restarts_and_drops() -> None:
    """A correct durable board passes with both hooks on, and the hooks do run."""
    ran: list[str] = []

    class Counted(machine_for(FileBoard)):  # type: ignore[misc]
        def teardown(self) -> None:
            ran.extend(step.nemesis for step in self.trace if step.nemesis)
            super().teardown()

    run_state_machine_as_test(Counted, settings=QUICK)
    assert {"restart", "drop"} <= set(ran)


def test_a_board_that_loses_writes_passes_when_it_says_it_is_not_durable() -> None:
    """SPEC 9: PeriodicSnapshotBoard (durable = False) passes; claiming durable, it is caught."""
    run_state_machine_as_test(machine_for(PeriodicSnapshotBoard), settings=QUICK)
    violation = violation_of(machine_for(PeriodicSnapshotBoard, durable=True))
    assert violation.clause.startswith("SPEC 9")


@pytest.mark.slow
@pytest.mark.parametrize("mutant", NEMESIS_MUTANTS, ids=lambda m: m.__name__)
def test_each_nemesis_mutant_passes_without_the_nemesis(mutant: type[FileBoard]) -> None:
    """With the hooks off, no nemesis mutant is caught: the nemesis is what catches them."""
    run_state_machine_as_test(machine_for(mutant, nemesis=()), settings=QUICK)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mutant", "clause"),
    [
        (FenceCounterInMemory, "SPEC 3.1"),
        (LeasesInMemory, "SPEC 9"),
        (LeaseCacheNotRevalidated, "SPEC 9"),
        (SnapshotClaimsDurable, "SPEC 9"),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_each_nemesis_mutant_is_caught_with_the_nemesis(
    mutant: type[FileBoard], clause: str
) -> None:
    """With the hooks on, each mutant is caught, and its shrunk trace restarts the storage."""
    violation = violation_of(machine_for(mutant))
    assert violation.clause.startswith(clause)
    assert "restart_storage(board)" in str(violation)
    assert len(violation.trace) <= 8  # type: ignore[attr-defined]


def test_the_gallery_lists_every_mutant_with_a_docstring() -> None:
    """NEMESIS_MUTANTS holds the four documented mutants, none of them the correct boards."""
    assert set(NEMESIS_MUTANTS) == {
        FenceCounterInMemory,
        LeasesInMemory,
        LeaseCacheNotRevalidated,
        SnapshotClaimsDurable,
    }
    assert all((m.__doc__ or "").startswith("Bug:") for m in NEMESIS_MUTANTS)


class Plain(BoardMachine):
    """A machine with no nemesis hook."""

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)


def test_a_machine_without_hooks_has_no_nemesis_steps() -> None:
    """No hook defined: no nemesis rule, and asking for one is a TypeError naming the hook."""
    assert Plain.defined_nemesis() == ()
    assert Plain.nemesis_hooks() == ()
    assert not hasattr(Plain, "restart")  # no rule that could never run
    assert callable(machine_for(FileBoard).restart)
    asking = type("Asking", (Plain,), {"nemesis": ("restart",)})
    with pytest.raises(TypeError, match="defines no restart_storage"):
        asking.check_definition()


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"nemesis": ("reboot",)}, "nemesis must be None or a tuple"),
        ({"nemesis": "restart"}, "nemesis must be None or a tuple"),
        ({"durable": "yes"}, "durable must be True or False"),
    ],
)
def test_bad_nemesis_attributes_are_type_errors(attributes: dict[str, Any], message: str) -> None:
    """A bad ``nemesis`` or ``durable`` is a TypeError before anything runs."""
    machine = type("Bad", (machine_for(FileBoard),), attributes)
    with pytest.raises(TypeError, match=message):
        machine.check_definition()


def test_nemesis_chooses_which_defined_hooks_run() -> None:
    """``nemesis = ("drop",)`` runs drops only; ``()`` runs none."""
    machine = machine_for(FileBoard)
    assert machine.defined_nemesis() == ("restart", "drop")
    assert machine_for(FileBoard, nemesis=("drop",)).nemesis_hooks() == ("drop",)
    assert machine_for(FileBoard, nemesis=()).nemesis_hooks() == ()


class RestartReturnsJunk(BoardMachine):
    """restart_storage returns something that is not a board."""

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)

    def restart_storage(self, board: Any) -> Any:
        return "not a board"


class RestartFails(RestartReturnsJunk):
    """restart_storage raises, as a server that does not come back does."""

    def restart_storage(self, board: Any) -> Any:
        raise OSError("the server did not come back")


def test_a_restart_that_returns_no_board_is_a_type_error() -> None:
    """restart_storage must return a Board or None."""
    machine = RestartReturnsJunk()
    machine.start({"t1": (), "t2": (), "t3": ()}, 0)
    with pytest.raises(TypeError, match="neither None nor a Board"):
        machine.restart()


def test_a_failing_restart_is_an_infrastructure_fault_at_its_step() -> None:
    """A hook that raises is an infrastructure fault naming the hook, not a verdict."""
    machine = RestartFails()
    machine.start({"t1": (), "t2": (), "t3": ()}, 0)
    with pytest.raises(InfrastructureFault, match=r"restart_storage\(board\)"):
        machine.restart()


def test_an_async_hook_is_awaited() -> None:
    """restart_storage may be ``async def``; it runs on the board's loop."""
    calls: list[str] = []

    class AsyncHook(Plain):
        async def restart_storage(self, board: Any) -> None:
            calls.append("restart")

    machine = AsyncHook()
    machine.start({"t1": (), "t2": (), "t3": ()}, 0)
    machine.restart()
    machine.teardown()
    assert calls == ["restart"]
    assert machine.trace[-1].nemesis == "restart"


# -- parallel mode, traces, replay -----------------------------------------------------------


def test_the_parallel_mode_restarts_in_the_prefix() -> None:
    """The parallel mode's prefix may restart or drop; a correct board passes."""
    ran: list[str] = []

    class Counted(machine_for(FileBoard)):  # type: ignore[misc]
        def restart_storage(self, board: Any) -> Any:
            ran.append("restart")
            return super().restart_storage(board)

    run_parallel_state_machine(Counted, settings=settings(QUICK, max_examples=100))
    assert ran


def test_a_nemesis_trace_writes_reads_and_replays(tmp_path: Path) -> None:
    """A failing trace with a restart is written in this version, read back, and replays to the
    same violation on the board class; a board without the hook cannot replay it."""
    machine = type("Traced", (machine_for(SnapshotClaimsDurable),), {"trace_dir": str(tmp_path)})
    violation_of(machine)
    (path,) = tmp_path.glob("*.json")
    document = json.loads(path.read_text())
    assert document["version"] == SCHEMA_VERSION
    assert {"kind": "nemesis", "hook": "restart"}.items() <= document["steps"][-1].items()
    trace = load_trace(path)
    assert trace.steps[-1].nemesis == "restart"
    result = replay_trace(trace, SnapshotClaimsDurable)
    assert not result.passed
    assert result.violation is not None
    assert result.violation.clause.startswith("SPEC 9")
    with pytest.raises(ValueError, match="restart_storage"):
        replay_trace(trace, MemoryBoard)
    assert main(["replay", str(path), "--board", "taskboard.hosts.memory:MemoryBoard"]) == 2


def test_a_trace_with_an_unknown_hook_is_a_trace_file_error(tmp_path: Path) -> None:
    """A nemesis step naming no hook is rejected with its path in the file."""
    machine = type("Traced", (machine_for(SnapshotClaimsDurable),), {"trace_dir": str(tmp_path)})
    violation_of(machine)
    (path,) = tmp_path.glob("*.json")
    document = json.loads(path.read_text())
    document["steps"][-1]["hook"] = "reboot"
    path.write_text(json.dumps(document))
    assert main(["replay", str(path)]) == 2


# -- the CLI ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_fuzz_with_the_nemesis_catches_a_mutant_and_counts_the_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fuzz --nemesis restart`` catches FenceCounterInMemory and reports restarts; with
    ``--nemesis none`` the same run passes."""
    target = "taskboard.hosts.nemesis_mutants:FenceCounterInMemory"
    common = ["--max-examples", "100", "--seed", "1", "--quiet", "--mode", "sequential"]
    found = main(["fuzz", target, "--nemesis", "restart", "--trace-dir", str(tmp_path), *common])
    assert found == 1
    assert "restart_storage(board)" in capsys.readouterr().out
    common[1] = "30"
    passed = main(["fuzz", target, "--nemesis", "none", "--trace-dir", str(tmp_path), *common])
    out = capsys.readouterr().out
    assert passed == 0
    assert "restart_storage" not in out


def test_fuzz_coverage_counts_nemesis_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A passing run with the nemesis lists its restarts in the coverage table."""
    target = "taskboard.hosts.nemesis_mutants:FileBoard"
    args = ["--max-examples", "30", "--seed", "1", "--quiet", "--mode", "sequential", "--verbose"]
    code = main(["fuzz", target, "--nemesis", "restart", "--trace-dir", str(tmp_path), *args])
    out = capsys.readouterr().out
    assert code == 0
    assert "nemesis" in out
    assert "restart_storage" in out


@pytest.mark.parametrize(
    ("target", "nemesis", "message"),
    [
        ("taskboard.hosts.nemesis_mutants:FileBoard", "reboot", "--nemesis takes restart"),
        ("taskboard.hosts.memory:MemoryBoard", "restart", "defines no restart_storage"),
    ],
)
def test_fuzz_rejects_a_nemesis_it_cannot_run(
    target: str, nemesis: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown step, or a hook the target lacks, is exit 2 with one line."""
    assert main(["fuzz", target, "--nemesis", nemesis, "--max-examples", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_the_file_board_keeps_its_state_across_a_restart() -> None:
    """FileBoard.restart_storage opens the same file: the same tasks, leases and fences."""
    board = FileBoard([Task("t1")], ManualClock(T0))
    task = board.claim("t1", "a1", ClaimRequest(5 * MS))
    restarted = board.restart_storage()
    try:
        assert restarted.list_tasks() == [task]
        board_dir = restarted._directory
    finally:
        restarted.close()
    assert not board_dir.exists()
