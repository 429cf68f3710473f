"""Clients of the reference hosts (SPEC 8): open_client, pickling as a new client of the same
storage, and the client-race mutants that only a client per agent catches."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import (
    ClaimRequest,
    LeaseLostError,
    ManualClock,
    State,
    TakenError,
    Task,
    concurrent_claim,
    duplicate_token_submit,
)
from taskboard._profiles import CI
from taskboard.hosts.client_mutants import (
    CLIENT_MUTANTS,
    ClientCachedLeases,
    PooledReadThenWrite,
)
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import BoardMachine

TASKS = [Task("a"), Task("b")]
HOSTS = ["sqlite", "postgres", "redis-url", "redis-client"]
ROUNDS = 20
AGENTS = ["a0", "a1", "a2", "a3"]
#: One fresh task per round, so no round needs the last one's winner to let go.
RACE_TASKS = [Task(f"t{round_}") for round_ in range(ROUNDS)]
MACHINE_SETTINGS = settings(settings.get_profile(CI), max_examples=50)


@pytest.fixture
def clock() -> ManualClock:
    """The clock the board under test reads."""
    return ManualClock()


@pytest.fixture(params=HOSTS)
def board(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Any]:
    """A board holding ``a`` and ``b`` on each reference host (server hosts skip without a
    server); ``redis-client`` is a RedisBoard given a client object rather than a URL."""
    made: Any
    if request.param == "sqlite":
        made = SQLiteBoard(TASKS, clock, tmp_path / "board.db")
    elif request.param == "postgres":
        made = PostgresBoard(TASKS, clock, request.getfixturevalue("postgres_server_url"))
    elif request.param == "redis-url":
        made = RedisBoard(TASKS, clock, request.getfixturevalue("redis_server_url"))
    else:
        url = request.getfixturevalue("redis_server_url")
        with (
            redis.Redis.from_url(url, decode_responses=True) as client,
            RedisBoard(TASKS, clock, client) as made,
        ):
            yield made
        return
    with made:
        yield made


def by_id(board: Any) -> dict[str, Task]:
    """The board's snapshot, by task id."""
    return {task.id: task for task in board.list_tasks()}


# -- open_client ---------------------------------------------------------------------------------


def test_a_client_is_a_new_board_of_the_same_class(board: Any) -> None:
    """open_client returns a different board object of the board's own class."""
    with board.open_client() as client:
        assert client is not board
        assert type(client) is type(board)


def test_a_client_sees_the_other_clients_writes(board: Any) -> None:
    """A claim through the board shows in the client's snapshot, and the other way round."""
    with board.open_client() as client:
        held = board.claim("a", "x", ClaimRequest())
        assert by_id(client)["a"] == held
        other = client.claim("b", "y", ClaimRequest())
        assert by_id(board)["b"] == other


def test_a_claim_by_one_client_is_taken_for_another(board: Any) -> None:
    """Once a client holds a live lease, a claim through another client is TakenError."""
    with board.open_client() as first, board.open_client() as second:
        first.claim("a", "x", ClaimRequest())
        with pytest.raises(TakenError):
            second.claim("a", "x", ClaimRequest())
        with pytest.raises(TakenError):
            board.claim("a", "y", ClaimRequest())


def test_closing_a_client_leaves_the_board(board: Any) -> None:
    """Closing a client closes only its own connections: the board and its tasks stay."""
    client = board.open_client()
    token = client.claim("a", "x", ClaimRequest()).lease.token
    client.close()
    assert by_id(board)["a"].state is State.CLAIMED
    board.complete("a", token)
    assert by_id(board)["a"].state is State.DONE
    with board.open_client() as later:
        assert by_id(later) == by_id(board)


def test_a_client_reads_the_boards_clock(board: Any, clock: ManualClock) -> None:
    """A client keeps the board's clock: moving it past a lease lets the client take over."""
    board.claim("a", "x", ClaimRequest(timedelta(seconds=10)))
    with board.open_client() as client:
        with pytest.raises(TakenError):
            client.claim("a", "y", ClaimRequest())
        clock.advance(timedelta(seconds=10))
        assert client.claim("a", "y", ClaimRequest()).owner == "y"


def test_a_client_adds_no_tasks(board: Any) -> None:
    """A client attaches: opening one leaves the board's tasks as they were."""
    before = by_id(board)
    with board.open_client() as client:
        assert by_id(client) == before
    assert by_id(board) == before


# -- pickling --------------------------------------------------------------------------------------


def test_an_unpickled_board_is_a_new_client_of_the_same_storage(board: Any) -> None:
    """Unpickling a board opens a new client of the same storage, of the same class."""
    board.claim("a", "x", ClaimRequest())
    with pickle.loads(pickle.dumps(board)) as client:
        assert client is not board
        assert type(client) is type(board)
        assert by_id(client) == by_id(board)
        with pytest.raises(TakenError):
            client.claim("a", "y", ClaimRequest())
        client.claim("b", "y", ClaimRequest())
    assert by_id(board)["b"].owner == "y"


