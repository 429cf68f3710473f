"""redis-py's own ``Lock``, as released: ``tests.realworld.redis_py:board``.

Whichever redis-py is first on ``sys.path`` is the one tested (the corpus installs one
version per directory, see :mod:`tests.realworld.install`). Two generations:

* up to 2.9.1, ``redis.client.Lock``: the key holds ``time.time() + timeout`` (a float)
  and every client judges expiry on its own clock (``existing < time.time()``); release
  deletes the key by name when the stored time is not earlier than its own. A stale
  holder's release therefore deletes its successor's lock, and reports success (REPORT
  #5; fixed in 2.10.0, "The new locks fix several subtle race conditions").
* from 2.10.0, ``redis.lock.LuaLock``: a random token, ``PX`` on Redis's clock, and a
  release script that compares the token and raises ``LockError`` on a mismatch.

The driver calls only ``client.lock(name, timeout=..., sleep=0)``, ``acquire(blocking=False)``
and ``release()``. It does not renew: 2.9.1 has no ``extend``, and 2.10's is additive
(``PTTL + additional``), which cannot set ``until = now + ttl`` (SPEC 3.5) exactly.

Needs ``TASKBOARD_REDIS_URL`` (a redis-server 7+, for ``PEXPIRETIME``).
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import redis

from taskboard import Clock, Task
from tests.realworld.records import EPOCH, RecordBoard, Refused, board_for, virtual_machine
from tests.realworld.records import TOKEN_EXPIRY as _EXPIRY

__all__ = ["RedisPyDriver", "board"]

_MS = timedelta(milliseconds=1)


#: What the library raises when it refuses: ``LockError``; and 2.9.1's release of a lock
#: object that holds nothing raises ``ValueError("Cannot release an unlocked lock")``.
_REFUSALS: tuple[type[Exception], ...] = (
    getattr(redis.exceptions, "LockError", None) or redis.client.LockError,
    ValueError,
)


def _seconds(ms: int) -> float:
    """``ms`` as float seconds that the library's ``int(s * 1000)`` turns back into ``ms``."""
    seconds = ms / 1000
    return seconds if int(seconds * 1000) == ms else math.nextafter(seconds, math.inf)


class RedisPyDriver:
    """A :class:`~tests.realworld.records.LockDriver` over ``redis.StrictRedis.lock``."""

    def __init__(self, url: str) -> None:
        self.client = redis.StrictRedis.from_url(url)
        self.prefix = f"realworld:{secrets.token_hex(6)}:"

    def __repr__(self) -> str:
        return f"RedisPyDriver(redis {redis.__version__}, {self.prefix!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        ms = math.ceil(ttl / _MS)
        lock = self.client.lock(self.prefix + name, timeout=_seconds(ms) if ms else None, sleep=0)
        return lock if lock.acquire(blocking=False) else None

    def release(self, handle: Any) -> None:
        try:
            handle.release()
        except _REFUSALS as exc:
            raise Refused(f"{type(exc).__name__}: {exc}") from exc

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        if hasattr(handle, "acquired_until"):  # <= 2.9.1: the stored client time is the lease
            # ... and it is held until a client's time.time() is past it (``existing <
            # time.time()``), through its deadline tick as Redis keeps a PX key.
            return EPOCH + timedelta(seconds=handle.acquired_until) + _MS
        held, when = self.client.eval(_EXPIRY, 1, handle.name, handle.token)
        # Redis lets a key go once its ms clock reads past PEXPIRETIME.
        return EPOCH + (when + 1 if held else when) * _MS

    def close(self) -> None:
        keys = list(self.client.keys(self.prefix + "*"))
        if keys:
            self.client.delete(*keys)
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            pool.disconnect()


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed redis-py's Lock on ``TASKBOARD_REDIS_URL``; the clock is
    ignored (redis-py 2.9.1 keeps time with ``time.time()``, 2.10+ with Redis's ``PX``)."""
    return board_for(tasks, RedisPyDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _MS  # type: ignore[attr-defined]
#: 2.9.1 lets an expired lock's holder release it; 2.10 refuses (the key is gone).
board.expired_lease_policy = "either"  # type: ignore[attr-defined]

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.redis_py:virtual --clock virtual``.
virtual = virtual_machine(RedisPyDriver, board)
