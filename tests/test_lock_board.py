"""LockBoard (tests/lock_boards.py): a Board on redis-py's own Lock, on Redis's clock.

Deterministic direct tests against a real redis-server on loopback; they skip without
one. Leases use TTLs of tens of ms, and a test that needs a lease expired sleeps past
its ``until`` with a margin of 20+ ms. Wall-mode machine tests build their boards with
:func:`lock_board_factory`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import redis
import redis.lock
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import (
    BlockedError,
    ClaimRequest,
    Clock,
    LeaseLostError,
    NotFoundError,
    State,
    SystemClock,
    TakenError,
    Task,
    TerminalError,
)
from taskboard._profiles import CI
from taskboard.stateful import BoardMachine, ContractViolation
from taskboard.stateful._reports import failures_reported
from tests.lock_boards import (
    DeleteOthersLock,
    LockBoard,
    StaleTokenReleaseLock,
    UncheckedExtendLock,
    _millis,
    _seconds,
)

TTL = timedelta(milliseconds=30)
MARGIN = timedelta(milliseconds=25)
FOREVER = ClaimRequest()
SHORT = ClaimRequest(ttl=TTL)
BROKEN = [StaleTokenReleaseLock, DeleteOthersLock, UncheckedExtendLock]


def lock_board_factory(
    url: str, lock_class: type[redis.lock.Lock] = redis.lock.Lock
) -> Callable[[Sequence[Task], Clock], LockBoard]:
    """A ``make_board(tasks, clock)`` for a wall-mode machine: a fresh LockBoard on ``url``
    with ``lock_class`` as its lock library; the clock is ignored (Redis keeps the time)."""

    def make_board(tasks: Sequence[Task], clock: Clock) -> LockBoard:
        return LockBoard(tasks, url, lock_class=lock_class)

    make_board.__name__ = make_board.__qualname__ = f"make_lock_board_{lock_class.__name__}"
    return make_board


TASKS = (Task("a"), Task("b", deps=("a",)), Task("c", title="the c"))


@pytest.fixture
def client(redis_server_url: str) -> Iterator[redis.Redis]:
    """A client of the test server, closed afterwards."""
    with redis.Redis.from_url(redis_server_url) as conn:
        yield conn


def make(client: redis.Redis, lock_class: type[redis.lock.Lock] = redis.lock.Lock) -> LockBoard:
    return LockBoard(TASKS, client, lock_class=lock_class)


@pytest.fixture
def board(client: redis.Redis) -> Iterator[LockBoard]:
    """A LockBoard on the correct library (redis-py's Lock), closed afterwards."""
    with make(client) as b:
        yield b


def task(board: LockBoard, task_id: str) -> Task:
    return next(t for t in board.list_tasks() if t.id == task_id)


def sleep_past(until: datetime | None) -> None:
    """Sleep until ``MARGIN`` after ``until`` on the wall clock (Redis's, on loopback)."""
    assert until is not None
    time.sleep(max(0.0, (until + MARGIN - datetime.now(UTC)).total_seconds()))


def takeover(board: LockBoard) -> tuple[Task, Task]:
    """Agent x claims ``c`` for 30 ms, its lease expires, agent y takes it over (no ttl)."""
    old = board.claim("c", "x", SHORT)
    sleep_past(old.lease and old.lease.until)
    return old, board.claim("c", "y", FOREVER)


def token(t: Task) -> str:
    assert t.lease is not None
    return t.lease.token


def lock_key(board: LockBoard, task_id: str) -> str:
    return f"{board.prefix}lock:{task_id}"


# -- the correct library -------------------------------------------------------------------------


def test_claim_returns_the_snapshot_task_with_until_redis_enforces(
    board: LockBoard, client: redis.Redis
) -> None:
    """A claim with a ttl returns the snapshot's task; until is PEXPIRETIME + 1 ms."""
    before = datetime.now(UTC)
    claimed = board.claim("a", "x", SHORT)
    after = datetime.now(UTC)
    assert claimed == task(board, "a")
    assert claimed.state == State.CLAIMED
    assert claimed.owner == "x"
    assert claimed.seq == 1
    assert claimed.lease is not None
    assert claimed.lease.fence == 1
    assert claimed.lease.token
    until = claimed.lease.until
    assert until is not None
    expiry = client.pexpiretime(lock_key(board, "a"))
    assert until == datetime.fromtimestamp(0, UTC) + timedelta(milliseconds=expiry + 1)
    ms = timedelta(milliseconds=1)
    assert before - ms <= until - TTL <= after + ms
    assert client.get(lock_key(board, "a")) == token(claimed).encode()


def test_claim_without_ttl_never_expires(board: LockBoard, client: redis.Redis) -> None:
    """ttl 0 gives until None and a lock key without expiry."""
    claimed = board.claim("a", "x", FOREVER)
    assert claimed.lease is not None
    assert claimed.lease.until is None
    assert client.pttl(lock_key(board, "a")) == -1


def test_claim_checks_in_spec_order(board: LockBoard) -> None:
    """NotFound, Terminal, Blocked, Taken (also for the owner and an empty agent), ValueError."""
    with pytest.raises(NotFoundError):
        board.claim("nope", "", FOREVER)
    with pytest.raises(BlockedError):
        board.claim("b", "", FOREVER)
    with pytest.raises(ValueError, match="agent"):
        board.claim("a", "", FOREVER)
    held = board.claim("a", "x", FOREVER)
    for agent in ("x", "y", ""):
        with pytest.raises(TakenError):
            board.claim("a", agent, FOREVER)
    board.complete("a", token(held))
    with pytest.raises(TerminalError):
        board.claim("a", "", FOREVER)
    assert board.claim("b", "y", FOREVER).state == State.CLAIMED


def test_rejected_operations_change_nothing(board: LockBoard) -> None:
    """Every rejection leaves the snapshot, seq included, as it was."""
    held = board.claim("a", "x", SHORT)
    before = board.list_tasks()
    for call in (
        lambda: board.claim("a", "y", SHORT),
        lambda: board.release("a", "not-a-token"),
        lambda: board.complete("a", "not-a-token"),
        lambda: board.renew("a", "not-a-token", SHORT),
        lambda: board.release("c", token(held)),
        lambda: board.claim("b", "y", SHORT),
    ):
        with pytest.raises((TakenError, LeaseLostError, BlockedError)):
            call()
    assert board.list_tasks() == before


def test_release_opens_and_the_next_fence_is_greater(board: LockBoard, client: redis.Redis) -> None:
    """release: OPEN, no owner or lease, seq grows, lock key gone; the next fence is greater."""
    first = board.claim("a", "x", FOREVER)
    board.release("a", token(first))
    assert task(board, "a") == Task("a", seq=2)
    assert not client.exists(lock_key(board, "a"))
    second = board.claim("a", "y", SHORT)
    assert second.lease is not None
    assert first.lease is not None
    assert second.lease.fence > first.lease.fence
    assert second.lease.token != first.lease.token
    assert second.seq == 3


def test_complete_is_terminal(board: LockBoard) -> None:
    """complete: DONE; a later claim is Terminal, a later release/complete is LeaseLost."""
    held = board.claim("a", "x", SHORT)
    board.complete("a", token(held))
    assert task(board, "a") == Task("a", state=State.DONE, seq=2)
    with pytest.raises(TerminalError):
        board.claim("a", "y", FOREVER)
    with pytest.raises(LeaseLostError):
        board.release("a", token(held))
    with pytest.raises(LeaseLostError):
        board.complete("a", token(held))


def test_fail_then_reclaim(board: LockBoard) -> None:
    """fail: FAILED, claimable again with a greater fence."""
    held = board.claim("a", "x", FOREVER)
    board.fail("a", token(held))
    assert task(board, "a").state == State.FAILED
    again = board.claim("a", "y", FOREVER)
    assert again.lease is not None
    assert held.lease is not None
    assert again.lease.fence > held.lease.fence


def test_expired_lease_lingers_and_is_rejected(board: LockBoard) -> None:
    """After expiry the record still shows the lease; its own token is LeaseLost (policy reject)."""
    held = board.claim("a", "x", SHORT)
    sleep_past(held.lease and held.lease.until)
    assert task(board, "a") == held
    for finish in (board.release, board.complete, board.fail):
        with pytest.raises(LeaseLostError):
            finish("a", token(held))
    with pytest.raises(LeaseLostError):
        board.renew("a", token(held), SHORT)
    assert task(board, "a") == held
    assert LockBoard.expired_lease_policy == "reject"


def test_takeover_after_expiry(board: LockBoard) -> None:
    """A takeover gets a new token and a greater fence; the old token then fails everything."""
    old, new = takeover(board)
    assert old.lease is not None
    assert new.lease is not None
    assert new.lease.fence > old.lease.fence
    assert new.lease.token != old.lease.token
    assert new.owner == "y"
    assert new.seq == old.seq + 1
    for finish in (board.release, board.complete):
        with pytest.raises(LeaseLostError):
            finish("c", token(old))
    with pytest.raises(LeaseLostError):
        board.renew("c", token(old), SHORT)
    with pytest.raises(TakenError):
        board.claim("c", "z", FOREVER)
    assert task(board, "c") == new
    board.complete("c", token(new))
    assert task(board, "c").state == State.DONE


def test_renew_recomputes_until(board: LockBoard, client: redis.Redis) -> None:
    """renew: ttl>0 moves until (library extend), ttl 0 clears it, and back; seq grows."""
    held = board.claim("a", "x", SHORT)
    longer = board.renew("a", token(held), ClaimRequest(ttl=timedelta(seconds=5)))
    assert longer == task(board, "a")
    assert longer.seq == held.seq + 1
    assert held.lease is not None
    assert longer.lease is not None
    assert longer.lease.until is not None
    assert held.lease.until is not None
    assert longer.lease.until > held.lease.until
    assert longer.lease.fence == held.lease.fence
    assert longer.lease.token == held.lease.token
    forever = board.renew("a", token(held), FOREVER)
    assert forever.lease is not None
    assert forever.lease.until is None
    assert client.pttl(lock_key(board, "a")) == -1
    short = board.renew("a", token(held), SHORT)
    assert short.lease is not None
    assert short.lease.until is not None
    assert 0 < client.pttl(lock_key(board, "a")) <= 30
    sleep_past(short.lease.until)
    with pytest.raises(LeaseLostError):
        board.renew("a", token(held), FOREVER)


def test_close_deletes_the_keys(client: redis.Redis) -> None:
    """close() deletes every key of the board; boards use distinct prefixes."""
    board = make(client)
    other = make(client)
    try:
        assert board.prefix != other.prefix
        board.claim("a", "x", SHORT)
        board.claim("c", "x", FOREVER)
        board.close()
        assert not list(client.scan_iter(match=f"{board.prefix}*"))
        assert len(other.list_tasks()) == len(TASKS)
    finally:
        other.close()


def test_factory_ignores_the_clock(redis_server_url: str) -> None:
    """lock_board_factory builds a fresh LockBoard on the URL, whatever clock it is given."""
    make_board = lock_board_factory(redis_server_url, StaleTokenReleaseLock)
    with make_board(TASKS, SystemClock()) as board:
        assert board.lock_class is StaleTokenReleaseLock
        assert [t.id for t in board.list_tasks()] == ["a", "b", "c"]


def test_millisecond_conversions() -> None:
    """TTLs round up to whole ms, and the library's int(s * 1000) gets the ms back."""
    assert _millis(timedelta(microseconds=1)) == 1
    assert _millis(timedelta(milliseconds=30)) == 30
    assert int(1001 / 1000 * 1000) == 1000  # why _seconds exists
    assert all(int(_seconds(ms) * 1000) == ms for ms in range(1, 20_000))


# -- broken libraries: what the correct one rejects, each broken one accepts ----------------------


@pytest.mark.parametrize("lock_class", BROKEN)
def test_broken_libraries_pass_the_ordinary_lifecycle(
    client: redis.Redis, lock_class: type[redis.lock.Lock]
) -> None:
    """With current tokens each broken library still claims, renews, releases and completes."""
    with make(client, lock_class) as board:
        held = board.claim("a", "x", SHORT)
        board.renew("a", token(held), SHORT)
        board.release("a", token(held))
        again = board.claim("a", "x", FOREVER)
        board.complete("a", token(again))
        assert task(board, "a").state == State.DONE


@pytest.mark.parametrize(
    ("lock_class", "accepted"),
    [(redis.lock.Lock, False), (StaleTokenReleaseLock, True), (DeleteOthersLock, False)],
)
@pytest.mark.parametrize("finish", ["release", "complete"])
def test_stale_token_finish_after_takeover(
    client: redis.Redis, lock_class: type[redis.lock.Lock], accepted: bool, finish: str
) -> None:
    """A stale holder's release/complete: rejected by Lock, accepted by StaleTokenReleaseLock."""
    with make(client, lock_class) as board:
        old, new = takeover(board)
        if accepted:
            getattr(board, finish)("c", token(old))  # the bug: LeaseLostError expected
            assert task(board, "c").state != State.CLAIMED
        else:
            with pytest.raises(LeaseLostError):
                getattr(board, finish)("c", token(old))
            assert task(board, "c") == new


@pytest.mark.parametrize(
    ("lock_class", "deletes"),
    [(redis.lock.Lock, False), (StaleTokenReleaseLock, True), (DeleteOthersLock, True)],
)
def test_stale_release_deletes_the_new_holders_lock(
    client: redis.Redis, lock_class: type[redis.lock.Lock], deletes: bool
) -> None:
    """After a stale release a third agent can claim under the new live lease (broken libs)."""
    with make(client, lock_class) as board:
        old, new = takeover(board)
        with contextlib.suppress(LeaseLostError):
            board.release("c", token(old))
        assert bool(client.exists(lock_key(board, "c"))) is not deletes
        if deletes:
            third = board.claim("c", "z", FOREVER)  # the bug: TakenError expected
            assert third.lease is not None
            assert third.lease.token != token(new)
        else:
            with pytest.raises(TakenError):
                board.claim("c", "z", FOREVER)


@pytest.mark.parametrize(
    ("lock_class", "accepted"),
    [(redis.lock.Lock, False), (StaleTokenReleaseLock, True), (DeleteOthersLock, False)],
)
def test_unissued_token_releases_a_live_lease(
    client: redis.Redis, lock_class: type[redis.lock.Lock], accepted: bool
) -> None:
    """A token never issued releases a live lease only with StaleTokenReleaseLock."""
    with make(client, lock_class) as board:
        held = board.claim("a", "x", SHORT)
        if accepted:
            board.release("a", "not-a-token")
            assert task(board, "a").state == State.OPEN
        else:
            with pytest.raises(LeaseLostError):
                board.release("a", "not-a-token")
            assert task(board, "a") == held


@pytest.mark.parametrize(
    ("lock_class", "accepted"), [(redis.lock.Lock, False), (UncheckedExtendLock, True)]
)
def test_stale_token_renew_after_takeover(
    client: redis.Redis, lock_class: type[redis.lock.Lock], accepted: bool
) -> None:
    """A stale holder's renew of a taken-over lease succeeds only with UncheckedExtendLock."""
    with make(client, lock_class) as board:
        old = board.claim("c", "x", SHORT)
        sleep_past(old.lease and old.lease.until)
        new = board.claim("c", "y", ClaimRequest(ttl=timedelta(seconds=5)))
        if accepted:
            board.renew("c", token(old), SHORT)  # the bug: LeaseLostError expected
            assert 0 < client.pttl(lock_key(board, "c")) <= 30  # and y's lock now ends soon
        else:
            with pytest.raises(LeaseLostError):
                board.renew("c", token(old), SHORT)
            assert task(board, "c") == new


# -- the wall-clock machine on redis-py's Lock (SPEC 7) -------------------------------------------

#: Deep enough to reach takeovers, stale tokens and both sides of every expiry, and short
#: enough for CI: each example sleeps through its leases.
WALL_SETTINGS = settings(settings.get_profile(CI), max_examples=60)
#: A broken library need not be shrunk to be caught; shrinking sleeps through every replay.
CATCH_SETTINGS = settings(WALL_SETTINGS, max_examples=200, phases=(Phase.generate,))


def wall_machine(url: str, lock_class: type[redis.lock.Lock]) -> type[BoardMachine]:
    """A wall-clock BoardMachine over LockBoards on ``lock_class``, with no time faked."""
    return BoardMachine.for_board(
        lock_board_factory(url, lock_class),
        clock_mode="wall",
        clock_resolution=LockBoard.clock_resolution,
        expired_lease_policy=LockBoard.expired_lease_policy,
        trace_target="",
    )


def test_correct_lock_library_passes_wall_mode(redis_server_url: str) -> None:
    """redis-py's own Lock, on Redis's clock, keeps the contract under the wall-clock machine."""
    machine = wall_machine(redis_server_url, redis.lock.Lock)
    with failures_reported(machine):
        run_state_machine_as_test(machine, settings=WALL_SETTINGS)


@pytest.mark.parametrize("lock_class", BROKEN, ids=lambda c: c.__name__)
def test_broken_lock_library_is_caught_in_wall_mode(
    redis_server_url: str, lock_class: type[redis.lock.Lock]
) -> None:
    """A lock library that releases with a stale token, deletes another holder's lock or
    extends without a token check is caught by the wall-clock machine."""
    machine = wall_machine(redis_server_url, lock_class)
    with pytest.raises(ContractViolation) as caught, failures_reported(machine):
        run_state_machine_as_test(machine, settings=CATCH_SETTINGS)
    assert "contract violation at step" in str(caught.value)
    assert caught.value.clause.startswith("SPEC 3")
