"""Controlled scheduling of racing threads at their storage round trips.

Under a :class:`RaceScheduler`, the participants of a race run one at a time. Each one
stops at its start and before each round trip to its store (a *scheduling point*: a SQLite
statement, a redis-py command, a psycopg statement, or a :func:`yield_point` the board
marks), and the scheduler lets exactly one stopped participant go on until its next point.
Which one is a choice read from a list of numbers drawn by Hypothesis, or (PCT,
:class:`Priorities`) the highest of drawn priorities, so an interleaving is data: shrunk,
stored in the example database, written to trace files and replayed exactly. The points
themselves are installed by :mod:`taskboard._roundtrips`; this module only knows that a
thread of a controlled race has reached one. On an async board each participant's calls
are coroutines on the board's event loop: they carry their race in a context variable, and
a point there (:func:`async_round_trip`) awaits its turn instead of blocking the loop.

A participant may block inside its store while it runs (a row lock another participant
holds, stopped at its next point). Where its round trip tells how to ask the store whether
it waits on another's lock (:func:`note_lock_probe`: PostgreSQL's ``pg_blocking_pids``),
the scheduler asks while it waits and, once the store says so, schedules the others at once;
before each later turn it asks again, and a participant the store let go is waited for
until it reaches its next point, so the interleaving stays exact. Otherwise the scheduler
waits :data:`STEP_TIMEOUT` seconds for it to reach its next point and, when it does not,
lets it run free and schedules the others; it joins the schedule again at its next point.
A round trip that reports the store busy instead of waiting (SQLite, whose busy handler
the points replace) makes the participant wait at the same point, not chosen again until
another has made progress; when every participant left is waiting so, the one that has
waited longest is told to give up, as its busy timeout would tell it. The checker never
deadlocks: at the race's deadline every participant is let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CLOCK",
    "STEP_TIMEOUT",
    "Priorities",
    "RaceScheduler",
    "Turn",
    "forwarding_yield_points",
    "note_call",
    "note_lock_probe",
    "round_trip",
    "under_control",
    "yield_point",
]

#: Seconds a chosen participant may take to reach its next point before the scheduler counts
#: it as blocked inside its store and lets it run free.
STEP_TIMEOUT = 0.5
#: Seconds between two questions to the store whether a participant waits on a lock.
PROBE_INTERVAL = 0.002

#: What a participant's first turn is labelled: it leaves the start line.
START = "start"
#: What a PCT change point is drawn as: a fraction of the expected choices, in thousandths.
CHANGE_POINT_SCALE = 1000
#: Under PCT, turns one participant may take in a row while another could go on, before it
#: drops below every other: a participant that spins on a lock a lower one holds would
#: otherwise starve it until the race's deadline.
MOST_TURNS_IN_A_ROW = 16
#: The ``agent`` of the :class:`Turn` that records the clock's move (see ``crossing``).
CLOCK = -1

_State = Literal["new", "waiting", "running", "blocked", "free", "done"]


@dataclass(frozen=True)
class Turn:
    """One step of a controlled race: participant ``agent``, in its call number ``call``
    (from 0), went on from ``point``, the round trip it was about to make, to its next. The
    clock's move is a turn too: its ``agent`` is :data:`CLOCK` and its ``point`` says where
    the clock went."""

    agent: int
    call: int
    point: str
    #: The last try of this round trip had found the store busy: the participant tries again.
    again: bool = False
    #: ... and this time it gave up on it, as its busy timeout would have.
    gave_up: bool = False


@dataclass(frozen=True)
class Priorities:
    """A PCT schedule (probabilistic concurrency testing): drawn priorities and change points.

    Participant ``i`` starts with the priority ``len(ranks) - ranks[i]`` (``ranks`` from 0,
    distinct: rank 0 is the highest), and at each point the highest-priority participant
    that may go on goes on. Before each choice a change point names, the participant that
    ran last drops below every other (below those dropped before it, too). A change point
    ``c`` (of :data:`CHANGE_POINT_SCALE`) names choice ``1 + c * expected_turns // SCALE``.
    With ``d - 1`` change points drawn at random among ``k`` steps, PCT finds a bug of depth
    ``d`` among ``n`` participants with probability at least ``1 / (n * k ** (d - 1))``.
    Turns count only choices here (points where more than one participant may go on), so
    ``expected_turns`` is the choices expected.
    """

    ranks: tuple[int, ...]
    change_points: tuple[int, ...]
    #: How many choices the race is expected to give: where the change points fall.
    expected_turns: int

    def turns(self) -> tuple[int, ...]:
        """The choices (from 0) before which a change point drops the last participant."""
        span = max(self.expected_turns, 1)
        return tuple(sorted(1 + c * span // CHANGE_POINT_SCALE for c in self.change_points))

    def varied(self, variant: int) -> Priorities:
        """Another PCT schedule of the same shape, for ``variant`` (from 1): the ranks
        permuted and the change points shifted by a fixed pseudo-random sequence of its own."""
        rng = random.Random(variant)
        shuffle = list(range(len(self.ranks)))
        rng.shuffle(shuffle)
        moved = tuple(
            (change + rng.randrange(CHANGE_POINT_SCALE)) % CHANGE_POINT_SCALE
            for change in self.change_points
        )
        return Priorities(tuple(shuffle[rank] for rank in self.ranks), moved, self.expected_turns)

    def describe(self) -> str:
        """In words, for reports and trace files."""
        turns = ", ".join(map(str, self.turns())) or "none"
        return (
            f"pct depth {len(self.change_points) + 1}: ranks {list(self.ranks)}, "
            f"change points before choices {turns} (of {self.expected_turns} expected)"
        )


class _Participant:
    def __init__(self) -> None:
        self.state: _State = "new"
        self.point = START
        self.call = 0
        #: The decision count when it found its store busy (``None``: it did not).
        self.busy_since: int | None = None
        #: It waits to try again a round trip that found the store busy.
        self.again = False
        self.give_up = False
        #: Asks the store whether the round trip under way waits on another's lock.
        self.lock_probe: Callable[[], bool] | None = None
        #: Resumes its coroutine, waiting at a point on an event loop (from any thread).
        self.wake: Callable[[], None] | None = None


class _Local(threading.local):
    scheduler: RaceScheduler | None = None
    index = -1
    #: Where this thread's :func:`yield_point` goes when it is no participant: a process that
    #: serves a board over the protocol hands it to the checker, which schedules it.
    forward: Callable[[str], None] | None = None


_LOCAL = _Local()
#: The race and participant of a participant's thread, and so of each coroutine it runs on
#: an event loop: a task copies the context of the thread that submits it.
_CONTEXT: ContextVar[tuple[RaceScheduler, int] | None] = ContextVar("taskboard_race", default=None)


class RaceScheduler:
    """Runs the participants of one race one at a time, at their scheduling points.

    ``choices`` is the drawn schedule. At each point where more than one participant may go
    on, the next number ``c`` of it picks the ``c``-th of them (modulo their count), counting
    from the one after the participant that ran last: a choice of 0 is round robin, and so
    is every choice after the list runs out, which keeps a participant that spins on a lock
    from starving the one holding it.

    ``crossing``, if given, is ``(turn, move)``: ``move()`` is called once, before the turn
    of that number (from 0) is granted, if it is, while every participant is stopped at a
    point or done; what it returns names the move in :attr:`turns` (a :data:`CLOCK` turn).
    The clock then moves between two round trips: a manual or virtual clock jumps there, a
    race on the wall clock sleeps until the instant it must cross.

    ``variant`` (from 1) adds to each choice a number of a fixed pseudo-random sequence of
    its own, so that one drawn schedule gives several distinct interleavings; 0 adds none.
    :attr:`realized` is what was picked at each choice, as a schedule that gives the same
    interleaving with no variant.

    ``pct``, if given, picks instead of ``choices``: the highest-priority participant that
    may go on (see :class:`Priorities`; a ``variant`` then varies the priorities). The picks
    are recorded in :attr:`realized` all the same, so a replay needs only them.
    """

    def __init__(
        self,
        participants: int,
        choices: Sequence[int],
        step_timeout: float = STEP_TIMEOUT,
        variant: int = 0,
        crossing: tuple[int, Callable[[], str]] | None = None,
        pct: Priorities | None = None,
    ) -> None:
        self.choices = tuple(choices)
        if pct is not None and variant:
            pct = pct.varied(variant)
        #: The PCT schedule this race runs (varied), if any.
        self.pct = pct
        ranks = () if pct is None else pct.ranks
        # Participants past the ranks drawn (none, in a drawn program) come after the rest.
        self._priority = [len(ranks) - rank for rank in ranks[:participants]] + [
            -extra for extra in range(participants - len(ranks))
        ]
        self._lowest = min(self._priority, default=0)
        self._changes = [] if pct is None else list(pct.turns())
        self._in_a_row = 0
        self._crossing = crossing
        self._variation = random.Random(variant) if variant else None
        #: The position picked at each choice: the schedule that repeats this interleaving.
        self.realized: list[int] = []
        self.step_timeout = step_timeout
        #: Every turn, in order: the interleaving (the clock's move included, if made).
        self.turns: list[Turn] = []
        #: Whether the clock's move of ``crossing`` was made.
        self.crossed = False
        #: How many scheduling points past the start the participants reached.
        self.points_seen = 0
        #: How many choices of :attr:`choices` were read.
        self.choices_read = 0
        #: How often a participant did not reach its next point in time and ran free.
        self.ran_free = 0
        #: How often the store said a participant waits on another's lock.
        self.blocked = 0
        self._participants = [_Participant() for _ in range(participants)]
        self._condition = threading.Condition()
        self._granted = -1
        self._last = -1
        self._released = False

    # -- in a participant's thread ---------------------------------------------------------

    def enter(self, index: int) -> None:
        """Make this thread participant ``index``, and wait at the start for its first turn."""
        _LOCAL.scheduler, _LOCAL.index = self, index
        _CONTEXT.set((self, index))
        self._arrive(index, START, busy=False)

    def leave(self) -> None:
        """This thread's participant is done (finished or crashed)."""
        index = _LOCAL.index
        _LOCAL.scheduler, _LOCAL.index = None, -1
        _CONTEXT.set(None)
        with self._condition:
            self._participants[index].state = "done"
            self._progress()
            self._condition.notify_all()

    def _arrive(self, index: int, point: str, *, busy: bool) -> bool:
        """Stop at ``point`` until it is this participant's turn; False: give up instead."""
        with self._condition:
            self._stop(index, point, busy=busy)
            while not self._released and self._granted != index:
                self._condition.wait()
            return self._go_on(index)

    async def _arrive_async(self, index: int, point: str) -> None:
        """In a participant's coroutine on an event loop: stop at ``point`` until it is this
        participant's turn, awaiting it (the loop goes on running other tasks)."""
        loop = asyncio.get_running_loop()
        turn = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_resolve, turn)

        with self._condition:
            self._stop(index, point, busy=False)
            if self._released or self._granted == index:
                self._go_on(index)
                return
            self._participants[index].wake = wake
        await turn
        with self._condition:
            self._go_on(index)

    def _stop(self, index: int, point: str, *, busy: bool) -> None:
        """Participant ``index`` waits at ``point``, with the condition held."""
        me = self._participants[index]
        if point != START:
            self.points_seen += 1
        if busy:
            if me.busy_since is None:
                me.busy_since = len(self.turns)
        else:
            self._progress()
        me.state, me.point, me.again = "waiting", point, busy
        me.lock_probe = None
        self._condition.notify_all()

    def _go_on(self, index: int) -> bool:
        """Participant ``index`` goes on from its point, with the condition held; False:
        it must give up on its round trip instead."""
        me = self._participants[index]
        if self._granted == index:
            self._granted = -1
        me.state, me.wake = "running", None
        give_up, me.give_up = me.give_up, False
        return not give_up

    def _progress(self) -> None:
        """Someone got on: every participant that found its store busy may try again."""
        for participant in self._participants:
            participant.busy_since = None

    # -- in the thread that runs the race --------------------------------------------------

    def run(self, deadline: float) -> None:
        """Schedule the participants until every one is done or ``deadline`` (a
        ``time.monotonic()`` value) has passed; then let every one still waiting go free."""
        with self._condition:
            try:
                self._schedule(deadline)
            finally:
                self._released = True
                self._condition.notify_all()
                for participant in self._participants:
                    if participant.wake is not None:
                        participant.wake()

    def _wait(self, until: float, ready: Callable[[], bool]) -> bool:
        """Wait for ``ready()`` until the monotonic time ``until``."""
        return self._condition.wait_for(ready, max(0.0, until - time.monotonic()))

    def _schedule(self, deadline: float) -> None:
        everyone = self._participants
        if not self._wait(deadline, lambda: all(p.state in ("waiting", "done") for p in everyone)):
            return
        while True:
            if not self._settled():
                step_end = min(deadline, time.monotonic() + self.step_timeout)
                if not self._wait_settled(step_end):
                    if time.monotonic() >= deadline:
                        return
                    for participant in everyone:
                        if participant.state == "running":
                            participant.state = "free"  # blocked in its store, or slow
                            self.ran_free += 1
            if all(p.state == "done" for p in everyone):
                return
            waiting = [i for i, p in enumerate(everyone) if p.state == "waiting"]
            ready = [i for i in waiting if everyone[i].busy_since is None]
            if ready:
                self._grant(self._choose(ready))
                continue
            if any(p.state in ("free", "blocked") for p in everyone):
                # Someone runs free: it may release what the others wait for.
                before = self._events()
                until = deadline if not waiting else min(deadline, time.monotonic() + 0.05)
                changed = self._wait(until, functools.partial(self._changed_since, before))
                if changed or not waiting:
                    if time.monotonic() >= deadline:
                        return
                    continue
            # Every participant left waits on another: the longest waiting gives up.
            victim = min(waiting, key=lambda i: (everyone[i].busy_since or 0, i))
            everyone[victim].give_up = True
            self._grant(victim, gave_up=True)

    def _events(self) -> tuple[int, int]:
        """What changes when a participant gets on: points reached, participants done."""
        return self.points_seen, sum(p.state == "done" for p in self._participants)

    def _changed_since(self, events: tuple[int, int]) -> bool:
        return self._events() != events

    def _settled(self) -> bool:
        """No participant is on its way to its next point: each waits at one, is done, runs
        free, or waits on another's lock in its store (as the store says when asked)."""
        if self._granted >= 0:
            return False
        for participant in self._participants:
            probe = participant.lock_probe
            if participant.state == "blocked" and (probe is None or not probe()):
                participant.state = "running"  # the store let it go: wait for its next point
            if participant.state == "running":
                if probe is None or not probe():
                    return False
                participant.state = "blocked"
                self.blocked += 1
        return True

    def _wait_settled(self, until: float) -> bool:
        """Wait until :meth:`_settled` or the monotonic time ``until``; asks the store every
        :data:`PROBE_INTERVAL` while a participant's round trip can be asked about."""
        while not self._settled():
            left = until - time.monotonic()
            if left <= 0:
                return False
            if any(p.lock_probe is not None for p in self._participants):
                left = min(left, PROBE_INTERVAL)
            self._condition.wait(left)
        return True

    def _choose(self, ready: Sequence[int]) -> int:
        count = len(self._participants)
        ordered = sorted(ready, key=lambda i: (i - self._last - 1) % count)
        if self.pct is not None:
            return self._choose_by_priority(ordered)
        if len(ordered) == 1:
            return ordered[0]
        choice = 0
        if self.choices_read < len(self.choices):
            choice = self.choices[self.choices_read]
        if self._variation is not None:
            choice += self._variation.randrange(len(ordered))
        self.choices_read += 1
        self.realized.append(choice % len(ordered))
        return ordered[self.realized[-1]]

    def _choose_by_priority(self, ordered: Sequence[int]) -> int:
        """PCT: the highest-priority participant of ``ordered``, after the change points due."""
        if len(ordered) > 1:
            # Change points count choices: a turn only one participant may take is no choice.
            while self._changes and self._changes[0] <= self.choices_read:
                self._changes.pop(0)
                self._drop(self._last)
            if self._in_a_row >= MOST_TURNS_IN_A_ROW:
                self._drop(self._last)  # it may spin on a lock a lower one holds
        chosen = max(ordered, key=lambda i: self._priority[i])
        if chosen != self._last:
            self._in_a_row = 1
        elif len(ordered) > 1:
            self._in_a_row += 1
        if len(ordered) > 1:
            self.choices_read += 1
            self.realized.append(ordered.index(chosen))
        return chosen

    def _drop(self, index: int) -> None:
        """Participant ``index`` (none, if -1) drops below every other."""
        if index >= 0:
            self._lowest -= 1
            self._priority[index] = self._lowest
            self._in_a_row = 0

    def _cross(self) -> None:
        """Make the clock's move, once, if the turn it comes before is next."""
        if self._crossing is not None and len(self.turns) >= self._crossing[0]:
            move, self._crossing = self._crossing[1], None
            self.turns.append(Turn(CLOCK, 0, move()))
            self.crossed = True

    def _grant(self, index: int, *, gave_up: bool = False) -> None:
        self._cross()
        participant = self._participants[index]
        turn = Turn(index, participant.call, participant.point, participant.again, gave_up)
        self.turns.append(turn)
        self._granted = self._last = index
        participant.state = "running"
        self._condition.notify_all()
        if participant.wake is not None:
            participant.wake()


