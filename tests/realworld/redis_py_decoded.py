"""redis-py's ``redis.lock.Lock`` on a ``decode_responses=True`` client, as released:
``tests.realworld.redis_py_decoded:board``.

Whichever redis-py is first on ``sys.path`` is the one tested. The lock is chosen the
documented way, ``client.lock(name, ..., lock_class=redis.lock.Lock)``, so both releases
run the same call:

* 2.10.x: ``redis.lock.Lock`` is the pipeline lock (for servers without Lua). Its release
  ``WATCH``es the key, ``GET``s it and compares the value with its token in Python. The
  token is bytes; a ``decode_responses=True`` client returns str; on Python 3 the two
  never compare equal, so every release, the holder's own included, raises
  ``LockError("Cannot release a lock that's no longer owned")`` and leaves the key in
  place until it expires (redis-py issue #1091, "Lock.release() always fails
  in python 3.6.6 (Redis-py 2.10.5)"). 2.10.6 is the last 2.x release.
* 3.0.0: "Removed the pipeline based Lock implementation in favor of the LuaLock
  implementation" (CHANGES); ``redis.lock.Lock`` is the Lua lock, whose release script
  compares the token inside Redis, so the client's decoding plays no part.

The driver calls ``acquire(blocking=False)`` and ``release()`` (``LockError`` is a refusal).
``until`` is the key's ``PEXPIRETIME`` + 1 ms, read by a script that checks the key still
holds the lock's token. No renewal: ``extend`` is additive in both releases.

Needs ``TASKBOARD_REDIS_URL`` (a redis-server 7+, for ``PEXPIRETIME``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import redis
import redis.lock

from taskboard import Clock, Task
from tests.realworld.records import EPOCH, RecordBoard, board_for, virtual_machine
from tests.realworld.records import TOKEN_EXPIRY as _EXPIRY
from tests.realworld.redis_py import RedisPyDriver, _seconds

__all__ = ["DecodedLockDriver", "board"]

_MS = timedelta(milliseconds=1)


class DecodedLockDriver(RedisPyDriver):
    """A :class:`~tests.realworld.records.LockDriver` over ``redis.lock.Lock`` on a client
    that decodes its replies (``decode_responses=True``)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.client = redis.StrictRedis.from_url(url, decode_responses=True)

    def __repr__(self) -> str:
        return f"DecodedLockDriver(redis {redis.__version__}, {self.prefix!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        ms = math.ceil(ttl / _MS)
        lock = self.client.lock(
            self.prefix + name,
            timeout=_seconds(ms) if ms else None,
            sleep=0,
            lock_class=redis.lock.Lock,
        )
        return lock if lock.acquire(blocking=False) else None

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        held, when = self.client.eval(_EXPIRY, 1, handle.name, handle.local.token)
        # Redis lets a key go once its ms clock reads past PEXPIRETIME.
        return EPOCH + (when + 1 if held else when) * _MS


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed redis-py's ``redis.lock.Lock`` on a decoding client on
    ``TASKBOARD_REDIS_URL``; the clock is ignored (Redis's ``PX`` keeps the time)."""
    return board_for(tasks, DecodedLockDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _MS  # type: ignore[attr-defined]
#: Both releases refuse to release a key that has expired (it is gone).
board.expired_lease_policy = "reject"  # type: ignore[attr-defined]

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.redis_py_decoded:virtual --clock virtual``.
virtual = virtual_machine(DecodedLockDriver, board)
