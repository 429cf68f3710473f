"""A coarse TTL unit on the wall clock (a whole-second store): the schedule is scaled down so
that an example costs seconds, not minutes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from taskboard import SystemClock, Task
from taskboard._fuzz.options import FuzzOptions
from taskboard._fuzz.targets import Target
from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import BoardMachine
from taskboard.stateful._config import COARSE_STEP_COUNT, COARSE_UNIT, MachineConfig
from taskboard.stateful._session import (
    STOP_POLL,
    Session,
    StopRequested,
    sleep_until,
    stop_when,
)
from taskboard.strategies import OUTLIVING_TTL_TICKS

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def machine(resolution: timedelta, mode: str = "wall") -> type[BoardMachine]:
    return BoardMachine.for_board(
        MemoryBoard, clock_mode=mode, clock_resolution=resolution, trace_target=""
    )


@pytest.fixture
def coarse_session() -> Iterator[Session]:
    """A wall-clock session whose TTL unit is the coarse threshold (100 ms)."""
    session = Session(machine(COARSE_UNIT)(), [Task("t1")], T0)
    yield session
    session.close()


def test_only_a_long_unit_on_the_wall_clock_is_coarse() -> None:
    """Coarse: the wall clock with a unit of 100 ms or more; the manual clock never is."""
    coarse = MachineConfig.of(machine(timedelta(seconds=1)))
    assert coarse.coarse
    assert coarse.longest_wait == 2
    assert coarse.wait_budget == timedelta(seconds=6)
    fine = MachineConfig.of(machine(timedelta(milliseconds=1)))
    assert not fine.coarse
    assert fine.wait_budget is None
    assert fine.longest_wait == 8
    assert not MachineConfig.of(machine(timedelta(seconds=1), "manual")).coarse


def test_short_leases_end_within_the_example_on_a_coarse_unit(coarse_session: Session) -> None:
    """A drawn lease of 5 or 20 ticks lasts two units; 0 (no expiry) and the outliving
    length keep their meaning."""
    unit = coarse_session.ttl_unit
    assert coarse_session.config.lease_ttl(1) == unit
    assert coarse_session.config.lease_ttl(5) == 2 * unit
    assert coarse_session.config.lease_ttl(20) == 2 * unit
    assert coarse_session.config.lease_ttl(0) == timedelta(0)
    assert coarse_session.config.lease_ttl(OUTLIVING_TTL_TICKS) == OUTLIVING_TTL_TICKS * unit


def test_blind_clock_steps_stop_sleeping_once_the_wait_budget_is_spent(
    coarse_session: Session,
) -> None:
    """Clock steps sleep until six units are spent; the next leaves the clock where it is and
    says so in the trace. A jump to a lease's end is not counted."""
    unit = coarse_session.ttl_unit
    now = coarse_session.clock.now
    coarse_session.move_clock(now() + 4 * unit, "", blind=True)
    coarse_session.move_clock(now() + unit, "to a lease's end")  # aimed: not counted
    coarse_session.move_clock(now() + 2 * unit, "", blind=True)  # exactly six units
    before = now()
    coarse_session.move_clock(now() + unit, "", blind=True)
    step = coarse_session.trace[-1]
    assert step.note == "clock stays: the example's wait budget is spent"
    assert now() - before < unit
    assert 5 * unit < coarse_session.waited <= 6 * unit


def test_fuzz_gives_a_coarse_example_fewer_steps(tmp_path: Path) -> None:
    """taskboard fuzz runs at most 50 steps an example on a coarse unit (fewer than on a fine
    one), unless the machine asks for a number of its own."""
    coarse = Target("coarse", machine(timedelta(seconds=1)))
    fine = Target("fine", machine(timedelta(milliseconds=1)))
    options = FuzzOptions(trace_dir=str(tmp_path))
    assert options.settings(coarse, None).stateful_step_count == COARSE_STEP_COUNT
    assert options.settings(fine, None).stateful_step_count > COARSE_STEP_COUNT


def wall_machine(resolution: timedelta) -> BoardMachine:
    """A started wall-clock machine over MemoryBoard with tasks t1..t3 and no dependencies."""
    started = machine(resolution)()
    started.start({"t1": (), "t2": (), "t3": ()}, 0)
    return started


def test_at_expiry_with_no_lease_ending_claims_one_and_acts_after_its_end() -> None:
    """On the wall clock with no lease ending soon, at_expiry claims a lease of one unit for
    the agent, lands just after its end and acts with its token: a renew after expiry."""
    machine = wall_machine(timedelta(milliseconds=20))
    try:
        machine.at_expiry(which=0, early=False, then="renew", agent="a1", ttl_ticks=1)
        calls = [step for step in machine.session.trace if step.call is not None]
        assert [step.call.op.value for step in calls if step.call] == ["claim", "renew"]
        claim, renew = calls
        lease = claim.outcome.task.lease if claim.outcome and claim.outcome.task else None
        assert lease is not None
        assert lease.until is not None
        assert renew.call is not None
        assert renew.call.token == lease.token
        assert renew.window is not None
        assert renew.window.earliest > lease.until
    finally:
        machine.teardown()


def test_at_expiry_acts_at_once_on_a_lease_that_ended_unclaimed() -> None:
    """On the wall clock, a lease that ended a while ago and was not taken over is acted on
    with no clock move: the holder that slept past its TTL."""
    machine = wall_machine(timedelta(milliseconds=20))
    try:
        machine.claim("t2", "a2", 1)
        time.sleep(0.1)  # well past the lease's end (one 20 ms unit, the skew, the landing)
        before = len(machine.session.trace)
        machine.at_expiry(which=0, early=True, then="complete", agent="a1", ttl_ticks=1)
        added = machine.session.trace[before:]
        assert [step.call.op.value for step in added if step.call] == ["complete"]
        assert all(step.call is not None for step in added)  # no clock step
    finally:
        machine.teardown()


def test_a_stop_ends_a_long_wall_clock_sleep_within_a_poll() -> None:
    """A run asked to stop (Ctrl-C, the budget) in the middle of a 5 s clock step ends it
    within STOP_POLL, not when the sleep is over."""
    clock = SystemClock()
    asked = time.monotonic() + 0.1
    with stop_when(lambda: time.monotonic() > asked), pytest.raises(StopRequested):
        sleep_until(clock, clock.now() + timedelta(seconds=5), stoppable=True)
    assert time.monotonic() - asked < 0.1 + STOP_POLL.total_seconds()