def _client_in_child(board: Any) -> tuple[str, str, bool]:
    """In a spawned process: the unpickled board claims ``a``, then tries ``b``."""
    with board:
        won = board.claim("a", "child", ClaimRequest())
        assert won.lease is not None
        try:
            board.claim("b", "child", ClaimRequest())
        except TakenError:
            taken = True
        else:
            taken = False
        return type(board).__name__, won.lease.token, taken


def test_a_board_unpickled_in_a_spawned_process_is_a_working_client(board: Any) -> None:
    """A board sent to a spawned process unpickles there as a client of the same storage:
    its claim shows here, ours is TakenError there, and its close leaves the board."""
    board.claim("b", "parent", ClaimRequest())
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        name, token, taken = pool.submit(_client_in_child, board).result(timeout=60)
    assert name == type(board).__name__
    assert taken
    snapshot = by_id(board)
    assert snapshot["a"].owner == "child"
    assert snapshot["a"].lease is not None
    assert snapshot["a"].lease.token == token
    board.release("a", token)
    assert by_id(board)["a"].state is State.OPEN


def test_a_manual_clock_pickles_as_a_copy_at_its_instant() -> None:
    """A ManualClock pickles (its lock is not state) as a clock at the same instant."""
    clock = ManualClock()
    clock.advance(timedelta(seconds=5))
    copy = pickle.loads(pickle.dumps(clock))
    assert copy is not clock
    assert copy.now() == clock.now()


def test_a_private_in_memory_board_is_its_own_client_and_refuses_pickling() -> None:
    """An in-memory SQLiteBoard's open_client is itself; pickling it is a TypeError naming
    the missing address."""
    with SQLiteBoard(TASKS, ManualClock()) as board:
        assert board.open_client() is board
        with pytest.raises(TypeError, match="no address"):
            pickle.dumps(board)


# -- the async Redis board -------------------------------------------------------------------------


def test_async_redis_clients_share_the_board(redis_server_url: str) -> None:
    """AsyncRedisBoard.open_client (a plain method) and unpickling open clients of the same
    board, each with its own client; closing them leaves the board."""

    async def scenario() -> None:
        async with await AsyncRedisBoard.create(TASKS, ManualClock(), redis_server_url) as board:
            client = board.open_client()
            assert isinstance(client, AsyncRedisBoard)
            assert client._client is not board._client
            held = await client.claim("a", "x", ClaimRequest())
            with pytest.raises(TakenError):
                await board.claim("a", "y", ClaimRequest())
            await client.aclose()
            unpickled = pickle.loads(pickle.dumps(board))
            assert isinstance(unpickled, AsyncRedisBoard)
            assert {t.id: t for t in await unpickled.list_tasks()}["a"] == held
            await unpickled.aclose()
            assert {t.id: t for t in await board.list_tasks()}["a"] == held

    asyncio.run(scenario())


# -- client-race mutants ---------------------------------------------------------------------------


def test_client_mutants_are_documented_and_distinct() -> None:
    """CLIENT_MUTANTS holds three distinctly named, documented SQLiteBoard subclasses."""
    names = [mutant.__name__ for mutant in CLIENT_MUTANTS]
    assert len(set(names)) == len(names) == 3
    assert all(issubclass(mutant, SQLiteBoard) for mutant in CLIENT_MUTANTS)
    assert all((mutant.__doc__ or "").startswith("Bug:") for mutant in CLIENT_MUTANTS)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", CLIENT_MUTANTS, ids=lambda m: m.__name__)
def test_a_client_mutant_passes_the_sequential_machine(
    mutant: type[SQLiteBoard], tmp_path: Path
) -> None:
    """With one client, each client-race mutant is correct: the sequential machine passes."""
    paths = (tmp_path / f"board{n}.db" for n in range(10**6))
    machine = BoardMachine.for_board(lambda tasks, clock: mutant(tasks, clock, next(paths)))
    run_state_machine_as_test(machine, settings=MACHINE_SETTINGS)


@pytest.mark.parametrize("mutant", CLIENT_MUTANTS, ids=lambda m: m.__name__)
def test_a_client_mutant_pickles_and_opens_clients_of_its_own_class(
    mutant: type[SQLiteBoard], tmp_path: Path
) -> None:
    """A mutant's open_client and unpickling give new clients of the same file and class;
    it refuses a private in-memory database."""
    with (
        mutant(TASKS, ManualClock(), tmp_path / "board.db") as board,
        board.open_client() as client,
        pickle.loads(pickle.dumps(board)) as unpickled,
    ):
        assert type(client) is type(unpickled) is mutant
        client.claim("a", "x", ClaimRequest())
        assert by_id(unpickled)["a"].owner == "x"
    with pytest.raises(ValueError, match="database file"):
        mutant(TASKS, ManualClock(), ":memory:")


