"""RedisBoard and AsyncRedisBoard against a real redis-server on loopback."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import redis

import taskboard
from taskboard import (
    BlockedError,
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
    TerminalError,
)
from taskboard.boardtest import BoardContract
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard
from tests.servers import (
    NEMESIS_MACHINE,
    NEMESIS_PARALLEL,
    RedisServer,
    async_remade,
    remade,
)

TICK = timedelta(microseconds=1)


@pytest.fixture
def client(redis_server_url: str) -> Iterator[redis.Redis]:
    """A client of the test server, closed afterwards."""
    with redis.Redis.from_url(redis_server_url) as conn:
        yield conn


def board_keys(client: redis.Redis, board_id: str) -> list[bytes]:
    """Every key on the server under ``board_id``'s prefix."""
    return sorted(client.scan_iter(match=f"taskboard:{{{board_id}}}:*"))


# -- the contract suite --------------------------------------------------------------------------


class TestRedisBoardContract(BoardContract):
    clock_resolution = RedisBoard.clock_resolution
    expired_lease_policy = RedisBoard.expired_lease_policy

    @pytest.fixture(autouse=True)
    def _server(self, redis_server_url: str) -> None:
        self.url = redis_server_url

    def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> Board:
        return RedisBoard(tasks, clock, self.url)

    def close_board(self, board: Board) -> None:
        assert isinstance(board, RedisBoard)
        board.close()

    def open_client(self, board: RedisBoard) -> RedisBoard:
        return board.open_client()


class TestAsyncRedisBoardContract(BoardContract):
    clock_resolution = AsyncRedisBoard.clock_resolution
    expired_lease_policy = AsyncRedisBoard.expired_lease_policy

    @pytest.fixture(autouse=True)
    def _server(self, redis_server_url: str) -> None:
        self.url = redis_server_url

    def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> AsyncRedisBoard:
        return AsyncRedisBoard(tasks, clock, self.url)

    async def close_board(self, board: AsyncRedisBoard) -> None:
        await board.aclose()

    def open_client(self, board: AsyncRedisBoard) -> AsyncRedisBoard:
        return board.open_client()


# -- the contract suite with restarts and dropped connections (SPEC 9) ---------------------------


@pytest.mark.nemesis
@pytest.mark.slow
class TestDurableRedisNemesisContract(BoardContract):
    """RedisBoard on a private redis-server with ``appendfsync always``, restarted (SHUTDOWN,
    then a new server on the same AOF) and cut off (``CLIENT KILL`` of the board's named
    connections) now and then: it loses nothing it acknowledged."""

    board_class: type[RedisBoard] | type[AsyncRedisBoard] = RedisBoard
    clock_resolution = RedisBoard.clock_resolution
    expired_lease_policy = RedisBoard.expired_lease_policy
    machine_settings = NEMESIS_MACHINE
    parallel_settings = NEMESIS_PARALLEL
    tolerate_faults = (redis.ConnectionError,)
    durable = True

    @pytest.fixture(autouse=True)
    def _server(self, durable_redis: RedisServer) -> None:
        self.server = durable_redis

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return self.board_class(tasks, clock, self.server.url)

    def close_board(self, board: RedisBoard) -> None:
        board.close()

    def open_client(self, board: RedisBoard) -> RedisBoard:
        return board.open_client()

    def restart_storage(self, board: RedisBoard) -> Board | None:
        self.server.restart()
        return None

    def drop_connections(self, board: RedisBoard) -> None:
        self.server.drop_connections(f"taskboard:{board.board_id}")


class TestVolatileRedisNemesisContract(TestDurableRedisNemesisContract):
    """RedisBoard with ``fences="time"`` on a private redis-server with no persistence: a
    restart loses every key. The restart hook makes the board anew from its initial tasks
    (on the same ``board_id``), as its application would; fences must still never repeat."""

    durable = False

    @pytest.fixture(autouse=True)
    def _server(self, volatile_redis: RedisServer) -> None:
        self.server = volatile_redis
        self.initial: dict[str, tuple[list[Task], Clock]] = {}

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        board = self.board_class(tasks, clock, self.server.url, fences="time")
        self.initial[board.board_id] = (list(tasks), clock)
        return board

    def restart_storage(self, board: RedisBoard) -> Board | None:
        self.server.restart()
        return remade(board, self.server.url, *self.initial[board.board_id])


