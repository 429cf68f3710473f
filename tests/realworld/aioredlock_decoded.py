"""aioredlock's ``Aioredlock`` lock manager on a decoding connection, as released:
``tests.realworld.aioredlock_decoded:board``.

Whichever aioredlock (and aioredis 1.3.1, pinned next to it) is first on ``sys.path`` is
the one tested. The manager is built the way its docstring shows, from a Redis URI with
``?encoding=utf-8`` ("a Redis URI - redis://host:6379/0?encoding=utf-8"), so every reply
comes back as ``str``. A lock is one Redis key: a script ``SET``s ``<resource> <uuid> PX
<ms>`` when the key is missing or already holds that uuid, and an unset script ``DEL``s it
when it holds the uuid, answers OK when it is missing, and an error when another uuid holds
it. The manager loads the scripts (``SCRIPT LOAD``) and runs them by SHA1 (``EVALSHA``).

The bug (joanvila/aioredlock #86, "If aioredis.create_redis_pool encoding parameter is set,
aioredlock raise AttributeError", fixed in 0.7.1 by commit 4e16caf, "handle unicode
encoding"; the maintainer: "This is fixed in v0.7.1"): up to 0.7.0 the manager decodes
each SHA1 that ``SCRIPT LOAD`` returns with ``r.decode()``. A decoding connection returns
``str``, so the first ``lock()`` raises ``AttributeError`` inside the instance, which the
manager logs and turns into ``LockError('Can not acquire the lock ...')``: no lock can ever
be taken, the first claim of a free task included. 0.7.1 decodes only ``bytes``; nothing
else in it changed.

How the driver asks the library:

* **claim**: ``await manager.lock(name, lock_timeout=seconds)``; ``LockError`` is "held".
  The manager is built with ``retry_count=1`` (a try that does not wait: the default
  retries twice more after 0.1-0.3 s sleeps). A ttl of 0 is ``lock_timeout=None``: the
  lock has no end of its own, and the manager's watchdog renews it (every 6 s, with the
  default ``internal_lock_timeout`` of 10 s) until it is released (in virtual mode, a
  lock of 100 years instead: see ``virtual``).
* **release**: ``await manager.get_lock(name, lock.id)``, then ``await
  manager.unlock(lock)``; ``LockError`` from either is a refusal. ``unlock`` alone cannot
  tell: its script answers OK for a missing key, whoever asks, so a stale holder's release
  after its successor's lease expired would "succeed" (SPEC 3.2 wants ``LeaseLostError``).
  ``get_lock`` (0.6.0) raises ``LockError`` unless the key holds this lock's id. An
  expired key is missing, so SPEC 3.4 reject. Asking first also keeps a stale ``unlock``
  away from the manager's watchdogs, which it keys by resource: in every release up to
  0.7.3 a refused stale ``unlock`` cancels the *current* holder's watchdog, whose
  ``lock_timeout=None`` lock then expires after 10 s (unfixed, so no entry).
* **until**: the key's ``PEXPIRETIME`` + 1 ms, read right after the claim by a script that
  checks the key still holds ``lock.id``, on a plain (not decoding) aioredis connection.

No renewal: ``extend(lock, lock_timeout)`` runs the same ``SET`` script, which takes a
missing key, so it renews a lease that has expired (SPEC 3.5 wants ``LeaseLostError``).

``shortest_lease`` is 50 ms: ``lock()`` keeps a lock only if ``ttl - elapsed - (ttl / 100
+ 2 ms)`` is positive (the Redlock clock-drift allowance), and gives it up otherwise, so
a 5 ms lease is refused whenever the call takes 3 ms, and a 20 ms lease was refused once in
300 examples when a loaded machine took 80 ms over one claim. The manager connects and loads its
scripts on its first call and counts that against the first lease, so the driver takes a
scratch lock (and gives it back) when it starts; on 0.7.0 that fails like every lock.

aioredlock is asyncio-only, so the driver runs one event loop in a daemon thread for the
board's life and waits for each call on it (the watchdog needs a loop that keeps running).
aioredlock 0.7.x needs ``aioredis<2``; aioredis 1.3.1 runs on Python 3.11, and needs
``async-timeout``; aioredlock needs ``attrs``. All three are pinned next to it.

Needs ``TASKBOARD_REDIS_URL`` (a redis-server 7+, for ``PEXPIRETIME``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import threading
from collections.abc import Coroutine, Sequence
from datetime import datetime, timedelta
from functools import partial
from importlib.metadata import version
from typing import Any, TypeVar

import aioredis
import aioredlock

from taskboard import Clock, Task
from tests.realworld.records import EPOCH, RecordBoard, Refused, board_for, virtual_machine
from tests.realworld.records import TOKEN_EXPIRY as _EXPIRY

__all__ = ["AioredlockDriver", "board"]

_MS = timedelta(milliseconds=1)
_T = TypeVar("_T")
#: A lease "without expiry" when the watchdog is off: 100 years.
_FOREVER_MS = 100 * 365 * 24 * 3600 * 1000


# The manager logs every refused lock at DEBUG and a failed instance at ERROR, with a
# traceback; Python's last-resort handler would print those into every fuzz run.
_LOG = logging.getLogger("aioredlock")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


def _seconds(ms: int) -> float:
    """``ms`` as float seconds that the library's ``int(s * 1000)`` turns back into ``ms``."""
    seconds = ms / 1000
    return seconds if int(seconds * 1000) == ms else math.nextafter(seconds, math.inf)


