"""The reference hosts (MemoryBoard, SQLiteBoard) against SPEC sections 1-3, clause by clause."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from taskboard import (
    BlockedError,
    ClaimRequest,
    Clock,
    FailingBoard,
    Lease,
    LeaseLostError,
    ManualClock,
    NotFoundError,
    RenewingBoard,
    State,
    TakenError,
    Task,
    TerminalError,
    check,
)
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard

AnyBoard = MemoryBoard | SQLiteBoard
MakeBoard = Callable[..., AnyBoard]

START = datetime(2000, 1, 1, tzinfo=UTC)  # far from the wall clock: a board reading it is caught
US = timedelta(microseconds=1)
TTL = ClaimRequest(timedelta(seconds=10))
FOREVER = ClaimRequest(timedelta(0))
HOSTS = ["memory", "sqlite-memory", "sqlite-file"]
EXPECTED_POLICY = {"memory": "accept", "sqlite-memory": "reject", "sqlite-file": "reject"}


@pytest.fixture(params=HOSTS)
def host(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def make_board(host: str, tmp_path: Path, clock: ManualClock) -> Iterator[MakeBoard]:
    opened: list[SQLiteBoard] = []

    def make(tasks: Sequence[Task], board_clock: Clock = clock) -> AnyBoard:
        if host == "memory":
            return MemoryBoard(tasks, board_clock)
        path = ":memory:" if host == "sqlite-memory" else tmp_path / f"board{len(opened)}.db"
        board = SQLiteBoard(tasks, board_clock, path)
        opened.append(board)
        return board

    yield make
    for board in opened:
        board.close()


def snapshot(board: AnyBoard) -> dict[str, Task]:
    tasks = board.list_tasks()
    by_id = {t.id: t for t in tasks}
    assert len(by_id) == len(tasks)
    return by_id


def lease_of(task: Task) -> Lease:
    assert task.lease is not None
    return task.lease


# --- section 1: the protocols and the pinned 3.4 choice -------------------------------------


def test_hosts_satisfy_renewing_and_failing_protocols(make_board: MakeBoard) -> None:
    """Both hosts are runtime RenewingBoard and FailingBoard instances."""
    board = make_board([Task("a")])
    assert isinstance(board, RenewingBoard)
    assert isinstance(board, FailingBoard)


def test_expired_lease_policy_attribute(host: str, make_board: MakeBoard) -> None:
    """MemoryBoard pins SPEC 3.4 as "accept", SQLiteBoard as "reject"."""
    assert make_board([Task("a")]).expired_lease_policy == EXPECTED_POLICY[host]


def test_initial_tasks_are_stored_as_given(make_board: MakeBoard) -> None:
    """list_tasks returns the initial tasks unchanged, deps order, lease and seq included."""
    lease = Lease("initial-token", 7, START + timedelta(seconds=5))
    tasks = [
        Task("a", "first", ("c", "b"), seq=3),
        Task("b"),
        Task("c", state=State.CLAIMED, owner="x", lease=lease, seq=9),
        Task("d", state=State.DONE),
        Task("e", state=State.FAILED, lease=None),
    ]
    board = make_board(tasks)
    assert snapshot(board) == {t.id: t for t in tasks}
    got = snapshot(board)["c"]
    assert isinstance(got.state, State)
    until = lease_of(got).until
    assert until == START + timedelta(seconds=5)
    assert until is not None
    assert until.utcoffset() == timedelta(0)


def test_duplicate_initial_ids_are_rejected(make_board: MakeBoard) -> None:
    """Two initial tasks with one id is a ValueError at construction."""
    with pytest.raises(ValueError, match="duplicate"):
        make_board([Task("a"), Task("a")])


# --- 3.1 claim ------------------------------------------------------------------------------


def test_claim_mints_lease_and_returns_listed_task(make_board: MakeBoard) -> None:
    """A claim sets CLAIMED/owner/lease, grows seq, and returns the task as listed."""
    board = make_board([Task("a", "title", seq=4)])
    got = board.claim("a", "agent", TTL)
    assert got == snapshot(board)["a"]
    assert got.state is State.CLAIMED
    assert got.owner == "agent"
    assert got.title == "title"
    assert got.seq > 4
    lease = lease_of(got)
    assert lease.token
    assert lease.until == START + timedelta(seconds=10)


def test_claim_until_comes_from_the_board_clock(make_board: MakeBoard, clock: ManualClock) -> None:
    """until is the injected clock's now plus ttl, to the microsecond, tz-aware UTC."""
    board = make_board([Task("a")])
    clock.advance(timedelta(seconds=3, microseconds=123457))
    got = board.claim("a", "agent", ClaimRequest(timedelta(microseconds=987654)))
    until = lease_of(got).until
    assert until == START + timedelta(seconds=4, microseconds=111111)
    assert until is not None
    assert until.utcoffset() == timedelta(0)
    assert lease_of(snapshot(board)["a"]).until == until


