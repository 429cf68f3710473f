"""PostgresBoard against a real PostgreSQL server on loopback (TASKBOARD_POSTGRES_URL)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import timedelta

import psycopg
import pytest

import taskboard
from taskboard import (
    Board,
    ClaimRequest,
    Clock,
    Lease,
    LeaseLostError,
    ManualClock,
    NotFoundError,
    State,
    TakenError,
    Task,
)
from taskboard.boardtest import BoardContract
from taskboard.hosts.postgres import PostgresBoard
from tests.servers import NEMESIS_MACHINE, NEMESIS_PARALLEL, PostgresServer


@pytest.fixture
def server(postgres_server_url: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the test server, to look at the tables directly."""
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        yield conn


def row_counts(server: psycopg.Connection, board_id: str) -> tuple[int, int]:
    """How many task rows and lease rows the server holds for ``board_id``."""
    row = server.execute(
        "SELECT (SELECT count(*) FROM taskboard_tasks WHERE board_id = %(b)s),"
        " (SELECT count(*) FROM taskboard_leases WHERE board_id = %(b)s)",
        {"b": board_id},
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def backends(server: psycopg.Connection, board_id: str, *, settle: bool = False) -> int:
    """How many server backends a board's connections hold; with ``settle``, wait up to
    five seconds for them to reach zero (a backend ends shortly after its client closes)."""
    deadline = time.monotonic() + 5.0
    while True:
        row = server.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"taskboard:{board_id}",),
        ).fetchone()
        assert row is not None
        if not settle or row[0] == 0 or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.02)


# -- the contract suite --------------------------------------------------------------------------


class TestPostgresBoardContract(BoardContract):
    clock_resolution = PostgresBoard.clock_resolution
    expired_lease_policy = PostgresBoard.expired_lease_policy

    @pytest.fixture(autouse=True)
    def _server(self, postgres_server_url: str) -> None:
        self.url = postgres_server_url

    def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> Board:
        return PostgresBoard(tasks, clock, self.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, PostgresBoard)
        board.close()

    def open_client(self, board: PostgresBoard) -> PostgresBoard:
        return board.open_client()


@pytest.mark.nemesis
@pytest.mark.slow
class TestPostgresNemesisContract(BoardContract):
    """PostgresBoard with the server restarted (``TASKBOARD_POSTGRES_RESTART``: ``pg_ctl
    restart -m immediate``) and the board's connections terminated (``pg_terminate_backend``)
    now and then (SPEC 9): it loses nothing it committed, and reconnects by itself."""

    clock_resolution = PostgresBoard.clock_resolution
    expired_lease_policy = PostgresBoard.expired_lease_policy
    machine_settings = NEMESIS_MACHINE
    parallel_settings = NEMESIS_PARALLEL
    tolerate_faults = (psycopg.OperationalError,)
    durable = True

    @pytest.fixture(autouse=True)
    def _server(self, restartable_postgres: PostgresServer) -> None:
        self.server = restartable_postgres

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return PostgresBoard(tasks, clock, self.server.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, PostgresBoard)
        board.close()

    def open_client(self, board: PostgresBoard) -> PostgresBoard:
        return board.open_client()

    def restart_storage(self, board: PostgresBoard) -> None:
        self.server.restart()

    def drop_connections(self, board: PostgresBoard) -> None:
        self.server.drop_connections(board.board_id)


# -- PostgresBoard ---------------------------------------------------------------------------------


def test_two_boards_on_one_server_are_isolated(postgres_server_url: str) -> None:
    """Two boards with the same task ids on one server share no state, fences or tokens."""
    clock = ManualClock()
    with (
        PostgresBoard([Task("t1")], clock, postgres_server_url) as one,
        PostgresBoard([Task("t1")], clock, postgres_server_url) as two,
    ):
        assert one.board_id != two.board_id
        got = one.claim("t1", "a1", ClaimRequest())
        assert two.list_tasks() == [Task("t1")]
        other = two.claim("t1", "a1", ClaimRequest())
        assert other.lease is not None
        assert got.lease is not None
        assert other.lease.fence == got.lease.fence == 1, "fence histories are per board"
        with pytest.raises(LeaseLostError):
            two.complete("t1", got.lease.token)
        two.complete("t1", other.lease.token)
        assert one.list_tasks() == [got]


def test_attaching_by_board_id_sees_the_same_board(
    postgres_server_url: str, server: psycopg.Connection
) -> None:
    """A board_id attaches to that board: same rows, only missing tasks inserted, rows kept."""
    clock = ManualClock()
    with PostgresBoard([Task("t1", title="first")], clock, postgres_server_url) as made:
        got = made.claim("t1", "a1", ClaimRequest())
        assert got.lease is not None
        with PostgresBoard(
            [Task("t1", title="ignored"), Task("t2")],
            clock,
            postgres_server_url,
            board_id=made.board_id,
        ) as attached:
            assert attached.list_tasks() == [got, Task("t2")]
            with pytest.raises(TakenError):
                attached.claim("t1", "a2", ClaimRequest())
            attached.complete("t1", got.lease.token)
        # Leaving did not take the board along: only the board that made it deletes it.
        assert [t.state for t in made.list_tasks()] == [State.DONE, State.OPEN]
    assert row_counts(server, made.board_id) == (0, 0)


