"""What a fuzzing run did: counts, coverage, the failure, and the settings it ran with."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import settings

from taskboard._fuzz.options import FuzzOptions, machine_settings
from taskboard._fuzz.targets import Target
from taskboard.model import format_duration
from taskboard.stateful._config import MachineConfig
from taskboard.stateful._fields import micros
from taskboard.stateful._machine import BoardMachine
from taskboard.stateful._parallel import RUNS_PER_PROGRAM
from taskboard.stateful._session import ExampleStats
from taskboard.stateful._settings import SETTINGS, checked_settings

__all__ = [
    "RENEW_TTL_CLASSES",
    "FuzzReport",
    "RunHeader",
    "SettingInForce",
    "lease_limit_lines",
    "races_of",
    "renew_ttl_lines",
    "run_notes",
    "settings_in_force",
    "settings_of_run",
]


@dataclass
class FuzzReport:
    """What a fuzzing run did: counts, transition coverage, and the failure if any."""

    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    workers: int = 1
    transitions: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    failure: str | None = None
    #: True when the failure is an infrastructure fault, not a contract violation.
    fault: bool = False
    trace_file: str | None = None
    #: The SPEC clause of the contract violation found (``None``: none, or a fault).
    clause: str | None = None
    #: SPEC 7: the clock the run judged time on, ``"manual"`` or ``"wall"``.
    clock_mode: str = "manual"
    #: Runs of parallel programs (threads at once, each program on fresh boards).
    parallel_runs: int = 0
    #: ``"mixed"``, ``"sequential"`` (races were not checked) or ``"parallel"``.
    mode: str = "mixed"
    #: The board answered the same steps differently on a replay, and the run went on with
    #: ``answers_vary`` set (see :class:`~taskboard.stateful.AnswersVaried`).
    answers_varied: bool = False
    #: Seconds spent running parallel programs (all workers together).
    parallel_seconds: float = 0.0
    #: In parallel programs, each thread call's (operation, outcome): their coverage.
    concurrent_calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The seed the run started from (drawn when none was given): ``--seed`` repeats it.
    seed: int | None = None
    #: True when Ctrl-C stopped the run; the counts are those reached by then.
    interrupted: bool = False
    #: Runs Hypothesis made to shrink the failure found (not counted as examples).
    shrink_runs: int = 0
    #: True when shrinking stopped at ``--shrink-budget``: the trace is the smallest by then.
    shrink_cut: bool = False
    #: Seconds from the start until the failure was found (``None``: none was); the time
    #: after it went to shrinking, and steps per second count the finding only.
    find_seconds: float | None = None
    #: How the failure's trace was shrunk by replay, in words ("" when it was not).
    replay_shrink: str = ""
    #: While shrinking: where it is ("shrinking: 14 steps → 5, 23 s left"), for the status line.
    shrinking: str = ""
    #: The optional operations (``renew``, ``fail``) the boards had; ``None``: none was made.
    operations: frozenset[str] | None = None
    #: The shortest lease the store honours (``shortest_lease``; zero: any).
    shortest_lease: timedelta = timedelta(0)
    #: True when the machine opens a client per racing thread (``open_client``).
    clients: bool = False
    #: The Hypothesis settings the run used, in words (see :func:`settings_in_force`).
    settings: str = ""
    #: How the threads of parallel programs called the board (see :func:`races_of`).
    races: str = ""
    #: Every setting of the machine the run checked, with where it came from.
    in_force: tuple[SettingInForce, ...] = ()
    #: Renews on their task's live lease with its own token, by boundary TTL class.
    renew_ttls: Counter[str] = field(default_factory=Counter)
    #: The lease limits the board declared, and those in force at the end (learned from its
    #: ``unsupported`` answers too), in words; calls it refused as unsupported, and calls
    #: whose TTL the machine changed to one it holds before making them.
    declared_limits: str = ""
    limits: str = ""
    refused: int = 0
    adapted: int = 0

    @property
    def parallel_programs(self) -> int:
        """Parallel programs run (each runs :data:`RUNS_PER_PROGRAM` times)."""
        return self.parallel_runs // RUNS_PER_PROGRAM

    @property
    def programs_per_second(self) -> float:
        """Parallel programs per second spent on them (each worker's seconds added up)."""
        seconds = self.parallel_seconds
        return self.parallel_runs / RUNS_PER_PROGRAM / seconds if seconds > 0 else 0.0

    @property
    def finding_seconds(self) -> float:
        """Seconds spent finding: the whole run, or until the failure was found."""
        return self.seconds if self.find_seconds is None else self.find_seconds

    @property
    def shrink_seconds(self) -> float:
        """Seconds spent shrinking the failure after it was found (0 when none was)."""
        return max(0.0, self.seconds - self.finding_seconds)

    @property
    def steps_per_second(self) -> float:
        """Machine steps per second spent finding (shrinking left out), all workers together."""
        seconds = self.finding_seconds
        return self.steps / seconds if seconds > 0 else 0.0

    def count(self, example: ExampleStats) -> None:
        """Add what one example did."""
        if example.parallel:
            self.parallel_runs += 1
        else:
            self.examples += 1
        self.steps += example.steps
        self.transitions.update(example.transitions)
        self.concurrent_calls.update(example.concurrent_calls)
        self.renew_ttls.update(example.renew_ttls)
        self._add_limits(example.declared_limits, example.limits, example.refused, example.adapted)
        if example.operations is not None:
            self.operations = (self.operations or frozenset()) | example.operations

    def _add_limits(self, declared: str, limits: str, refused: int, adapted: int) -> None:
        self.declared_limits = self.declared_limits or declared
        # Learned limits only grow within a run: the latest heard are the most.
        self.limits = limits or self.limits
        self.refused += refused
        self.adapted += adapted

    def add(self, other: FuzzReport) -> None:
        """Add another worker's counts and coverage (not its failure)."""
        self.examples += other.examples
        self.steps += other.steps
        self.parallel_runs += other.parallel_runs
        self.parallel_seconds += other.parallel_seconds
        self.transitions.update(other.transitions)
        self.concurrent_calls.update(other.concurrent_calls)
        self.renew_ttls.update(other.renew_ttls)
        self._add_limits(other.declared_limits, other.limits, other.refused, other.adapted)
        self.shrink_runs += other.shrink_runs
        self.shrink_cut = self.shrink_cut or other.shrink_cut
        self.interrupted = self.interrupted or other.interrupted
        self.answers_varied = self.answers_varied or other.answers_varied
        if other.operations is not None:
            self.operations = (self.operations or frozenset()) | other.operations


def run_notes(report: FuzzReport) -> list[str]:
    """What a run did not do that its mode promises, and why: a mixed run that ran no
    parallel program, a run whose machine opens clients that opened none; and how it changed
    its draws for a board whose answers varied."""
    notes = []
    if report.answers_varied:
        notes.append(
            "the board answered the same steps differently on a replay (where SPEC leaves it "
            "a choice, as 3.4's expired lease): no violation, and the run went on with "
            "answers_vary = True, drawing independently of answers (set it on the machine "
            "to start so)"
        )
    return notes + _race_notes(report)


def _race_notes(report: FuzzReport) -> list[str]:
    if report.mode != "mixed" or report.parallel_runs:
        return []
    if report.find_seconds is not None:
        why = "the failure was found before the first parallel program finished"
    elif report.interrupted:
        why = "the run was stopped before the first parallel program finished"
    else:
        why = (
            "the budget ran out before one finished (a mixed run begins with one parallel "
            "program, run three times on fresh boards"
        )
        if report.shortest_lease:
            why += (
                f"; with the shortest lease at {format_duration(report.shortest_lease)} "
                "every lease and clock step lasts at least that long"
            )
        why += "): a longer --budget runs them"
    notes = [f"no parallel programs ran, so races were not checked: {why}"]
    if report.clients:
        notes.append("no clients were opened (open_client): only parallel programs open them")
    return notes


#: The boundary TTL classes of a renew, in the order the coverage table lists them.
RENEW_TTL_CLASSES = ("0", "below one unit", "one unit", "longer")


def renew_ttl_lines(report: FuzzReport) -> list[str]:
    """The coverage table's rows of boundary TTLs: of the renews that met their task's live
    lease with its own token, how many asked for each (a store's boundary bug, ``extend(0)``
    or a TTL it rounds to 0, shows only there)."""
    total = sum(report.renew_ttls.values())
    if report.operations is not None and "renew" not in report.operations:
        return []
    lines = ["", f"renews on a live current lease, by ttl ({total} in all):"]
    for ttl in RENEW_TTL_CLASSES:
        count = report.renew_ttls[ttl]
        share = f"{count / total:.0%}" if total else "-"
        mark = "  " if count else "!!"
        lines.append(f"  {mark} ttl {ttl:<28} {count:>8}   ({share})")
    return lines


def lease_limit_lines(report: FuzzReport) -> list[str]:
    """What leases the board could hold, as declared and as learned from its ``unsupported``
    answers, and how many calls asked for others (none, on a board that holds any lease)."""
    if not (report.declared_limits or report.limits or report.refused):
        return []
    declared = report.declared_limits or "none"
    learned = report.limits if report.limits != report.declared_limits else "nothing more"
    return [
        "",
        f"lease limits: declared {declared}; learned {learned}",
        f"  {report.refused} call(s) refused as unsupported (a lease the board cannot hold), "
        f"{report.adapted} asked for the nearest lease it holds instead",
    ]


def settings_in_force(target: Target, chosen: settings) -> str:
    """The settings a run of ``target`` uses, in words: the steps per example, the deadline,
    and which of them came from the machine's own ``@settings``."""
    deadline = "none" if chosen.deadline is None else f"{chosen.deadline}"
    words = (
        f"up to {chosen.stateful_step_count} steps an example, deadline {deadline}, "
        f"{len(chosen.phases)} phases (taskboard-nightly profile)"
    )
    taken = machine_settings(target)
    if taken:
        given = ", ".join(f"{name}={value!r}" for name, value in sorted(taken.items()))
        words += f"; from the machine's own settings: {given}"
    return words


@dataclass(frozen=True)
class SettingInForce:
    """A setting of the machine a run checks, as the run's header shows it."""

    #: The class attribute: ``clock_mode``.
    name: str
    #: Its value as the header shows it: ``'wall'``, ``1ms``, ``None``.
    value: str
    #: Where the value came from: the ``taskboard fuzz`` option (``--clock``), the class or
    #: board factory that set it (``set on MyMachine``), or ``default``.
    source: str
    #: Its value as JSON: a duration in microseconds, exception classes by name.
    json: object = None


def settings_of_run(target: Target, options: FuzzOptions) -> tuple[SettingInForce, ...]:
    """Every setting of the machine a run of ``target`` with ``options`` checks, in the order
    of :data:`~taskboard.stateful._settings.SETTINGS`, with where its value came from."""
    flagged = options.machine_attributes(target)
    values = checked_settings(options.machine(target))
    rows = []
    for setting in SETTINGS:
        if setting.name in flagged and setting.fuzz is not None:
            source = setting.fuzz.flag
        else:
            source = _where_set(target.machine, setting.name)
        value = values[setting.name]
        rows.append(SettingInForce(setting.name, _setting_text(value), source, _as_json(value)))
    return tuple(rows)


@dataclass(frozen=True)
class RunHeader:
    """What a run is about to check with: every setting in force (``rows``) and the
    Hypothesis settings in words (:func:`settings_in_force`)."""

    rows: tuple[SettingInForce, ...]
    hypothesis: str

    @property
    def clock_mode(self) -> str:
        """The clock the run judges time on: ``manual``, ``virtual`` or ``wall``."""
        return str(next(row.json for row in self.rows if row.name == "clock_mode"))

    def lines(self) -> list[str]:
        """One line a setting, its value and where it came from; then Hypothesis's."""
        name_width = max(len(row.name) for row in self.rows)
        value_width = max(len(row.value) for row in self.rows)
        lines = [
            f"  {row.name:<{name_width}}  {row.value:<{value_width}}  ({row.source})"
            for row in self.rows
        ]
        return [*lines, f"  hypothesis: {self.hypothesis}"]


def _where_set(machine: type, name: str) -> str:
    """Which class of ``machine`` set the attribute ``name``: ``default`` for BoardMachine."""
    owner = next((cls for cls in machine.__mro__ if name in vars(cls)), BoardMachine)
    return "default" if owner is BoardMachine else f"set on {owner.__qualname__}"


def _setting_text(value: Any) -> str:
    """A setting's value as the header shows it: ``1ms``, ``'wall'``, ``None``."""
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, tuple):
        names = (getattr(item, "__qualname__", repr(item)) for item in value)
        return "(" + ", ".join(names) + ")"
    return repr(value)


def _as_json(value: Any) -> object:
    """A setting's value as JSON: durations in microseconds, classes by name."""
    if isinstance(value, timedelta):
        return micros(value)
    if isinstance(value, tuple):
        return [getattr(item, "__qualname__", item) for item in value]
    return value


def races_of(config: MachineConfig, mode: str) -> str:
    """How the threads of the run's parallel programs call the board (SPEC 8)."""
    if mode == "sequential":
        return "none (sequential programs only)"
    if config.processes:
        return "each thread in a process of its own, on a client of its own (--processes)"
    if config.clients:
        return "each thread on a client of its own (open_client)"
    return "threads share one board (define open_client to race clients, see docs/clients.md)"
