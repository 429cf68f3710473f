"""The record-keeping half of a board over a released lock library: one base for every adapter.

A :class:`RecordBoard` keeps the task records in memory (state, owner, token, fence,
``until``, ``seq``, title, deps) and asks a :class:`LockDriver` every question of
ownership: who gets the lock, whether a release or renewal by this holder goes through, and
when the lease ends as the library or its store enforces it. A driver is a thin layer over
the library's public API, called the way a user would call it; see ``tests/realworld/*.py``.

The board hands out its own tokens (128 random bits) and maps each to the library's handle
(a lock object and whatever the driver needs with it). It never compares tokens itself,
except to reject a token it never issued for that task: a stale token still reaches the
library, so a library that honours a stale release shows.

The records live in this process. Racing threads (a controlled race, ``race_scheduling =
"controlled"``) may call one board: each operation checks the record first, asks the
library, and then, under a lock of its own, writes the record from what it holds now (its
seq, its fence), so that the library's order decides and the records follow it; a claim
that finds the task done by then gives its lock back. Under control a thread's last round
trip and its write run in one turn, so the records are exact; threads the operating system
interleaves may still write between another's round trip and its record. Time is the
library's (``make_board``'s clock is ignored).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import taskboard.servers
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
from taskboard.stateful import BoardMachine

__all__ = [
    "EPOCH",
    "TOKEN_EXPIRY",
    "ExtendingDriver",
    "KeyedLock",
    "LockDriver",
    "RecordBoard",
    "Refused",
    "RenewingRecordBoard",
    "board_for",
    "from_timestamp_ns",
    "in_process_virtual_machine",
    "virtual_machine",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: A Redis script, KEYS[1] the lock key, ARGV[1] the lock's token or id: {1, PEXPIRETIME}
#: while the token holds the key, else {0, the server's TIME in ms}: the lock had already
#: expired by then. How the Redis drivers read a lease's ``until`` from the store.
TOKEN_EXPIRY = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, redis.call('PEXPIRETIME', KEYS[1])}
end
local now = redis.call('TIME')
return {0, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
"""


@dataclass(frozen=True)
class KeyedLock:
    """A driver's handle on a library's lock object and the Redis key the library keeps it in."""

    lock: Any
    key: str


class Refused(Exception):
    """The library refused a release or a renewal: this handle does not hold the lock."""


class LockDriver(Protocol):
    """The seam between :class:`RecordBoard` and one lock library.

    ``name`` is a task id; the driver maps it to the library's lock name (a key, a path).
    A handle is whatever the driver needs later (the lock object, say); the board keeps it
    for the token it issues.
    """

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        """Take the lock without blocking; ``ttl == 0`` means no expiry. The handle, or
        ``None`` when the library says the lock is held. ``prior`` is the handle of the
        lease the board's record shows for ``name`` (``None`` if it shows none), for a
        library whose waiter needs to know the holder's lease (filelock's ``lifetime``)."""
        ...

    def release(self, handle: Any) -> None:
        """Release through the library. Raises :class:`Refused` when the library refuses
        (the way it reports that: an exception, a return value)."""
        ...

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        """When the lease just acquired (or extended) ends, as the library or its store
        enforces it; ``None`` for no expiry."""
        ...

    def close(self) -> None:
        """Free the store's resources (keys, a directory, a client)."""
        ...


@runtime_checkable
class ExtendingDriver(LockDriver, Protocol):
    """A driver whose library can renew a lease the way SPEC 3.5 wants: ``until`` from
    now + ``ttl``, no expiry for ``ttl == 0``."""

    def extend(self, handle: Any, ttl: timedelta) -> None:
        """Renew through the library; :class:`Refused` when it refuses."""
        ...


@dataclass(frozen=True)
class _Record:
    task: Task
    handle: Any = None


