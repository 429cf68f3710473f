"""filelock's ``SoftFileLock(lifetime=ttl)``, as released: ``tests.realworld.filelock_soft:board``.

Whichever filelock is first on ``sys.path`` is the one tested. A soft lock is a marker file
created with ``O_CREAT | O_EXCL``; with ``lifetime`` (3.24.0+) a *waiter* breaks a marker
whose ``time.time() - st_mtime >= lifetime`` and creates its own.

The bug (REPORT #9, 3.24.0 … 3.29.5): once B has taken over A's expired lock, A's
``release()`` unlinks the marker by path and so deletes B's lock; a third agent then
acquires while B holds. 3.30.0 (#614) records the marker's (device, inode) at acquire
and unlinks only its own.

Wall mode only: the age is ``time.time()`` minus a timestamp the kernel stamps on its own
clock, which no clock in the checker's process moves, so there is no ``virtual`` machine
(``Entry.wall_only``; ``docs/real-bugs.md``).

How the driver asks the library:

* **claim**: ``SoftFileLock(path, lifetime=L, thread_local=False).acquire(blocking=False)``;
  ``filelock.Timeout`` is "held". ``lifetime`` is the waiter's setting, not the holder's:
  the library breaks a marker older than *the waiter's* lifetime. So that a lease ends
  when its own ``ttl`` says (SPEC 2), the waiter is built with the lifetime of the lease
  the record shows (the previous claim's ttl; none for a lease without expiry, or for a
  task no one holds). That is how a user with one lifetime per lock path calls it.
* **until**: the new marker's ``st_mtime`` + ``lifetime``, exactly the instant from which
  the library lets a waiter break it. The filesystem stamps ``st_mtime`` from the
  kernel's coarse clock, up to a tick (4 ms here) behind ``time.time()``: hence
  ``clock_skew`` = 5 ms.
* **release**: ``lock.release()``. Neither release raises or returns anything when the
  marker is no longer this lock's: 3.29.5 deletes the successor's marker, 3.30.0 leaves
  it. A user learns which through the public ``lock.pid`` (the PID the marker at the
  path names; ``None`` once there is no marker): a marker still there after the release
  belongs to someone else, so the release did not give up the lock, and the driver
  reports it as refused. On 3.29.5 the marker is gone (it deleted B's), so the stale
  release reads as a success, which is what it was.

Renewal: not offered (``SoftFileLock`` has no ``extend`` or ``touch`` in either release).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import filelock

from taskboard import Clock, Task
from tests.realworld.records import RecordBoard, Refused, board_for, from_timestamp_ns

__all__ = ["SoftLockDriver", "board"]


@dataclass
class _Held:
    lock: Any
    #: The lease's length in seconds, ``None`` for no expiry: the lifetime the next waiter uses.
    lifetime: float | None


class SoftLockDriver:
    """A :class:`~tests.realworld.records.LockDriver` over ``filelock.SoftFileLock``."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="realworld-softlock-"))
        self._held: list[_Held] = []

    def __repr__(self) -> str:
        return f"SoftLockDriver(filelock {filelock.__version__}, {str(self.directory)!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        with warnings.catch_warnings():
            # 3.30 warns that age-based expiry can overlap a live holder: that is the lease.
            warnings.simplefilter("ignore")
            lock = filelock.SoftFileLock(
                str(self.directory / f"{name}.lock"),
                lifetime=None if prior is None else prior.lifetime,
                thread_local=False,
            )
        try:
            lock.acquire(blocking=False)
        except filelock.Timeout:
            return None
        held = _Held(lock, ttl.total_seconds() or None)
        self._held.append(held)
        return held

    def release(self, handle: Any) -> None:
        handle.lock.release()
        if handle.lock.pid is not None:
            raise Refused(f"the marker is still there after the release (pid {handle.lock.pid})")

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        return from_timestamp_ns(Path(handle.lock.lock_file).lstat().st_mtime_ns) + ttl

    def close(self) -> None:
        for held in self._held:
            held.lock.release(force=True)
        shutil.rmtree(self.directory, ignore_errors=True)


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed filelock's SoftFileLock in a fresh temporary directory;
    the clock is ignored (the library reads ``time.time()`` and the file's mtime)."""
    return board_for(tasks, SoftLockDriver())


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = timedelta(microseconds=1)  # type: ignore[attr-defined]
#: st_mtime comes from the kernel's coarse clock, up to a tick behind time.time().
board.clock_skew = timedelta(milliseconds=5)  # type: ignore[attr-defined]
#: An expired marker nobody broke is still this lock's: its release removes it.
board.expired_lease_policy = "accept"  # type: ignore[attr-defined]
