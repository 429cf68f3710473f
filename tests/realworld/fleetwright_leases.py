"""FleetWright's work leases on SQLite, as released: ``tests.realworld.fleetwright_leases:board``.

FleetWright (published as ``superagentic`` up to 0.20.0 and renamed ``fleetwright`` from
0.21.0, "Same project, same author, new name on PyPI") leases *units* of work out of one
SQLite file. Whichever of ``fleetwright.leases`` and ``superagentic.leases`` is first on
``sys.path`` is the one tested. A unit is a row with ``status``, ``worker``,
``leased_until`` (``time.time() + lease``) and ``lease_token``. ``claim(conn, kind,
lease=…)`` first runs ``reclaim()``, which puts every unit whose ``leased_until`` has
passed back to ``open``, and then leases the next open unit of that kind, or returns
``[]``. ``release(conn, unit_id)`` puts a unit back to ``open`` (``finish`` and ``fail``
close it the same way) and returns ``False`` when "the lease was not yours to close".

The bug (fleetwright 0.21.0, "Fixed — an external audit": "**`finish`, `fail` and
`release` did not check ownership by default.** The predicate was only added when a worker
name was passed, and all three defaulted it to `None` … A stale worker's result overwrote
the live holder's, the live holder was refused"): up to superagentic 0.20.0 the close is
``UPDATE … WHERE unit_id = ? AND status = 'leased'``, so a worker whose lease expired and
was taken over closes the new holder's lease and gets ``True``. ``finish``'s own docstring
example, ``finish(conn, u.unit_id, result=…)``, passes no worker. 0.21.0 defaults the
worker to ``this_worker()`` and adds the per-claim token ("The lease token as a
credential": ``claim`` returns it as ``Unit.token``, and ``finish``, ``fail``, ``release``
and ``heartbeat`` accept ``token=``), and the close then also requires
``lease_token = ?``.

How the driver asks the library:

* **one unit per task, one kind per task.** ``add(conn, task_id, [task_id])`` and
  ``claim(conn, kind=task_id, lease=ttl)``; ``[]`` is "held". All tasks share one SQLite
  file per board, as a fleet shares its ``work.db``.
* **claims are made as this process** (``worker`` left to its default, ``host:pid``), as
  a library user in one process does.
* **release**: ``release(conn, unit_id)``, with ``token=unit.token`` where the release has
  tokens (0.21.0 on); ``False`` is a refusal. In one process every claim has the same
  default worker, so on 0.21.0 the token is what tells two holders apart: without it a
  stale release would pass the worker check there too. 0.20.0 has no token to pass.
* **until**: the unit's ``leased_until`` (a ``time.time()`` float): Python's clock, so
  the default 1 ms skew; precisely, the first microsecond whose ``time.time()`` is past it
  (:func:`ended_after`), which virtual mode judges exactly.
* **no expiry** (ttl 0): a lease of 100 years; the library has no lease without an end.
* **attempts**: each claim counts one, and ``reclaim`` retires an expired unit that has
  used ``max_attempts`` (3) to ``failed`` instead of reopening it. The board claims far
  more often, so the driver raises the limit: ``claim(max_attempts=10**9)`` (0.20.0 passes
  it to ``reclaim``) and ``define(kind, …, max_attempts=10**9)`` where ``define`` takes it
  (0.21.0 moved the limit onto the kind).
* **SPEC 3.4: either.** An expired lease that nobody reclaimed is still ``leased`` with
  its token, and its release goes through; but any claim, of any task, reclaims every
  expired unit in the file first, and then the release is refused.

Renewal: not offered. ``heartbeat`` extends a lease that expired but was not reclaimed
yet, which SPEC 3.5 forbids, in both releases. The file runs with ``PRAGMA synchronous =
OFF`` on the driver's connection: with an fsync per commit a claim took longer than a
5 ms lease.
"""

from __future__ import annotations

import importlib
import inspect
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from taskboard import Clock, Task
from tests.realworld.records import (
    RecordBoard,
    Refused,
    board_for,
    from_timestamp_ns,
    in_process_virtual_machine,
)

__all__ = ["FleetWrightDriver", "board"]