def test_claim_with_zero_ttl_never_expires(make_board: MakeBoard, clock: ManualClock) -> None:
    """ttl == 0 gives until=None, and the lease stays live forever."""
    board = make_board([Task("a")])
    got = board.claim("a", "agent", FOREVER)
    assert lease_of(got).until is None
    clock.advance(timedelta(days=10_000))
    with pytest.raises(TakenError):
        board.claim("a", "other", TTL)


def test_claim_unknown_task_is_not_found(make_board: MakeBoard) -> None:
    """Claiming an unknown id is NotFoundError, even with an empty agent."""
    board = make_board([Task("a")])
    with pytest.raises(NotFoundError):
        board.claim("zzz", "agent", TTL)
    with pytest.raises(NotFoundError):
        board.claim("zzz", "", TTL)


def test_check_order_terminal_before_blocked(make_board: MakeBoard) -> None:
    """A DONE task with an unfinished dependency is TerminalError, not BlockedError."""
    board = make_board([Task("a", deps=("b",), state=State.DONE), Task("b")])
    with pytest.raises(TerminalError):
        board.claim("a", "", TTL)


def test_check_order_blocked_before_taken(make_board: MakeBoard) -> None:
    """A live-claimed task with an unfinished dependency is BlockedError, not TakenError."""
    held = Task("a", deps=("b",), state=State.CLAIMED, owner="x", lease=Lease("t", 1, None))
    board = make_board([held, Task("b")])
    with pytest.raises(BlockedError):
        board.claim("a", "", TTL)


def test_check_order_taken_before_empty_agent(make_board: MakeBoard) -> None:
    """An empty agent on a live-claimed task is TakenError, not ValueError."""
    board = make_board([Task("a")])
    board.claim("a", "agent", TTL)
    with pytest.raises(TakenError):
        board.claim("a", "", TTL)


def test_claim_with_empty_agent_is_value_error(make_board: MakeBoard) -> None:
    """An empty agent on a claimable task is ValueError and changes nothing."""
    board = make_board([Task("a")])
    before = snapshot(board)
    with pytest.raises(ValueError, match="agent"):
        board.claim("a", "", TTL)
    assert snapshot(board) == before


def test_claim_done_task_is_terminal(make_board: MakeBoard) -> None:
    """Every claim of a completed task is TerminalError."""
    board = make_board([Task("a")])
    board.complete("a", lease_of(board.claim("a", "agent", TTL)).token)
    with pytest.raises(TerminalError):
        board.claim("a", "agent", TTL)


@pytest.mark.parametrize("dep_state", [State.OPEN, State.CLAIMED, State.FAILED])
def test_claim_blocked_by_unfinished_dep(make_board: MakeBoard, dep_state: State) -> None:
    """A dependency that is OPEN, CLAIMED or FAILED blocks the claim."""
    lease = Lease("t", 1, None) if dep_state is State.CLAIMED else None
    owner = "x" if dep_state is State.CLAIMED else ""
    board = make_board(
        [Task("a", deps=("b",)), Task("b", state=dep_state, owner=owner, lease=lease)]
    )
    with pytest.raises(BlockedError):
        board.claim("a", "agent", TTL)


