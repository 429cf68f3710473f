"""What a failed run tells its user: reports as values, the errors that carry them, and the one
place that writes their trace files.

A :class:`Report` is built whole, then carried by the error raised for it (a
:class:`~taskboard.model.ContractViolation` or an :class:`InfrastructureFault`), whose message
is its text. What happens to a report later (a note that it did not recur, the path its trace
was written to) makes a new report and a new error; nothing rewrites an error in place.
"""

from __future__ import annotations

import dataclasses
import os
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, NoReturn

import hypothesis
from hypothesis.errors import Flaky, FlakyStrategyDefinition

from taskboard._clock import as_utc
from taskboard._contract import Task
from taskboard._driver import CallTimeoutError
from taskboard.model import ContractViolation, Step, Window, format_duration, violations_in
from taskboard.model._model import errors_in
from taskboard.stateful._client_clocks import client_clocks
from taskboard.stateful._config import SNAPSHOT_ATTEMPTS, MachineConfig
from taskboard.stateful._hypothesis import in_final_replay
from taskboard.stateful._runstate import current_run, joined_run
from taskboard.stateful._settings import SETTINGS
from taskboard.stateful._steps import render_step
from taskboard.stateful._trace import signed_offset
from taskboard.stateful._tracefile import Trace, Verdict, write_trace

__all__ = [
    "FAULT_CLAUSE",
    "Failure",
    "HungRun",
    "InfrastructureFault",
    "Report",
    "RunStart",
    "failures_reported",
    "fault_report",
    "found_clause",
    "host_frames",
    "host_traceback",
    "raise_report",
    "record_failure",
    "replay_traces_with",
    "time_hints",
    "unrepeated_failure",
    "violation_report",
    "with_first_found",
]

#: The clause a fault's verdict names in a trace file.
FAULT_CLAUSE = "infrastructure fault"


class AnswersVaried(Exception):
    """The board answered the same steps differently on Hypothesis's replay of an example,
    and no contract violation was seen: not a verdict on the board.

    Raised at the end of a run of a machine whose ``answers_vary`` is ``False`` (and that
    runs on the manual or virtual clock, with no tolerated faults) when Hypothesis finds the
    data an example draws changed on replay (``FlakyStrategyDefinition``). Where SPEC leaves
    a board a choice (an expired lease's current token, SPEC 3.4; a reaper that ends leases
    when it gets to them), a board may make it differently each time; the rules drew from
    its answers, which Hypothesis needs repeated. Set ``answers_vary = True`` on the machine
    to draw independently of answers; ``taskboard fuzz`` and ``BoardContract`` do that by
    themselves and go on.
    """

    def __init__(self) -> None:
        super().__init__(
            "the board answered the same steps differently when Hypothesis replayed an "
            "example, and no contract violation was seen: where SPEC leaves it a choice (SPEC "
            "3.4's expired lease, a reaper's timing) a board may choose differently each time, "
            "but the rules drew from its answers. Set answers_vary = True on the machine so "
            "that what is drawn does not depend on them (as on the wall clock)."
        )


class InfrastructureFault(Exception):
    """The board's storage failed: not a contract violation, and not a verdict on the board.

    :class:`BoardMachine` raises it when a board call raises an exception that is
    no contract outcome (a ``ConnectionError``, a driver error, a ``TimeoutError``,
    or any exception the contract does not name), or does not return within
    ``call_timeout`` (then :attr:`exception` is a ``CallTimeoutError``). The
    original exception is :attr:`exception` and the ``__cause__``; the message
    names the step, what the contract allowed there, and the trace.
    """

    #: The step whose call failed; for a failed ``list_tasks()``, the step it followed.
    step: Step | None = None
    #: Every step of the run up to and including :attr:`step`.
    trace: tuple[Step, ...] = ()
    #: The JSON trace file written for this fault, if one was.
    trace_file: str | None = None
    #: This run as a :class:`~taskboard.stateful.Trace`, kept in case it does not recur.
    recording: Any = None
    #: The machine's whole report of it.
    report: Report | None = None

    def __init__(self, message: str, exception: BaseException) -> None:
        super().__init__(message)
        self.exception = exception


