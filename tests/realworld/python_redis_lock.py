"""python-redis-lock's ``redis_lock.Lock``, as released: ``python_redis_lock:board`` here.

Whichever ``redis_lock`` (and redis-py, pinned next to it: 3.5.3) is first on ``sys.path``
is the one tested. The lock is ``SET lock:<name> <id> NX EX <expire>``, with ``expire`` in
whole seconds, and an unlock script that deletes the key only while it holds the lock's id.

The bug (REPORT #2, 2.3.0): the unlock script returns 0 when the id does not match, and
``release()`` ignores it, so a stale holder's release reports success (it does not delete
the new holder's key). 3.0.0: "Changed ``release`` to check if lock was acquired with the
same id. If not, ``NotAcquired`` will be raised."

The driver calls ``Lock(client, name, expire=seconds)``, ``acquire(blocking=False)`` and
``release()`` (``NotAcquired`` is a refusal). ``until`` is the key's ``PEXPIRETIME`` + 1 ms,
read right after the acquire by a script that checks the key still holds ``lock.id``.
No renewal: 2.3.0 has no ``extend`` (3.0.0 added it).

The store keeps whole seconds (``EX``), so ``clock_resolution`` is 1 s and every lease
is a whole number of seconds: an example sleeps for seconds, and the entry is a deep one.
Needs ``TASKBOARD_REDIS_URL`` (a redis-server 7+, for ``PEXPIRETIME``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import redis
import redis_lock

from taskboard import Clock, Task
from tests.realworld.records import (
    EPOCH,
    KeyedLock,
    RecordBoard,
    Refused,
    board_for,
    virtual_machine,
)
from tests.realworld.records import TOKEN_EXPIRY as _EXPIRY

__all__ = ["RedisLockDriver", "board"]

_MS = timedelta(milliseconds=1)
_S = timedelta(seconds=1)


class RedisLockDriver:
    """A :class:`~tests.realworld.records.LockDriver` over ``redis_lock.Lock``."""

    def __init__(self, url: str) -> None:
        self.client = redis.StrictRedis.from_url(url)
        self.prefix = f"realworld:{secrets.token_hex(6)}:"

    def __repr__(self) -> str:
        return f"RedisLockDriver(python-redis-lock {redis_lock.__version__}, {self.prefix!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        # Whole seconds, as a user asks for them: a part of one is rounded up.
        seconds = -(-ttl // _S)
        lock = redis_lock.Lock(self.client, self.prefix + name, expire=seconds or None)
        return (
            KeyedLock(lock, f"lock:{self.prefix}{name}") if lock.acquire(blocking=False) else None
        )

    def release(self, handle: Any) -> None:
        try:
            handle.lock.release()
        except redis_lock.NotAcquired as exc:
            raise Refused(f"NotAcquired: {exc}") from exc

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        held, when = self.client.eval(_EXPIRY, 1, handle.key, handle.lock.id)
        return EPOCH + (when + 1 if held else when) * _MS

    def close(self) -> None:
        keys = [
            *self.client.keys("lock:" + self.prefix + "*"),
            *self.client.keys("lock-signal:" + self.prefix + "*"),
        ]
        if keys:
            self.client.delete(*keys)
        self.client.connection_pool.disconnect()


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed python-redis-lock on ``TASKBOARD_REDIS_URL``; the clock
    is ignored (Redis's ``EX`` keeps the time)."""
    return board_for(tasks, RedisLockDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _S  # type: ignore[attr-defined]
#: 2.3.0 lets an expired lock's holder "release" it; 3.0.0 raises NotAcquired.
board.expired_lease_policy = "either"  # type: ignore[attr-defined]

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.python_redis_lock:virtual --clock virtual``.
virtual = virtual_machine(RedisLockDriver, board)
