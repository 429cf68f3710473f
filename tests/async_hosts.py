"""An async board for the tests, written as coroutines, with two switchable bugs.

``AsyncDictBoard`` keeps its tasks in a dict behind an ``asyncio.Lock`` and awaits
between reading and writing, as a board on an async client does. Its bugs:

* ``check_renew_token=False``: renew extends whatever lease the task has, without
  comparing the token (a stale holder extends the new holder's lease).
* ``atomic_claim=False``: claim reads, awaits, then writes without the lock, so two
  claims interleaved at the await both win.

With ``points=True`` the claim's await between reading and writing is a scheduling point
(:func:`taskboard.races.async_yield_point`), which a controlled race switches at.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import ClassVar, Literal

from taskboard import (
    BlockedError,
    ClaimRequest,
    Clock,
    Lease,
    LeaseLostError,
    NotFoundError,
    State,
    TakenError,
    Task,
    TerminalError,
)
from taskboard.races import async_yield_point


def _live(lease: Lease | None, now: datetime) -> bool:
    return lease is not None and (lease.until is None or now < lease.until)


def _until(now: datetime, ttl: timedelta) -> datetime | None:
    return now + ttl if ttl > timedelta(0) else None


class AsyncDictBoard:
    """A board whose every method is a coroutine; see the module docstring."""

    expired_lease_policy: ClassVar[Literal["accept"]] = "accept"

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock,
        *,
        check_renew_token: bool = True,
        atomic_claim: bool = True,
        points: bool = False,
    ) -> None:
        self._clock = clock
        self._tasks = {task.id: task for task in tasks}
        self._fences = {t.id: t.lease.fence if t.lease else 0 for t in self._tasks.values()}
        self._check_renew_token = check_renew_token
        self._atomic_claim = atomic_claim
        self._points = points
        self._lock: asyncio.Lock | None = None
        self.closed = False

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:  # made on the loop that runs the board
            self._lock = asyncio.Lock()
        return self._lock

    async def aclose(self) -> None:
        self.closed = True

    async def list_tasks(self) -> list[Task]:
        async with self._locked():
            await asyncio.sleep(0)
            return list(self._tasks.values())

    async def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if self._atomic_claim:
            async with self._locked():
                return await self._claim(task_id, agent, request)
        return await self._claim(task_id, agent, request)

    async def _claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        now = self._clock.now()
        task = self._get(task_id)
        if task.state is State.DONE:
            raise TerminalError(task_id)
        for dep in task.deps:
            if dep not in self._tasks or self._tasks[dep].state is not State.DONE:
                raise BlockedError(f"{task_id} waits for {dep}")
        if task.state is State.CLAIMED and _live(task.lease, now):
            raise TakenError(task_id)
        if not agent:
            raise ValueError("claim needs a non-empty agent name")
        # The round trip between read and write.
        await (async_yield_point("claim: write") if self._points else asyncio.sleep(0))
        self._fences[task_id] += 1
        lease = Lease(secrets.token_hex(16), self._fences[task_id], _until(now, request.ttl))
        claimed = replace(task, state=State.CLAIMED, owner=agent, lease=lease, seq=task.seq + 1)
        self._tasks[task_id] = claimed
        return claimed

    async def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        async with self._locked():
            now = self._clock.now()
            task = self._get(task_id)
            if task.state is not State.CLAIMED or task.lease is None:
                raise LeaseLostError(task_id)
            if self._check_renew_token and task.lease.token != token:
                raise LeaseLostError(task_id)
            if not _live(task.lease, now):
                raise LeaseLostError(f"{task_id}: expired")
            await asyncio.sleep(0)
            renewed = replace(task, lease=replace(task.lease, until=_until(now, request.ttl)))
            self._tasks[task_id] = replace(renewed, seq=task.seq + 1)
            return self._tasks[task_id]

    async def release(self, task_id: str, token: str) -> None:
        await self._finish(task_id, token, State.OPEN)

    async def complete(self, task_id: str, token: str) -> None:
        await self._finish(task_id, token, State.DONE)

    async def fail(self, task_id: str, token: str) -> None:
        await self._finish(task_id, token, State.FAILED)

    async def _finish(self, task_id: str, token: str, state: State) -> None:
        async with self._locked():
            task = self._get(task_id)
            if task.state is not State.CLAIMED or task.lease is None or task.lease.token != token:
                raise LeaseLostError(task_id)
            await asyncio.sleep(0)
            self._tasks[task_id] = replace(
                task, state=state, owner="", lease=None, seq=task.seq + 1
            )

    def _get(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise NotFoundError(task_id) from None