#: What a report is carried by.
Failure = ContractViolation | InfrastructureFault


@dataclass(frozen=True)
class RunStart:
    """What a run began with, as its reports show it: the machine and its configuration, the
    initial tasks and the clock's first reading."""

    machine: type
    config: MachineConfig
    tasks: tuple[Task, ...]
    start: datetime

    def trace_heading(self) -> str:
        """The line above a report's trace: the clock, the resolution, what ``L<n>`` means."""
        config = self.config
        clock = (
            f"wall clock from {self.start.isoformat()}, skew {format_duration(config.skew)}, "
            f"TTL unit {format_duration(config.ttl_unit)}{client_clocks(config.client_skew)}"
            if config.wall
            else f"clock starts at {self.start.isoformat()}"
            + (
                f", TTL unit {format_duration(config.ttl_unit)}"
                if config.ttl_unit != config.resolution
                else ""
            )
        )
        renewing = (
            f"; the board renews leases by itself every {format_duration(config.keep_alive)}"
            if config.keep_alive
            else ""
        )
        return (
            f"trace ({clock}, resolution {format_duration(config.resolution)}{renewing}; L<n> "
            "is the n-th lease a claim returned):"
        )

    def to_trace(self, steps: Sequence[Step], verdict: Verdict | None = None) -> Trace:
        """The run as a :class:`Trace` of ``steps``, with the verdict if there is one."""
        recorded = {
            setting.trace.field: getattr(self.config, setting.config)
            for setting in SETTINGS
            if setting.trace is not None
        }
        return Trace(
            start=self.start,
            tasks=self.tasks,
            steps=tuple(steps),
            verdict=verdict,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            declared_ops=getattr(self.machine, "declared_ops", None),
            **recorded,
        )

    def render_window(self, window: Window) -> str:
        """A call's window as a report shows it: offsets from the start, and what it means."""
        earliest, latest = window.earliest - self.start, window.latest - self.start
        return (
            f"{signed_offset(earliest)} .. {signed_offset(latest)} (SPEC 7: the call "
            f"took effect at one instant of it, on the wall clock with skew "
            f"{format_duration(self.config.skew)})"
        )


@dataclass(frozen=True)
class Report:
    """A failure as its user reads it, like a bug report: where it happened, what the contract
    expected and why, what the board did, the trace that led there; and then its notes (that
    it did not recur, where its trace file is)."""

    #: What the checker concluded, as a trace file records it (``verdict.report`` is the
    #: report's text without its notes).
    verdict: Verdict
    #: The step that failed (``None`` for the initial snapshot or set-up), and every step of
    #: the run up to it.
    step: Step | None
    steps: tuple[Step, ...]
    #: The run as a trace, to write now or later (``None``: a run that never began).
    recording: Trace | None
    #: For a fault: the exception the board raised.
    cause: BaseException | None = None
    notes: tuple[str, ...] = ()
    trace_file: str | None = None
    #: True once Hypothesis's replay of it did not fail: the report then says whether its
    #: trace's own replays did (then it is one of theirs) or not (then it did not recur).
    unrepeated: bool = False
    #: The SPEC clause the failure was first found as, when shrinking moved it to another
    #: (see :func:`with_first_found`); ``None``: the same clause.
    first_clause: str | None = None

    @property
    def text(self) -> str:
        """The whole report: its body, then each note after a blank line."""
        return "\n\n".join((self.verdict.report, *self.notes))

    @property
    def is_fault(self) -> bool:
        return self.cause is not None

    @property
    def hung(self) -> bool:
        """True for a call that hung (the run ends at once, unshrunk)."""
        return isinstance(self.cause, CallTimeoutError)

    def noted(self, note: str) -> Report:
        """This report with ``note`` added."""
        return dataclasses.replace(self, notes=(*self.notes, note))

    def recorded(self, directory: str, timeline: str | None = None) -> Report:
        """This report with its trace written to ``directory`` (and ``timeline``, an HTML page,
        beside it), and a note that says where, or why it could not be written: the report
        itself is never lost to that."""
        if self.recording is None:
            return self
        try:
            path = write_trace(self.recording, directory)
            page = None
            if timeline is not None:
                page = path.with_name(path.stem.replace("trace-", "timeline-", 1) + ".html")
                page.write_text(timeline, encoding="utf-8")
        except OSError as exc:
            return self.noted(f"trace NOT written to {directory}: {exc}")
        where = f"trace written to {path}; replay it with: taskboard replay {path}"
        if page is not None:
            where += f"\ntimeline written to {page}"
        return dataclasses.replace(self.noted(where), trace_file=str(path))

    def error(self) -> Failure:
        """The error that carries this report: its message is :attr:`text`."""
        error: Failure
        if self.cause is not None:
            error = InfrastructureFault(self.text, self.cause)
        else:
            verdict = self.verdict
            error = ContractViolation(
                verdict.clause, verdict.expected, verdict.observed, report=self.text
            )
        error.step, error.trace = self.step, self.steps
        error.trace_file, error.recording = self.trace_file, self.recording
        error.report = self
        return error


