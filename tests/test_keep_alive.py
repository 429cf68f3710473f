"""keep_alive_interval: boards that renew their leases by themselves (a library's keep-alive)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Lease, State, Task
from taskboard._cli import main
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import _KeepAliveBoard
from taskboard.model import BoardModel, Call, ContractViolation, Op, Outcome
from taskboard.stateful import BoardMachine
from taskboard.stateful._config import MachineConfig
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._tracefile import SCHEMA, SCHEMA_VERSION, TraceFileError, parse_trace

START = datetime(2026, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)
WALL = settings(max_examples=6, deadline=None, database=None, derandomize=True)


def _claimed(model: BoardModel) -> tuple[BoardModel, Task]:
    got = Task("t1", state=State.CLAIMED, owner="a1", lease=Lease("k", 1, START + 50 * MS), seq=1)
    call = Call(Op.CLAIM, "t1", agent="a1", ttl=50 * MS)
    return model.advance(call, START, Outcome.returned(got)), got


def test_a_kept_alive_lease_never_expires_and_may_move_its_until_and_seq() -> None:
    """With keeps_alive a claimed lease is still live long after its first until, and a
    snapshot that shows it extended, seq grown, is what the contract expects."""
    model = BoardModel.start([Task("t1")], keeps_alive=True).reconcile([Task("t1")])
    model, got = _claimed(model)
    later = START + timedelta(hours=1)
    takeover = model.expect(Call(Op.CLAIM, "t1", agent="a2"), later)
    assert [allowed.error for allowed in takeover] == ["TakenError"]
    assert got.lease is not None
    extended = dataclasses.replace(
        got, lease=dataclasses.replace(got.lease, until=later + 50 * MS), seq=7
    )
    assert model.reconcile([extended]).task("t1") is not None


def test_without_keeps_alive_the_same_moved_until_is_a_violation() -> None:
    """A board that does not declare a keep-alive may not move a lease's until on its own."""
    model = BoardModel.start([Task("t1")]).reconcile([Task("t1")])
    model, got = _claimed(model)
    assert got.lease is not None
    extended = dataclasses.replace(
        got, lease=dataclasses.replace(got.lease, until=START + timedelta(hours=1)), seq=7
    )
    with pytest.raises(ContractViolation, match="until"):
        model.reconcile([extended])


def test_a_released_task_that_a_keep_alive_re_arms_is_a_violation() -> None:
    """keeps_alive excuses a held lease's moves only: a released task shown held again is
    caught."""
    model = BoardModel.start([Task("t1")], keeps_alive=True).reconcile([Task("t1")])
    model, got = _claimed(model)
    model = model.advance(Call(Op.RELEASE, "t1", token="k"), START + MS, Outcome.returned(None))
    with pytest.raises(ContractViolation, match="state"):
        model.reconcile([dataclasses.replace(got, seq=3)])


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"keep_alive_interval": timedelta(0), "clock_mode": "wall"}, "positive timedelta"),
        ({"keep_alive_interval": 15, "clock_mode": "wall"}, "positive timedelta"),
        ({"keep_alive_interval": 15 * MS}, "clock_mode = 'wall'"),
    ],
)
def test_a_keep_alive_interval_the_machine_cannot_use_is_a_type_error(
    attributes: dict[str, object], message: str
) -> None:
    """keep_alive_interval is a positive timedelta or None, and only on the wall clock."""
    with pytest.raises(TypeError, match=message):
        MachineConfig.of(BoardMachine.for_board(MemoryBoard, **attributes))


@pytest.mark.slow
def test_a_board_with_a_correct_keep_alive_passes() -> None:
    """The keep-alive that stops with its lease gives no false alarm."""
    run_state_machine_as_test(
        BoardMachine.for_board(_KeepAliveBoard, trace_target=""), settings=WALL
    )


@pytest.mark.slow
def test_a_correct_keep_alive_undeclared_is_a_violation() -> None:
    """Without keep_alive_interval the same board fails: its leases outlive their until."""
    undeclared = BoardMachine.for_board(_KeepAliveBoard, keep_alive_interval=None, trace_target="")
    # On the wall clock Hypothesis's replay may draw other steps (Flaky): reported as the
    # violation that was seen.
    with pytest.raises(ContractViolation), failures_reported(undeclared):
        run_state_machine_as_test(undeclared, settings=settings(WALL, max_examples=30))


@pytest.mark.slow
def test_fuzz_catches_a_keep_alive_that_outlives_its_lease_on_the_step_that_ended_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """KeepAliveOutlivesRelease: the task a release, complete or fail ended shows held again
    in the snapshot after that very step; the heading names the keep-alive and the trace
    file records it."""
    target = "taskboard.hosts.mutants:KeepAliveOutlivesRelease"
    options = ["--max-examples", "40", "--seed", "2", "--mode", "sequential", "--quiet"]
    paths = ["--database", str(tmp_path / "db"), "--trace-dir", str(tmp_path)]
    assert main(["fuzz", target, "--shrink-budget", "5s", *options, *paths]) == 1
    out = capsys.readouterr().out
    assert "the board renews leases by itself every 15ms" in out
    assert "took effect)" in out
    assert "state=<State.CLAIMED" in out
    (trace,) = tmp_path.glob("*.json")
    assert json.loads(trace.read_text())["keep_alive_interval_us"] == 15_000


def test_a_trace_with_a_keep_alive_on_the_manual_clock_is_rejected(tmp_path: Path) -> None:
    """A hand-edited trace that puts a keep-alive on the manual clock is a clear error."""
    document = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "start": START.isoformat(),
        "resolution_us": 1000,
        "expired_lease_policy": "either",
        "keep_alive_interval_us": 15_000,
        "tasks": [],
        "steps": [],
    }
    with pytest.raises(TraceFileError, match="keep_alive_interval_us"):
        parse_trace(json.dumps(document))
