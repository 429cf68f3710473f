"""shortest_lease: the shortest lease a store honours, and the diagnosis that points to it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import ClaimRequest, TakenError, Task
from taskboard._cli import main
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import ContractViolation
from taskboard.stateful import BoardMachine
from taskboard.stateful._config import MachineConfig, wall_ttl_unit
from taskboard.strategies import BELOW_RESOLUTION

MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
QUICK = settings(max_examples=60, database=None, derandomize=True, deadline=None)


class DriftAllowanceBoard(MemoryBoard):
    """Refuses a lease shorter than its clock-drift allowance, as a Redlock does: a correct
    store whose shortest lease is 10 ms."""

    shortest: ClassVar[timedelta] = 10 * MS

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if request.ttl and request.ttl < self.shortest:
            raise TakenError(f"a {request.ttl} lease is within the drift allowance")
        return super().claim(task_id, agent, request)


def test_the_ttl_unit_is_no_shorter_than_the_shortest_lease() -> None:
    """TTLs and clock steps count in a unit no shorter than shortest_lease, rounded up to
    the resolution, on the manual clock and on the wall clock."""
    manual = BoardMachine.for_board(MemoryBoard, shortest_lease=10 * MS)
    assert MachineConfig.of(manual).ttl_unit == 10 * MS
    coarse = BoardMachine.for_board(
        MemoryBoard, shortest_lease=timedelta(milliseconds=1500), clock_resolution=1000 * MS
    )
    assert MachineConfig.of(coarse).ttl_unit == 2000 * MS
    wall = BoardMachine.for_board(MemoryBoard, clock_mode="wall", shortest_lease=MS)
    assert MachineConfig.of(wall).ttl_unit == wall_ttl_unit(MS, MS)  # the longer one wins
    assert MachineConfig.of(BoardMachine.for_board(MemoryBoard)).ttl_unit == MS


def test_a_ttl_below_the_resolution_is_half_of_it_unless_the_store_refuses_it() -> None:
    """The drawn TTL below the resolution is half of it (one microsecond at a microsecond's
    resolution), and one TTL unit where shortest_lease says the store cannot honour it."""
    second = MachineConfig.of(BoardMachine.for_board(MemoryBoard, clock_resolution=1000 * MS))
    assert second.lease_ttl(BELOW_RESOLUTION) == 500 * MS
    micro = MachineConfig.of(BoardMachine.for_board(MemoryBoard, clock_resolution=US))
    assert micro.lease_ttl(BELOW_RESOLUTION) == US
    drifting = MachineConfig.of(BoardMachine.for_board(MemoryBoard, shortest_lease=10 * MS))
    assert drifting.lease_ttl(BELOW_RESOLUTION) == drifting.ttl_unit == 10 * MS


@pytest.mark.parametrize("bad", [timedelta(-1), 10, "10ms"])
def test_a_shortest_lease_that_is_no_duration_is_a_type_error(bad: object) -> None:
    """shortest_lease must be a non-negative timedelta or None."""
    with pytest.raises(TypeError, match="shortest_lease"):
        MachineConfig.of(BoardMachine.for_board(MemoryBoard, shortest_lease=bad))


def test_a_store_with_a_drift_allowance_is_a_false_alarm_without_the_knob() -> None:
    """Without shortest_lease, the machine's 1 ms leases make a correct Redlock-like store
    refuse free claims: the alarm the knob is for."""
    machine = BoardMachine.for_board(DriftAllowanceBoard, trace_target="")
    with pytest.raises(ContractViolation, match=r"SPEC 3\.1"):
        run_state_machine_as_test(machine, settings=QUICK)


def test_the_same_store_passes_with_its_shortest_lease_set() -> None:
    """With shortest_lease = 10 ms, the same store passes: no lease shorter is drawn."""
    machine = BoardMachine.for_board(DriftAllowanceBoard, shortest_lease=10 * MS)
    run_state_machine_as_test(machine, settings=QUICK)


@pytest.mark.parametrize(("shortest", "expected"), [("10", 0), ("0", 1)])
def test_fuzz_takes_shortest_lease_in_milliseconds(
    shortest: str, expected: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """taskboard fuzz --shortest-lease 10 lets the Redlock-like store pass; 0 (any lease)
    brings the false alarm back."""
    target = f"{__name__}:DriftAllowanceBoard"
    options = ["--max-examples", "40", "--seed", "1", "--mode", "sequential", "--quiet"]
    database = ["--database", str(tmp_path / "db"), "--trace-dir", str(tmp_path)]
    code = main(["fuzz", target, "--shortest-lease", shortest, *options, *database])
    assert code == expected, capsys.readouterr().out


@pytest.mark.parametrize("bad", ["-1", "nan", "3600000"])
def test_a_bad_shortest_lease_is_a_usage_error(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--shortest-lease out of range: exit 2, one line, no traceback."""
    assert main(["fuzz", "--shortest-lease", bad, "--budget", "1s"]) == 2
    err = capsys.readouterr().err
    assert "--shortest-lease must be a number of milliseconds >= 0" in err
    assert "Traceback" not in err
