"""Faults on the server-backed hosts: injected ones, dropped connections, absent servers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
import redis
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import ManualClock, Task
from taskboard.faults import inject_faults
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard
from taskboard.stateful import BoardMachine, InfrastructureFault

QUICK = settings(max_examples=60, database=None, derandomize=True)
#: Nothing listens here: connecting fails at once.
NO_SERVER = {
    "postgres": "postgresql://postgres@127.0.0.1:1/postgres",
    "redis": "redis://127.0.0.1:1/0",
}


def server_host(kind: str, url: str) -> Any:
    """A board factory for one of the server hosts (boards close themselves at teardown)."""
    host = {"postgres": PostgresBoard, "redis": RedisBoard, "async redis": AsyncRedisBoard}[kind]

    def factory(tasks: Sequence[Task], clock: ManualClock) -> Any:
        return host(tasks, clock, url)

    return factory


@pytest.fixture(params=["postgres", "redis", "async redis"])
def kind_and_url(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Each server host with its server's URL (a skip, or a failure in CI, without one)."""
    variable = "postgres_server_url" if request.param == "postgres" else "redis_server_url"
    return request.param, request.getfixturevalue(variable)


def test_tolerant_mode_passes_a_server_host_behind_injected_faults(
    kind_and_url: tuple[str, str],
) -> None:
    """5% injected faults of every kind on a real server host: tolerant mode, no violation."""
    kind, url = kind_and_url
    make = server_host(kind, url)
    boards: list[Any] = []

    def faulty(tasks: Sequence[Task], clock: ManualClock) -> Any:
        boards.append(inject_faults(make(tasks, clock), rate=0.05, seed=4))
        return boards[-1]

    machine = BoardMachine.for_board(faulty, tolerate_faults=True, expired_lease_policy="reject")
    run_state_machine_as_test(machine, settings=QUICK)
    assert sum(len(board.injected) for board in boards) > 10


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_an_unreachable_server_is_an_infrastructure_fault(kind: str) -> None:
    """The driver's own connection error (not a builtin one) is a fault at make_board."""
    machine = BoardMachine.for_board(server_host(kind, NO_SERVER[kind]))
    with pytest.raises(InfrastructureFault, match="infrastructure fault at make_board") as raised:
        run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=5))
    driver_error = psycopg.OperationalError if kind == "postgres" else redis.ConnectionError
    assert isinstance(raised.value.exception, driver_error)


class DroppingPostgres:
    """A PostgresBoard whose server connections are all terminated before its 8th call."""

    def __init__(self, tasks: Sequence[Task], clock: ManualClock, url: str) -> None:
        self.board = PostgresBoard(tasks, clock, url)
        self.url = url
        self.calls = 0

    def _call(self, method: str, *args: Any) -> Any:
        self.calls += 1
        if self.calls == 8:
            with psycopg.connect(self.url, autocommit=True) as killer:
                killer.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND datname = current_database() "
                    "AND backend_type = 'client backend'"
                )
        return getattr(self.board, method)(*args)

    def list_tasks(self) -> Any:
        return self._call("list_tasks")

    def claim(self, *args: Any) -> Any:
        return self._call("claim", *args)

    def renew(self, *args: Any) -> Any:
        return self._call("renew", *args)

    def release(self, *args: Any) -> Any:
        return self._call("release", *args)

    def complete(self, *args: Any) -> Any:
        return self._call("complete", *args)

    def fail(self, *args: Any) -> Any:
        return self._call("fail", *args)

    def close(self) -> None:
        self.board.close()


def test_a_dropped_connection_is_a_fault_and_tolerant_mode_recovers(
    postgres_server_url: str,
) -> None:
    """Terminated server connections: a fault in strict mode; tolerant mode reconnects, passes."""

    def dropping(tasks: Sequence[Task], clock: ManualClock) -> DroppingPostgres:
        return DroppingPostgres(tasks, clock, postgres_server_url)

    strict = BoardMachine.for_board(dropping, expired_lease_policy="reject")
    with pytest.raises(InfrastructureFault) as raised:
        run_state_machine_as_test(strict, settings=QUICK)
    assert isinstance(raised.value.exception, psycopg.OperationalError)
    tolerant = BoardMachine.for_board(dropping, expired_lease_policy="reject", tolerate_faults=True)
    run_state_machine_as_test(tolerant, settings=QUICK)
