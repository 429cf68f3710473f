"""The bug gallery: deliberately broken boards for measuring the checker, never for use.

Each class here is :class:`~taskboard.hosts.memory.MemoryBoard` with ONE realistic
bug class planted in it, the kind a real store gets wrong (a dropped ``WHERE``
clause, a truncated column, an ``UPDATE`` that forgot a field, a check and a
write in two transactions). Each docstring names the bug, the SPEC clause it
breaks and the real-world failure it mirrors. They exist to measure the
checker: ``BoardMachine`` must catch every sequential mutant, and the two
concurrency criteria (:func:`taskboard.concurrent_claim`,
:func:`taskboard.duplicate_token_submit`) the two whose bug only shows under
concurrency (``concurrent = True``). Do not use any of them to store anything.

Every mutant keeps MemoryBoard's constructor ``(tasks, clock)``. The mutants
override the smallest piece they can: a MemoryBoard helper (``_finish``,
``_current_lease``, ``_mint_token``), a thin wrapper around one public method,
or one step of :class:`_HookedBoard`, which rewrites MemoryBoard's ``claim``
and ``renew`` once as overridable steps (MemoryBoard itself has no such hooks
and is not edited). Unmutated, ``_HookedBoard`` behaves exactly as MemoryBoard.

:data:`MUTANTS` lists every mutant in gallery order.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, Lease, State, Task
from taskboard._errors import BlockedError, LeaseLostError, TakenError, TerminalError
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.memory import _live as _memory_live
from taskboard.hosts.memory import _until as _memory_until

__all__ = [
    "MUTANTS",
    "AgentAsIdentity",
    "CheckThenWriteComplete",
    "DerivedTokens",
    "ExpiryOnClientClock",
    "FailedDepCountsAsDone",
    "FailedIsTerminal",
    "FenceResetAfterRelease",
    "FirstDepOnly",
    "HeartbeatSlowerThanLease",
    "KeepAliveOutlivesRelease",
    "NonAtomicClaim",
    "OffByOneExpiry",
    "RejectedClaimStillWrites",
    "ReleaseLeavesOwner",
    "RenewBumpsFence",
    "RenewMintsToken",
    "RenewOfExpiredLease",
    "RenewWithoutTokenCheck",
    "RenewZeroTtlKeepsUntil",
    "SeqNotBumpedOnRenew",
    "StaleListCache",
    "SubResolutionTtlNeverExpires",
    "TakeoverKeepsFence",
    "TruncatedTokenCompare",
    "WallClock",
    "ZeroTtlExpiresNow",
]

#: Simulated I/O between a read and its write (a network round trip to the store).
_IO_PAUSE = 0.001


class _HookedBoard(MemoryBoard):
    """MemoryBoard with ``claim`` and ``renew`` split into overridable steps; not itself a mutant.

    Unmutated it behaves exactly as MemoryBoard (tests/test_gallery.py runs the
    machine on it), so whatever the machine catches in a subclass is that
    subclass's own bug.
    """

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            now = self._clock.now()
            task = self._get(task_id)
            self._check_claim(task, agent, now)
            return self._write_claim(task, agent, request, now)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            now = self._clock.now()
            task = self._get(task_id)
            lease = self._renewable(task, token, now)
            return self._put(self._renewed(task, lease, now, request.ttl))

    # -- claim's steps, in SPEC 3.1's order ------------------------------------------------------

    def _check_claim(self, task: Task, agent: str, now: datetime) -> None:
        if task.state == State.DONE:
            raise TerminalError(f"task {task.id!r} is done; done is forever")
        blocker = self._blocked_by(task)
        if blocker is not None:
            raise BlockedError(f"task {task.id!r} waits for {blocker!r}")
        if self._taken(task, agent, now):
            raise TakenError(f"task {task.id!r} is held by a live lease of {task.owner!r}")
        if not agent:
            raise ValueError("claim needs a non-empty agent name")

    def _blocked_by(self, task: Task) -> str | None:
        for dep in task.deps:
            if not self._dep_done(dep):
                return dep
        return None

    def _dep_done(self, dep_id: str) -> bool:
        dep = self._tasks.get(dep_id)
        return dep is not None and dep.state == State.DONE

    def _taken(self, task: Task, agent: str, now: datetime) -> bool:
        return task.state == State.CLAIMED and self._live(task.lease, now)

    def _write_claim(self, task: Task, agent: str, request: ClaimRequest, now: datetime) -> Task:
        fence = self._next_fence(task)
        lease = Lease(self._new_token(task.id, agent), fence, self._until(now, request.ttl))
        self._max_fence[task.id] = fence
        return self._put(
            replace(task, state=State.CLAIMED, owner=agent, lease=lease, seq=task.seq + 1)
        )

    def _next_fence(self, task: Task) -> int:
        return self._max_fence[task.id] + 1

    def _new_token(self, task_id: str, agent: str) -> str:
        return self._mint_token()

    # -- renew's steps ---------------------------------------------------------------------------

    def _renewable(self, task: Task, token: str, now: datetime) -> Lease:
        lease = self._current_lease(task, token)
        if not self._live(lease, now):
            raise LeaseLostError(f"the lease on {task.id!r} expired; claim it again")
        return lease

    def _renewed(self, task: Task, lease: Lease, now: datetime, ttl: timedelta) -> Task:
        return replace(task, lease=replace(lease, until=self._until(now, ttl)), seq=task.seq + 1)

    # -- time (SPEC 2) ---------------------------------------------------------------------------

    def _live(self, lease: Lease | None, now: datetime) -> bool:
        return _memory_live(lease, now)

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return _memory_until(now, ttl)


# -- concurrency only ----------------------------------------------------------------------------


class NonAtomicClaim(_HookedBoard):
    """Bug: claim is read-check-write in two transactions (SELECT, I/O, then UPDATE).

    Breaks SPEC 3.1 "it succeeds, atomically" and SPEC 5 (exactly one winner).
    Mirrors a SQL host that SELECTs the row, checks ``state = 'open'`` in
    application code and UPDATEs it without ``WHERE state = 'open'`` or a
    transaction: two agents both read OPEN during the round trip and both win,
    so the same sub-task is done twice and each branch believes it owns it.
    Sequentially it is correct; only :func:`taskboard.concurrent_claim` sees it.
    """

    concurrent: ClassVar[bool] = True

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            now = self._clock.now()
            task = self._get(task_id)
            self._check_claim(task, agent, now)
        time.sleep(_IO_PAUSE)  # the round trip between the SELECT and the UPDATE
        with self._lock:
            return self._write_claim(task, agent, request, now)


class CheckThenWriteComplete(MemoryBoard):
    """Bug: complete validates the token in one step, writes in another (issue #97).

    Breaks SPEC 3.3 (only the current token finishes, once) and SPEC 5
    (``duplicate_token_submit`` must see exactly one success). Mirrors a store
    that checks "claimed and token matches" with a SELECT, then writes DONE
    with an UPDATE by id alone: two retries of the same submission (a client
    retry after a timeout, two workers sharing a token) both pass the check and
    both report success. Release and fail share the path. Sequentially it is
    correct; only :func:`taskboard.duplicate_token_submit` sees it.
    """

    concurrent: ClassVar[bool] = True

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._lock:
            task = self._get(task_id)
            self._current_lease(task, token)
        time.sleep(_IO_PAUSE)  # the round trip between the check and the write
        with self._lock:
            self._put(replace(task, state=state, owner="", lease=None, seq=task.seq + 1))


# -- renew -----------------------------------------------------------------------------------------


class RenewWithoutTokenCheck(_HookedBoard):
    """Bug: renew checks the task is claimed and live, but not whose token it is.

    Breaks SPEC 3.5 (token mismatch: ``LeaseLostError``, nothing changed).
    Mirrors a SQL host whose ``UPDATE ... SET until = ? WHERE id = ? AND token = ?``
    lost its ``AND token = ?``: a stale holder waking from a GC pause renews,
    the board extends the NEW holder's lease, and the stale holder carries on
    believing it still holds the task: two workers act at once.
    """

    concurrent: ClassVar[bool] = False

    def _renewable(self, task: Task, token: str, now: datetime) -> Lease:
        if task.state != State.CLAIMED or task.lease is None:
            raise LeaseLostError(f"task {task.id!r} is {task.state}, not claimed")
        if not self._live(task.lease, now):
            raise LeaseLostError(f"the lease on {task.id!r} expired; claim it again")
        return task.lease


class RenewOfExpiredLease(_HookedBoard):
    """Bug: renew revives a lease that has already expired (token matches, expiry ignored).

    Breaks SPEC 3.5 (lease expired: ``LeaseLostError``). Mirrors a host that
    treats renew as a heartbeat: a holder that stalled past its ``until`` (GC,
    partition) renews before anyone happened to take over and silently gets a
    new lease, though the board promised the task was free to take from the
    moment it expired; a claimer that saw it free is told "taken" after all.
    """

    concurrent: ClassVar[bool] = False

    def _renewable(self, task: Task, token: str, now: datetime) -> Lease:
        return self._current_lease(task, token)


class RenewBumpsFence(_HookedBoard):
    """Bug: renew increments the fence, as if it were a takeover.

    Breaks SPEC 3.5 (token, fence and owner stay). Mirrors a store that reuses
    claim's ``UPDATE ... SET fence = fence + 1, until = ?`` for renew: every
    heartbeat looks like a new holder to a fenced downstream, and a writer that
    cached its fence before renewing has its own writes rejected as stale.
    """

    concurrent: ClassVar[bool] = False

    def _renewed(self, task: Task, lease: Lease, now: datetime, ttl: timedelta) -> Task:
        renewed = super()._renewed(task, lease, now, ttl)
        assert renewed.lease is not None
        self._max_fence[task.id] = lease.fence + 1
        return replace(renewed, lease=replace(renewed.lease, fence=lease.fence + 1))


class RenewMintsToken(_HookedBoard):
    """Bug: renew issues a fresh token instead of keeping the holder's.

    Breaks SPEC 3.5 (token stays: renew is not a takeover). Mirrors a host that
    implements renew as release-and-reclaim: the holder's other processes, and
    the renewing call itself if its reply is lost, still carry the old token,
    so the legitimate holder's complete fails with ``LeaseLostError`` and the
    finished work is thrown away.
    """

    concurrent: ClassVar[bool] = False

    def _renewed(self, task: Task, lease: Lease, now: datetime, ttl: timedelta) -> Task:
        renewed = super()._renewed(task, lease, now, ttl)
        assert renewed.lease is not None
        return replace(renewed, lease=replace(renewed.lease, token=self._mint_token()))


class RenewZeroTtlKeepsUntil(_HookedBoard):
    """Bug: renew with ttl 0 keeps the old ``until`` instead of removing the expiry.

    Breaks SPEC 3.5 ("until is recomputed ... exactly as in claim") with SPEC 2
    (ttl 0: no expiry). Mirrors ``SET until = COALESCE(?, until)`` or ``if ttl:
    until = now + ttl``, where zero reads as "no change": a holder that asked
    to keep the task indefinitely loses it at the old deadline mid-work.
    """

    concurrent: ClassVar[bool] = False

    def _renewed(self, task: Task, lease: Lease, now: datetime, ttl: timedelta) -> Task:
        if ttl == timedelta(0):
            return replace(task, seq=task.seq + 1)
        return super()._renewed(task, lease, now, ttl)


class SeqNotBumpedOnRenew(_HookedBoard):
    """Bug: renew changes ``until`` but leaves ``seq`` where it was.

    Breaks SPEC 3.5 and 3.8 (``seq`` grows after every successful operation).
    Mirrors a store whose seq bump lives in a trigger on state changes only: a
    host doing compare-and-set on ``seq`` (or replicating by it) misses the
    renewal and later restores the old, earlier ``until``.
    """

    concurrent: ClassVar[bool] = False

    def _renewed(self, task: Task, lease: Lease, now: datetime, ttl: timedelta) -> Task:
        return replace(super()._renewed(task, lease, now, ttl), seq=task.seq)


# -- fences and tokens ---------------------------------------------------------------------------


class TakeoverKeepsFence(_HookedBoard):
    """Bug: a takeover of an expired lease keeps the old holder's fence.

    Breaks SPEC 3.1 (the fence is greater than every fence issued before for
    the task, takeovers included). Mirrors a takeover ``UPDATE`` that sets
    token, owner and until but forgot ``fence = fence + 1``: the stale holder
    and its successor write downstream with the same fence, so the fenced sink
    cannot reject the stale holder's late writes.
    """

    concurrent: ClassVar[bool] = False

    def _next_fence(self, task: Task) -> int:
        if task.state == State.CLAIMED and task.lease is not None:
            return task.lease.fence
        return super()._next_fence(task)


class FenceResetAfterRelease(_HookedBoard):
    """Bug: the fence is derived from the current lease, so it restarts at 1 once the task reopens.

    Breaks SPEC 3.1 and 3.2 (the fence history survives releases and
    failures). Mirrors a store that keeps the fence in the lease row, cleared
    with the lease on release (``SET token = NULL, fence = NULL``): after a
    release the next holder gets fence 1 again, below what the downstream has
    seen, so either its legitimate writes are fenced out or, once the sink
    resets too, a zombie with an old fence is let back in.
    """

    concurrent: ClassVar[bool] = False

    def _next_fence(self, task: Task) -> int:
        return task.lease.fence + 1 if task.lease is not None else 1


class DerivedTokens(_HookedBoard):
    """Bug: the token is derived from task and agent (``f"{task_id}:{agent}"``), not minted.

    Breaks SPEC 3.1 (a token never issued before by this board). Mirrors the
    Go package's own lesson ("id + agent name judges content, not the
    occupancy"): agents with the same name, or fail-release-retry by one agent,
    get the same token, so a loser's or a previous round's late release frees
    the winner's claim.
    """

    concurrent: ClassVar[bool] = False

    def _new_token(self, task_id: str, agent: str) -> str:
        return f"{task_id}:{agent}"


class TruncatedTokenCompare(MemoryBoard):
    """Bug: tokens are compared by their first 8 characters only.

    Breaks SPEC 3.2, 3.3 and 3.5 (a token that is not the current lease's
    token: ``LeaseLostError``). Mirrors a ``CHAR(8)`` token column that silently
    truncates, or a comparison on the short token printed in logs: any string
    sharing the prefix (a mangled, padded or guessed token) releases,
    completes or renews someone else's lease.
    """

    concurrent: ClassVar[bool] = False

    @staticmethod
    def _current_lease(task: Task, token: str) -> Lease:
        if task.state != State.CLAIMED or task.lease is None:
            raise LeaseLostError(f"task {task.id!r} is {task.state}, not claimed")
        if task.lease.token[:8] != token[:8]:
            raise LeaseLostError(f"token is not the current lease of {task.id!r}")
        return task.lease


# -- time ------------------------------------------------------------------------------------------


class OffByOneExpiry(_HookedBoard):
    """Bug: a lease is treated as live while ``now <= until`` (should be ``now < until``).

    Breaks SPEC 2 (at ``now == until`` the lease has expired). Mirrors
    ``WHERE until >= now()`` in the takeover and renew queries: at exactly the
    deadline a claimer is told "taken" while the holder may still renew, so
    the board and a host that checks expiry itself disagree on who holds the
    task at the boundary tick.
    """

    concurrent: ClassVar[bool] = False

    def _live(self, lease: Lease | None, now: datetime) -> bool:
        return lease is not None and (lease.until is None or now <= lease.until)


class _WallClock:
    """What the buggy board reads instead of the injected clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class WallClock(MemoryBoard):
    """Bug: the board reads the wall clock (``datetime.now(UTC)``), not the injected clock.

    Breaks SPEC 1 ("the board must read time only from clock") and SPEC 2 (expiry
    from its own clock). Mirrors a host that calls ``datetime.now()`` in its
    query code: tests with a manual clock cannot drive expiry, and in
    production two processes with skewed clocks disagree on whether a lease is
    live, so both believe they may take the task.
    """

    concurrent: ClassVar[bool] = False

    def __init__(self, tasks: Iterable[Task], clock: Clock) -> None:
        super().__init__(tasks, _WallClock())


class _ClientClock:
    """What a client library reads: the ``time.time()`` of the host it runs on."""

    def now(self) -> datetime:
        return datetime.fromtimestamp(time.time(), UTC)


class ExpiryOnClientClock(MemoryBoard):
    """Bug: a lease's ``until`` is stamped, and its expiry judged, on the calling client's
    own ``time.time()``.

    Breaks SPEC 2 (``until = now + ttl`` on the board's one clock) once clients' clocks
    disagree: correct on one host, and in every test that runs on one. Mirrors redis-py
    2.9's lock (``time.time() + timeout`` stored, a waiter comparing it with its own
    ``time.time()``) and filelock's ``SoftFileLock(lifetime=)`` (``time.time() - st_mtime``):
    a client whose clock runs fast takes over a live lock, and one whose clock runs slow
    stamps leases that end early. A wall-clock board; the machine shifts each client's
    ``time.time()`` by up to its ``client_clock_skew``.
    """

    concurrent: ClassVar[bool] = False
    clock_mode: ClassVar[str] = "wall"
    client_clock_skew: ClassVar[timedelta] = timedelta(milliseconds=20)

    def __init__(self, tasks: Iterable[Task], clock: Clock) -> None:
        super().__init__(tasks, _ClientClock())


class _KeepAliveBoard(MemoryBoard):
    """MemoryBoard with a library's keep-alive; not itself a mutant.

    Each lease with a TTL gets a thread that extends it to ``now + ttl`` every
    ``keep_alive_interval``, as python-redis-lock's ``auto_renewal`` and aioredlock's
    watchdog do, and stops when the lease is released, completed or failed, or is no longer
    the task's. A wall-clock board; leases of 50 ms or more, so that a renewal a few
    milliseconds late under load still comes before the lease's end.
    """

    concurrent: ClassVar[bool] = False
    clock_mode: ClassVar[str] = "wall"
    keep_alive_interval: ClassVar[timedelta] = timedelta(milliseconds=15)
    shortest_lease: ClassVar[timedelta] = timedelta(milliseconds=50)

    def __init__(self, tasks: Iterable[Task], clock: Clock) -> None:
        super().__init__(tasks, clock)
        self._keep_alives: dict[str, threading.Event] = {}

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        task = super().claim(task_id, agent, request)
        if task.lease is not None and request.ttl:
            self._start_keep_alive(task, request.ttl)
        return task

    def release(self, task_id: str, token: str) -> None:
        super().release(task_id, token)
        self._stop_keep_alive(token)

    def complete(self, task_id: str, token: str) -> None:
        super().complete(task_id, token)
        self._stop_keep_alive(token)

    def fail(self, task_id: str, token: str) -> None:
        super().fail(task_id, token)
        self._stop_keep_alive(token)

    def close(self) -> None:
        for stop in self._keep_alives.values():
            stop.set()

    def _start_keep_alive(self, claimed: Task, ttl: timedelta) -> None:
        assert claimed.lease is not None
        stop = threading.Event()
        self._keep_alives[claimed.lease.token] = stop
        interval = self.keep_alive_interval.total_seconds()
        # The thread holds the board weakly: a board nobody closed stops its keep-alives
        # once it is gone, instead of running them for the rest of the process.
        board = weakref.ref(self)

        def keep_alive() -> None:
            while not stop.wait(interval):
                alive = board()
                if alive is None or not alive._extend(claimed, ttl):
                    return
                del alive

        threading.Thread(target=keep_alive, name=f"keep-alive {claimed.id}", daemon=True).start()

    def _stop_keep_alive(self, token: str) -> None:
        stop = self._keep_alives.pop(token, None)
        if stop is not None:
            stop.set()

    def _extend(self, claimed: Task, ttl: timedelta) -> bool:
        """Extend the lease ``claimed`` got if it is still the task's; whether it was."""
        with self._lock:
            task = self._tasks[claimed.id]
            current, mine = task.lease, claimed.lease
            if task.state != State.CLAIMED or current is None or mine is None:
                return False
            if current.token != mine.token:
                return False
            lease = replace(current, until=self._clock.now() + ttl)
            self._put(replace(task, lease=lease, seq=task.seq + 1))
            return True


class KeepAliveOutlivesRelease(_KeepAliveBoard):
    """Bug: the keep-alive is not stopped on release, and its extend re-takes the lock.

    Breaks SPEC 3.2 (a released task is ``OPEN`` with no lease until someone claims it) and
    SPEC 3.1 (one holder). Mirrors a watchdog that nobody cancels when its lock is released
    (or that is cancelled by resource, not by lock), with an extend that re-runs the acquire
    script and so takes a missing key (aioredlock's ``extend`` does): moments after its
    holder let go, the task is held again by a lease nobody holds, or taken from the agent
    that claimed it next.
    """

    def _stop_keep_alive(self, token: str) -> None:
        pass

    def _extend(self, claimed: Task, ttl: timedelta) -> bool:
        assert claimed.lease is not None
        with self._lock:
            task = self._tasks[claimed.id]
            if task.state == State.DONE:
                return False
            lease = replace(claimed.lease, until=self._clock.now() + ttl)
            retaken = replace(claimed, deps=task.deps, lease=lease, seq=task.seq + 1)
            self._put(retaken)
            return True


class HeartbeatSlowerThanLease(_KeepAliveBoard):
    """Bug: the keep-alive runs less often than the lease lasts.

    Breaks SPEC 3.1 step 4 (a live lease is not taken over) for a board that keeps its
    leases alive: a lease of 50 ms is extended every 60 ms, so it lapses between two
    heartbeats and another agent takes over work its holder is still doing. Mirrors a job
    queue whose worker heartbeat is slower than its visibility timeout (pgqueuer before
    0.24.0: a running job was retried by another worker).
    """

    keep_alive_interval: ClassVar[timedelta] = timedelta(milliseconds=60)


class ZeroTtlExpiresNow(_HookedBoard):
    """Bug: ttl 0 is read as "expire now" (``until = now + ttl``, no special case).

    Breaks SPEC 2 (``ttl == 0`` gives ``until = None``: no expiry). Mirrors a
    port of Go's zero ``time.Duration`` that forgot the zero-means-forever rule:
    every indefinite claim is born expired, so the next claimer takes over at
    once and two agents do the same work.
    """

    concurrent: ClassVar[bool] = False

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return now + ttl


class SubResolutionTtlNeverExpires(_HookedBoard):
    """Bug: a TTL is kept in whole milliseconds by truncation, and 0 of them means "never".

    Breaks SPEC 2 (``ttl > 0`` gives ``until = now + ttl``, within one ``clock_resolution``).
    Mirrors ``expire=int(ttl)`` on a store where an expiry of 0 means "no expiry"
    (memcached's, and a ``SET`` that leaves out ``EX`` when its argument is falsy): a lease
    shorter than the store's unit is immortal, so when its holder dies nobody takes the
    task over. The machine reaches it by drawing a TTL of half the resolution.
    """

    concurrent: ClassVar[bool] = False
    clock_resolution: ClassVar[timedelta] = timedelta(milliseconds=1)

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        whole = ttl // self.clock_resolution * self.clock_resolution
        return _memory_until(now, whole)


# -- claim rules -----------------------------------------------------------------------------------


class FailedIsTerminal(MemoryBoard):
    """Bug: FAILED is treated as terminal: claiming a failed task raises ``TerminalError``.

    Breaks SPEC 1 (``terminal`` is true for DONE only) and SPEC 3.6 (FAILED can
    be claimed again). Mirrors ``state in ('done', 'failed')`` as the terminal
    test: one failure pins the sub-task forever and the host's remedy (send
    someone else to redo it) silently never runs.
    """

    concurrent: ClassVar[bool] = False

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            task = self._tasks.get(task_id)
        if task is not None and task.state == State.FAILED:
            raise TerminalError(f"task {task_id!r} is {task.state}; finished is forever")
        return super().claim(task_id, agent, request)


class AgentAsIdentity(_HookedBoard):
    """Bug: the owner may claim again while its lease is live (the agent name taken as identity).

    Breaks SPEC 3.1 step 4 (``TakenError`` also when ``agent`` is the current
    owner: agents are not identities, tokens are). Mirrors a re-entrant claim
    (``WHERE state = 'open' OR owner = ?``): two parallel branches with the same
    agent name both win, the second silently revokes the first's token, and the
    first's finished work is rejected.
    """

    concurrent: ClassVar[bool] = False

    def _taken(self, task: Task, agent: str, now: datetime) -> bool:
        return super()._taken(task, agent, now) and task.owner != agent


class FirstDepOnly(_HookedBoard):
    """Bug: the blocked check looks only at the first dependency.

    Breaks SPEC 3.1 step 3 (some dependency not DONE: ``BlockedError``) and
    SPEC 4 (``blocked_claim``). Mirrors ``deps[0]`` or a ``JOIN ... LIMIT 1`` in
    the dependency query: a task with two prerequisites starts when only the
    first is done and works on missing inputs.
    """

    concurrent: ClassVar[bool] = False

    def _blocked_by(self, task: Task) -> str | None:
        return super()._blocked_by(replace(task, deps=task.deps[:1]))


class FailedDepCountsAsDone(_HookedBoard):
    """Bug: a FAILED dependency counts as done ("finished") for the blocked check.

    Breaks SPEC 3.1 step 3 (every dependency must be DONE). Mirrors reusing a
    scheduler's "finished" predicate (``state in ('done', 'failed')``) as the
    dependency test: a task starts on the output of a step that failed.
    """

    concurrent: ClassVar[bool] = False

    def _dep_done(self, dep_id: str) -> bool:
        dep = self._tasks.get(dep_id)
        return dep is not None and dep.state in (State.DONE, State.FAILED)


# -- writes ----------------------------------------------------------------------------------------


class RejectedClaimStillWrites(MemoryBoard):
    """Bug: claim bumps ``seq`` before its checks, so a rejected claim still changes the task.

    Breaks SPEC 3 ("every rejected operation changes nothing", ``seq`` included)
    and 3.8. Mirrors an ``UPDATE tasks SET seq = seq + 1`` run in autocommit
    ahead of the checks, with no rollback on the error path: every losing
    claimer moves ``seq``, so a host's compare-and-set on ``seq`` fails for the
    real holder, and audit trails show changes nobody made.
    """

    concurrent: ClassVar[bool] = False

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None:
                self._put(replace(task, seq=task.seq + 1))
        return super().claim(task_id, agent, request)


class ReleaseLeavesOwner(MemoryBoard):
    """Bug: release clears the lease but leaves the owner behind.

    Breaks SPEC 3.2 (``owner=""`` after release) and SPEC 4
    (``lease_without_claim``). Mirrors ``UPDATE ... SET state = 'open', token =
    NULL, until = NULL`` that forgot ``owner = ''``: dashboards and routing keep
    sending the open task's work to an agent that gave it up.
    """

    concurrent: ClassVar[bool] = False

    def release(self, task_id: str, token: str) -> None:
        with self._lock:
            owner = self._get(task_id).owner
        super().release(task_id, token)
        with self._lock:
            self._put(replace(self._tasks[task_id], owner=owner))


class StaleListCache(MemoryBoard):
    """Bug: ``list_tasks`` serves a cached snapshot that only claims invalidate.

    Breaks SPEC 3.7 (a consistent snapshot of every task, as it is now).
    Mirrors a read-through cache invalidated on the claim path but not on
    release, complete, renew or fail: a scheduler polling the list keeps
    seeing released tasks as claimed and done tasks as open, and dispatches
    work that is already finished.
    """

    concurrent: ClassVar[bool] = False
    _cache: list[Task] | None = None

    def list_tasks(self) -> list[Task]:
        if self._cache is None:
            self._cache = super().list_tasks()
        return list(self._cache)

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        self._cache = None
        return super().claim(task_id, agent, request)


#: Every mutant, in gallery order (the two concurrency-only ones first).
MUTANTS: tuple[type[MemoryBoard], ...] = (
    NonAtomicClaim,
    CheckThenWriteComplete,
    RenewWithoutTokenCheck,
    RenewOfExpiredLease,
    RenewBumpsFence,
    RenewMintsToken,
    TakeoverKeepsFence,
    FenceResetAfterRelease,
    DerivedTokens,
    OffByOneExpiry,
    WallClock,
    FailedIsTerminal,
    RejectedClaimStillWrites,
    ReleaseLeavesOwner,
    ZeroTtlExpiresNow,
    SubResolutionTtlNeverExpires,
    ExpiryOnClientClock,
    KeepAliveOutlivesRelease,
    HeartbeatSlowerThanLease,
    FirstDepOnly,
    FailedDepCountsAsDone,
    TruncatedTokenCompare,
    RenewZeroTtlKeepsUntil,
    AgentAsIdentity,
    SeqNotBumpedOnRenew,
    StaleListCache,
)
