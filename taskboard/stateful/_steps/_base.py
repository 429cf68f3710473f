"""What one kind of step is made of, and what a step may ask of the session that runs it.

A kind of step is one record (:class:`StepKind`) that holds everything about it: the machine
rules that draw it, the steps it adds to parallel programs (a :class:`ProgramStep` each:
how it is drawn, how it resolves whose token it acts with, how it runs on a session or in a
racing thread, how it is written to a trace file and how it reads in a report), and the
recorded steps it writes to trace files, reads back, replays and renders. The registry
(``taskboard.stateful._steps``) lists the kinds; the machine, the parallel runner, replay and
trace files find every kind there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol

from hypothesis.stateful import Bundle
from hypothesis.strategies import SearchStrategy

from taskboard._clock import Clock, as_utc
from taskboard._schedule import Priorities
from taskboard.model import BoardModel, Call, IssuedLease, Outcome, Step
from taskboard.stateful._fields import Reader
from taskboard.stateful._limits import Holding

__all__ = [
    "LEASES",
    "Machine",
    "ParallelProgram",
    "ProgramDraw",
    "ProgramStep",
    "RecordedUntils",
    "Replay",
    "Runner",
    "StepConfig",
    "StepKind",
]

#: The leases claims returned, for later steps to act with (a Hypothesis bundle, by name).
LEASES: Bundle[Any] = Bundle("leases")


class StepConfig(Protocol):
    """What a step reads of the machine's configuration (a ``MachineConfig`` is one)."""

    @property
    def wall(self) -> bool: ...

    @property
    def outcomes_vary(self) -> bool: ...

    @property
    def ttl_unit(self) -> timedelta: ...

    @property
    def resolution(self) -> timedelta: ...

    @property
    def longest_wait(self) -> int: ...

    @property
    def longest_clock_step(self) -> int: ...

    @property
    def past_until(self) -> timedelta: ...

    @property
    def nemesis(self) -> tuple[str, ...]: ...

    def lease_ttl(self, ticks: int) -> timedelta: ...


class Runner(Protocol):
    """What a step may ask of the session that runs it (a ``Session`` is one): to call the
    board and judge the call, to move the clock, to run a nemesis hook, and whose token is
    whose."""

    @property
    def config(self) -> StepConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def model(self) -> BoardModel: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def untils(self) -> Mapping[str, datetime | None]: ...

    @property
    def latencies(self) -> Sequence[timedelta]: ...

    @property
    def holding(self) -> Holding: ...

    def perform(self, call: Call, ref: str = "") -> Outcome: ...

    def supports(self, op: str) -> bool: ...

    def move_clock(self, target: datetime | None, note: str, *, blind: bool = False) -> None: ...

    def clock_to(self, target: datetime) -> None: ...

    def run_nemesis(self, kind: str) -> None: ...

    def token_of(self, task_id: str, holder: str) -> str: ...

    def latest_lease(self, task_id: str) -> IssuedLease | None: ...

    def label(self, token: str) -> str: ...

    def token_labelled(self, label: str) -> str | None: ...


class Machine(Protocol):
    """What a machine rule reads of the machine it runs on: its configuration, and the
    session of the example."""

    @property
    def config(self) -> StepConfig: ...

    @property
    def _session(self) -> Runner: ...


class ProgramStep:
    """One step of a parallel program (SPEC 8 and 5): drawn, written to a trace file and read
    back, run in the sequential prefix on the session, or as a call in a racing thread.

    Subclasses are frozen dataclasses."""

    @property
    def op(self) -> str:
        """What the step is called in trace files and reports (``claim``, ``advance``...)."""
        raise NotImplementedError

    def run(self, session: Runner) -> None:
        """Run the step in a program's sequential prefix, with every per-step check."""
        raise NotImplementedError

    def call(self, session: Runner, mine: Mapping[str, str]) -> Call | None:
        """The call a racing thread makes for this step, given the tokens the thread's own
        claims returned, by task (``mine``); ``None``: the step is no thread's call."""
        return None

    @property
    def own_token(self) -> bool:
        """True when a racing thread's call acts with the token its own last claim of the
        task returned, once it has one (a worker process learns it only as it goes)."""
        return False

    def to_json(self) -> dict[str, Any]:
        """The step as a trace file's program writes it."""
        raise NotImplementedError