@pytest.mark.parametrize("mutant", CLIENT_MUTANTS, ids=lambda m: m.__name__)
def test_one_shared_client_of_a_client_mutant_has_one_winner_per_round(
    mutant: type[SQLiteBoard], tmp_path: Path
) -> None:
    """Every agent claiming through one shared client: exactly one winner in every round."""
    with mutant(RACE_TASKS, ManualClock(), tmp_path / "board.db") as board:
        winners = [concurrent_claim(board, task.id, AGENTS) for task in RACE_TASKS]
    assert winners == [1] * ROUNDS


def race_with_clients(board: SQLiteBoard) -> list[int]:
    """concurrent_claim with a client per agent, one fresh task per round, until a round has
    more than one winner (or every round has run); the winner counts."""
    clients = [board.open_client() for _ in AGENTS]
    winners: list[int] = []
    try:
        for task in RACE_TASKS:
            winners.append(concurrent_claim(board, task.id, AGENTS, clients=clients))
            if winners[-1] > 1:
                break
    finally:
        for client in clients:
            client.close()
    return winners


@pytest.mark.parametrize("mutant", CLIENT_MUTANTS, ids=lambda m: m.__name__)
def test_a_client_per_agent_makes_a_client_mutant_win_twice(
    mutant: type[SQLiteBoard], tmp_path: Path
) -> None:
    """Every agent claiming through a client of its own: some round has several winners."""
    with mutant(RACE_TASKS, ManualClock(), tmp_path / "board.db") as board:
        winners = race_with_clients(board)
    assert max(winners) > 1, winners


def test_the_reference_sqlite_board_has_one_winner_with_a_client_per_agent(
    tmp_path: Path,
) -> None:
    """The control: SQLiteBoard raced through a client per agent keeps one winner a round."""
    with SQLiteBoard(RACE_TASKS, ManualClock(), tmp_path / "board.db") as board:
        assert race_with_clients(board) == [1] * ROUNDS


def test_pooled_read_then_write_accepts_one_token_twice_across_clients(tmp_path: Path) -> None:
    """PooledReadThenWrite: duplicate_token_submit sees one success with one shared client
    and, within the rounds, several with a client per worker."""
    with PooledReadThenWrite(RACE_TASKS, ManualClock(), tmp_path / "board.db") as board:
        half = ROUNDS // 2
        shared = [duplicate_token_submit(board, t.id, len(AGENTS)) for t in RACE_TASKS[:half]]
        clients = [board.open_client() for _ in AGENTS]
        try:
            apart = []
            for task in RACE_TASKS[half:]:
                apart.append(duplicate_token_submit(board, task.id, len(AGENTS), clients=clients))
                if apart[-1] > 1:
                    break
        finally:
            for client in clients:
                client.close()
    assert shared == [1] * half
    assert max(apart) > 1, apart


def test_cached_leases_accepts_a_token_another_client_replaced(tmp_path: Path) -> None:
    """ClientCachedLeases: a client completes with a token its cache still holds after another
    client released and a third re-claimed; one shared client rejects that same token."""
    path = tmp_path / "board.db"
    with ClientCachedLeases(TASKS, ManualClock(), path) as board:
        first = board.claim("a", "x", ClaimRequest())
        assert first.lease is not None
        with pytest.raises(TakenError):
            board.claim("a", "y", ClaimRequest())
        board.release("a", first.lease.token)
        board.claim("a", "z", ClaimRequest())
        with pytest.raises(LeaseLostError):
            board.complete("a", first.lease.token)

    with (
        ClientCachedLeases(TASKS, ManualClock(), tmp_path / "apart.db") as board,
        board.open_client() as stale,
    ):
        first = board.claim("a", "x", ClaimRequest())
        assert first.lease is not None
        with pytest.raises(TakenError):
            stale.claim("a", "y", ClaimRequest())  # caches a as held with first's token
        board.release("a", first.lease.token)
        held = board.claim("a", "z", ClaimRequest())
        stale.complete("a", first.lease.token)  # BUG: the cache says the token is current
        assert by_id(board)["a"].state is State.DONE
        assert held.owner == "z"


def test_an_async_redis_client_opened_before_the_boards_first_command_sees_its_tasks(
    redis_server_url: str,
) -> None:
    """AsyncRedisBoard inserts its tasks on its first command: a client opened (or unpickled)
    before that still sees them, and the tasks are inserted once."""

    async def scenario() -> None:
        board = AsyncRedisBoard(TASKS, ManualClock(), redis_server_url)
        client = board.open_client()
        unpickled = pickle.loads(pickle.dumps(board))
        try:
            held = await client.claim("a", "x", ClaimRequest())
            assert [t.id for t in await unpickled.list_tasks()] == ["a", "b"]
            assert {t.id: t for t in await board.list_tasks()}["a"] == held
        finally:
            await client.aclose()
            await unpickled.aclose()
            await board.aclose()

    asyncio.run(scenario())
