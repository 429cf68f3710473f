"""The reference hosts across restarts and dropped connections (SPEC 9), pinned hook by hook.

Each nemesis contract class (``-m nemesis``) runs these hooks at random inside the machine;
the tests here pin what each hook must leave behind: a durable board shows exactly what it
acknowledged after a restart (leases, ``until``, ``seq``, fences) and its next fence is
greater; a board on a Redis that lost every key is made anew from its initial tasks, and its
fences still grow; after a drop the board's next calls work, at most the first raising the
host's infrastructure fault; a SQLite file reopened keeps everything.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from taskboard import ClaimRequest, ManualClock, State, Task
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard, _may_retry
from taskboard.hosts.sqlite import SQLiteBoard
from tests.servers import (
    PostgresServer,
    RedisServer,
    ReplyLosingProxy,
    async_remade,
    remade,
)

pytestmark = pytest.mark.nemesis

TASKS = [Task("t1"), Task("t2"), Task("t3"), Task("t4"), Task("t5", deps=("t3",))]
TTL = ClaimRequest(timedelta(seconds=30))


def fences(tasks: Sequence[Task]) -> list[int]:
    """The fence of every lease in ``tasks``."""
    return [task.lease.fence for task in tasks if task.lease is not None]


def busy_board(board: Any) -> list[int]:
    """Bring ``board`` (a sync board holding :data:`TASKS`) to a state with one of everything:
    t1 claimed with a TTL, then renewed; t2 claimed for good; t3 done; t4 failed; t5 open.
    Returns every fence issued."""
    issued = []
    got = board.claim("t1", "a1", TTL)
    issued.append(got.lease.fence)
    board.renew("t1", got.lease.token, ClaimRequest(timedelta(seconds=60)))
    issued.append(board.claim("t2", "a2", ClaimRequest()).lease.fence)
    for task_id, finish in (("t3", "complete"), ("t4", "fail")):
        got = board.claim(task_id, "a3", TTL)
        issued.append(got.lease.fence)
        getattr(board, finish)(task_id, got.lease.token)
    return issued


def goes_on(board: Any, before: Sequence[Task], issued: Sequence[int]) -> None:
    """``board`` works after a restart that lost nothing: its lease holders still hold (a
    renew by the old token works), and a new claim's fence is greater than every earlier
    one."""
    by_id = {task.id: task for task in before}
    t1 = by_id["t1"].lease
    assert t1 is not None
    assert board.renew("t1", t1.token, TTL).seq == by_id["t1"].seq + 1
    again = board.claim("t4", "a4", TTL)
    assert again.lease is not None
    assert again.lease.fence > max(issued)
    assert board.claim("t5", "a5", TTL).state is State.CLAIMED  # t3 stayed done


def shows(board: Any, expected: Sequence[Task]) -> Callable[[], None]:
    """A call that checks ``board`` lists ``expected``."""

    def check() -> None:
        assert board.list_tasks() == expected

    return check


def at_most_first_call_fails(
    call: Callable[[], object], fault: type[Exception], calls: int = 4
) -> int:
    """Run ``call`` ``calls`` times: only the first may raise ``fault``; return how many did."""
    failed = 0
    for attempt in range(calls):
        try:
            call()
        except fault:
            assert attempt == 0, f"call {attempt + 1} after the drop failed too"
            failed += 1
    return failed


# -- Redis, durable (appendonly yes, appendfsync always) ------------------------------------------


@pytest.mark.parametrize("crash", [False, True], ids=["shutdown", "sigkill"])
def test_durable_redis_restart_keeps_every_acknowledged_change(
    durable_redis: RedisServer, crash: bool
) -> None:
    """A restart (SHUTDOWN, or SIGKILL: appendfsync always put every write on disk before
    its reply) shows the same snapshot, and the board goes on on its own connections."""
    with RedisBoard(TASKS, ManualClock(), durable_redis.url) as board:
        issued = busy_board(board)
        before = board.list_tasks()
        durable_redis.restart(crash=crash)
        assert board.list_tasks() == before
        goes_on(board, before, issued)


def test_durable_async_redis_restart_keeps_every_acknowledged_change(
    durable_redis: RedisServer,
) -> None:
    """The same for AsyncRedisBoard: its first call after the restart may meet a dead
    connection (redis.asyncio does not check idle ones); the next ones show everything."""

    async def main() -> None:
        board = AsyncRedisBoard(TASKS, ManualClock(), durable_redis.url)
        try:
            got = await board.claim("t1", "a1", TTL)
            assert got.lease is not None
            before = await board.list_tasks()
            durable_redis.restart()
            try:
                after = await board.list_tasks()
            except redis.ConnectionError:
                after = await board.list_tasks()
            assert after == before
            again = await board.renew("t1", got.lease.token, TTL)
            assert again.seq == got.seq + 1
            other = await board.claim("t2", "a2", TTL)
            assert other.lease is not None
        finally:
            await board.aclose()

    asyncio.run(main())


# -- Redis, volatile (no persistence) -------------------------------------------------------------


def test_volatile_redis_restart_shows_the_initial_tasks_and_fences_keep_growing(
    volatile_redis: RedisServer,
) -> None:
    """A restart loses every key. The board made anew from its initial tasks (on the same
    board_id) shows them, and with fences="time" each new fence is greater than every fence
    issued before, across several restarts."""
    clock = ManualClock()
    board = RedisBoard(TASKS, clock, volatile_redis.url, fences="time")
    issued: list[int] = []
    try:
        for _ in range(3):
            issued += busy_board(board)
            volatile_redis.restart()
            assert board.list_tasks() == [], "the server kept keys it cannot have kept"
            board = remade(board, volatile_redis.url, TASKS, clock)
            assert board.list_tasks() == TASKS
        got = board.claim("t1", "a1", TTL)
        assert got.lease is not None
        assert got.lease.fence > max(issued)
        assert issued == sorted(issued)
        assert len(set(issued)) == len(issued)
    finally:
        board.close()


def test_counter_fences_repeat_after_a_volatile_restart(volatile_redis: RedisServer) -> None:
    """Why fences="time" exists: counted fences start again at 1 once the server forgot
    the history, so a stale holder's fence 1 would pass a downstream check again."""
    clock = ManualClock()
    board = RedisBoard([Task("t1")], clock, volatile_redis.url)
    first = board.claim("t1", "a1", ClaimRequest())
    volatile_redis.restart()
    board = remade(board, volatile_redis.url, [Task("t1")], clock)
    try:
        second = board.claim("t1", "a2", ClaimRequest())
        assert first.lease is not None
        assert second.lease is not None
        assert second.lease.fence == first.lease.fence == 1
    finally:
        board.close()