def report_of(error: Failure) -> Report:
    """The report ``error`` carries; one made of its message when it carries none (a
    violation raised by the model itself)."""
    carried = getattr(error, "report", None)
    if isinstance(carried, Report):
        return carried
    if isinstance(error, InfrastructureFault):
        verdict = Verdict(None, FAULT_CLAUSE, "no infrastructure fault", "", str(error))
        cause: BaseException | None = error.exception
    else:
        verdict = Verdict(None, error.clause, error.expected, error.observed, str(error))
        cause = None
    return Report(verdict, error.step, error.trace, error.recording, cause, (), error.trace_file)


def _body(run: RunStart | None, head: list[str], steps: Sequence[Step], step: Step | None,
          label: Callable[[str], str]) -> list[str]:  # fmt: skip
    """A report's lines: ``head``, then (for a run that began) its trace, ``step`` marked."""
    if run is None:
        return head
    lines = [*head, "", run.trace_heading()]
    for earlier in steps:
        marker = ">>" if step is not None and earlier.index == step.index else ""
        lines.append(render_step(earlier, run.start, label, marker=marker))
    return lines


def _finish(
    run: RunStart | None,
    lines: list[str],
    steps: Sequence[Step],
    step: Step | None,
    verdict: tuple[str, str, str],
    label: Callable[[str], str],
    cause: BaseException | None = None,
) -> Report:
    """The report of ``lines``, with its trace, its recording and (in the run's final replay,
    or at once for a hang) its trace file."""
    body = "\n".join(_body(run, lines, steps, step, label))
    index = None if step is None else step.index
    stamped = Verdict(index, *verdict, body)
    recording = None if run is None else run.to_trace(steps, stamped)
    report = Report(stamped, step, tuple(steps), recording, cause)
    if run is not None:
        directory = run.config.trace_dir
        if directory and (report.hung or in_final_replay()):
            report = report.recorded(directory)
        _first_failures().setdefault(run.machine, report)
    return report


def violation_report(
    run: RunStart,
    violation: ContractViolation,
    steps: Sequence[Step],
    step: Step | None,
    label: Callable[[str], str],
) -> Report:
    """The report of ``violation`` (what the model found) at ``step`` of the run."""
    where = "the initial snapshot" if step is None else f"step {step.index}"
    lines = [f"contract violation at {where}", ""]
    if step is not None and step.call is not None:
        lines.append(f"  step      {render_step(step, run.start, label).strip()}")
    if step is not None and step.window is not None:
        lines.append(f"  window    {run.render_window(step.window)}")
    lines += [
        f"  clause    {violation.clause}",
        f"  expected  {violation.expected}",
        f"  board     {violation.observed}",
    ]
    lines += [f"  hint      {hint}" for hint in time_hints(run, step)]
    verdict = (violation.clause, violation.expected, violation.observed)
    return _finish(run, lines, steps, step, verdict, label)


#: How far off a lease's ``until`` may be before a report guesses why: a lease off by less is
#: a plain bug.
_FAR_OFF = timedelta(minutes=1)
#: How close an ``until`` must be to a whole number of hours off to be called a time zone's.
_HOURS_SLACK = timedelta(minutes=1)
#: How close to this machine's real time (plus the TTL) an ``until`` must be to look as if the
#: board read its server's clock: within a day, so that a server in another time zone counts.
_NEAR_REAL_TIME = timedelta(days=1)


