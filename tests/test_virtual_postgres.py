"""``clock_mode = "virtual"`` on PostgreSQL (issue 30): a throwaway cluster on the checker's
clock, and the reference server-clock PostgresBoard checked on it.

These tests skip without PostgreSQL's binaries, psycopg or a C compiler (and fail instead when
CI sets ``TASKBOARD_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import taskboard.servers
from taskboard import Clock, Task
from taskboard._virtual import _postgres, _preload
from taskboard.stateful import BoardMachine
from tests.conftest import unavailable
from tests.test_virtual_clock import (
    _pid_gone,
    assert_caught_shrunk_and_replayed,
    run,
    started_and_ended,
)

psycopg = pytest.importorskip("psycopg")

from taskboard.hosts.postgres import PostgresBoard  # noqa: E402
from tests.virtual_boards import PostgresExpiryInclusive  # noqa: E402

US = timedelta(microseconds=1)
ROOT = Path(__file__).resolve().parent.parent
#: The quick run's examples of a correct board; the slow run's.
QUICK = 30
LONG = 300


def _require_postgres() -> None:
    binaries = _postgres._bindir(None)
    if not (binaries / "initdb").exists() or not (binaries / "postgres").exists():
        unavailable(f"no PostgreSQL binaries (initdb, postgres) in {binaries}")
    try:
        _preload.preload_library()
    except taskboard.servers.VirtualClockUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="module")
def server() -> Iterator[taskboard.servers.Postgres]:
    """A PostgreSQL on the virtual clock, for this module; a skip without its binaries or
    a C compiler."""
    _require_postgres()
    with taskboard.servers.Postgres() as started:
        yield started


def machine(board: type[PostgresBoard], server: Any) -> type[BoardMachine]:
    """A virtual-mode machine of a server-clock board ``board`` on ``server``."""

    class VirtualMachine(BoardMachine):
        clock_mode = "virtual"
        clock_resolution = PostgresBoard.clock_resolution

        def make_board(self, tasks: list[Task], clock: Clock) -> PostgresBoard:
            return board(tasks, "server", self.server.url)

        def close_board(self, made: PostgresBoard) -> None:
            made.close()

    VirtualMachine.server = server  # type: ignore[attr-defined]
    VirtualMachine.__name__ = VirtualMachine.__qualname__ = f"Virtual{board.__name__}"
    return VirtualMachine


def _server_times(connection: Any) -> tuple[Any, ...]:
    row = connection.execute("SELECT now(), clock_timestamp(), statement_timestamp()").fetchone()
    assert row is not None
    return tuple(row)


# -- the server -----------------------------------------------------------------------------------


def test_every_server_clock_follows_the_file_and_stands_still(
    server: taskboard.servers.Postgres,
) -> None:
    """now(), clock_timestamp() and statement_timestamp() are the virtual time, the same
    across real time, and the new time from the next statement after set_time."""
    with psycopg.connect(server.url, autocommit=True) as connection:
        start = server.now()
        assert _server_times(connection) == (start, start, start)
        time.sleep(0.2)
        assert _server_times(connection) == (start, start, start)
        later = start + timedelta(seconds=5) + 7 * US
        server.set_time(later)
        assert _server_times(connection) == (later, later, later)


def test_a_forward_jump_fires_no_timeout(server: taskboard.servers.Postgres) -> None:
    """The timeouts PostgreSQL arms on the wall clock are off: a session in an open
    transaction survives a jump of a day and goes on."""
    with psycopg.connect(server.url) as connection:
        for name in (
            "statement_timeout",
            "lock_timeout",
            "idle_in_transaction_session_timeout",
            "idle_session_timeout",
        ):
            assert connection.execute(f"SHOW {name}").fetchone() == ("0",)
        connection.execute("SELECT 1")  # a transaction is open now
        server.set_time(server.now() + timedelta(days=1))
        time.sleep(0.05)
        assert connection.execute("SELECT clock_timestamp()").fetchone() == (server.now(),)


def test_flush_empties_every_table_and_restarts_every_sequence(
    server: taskboard.servers.Postgres,
) -> None:
    """flush deletes every row of the previous example, in tables that reference each other
    too, and restarts the sequences; the tables stay, usable."""
    with psycopg.connect(server.url, autocommit=True) as connection:
        connection.execute("CREATE TABLE parent (id serial PRIMARY KEY)")
        connection.execute('CREATE TABLE "child\'s" (parent int REFERENCES parent (id), note text)')
        connection.execute("INSERT INTO parent DEFAULT VALUES")
        connection.execute("""INSERT INTO "child's" VALUES (1, 'left over')""")
        server.flush()
        counts = connection.execute(
            """SELECT (SELECT count(*) FROM parent), (SELECT count(*) FROM "child's")"""
        ).fetchone()
        assert counts == (0, 0)
        assert connection.execute("INSERT INTO parent DEFAULT VALUES RETURNING id").fetchone() == (
            1,
        )
        connection.execute('DROP TABLE "child\'s", parent')
    server.flush()  # nothing to empty


def test_a_missing_postgres_is_a_server_start_error(tmp_path: Path) -> None:
    """A bindir without initdb and postgres is a ServerStartError that names it."""
    _require_postgres()  # the preload library is built first
    missing = taskboard.servers.Postgres(str(tmp_path))
    with pytest.raises(taskboard.servers.ServerStartError, match="initdb is not there"):
        _ = missing.url
    assert not missing.running


@pytest.mark.parametrize("ending", ["exit", "killed", "with"])
def test_a_postgres_never_outlives_its_process(ending: str) -> None:
    """A process that starts a PostgreSQL and exits, is SIGKILLed, or stops it leaves no
    postgres behind (and, unless killed, no directory)."""
    _require_postgres()
    pid, directory = started_and_ended("Postgres", ending, timeout=120)
    assert _pid_gone(pid)
    if ending != "killed":  # a killed process cannot remove its temporary directory
        assert not directory.exists()


# -- checking real boards -------------------------------------------------------------------------


def test_a_correct_server_clock_postgres_board_passes_in_virtual_mode(
    server: taskboard.servers.Postgres,
) -> None:
    """The reference PostgresBoard with clock="server" passes in virtual mode."""
    run(machine(PostgresBoard, server), QUICK)


# Deep: a virtual PostgreSQL server's postmaster has been seen to spin and stop accepting
# connections a while into a long run (docs/races.md), which made the next test hang in CI.
@pytest.mark.deep
def test_a_correct_server_clock_postgres_board_passes_a_long_virtual_run(
    server: taskboard.servers.Postgres,
) -> None:
    """The reference PostgresBoard with clock="server" passes a long virtual run."""
    run(machine(PostgresBoard, server), LONG)


def test_a_postgres_boundary_mutant_is_caught_and_replays(
    server: taskboard.servers.Postgres,
) -> None:
    """Expiry judged with <= on clock_timestamp() is caught in virtual mode, shrinks to a
    few steps, and its trace fails again 10 times of 10 (also once written and read)."""
    assert_caught_shrunk_and_replayed(machine(PostgresExpiryInclusive, server))