def test_volatile_async_redis_restart(volatile_redis: RedisServer) -> None:
    """AsyncRedisBoard with fences="time": made anew after the restart, it shows its initial
    tasks, and the next fence is greater than the one before."""

    async def main() -> None:
        clock = ManualClock()
        board = AsyncRedisBoard(TASKS, clock, volatile_redis.url, fences="time")
        try:
            got = await board.claim("t1", "a1", TTL)
            volatile_redis.restart()
            board = await async_remade(board, volatile_redis.url, TASKS, clock)
            assert await board.list_tasks() == TASKS
            again = await board.claim("t1", "a1", TTL)
            assert got.lease is not None
            assert again.lease is not None
            assert again.lease.fence > got.lease.fence
        finally:
            await board.aclose()

    asyncio.run(main())


def test_time_fences_travel_with_clients_and_pickles(volatile_redis: RedisServer) -> None:
    """A client opened from a fences="time" board, or unpickled from it, numbers fences the
    same way; a fence scheme other than the two is a ValueError."""
    with RedisBoard(TASKS, ManualClock(), volatile_redis.url, fences="time") as board:
        with board.open_client() as client:
            assert client.fences == "time"
        with pickle.loads(pickle.dumps(board)) as copy:
            assert copy.fences == "time"
            assert copy.claim("t1", "a1", TTL).lease.fence > 10**15
    async_board = AsyncRedisBoard(TASKS, ManualClock(), volatile_redis.url, fences="time")
    assert async_board.open_client().fences == "time"
    assert pickle.loads(pickle.dumps(async_board)).fences == "time"
    with pytest.raises(ValueError, match="fences"):
        RedisBoard(TASKS, ManualClock(), volatile_redis.url, fences="random")  # type: ignore[arg-type]


# -- Redis, dropped connections -------------------------------------------------------------------