def time_hints(run: RunStart, step: Step | None) -> list[str]:
    """Guesses at why the lease ``step`` returned ends far (a minute or more) from the board's
    now + ttl: a whole number of hours off is a time zone; on the manual (or virtual) clock,
    an ``until`` near this machine's real time is a board on its server's clock."""
    if step is None or step.call is None or step.outcome is None or step.outcome.task is None:
        return []
    lease = step.outcome.task.lease
    if lease is None or not isinstance(lease.until, datetime):
        return []
    until, ttl = as_utc(lease.until), step.call.ttl
    reference = step.at if step.window is None else step.window.earliest
    off = abs(until - (reference + ttl))
    if off < _FAR_OFF:
        return []
    hints = []
    hours = round(off / timedelta(hours=1))
    if hours and abs(off - timedelta(hours=hours)) <= _HOURS_SLACK:
        hints.append(
            f"the lease ends {hours} h from the board's now + ttl: a time zone? A naive "
            "datetime.now() (local time), or a timestamp column without time zone read in "
            "another zone; the contract's times are UTC (SPEC 2)"
        )
    real_now = datetime.now(UTC)
    if (
        run.config.clock_mode != "wall"
        and abs(until - ttl - real_now) <= _NEAR_REAL_TIME
        and abs(reference - real_now) > _NEAR_REAL_TIME
    ):
        hints.append(
            f"is this board on its server's clock? Its until is near this machine's real "
            f"time, while the checker's {run.config.clock_mode} clock reads "
            f"{reference.isoformat()}: try `--clock wall` or `--clock virtual` "
            "(clock_mode on the machine; see docs/wall-clock.md)"
        )
    return hints


def fault_report(
    run: RunStart | None,
    config: MachineConfig,
    exc: Exception,
    steps: Sequence[Step],
    step: Step | None,
    label: Callable[[str], str],
    during: str = "",
) -> Report:
    """The report of an infrastructure fault in ``step``'s call, or ``during`` something else
    (a ``list_tasks()`` or ``make_board``); ``run`` is ``None`` before the run began."""
    timeout = isinstance(exc, CallTimeoutError)
    what = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
    where = during or ("set-up" if step is None else f"step {step.index}")
    lines = [
        f"infrastructure fault at {where}: "
        + ("a call hung" if timeout else f"the board raised {what}, not a contract outcome"),
        "",
    ]
    if not during and step is not None and step.call is not None and run is not None:
        lines.append(f"  step      {render_step(step, run.start, label).strip()}")
        lines.append("  allowed   " + " or ".join(str(a) for a in step.allowed))
    lines.append(f"  fault     {what}: {exc}")
    frames = [] if timeout else host_frames(exc)
    if frames:
        lines.append("  raised at (the host's code, innermost last):")
        lines += frames
    if timeout:
        meaning = (
            "the call did not return within call_timeout; if the store is just slow, "
            "raise it (call_timeout = timedelta(seconds=...))"
        )
    elif during.startswith("list_tasks") and config.tolerates(exc):
        meaning = f"the board failed {SNAPSHOT_ATTEMPTS} reads in a row: the run cannot go on"
    else:
        meaning = (
            "the storage, its driver or the network failed (or the host raised an "
            "exception the contract does not name): not a contract violation"
        )
        if not during:
            meaning += ", and the call's effect is unknown"
        if not during or during.startswith("list_tasks"):
            meaning += _how_to_tolerate(config, exc)
    lines.append(f"  meaning   {meaning}")
    verdict = (FAULT_CLAUSE, "no infrastructure fault", f"raised {exc!r}")
    return _finish(run, lines, steps, step, verdict, label, cause=exc)


def _how_to_tolerate(config: MachineConfig, exc: Exception) -> str:
    tolerated = config.tolerate_faults
    if tolerated is False:
        return ". To fuzz through such faults, set tolerate_faults = True"
    if isinstance(exc, TimeoutError):
        return ". Timeouts are never tolerated: the call may still land later"
    return f". To fuzz through it, add {type(exc).__qualname__} to tolerate_faults"