class TestDurableAsyncRedisNemesisContract(TestDurableRedisNemesisContract):
    """TestDurableRedisNemesisContract for AsyncRedisBoard."""

    board_class = AsyncRedisBoard

    async def close_board(self, board: AsyncRedisBoard) -> None:
        await board.aclose()


class TestVolatileAsyncRedisNemesisContract(TestVolatileRedisNemesisContract):
    """TestVolatileRedisNemesisContract for AsyncRedisBoard."""

    board_class = AsyncRedisBoard

    async def close_board(self, board: AsyncRedisBoard) -> None:
        await board.aclose()

    async def restart_storage(self, board: AsyncRedisBoard) -> Board | None:
        self.server.restart()
        return await async_remade(board, self.server.url, *self.initial[board.board_id])


# -- RedisBoard ------------------------------------------------------------------------------------


def test_two_boards_on_one_server_are_isolated(redis_server_url: str) -> None:
    """Two boards with the same task ids on one server: a claim on one leaves the other as is."""
    clock = ManualClock()
    with (
        RedisBoard([Task("t1")], clock, redis_server_url) as first,
        RedisBoard([Task("t1")], clock, redis_server_url) as second,
    ):
        assert first.board_id != second.board_id
        first.claim("t1", "a1", ClaimRequest())
        assert second.list_tasks() == [Task("t1")]
        assert second.claim("t1", "a1", ClaimRequest()).state is State.CLAIMED


def test_attaching_by_board_id_sees_the_same_board(
    redis_server_url: str, client: redis.Redis
) -> None:
    """board_id attaches: only missing tasks are inserted, and each side sees the other's writes."""
    clock = ManualClock()
    with RedisBoard([Task("t1")], clock, redis_server_url) as first:
        got = first.claim("t1", "a1", ClaimRequest())
        with RedisBoard(
            [Task("t1"), Task("t2", deps=("t1",))], clock, client, board_id=first.board_id
        ) as second:
            assert second.list_tasks() == first.list_tasks()
            assert second.list_tasks()[0] == got, "attaching reset an existing task"
            assert got.lease is not None
            second.complete("t1", got.lease.token)
            assert first.claim("t2", "a2", ClaimRequest()).state is State.CLAIMED
        # The attached board left: the board, and the client it was given, stay.
        assert [t.id for t in first.list_tasks()] == ["t1", "t2"]
        assert client.ping()


def test_close_removes_the_boards_keys(redis_server_url: str, client: redis.Redis) -> None:
    """close() deletes every key of the board it made; it is idempotent; later calls raise."""
    board = RedisBoard([Task("t1")], ManualClock(), redis_server_url)
    got = board.claim("t1", "a1", ClaimRequest())
    assert got.lease is not None
    board.release("t1", got.lease.token)
    assert board_keys(client, board.board_id)
    board.close()
    board.close()
    assert board_keys(client, board.board_id) == []
    with pytest.raises(RuntimeError, match="closed"):
        board.list_tasks()


def test_duplicate_initial_ids_raise_value_error(redis_server_url: str) -> None:
    """Two initial tasks with one id are a ValueError naming the id, for both boards."""
    for board in (RedisBoard, AsyncRedisBoard):
        with pytest.raises(ValueError, match=r"duplicate initial task id 't1'"):
            board([Task("t1"), Task("t1")], ManualClock(), redis_server_url)


def test_a_malformed_board_id_is_a_value_error(redis_server_url: str) -> None:
    """A board_id that could break the key layout or hash tag is refused."""
    with pytest.raises(ValueError, match=r"board_id"):
        RedisBoard([Task("t1")], ManualClock(), redis_server_url, board_id="a}b")