def test_claim_blocked_by_unknown_dep(make_board: MakeBoard) -> None:
    """A dependency that names no task blocks the claim forever."""
    board = make_board([Task("a", deps=("ghost",))])
    with pytest.raises(BlockedError):
        board.claim("a", "agent", TTL)


def test_claim_blocked_until_every_dep_done(make_board: MakeBoard) -> None:
    """The claim succeeds once all dependencies are DONE, and not before."""
    board = make_board([Task("a", deps=("b", "c")), Task("b"), Task("c")])
    board.complete("b", lease_of(board.claim("b", "x", TTL)).token)
    with pytest.raises(BlockedError):
        board.claim("a", "agent", TTL)
    board.complete("c", lease_of(board.claim("c", "x", TTL)).token)
    assert board.claim("a", "agent", TTL).state is State.CLAIMED


def test_failed_dep_blocks_then_unblocks_after_redo(make_board: MakeBoard) -> None:
    """A FAILED dependency blocks its dependant until it is reclaimed and completed."""
    board = make_board([Task("a", deps=("b",)), Task("b")])
    board.fail("b", lease_of(board.claim("b", "x", TTL)).token)
    with pytest.raises(BlockedError):
        board.claim("a", "agent", TTL)
    board.complete("b", lease_of(board.claim("b", "x", TTL)).token)
    assert board.claim("a", "agent", TTL).owner == "agent"


def test_claim_taken_even_by_same_agent(make_board: MakeBoard) -> None:
    """A live lease is TakenError for every agent, its own owner included."""
    board = make_board([Task("a")])
    board.claim("a", "agent", TTL)
    with pytest.raises(TakenError):
        board.claim("a", "agent", TTL)


def test_expiry_boundary_is_exactly_until(make_board: MakeBoard, clock: ManualClock) -> None:
    """One microsecond before until the lease is live; at until it can be taken over."""
    board = make_board([Task("a")])
    first = board.claim("a", "old", TTL)
    clock.advance(TTL.ttl - US)
    with pytest.raises(TakenError):
        board.claim("a", "new", TTL)
    clock.advance(US)
    second = board.claim("a", "new", TTL)
    assert second.owner == "new"
    assert lease_of(second).token != lease_of(first).token
    assert lease_of(second).fence > lease_of(first).fence
    assert lease_of(second).until == clock.now() + TTL.ttl
    assert second.seq > first.seq


def test_stale_holder_is_lease_lost_after_takeover(
    make_board: MakeBoard, clock: ManualClock
) -> None:
    """After a takeover every action with the old token is LeaseLostError and changes nothing."""
    board = make_board([Task("a")])
    old = lease_of(board.claim("a", "old", TTL)).token
    clock.advance(TTL.ttl)
    board.claim("a", "new", TTL)
    before = snapshot(board)
    for act in (
        lambda: board.release("a", old),
        lambda: board.complete("a", old),
        lambda: board.fail("a", old),
        lambda: board.renew("a", old, TTL),
    ):
        with pytest.raises(LeaseLostError):
            act()
        assert snapshot(board) == before


def test_initial_claimed_task_expired_can_be_taken_over(make_board: MakeBoard) -> None:
    """An initial lease that already expired is taken over with a greater fence and new token."""
    lease = Lease("initial-token", 41, START)
    board = make_board([Task("a", state=State.CLAIMED, owner="x", lease=lease, seq=2)])
    got = board.claim("a", "agent", TTL)
    assert lease_of(got).fence > 41
    assert lease_of(got).token != "initial-token"


def test_fence_grows_across_release_fail_and_takeover(
    make_board: MakeBoard, clock: ManualClock
) -> None:
    """Fences strictly grow over release, fail and takeover; tokens never repeat."""
    board = make_board([Task("a"), Task("b")])
    leases = []
    for ending in ("release", "fail", "expire", "release", "complete"):
        lease = lease_of(board.claim("a", "agent", TTL))
        leases.append(lease)
        if ending == "expire":
            clock.advance(TTL.ttl)
        else:
            getattr(board, ending)("a", lease.token)
    leases.append(lease_of(board.claim("b", "agent", TTL)))
    fences = [lease.fence for lease in leases[:-1]]
    assert fences == sorted(set(fences))
    assert len({lease.token for lease in leases}) == len(leases)


