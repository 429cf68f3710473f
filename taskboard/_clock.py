"""Clocks a board reads its time from (SPEC section 2)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol, get_args, runtime_checkable

__all__ = ["CLOCK_MODES", "Clock", "ClockMode", "FollowedClock", "ManualClock", "SystemClock"]

#: SPEC 7: where a board's time comes from while it is checked. ``"manual"``: a
#: :class:`ManualClock` that only the checker moves; ``"virtual"``: the same, and each move
#: also moves the clock of the machine's server (``taskboard.servers``); ``"wall"``: real
#: time, which the board may read from its own server.
ClockMode = Literal["manual", "virtual", "wall"]
#: The :data:`ClockMode` values, for checking one read at run time.
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


class FollowedClock(ManualClock):
    """A :class:`ManualClock` that hands each instant it moves to to ``follow``, before the
    move returns: in ``clock_mode = "virtual"`` the follower is a server's ``set_time``, so
    the server reads the new time from its very next command.

    ``follow`` is told the start too. Moves are serialized, so the follower hears them in
    order. Pickled, it is a plain ManualClock (a copy in another process moves nothing).
    """

    def __init__(self, start: datetime, follow: Callable[[datetime], object]) -> None:
        super().__init__(start)
        self._follow = follow
        self._moving = threading.Lock()
        follow(self.now())

    def advance(self, delta: timedelta) -> datetime:
        """Move forward by ``delta`` (see :meth:`ManualClock.advance`), then the follower."""
        with self._moving:
            now = super().advance(delta)
            self._follow(now)
            return now

    def set(self, when: datetime) -> datetime:
        """Move to ``when`` (see :meth:`ManualClock.set`), then the follower."""
        with self._moving:
            now = super().set(when)
            self._follow(now)
            return now
