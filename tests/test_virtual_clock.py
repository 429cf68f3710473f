"""``clock_mode = "virtual"`` (issue 30): a real redis-server on the checker's clock.

The server runs under the preload library built from ``taskboard/_virtual/clock.c``; these
tests skip without ``redis-server`` or a C compiler (and fail instead when CI sets
``TASKBOARD_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import taskboard.servers
from taskboard import Clock, ManualClock, Task
from taskboard._clock import FollowedClock
from taskboard._virtual import _preload
from taskboard.hosts.redis import RedisBoard
from taskboard.model import BoardModel, ContractViolation
from taskboard.model._returns import check_until
from taskboard.stateful import BoardMachine, _session, parse_trace, replay_trace, trace_to_json
from taskboard.stateful._virtual_clock import example_start
from tests.conftest import unavailable
from tests.virtual_boards import PxKeyBoard, ServerExpiryInclusive, ServerTakeoverOneTickEarly

MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
ROOT = Path(__file__).resolve().parent.parent
#: The quick run's examples of a correct board; the slow run's.
QUICK = 50
LONG = 300


@pytest.fixture(scope="module")
def server() -> Iterator[taskboard.servers.Redis]:
    """A redis-server on the virtual clock, for this module; a skip without redis-server or
    a C compiler."""
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH: no server to put on the virtual clock")
    try:
        _preload.preload_library()
    except taskboard.servers.VirtualClockUnavailable as exc:
        unavailable(str(exc))
    with taskboard.servers.Redis() as started:
        yield started


def machine(board: type[RedisBoard], server: Any, **attributes: Any) -> type[BoardMachine]:
    """A virtual-mode machine of a server-clock board ``board`` on ``server``."""

    class VirtualMachine(BoardMachine):
        clock_mode = "virtual"
        clock_resolution = RedisBoard.clock_resolution

        def make_board(self, tasks: list[Task], clock: Clock) -> RedisBoard:
            return board(tasks, "server", self.server.url)

    VirtualMachine.server = server  # type: ignore[attr-defined]
    for name, value in attributes.items():
        setattr(VirtualMachine, name, value)
    VirtualMachine.__name__ = VirtualMachine.__qualname__ = f"Virtual{board.__name__}"
    return VirtualMachine


def run(machine_class: type[BoardMachine], examples: int, *, shrink: bool = True) -> None:
    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    run_state_machine_as_test(
        machine_class,
        settings=settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=phases,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        ),
    )


# -- the preload library and the server ---------------------------------------------------------


def test_a_px_key_lives_through_its_deadline_on_the_virtual_clock(
    server: taskboard.servers.Redis,
) -> None:
    """A key set with PX 5000 keeps its PTTL across real time, is there at exactly +5.000 s
    of virtual time and gone at +5.001 s."""
    start = server.now() + timedelta(seconds=1)
    server.set_time(start)
    client = redis.Redis.from_url(server.url)
    client.set("k", "v", px=5000)
    time.sleep(0.2)
    assert client.pttl("k") == 5000
    server.set_time(start + 4999 * MS)
    assert client.pttl("k") == 1
    server.set_time(start + 5000 * MS)
    assert client.exists("k") == 1
    server.set_time(start + 5001 * MS)
    assert client.exists("k") == 0
    assert client.time() == (int(start.timestamp()) + 5, (start + 5001 * MS).microsecond)
    client.close()


def test_the_server_clock_never_goes_back(server: taskboard.servers.Redis) -> None:
    """set_time before the server's time is a ValueError; the same time is not."""
    now = server.now()
    server.set_time(now)
    with pytest.raises(ValueError, match="never goes back"):
        server.set_time(now - US)
    with pytest.raises(ValueError, match="naive"):
        server.set_time(now.replace(tzinfo=None))


def test_making_a_server_starts_nothing() -> None:
    """Redis() is lazy: a class attribute starts no server until it is used."""
    lazy = taskboard.servers.Redis()
    assert not lazy.running
    assert repr(lazy) == "Redis(not started)"


def test_a_missing_redis_server_is_a_server_start_error() -> None:
    """A binary that is not on PATH is a ServerStartError that names it and PATH."""
    missing = taskboard.servers.Redis("no-such-redis-server")
    with pytest.raises(
        taskboard.servers.ServerStartError, match="'no-such-redis-server' is not on PATH"
    ):
        _ = missing.url


def test_a_missing_compiler_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no C compiler to build the preload library, VirtualClockUnavailable names it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(
        taskboard.servers.VirtualClockUnavailable, match="no C compiler 'no-such-cc'"
    ):
        _preload.preload_library()