# --- 3.2 release, 3.3 complete, 3.6 fail ----------------------------------------------------

ENDINGS = [("release", State.OPEN), ("complete", State.DONE), ("fail", State.FAILED)]


@pytest.mark.parametrize(("op", "state"), ENDINGS)
def test_ending_with_current_token(make_board: MakeBoard, op: str, state: State) -> None:
    """release/complete/fail set the state, clear owner and lease, and grow seq."""
    board = make_board([Task("a", "title", ("b",)), Task("b", state=State.DONE)])
    claimed = board.claim("a", "agent", TTL)
    assert getattr(board, op)("a", lease_of(claimed).token) is None
    after = snapshot(board)["a"]
    assert after == Task("a", "title", ("b",), state, "", None, after.seq)
    assert after.seq > claimed.seq


@pytest.mark.parametrize(("op", "_state"), ENDINGS)
def test_ending_with_wrong_token_is_lease_lost(
    make_board: MakeBoard, op: str, _state: State
) -> None:
    """release/complete/fail with a token that is not the current one change nothing."""
    board = make_board([Task("a")])
    board.claim("a", "agent", TTL)
    before = snapshot(board)
    with pytest.raises(LeaseLostError):
        getattr(board, op)("a", "not-the-token")
    with pytest.raises(LeaseLostError):
        getattr(board, op)("a", "")
    assert snapshot(board) == before


@pytest.mark.parametrize(("op", "_state"), ENDINGS)
@pytest.mark.parametrize("state", [State.OPEN, State.DONE, State.FAILED])
def test_ending_unclaimed_task_is_lease_lost(
    make_board: MakeBoard, op: str, _state: State, state: State
) -> None:
    """release/complete/fail of an OPEN, DONE or FAILED task is LeaseLostError."""
    board = make_board([Task("a", state=state)])
    before = snapshot(board)
    with pytest.raises(LeaseLostError):
        getattr(board, op)("a", "any")
    assert snapshot(board) == before


@pytest.mark.parametrize(("op", "_state"), ENDINGS)
def test_ending_unknown_task_is_not_found(make_board: MakeBoard, op: str, _state: State) -> None:
    """release/complete/fail of an unknown id is NotFoundError."""
    board = make_board([Task("a")])
    with pytest.raises(NotFoundError):
        getattr(board, op)("zzz", "any")


@pytest.mark.parametrize(("op", "_state"), ENDINGS)
def test_ending_twice_is_lease_lost(make_board: MakeBoard, op: str, _state: State) -> None:
    """The same token cannot end a task twice."""
    board = make_board([Task("a")])
    token = lease_of(board.claim("a", "agent", TTL)).token
    getattr(board, op)("a", token)
    before = snapshot(board)
    for again in ("release", "complete", "fail"):
        with pytest.raises(LeaseLostError):
            getattr(board, again)("a", token)
    with pytest.raises(LeaseLostError):
        board.renew("a", token, TTL)
    assert snapshot(board) == before


def test_failed_task_is_claimable_again(make_board: MakeBoard) -> None:
    """A FAILED task is not terminal: it can be claimed again with a greater fence."""
    board = make_board([Task("a")])
    first = lease_of(board.claim("a", "agent", TTL))
    board.fail("a", first.token)
    again = board.claim("a", "agent", TTL)
    assert again.state is State.CLAIMED
    assert lease_of(again).fence > first.fence


@pytest.mark.parametrize(("op", "state"), ENDINGS)
def test_expired_lease_policy_is_kept(
    host: str, make_board: MakeBoard, clock: ManualClock, op: str, state: State
) -> None:
    """SPEC 3.4: MemoryBoard accepts an expired current token; SQLiteBoard rejects it."""
    board = make_board([Task("a")])
    token = lease_of(board.claim("a", "agent", TTL)).token
    clock.advance(TTL.ttl)  # exactly until: expired, nobody took over
    if EXPECTED_POLICY[host] == "accept":
        getattr(board, op)("a", token)
        assert snapshot(board)["a"].state is state
    else:
        before = snapshot(board)
        with pytest.raises(LeaseLostError):
            getattr(board, op)("a", token)
        assert snapshot(board) == before


