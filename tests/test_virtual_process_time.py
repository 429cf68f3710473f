"""Virtual mode reaches libraries that read time in the checker's own process (issue 30):
``time.time()``, ``datetime.now()`` and ``time.monotonic()`` read the machine's clock during
each board call (``taskboard._virtual._process_time``, installed by ``VirtualTime``)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from time import time as bound_time
from typing import Any

import pytest

import taskboard.servers
from taskboard import Clock, Task
from taskboard._virtual import _preload, _process_time
from taskboard._virtual._process_time import on_virtual_clock
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import OffByOneExpiry, WallClock
from taskboard.model import ContractViolation
from taskboard.stateful import BoardMachine
from tests.conftest import unavailable
from tests.test_virtual_clock import QUICK, run

T0 = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
MS = timedelta(milliseconds=1)


@pytest.fixture(scope="module")
def server() -> Iterator[taskboard.servers.Redis]:
    """A redis-server on the virtual clock (a skip without redis-server or a C compiler)."""
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH: no server to put on the virtual clock")
    try:
        _preload.preload_library()
    except taskboard.servers.VirtualClockUnavailable as exc:
        unavailable(str(exc))
    with taskboard.servers.Redis() as started:
        yield started


def test_a_call_reads_the_machine_instant_as_its_time() -> None:
    """time.time(), time.time_ns(), datetime.now() and utcnow(), also as names bound by
    from-imports, read the instant the call is made at, and the real time after it."""
    with on_virtual_clock(T0):
        assert time.time() == T0.timestamp()
        assert time.time_ns() == (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MS * 10**6 + 456000
        assert datetime.now(UTC) == T0
        assert datetime.utcnow() == T0.replace(tzinfo=None)
        assert bound_time() == T0.timestamp()
    assert abs(time.time() - datetime.now(UTC).timestamp()) < 60
    assert time.time() < T0.timestamp()


def test_monotonic_stands_still_and_moves_with_the_machine_clock() -> None:
    """Within a call time.monotonic() stands still; from one call to the next it moves as far
    as the machine's clock did, and not back when the machine's clock is behind."""
    with on_virtual_clock(T0):
        first = time.monotonic_ns()
        time.sleep(0.01)
        assert time.monotonic_ns() == first
    with on_virtual_clock(T0 + 1234 * MS):
        assert time.monotonic_ns() - first == 1234 * 10**6
        assert time.monotonic() == pytest.approx(first / 1e9 + 1.234)
    with on_virtual_clock(T0 - timedelta(hours=1)):  # another machine's server, behind
        assert time.monotonic_ns() == first + 1234 * 10**6
    with on_virtual_clock(T0 - timedelta(hours=1) + 5 * MS):
        assert time.monotonic_ns() == first + 1239 * 10**6


def test_other_threads_keep_the_real_monotonic_clock() -> None:
    """Only the calling thread's time.monotonic() is virtual: the checker's watchdog and the
    loop's timers measure real time during a call."""
    seen: list[float] = []
    with on_virtual_clock(T0):
        inside = time.monotonic()
        worker = threading.Thread(target=lambda: seen.append(time.monotonic()))
        worker.start()
        worker.join()
    assert seen[0] != inside
    assert time.monotonic is _process_time._real_monotonic


def test_overlapping_calls_keep_the_patch_until_the_last_ends() -> None:
    """Racing threads' calls overlap: the time stays virtual until the last one leaves, and
    each thread's monotonic reading is its own call's."""
    entered, leave = threading.Barrier(2), threading.Event()
    readings: list[float] = []

    def racer() -> None:
        with on_virtual_clock(T0):
            entered.wait()
            leave.wait()
            readings.append(time.time())

    other = threading.Thread(target=racer)
    other.start()
    with on_virtual_clock(T0):
        entered.wait()
    assert time.time() == T0.timestamp()  # the other call is still in: time-machine holds
    leave.set()
    other.join()
    assert readings == [T0.timestamp()]
    assert time.time() != T0.timestamp()


# -- boards that keep time in the checker's process --------------------------------------------


class _MonotonicClock:
    """What a library that measures leases with time.monotonic() reads, as aioredlock
    measures a lock's validity, given as datetimes from the first call's datetime.now()."""

    def __init__(self) -> None:
        self._anchor: tuple[datetime, float] | None = None

    def now(self) -> datetime:
        # Anchored at the first call: make_board runs outside any call, on real time.
        if self._anchor is None:
            self._anchor = (datetime.now(UTC), time.monotonic())
        wall, mono = self._anchor
        return wall + timedelta(seconds=time.monotonic() - mono)


class _MonotonicLeases(MemoryBoard):
    """Correct: leases measured on time.monotonic()."""

    def __init__(self, tasks: Iterable[Task], clock: Clock) -> None:
        super().__init__(tasks, _MonotonicClock())


class _MonotonicLeasesInclusive(OffByOneExpiry):
    """Bug: a lease measured on time.monotonic() is live at exactly its until."""

    def __init__(self, tasks: Iterable[Task], clock: Clock) -> None:
        super().__init__(tasks, _MonotonicClock())


def _machine(board: type[MemoryBoard], server: Any) -> type[BoardMachine]:
    machine = BoardMachine.for_board(board, clock_mode="virtual", clock_resolution=MS)
    machine.server = server  # type: ignore[attr-defined]
    return machine


def test_a_board_on_the_process_wall_clock_passes_in_virtual_mode(
    server: taskboard.servers.Redis,
) -> None:
    """A board that reads datetime.now(UTC) for every lease, the mutant of manual mode, is
    on the machine's clock in virtual mode and passes."""
    run(_machine(WallClock, server), QUICK)


def test_a_board_measuring_leases_on_monotonic_passes_in_virtual_mode(
    server: taskboard.servers.Redis,
) -> None:
    """Leases measured with time.monotonic() land exactly at their untils in virtual mode."""
    run(_machine(_MonotonicLeases, server), QUICK)


def test_a_monotonic_boundary_bug_is_caught_in_virtual_mode(
    server: taskboard.servers.Redis,
) -> None:
    """A lease measured on time.monotonic() and live at exactly its until is caught."""
    with pytest.raises(ContractViolation):
        run(_machine(_MonotonicLeasesInclusive, server), QUICK * 4, shrink=False)