def test_close_deletes_the_rows_and_every_connection(
    postgres_server_url: str, server: psycopg.Connection
) -> None:
    """close() deletes the board's tasks and lease history and ends its connections; idempotent."""
    board = PostgresBoard([Task("t1"), Task("t2")], ManualClock(), postgres_server_url)
    got = board.claim("t1", "a1", ClaimRequest())
    assert got.lease is not None
    board.release("t1", got.lease.token)
    board.claim("t1", "a1", ClaimRequest())
    taskboard.concurrent_claim(board, "t2", ["a1", "a2"] * 4)  # a connection per thread
    assert row_counts(server, board.board_id) == (2, 3)
    assert backends(server, board.board_id) >= 1
    board.close()
    board.close()
    assert row_counts(server, board.board_id) == (0, 0)
    assert backends(server, board.board_id, settle=True) == 0
    with pytest.raises(RuntimeError, match="is closed"):
        board.list_tasks()


def test_delete_on_close_false_keeps_the_rows(
    postgres_server_url: str, server: psycopg.Connection
) -> None:
    """With delete_on_close=False the board outlives close(), and can be attached again."""
    clock = ManualClock()
    with PostgresBoard([Task("t1")], clock, postgres_server_url, delete_on_close=False) as board:
        got = board.claim("t1", "a1", ClaimRequest())
    with PostgresBoard([], clock, postgres_server_url, board_id=board.board_id) as again:
        assert again.list_tasks() == [got]
        again.delete_on_close = True
    assert row_counts(server, board.board_id) == (0, 0)


def test_duplicate_initial_ids_are_a_value_error(postgres_server_url: str) -> None:
    """Two initial tasks with one id are a ValueError naming the id."""
    with pytest.raises(ValueError, match=r"duplicate initial task id 't1'"):
        PostgresBoard([Task("t1"), Task("t1")], ManualClock(), postgres_server_url)


@pytest.mark.parametrize("board_id", ["", "has space", "x" * 129, "semi;colon"])
def test_a_malformed_board_id_is_a_value_error(postgres_server_url: str, board_id: str) -> None:
    """A board_id outside 1-128 characters of A-Za-z0-9_.- is a ValueError."""
    with pytest.raises(ValueError, match=r"board_id .* must be 1-128 characters"):
        PostgresBoard([Task("t1")], ManualClock(), postgres_server_url, board_id=board_id)


def test_nul_characters_get_contract_errors_not_driver_errors(postgres_server_url: str) -> None:
    """NUL, which PostgreSQL text cannot hold: an id is NotFound, a token LeaseLost, an agent
    or an initial task ValueError."""
    with pytest.raises(ValueError, match="NUL"):
        PostgresBoard([Task("t1", title="a\x00b")], ManualClock(), postgres_server_url)
    with PostgresBoard([Task("t1")], ManualClock(), postgres_server_url) as board:
        with pytest.raises(NotFoundError):
            board.claim("t1\x00", "a1", ClaimRequest())
        with pytest.raises(ValueError, match="NUL"):
            board.claim("t1", "a\x00", ClaimRequest())
        got = board.claim("t1", "a1", ClaimRequest())
        assert got.lease is not None
        with pytest.raises(LeaseLostError):
            board.complete("t1", got.lease.token + "\x00")
        assert board.list_tasks() == [got]


def test_an_initial_lease_counts_as_issued(postgres_server_url: str) -> None:
    """An initial lease is in the history: its token is current and the next fence greater."""
    held = Task("t1", state=State.CLAIMED, owner="a1", lease=Lease("given", 7, None), seq=3)
    with PostgresBoard([held], ManualClock(), postgres_server_url) as board:
        assert board.list_tasks() == [held]
        board.release("t1", "given")
        got = board.claim("t1", "a2", ClaimRequest())
        assert got.lease is not None
        assert (got.lease.fence, got.seq) == (8, 5)


def test_list_tasks_sorts_by_code_point(postgres_server_url: str) -> None:
    """list_tasks() sorts ids as Python does, whatever the database's collation."""
    ids = ["b", "a", "B", "é", "Z", "a-1", "a_1", "10", "9"]
    with PostgresBoard([Task(i) for i in ids], ManualClock(), postgres_server_url) as board:
        assert [t.id for t in board.list_tasks()] == sorted(ids)


def test_until_is_kept_to_the_microsecond(postgres_server_url: str) -> None:
    """until is exact: live one microsecond before it, expired at it (SPEC 2)."""
    clock = ManualClock()
    clock.advance(timedelta(microseconds=123_457))
    with PostgresBoard([Task("t1")], clock, postgres_server_url) as board:
        got = board.claim("t1", "a1", ClaimRequest(timedelta(seconds=1, microseconds=3)))
        assert got.lease is not None
        assert got.lease.until == clock.now() + timedelta(seconds=1, microseconds=3)
        clock.advance(timedelta(seconds=1, microseconds=2))
        with pytest.raises(TakenError):
            board.claim("t1", "a2", ClaimRequest())
        clock.advance(timedelta(microseconds=1))
        assert board.claim("t1", "a2", ClaimRequest()).owner == "a2"