@pytest.mark.parametrize(("op", "_state"), ENDINGS)
def test_ending_with_live_token_just_before_expiry(
    make_board: MakeBoard, clock: ManualClock, op: str, _state: State
) -> None:
    """One microsecond before until, every host accepts the current token."""
    board = make_board([Task("a")])
    token = lease_of(board.claim("a", "agent", TTL)).token
    clock.advance(TTL.ttl - US)
    getattr(board, op)("a", token)
    assert snapshot(board)["a"].lease is None


# --- 3.5 renew ------------------------------------------------------------------------------


def test_renew_recomputes_until_from_board_clock(make_board: MakeBoard, clock: ManualClock) -> None:
    """renew sets until = now + ttl; token, fence, owner stay; seq grows; returns as listed."""
    board = make_board([Task("a")])
    claimed = board.claim("a", "agent", TTL)
    clock.advance(timedelta(seconds=7))
    renewed = board.renew("a", lease_of(claimed).token, ClaimRequest(timedelta(seconds=30)))
    assert renewed == snapshot(board)["a"]
    assert lease_of(renewed) == Lease(
        lease_of(claimed).token, lease_of(claimed).fence, clock.now() + timedelta(seconds=30)
    )
    assert renewed.owner == "agent"
    assert renewed.seq > claimed.seq
    clock.advance(timedelta(seconds=29))
    with pytest.raises(TakenError):
        board.claim("a", "other", TTL)


def test_renew_with_zero_ttl_removes_expiry(make_board: MakeBoard, clock: ManualClock) -> None:
    """renew with ttl == 0 gives until=None."""
    board = make_board([Task("a")])
    token = lease_of(board.claim("a", "agent", TTL)).token
    assert lease_of(board.renew("a", token, FOREVER)).until is None
    clock.advance(timedelta(days=365))
    with pytest.raises(TakenError):
        board.claim("a", "other", TTL)


def test_renew_at_until_is_lease_lost(make_board: MakeBoard, clock: ManualClock) -> None:
    """renew at exactly until is LeaseLostError on every host; a microsecond before succeeds."""
    board = make_board([Task("a"), Task("b")])
    token_a = lease_of(board.claim("a", "agent", TTL)).token
    token_b = lease_of(board.claim("b", "agent", TTL)).token
    clock.advance(TTL.ttl - US)
    board.renew("b", token_b, TTL)
    clock.advance(US)
    before = snapshot(board)
    with pytest.raises(LeaseLostError):
        board.renew("a", token_a, TTL)
    assert snapshot(board) == before


def test_renew_rejections(make_board: MakeBoard) -> None:
    """renew: unknown id NotFoundError; wrong token or unclaimed task LeaseLostError."""
    board = make_board([Task("a"), Task("b")])
    board.claim("a", "agent", TTL)
    before = snapshot(board)
    with pytest.raises(NotFoundError):
        board.renew("zzz", "any", TTL)
    with pytest.raises(LeaseLostError):
        board.renew("a", "wrong", TTL)
    with pytest.raises(LeaseLostError):
        board.renew("b", "any", TTL)
    assert snapshot(board) == before


# --- 3.8 seq and "rejected changes nothing" -------------------------------------------------


def test_seq_grows_on_each_success_for_that_task_only(
    make_board: MakeBoard, clock: ManualClock
) -> None:
    """Each successful op grows seq of its task and leaves every other task's seq alone."""
    board = make_board([Task("a"), Task("other", seq=5)])
    seqs = [snapshot(board)["a"].seq]
    token = lease_of(board.claim("a", "x", TTL)).token
    seqs.append(snapshot(board)["a"].seq)
    board.renew("a", token, TTL)
    seqs.append(snapshot(board)["a"].seq)
    board.release("a", token)
    seqs.append(snapshot(board)["a"].seq)
    token = lease_of(board.claim("a", "x", TTL)).token
    clock.advance(TTL.ttl)
    token = lease_of(board.claim("a", "y", TTL)).token  # takeover
    seqs.append(snapshot(board)["a"].seq)
    board.fail("a", token)
    seqs.append(snapshot(board)["a"].seq)
    board.complete("a", lease_of(board.claim("a", "x", TTL)).token)
    seqs.append(snapshot(board)["a"].seq)
    assert seqs == sorted(set(seqs))
    assert snapshot(board)["other"].seq == 5