def test_the_library_is_built_once_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library is built under a name that holds its source's hash, and reused."""
    if shutil.which(os.environ.get("CC") or "cc") is None:
        unavailable("no C compiler to build the virtual clock's preload library")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = _preload.preload_library()
    assert built.parent == tmp_path / "taskboard" / "virtual-clock"
    stamp = built.stat().st_mtime_ns
    assert _preload.preload_library() == built
    assert built.stat().st_mtime_ns == stamp
    assert [p.name for p in built.parent.iterdir()] == [built.name]


def _pid_gone(pid: int) -> bool:
    """Wait (up to STARTUP_TIMEOUT) for ``pid`` to be gone; True if it is."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
        except (FileNotFoundError, IndexError):
            return True
        if state == "Z":  # exited; its parent has not reaped it yet
            return True
        time.sleep(0.02)
    return False


def started_and_ended(server: str, ending: str, timeout: float) -> tuple[int, Path]:
    """Run a process that starts ``taskboard.servers.<server>()`` and then exits, is
    SIGKILLed, or stops it (``ending``); the server's pid and its directory."""
    end = {
        "exit": "",
        "killed": "os.kill(os.getpid(), signal.SIGKILL)",
        "with": "s.stop()",
    }[ending]
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        import taskboard.servers
        s = taskboard.servers.{server}()
        s.start()
        print(s.pid, s._running.directory, flush=True)
        {end}
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        check=False,
    )
    pid, directory = child.stdout.split()
    return int(pid), Path(directory)


@pytest.mark.parametrize("ending", ["exit", "killed", "with"])
def test_a_server_never_outlives_its_process(server: taskboard.servers.Redis, ending: str) -> None:
    """A process that starts a server and exits, is SIGKILLed, or leaves a with block
    leaves no redis-server and no directory behind."""
    pid, directory = started_and_ended("Redis", ending, timeout=60)
    assert _pid_gone(pid)
    if ending != "killed":  # a killed process cannot remove its temporary directory
        assert not directory.exists()


# -- the clock's seam -----------------------------------------------------------------------------


def test_a_followed_clock_tells_every_move() -> None:
    """FollowedClock hands its start and every set and advance to its follower, in order."""
    heard: list[datetime] = []
    start = datetime(2026, 1, 1, tzinfo=UTC)
    clock = FollowedClock(start, heard.append)
    clock.advance(MS)
    clock.set(start + 5 * MS)
    assert heard == [start, start + MS, start + 5 * MS]
    assert isinstance(clock, ManualClock)
    with pytest.raises(ValueError, match="never goes backwards"):
        clock.set(start)
    assert heard[-1] == start + 5 * MS