def test_redis_drop_connections_the_next_calls_work(durable_redis: RedisServer) -> None:
    """CLIENT KILL of the board's connections (named taskboard:<board_id>): the next calls
    work (redis-py checks an idle connection before use; at most the first call fails)."""
    with RedisBoard(TASKS, ManualClock(), durable_redis.url) as board:
        busy_board(board)
        before = board.list_tasks()
        assert durable_redis.drop_connections(f"taskboard:{board.board_id}") >= 1
        at_most_first_call_fails(shows(board, before), redis.ConnectionError)
        assert board.list_tasks() == before


def test_async_redis_drop_connections_the_next_calls_work(durable_redis: RedisServer) -> None:
    """The same for AsyncRedisBoard, whose first call after the drop may fail."""

    async def main() -> None:
        board = AsyncRedisBoard(TASKS, ManualClock(), durable_redis.url)
        try:
            before = await board.list_tasks()
            # Several idle connections, all killed: still at most one call fails.
            await asyncio.gather(*(board.list_tasks() for _ in range(4)))
            assert durable_redis.drop_connections(f"taskboard:{board.board_id}") >= 2
            failed = 0
            for attempt in range(4):
                try:
                    assert await board.list_tasks() == before
                except redis.ConnectionError:
                    assert attempt == 0, "a second call after the drop failed too"
                    failed += 1
        finally:
            await board.aclose()

    asyncio.run(main())


def test_a_drop_kills_only_the_boards_own_connections(durable_redis: RedisServer) -> None:
    """The connections are named after the board, so a drop leaves other boards alone."""
    with (
        RedisBoard(TASKS, ManualClock(), durable_redis.url) as mine,
        RedisBoard(TASKS, ManualClock(), durable_redis.url) as other,
    ):
        mine.list_tasks()
        other.list_tasks()
        with durable_redis.admin() as admin:
            names = {client["name"] for client in admin.client_list(_type="normal")}
        assert {f"taskboard:{mine.board_id}", f"taskboard:{other.board_id}"} <= names
        assert durable_redis.drop_connections(f"taskboard:{mine.board_id}") == 1
        with durable_redis.admin() as admin:
            names = {client["name"] for client in admin.client_list(_type="normal")}
        assert f"taskboard:{mine.board_id}" not in names
        assert f"taskboard:{other.board_id}" in names


# -- Redis, retries -------------------------------------------------------------------------------


def test_boards_never_retry_their_scripts(durable_redis: RedisServer) -> None:
    """A board made from a URL does not retry; given a client whose connections retry
    (redis.Redis(host=...) does, by default), it opens one of its own that does not, and
    leaves the given one alone; a client that does not retry is used as is."""
    with RedisBoard(TASKS, ManualClock(), durable_redis.url) as board:
        assert not _may_retry(board._client.connection_pool)
    with redis.Redis(host="127.0.0.1", port=durable_redis.port) as retrying:
        assert _may_retry(retrying.connection_pool)
        with RedisBoard(TASKS, ManualClock(), retrying) as board:
            assert board._client is not retrying
            assert not _may_retry(board._client.connection_pool)
            with board.open_client() as client:
                assert not _may_retry(client._client.connection_pool)
        assert retrying.ping(), "the given client was closed with the board"
    with (
        redis.Redis.from_url(durable_redis.url, retry=Retry(NoBackoff(), 0)) as plain,
        RedisBoard(TASKS, ManualClock(), plain) as board,
    ):
        assert board._client is plain
    async_retrying = redis.asyncio.Redis(host="127.0.0.1", port=durable_redis.port)
    async_board = AsyncRedisBoard(TASKS, ManualClock(), async_retrying)
    assert async_board._client is not async_retrying
    assert not _may_retry(async_board._client.connection_pool)


@pytest.fixture
def lossy(durable_redis: RedisServer) -> Iterator[ReplyLosingProxy]:
    """A proxy to the durable private server that can lose a reply after the command ran."""
    proxy = ReplyLosingProxy(durable_redis.port)
    yield proxy
    proxy.close()