def _library() -> Any:
    """``fleetwright.leases``, or ``superagentic.leases`` (its name up to 0.20.0)."""
    for name in ("fleetwright.leases", "superagentic.leases"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither fleetwright nor superagentic is installed")


leases = _library()
_DIST = leases.__name__.split(".")[0]
#: ``define`` takes the retirement limit from 0.21.0 on; ``release`` takes a token.
_DEFINE_LIMIT = "max_attempts" in inspect.signature(leases.define).parameters
_RELEASE_TOKEN = "token" in inspect.signature(leases.release).parameters
#: More claims than any example makes, so that no unit is retired to ``failed``.
_ATTEMPTS = 10**9
#: The lease for ttl 0 (no expiry): the library has no lease without an end.
_FOREVER = 100 * 365 * 24 * 3600.0


class FleetWrightDriver:
    """A :class:`~tests.realworld.records.LockDriver` over FleetWright's ``leases``."""

    def __init__(self, task_ids: Sequence[str]) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="realworld-fleetwright-"))
        self.conn = leases.connect(self.directory / "work.db")
        self.conn.execute("PRAGMA synchronous = OFF")
        limit = {"max_attempts": _ATTEMPTS} if _DEFINE_LIMIT else {}
        for task_id in task_ids:
            leases.define(self.conn, task_id, f"task {task_id}", **limit)
            leases.add(self.conn, task_id, [task_id])

    def __repr__(self) -> str:
        return f"FleetWrightDriver({_DIST} {_version()}, {str(self.directory)!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        lease = ttl.total_seconds() or _FOREVER
        units = leases.claim(self.conn, name, lease=lease, max_attempts=_ATTEMPTS)
        return units[0] if units else None

    def release(self, handle: Any) -> None:
        token = {"token": handle.token} if _RELEASE_TOKEN else {}
        if not leases.release(self.conn, handle.unit_id, **token):
            raise Refused(f"release({handle.unit_id!r}) returned False")

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        return ended_after(handle.leased_until)

    def close(self) -> None:
        self.conn.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def ended_after(leased_until: float) -> datetime:
    """The first microsecond whose ``time.time()`` is past ``leased_until``: the instant the
    lease ends as the library enforces it (``reclaim`` takes a unit once ``leased_until <
    time.time()``, so it holds through ``leased_until`` itself).

    ``leased_until`` is ``time.time() + lease`` in floating point, up to a quarter of a
    microsecond off the microsecond grid either way today; the microsecond it is rounded to
    may still read as not past it. A microsecond's ``time.time()`` is taken as the virtual
    clock gives it (its ns count over 1e9); on the wall clock the difference is far inside
    a call's window."""
    microseconds = math.floor(leased_until * 1e6) - 1  # the product may round up
    while microseconds * 1000 / 1e9 <= leased_until:
        microseconds += 1
    return from_timestamp_ns(microseconds * 1000)


def _version() -> str:
    from importlib.metadata import version

    return version(_DIST)


def _warm_up() -> None:
    """One claim and release when the module loads, so that the first example's first
    lease does not pay for SQLite's first statements in the process."""
    driver = FleetWrightDriver(["warm-up"])
    try:
        driver.release(driver.acquire("warm-up", timedelta(0), None))
    finally:
        driver.close()


_warm_up()


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed FleetWright (or superagentic), one fresh SQLite file per
    board; the clock is ignored (the library stamps leases with ``time.time()``)."""
    return board_for(tasks, FleetWrightDriver([task.id for task in tasks]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = timedelta(microseconds=1)  # type: ignore[attr-defined]
#: An expired lease is released while it is unreclaimed, refused once any claim reclaimed it.
board.expired_lease_policy = "either"  # type: ignore[attr-defined]

#: The same board in virtual mode: the library's ``time.time()`` and ``datetime.now()`` read
#: the machine's clock during its calls; no server (its locks are in SQLite in this process):
#: ``taskboard fuzz tests.realworld.fleetwright_leases:virtual --clock virtual``.
virtual = in_process_virtual_machine(board)


def _repro() -> None:
    """``python -m tests.realworld.fleetwright_leases`` with a release first on
    ``PYTHONPATH``: A's 50 ms lease expires, B claims the unit, then A releases."""
    driver = FleetWrightDriver(["job"])
    print(f"{_DIST} {_version()}")
    try:
        first = driver.acquire("job", timedelta(milliseconds=50), None)
        print(f"A holds {first.unit_id!r} for 50 ms")
        time.sleep(0.06)
        second = driver.acquire("job", timedelta(seconds=60), first)
        print(f"B holds {second.unit_id!r} after A's lease expired")
        for who, handle in (("A", first), ("B", second)):
            try:
                driver.release(handle)
                print(f"{who}'s release: True")
            except Refused as exc:
                print(f"{who}'s release refused: {exc}")
    finally:
        driver.close()


if __name__ == "__main__":
    _repro()