def under_control() -> bool:
    """True in a participant's thread of a controlled race that is still being scheduled."""
    scheduler = _LOCAL.scheduler
    return scheduler is not None and not scheduler._released


def round_trip(point: str, *, busy: bool = False) -> bool:
    """A scheduling point: in a participant's thread of a controlled race, wait here for its
    turn to make the round trip ``point`` (a statement, a command); elsewhere return at once.

    ``busy``: the last try of this same round trip found the store busy. Returns False when
    the participant must give up on it instead (raise the store's busy error), True otherwise.
    """
    scheduler = _LOCAL.scheduler
    if scheduler is None:
        return True
    return scheduler._arrive(_LOCAL.index, point, busy=busy)


def note_call(number: int) -> None:
    """In a participant's thread of a controlled race: it is making its call ``number``."""
    scheduler = _LOCAL.scheduler
    if scheduler is not None:
        with scheduler._condition:
            scheduler._participants[_LOCAL.index].call = number


def note_lock_probe(probe: Callable[[], bool] | None) -> None:
    """In a participant's thread of a controlled race, about the round trip it is making
    until its next point: ``probe()`` tells whether it now waits on a lock another
    participant holds in the store; ``None``: it cannot be asked. Elsewhere it does nothing."""
    scheduler = _LOCAL.scheduler
    if scheduler is not None:
        with scheduler._condition:
            scheduler._participants[_LOCAL.index].lock_probe = probe
            scheduler._condition.notify_all()


