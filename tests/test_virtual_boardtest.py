"""BoardContract in virtual mode (issue 30): ``clock_mode = "virtual"`` and a ``server`` on a
subclass run the whole suite with the server's clock on the tests' clock, the reference
server-clock hosts passing it; the server starts once for the class and stops after it.
With ``NoServer``, a board on this process's own clock passes it too.

These skip without redis-server, PostgreSQL's binaries or a C compiler (and fail instead
when CI sets ``TASKBOARD_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import timedelta

import pytest
from hypothesis import settings

import taskboard.servers
from taskboard import Board, Clock, SystemClock, Task
from taskboard._profiles import CI
from taskboard._virtual import _postgres, _preload
from taskboard.boardtest import BoardContract
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import RedisBoard
from tests.conftest import unavailable

#: The state-machine run's depth in the plain run, and in the slow one (as in wall mode).
QUICK = settings(settings.get_profile(CI), max_examples=30)
LONG = settings(settings.get_profile(CI), max_examples=300)


def _require(binary: str) -> None:
    if binary == "postgres":
        binaries = _postgres._bindir(None)
        if not (binaries / "initdb").exists():
            unavailable(f"no PostgreSQL binaries (initdb, postgres) in {binaries}")
    elif shutil.which(binary) is None:
        unavailable(f"{binary} is not on PATH: no server to put on the virtual clock")
    try:
        _preload.preload_library()
    except taskboard.servers.VirtualClockUnavailable as exc:
        unavailable(str(exc))


class TestRedisServerClockVirtualContract(BoardContract):
    clock_mode = "virtual"
    server = taskboard.servers.Redis()
    clock_resolution = RedisBoard.clock_resolution
    expired_lease_policy = RedisBoard.expired_lease_policy
    machine_settings = QUICK
    parallel_settings = settings(QUICK, max_examples=10)
    criteria_rounds = 5

    @pytest.fixture(autouse=True)
    def _binaries(self) -> None:
        _require("redis-server")

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return RedisBoard(tasks, "server", self.server.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, RedisBoard)
        board.close()

    def open_client(self, board: RedisBoard) -> RedisBoard:
        return board.open_client()


class TestProcessTimeVirtualContract(BoardContract):
    """A board that reads this process's wall clock (``datetime.now()``) and no server:
    every test, the example tests included, runs its calls on the virtual clock."""

    clock_mode = "virtual"
    server = taskboard.servers.NoServer()
    clock_resolution = timedelta(microseconds=1)
    machine_settings = QUICK
    parallel_settings = settings(QUICK, max_examples=10)
    criteria_rounds = 5

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, SystemClock())


@pytest.mark.slow
class TestRedisServerClockLongVirtualContract(TestRedisServerClockVirtualContract):
    server = taskboard.servers.Redis()
    machine_settings = LONG
    parallel_settings = settings(LONG, max_examples=100)
    criteria_rounds = 20


@pytest.mark.deep  # minutes, and its make_board outran the call timeout on a loaded CI machine
class TestPostgresServerClockVirtualContract(BoardContract):
    clock_mode = "virtual"
    server = taskboard.servers.Postgres()
    clock_resolution = PostgresBoard.clock_resolution
    expired_lease_policy = PostgresBoard.expired_lease_policy
    machine_settings = LONG
    parallel_settings = settings(LONG, max_examples=100)

    @pytest.fixture(autouse=True)
    def _binaries(self) -> None:
        pytest.importorskip("psycopg")
        _require("postgres")

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return PostgresBoard(tasks, "server", self.server.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, PostgresBoard)
        board.close()

    def open_client(self, board: PostgresBoard) -> PostgresBoard:
        return board.open_client()


def test_the_server_starts_once_for_the_class_and_stops_after_it(
    pytester: pytest.Pytester,
) -> None:
    """A virtual-mode BoardContract's server runs one process for all the class's tests, and
    is stopped after the last one, a failing one included."""
    _require("redis-server")
    pytester.makepyfile(
        """
        import taskboard.servers
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.redis import RedisBoard

        pids = []

        class TestIt(BoardContract):
            clock_mode = "virtual"
            server = taskboard.servers.Redis()

            def make_board(self, tasks, clock):
                pids.append(self.server.pid)
                return RedisBoard(tasks, "server", self.server.url)

            def close_board(self, board):
                board.close()

            def test_zz_fails(self):
                assert self.server.running
                raise AssertionError("a failing test")

        def test_zzz_one_server_stopped_after_the_class():
            assert len(set(pids)) == 1 and len(pids) > 5
            assert not TestIt.server.running
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-v", "-k", "test_claim or test_release or zz"
    )
    assert result.parseoutcomes()["failed"] == 1
    result.stdout.fnmatch_lines(
        ["*TestIt::test_zz_fails FAILED*", "*test_zzz_one_server_stopped_after_the_class PASSED*"]
    )
