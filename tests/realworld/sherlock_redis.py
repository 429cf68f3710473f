"""sherlock's ``RedisLock``, as released: ``tests.realworld.sherlock_redis:board``.

Whichever ``sherlock`` (and redis-py, pinned next to it: 4.6.0) is first on ``sys.path``
is the one tested. The lock is a Lua ``SETNX <key> <uuid4>`` then ``EXPIRE <key> <expire>``
(whole seconds); release and renew are scripts that act only while the key holds the
lock's uuid, and return 0 otherwise.

The bug (0.4.0, where ``renew()`` first appeared): ``RedisLock._renew`` runs the *release*
script, so ``renew()`` of a live lock deletes the key and returns ``True``. The holder is
told its lease was extended while the lock is free, and a second ``acquire`` succeeds at
once. 0.4.1's changelog: "Fix bug in ``RedisLock`` where lock would be released when
``renew`` is called" (commit 78cd155, "Fix ``RedisLock.renew``", a one-line change from
``_release_func`` to ``_renew_func``).

How the driver asks the library:

* **claim**: ``RedisLock(name, client=..., namespace=..., expire=seconds)`` and
  ``acquire(blocking=False)``, which returns ``False`` when the lock is held.
* **release**: ``release()``; ``sherlock.LockException`` is a refusal.
* **renew**: the lock's public ``expire`` set to the new ttl, then ``renew()``; ``False``
  is a refusal, and so is ``LockException`` ("Lock was not set by this process": the
  renewal of a lock this object has released). Both releases re-arm ``EXPIRE`` from now
  (0.4.1) or would have (0.4.0).
* **until**: the key's ``PEXPIRETIME`` + 1 ms, read by a script right after the claim or
  renewal (sequential mode: nobody can take the key in between); a key that is gone reads
  as the server's ``TIME``, a lease that has already ended.
* **no expiry** (ttl 0): ``expire=None`` is broken in both releases. The acquire script
  tests ``ARGV[2] ~= -1``, a string against a number, which is always true, and then runs
  ``EXPIRE <key> -1``, which deletes the key: ``acquire()`` returns ``True`` with no lock
  held. The driver asks for an expiry of 100 years instead, which is "no expiry" for any
  run, and the board records no ``until`` for it.

``PYTHONPATH=<the release's directory>:. python -m tests.realworld.sherlock_redis`` is the
repro: on 0.4.0 a holder's ``renew()`` returns ``True``, the key is gone, and a second
lock acquires during the first one's lease; on 0.4.1 the key keeps its owner and expiry
and the second acquire is refused.

The store keeps whole seconds (``EXPIRE``), so ``clock_resolution`` is 1 s, and a
sub-second ttl is rounded up to a whole second, as a user would ask for it. Needs
``TASKBOARD_REDIS_URL`` (a redis-server 7+, for ``PEXPIRETIME``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import redis
import sherlock

from taskboard import Clock, Task
from tests.realworld.records import (
    EPOCH,
    KeyedLock,
    RecordBoard,
    Refused,
    board_for,
    virtual_machine,
)

__all__ = ["SherlockRedisDriver", "board"]

_MS = timedelta(milliseconds=1)
_S = timedelta(seconds=1)
#: The expiry asked for a lease without one (``expire=None`` deletes the key, see above).
_FOREVER = 100 * 365 * 24 * 3600

#: KEYS[1] the lock key: {1, PEXPIRETIME} while it exists, else {0, the server's TIME in ms}.
_EXPIRY = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, redis.call('PEXPIRETIME', KEYS[1])}
end
local now = redis.call('TIME')
return {0, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
"""


def _seconds(ttl: timedelta) -> int:
    return int(-(-ttl // _S)) or _FOREVER


class SherlockRedisDriver:
    """A :class:`~tests.realworld.records.ExtendingDriver` over ``sherlock.RedisLock``."""

    def __init__(self, url: str) -> None:
        self.client = redis.StrictRedis.from_url(url)
        self.namespace = f"realworld:{secrets.token_hex(6)}"

    def __repr__(self) -> str:
        return f"SherlockRedisDriver(redis-py {redis.__version__}, {self.namespace!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        lock = sherlock.RedisLock(
            name, client=self.client, namespace=self.namespace, expire=_seconds(ttl)
        )
        if not lock.acquire(blocking=False):
            return None
        return KeyedLock(lock, f"{self.namespace}_{name}")

    def release(self, handle: Any) -> None:
        try:
            handle.lock.release()
        except sherlock.LockException as exc:
            raise Refused(f"LockException: {exc}") from exc

    def extend(self, handle: Any, ttl: timedelta) -> None:
        handle.lock.expire = _seconds(ttl)
        try:
            renewed = handle.lock.renew()
        except sherlock.LockException as exc:  # a lock this object has released
            raise Refused(f"LockException: {exc}") from exc
        if not renewed:
            raise Refused("renew() returned False")

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        held, when = self.client.eval(_EXPIRY, 1, handle.key)
        ms = int(when) + 1 if held else int(when)
        return EPOCH + ms * _MS

    def close(self) -> None:
        keys = self.client.keys(self.namespace + "_*")
        if keys:
            self.client.delete(*keys)
        self.client.connection_pool.disconnect()


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed sherlock's RedisLock on ``TASKBOARD_REDIS_URL``; the
    clock is ignored (Redis's ``EXPIRE`` keeps the time)."""
    return board_for(tasks, SherlockRedisDriver(os.environ["TASKBOARD_REDIS_URL"]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = _S  # type: ignore[attr-defined]
#: ``EXPIRE`` takes whole seconds, and ``EXPIRE <key> 0`` deletes the key: no lease is shorter.
#: An expired key is gone (Redis deletes it), so both releases refuse its release and renewal.
board.expired_lease_policy = "reject"  # type: ignore[attr-defined]


def _repro(url: str) -> None:
    """The bug through the public API alone, step by step."""
    client = redis.StrictRedis.from_url(url)
    namespace = f"repro:{secrets.token_hex(4)}"
    first = sherlock.RedisLock("t", client=client, namespace=namespace, expire=5)
    second = sherlock.RedisLock("t", client=client, namespace=namespace, expire=5)
    key = f"{namespace}_t"
    print(f"A acquire(expire=5): {first.acquire(blocking=False)}; TTL {client.ttl(key)} s")
    print(f"A renew(): {first.renew()}; key {client.get(key)!r}, TTL {client.ttl(key)} s")
    print(f"B acquire(expire=5) during A's lease: {second.acquire(blocking=False)}")
    for name, lock in (("A", first), ("B", second)):
        try:
            lock.release()
            print(f"{name} release(): ok")
        except sherlock.LockException as exc:
            print(f"{name} release(): LockException: {exc}")
    client.delete(key)


if __name__ == "__main__":
    _repro(os.environ.get("TASKBOARD_REDIS_URL", "redis://127.0.0.1:6379/0"))

#: The same driver in virtual mode, on a redis-server of its own on the machine's clock:
#: ``taskboard fuzz tests.realworld.sherlock_redis:virtual --clock virtual``.
virtual = virtual_machine(SherlockRedisDriver, board)