def record_failure(
    run: RunStart, report: Report, timeline: str | None = None, *, record: bool = True
) -> Report:
    """``report``, recorded in ``run``'s trace directory when this is Hypothesis's final
    replay of the shrunk failure (and ``record``): for a report made outside a sequential
    run's steps (a concurrent history, with its ``timeline`` page)."""
    directory = run.config.trace_dir
    if record and directory and in_final_replay():
        return report.recorded(directory, timeline)
    return report


def _trace_dir(machine: type | None) -> str | None:
    if machine is None:
        return None
    try:
        return MachineConfig.of(machine).trace_dir
    except TypeError:  # a machine that never ran has nothing to record
        return None


# -- a run's failure, as it leaves the run --------------------------------------------------


class HungRun(BaseException):  # not an error: it ends a run
    """A call hung: the run ends now. Hypothesis would shrink an ``Exception`` by replaying
    it, each replay costing a whole timeout; it lets other ``BaseException`` s through."""

    def __init__(self, fault: InfrastructureFault) -> None:
        super().__init__(str(fault))
        self.fault = fault


def raise_report(report: Report, error: Failure | None = None) -> NoReturn:
    """Raise ``error``, the error that carries ``report`` (made now when not given); a hang as
    :class:`HungRun`, which ends the run.

    Every fault is raised from this one line: Hypothesis tells failures apart by where they
    were raised, and faults, wherever they happen, are one kind of failure."""
    error = error or report.error()
    if isinstance(error, InfrastructureFault):
        if report.hung:
            raise HungRun(error) from error.exception
        raise error from error.exception
    raise error


def failures_reported(machine_cls: type | None = None) -> _FailuresReported:
    """Report a run's failure as what it was, as a context manager around the run.

    A run ended by a hung call becomes the :class:`InfrastructureFault` it was. A
    ``Flaky`` error, raised when Hypothesis's replay of a shrunk failure did not fail
    again, becomes the violation (or fault) that was seen, with a note that it did not
    recur and, for ``machine_cls``, its trace file written: never a bare ``Flaky``. A
    violation or fault leaves with a traceback that holds only the host's own frames, so
    that pytest shows the report, not taskboard's and Hypothesis's internals.

    The failure seen is one of the run under way (or of one begun for the block; see
    :mod:`~taskboard.stateful._runstate`): a run in another thread, or one begun apart inside
    this one, neither lends it one nor takes it away.
    """
    return _FailuresReported(machine_cls)


class _FailuresReported:
    def __init__(self, machine_cls: type | None) -> None:
        self.machine_cls = machine_cls

    def __enter__(self) -> None:
        # The run this block reports for: the one under way, or one begun for the block.
        self.run_block = joined_run()
        self.run_block.__enter__()
        if self.machine_cls is not None:
            _first_failures().pop(self.machine_cls, None)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        __tracebackhide__ = True
        try:
            report: BaseException | None = None
            if isinstance(error, HungRun):
                report = error.fault
                report.__cause__, report.__suppress_context__ = error.fault.exception, True
            elif isinstance(error, Flaky):
                report = unrepeated_failure(error, self.machine_cls) or _varied(error, self)
                if report is not None:
                    report.__cause__, report.__suppress_context__ = None, True
            elif isinstance(error, ContractViolation | InfrastructureFault):
                report = with_first_found(error, self.machine_cls)
            if report is None:
                return
            raise report.with_traceback(host_traceback(report.__traceback__))
        finally:
            if self.machine_cls is not None:
                _first_failures().pop(self.machine_cls, None)
            self.run_block.__exit__(None, None, None)


def _varied(error: Flaky, reported: _FailuresReported) -> AnswersVaried | None:
    """The :class:`AnswersVaried` a Flaky error with no failure in it is, on a machine whose
    draws follow the board's answers; ``None`` otherwise."""
    machine = reported.machine_cls
    if not isinstance(error, FlakyStrategyDefinition) or machine is None:
        return None
    return None if MachineConfig.of(machine).outcomes_vary else AnswersVaried()