def test_tokens_are_not_derived_from_the_agent_name(redis_server_url: str) -> None:
    """Same agent, task and clock on two boards: different random tokens, not naming the agent."""
    agent = "agent-with-a-distinctive-name"
    clock = ManualClock()
    tokens = []
    for _ in range(2):
        with RedisBoard([Task("t1")], clock, redis_server_url) as board:
            got = board.claim("t1", agent, ClaimRequest())
            assert got.lease is not None
            tokens.append(got.lease.token)
    assert tokens[0] != tokens[1]
    for token in tokens:
        assert re.fullmatch(r"[0-9a-f]{32}", token), token
        assert agent not in token


def test_initial_leases_count_as_issued(redis_server_url: str) -> None:
    """An initial lease is kept as given; its fence and token count as issued."""
    lease = Lease("given", 7, None)
    initial = Task("t1", state=State.CLAIMED, owner="a0", lease=lease, seq=3)
    with RedisBoard([initial], ManualClock(), redis_server_url) as board:
        assert board.list_tasks() == [initial]
        board.release("t1", "given")
        again = board.claim("t1", "a1", ClaimRequest())
        assert again.lease is not None
        assert again.lease.fence == 8
        assert again.lease.token != "given"
        assert again.seq == 5


def test_until_is_exact_beyond_double_precision(redis_server_url: str) -> None:
    """In the year 9000 (past 2**53 microseconds) expiry still lands on the exact microsecond."""
    clock = ManualClock(datetime(9000, 1, 1, tzinfo=UTC))
    with RedisBoard([Task("t1")], clock, redis_server_url) as board:
        got = board.claim("t1", "a1", ClaimRequest(TICK))
        assert got.lease is not None
        assert got.lease.until == clock.now() + TICK
        with pytest.raises(TakenError):
            board.claim("t1", "a2", ClaimRequest(TICK))
        clock.advance(TICK)
        assert board.claim("t1", "a2", ClaimRequest(TICK)).owner == "a2"


class _StaleOnce(ManualClock):
    """A manual clock whose next reading, once set, is an older instant: a call that read
    the time and reached the store after another call that read it later."""

    stale: datetime | None = None

    def now(self) -> datetime:
        stale, self.stale = self.stale, None
        return stale if stale is not None else super().now()


def test_a_call_that_read_the_time_before_an_expiry_runs_after_it(redis_server_url: str) -> None:
    """Store time never goes back: a renew that read an instant before the lease's until,
    reaching the store after a call that found the lease expired, is refused (it does not
    revive the lease), and a late claim's until counts from the store's latest instant."""
    clock = _StaleOnce()
    ttl = timedelta(milliseconds=5)
    with RedisBoard([Task("t1")], clock, redis_server_url) as board:
        lease = board.claim("t1", "a1", ClaimRequest(ttl)).lease
        assert lease is not None
        assert lease.until is not None
        clock.advance(ttl)
        with pytest.raises(LeaseLostError):
            board.renew("t1", lease.token, ClaimRequest(ttl))
        clock.stale = lease.until - TICK
        with pytest.raises(LeaseLostError):
            board.renew("t1", lease.token, ClaimRequest(ttl))
        clock.stale = lease.until - TICK
        taken = board.claim("t1", "a2", ClaimRequest(ttl))
        assert taken.lease is not None
        assert taken.lease.until == lease.until + ttl


def test_a_client_with_decode_responses_works(redis_server_url: str) -> None:
    """A given client that decodes replies to str serves the board as well as a bytes one."""
    with (
        redis.Redis.from_url(redis_server_url, decode_responses=True) as conn,
        RedisBoard([Task("t1", title="é")], ManualClock(), conn) as board,
    ):
        got = board.claim("t1", "a1", ClaimRequest(timedelta(seconds=1)))
        assert board.list_tasks() == [got]
        assert got.title == "é"


def test_many_threads_race_on_one_board(redis_server_url: str) -> None:
    """Eight threads on one board's connection pool: one winner, and check() is clean."""
    with RedisBoard([Task("race")], ManualClock(), redis_server_url) as board:
        assert taskboard.concurrent_claim(board, "race", [f"a{i}" for i in range(8)]) == 1
        assert taskboard.check(board.list_tasks()) == []


# -- AsyncRedisBoard -----------------------------------------------------------------------------


