"""The checker's own process on the virtual clock: what a library reads as the time while the
machine calls it.

In ``clock_mode = "virtual"`` every board call runs inside :func:`on_virtual_clock`, given the
machine's clock reading. Inside it:

* ``time.time()``, ``time.time_ns()``, ``datetime.now()`` and ``datetime.utcnow()`` read that
  instant, in every thread of the process, through time-machine (``taskboard-contract[virtual]``),
  which patches them at the C level: code that did ``from datetime import datetime`` or
  ``from time import time`` reads it too. Without time-machine installed only
  ``time.time()`` and ``time.time_ns()`` looked up on the module (``import time``) read it,
  and only in the thread making the call.
* ``time.monotonic()`` and ``time.monotonic_ns()``, looked up on the module, read a monotonic
  clock that stands still within a call and, from one call to the next, moves exactly as far
  as the machine's clock did (not at all when the machine's clock is behind an earlier call's:
  another machine's server); it never goes back. Only in the thread making the call: the
  checker's own threads (the per-call timeout's watchdog) and asyncio's loop (its timers, a
  library's ``asyncio.sleep``) keep the real monotonic clock.

Calls of racing threads meet one instant (the machine does not move its clock during a race,
but for a controlled expiry race's one move between two turns: a call that spans it keeps the
instant it started at), so calls may overlap: the patches stay until the last one ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

__all__ = ["covers_datetime", "on_virtual_clock"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NANOSECOND_PER_MICRO = 1000

_real_time = time.time
_real_time_ns = time.time_ns
_real_monotonic = time.monotonic
_real_monotonic_ns = time.monotonic_ns

_time_machine: ModuleType | None
try:
    import time_machine as _time_machine
except ImportError:  # pragma: no cover - the extra is installed where the suite runs
    _time_machine = None

_guard = threading.Lock()
_local = threading.local()
#: How many calls are inside :func:`on_virtual_clock` now, in all threads.
_active = 0
#: The time-machine journey and its traveller while calls are inside, and the instant it
#: holds (ns since the epoch).
_journey: Any = None
_traveller: Any = None
_travelled_ns = 0
#: The last instant a call was made at (ns since the epoch) and the virtual monotonic
#: reading it got: the next call's reading moves from there as the machine's clock did.
_anchor: tuple[int, int] | None = None


def covers_datetime() -> bool:
    """True when ``datetime.now()``/``utcnow()`` and ``from``-imported functions read the
    virtual clock too (time-machine is installed)."""
    return _time_machine is not None


def _nanos(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1) * _NANOSECOND_PER_MICRO


def _virtual_time() -> float:
    nanos = getattr(_local, "wall_ns", None)
    return _real_time() if nanos is None else nanos / 1e9


def _virtual_time_ns() -> int:
    nanos = getattr(_local, "wall_ns", None)
    return _real_time_ns() if nanos is None else int(nanos)


def _virtual_monotonic() -> float:
    nanos = getattr(_local, "monotonic_ns", None)
    return _real_monotonic() if nanos is None else nanos / 1e9


def _virtual_monotonic_ns() -> int:
    nanos = getattr(_local, "monotonic_ns", None)
    return _real_monotonic_ns() if nanos is None else int(nanos)


def _monotonic_at(wall_ns: int) -> int:
    """The virtual monotonic reading for a call at ``wall_ns`` (under ``_guard``)."""
    global _anchor
    if _anchor is None:
        reading = _real_monotonic_ns()
    else:
        last_wall, last_reading = _anchor
        reading = last_reading + max(0, wall_ns - last_wall)
    _anchor = (wall_ns, reading)
    return reading


def _enter(now: datetime, wall_ns: int) -> int:
    """Count one more call in, patch what the first one patches; its monotonic reading."""
    global _active, _journey, _traveller, _travelled_ns
    with _guard:
        if _active == 0:
            time.time, time.time_ns = _virtual_time, _virtual_time_ns
            time.monotonic, time.monotonic_ns = _virtual_monotonic, _virtual_monotonic_ns
            if _time_machine is not None:
                _journey = _time_machine.travel(now, tick=False)
                _traveller = _journey.start()
                _travelled_ns = wall_ns
        elif _traveller is not None and wall_ns > _travelled_ns:
            # Overlapping calls (racing threads) share one instant; a later one only moves
            # it forward, so no thread's time goes back.
            _traveller.shift(timedelta(microseconds=(wall_ns - _travelled_ns) // 1000))
            _travelled_ns = wall_ns
        _active += 1
        return _monotonic_at(wall_ns)


def _leave() -> None:
    global _active, _journey, _traveller
    with _guard:
        _active -= 1
        if _active == 0:
            time.time, time.time_ns = _real_time, _real_time_ns
            time.monotonic, time.monotonic_ns = _real_monotonic, _real_monotonic_ns
            if _journey is not None:
                _journey.stop()
                _journey = _traveller = None


@contextmanager
def on_virtual_clock(now: datetime) -> Iterator[None]:
    """Within the block, this process reads ``now`` (aware) as the time (see the module).

    A block nested in another in one thread reads its own instant, and the outer one's is
    back after it.
    """
    wall_ns = _nanos(now)
    reading = _enter(now, wall_ns)
    outer = (getattr(_local, "wall_ns", None), getattr(_local, "monotonic_ns", None))
    _local.wall_ns, _local.monotonic_ns = wall_ns, reading
    try:
        yield
    finally:
        _local.wall_ns, _local.monotonic_ns = outer
        _leave()