def with_first_found(error: Failure, machine_cls: type | None) -> Failure:
    """``error``, the shrunk failure, with a note of the violation first found in the run when
    shrinking moved it to another SPEC clause, and that one's (unshrunk) trace written too.

    A smaller trace can fail for another reason than the bug found (a stall inside a call, a
    lease that ended on the way), so both are reported, and the first is the one preferred:
    :func:`found_clause` names its clause. The shrunk one, shown above the note, is the one
    Hypothesis's final replay repeated."""
    first = _first_failures().get(machine_cls) if machine_cls is not None else None
    shrunk = report_of(error)
    if first is None or first.is_fault or shrunk.is_fault:
        return error
    clause = first.verdict.clause
    if clause == shrunk.verdict.clause or shrunk.first_clause is not None:
        return error
    directory = _trace_dir(machine_cls)
    if directory and first.trace_file is None:
        first = first.recorded(directory)
    where = f"; its trace: {first.trace_file}" if first.trace_file else ""
    note = (
        f"note: shrinking moved to another clause. The run first found a violation of "
        f"{clause} at step {first.verdict.step} of {len(first.steps)}: expected "
        f"{first.verdict.expected}; the board {first.verdict.observed}{where}. It shrank to the "
        f"violation of {shrunk.verdict.clause} above. The first is preferred as the bug found: "
        "a different clause after shrinking can be an artifact of the smaller trace (a stall "
        "inside a call, a lease that ended on the way); replay both to tell."
    )
    noted = dataclasses.replace(shrunk.noted(note), first_clause=clause).error()
    noted.__traceback__ = error.__traceback__
    return noted


def found_clause(violation: ContractViolation) -> str:
    """The SPEC clause of the bug found: the first one, when shrinking moved to another (see
    :func:`with_first_found`)."""
    report = getattr(violation, "report", None)
    first = report.first_clause if isinstance(report, Report) else None
    return first or violation.clause


def _first_failures() -> dict[type, Report]:
    """The first failure each machine class reported in the run under way (none when no run
    is): on the wall clock, Hypothesis may give up on a replay whose steps drew differently
    (``FlakyStrategyDefinition``) and carry no failure at all; what was seen is then this."""
    run = current_run()
    return {} if run is None else run.first_failures


def unrepeated_failure(error: BaseException, machine_cls: type | None = None) -> Failure | None:
    """The violation (or else the fault) in ``error``, a ``Flaky`` error, noted as not recurring.

    Its trace file is written now, for ``machine_cls``'s trace directory, since Hypothesis's
    final replay, which writes it otherwise, did not fail. ``None`` if ``error`` carries
    neither.
    """
    seen: Failure | None = next(iter(violations_in(error)), None)
    if seen is None:
        seen = next(iter(errors_in(error, InfrastructureFault)), None)
    report = report_of(seen) if seen is not None else None
    if report is None and machine_cls is not None:
        report = _first_failures().get(machine_cls)
    if report is None:
        return None
    if report.unrepeated:
        return seen or report.error()
    wall = machine_cls is not None and getattr(machine_cls, "clock_mode", None) == "wall"
    failed, tried, again = _trace_replays(report, machine_cls)
    if again is not None:  # the trace replays: Hypothesis's draws differed, not the board
        recurred = report_of(again).noted(
            f"note: Hypothesis's replay of the shrunk example drew other steps, but the trace "
            f"itself failed again in {failed} of {tried} replays on fresh boards: this is "
            "that replay's report"
        )
        directory = _trace_dir(machine_cls)
        if directory:
            recurred = recurred.recorded(directory)
        error = dataclasses.replace(recurred, unrepeated=True).error()
        error.__traceback__ = again.__traceback__
        return error
    why = (
        "on the wall clock a replay cannot repeat the timing exactly (SPEC 7)"
        if wall
        else "the board behaved differently on the same steps (its own randomness, timing "
        "or state kept outside the board)"
    )
    replays = f", nor did {tried} replays of its trace on fresh boards" if tried else ""
    note = (
        f"note: this did not recur when Hypothesis replayed the shrunk example{replays}: "
        f"{why}. The board did what is reported above once; a replay of the trace may or may "
        "not show it."
    )
    if wall and machine_cls is not None and refused_allowed_claim(report.steps):
        unit = format_duration(MachineConfig.of(machine_cls).ttl_unit)
        note += (
            f" A claim the model allowed was refused: a store that cannot honour a lease as "
            f"short as the TTL unit ({unit}) fails this way now and then (a Redlock's "
            "clock-drift allowance, a store that keeps whole seconds). If so, set "
            "shortest_lease (taskboard fuzz --shortest-lease MS) to the shortest lease it "
            "honours."
        )
    report = report.noted(note)
    directory = _trace_dir(machine_cls)
    if directory and report.trace_file is None:
        report = report.recorded(directory)
    unrepeated = dataclasses.replace(report, unrepeated=True).error()
    if seen is not None:
        unrepeated.__traceback__ = seen.__traceback__
    return unrepeated