def test_async_board_claims_renews_completes_and_maps_errors(
    redis_server_url: str, client: redis.Redis
) -> None:
    """AsyncRedisBoard: claim, renew, complete, and every rejection as its SPEC error class."""
    clock = ManualClock()
    tasks = [Task("t1"), Task("t2", deps=("t1",))]

    async def main() -> None:
        board = AsyncRedisBoard(tasks, clock, redis_server_url)  # lazy: no I/O yet
        assert board_keys(client, board.board_id) == []
        async with board:
            assert await board.list_tasks() == tasks
            with pytest.raises(ValueError, match="non-empty agent"):
                await board.claim("t1", "", ClaimRequest())
            got = await board.claim("t1", "a1", ClaimRequest(5 * TICK))
            assert got.lease is not None
            assert got == (await board.list_tasks())[0]
            with pytest.raises(NotFoundError):
                await board.claim("nope", "a1", ClaimRequest())
            with pytest.raises(BlockedError, match=r"waits for 't1' \(claimed\)"):
                await board.claim("t2", "a1", ClaimRequest())
            with pytest.raises(TakenError):
                await board.claim("t1", "a1", ClaimRequest())
            with pytest.raises(LeaseLostError):
                await board.renew("t1", "wrong", ClaimRequest())
            with pytest.raises(NotFoundError):
                await board.release("nope", got.lease.token)
            clock.advance(4 * TICK)
            renewed = await board.renew("t1", got.lease.token, ClaimRequest(2 * TICK))
            assert renewed.lease == Lease(got.lease.token, got.lease.fence, clock.now() + 2 * TICK)
            assert renewed.seq > got.seq
            clock.advance(2 * TICK)
            before = await board.list_tasks()
            with pytest.raises(LeaseLostError, match="expired"):
                await board.complete("t1", got.lease.token)
            assert await board.list_tasks() == before
            again = await board.claim("t1", "a2", ClaimRequest())
            assert again.lease is not None
            assert again.lease.fence > got.lease.fence
            await board.complete("t1", again.lease.token)
            with pytest.raises(TerminalError):
                await board.claim("t1", "a1", ClaimRequest())
            third = await board.claim("t2", "a1", ClaimRequest())
            assert third.lease is not None
            await board.fail("t2", third.lease.token)
            with pytest.raises(LeaseLostError, match="not claimed"):
                await board.release("t2", third.lease.token)
            assert [t.state for t in await board.list_tasks()] == [State.DONE, State.FAILED]
        assert board_keys(client, board.board_id) == []
        await board.aclose()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            await board.list_tasks()

    asyncio.run(main())


def test_async_concurrent_claims_have_one_winner(redis_server_url: str) -> None:
    """Eight coroutines claim one task at once on a lazily set-up board: exactly one wins."""

    async def main() -> None:
        async with AsyncRedisBoard([Task("race")], ManualClock(), redis_server_url) as board:
            results = await asyncio.gather(
                *(board.claim("race", f"a{i % 2}", ClaimRequest()) for i in range(8)),
                return_exceptions=True,
            )
            winners = [r for r in results if isinstance(r, Task)]
            assert len(winners) == 1
            assert all(isinstance(r, TakenError) for r in results if r not in winners)
            assert await board.list_tasks() == winners

    asyncio.run(main())


def test_async_create_and_a_sync_board_share_one_board(redis_server_url: str) -> None:
    """AsyncRedisBoard.create inserts at once; a RedisBoard attached by board_id sees its writes."""
    clock = ManualClock()

    async def main() -> None:
        board = await AsyncRedisBoard.create([Task("t1")], clock, redis_server_url)
        try:
            with RedisBoard([], clock, redis_server_url, board_id=board.board_id) as attached:
                assert attached.list_tasks() == [Task("t1")]
                got = await board.claim("t1", "a1", ClaimRequest())
                assert attached.list_tasks() == [got]
                assert got.lease is not None
                attached.complete("t1", got.lease.token)
            assert (await board.list_tasks())[0].state is State.DONE
        finally:
            await board.aclose()

    asyncio.run(main())
