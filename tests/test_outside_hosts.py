"""Boards an outside user wrote from the contract alone (``tests/outside_hosts.py``): the
correct ones pass a short run, and each buggy one is caught, derandomized, with the SPEC
clause its bug breaks."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import taskboard.servers
from taskboard.stateful import BoardMachine, run_parallel_state_machine, violations_in
from tests import outside_hosts as oh


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=50,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=[Phase.generate, Phase.shrink],
    )


def _passes(machine: type[BoardMachine], examples: int, programs: int) -> None:
    run_state_machine_as_test(machine, settings=_settings(examples))
    run_parallel_state_machine(machine, settings=_settings(programs))


def _caught_at(machine: type[BoardMachine], examples: int, *, parallel: bool = False) -> str:
    """The report of the violation the run finds (the test fails when it finds none)."""
    run = run_parallel_state_machine if parallel else run_state_machine_as_test
    with pytest.raises(Exception) as info:  # noqa: PT011 - a group or Flaky error may hold it
        run(machine, settings=_settings(examples))
    found = violations_in(info.value)
    assert found, f"no contract violation: {info.value!r}"
    return str(found[0])


def _redis_machine(board_cls: type, url: str, **attributes: Any) -> type[BoardMachine]:
    return BoardMachine.for_board(
        lambda tasks, clock: board_cls(tasks, clock, url=url),
        open_client=lambda board: board.open_client(),
        expired_lease_policy="accept",
        **attributes,
    )


def _postgres_machine(board_cls: type, url: str) -> type[BoardMachine]:
    return BoardMachine.for_board(
        lambda tasks, clock: board_cls(tasks, clock, url=url),
        open_client=lambda board: board.open_client(),
        expired_lease_policy="accept",
    )


def test_lock_per_task_board_passes() -> None:
    """The in-memory board with a lock per task passes sequential and parallel programs."""
    _passes(BoardMachine.for_board(oh.LockPerTaskBoard), 60, 15)


def test_lua_redis_board_passes_on_the_wall_clock(redis_server_url: str) -> None:
    """The Redis board (a Lua script per operation, the server's TIME) passes in wall mode."""
    _passes(_redis_machine(oh.LuaRedisBoard, redis_server_url, clock_mode="wall"), 8, 4)


def test_returning_postgres_board_passes(postgres_server_url: str) -> None:
    """The PostgreSQL board (one UPDATE ... RETURNING per operation) passes, a client per
    thread."""
    _passes(_postgres_machine(oh.ReturningPostgresBoard, postgres_server_url), 15, 6)


# board, examples enough to catch it derandomized, the clause its report names
CAUGHT = [
    (oh.LiveAtUntilBoard, 10, "SPEC 3.1"),
    (oh.RenewAtUntilBoard, 10, "SPEC 3.5"),
    (oh.RenewByAgentNameBoard, 10, "SPEC 3.5"),
    (oh.TakeoverKeepsFenceBoard, 10, "SPEC 3.1"),
    (oh.NameDerivedTokenBoard, 10, "SPEC 3.1"),
    (oh.CompleteThenRaiseBoard, 10, "SPEC 3"),
    (oh.ExpiredReleaseSkipsTokenBoard, 10, "SPEC 3.2"),
    (oh.RenewZeroDeletesBoard, 10, "SPEC 3.5"),
    (oh.ReentrantSameNameBoard, 10, "SPEC 3.1"),
    (oh.FailedDepUnblocksBoard, 40, "SPEC 3.1"),
    (oh.WholeSecondTtlBoard, 10, "SPEC 2"),
    (oh.EmptyAgentFirstBoard, 10, "SPEC 3.1"),
    (oh.RenewFromOldUntilBoard, 10, "SPEC 3.5"),
    (oh.OptimisticCacheBoard, 10, "SPEC 3"),
    (oh.FenceOnFirstClaimBoard, 10, "SPEC 3.1"),
]


@pytest.mark.parametrize(
    ("board_cls", "examples", "clause"), CAUGHT, ids=lambda v: getattr(v, "__name__", str(v))
)
def test_buggy_board_is_caught(board_cls: type, examples: int, clause: str) -> None:
    """Each outside buggy board is caught, and its report names the clause it breaks."""
    report = _caught_at(BoardMachine.for_board(board_cls), examples)
    assert clause in report, report


def test_unlocked_check_is_caught_by_threads() -> None:
    """A claim that checks outside the task's lock is a double grant in the parallel mode."""
    _caught_at(BoardMachine.for_board(oh.UnlockedCheckBoard), 30, parallel=True)


def test_postgres_time_fence_is_caught(postgres_server_url: str) -> None:
    """A fence made of the claim's millisecond repeats when two claims share a millisecond."""
    report = _caught_at(_postgres_machine(oh.PostgresTimeFenceBoard, postgres_server_url), 15)
    assert "fence" in report, report


@pytest.mark.deep
def test_lua_redis_live_at_until_is_caught_on_the_virtual_clock() -> None:
    """Redis ``now <= until`` in Lua is caught with a real redis-server on the checker's clock."""
    if shutil.which("redis-server") is None or shutil.which("cc") is None:
        pytest.skip("virtual mode needs redis-server and a C compiler")
    server = taskboard.servers.Redis()
    try:
        machine = BoardMachine.for_board(
            lambda tasks, clock: oh.LuaRedisLiveAtUntilBoard(tasks, clock, url=server.url),
            open_client=lambda board: board.open_client(),
            expired_lease_policy="accept",
            clock_mode="virtual",
            server=server,
        )
        assert "SPEC 3" in _caught_at(machine, 20)
    finally:
        server.stop()