@pytest.mark.parametrize("through", ["url", "retrying client"])
def test_a_script_whose_reply_is_lost_is_not_run_again(
    lossy: ReplyLosingProxy, through: str
) -> None:
    """The claim reaches the server and runs, and its reply is lost with the connection: the
    call raises ConnectionError (its effect unknown to the caller) and is not sent again, so
    the claim happened exactly once (seq 1, fence 1), and the next call works. Also for a
    board given a client that retries: it runs its scripts on a client of its own."""
    retrying = redis.Redis(host="127.0.0.1", port=lossy.port)
    target: str | redis.Redis = lossy.url if through == "url" else retrying
    with RedisBoard([Task("t0"), Task("t1")], ManualClock(), target) as board:
        board.claim("t0", "a0", ClaimRequest())  # connected, the claim script loaded
        lossy.lose_next_reply()
        with pytest.raises(redis.ConnectionError):
            board.claim("t1", "a1", ClaimRequest())
        (_, task) = board.list_tasks()
        assert task.state is State.CLAIMED
        assert (task.seq, fences([task])) == (1, [1]), "the claim ran more than once"
    retrying.close()


def test_a_client_that_retries_runs_a_lost_reply_twice(lossy: ReplyLosingProxy) -> None:
    """Why the boards never retry: redis-py resends a command whose reply was lost, so a
    script that already ran runs again (an INCR script counts two for one call)."""
    with redis.Redis(host="127.0.0.1", port=lossy.port) as retrying:
        assert _may_retry(retrying.connection_pool)
        key = f"taskboard-test:{time.monotonic_ns()}"
        count = retrying.register_script("return redis.call('INCR', KEYS[1])")
        assert count(keys=[key]) == 1  # the script is loaded
        lossy.lose_next_reply()
        assert count(keys=[key]) == 3
        retrying.delete(key)


# -- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture
def pg_board(postgres_server: PostgresServer) -> Iterator[PostgresBoard]:
    """A PostgresBoard holding TASKS, with three connections kept open between calls."""
    with PostgresBoard(TASKS, ManualClock(), postgres_server.url, connections=3) as board:
        yield board


def test_postgres_drop_connections_the_next_calls_work(
    postgres_server: PostgresServer, pg_board: PostgresBoard
) -> None:
    """pg_terminate_backend of every connection of the board (three idle ones): the next
    call meets a dead connection and raises OperationalError; the broken connection is
    closed and takes the idle ones with it, so every later call works."""
    issued = busy_board(pg_board)
    before = pg_board.list_tasks()
    assert postgres_server.drop_connections(pg_board.board_id) >= 1
    failed = at_most_first_call_fails(shows(pg_board, before), psycopg.OperationalError)
    assert failed == 1, "the call that met the dead connection did not fail"
    goes_on(pg_board, before, issued)


def test_postgres_close_after_a_drop_deletes_the_board(
    postgres_server: PostgresServer,
) -> None:
    """close() deletes the board's rows on a live connection even when every idle one was
    terminated."""
    board = PostgresBoard(TASKS, ManualClock(), postgres_server.url, connections=2)
    board.claim("t1", "a1", TTL)
    postgres_server.drop_connections(board.board_id)
    board.close()
    with psycopg.connect(postgres_server.url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM taskboard_tasks WHERE board_id = %s", (board.board_id,)
        ).fetchone()
    assert row == (0,)


def test_postgres_restart_keeps_every_committed_change(
    restartable_postgres: PostgresServer, pg_board: PostgresBoard
) -> None:
    """pg_ctl restart -m immediate: the board shows exactly what it acknowledged, reconnects
    by itself, and its next fence is greater."""
    issued = busy_board(pg_board)
    before = pg_board.list_tasks()
    restartable_postgres.restart()
    at_most_first_call_fails(shows(pg_board, before), psycopg.OperationalError)
    assert pg_board.list_tasks() == before
    goes_on(pg_board, before, issued)


# -- SQLite ---------------------------------------------------------------------------------------


def test_sqlite_reopen_keeps_everything(tmp_path: Path) -> None:
    """Closing every connection and opening the file again with the same initial tasks
    resets nothing (the constructor inserts only missing tasks): same snapshot, the old
    tokens still hold their leases, and the next fence is greater."""
    clock = ManualClock()
    path = tmp_path / "board.db"
    board = SQLiteBoard(TASKS, clock, path)
    issued = busy_board(board)
    before = board.list_tasks()
    board.close()
    with SQLiteBoard(TASKS, clock, path) as reopened:
        assert reopened.list_tasks() == before
        goes_on(reopened, before, issued)