@dataclass(frozen=True)
class ParallelProgram:
    """A sequential prefix, then one list of steps per racing thread."""

    deps: dict[str, tuple[str, ...]]
    prefix: tuple[ProgramStep, ...]
    threads: tuple[tuple[ProgramStep, ...], ...]
    #: With controlled scheduling, the drawn choices of who goes on at each point where
    #: several threads may (see :class:`taskboard._schedule.RaceScheduler`); ``None``: the
    #: threads run at once, as the operating system schedules them.
    schedule: tuple[int, ...] | None = None
    #: With ``race_exploration = "pct"``, the drawn priorities and change points that pick
    #: instead of ``schedule`` (see :class:`taskboard._schedule.Priorities`).
    pct: Priorities | None = None
    #: How a recorded ``schedule`` was found, in words (PCT's drawn priorities and change
    #: points), for the reader: a replay follows ``schedule`` alone.
    explored: str = ""


@dataclass(frozen=True)
class ProgramDraw:
    """What a kind draws program steps from: the task ids calls go to, whether the step is
    in the sequential prefix (else in a racing thread), and the nemesis steps defined."""

    tasks: SearchStrategy[str]
    in_prefix: bool
    nemesis: tuple[str, ...] = ()


class RecordedUntils:
    """The until of each lease as the recording saw it, by label (``L3``): on the wall clock a
    step that landed just before or after a lease's until lands as close to it on replay."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.untils: dict[str, datetime] = {}

    def follow(self, step: Step) -> None:
        """Note the lease a recorded claim or renew returned."""
        outcome = step.outcome
        lease = outcome.task.lease if outcome and outcome.ok and outcome.task else None
        if lease is None or not isinstance(lease.token, str):
            return
        label = self.labels.setdefault(lease.token, f"L{len(self.labels) + 1}")
        if isinstance(lease.until, datetime):
            self.untils[label] = as_utc(lease.until)

    def anchored(self, step: Step, session: Runner) -> datetime | None:
        """Where a clock step that landed near a lease's until lands on replay, or ``None``."""
        landed = re.search(r"(L\d+)'s until", step.note)
        if landed is None or landed.group(1) not in self.untils:
            return None
        label = landed.group(1)
        token = session.token_labelled(label)
        until = session.untils.get(token) if token is not None else None
        if until is None:
            return None
        return until + (step.at + (step.advance or timedelta(0)) - self.untils[label])


@dataclass
class Replay:
    """A recorded trace being run again on a session: how much later it started (the wall
    clock's replay starts now), the recording's untils, and the steps whose outcome differs
    from the recorded one while the contract allows both."""

    session: Runner
    shift: timedelta
    untils: RecordedUntils = field(default_factory=RecordedUntils)
    differences: list[str] = field(default_factory=list)


class StepKind:
    """One kind of step, with everything about it (see the module docstring).

    ``names`` are what the kind answers to: a program step's ``op`` and a recorded step's
    name (its call's operation, its nemesis hook's kind, or ``"advance"`` for a clock move;
    a kind of its own writes its name as the recorded step's ``kind``).
    Every method has a default, so a kind defines only what it has."""

    names: ClassVar[tuple[str, ...]] = ()

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        """The machine rules this kind adds, by name, on a machine that defines the nemesis
        hooks ``nemesis``: Hypothesis draws them."""
        return {}

    def program_strategies(self, draw: ProgramDraw) -> tuple[SearchStrategy[ProgramStep], ...]:
        """Strategies of this kind's program steps; one listed twice is drawn twice as often."""
        return ()

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        """A program step this kind wrote (:meth:`ProgramStep.to_json`), named ``op``.

        Raises:
            TraceFileError: a field is missing or wrong.
        """
        raise reader.error("op", f"{op!r} is no step of a program")

    def write_step(self, step: Step) -> dict[str, Any]:
        """The fields of a recorded step of this kind, beyond its index and time."""
        raise NotImplementedError

    def read_step(self, name: str, reader: Reader, index: int, at: datetime) -> Step:
        """A recorded step this kind wrote, named ``name``.

        Raises:
            TraceFileError: a field is missing or wrong.
        """
        raise NotImplementedError

    def replay(self, replay: Replay, step: Step) -> None:
        """Run the recorded ``step`` again on ``replay``'s session, judged as it was."""
        raise NotImplementedError

    def describe(self, step: Step, start: datetime, label: Callable[[str], str]) -> str:
        """How the recorded ``step`` reads in a report, after its index and time."""
        raise NotImplementedError
