"""portalocker's ``TemporaryFileLock``, as released: ``tests.realworld.portalocker_tempfile:board``.

Whichever portalocker is first on ``sys.path`` is the one tested. A ``TemporaryFileLock``
is an OS lock (``flock``) on a file that exists only while the lock is held: ``release()``
unlocks and closes the file, then unlinks its path.

The bug (3.2.0): ``release()`` of a lock object that holds nothing still unlinks the path.
A stale object (a double release: A released, B took the lock, A's ``finally`` releases
again) deletes B's lock file; the next ``acquire`` creates a new file at the path and
locks it while B still holds the old one, so two agents hold the lock. 4.0.0 fixed it with
the unlock-then-unlink race of the same release method (#115): "``TemporaryFileLock.release()``
and ``PidFileLock.release()`` are now no-ops when the object does not hold the lock, so a
stale object (double release, ...) can no longer unlink the lock file out from under the
current holder". The race itself (a waiter that opened the old file before the unlink)
needs three processes in a window of microseconds; the stale release is the same
release's bug in one thread.

How the driver asks the library:

* **claim**: ``TemporaryFileLock(path, fail_when_locked=True, timeout=0)`` and
  ``acquire()``; ``AlreadyLocked`` is "held". The lock never expires, so a claim with a
  TTL is answered ``NotImplementedError`` (the protocol's ``unsupported``), from which the
  run learns to ask for leases without expiry only (``LeaseLimits``).
* **release**: ``lock.release()``, always, as a double release calls it. Neither release
  raises or returns anything for an object that holds nothing; a user learns that from
  the object's public ``fh`` (``None`` once released), read before the call, and the
  driver reports such a release as refused.

Renewal: not offered (a lock without expiry has nothing to renew).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import portalocker

from taskboard import Clock, Task
from tests.realworld.records import RecordBoard, Refused, board_for, in_process_virtual_machine

__all__ = ["TempFileLockDriver", "board"]


class TempFileLockDriver:
    """A :class:`~tests.realworld.records.LockDriver` over ``portalocker.TemporaryFileLock``."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="realworld-portalocker-"))
        self._locks: list[Any] = []

    def __repr__(self) -> str:
        version = portalocker.__about__.__version__
        return f"TempFileLockDriver(portalocker {version}, {str(self.directory)!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        if ttl:
            raise NotImplementedError("a TemporaryFileLock never expires: no lease with a TTL")
        lock = portalocker.TemporaryFileLock(
            str(self.directory / f"{name}.lock"), timeout=0, fail_when_locked=True
        )
        try:
            lock.acquire()
        except portalocker.AlreadyLocked:
            return None
        self._locks.append(lock)
        return lock

    def release(self, handle: Any) -> None:
        held = handle.fh is not None
        handle.release()
        if not held:
            raise Refused("the lock object held nothing (released before)")

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        return None

    def close(self) -> None:
        for lock in self._locks:
            if lock.fh is not None:
                lock.release()
        shutil.rmtree(self.directory, ignore_errors=True)


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed portalocker's TemporaryFileLock in a fresh temporary
    directory; the clock is ignored (nothing expires)."""
    return board_for(tasks, TempFileLockDriver())


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = timedelta(microseconds=1)  # type: ignore[attr-defined]

#: The same driver in virtual mode: nothing in it reads a clock, so it is the wall-mode
#: factory on the machine's clock (``--clock virtual``).
virtual = in_process_virtual_machine(board)