def _decoding(url: str) -> str:
    """``url`` with ``encoding=utf-8`` added to its query."""
    return f"{url}{'&' if '?' in url else '?'}encoding=utf-8"


class AioredlockDriver:
    """A :class:`~tests.realworld.records.LockDriver` over ``aioredlock.Aioredlock``."""

    def __init__(self, url: str, *, watchdog: bool = True) -> None:
        self.url = url
        #: False: a lease without expiry is asked for as one of 100 years, not kept alive by
        #: the manager's watchdog (see :data:`virtual`).
        self.watchdog = watchdog
        self.prefix = f"realworld:{secrets.token_hex(6)}:"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="aioredlock-loop", daemon=True
        )
        self.thread.start()
        self.manager = aioredlock.Aioredlock([_decoding(url)], retry_count=1)
        #: A plain connection of the driver's own, for ``until`` and the clean-up.
        self.client: Any = self._run(aioredis.create_redis_pool(url))
        # The manager connects and loads its scripts on its first call, and counts that
        # time against the first lease: a scratch lock takes it out of the first claim.
        self._run(self._warm_up())

    def __repr__(self) -> str:
        return f"AioredlockDriver(aioredlock {version('aioredlock')}, {self.prefix!r})"

    async def _warm_up(self) -> None:
        with contextlib.suppress(aioredlock.LockError):
            lock = await self.manager.lock(self.prefix + "warm-up", lock_timeout=1)
            await self.manager.unlock(lock)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        ms = math.ceil(ttl / _MS) or (None if self.watchdog else _FOREVER_MS)
        try:
            return self._run(
                self.manager.lock(self.prefix + name, lock_timeout=_seconds(ms) if ms else None)
            )
        except aioredlock.LockError:
            return None

    def release(self, handle: Any) -> None:
        async def release() -> None:
            # unlock() answers OK for a missing key, whoever asks: ask first whether the
            # key still holds this lock's id (get_lock raises LockError if not).
            await self.manager.get_lock(handle.resource, handle.id)
            await self.manager.unlock(handle)

        try:
            self._run(release())
        except aioredlock.LockError as exc:
            raise Refused(f"{type(exc).__name__}: {exc}") from exc

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        async def read() -> Any:
            # aioredis sends a command when it is called, on the calling thread's loop.
            return await self.client.eval(_EXPIRY, keys=[handle.resource], args=[handle.id])

        held, when = self._run(read())
        # Redis lets a key go once its ms clock reads past PEXPIRETIME.
        return EPOCH + (when + 1 if held else when) * _MS

    def close(self) -> None:
        async def shut() -> None:
            await self.manager.destroy()  # unlocks what it still holds, stops the watchdogs
            keys = await self.client.keys(self.prefix + "*")
            if keys:
                await self.client.delete(*keys)
            self.client.close()
            await self.client.wait_closed()

        try:
            self._run(shut())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
            self.loop.close()


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed aioredlock on ``TASKBOARD_REDIS_URL`` (with
    ``encoding=utf-8``); the clock is ignored (Redis's ``PX`` keeps the time)."""
    return board_for(tasks, AioredlockDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _MS  # type: ignore[attr-defined]
#: A lock is valid only if ``ttl - elapsed - (1% of ttl + 2 ms)`` is positive: a 5 ms lease
#: is refused whenever the call takes 3 ms.
board.shortest_lease = timedelta(milliseconds=50)  # type: ignore[attr-defined]
#: An expired key is missing, so ``get_lock`` refuses the release.
board.expired_lease_policy = "reject"  # type: ignore[attr-defined]

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.aioredlock_decoded:virtual --clock virtual``. Without the
#: watchdog: it renews a lease without expiry every 6 s of the event loop's clock, which stays
#: the real monotonic clock, while the key's 10 s ``PX`` runs on the server's; one jump of the
#: machine's clock past 10 s lets the key go before the watchdog wakes (a false alarm on the
#: correct 0.7.1, seen at a 500 s jump). Such a lease is asked for as one of 100 years.
virtual = virtual_machine(partial(AioredlockDriver, watchdog=False), board)
