"""Clocks a board reads its time from (SPEC section 2)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol, get_args, runtime_checkable

__all__ = ["CLOCK_MODES", "Clock", "ClockMode", "ManualClock", "SystemClock"]

#: SPEC 7: where a board's time comes from while it is checked. ``"manual"``: a
#: :class:`ManualClock` that only the checker moves; ``"wall"``: real time, which the
#: board may read from its own server.
ClockMode = Literal["manual", "wall"]
#: The two :data:`ClockMode` values, for checking one read at run time.
CLOCK_MODES: tuple[str, ...] = get_args(ClockMode)

#: Where a :class:`ManualClock` starts when given no start: a fixed instant, so runs repeat.
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


@runtime_checkable
class Clock(Protocol):
    """The only source of time a board may use to compute and judge expiry."""

    def now(self) -> datetime:
        """Return the current time as a timezone-aware UTC datetime."""
        ...


class SystemClock:
    """The machine's wall clock, in UTC."""

    def now(self) -> datetime:
        """Return the current wall-clock time as a timezone-aware UTC datetime."""
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


def as_utc(when: datetime) -> datetime:
    """``when`` as an aware datetime: a naive one, as storage often returns, is read as UTC."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _aware_utc(when: object, what: str) -> datetime:
    if not isinstance(when, datetime):
        raise TypeError(f"{what} must be a datetime, got {when!r}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            f"{what} must be timezone-aware, got naive {when!r}; "
            "pass e.g. datetime(..., tzinfo=datetime.UTC)"
        )
    return when.astimezone(UTC)


class ManualClock:
    """A clock that moves only when told to, and never backwards.

    Thread-safe: a board may read it from many threads while a test moves it.

    Raises:
        TypeError: ``start``, ``when`` or ``delta`` is not a datetime/timedelta.
        ValueError: a naive datetime, a negative ``delta``, or a ``set`` into the past.
    """

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self._now = _aware_utc(start, "ManualClock start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Return the clock's current time (timezone-aware UTC)."""
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward by ``delta`` (zero is allowed) and return the new time."""
        if not isinstance(delta, timedelta):
            raise TypeError(f"ManualClock.advance takes a timedelta, got {delta!r}")
        if delta < timedelta(0):
            raise ValueError(f"ManualClock never goes backwards: advance({delta!r}) is negative")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> datetime:
        """Move the clock to ``when``, which must not be earlier than now, and return it."""
        target = _aware_utc(when, "ManualClock.set")
        with self._lock:
            if target < self._now:
                raise ValueError(
                    f"ManualClock never goes backwards: set({target.isoformat()}) "
                    f"is before now ({self._now.isoformat()})"
                )
            self._now = target
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self.now().isoformat()})"

    def __reduce__(self) -> tuple[type[ManualClock], tuple[datetime]]:
        """Pickle as a new clock at this one's current instant (its lock is not state).

        The copy (in another process, say) moves on its own: moving one clock does
        not move the other.
        """
        return (ManualClock, (self.now(),))