def test_an_example_start_moves_by_whole_seconds_past_the_server() -> None:
    """A drawn start behind the server's clock moves forward by whole periods (seconds for
    a millisecond grid) to the first one not before it; one ahead stays."""
    drawn = datetime(2026, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)
    later = datetime(2026, 6, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    moved = example_start(drawn, later, MS)
    assert moved >= later
    assert moved - later < timedelta(seconds=1)
    assert moved.microsecond == drawn.microsecond
    assert example_start(later, drawn, MS) == later
    assert example_start(drawn, drawn, MS) == drawn
    seven = example_start(drawn, later, 7 * MS)
    assert (seven - drawn) % (7 * timedelta(seconds=1)) == timedelta(0)


def test_virtual_mode_needs_a_server() -> None:
    """A virtual-mode machine without a server is a TypeError saying what to set."""

    class NoServer(BoardMachine):
        clock_mode = "virtual"

        def make_board(self, tasks: list[Task], clock: Clock) -> Any:
            raise AssertionError("never made")

    with pytest.raises(TypeError, match=r"needs a server .*taskboard.servers.Redis\(\)"):
        run(NoServer, 1)


def test_each_example_starts_on_an_empty_server_at_its_own_time(
    server: taskboard.servers.Redis,
) -> None:
    """Before make_board the server is emptied and its clock is the example's start."""
    seen: list[tuple[int, bool]] = []

    class Probe(RedisBoard):
        def __init__(self, tasks: Any, clock: Any, url: str) -> None:
            client = redis.Redis.from_url(url)
            seen.append((client.dbsize(), server.now() == made_clock[-1].now()))
            client.close()
            super().__init__(tasks, "server", url)

    made_clock: list[Clock] = []
    probing = machine(Probe, server)
    make = probing.make_board

    def make_board(self: Any, tasks: list[Task], clock: Clock) -> RedisBoard:
        made_clock.append(clock)
        return make(self, tasks, clock)

    probing.make_board = make_board  # type: ignore[method-assign]
    run(probing, 5, shrink=False)
    assert seen
    assert all(empty == 0 and same for empty, same in seen)


# -- the store's own boundary ---------------------------------------------------------------------


def test_the_store_boundary_accepts_an_until_one_tick_late() -> None:
    """With store_boundary, an until up to one resolution past now + ttl is accepted and
    adopted as reported; further, or without it, it is a violation."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ttl = 5 * MS
    late = now + ttl + MS
    assert check_until(late, now, ttl, "3.1", None, MS, store_boundary=True) == late
    with pytest.raises(ContractViolation):
        check_until(late + US, now, ttl, "3.1", None, MS, store_boundary=True)
    with pytest.raises(ContractViolation):
        check_until(late, now, ttl, "3.1", None, MS)
    assert BoardModel.start([], store_boundary=True).store_boundary


def test_the_store_boundary_follows_a_ttl_off_the_grid_rounded_up() -> None:
    """A ttl below the resolution that the store rounds up to one tick, then keeps through
    that deadline tick, ends two ticks after now: accepted in virtual mode, and no later."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ttl = MS / 2
    rounded_and_kept = now + 2 * MS
    assert check_until(rounded_and_kept, now, ttl, "3.1", None, MS, store_boundary=True) == (
        rounded_and_kept
    )
    with pytest.raises(ContractViolation):
        check_until(rounded_and_kept + US, now, ttl, "3.1", None, MS, store_boundary=True)
    with pytest.raises(ContractViolation):
        check_until(rounded_and_kept, now, ttl, "3.1", None, MS)


PX_SETTINGS = {"clock_resolution": MS, "shortest_lease": MS}


def test_a_px_key_board_passes_in_virtual_mode(server: taskboard.servers.Redis) -> None:
    """A board whose leases are Redis PX keys reports the until Redis enforces, one tick
    past now + ttl, and passes in virtual mode."""
    run(machine(PxKeyBoard, server, **PX_SETTINGS), QUICK)


def test_without_the_store_boundary_a_px_key_board_is_refused(
    server: taskboard.servers.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model option is what lets the PX key board pass: without it its first until is a
    violation (the false alarm the issue met on python-redis-lock 3.6.0)."""
    start = BoardModel.start

    def strict(*args: Any, **kwargs: Any) -> BoardModel:
        return start(*args, **{**kwargs, "store_boundary": False})

    monkeypatch.setattr(_session.BoardModel, "start", strict)
    with pytest.raises(ContractViolation, match="until"):
        run(machine(PxKeyBoard, server, **PX_SETTINGS), QUICK, shrink=False)


# -- checking real boards -------------------------------------------------------------------------


def test_a_correct_server_clock_board_passes_in_virtual_mode(
    server: taskboard.servers.Redis,
) -> None:
    """The reference RedisBoard with clock="server" passes in virtual mode."""
    run(machine(RedisBoard, server), QUICK)


@pytest.mark.slow
def test_a_correct_server_clock_board_passes_a_long_virtual_run(
    server: taskboard.servers.Redis,
) -> None:
    """The reference RedisBoard with clock="server", and the PX key board, pass a long run
    in virtual mode: no false alarm."""
    run(machine(RedisBoard, server), LONG)
    run(machine(PxKeyBoard, server, **PX_SETTINGS), LONG)


@pytest.mark.parametrize("mutant", [ServerExpiryInclusive, ServerTakeoverOneTickEarly])
def test_a_boundary_mutant_is_caught_and_replays(
    server: taskboard.servers.Redis, mutant: type[RedisBoard]
) -> None:
    """A server-clock boundary bug (<= for <, a takeover one tick early) is caught in
    virtual mode, shrinks to a few steps, and its trace fails again 10 times of 10."""
    assert_caught_shrunk_and_replayed(machine(mutant, server))


def assert_caught_shrunk_and_replayed(caught: type[BoardMachine]) -> None:
    """``caught`` fails in virtual mode with a trace of at most 5 steps that fails again 10
    times of 10, and once more after it is written to a trace file and read back."""
    with pytest.raises(ContractViolation) as failure:
        run(caught, 300)
    trace = failure.value.recording
    assert trace is not None
    assert trace.clock_mode == "virtual"
    assert len(trace.steps) <= 5
    results = [replay_trace(trace, caught) for _ in range(10)]
    assert [result.passed for result in results] == [False] * 10
    written = parse_trace(trace_to_json(trace))  # a trace file says virtual, and replays
    assert written.clock_mode == "virtual"
    assert not replay_trace(written, caught).passed
