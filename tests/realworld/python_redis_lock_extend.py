"""python-redis-lock's ``redis_lock.Lock`` with renewal: ``python_redis_lock_extend:virtual``.

Whichever ``redis_lock`` (3.x, and redis-py, pinned next to it: 3.5.3) is first on
``sys.path`` is the one tested. The lock is ``SET lock:<name> <id> NX EX <expire>`` (whole
seconds); ``extend(expire)`` runs a script that, while the key holds the lock's id and has
a TTL, sets ``EXPIRE <key> <expire>``.

The bug (upstream #73, 3.5.0): ``extend(expire=0)`` sends ``EXPIRE <key> 0``, which deletes
the key, and the script returns 0: the holder is told its lock was extended while the lock
is free, and a second ``acquire`` succeeds at once. 3.6.0's changelog: "``timeout`` and
``expire`` are converted to ``None`` if they are falsy. Previously only ``None`` disabled
these options, other falsy values created buggy situations", so ``extend(0)`` renews for
the ``expire`` the lock was built with.

How the driver asks the library:

* **claim**: ``Lock(client, name, expire=seconds)`` and ``acquire(blocking=False)``. A
  lease with no expiry (ttl 0) is ``expire`` of 100 years: a lock built with
  ``expire=None`` cannot be extended at all (``NotExpirable``), and 100 years is "no
  expiry" for any run. The board records no ``until`` for it.
* **release**: ``release()``; ``NotAcquired`` is a refusal.
* **renew**: ``extend(expire=seconds)`` on a ``Lock`` with the holder's ``id`` (the
  library's way to act for a lock held elsewhere), built with ``expire`` of 100 years.
  ``seconds`` is the ttl in whole seconds, rounded up as a user asks for them; ttl 0 (no
  expiry) is ``extend(0)``, which 3.6.0 documents as "the ``expire`` given at
  initialization" (100 years here) and 3.5.0 turns into ``EXPIRE <key> 0``.
  ``NotAcquired`` is a refusal.
* **until**: the key's ``PEXPIRETIME`` + 1 ms, read right after the claim or renewal by a
  script that checks the key still holds the lock's id.

The store keeps whole seconds (``EX``), so ``clock_resolution`` is 1 s: the wall-mode
entry is deep (about 7 s an example), CI runs the ``virtual`` machine. ``board`` needs
``TASKBOARD_REDIS_URL`` (a redis-server 7+).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import redis_lock

from taskboard import Clock, Task
from tests.realworld.python_redis_lock import RedisLockDriver
from tests.realworld.records import KeyedLock, RecordBoard, Refused, board_for, virtual_machine

__all__ = ["RedisLockExtendDriver", "board"]

_MS = timedelta(milliseconds=1)
_S = timedelta(seconds=1)
#: The expiry asked for a lease without one (see the module docstring).
_FOREVER = 100 * 365 * 24 * 3600


def _seconds(ttl: timedelta) -> int:
    """The ttl in whole seconds, a part of one rounded up; 0 for no expiry."""
    return int(-(-ttl // _S))


class RedisLockExtendDriver(RedisLockDriver):
    """A :class:`~tests.realworld.records.ExtendingDriver` over ``redis_lock.Lock``: the
    release, until and clean-up of :class:`RedisLockDriver`, with renewal."""

    def __repr__(self) -> str:
        return f"RedisLockExtendDriver(python-redis-lock {redis_lock.__version__}, {self.prefix!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        lock = redis_lock.Lock(self.client, self.prefix + name, expire=_seconds(ttl) or _FOREVER)
        return (
            KeyedLock(lock, f"lock:{self.prefix}{name}") if lock.acquire(blocking=False) else None
        )

    def extend(self, handle: Any, ttl: timedelta) -> None:
        name = handle.key.removeprefix("lock:")
        lock = redis_lock.Lock(self.client, name, expire=_FOREVER, id=handle.lock.id)
        try:
            lock.extend(expire=_seconds(ttl))
        except redis_lock.NotAcquired as exc:
            raise Refused(f"NotAcquired: {exc}") from exc


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed python-redis-lock on ``TASKBOARD_REDIS_URL``; the clock
    is ignored (Redis's ``EX`` keeps the time)."""
    return board_for(tasks, RedisLockExtendDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _S  # type: ignore[attr-defined]
#: Both releases raise NotAcquired for a lock whose key is gone; at the key's last tick
#: Redis still has it, so either answer can come.
board.expired_lease_policy = "either"  # type: ignore[attr-defined]

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.python_redis_lock_extend:virtual --clock virtual``.
virtual = virtual_machine(RedisLockExtendDriver, board)
