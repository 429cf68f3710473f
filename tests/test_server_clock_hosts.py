"""Server-clock hosts (``clock="server"``) and the server-clock mutants, on real servers.

Both the boards and these tests run on this machine, so the server's clock is
the tests' clock (``time.time``); the margins below (SLACK on windows, 15 ms or
more around every ``until``) absorb scheduling, not clock skew.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from taskboard import ClaimRequest, LeaseLostError, State, TakenError, Task
from taskboard.hosts import _redis_lua
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard
from taskboard.hosts.server_mutants import (
    SERVER_CLOCK_MUTANTS,
    ServerReleaseIgnoresToken,
    ServerTakeoverOnClientClock,
    ServerTimeSecondsOnly,
    ServerWrongTtl,
)

MS = timedelta(milliseconds=1)
#: How far outside the [before, after] reads a server-clock instant may fall (same machine).
SLACK = 2 * MS
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RaisingClock:
    """A Clock a server-clock board must never read."""

    def now(self) -> datetime:
        raise AssertionError("a server-clock board read the injected clock")


def wall() -> datetime:
    """This machine's clock, read as the tests read it."""
    return EPOCH + timedelta(microseconds=time.time_ns() // 1000)


def sleep_until(when: datetime) -> None:
    """Sleep until this machine's clock reads ``when`` or later."""
    while (left := (when - wall()).total_seconds()) > 0:
        time.sleep(left)


def until_of(task: Task) -> datetime:
    assert task.lease is not None
    assert task.lease.until is not None
    return task.lease.until


def token_of(task: Task) -> str:
    assert task.lease is not None
    return task.lease.token


BoardFactory = Callable[[list[Task]], AbstractContextManager[Any]]


@pytest.fixture(params=["redis", "postgres"])
def make_board(request: pytest.FixtureRequest) -> Iterator[BoardFactory]:
    """Makes a ``clock="server"`` RedisBoard or PostgresBoard (given a RaisingClock nowhere)."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_server_url")
        yield lambda tasks: RedisBoard(tasks, "server", url)
    else:
        url = request.getfixturevalue("postgres_server_url")
        yield lambda tasks: PostgresBoard(tasks, "server", url)


def timed(call: Callable[[], Task]) -> tuple[datetime, Task, datetime]:
    """``call``'s result between this machine's clock read just before and just after."""
    before = wall()
    got = call()
    return before, got, wall()


# -- the reference hosts with clock="server" -------------------------------------------------------


@pytest.mark.parametrize("host", ["redis", "postgres"])
def test_a_server_clock_board_never_reads_the_injected_clock(
    host: str, request: pytest.FixtureRequest
) -> None:
    """clock="server" reads only the server's time: every operation works with no usable Clock."""
    url = request.getfixturevalue(f"{host}_server_url")
    cls: Any = RedisBoard if host == "redis" else PostgresBoard
    # First, that a board given the RaisingClock itself does read it (and fails).
    with (
        cls([Task("t")], RaisingClock(), url) as board,
        pytest.raises(AssertionError, match="read the injected clock"),
    ):
        board.claim("t", "a", ClaimRequest())
    with cls([Task("t"), Task("u")], "server", url) as board:
        assert "clock='server'" in repr(board)
        got = board.claim("t", "a", ClaimRequest(ttl=MS * 500))
        board.renew("t", token_of(got), ClaimRequest(ttl=MS * 500))
        board.release("t", token_of(got))
        got = board.claim("t", "a", ClaimRequest(ttl=MS * 500))
        board.complete("t", token_of(got))
        board.fail("u", token_of(board.claim("u", "a", ClaimRequest())))
        assert [t.state for t in board.list_tasks()] == [State.DONE, State.FAILED]


def test_the_async_redis_board_takes_server_time_too(redis_server_url: str) -> None:
    """AsyncRedisBoard with clock="server": until - ttl is the server's now at the call."""

    async def run() -> tuple[datetime, Task, datetime, list[Task]]:
        async with AsyncRedisBoard([Task("t")], "server", redis_server_url) as board:
            before = wall()
            got = await board.claim("t", "a", ClaimRequest(ttl=MS * 30))
            after = wall()
            return before, got, after, await board.list_tasks()

    before, got, after, listed = asyncio.run(run())
    assert before - SLACK <= until_of(got) - MS * 30 <= after + SLACK
    assert listed == [got]


@pytest.mark.parametrize("board_class", [RedisBoard, AsyncRedisBoard, PostgresBoard])
def test_a_clock_string_other_than_server_is_a_value_error(board_class: Any) -> None:
    """Only the string "server" stands for the server's clock; any other is refused up front."""
    with pytest.raises(ValueError, match="clock must be a Clock or 'server'"):
        board_class([Task("t")], "system", "unused://")


def test_until_minus_ttl_is_the_servers_now_at_the_call(make_board: BoardFactory) -> None:
    """A claim's until - ttl lies between this machine's clock before and after the call."""
    ttl = MS * 30
    with make_board([Task("t")]) as board:
        before, got, after = timed(lambda: board.claim("t", "a", ClaimRequest(ttl=ttl)))
        assert before - SLACK <= until_of(got) - ttl <= after + SLACK
        assert board.list_tasks() == [got], "the snapshot shows another until than returned"


def test_a_lease_is_live_before_until_and_taken_over_after(make_board: BoardFactory) -> None:
    """Server time judges the lease: a claim 15 ms before until is taken, 15 ms after it wins."""
    with make_board([Task("t")]) as board:
        first = board.claim("t", "a", ClaimRequest(ttl=MS * 40))
        sleep_until(until_of(first) - MS * 15)
        with pytest.raises(TakenError):
            board.claim("t", "b", ClaimRequest(ttl=MS * 40))
        sleep_until(until_of(first) + MS * 15)
        second = board.claim("t", "b", ClaimRequest(ttl=MS * 40))
        assert second.owner == "b"
        assert second.lease is not None
        assert first.lease is not None
        assert second.lease.fence > first.lease.fence


def test_an_expired_lease_cannot_be_released_or_renewed(make_board: BoardFactory) -> None:
    """Past until on the server's clock, the holder's release and renew are LeaseLostError."""
    with make_board([Task("t")]) as board:
        got = board.claim("t", "a", ClaimRequest(ttl=MS * 20))
        sleep_until(until_of(got) + MS * 15)
        with pytest.raises(LeaseLostError):
            board.renew("t", token_of(got), ClaimRequest(ttl=MS * 20))
        with pytest.raises(LeaseLostError):
            board.release("t", token_of(got))
        assert board.list_tasks() == [got]


def test_renew_recomputes_until_from_server_time(make_board: BoardFactory) -> None:
    """renew sets until = the server's now + ttl, so the lease outlives its first until."""
    ttl = MS * 60
    with make_board([Task("t")]) as board:
        got = board.claim("t", "a", ClaimRequest(ttl=ttl))
        time.sleep(0.03)
        before, renewed, after = timed(
            lambda: board.renew("t", token_of(got), ClaimRequest(ttl=ttl))
        )
        assert before - SLACK <= until_of(renewed) - ttl <= after + SLACK
        assert until_of(renewed) > until_of(got)
        assert board.list_tasks() == [renewed]
        sleep_until(until_of(got) + MS * 10)  # past the first until, 20 ms before the new one
        with pytest.raises(TakenError):
            board.claim("t", "b", ClaimRequest())


def test_ttl_zero_means_no_until(make_board: BoardFactory) -> None:
    """A zero ttl gives until None on claim and on renew, and such a lease does not expire."""
    with make_board([Task("t")]) as board:
        got = board.claim("t", "a", ClaimRequest())
        assert got.lease is not None
        assert got.lease.until is None
        renewed = board.renew("t", token_of(got), ClaimRequest(ttl=MS * 20))
        assert renewed.lease is not None
        assert renewed.lease.until is not None
        renewed = board.renew("t", token_of(got), ClaimRequest())
        assert renewed.lease is not None
        assert renewed.lease.until is None
        time.sleep(0.03)
        with pytest.raises(TakenError):
            board.claim("t", "b", ClaimRequest())


def test_the_redis_scripts_add_until_exactly(redis_server_url: str) -> None:
    """The Lua decimal add is exact past 2**53, where Lua's doubles would round."""
    with redis.Redis.from_url(redis_server_url) as client:
        source = _redis_lua._PRELUDE + _redis_lua._UNTIL_AT + "return add(ARGV[1], ARGV[2])"
        for a, b in [("0", "0"), ("999", "1"), ("9007199254740993", "1"), ("1", "99999999")]:
            assert client.eval(source, 0, a, b) == str(int(a) + int(b)).encode()
        big = 220_752_000_000_000_001  # about 7000 years, in microseconds: odd, past 2**53
        with RedisBoard([Task("t")], "server", client) as board:
            before, got, after = timed(
                lambda: board.claim("t", "a", ClaimRequest(ttl=timedelta(microseconds=big)))
            )
            assert before - SLACK <= until_of(got) - timedelta(microseconds=big) <= after + SLACK
            assert board.list_tasks() == [got]


# -- the server-clock mutants ----------------------------------------------------------------------


def test_every_server_mutant_ignores_the_injected_clock(redis_server_url: str) -> None:
    """Each mutant runs on the server's clock whatever clock it is given (a machine passes one)."""
    assert [m.__name__ for m in SERVER_CLOCK_MUTANTS] == [
        "ServerReleaseIgnoresToken",
        "ServerWrongTtl",
        "ServerTakeoverOnClientClock",
        "ServerTimeSecondsOnly",
    ]
    for mutant in SERVER_CLOCK_MUTANTS:
        with mutant([Task("t")], RaisingClock(), redis_server_url) as board:
            got = board.claim("t", "a", ClaimRequest(ttl=MS * 500))
            board.complete("t", token_of(got))
            assert board.list_tasks()[0].state is State.DONE


def test_release_ignores_token_frees_a_task_for_any_token(redis_server_url: str) -> None:
    """ServerReleaseIgnoresToken: a wrong token releases the task (the reference refuses it)."""
    with RedisBoard([Task("t")], "server", redis_server_url) as board:
        board.claim("t", "a", ClaimRequest())
        with pytest.raises(LeaseLostError):
            board.release("t", "not-the-token")
    with ServerReleaseIgnoresToken([Task("t")], RaisingClock(), redis_server_url) as board:
        board.claim("t", "a", ClaimRequest())
        with pytest.raises(LeaseLostError):
            board.complete("t", "not-the-token")  # only release lost its check
        board.release("t", "not-the-token")
        assert board.list_tasks()[0].state is State.OPEN


def test_wrong_ttl_keeps_a_lease_live_past_its_reported_until(
    redis_server_url: str,
) -> None:
    """ServerWrongTtl: until is reported right, but a claim 20 ms after it is still taken."""
    ttl = MS * 20
    with ServerWrongTtl([Task("t")], RaisingClock(), redis_server_url) as board:
        before, got, after = timed(lambda: board.claim("t", "a", ClaimRequest(ttl=ttl)))
        assert before - SLACK <= until_of(got) - ttl <= after + SLACK  # the report is right
        sleep_until(until_of(got) + MS * 20)
        with pytest.raises(TakenError):
            board.claim("t", "b", ClaimRequest())  # the reference takes it over here
        board.release("t", token_of(got))  # and would refuse this as expired
        board_id = board.board_id
        claimed = board.claim("t", "b", ClaimRequest(ttl=MS * 500))
        assert claimed.owner == "b"
    with redis.Redis.from_url(redis_server_url) as client:
        assert list(client.scan_iter(match=f"taskboard:{{{board_id}}}:*")) == []


def test_takeover_on_client_clock_takes_a_live_lease(redis_server_url: str) -> None:
    """ServerTakeoverOnClientClock: 30 ms before until the lease is taken over: two holders."""
    ttl = MS * 100
    with ServerTakeoverOnClientClock([Task("t")], RaisingClock(), redis_server_url) as board:
        got = board.claim("t", "a", ClaimRequest(ttl=ttl))
        with pytest.raises(TakenError):  # the client's clock is 50 ms ahead, not more
            board.claim("t", "b", ClaimRequest())
        sleep_until(until_of(got) - MS * 30)
        second = board.claim("t", "b", ClaimRequest())
        assert wall() < until_of(got) - MS * 5, "too slow: the first lease was no longer live"
        assert second.owner == "b"
    with RedisBoard([Task("t")], "server", redis_server_url) as board:
        got = board.claim("t", "a", ClaimRequest(ttl=ttl))
        sleep_until(until_of(got) - MS * 30)
        with pytest.raises(TakenError):
            board.claim("t", "b", ClaimRequest())


def test_time_seconds_only_dates_until_before_the_call(redis_server_url: str) -> None:
    """ServerTimeSecondsOnly: until - ttl is a whole second, before the call it came from."""
    ttl = MS * 20
    with ServerTimeSecondsOnly([Task("t")], RaisingClock(), redis_server_url) as board:
        if wall().microsecond < 20_000:  # too near a whole second to tell them apart
            time.sleep(0.03)
        before, got, _ = timed(lambda: board.claim("t", "a", ClaimRequest(ttl=ttl)))
        dated = until_of(got) - ttl
        assert dated.microsecond == 0
        assert dated < before - SLACK
        assert until_of(got) < before  # expired before it was issued, on the real clock
        if wall() < dated + timedelta(seconds=1) - MS * 10:  # still in that second:
            with pytest.raises(TakenError):  # the board's now is that second, before until
                board.claim("t", "b", ClaimRequest())