class RecordBoard:
    """A Board whose ownership questions are a lock library's (see the module docstring).

    Checked by the board itself, from its records, in SPEC 3.1 order: an unknown id, a
    ``DONE`` task, a dependency not ``DONE``; then the library decides. A release, complete
    or fail of a task the record does not show ``CLAIMED`` is :class:`LeaseLostError`
    without asking the library (there is no lease to give up), as is a token never issued
    for that task.

    An empty agent (which the machine never draws) is :class:`TakenError` while the
    record shows a live lease, else :class:`ValueError`; the board does not try the lock
    for it, since a takeover cannot be undone.
    """

    clock_mode: ClassVar[Literal["manual", "wall"]] = "wall"
    expired_lease_policy: ClassVar[Literal["accept", "reject", "either"]] = "either"

    def __init__(self, tasks: Iterable[Task], driver: LockDriver) -> None:
        self.driver = driver
        self._records: dict[str, _Record] = {}
        self._fences: dict[str, int] = {}
        #: (task id, token) -> the library's handle, for every token ever issued.
        self._issued: dict[tuple[str, str], Any] = {}
        for task in tasks:
            if task.id in self._records:
                raise ValueError(f"two initial tasks have id {task.id!r}")
            if task.lease is not None or task.state == State.CLAIMED:
                raise ValueError(f"cannot import the lease of {task.id!r}")
            self._records[task.id] = _Record(replace(task, owner=""))
            self._fences[task.id] = 0
        self._closed = False
        #: Held while a record is read and written after the library answered.
        self._books = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._records)} tasks, {self.driver!r})"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            # A library whose lock objects release themselves when collected (sherlock's
            # ``__del__``) does it now, while its store still answers, and not at the
            # interpreter's exit, after a virtual-mode run has stopped its server.
            self._issued.clear()
            self._records = {key: _Record(record.task) for key, record in self._records.items()}
            self.driver.close()

    # -- the Board protocol ------------------------------------------------------------------

    def list_tasks(self) -> list[Task]:
        return [record.task for record in self._records.values()]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        record = self._record(task_id)
        task = record.task
        if task.state == State.DONE:
            raise TerminalError(f"task {task_id!r} is done")
        for dep in task.deps:
            dep_record = self._records.get(dep)
            if dep_record is None or dep_record.task.state != State.DONE:
                raise BlockedError(f"task {task_id!r} waits for {dep!r}")
        if not agent:
            lease = task.lease
            if lease is not None and (lease.until is None or datetime.now(UTC) < lease.until):
                raise TakenError(f"task {task_id!r} is held")
            raise ValueError("claim needs a non-empty agent name")
        prior = record.handle if task.state == State.CLAIMED else None
        handle = self.driver.acquire(task_id, request.ttl, prior)
        if handle is None:
            raise TakenError(f"the library says {task_id!r} is locked")
        until = self.driver.until(handle, request.ttl) if request.ttl else None
        token = secrets.token_hex(16)
        with self._books:
            task = self._records[task_id].task  # as it is now: another thread may have acted
            done = task.state == State.DONE
            if not done:
                self._issued[task_id, token] = handle
                self._fences[task_id] += 1
                claimed = replace(
                    task,
                    state=State.CLAIMED,
                    owner=agent,
                    lease=Lease(token, self._fences[task_id], until),
                    seq=task.seq + 1,
                )
                self._records[task_id] = _Record(claimed, handle)
        if done:  # completed while we took the lock: give it back
            with contextlib.suppress(Refused):
                self.driver.release(handle)
            raise TerminalError(f"task {task_id!r} is done")
        return claimed

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.FAILED)

    # -- helpers -----------------------------------------------------------------------------

    def _finish(self, task_id: str, token: str, state: State) -> None:
        task = self._record(task_id).task
        handle = self._handle(task, token)
        try:
            self.driver.release(handle)
        except Refused as exc:
            raise LeaseLostError(f"the library refused to release {task_id!r}: {exc}") from exc
        with self._books:
            task = self._records[task_id].task
            finished = replace(task, state=state, owner="", lease=None, seq=task.seq + 1)
            self._records[task_id] = _Record(finished)

    def _handle(self, task: Task, token: str) -> Any:
        if task.state != State.CLAIMED:
            raise LeaseLostError(f"task {task.id!r} is {task.state}, not claimed")
        handle = self._issued.get((task.id, token))
        if handle is None:
            raise LeaseLostError(f"this board never issued that token for {task.id!r}")
        return handle

    def _record(self, task_id: str) -> _Record:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        record = self._records.get(task_id)
        if record is None:
            raise NotFoundError(f"no task has id {task_id!r}")
        return record


