"""Wall-clock mode (SPEC 7) against boards that keep time on their own server.

The server-clock reference hosts (Redis ``TIME``, PostgreSQL ``clock_timestamp()``) never
read the injected clock: they pass the whole contract suite in wall mode, a client per
thread and per criteria participant (SPEC 8), and every
server-clock mutant is caught by the wall-clock machine. They skip without servers.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Clock, Task
from taskboard._profiles import CI
from taskboard.boardtest import BoardContract
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import RedisBoard
from taskboard.hosts.server_mutants import SERVER_CLOCK_MUTANTS
from taskboard.stateful import BoardMachine, ContractViolation
from taskboard.stateful._reports import failures_reported

#: The depth the issue asks of the server-clock hosts: 300 sequential examples, 100 parallel
#: programs (each run three times) and 20 rounds of each criterion (the suite's default).
MACHINE_SETTINGS = settings(settings.get_profile(CI), max_examples=300)
PARALLEL_SETTINGS = settings(settings.get_profile(CI), max_examples=100)
#: A mutant need not be shrunk to be caught, and shrinking sleeps through every replay.
CATCH_SETTINGS = settings(settings.get_profile(CI), max_examples=300, phases=(Phase.generate,))


class TestRedisServerClockContract(BoardContract):
    clock_mode = "wall"
    clock_resolution = RedisBoard.clock_resolution
    expired_lease_policy = RedisBoard.expired_lease_policy
    machine_settings = MACHINE_SETTINGS
    parallel_settings = PARALLEL_SETTINGS

    @pytest.fixture(autouse=True)
    def _server(self, redis_server_url: str) -> None:
        self.url = redis_server_url

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return RedisBoard(tasks, "server", self.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, RedisBoard)
        board.close()

    def open_client(self, board: RedisBoard) -> RedisBoard:
        return board.open_client()


class TestPostgresServerClockContract(BoardContract):
    clock_mode = "wall"
    clock_resolution = PostgresBoard.clock_resolution
    expired_lease_policy = PostgresBoard.expired_lease_policy
    machine_settings = MACHINE_SETTINGS
    parallel_settings = PARALLEL_SETTINGS

    @pytest.fixture(autouse=True)
    def _server(self, postgres_server_url: str) -> None:
        self.url = postgres_server_url

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return PostgresBoard(tasks, "server", self.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, PostgresBoard)
        board.close()

    def open_client(self, board: PostgresBoard) -> PostgresBoard:
        return board.open_client()


@pytest.mark.parametrize("mutant", SERVER_CLOCK_MUTANTS, ids=lambda m: m.__name__)
def test_wall_clock_machine_catches_server_clock_mutant(
    redis_server_url: str, mutant: type[RedisBoard]
) -> None:
    """Each server-clock mutant breaks a SPEC clause that the wall-clock machine reports."""

    def make_board(tasks: Sequence[Task], clock: Clock) -> Board:
        return mutant(tasks, clock, redis_server_url)

    machine = BoardMachine.for_board(
        make_board, clock_mode="wall", clock_resolution=mutant.clock_resolution, trace_target=""
    )
    with pytest.raises(ContractViolation) as caught, failures_reported(machine):
        run_state_machine_as_test(machine, settings=CATCH_SETTINGS)
    assert caught.value.clause.startswith("SPEC")
    assert "window" in str(caught.value)