def test_every_rejected_op_changes_nothing(make_board: MakeBoard, clock: ManualClock) -> None:
    """A whole catalogue of rejected operations leaves list_tasks() identical, seq included."""
    board = make_board(
        [
            Task("open"),
            Task("held"),
            Task("done", state=State.DONE, seq=2),
            Task("blocked", deps=("open",)),
            Task("ghost-dep", deps=("nowhere",)),
        ]
    )
    token = lease_of(board.claim("held", "agent", TTL)).token
    before = snapshot(board)
    rejected: list[tuple[type[Exception], Callable[[], object]]] = [
        (NotFoundError, lambda: board.claim("zzz", "a", TTL)),
        (TerminalError, lambda: board.claim("done", "a", TTL)),
        (BlockedError, lambda: board.claim("blocked", "a", TTL)),
        (BlockedError, lambda: board.claim("ghost-dep", "a", TTL)),
        (TakenError, lambda: board.claim("held", "a", TTL)),
        (TakenError, lambda: board.claim("held", "agent", FOREVER)),
        (ValueError, lambda: board.claim("open", "", TTL)),
        (LeaseLostError, lambda: board.release("held", "wrong")),
        (LeaseLostError, lambda: board.complete("held", "wrong")),
        (LeaseLostError, lambda: board.fail("held", "wrong")),
        (LeaseLostError, lambda: board.renew("held", "wrong", TTL)),
        (LeaseLostError, lambda: board.release("open", token)),
        (LeaseLostError, lambda: board.complete("done", token)),
        (LeaseLostError, lambda: board.renew("open", token, TTL)),
        (NotFoundError, lambda: board.release("zzz", token)),
        (NotFoundError, lambda: board.complete("zzz", token)),
        (NotFoundError, lambda: board.fail("zzz", token)),
        (NotFoundError, lambda: board.renew("zzz", token, TTL)),
    ]
    for error, act in rejected:
        with pytest.raises(error):
            act()
        assert snapshot(board) == before
    clock.advance(TTL.ttl)
    before = snapshot(board)
    with pytest.raises(LeaseLostError):
        board.renew("held", token, TTL)
    assert snapshot(board) == before


def test_board_reads_only_the_injected_clock(make_board: MakeBoard) -> None:
    """A clock stuck in the year 2000 alone decides until and expiry."""
    stuck = ManualClock(START)
    board = make_board([Task("a")], stuck)
    got = board.claim("a", "agent", ClaimRequest(timedelta(seconds=1)))
    assert lease_of(got).until == START + timedelta(seconds=1)
    with pytest.raises(TakenError):  # the wall clock is decades past until; the board's is not
        board.claim("a", "other", TTL)


# --- concurrency ----------------------------------------------------------------------------


def _race(n: int, act: Callable[[int], object]) -> tuple[list[object], list[BaseException]]:
    barrier = threading.Barrier(n)
    wins: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            result = act(i)
        except BaseException as exc:
            with lock:
                errors.append(exc)
        else:
            with lock:
                wins.append(result)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return wins, errors


@pytest.mark.parametrize("round_", range(5))
def test_threaded_claim_race_has_one_winner(make_board: MakeBoard, round_: int) -> None:
    """Eight threads claiming one task from a barrier: one winner, seven TakenError."""
    board = make_board([Task("a")])
    wins, errors = _race(8, lambda i: board.claim("a", f"agent{i % 3}", TTL))
    assert len(wins) == 1
    assert len(errors) == 7
    assert all(isinstance(e, TakenError) for e in errors), errors
    assert snapshot(board)["a"] == wins[0]
    assert check(board.list_tasks()) == []


