"""What a machine class asks for, read once into a frozen value, and checked."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from taskboard._clock import ClockMode
from taskboard.model import ExpiredLeasePolicy
from taskboard.stateful._generation import BELOW_RESOLUTION, OUTLIVING_TTL_TICKS
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._settings import SETTINGS, checked_setting, checked_settings
from taskboard.stateful._trace import NEMESIS_HOOKS
from taskboard.stateful._tracefile import TRACE_DIR_ENV

__all__ = [
    "COARSE_STEP_COUNT",
    "COARSE_UNIT",
    "SNAPSHOT_ATTEMPTS",
    "WALL_LANDING",
    "WALL_LATENCY_ROOM",
    "WALL_LONGEST_WAIT",
    "MachineConfig",
    "hook_defined",
    "hook_stub",
    "wall_ttl_unit",
]

#: On the wall clock, room for a call's own latency in a TTL unit, beyond twice the skew: a
#: lease of one unit is still live, for certain, for the call right after its claim.
WALL_LATENCY_ROOM = timedelta(milliseconds=3)
_MICROSECOND = timedelta(microseconds=1)
#: How often tolerant mode reads a snapshot that an infrastructure fault interrupts.
SNAPSHOT_ATTEMPTS = 5

F = TypeVar("F", bound=Callable[..., Any])


def hook_stub(function: F) -> F:
    """Mark ``function`` as the stub of an optional hook: a class that keeps it does not
    define the hook (see :func:`hook_defined`)."""
    function.__taskboard_stub__ = True  # type: ignore[attr-defined]
    return function


def hook_defined(cls: type, name: str) -> bool:
    """True when ``cls`` defines the hook ``name`` rather than keeping its stub."""
    hook = getattr(cls, name, None)
    return hook is not None and not getattr(hook, "__taskboard_stub__", False)


def wall_ttl_unit(resolution: timedelta, skew: timedelta) -> timedelta:
    """The TTL unit on the wall clock (SPEC 7): the least multiple of ``resolution`` longer than
    a call's uncertainty (twice ``skew``, plus :data:`WALL_LATENCY_ROOM` for the call itself),
    so that a drawn lease is seen live before its ``until`` and expired after it."""
    span = 2 * skew + WALL_LATENCY_ROOM
    return max(resolution, -(-span // resolution) * resolution)


#: On the wall clock, ``at_expiry`` waits for leases that end within this many TTL units; a
#: longer lease outlives the example, as a lease of 10,000 ticks does on a manual clock.
WALL_LONGEST_WAIT = 8
#: On the wall clock, how far past a lease's ``until`` (beyond the skew and the resolution)
#: ``at_expiry`` lands, so that the call's window lies wholly after it.
WALL_LANDING = timedelta(microseconds=200)
#: A TTL unit at least this long is coarse (a store that keeps whole seconds, a long shortest
#: lease): every unit the schedule waits is then a real wait, so it waits fewer.
COARSE_UNIT = timedelta(milliseconds=100)
#: On a coarse unit, the most units ``at_expiry`` waits for a lease's end, and a clock step
#: sleeps: leases of one or two units still expire within the example.
COARSE_LONGEST_WAIT = 2
#: On a coarse unit, how many units one example's clock steps may sleep in all (jumps to a
#: lease's end aside); later ones leave the clock where it is. An example then costs
#: seconds, not minutes, on a whole-second store.
COARSE_WAIT_BUDGET = 6
#: On a coarse unit, the most steps ``taskboard fuzz`` gives an example: a shorter example
#: fits the wait budget, and its failure shrinks in fewer, shorter runs. At 25, an example
#: was a quarter of a virtual-mode one (100): per step, wall mode met a ttl-0 renew of a live
#: current lease as often, but python-redis-lock 3.5.0's ``extend(0)`` took 9 to 106
#: examples (seeds 1-5) against 3 to 8 at 50, and an example costs less than twice as much
#: (the clock steps' sleep is budgeted): docs/power.md.
COARSE_STEP_COUNT = 50


@dataclass(frozen=True)
class MachineConfig:
    """Everything a run of one machine class reads from it, once, as :meth:`of` checks it.

    The class attributes are documented on :class:`~taskboard.stateful.BoardMachine`; this is
    them as one value, with what follows from them (the TTL unit, the nemesis steps that run,
    whether clients are opened, where traces go)."""

    #: The machine class's name, for messages.
    name: str
    clock_mode: ClockMode
    #: ``clock_resolution``: the smallest time step the store keeps.
    resolution: timedelta
    #: ``clock_skew``: in wall mode, how far the board's clock may be from the machine's.
    skew: timedelta
    #: ``client_clock_skew``: in wall mode, how far each client's ``time.time()`` is shifted.
    client_skew: timedelta
    #: ``keep_alive_interval``: the board renews every lease by itself, at least this often,
    #: until its holder gives it up (``None``: it does not).
    keep_alive: timedelta | None
    #: ``shortest_lease``: the shortest lease the store honours (zero: any).
    shortest_lease: timedelta
    #: ``lease_limits``: what leases the store can hold, as declared (``None``: any).
    limits: LeaseLimits | None
    #: ``expired_lease_policy``: SPEC 3.4.
    policy: ExpiredLeasePolicy
    call_timeout: timedelta | None
    tolerate_faults: bool | tuple[type[Exception], ...]
    #: ``answers_vary``: the board's answers to the same steps may differ between runs.
    answers_vary: bool
    durable: bool
    #: The nemesis steps (SPEC 9) the class defines hooks for, and those that run as rules.
    defined_nemesis: tuple[str, ...]
    nemesis: tuple[str, ...]
    #: SPEC 8: the class defines ``open_client``.
    clients: bool
    #: SPEC 8: each thread of a parallel program runs in a process of its own.
    processes: bool
    #: ``race_scheduling``: ``"controlled"`` runs a parallel program's threads one at a time
    #: at their storage round trips, in a drawn order; ``"os"`` lets them run at once.
    race_scheduling: str
    #: ``race_exploration``: ``"random"`` (a drawn choice at each point) or ``"pct"``
    #: (drawn priorities and change points), for a controlled race.
    race_exploration: str
    #: ``pct_depth``: with PCT, one more than the change points drawn per program.
    pct_depth: int
    #: Where failing traces go: ``trace_dir``, else ``TASKBOARD_TRACE_DIR``, else nowhere.
    trace_dir: str | None
    #: ``module:Name`` that trace files record as what to replay against (``""``: none).
    trace_target: str

    @property
    def wall(self) -> bool:
        """SPEC 7: time is the wall clock's; calls are judged on windows, clock rules sleep."""
        return self.clock_mode == "wall"

    @property
    def outcomes_vary(self) -> bool:
        """True when one example's outcomes may differ between its runs: on the wall clock,
        when faults are tolerated (a dropped connection, a restart's timing), and on a board
        whose allowed choices vary (``answers_vary``). What Hypothesis draws must then not
        depend on outcomes, or a replay is flaky."""
        return self.wall or self.tolerate_faults is not False or self.answers_vary

    @property
    def ttl_unit(self) -> timedelta:
        """What a drawn TTL or clock step counts in: the resolution, or on the wall clock the
        least multiple of it that outlasts a call's uncertainty; in both, no shorter than the
        shortest lease the store honours (rounded up to the resolution)."""
        unit = wall_ttl_unit(self.resolution, self.skew) if self.wall else self.resolution
        shortest = -(-self.shortest_lease // self.resolution) * self.resolution
        return max(unit, shortest)

    @property
    def past_until(self) -> timedelta:
        """On the wall clock, how far past a lease's ``until`` a call's window lies wholly
        after it: the skew, one resolution and :data:`WALL_LANDING`."""
        return self.skew + self.resolution + WALL_LANDING

    @property
    def coarse(self) -> bool:
        """On the wall clock, a TTL unit of :data:`COARSE_UNIT` or more: waits are scaled down."""
        return self.wall and self.ttl_unit >= COARSE_UNIT

    @property
    def longest_wait(self) -> int:
        """On the wall clock, how many TTL units ``at_expiry`` (and a parallel program) waits
        for a lease's end at most; on a coarse unit also the most a clock step sleeps."""
        return COARSE_LONGEST_WAIT if self.coarse else WALL_LONGEST_WAIT

    @property
    def longest_clock_step(self) -> int:
        """The most whole TTL units a clock step moves: one on a coarse unit, where each is a
        real wait; otherwise any the rule draws."""
        return COARSE_LONGEST_WAIT - 1 if self.coarse else OUTLIVING_TTL_TICKS

    @property
    def wait_budget(self) -> timedelta | None:
        """On a coarse unit, the most one example's clock steps sleep in all (jumps to a
        lease's end aside); ``None``: no limit."""
        return COARSE_WAIT_BUDGET * self.ttl_unit if self.coarse else None

    def lease_ttl(self, ticks: int) -> timedelta:
        """The TTL of a lease of ``ticks`` drawn ticks; on a coarse unit a short lease (0 and
        the longest aside) lasts at most :attr:`longest_wait` units, so that it ends within
        the example's wait budget. :data:`BELOW_RESOLUTION` is half the resolution (one
        resolution of a microsecond), or one tick where the store declares a shortest lease
        longer than that."""
        if ticks == BELOW_RESOLUTION:
            below = max(self.resolution // 2, _MICROSECOND)
            return below if self.shortest_lease <= below else self.ttl_unit
        if self.coarse and 0 < ticks < OUTLIVING_TTL_TICKS:
            ticks = min(ticks, self.longest_wait)
        return ticks * self.ttl_unit

    def ttl_class(self, ttl: timedelta) -> str:
        """Which boundary a requested TTL is: ``"0"`` (no expiry), ``"below one unit"`` (a
        TTL the store cannot keep exactly: below its resolution or its shortest lease),
        ``"one unit"``, or ``"longer"``."""
        if not ttl:
            return "0"
        if ttl < self.ttl_unit:
            return "below one unit"
        return "one unit" if ttl == self.ttl_unit else "longer"

    @property
    def outliving(self) -> timedelta:
        """The TTL of a lease that outlives any example (:data:`OUTLIVING_TTL_TICKS`)."""
        return self.lease_ttl(OUTLIVING_TTL_TICKS)

    @property
    def snapshot_attempts(self) -> int:
        """How often a snapshot is read: again after a fault, in tolerant mode."""
        return SNAPSHOT_ATTEMPTS if self.tolerate_faults else 1

    def tolerates(self, fault: Exception) -> bool:
        """True when tolerant mode fuzzes through ``fault``.

        A call that timed out, here or in the driver, may still land later (a query the
        server goes on with), so no snapshot can settle it: timeouts are never tolerated."""
        if isinstance(fault, TimeoutError):
            return False
        tolerated = self.tolerate_faults
        return tolerated if isinstance(tolerated, bool) else isinstance(fault, tolerated)

    @classmethod
    def of(cls, machine: type) -> MachineConfig:
        """The configuration of the machine class ``machine``, from its class attributes (the
        settings of :data:`~taskboard.stateful._settings.SETTINGS`).

        Raises:
            TypeError: ``make_board`` is missing, or a setting (``clock_resolution``,
                ``clock_mode``, ``clock_skew``, ``client_clock_skew``, ``shortest_lease``,
                ``keep_alive_interval``, ``expired_lease_policy``, ``call_timeout``,
                ``tolerate_faults``, ``durable``, ``nemesis``, ...) has a value the machine
                cannot use.
        """
        name = machine.__qualname__
        if not hook_defined(machine, "make_board"):
            raise TypeError(
                f"{name} must define make_board(self, tasks, clock) returning a "
                "fresh Board that holds `tasks` and reads time only from `clock`"
            )
        values = checked_settings(machine)
        defined = defined_nemesis(machine)
        # What follows from a setting and the class, or the environment.
        values.update(
            shortest_lease=values["shortest_lease"] or timedelta(0),
            nemesis=chosen_nemesis(machine, defined),
            trace_dir=values["trace_dir"] or os.environ.get(TRACE_DIR_ENV) or None,
        )
        if values["trace_target"] is None:
            values["trace_target"] = f"{machine.__module__}:{name}"
        return cls(
            name=name,
            defined_nemesis=defined,
            clients=hook_defined(machine, "open_client"),
            **{setting.config: values[setting.name] for setting in SETTINGS},
        )


def defined_nemesis(machine: type) -> tuple[str, ...]:
    """The nemesis steps (SPEC 9) ``machine`` can run: ``"restart"`` when it defines
    ``restart_storage``, ``"drop"`` when it defines ``drop_connections``."""
    return tuple(kind for kind, hook in NEMESIS_HOOKS.items() if hook_defined(machine, hook))


def chosen_nemesis(machine: type, defined: tuple[str, ...]) -> tuple[str, ...]:
    """The nemesis steps ``machine`` runs as rules: its ``nemesis``, or every defined one.

    Raises:
        TypeError: ``nemesis`` is not a tuple of ``"restart"`` and ``"drop"``, or names a
            step whose hook the class does not define.
    """
    name = machine.__qualname__
    chosen: tuple[str, ...] | None = checked_setting(machine, "nemesis")
    if chosen is None:
        return defined
    undefined = [NEMESIS_HOOKS[k] for k in chosen if k not in defined]
    if undefined:
        raise TypeError(
            f"{name}.nemesis asks for {', '.join(chosen)}, but the class defines no "
            f"{' or '.join(undefined)}(self, board)"
        )
    return tuple(dict.fromkeys(chosen))
