"""redis-py's pipeline ``redis.lock.Lock`` racing an expiry, as released:
``tests.realworld.redis_py_watch:virtual`` (a controlled race on the virtual clock).

Whichever redis-py is first on ``sys.path`` is the one tested. The lock is chosen the
documented way, ``client.lock(name, ..., lock_class=redis.lock.Lock, thread_local=False)``
(the token is shared, so a lock taken by one thread can be released by another, as the
docstring of ``thread_local`` describes), so both releases run the same call:

* 2.10.6: ``redis.lock.Lock`` is the pipeline lock (for servers without Lua). Its
  ``release()`` runs ``client.transaction(execute_release, name)``: the pipeline ``WATCH``es
  the key, and ``execute_release`` ``GET``s it, compares it with its token and ``DEL``etes
  it. It never calls ``pipe.multi()``, so the ``DEL`` runs at once, outside any
  transaction, and the ``WATCH`` guards nothing: when the lock expires between the ``GET``
  and the ``DEL`` and another client takes it, the ``DEL`` deletes the new holder's lock,
  and a third client can take it while the second still holds it (redis-py pull request
  #1031, "fix a race in Lock.release"). Acquire is ``SETNX`` then ``PEXPIRE``.
* 3.0.0: "Removed the pipeline based Lock implementation in favor of the LuaLock
  implementation" (CHANGES): ``redis.lock.Lock`` is the Lua lock, whose release script
  compares and deletes in one step inside Redis.

The race needs the lock to expire between two commands of one release: the machine's clock
moves there as a turn of a controlled race (``race_scheduling = "controlled"`` on the virtual
clock, docs/races.md), so the checker finds it, shrinks it and replays it exactly. The driver
calls ``acquire(blocking=False)`` and ``release()`` (``LockError`` is a refusal); ``until`` is
the key's ``PEXPIRETIME`` + 1 ms. No renewal: ``extend`` is additive in both releases.
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

__all__ = ["PipelineLockDriver", "board", "virtual"]

_MS = timedelta(milliseconds=1)


class PipelineLockDriver(RedisPyDriver):
    """A :class:`~tests.realworld.records.LockDriver` over ``redis.lock.Lock`` with its token
    shared across threads (``thread_local=False``)."""

    def __repr__(self) -> str:
        return f"PipelineLockDriver(redis {redis.__version__}, {self.prefix!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        ms = math.ceil(ttl / _MS)
        lock = self.client.lock(
            self.prefix + name,
            timeout=_seconds(ms) if ms else None,
            sleep=0,
            lock_class=redis.lock.Lock,
            thread_local=False,
        )
        return lock if lock.acquire(blocking=False) else None

    def release(self, handle: Any) -> None:
        # A lock object of its own per call, holding the token, as each agent holding the
        # token would have: a lock object keeps its token client-side and forgets it as a
        # release starts, so two racing releases of one object would refuse each other
        # without asking Redis.
        lock = self.client.lock(
            handle.name,
            timeout=handle.timeout,
            sleep=0,
            lock_class=redis.lock.Lock,
            thread_local=False,
        )
        lock.local.token = handle.local.token
        super().release(lock)

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        held, when = self.client.eval(_EXPIRY, 1, handle.name, handle.local.token)
        # Redis lets a key go once its ms clock reads past PEXPIRETIME.
        return EPOCH + (when + 1 if held else when) * _MS


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed redis-py's ``redis.lock.Lock`` on ``TASKBOARD_REDIS_URL``;
    the clock is ignored (Redis's ``PX`` keeps the time)."""
    return board_for(tasks, PipelineLockDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _MS  # type: ignore[attr-defined]
#: Both releases refuse to release a key that has expired (it is gone).
board.expired_lease_policy = "reject"  # type: ignore[attr-defined]
#: One thread at a time at the library's commands, the clock's move a turn among them.
board.race_scheduling = "controlled"  # type: ignore[attr-defined]

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.redis_py_watch:virtual --clock virtual --parallel``.
virtual = virtual_machine(PipelineLockDriver, board)