def refused_allowed_claim(steps: Sequence[Step]) -> bool:
    """True when a claim in ``steps`` was refused while the model allowed it to succeed: what
    a store that keeps a lease longer than asked does (the shortest-lease hint's sign)."""
    return any(
        step.call is not None
        and step.call.op == "claim"
        and step.outcome is not None
        and not step.outcome.ok
        and any(allowed.error is None for allowed in step.allowed)
        for step in steps
    )


#: Replays of a trace whose Hypothesis replay did not fail, before it is called unrepeated.
UNREPEATED_TRIES = 3


#: How a trace is replayed on fresh boards of a machine: ``(trace, machine, tries)`` gives how
#: many replays failed as the trace did and the last failure. Set by the replay, which sits
#: above this module (``taskboard.stateful`` imports it); unset, nothing is replayed.
TraceReplays = Callable[[Trace, Any, int], tuple[int, Failure | None]]
_trace_replays_by: list[TraceReplays] = []


def replay_traces_with(replays: TraceReplays) -> None:
    """Replay the traces of failures that did not recur with ``replays``."""
    _trace_replays_by[:] = [replays]


def _trace_replays(report: Report, machine_cls: type | None) -> tuple[int, int, Failure | None]:
    """How many of :data:`UNREPEATED_TRIES` replays of ``report``'s trace on fresh boards of
    ``machine_cls`` failed as it did, and the last failure; ``(0, 0, None)`` when it cannot
    be replayed (no trace, no machine, or a hang, whose replays would each cost a timeout)."""
    trace = report.recording
    if trace is None or trace.verdict is None or report.hung or machine_cls is None:
        return 0, 0, None
    if not _trace_replays_by:
        return 0, 0, None
    failed, last = _trace_replays_by[0](trace, machine_cls, UNREPEATED_TRIES)
    return failed, UNREPEATED_TRIES, last


# -- the host's own frames -------------------------------------------------------------------

#: Where taskboard's own modules live; frames there (but in its reference hosts) are not the
#: host's code.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOSTS_DIR = os.path.join(_PACKAGE_DIR, "hosts")
#: Frames of the standard library and of Hypothesis are not the host's code either.
_NOT_HOST_DIRS = tuple(
    os.path.abspath(path)
    for path in (sysconfig.get_paths()["stdlib"], os.path.dirname(hypothesis.__file__))
)


def _is_host_code(filename: str) -> bool:
    """False for taskboard's internals (but its reference hosts), Hypothesis and the
    standard library: what a report leaves out of the frames it shows."""
    path = os.path.abspath(filename)
    internal = path.startswith(_PACKAGE_DIR + os.sep) and not path.startswith(_HOSTS_DIR + os.sep)
    return not internal and not path.startswith(_NOT_HOST_DIRS)


def host_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with only the frames of the host's own code (see :func:`host_frames`)."""
    kept = []
    while tb is not None:
        if _is_host_code(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def host_frames(exc: BaseException, limit: int = 8) -> list[str]:
    """The innermost ``limit`` frames of ``exc``'s traceback that are the host's own code
    (a board's methods, its driver), formatted for a report: taskboard's internals (but
    for its reference hosts), Hypothesis and the standard library are left out."""
    kept = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if not _is_host_code(frame.filename):
            continue
        kept.append(f"    {frame.filename}:{frame.lineno} in {frame.name}")
        if frame.line:
            kept.append(f"      {frame.line}")
    return kept[-2 * limit :]