@pytest.mark.parametrize("op", ["release", "complete", "fail"])
def test_threaded_duplicate_token_has_one_success(make_board: MakeBoard, op: str) -> None:
    """Eight threads ending a task with one token: one success, seven LeaseLostError."""
    board = make_board([Task("a")])
    claimed = board.claim("a", "agent", TTL)
    wins, errors = _race(8, lambda _: getattr(board, op)("a", lease_of(claimed).token))
    assert len(wins) == 1
    assert all(isinstance(e, LeaseLostError) for e in errors), errors
    assert snapshot(board)["a"].seq == claimed.seq + 1
    assert check(board.list_tasks()) == []


def test_threaded_mixed_traffic_keeps_fences_and_tokens(make_board: MakeBoard) -> None:
    """Threads claiming and releasing in a loop: fences strictly grow and tokens never repeat."""
    board = make_board([Task("a")])
    issued: list[Lease] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        for _ in range(25):
            try:
                lease = lease_of(board.claim("a", f"w{i}", FOREVER))
            except TakenError:
                continue
            with lock:
                issued.append(lease)
            board.release("a", lease.token)

    _, errors = _race(4, worker)
    assert errors == []
    assert issued
    assert [lease.fence for lease in issued] == sorted({lease.fence for lease in issued})
    assert len({lease.token for lease in issued}) == len(issued)
    assert check(board.list_tasks()) == []


# --- SQLite specifics -----------------------------------------------------------------------


def test_sqlite_stores_until_as_exact_microseconds(tmp_path: Path, clock: ManualClock) -> None:
    """SQLiteBoard keeps until as integer microseconds since the epoch."""
    path = tmp_path / "b.db"
    clock.advance(timedelta(microseconds=999_999))
    with SQLiteBoard([Task("a")], clock, path) as board:
        got = board.claim("a", "agent", ClaimRequest(timedelta(microseconds=3)))
    raw = sqlite3.connect(path)
    try:
        (until,) = raw.execute("SELECT lease_until FROM tasks WHERE id = 'a'").fetchone()
    finally:
        raw.close()
    expected = lease_of(got).until
    assert expected is not None
    assert isinstance(until, int)
    assert until == (expected - datetime(1970, 1, 1, tzinfo=UTC)) // US


def test_sqlite_keeps_every_lease_in_history(tmp_path: Path, clock: ManualClock) -> None:
    """The leases table holds every issued (fence, token) and refuses a reused token."""
    path = tmp_path / "b.db"
    with SQLiteBoard([Task("a")], clock, path) as board:
        tokens = []
        for _ in range(3):
            lease = lease_of(board.claim("a", "agent", TTL))
            tokens.append((lease.fence, lease.token))
            board.release("a", lease.token)
    raw = sqlite3.connect(path)
    try:
        rows = raw.execute("SELECT fence, token FROM leases ORDER BY fence").fetchall()
        assert rows == tokens
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute(
                "INSERT INTO leases (task_id, fence, token, agent) VALUES ('a', 99, ?, 'x')",
                (tokens[0][1],),
            )
    finally:
        raw.close()


def test_sqlite_attaches_to_existing_file(tmp_path: Path, clock: ManualClock) -> None:
    """A second SQLiteBoard on the same file sees the first's state and adds only missing tasks."""
    path = tmp_path / "b.db"
    with SQLiteBoard([Task("a")], clock, path) as first:
        lease = lease_of(first.claim("a", "agent", TTL))
        with SQLiteBoard([Task("a"), Task("b")], clock, path) as second:
            assert snapshot(second) == {"a": snapshot(first)["a"], "b": Task("b")}
            with pytest.raises(TakenError):
                second.claim("a", "other", TTL)
            second.release("a", lease.token)
            assert lease_of(second.claim("a", "other", TTL)).fence > lease.fence
            assert snapshot(first) == snapshot(second)


def test_sqlite_close_is_idempotent_and_final(tmp_path: Path, clock: ManualClock) -> None:
    """close() may be called twice; the board is unusable afterwards."""
    board = SQLiteBoard([Task("a")], clock, tmp_path / "b.db")
    board.list_tasks()
    board.close()
    board.close()
    with pytest.raises(sqlite3.ProgrammingError):
        board.list_tasks()
