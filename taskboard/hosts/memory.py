"""An in-memory reference host: a dict behind one lock.

This is a reference host that shows how to meet the contract (SPEC sections
1-3) in the simplest possible storage; it is not a storage product. It keeps
nothing across processes and nothing after the object is gone.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import ClassVar, Literal

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, Lease, State, Task
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)

__all__ = ["MemoryBoard"]


class MemoryBoard:
    """A thread-safe board in a dict; a reference host, not a storage product.

    Every operation runs entirely under one :class:`threading.Lock`, including
    the read of the injected clock, so read-check-write is one atomic step and
    :meth:`list_tasks` is a consistent snapshot. Time comes only from ``clock``.

    Besides the tasks it keeps, per task, the greatest fence ever issued (so a
    claim after a release, completion, failure or takeover still gets a greater
    fence), and the set of every token it ever issued (so a token is provably
    never minted twice, for any task).

    Expired leases (SPEC 3.4, a host's choice): this board **accepts**
    ``release``, ``complete`` and ``fail`` with the current token even when
    the lease has expired, as long as nobody has taken the task over; this is
    the Go behaviour, which rejects only on a token mismatch. The choice is
    exposed as :attr:`expired_lease_policy` (``"accept"``) so a test machine
    can pin it. ``renew`` of an expired lease is always ``LeaseLostError``.

    Args:
        tasks: the initial tasks, stored as given (an initial state, owner,
            lease and seq are kept; an initial lease's fence and token count
            as issued).
        clock: the only source of time this board reads.

    Raises:
        ValueError: two initial tasks share an id.
    """

    #: SPEC 3.4: release/complete/fail with the current token of an expired lease succeed.
    expired_lease_policy: ClassVar[Literal["accept", "reject"]] = "accept"

    def __init__(self, tasks: Iterable[Task], clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[str, Task] = {}
        self._max_fence: dict[str, int] = {}
        self._issued_tokens: set[str] = set()
        for task in tasks:
            if task.id in self._tasks:
                raise ValueError(f"MemoryBoard: duplicate initial task id {task.id!r}")
            self._tasks[task.id] = task
            self._max_fence[task.id] = task.lease.fence if task.lease is not None else 0
            if task.lease is not None:
                self._issued_tokens.add(task.lease.token)

    def __repr__(self) -> str:
        return f"MemoryBoard({len(self._tasks)} tasks, clock={self._clock!r})"

    def list_tasks(self) -> list[Task]:
        """Return a consistent snapshot of every task (SPEC 3.7)."""
        with self._lock:
            return list(self._tasks.values())

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        """Claim ``task_id`` for ``agent`` with a freshly minted lease (SPEC 3.1).

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            TerminalError: the task is ``DONE``.
            BlockedError: a dependency is not ``DONE`` (or names no task).
            TakenError: the task is ``CLAIMED`` and its lease is live.
            ValueError: ``agent`` is empty (checked last).
        """
        with self._lock:
            now = self._clock.now()
            task = self._get(task_id)
            if task.state == State.DONE:
                raise TerminalError(f"task {task_id!r} is done; done is forever")
            for dep in task.deps:
                dep_task = self._tasks.get(dep)
                if dep_task is None or dep_task.state != State.DONE:
                    state = "unknown" if dep_task is None else dep_task.state
                    raise BlockedError(f"task {task_id!r} waits for {dep!r} ({state})")
            if task.state == State.CLAIMED and _live(task.lease, now):
                raise TakenError(f"task {task_id!r} is held by a live lease of {task.owner!r}")
            if not agent:
                raise ValueError("claim needs a non-empty agent name")
            fence = self._max_fence[task_id] + 1
            lease = Lease(token=self._mint_token(), fence=fence, until=_until(now, request.ttl))
            self._max_fence[task_id] = fence
            return self._put(
                replace(task, state=State.CLAIMED, owner=agent, lease=lease, seq=task.seq + 1)
            )

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Recompute the lease's ``until`` from this board's clock (SPEC 3.5).

        Token, fence and owner stay; ``seq`` grows.

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired.
        """
        with self._lock:
            now = self._clock.now()
            task = self._get(task_id)
            lease = self._current_lease(task, token)
            if not _live(lease, now):
                raise LeaseLostError(f"the lease on {task_id!r} expired; claim it again")
            renewed = replace(lease, until=_until(now, request.ttl))
            return self._put(replace(task, lease=renewed, seq=task.seq + 1))

    def release(self, task_id: str, token: str) -> None:
        """Give the task back: ``OPEN``, no owner, no lease (SPEC 3.2).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED`` or ``token`` is not its current token.
        """
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        """Mark the task ``DONE``, which is terminal (SPEC 3.3).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED`` or ``token`` is not its current token.
        """
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        """Mark the task ``FAILED``; it can be claimed again (SPEC 3.6).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED`` or ``token`` is not its current token.
        """
        self._finish(task_id, token, State.FAILED)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._lock:
            task = self._get(task_id)
            self._current_lease(task, token)
            # SPEC 3.4 "accept": an expired lease nobody took over still finishes.
            self._put(replace(task, state=state, owner="", lease=None, seq=task.seq + 1))

    def _get(self, task_id: str) -> Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise NotFoundError(f"no task has id {task_id!r}")
        return task

    @staticmethod
    def _current_lease(task: Task, token: str) -> Lease:
        if task.state != State.CLAIMED or task.lease is None:
            raise LeaseLostError(f"task {task.id!r} is {task.state}, not claimed")
        if task.lease.token != token:
            raise LeaseLostError(f"token is not the current lease of {task.id!r}")
        return task.lease

    def _put(self, task: Task) -> Task:
        self._tasks[task.id] = task
        return task

    def _mint_token(self) -> str:
        while True:
            token = secrets.token_hex(16)
            if token not in self._issued_tokens:
                self._issued_tokens.add(token)
                return token


def _live(lease: Lease | None, now: datetime) -> bool:
    """SPEC 2: live iff ``until is None or now < until``; at ``now == until`` it has expired."""
    return lease is not None and (lease.until is None or now < lease.until)


def _until(now: datetime, ttl: timedelta) -> datetime | None:
    """SPEC 2: ``ttl > 0`` gives ``now + ttl``; ``ttl == 0`` gives no expiry."""
    return now + ttl if ttl > timedelta(0) else None
