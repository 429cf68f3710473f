"""``clock_mode = "virtual"``: the manual clock, followed by the clock of the machine's server.

Each example starts on an empty server (``flush``) whose clock is the example's start, and
every move of the example's clock moves the server's before the next call is made.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from taskboard._clock import Clock, FollowedClock
from taskboard._virtual._process_time import on_virtual_clock
from taskboard._virtual._servers import VirtualServer
from taskboard.model import Call

__all__ = ["VirtualTime", "example_start", "virtual_clock"]

_MICROSECOND = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)


def example_start(drawn: datetime, server_now: datetime, tick: timedelta) -> datetime:
    """The drawn start, moved forward by whole periods until the server's clock has not
    passed it.

    The server's clock never goes back, and the previous example (or the real time the
    server started at) left it somewhere after most drawn starts; the board reads its untils
    from that clock, so the machine's clock must be the server's, not an offset from it.
    A period is the least common multiple of the resolution and one second, so the moved
    start sits where the drawn one did on the resolution grid and within its second (what a
    whole-second store rounds by): the example runs the same, only later. A replay of its
    trace starts later in the same way, which replays already allow for (their ``shift``).
    """
    period = math.lcm(tick // _MICROSECOND, _SECOND // _MICROSECOND) * _MICROSECOND
    behind = server_now - drawn
    periods = max(0, -(-behind // period))
    return drawn + periods * period


def virtual_clock(hooks: Any, start: datetime, tick: timedelta) -> FollowedClock:
    """The clock of one example in virtual mode: the machine's server emptied, its clock set
    to the (moved) start, and a manual clock that moves it along.

    Raises:
        TypeError: the machine names no ``server`` that can follow its clock.
    """
    server = getattr(hooks, "server", None)
    if not isinstance(server, VirtualServer):
        raise TypeError(
            f"{type(hooks).__qualname__}.clock_mode = 'virtual' needs a server whose clock "
            "the machine moves: set server = taskboard.servers.Redis() (or .Postgres(), or "
            ".NoServer() for a library on this process's clock) on the class, or run "
            f"taskboard fuzz with --server redis|postgres (got {server!r})"
        )
    begin = example_start(start, server.now(), tick)
    # Emptied first: a key of the previous example must not outlive it into this one.
    server.flush()
    return FollowedClock(begin, server.set_time)


@dataclass(frozen=True)
class VirtualTime:
    """The interceptor that runs each board call of a virtual-mode run on the machine's
    clock: a library's own ``time.time()``, ``datetime.now()`` and ``time.monotonic()``
    read the instant the call is made at (see :mod:`taskboard._virtual._process_time`).
    It pickles (the clock as a copy at its instant), so worker processes install it too."""

    clock: Clock

    def __call__(self, call: Call) -> Generator[None, object, None]:
        with on_virtual_clock(self.clock.now()):
            yield