async def async_round_trip(point: str) -> None:
    """A scheduling point in a coroutine: in a controlled race's participant (a coroutine a
    participant's thread runs on an event loop), await its turn to make the round trip
    ``point``; elsewhere return at once."""
    current = _CONTEXT.get()
    if current is not None and not current[0]._released:
        await current[0]._arrive_async(current[1], point)


def _resolve(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_result(None)


async def async_yield_point(label: str = "") -> None:
    """:func:`yield_point` for an async board: ``await async_yield_point("label")``. In a
    controlled race the calling coroutine awaits its turn here; anywhere else it returns at
    once."""
    await async_round_trip(f"yield_point({label})" if label else "yield_point()")


def yield_point(label: str = "") -> None:
    """Mark a scheduling point in a board: a round trip the checker cannot see by itself (a
    store it does not know, a protocol of your own), or a place where another agent's calls
    may come in between. In a controlled race the calling agent waits here for its turn;
    anywhere else it returns at once. ``label`` names the point in reports.

    In a process that serves a board over the protocol (``serve``), the point goes to the
    checker, which schedules it as it schedules its own (see :func:`forwarding_yield_points`).
    """
    forward = _LOCAL.forward
    if forward is not None and _LOCAL.scheduler is None:
        forward(label)
        return
    round_trip(f"yield_point({label})" if label else "yield_point()")


@contextlib.contextmanager
def forwarding_yield_points(forward: Callable[[str], None]) -> Iterator[None]:
    """While in force, this thread's :func:`yield_point` calls ``forward(label)`` instead
    (a served board's points cross the protocol to the checker's scheduler)."""
    before, _LOCAL.forward = _LOCAL.forward, forward
    try:
        yield
    finally:
        _LOCAL.forward = before