class RenewingRecordBoard(RecordBoard):
    """A :class:`RecordBoard` whose library can renew (an :class:`ExtendingDriver`)."""

    driver: ExtendingDriver

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        record = self._record(task_id)
        handle = self._handle(record.task, token)
        try:
            self.driver.extend(handle, request.ttl)
        except Refused as exc:
            raise LeaseLostError(f"the library refused to renew {task_id!r}: {exc}") from exc
        until = self.driver.until(handle, request.ttl) if request.ttl else None
        with self._books:
            now = self._records[task_id]
            if now.task.lease is not None:  # else released meanwhile: the library renewed
                record = now  # a lock it gave up, which the answer below shows
            task, lease = record.task, record.task.lease
            assert lease is not None
            renewed = replace(task, lease=replace(lease, until=until), seq=task.seq + 1)
            if record is now:
                self._records[task_id] = _Record(renewed, record.handle)
        return renewed


def board_for(tasks: Iterable[Task], driver: LockDriver) -> RecordBoard:
    """A :class:`RenewingRecordBoard` if the driver can renew, else a :class:`RecordBoard`
    (the machine then never renews: ``renew`` is optional, SPEC 1)."""
    if isinstance(driver, ExtendingDriver):
        return RenewingRecordBoard(tasks, driver)
    return RecordBoard(tasks, driver)


def from_timestamp_ns(ns: int) -> datetime:
    """A count of ns since the epoch as an aware UTC datetime, rounded up to the µs (a
    lease never ends earlier than the store says)."""
    return EPOCH + timedelta(microseconds=-(-ns // 1000))


def virtual_machine(
    make_driver: Callable[[str], LockDriver], wall_board: Any
) -> type[BoardMachine]:
    """The virtual-mode machine of a Redis-backed entry: its driver (``make_driver(url)``)
    on a redis-server of its own whose clock the machine moves, with the settings of the
    entry's wall-mode factory ``wall_board`` (resolution, expired-lease policy) but its
    clock. ``taskboard fuzz MODULE:virtual --clock virtual`` runs it."""

    def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
        return board_for(tasks, make_driver(machine.server.url))

    machine = BoardMachine.for_board(
        board, clock_mode="virtual", server=taskboard.servers.Redis(), **_settings_of(wall_board)
    )
    return machine


def in_process_virtual_machine(wall_board: Any) -> type[BoardMachine]:
    """The virtual-mode machine of an entry whose library keeps time in this process
    (``time.time()``, ``datetime.now()``; its locks in SQLite here): the wall-mode factory
    ``wall_board`` itself, on :class:`taskboard.servers.NoServer`, its calls reading the
    machine's clock. ``taskboard fuzz MODULE:virtual --clock virtual`` runs it."""
    return BoardMachine.for_board(
        wall_board,
        clock_mode="virtual",
        server=taskboard.servers.NoServer(),
        **_settings_of(wall_board),
    )


def _settings_of(wall_board: Any) -> dict[str, Any]:
    """The settings a wall-mode factory carries, other than its clock mode."""
    return {
        name: getattr(wall_board, name)
        for name in ("clock_resolution", "shortest_lease", "expired_lease_policy")
        if hasattr(wall_board, name)
    }
