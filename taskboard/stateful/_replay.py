"""Replaying a trace against a board, step by step, through the same checks as the machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from taskboard._race import worker_pool
from taskboard.model import ContractViolation
from taskboard.stateful._config import defined_nemesis
from taskboard.stateful._machine import BoardFactory, BoardMachine
from taskboard.stateful._parallel import RUNS_PER_PROGRAM, run_program
from taskboard.stateful._reports import (
    FAULT_CLAUSE,
    Failure,
    InfrastructureFault,
    failures_reported,
    replay_traces_with,
)
from taskboard.stateful._runstate import separate_run
from taskboard.stateful._session import Session, end_example
from taskboard.stateful._settings import SETTINGS
from taskboard.stateful._steps import Replay, replay_step
from taskboard.stateful._trace import NEMESIS_HOOKS
from taskboard.stateful._tracefile import Trace

__all__ = ["ReplayResult", "replay_failure", "replay_trace", "replays_failing"]


@dataclass(frozen=True)
class ReplayResult:
    """How a replay went: ``passed``, or the violation; and where it left the recording.

    ``differences`` lists steps whose outcome differs from the recorded one while the
    contract allows both (SPEC 3.4, say, or a claim the board now refuses first).
    """

    passed: bool
    steps_run: int
    violation: ContractViolation | None = None
    differences: tuple[str, ...] = ()

    #: True for a parallel-mode trace: ``steps_run`` then counts reruns of its program.
    parallel: bool = False

    @property
    def report(self) -> str:
        """The violation's report, or a line saying the trace passes."""
        if self.violation is not None:
            return str(self.violation)
        if self.parallel:
            return f"the race was not reproduced in {self.steps_run} runs of the program"
        return f"the trace passes: {self.steps_run} steps keep the contract"


def replay_trace(trace: Trace, board: BoardFactory | type[BoardMachine]) -> ReplayResult:
    """Run ``trace``'s steps against a fresh board and judge each one as the machine does.

    ``board`` is a factory ``(tasks, clock) -> Board`` (a board class will do) or a
    :class:`BoardMachine` subclass, whose ``make_board``, ``close_board`` and
    ``expired_lease_policy`` are used. A factory's own ``expired_lease_policy``
    attribute, when it has one, pins SPEC 3.4; otherwise the trace's own pin does.
    The trace's clock resolution and mode are kept. The clock is set to each step's
    recorded time (on the wall clock, SPEC 7: the replay sleeps to keep each step's
    offset from the start, so its outcomes may differ where timing decides them), and
    tokens are mapped by lease: ``L3`` is the token this board's third
    successful claim returned. A parallel-mode trace reruns its program a few times
    (threads do not repeat their timing); ``steps_run`` then counts the runs.

    Nemesis steps (SPEC 9) run the machine's own ``restart_storage`` or
    ``drop_connections``, so a trace with them replays on a machine that defines them.

    Raises:
        InfrastructureFault: the board raised an exception the contract does not
            name, or a call hung: the replay has no verdict on the contract.
        ValueError: the trace has a nemesis step whose hook ``board`` does not define
            (:func:`missing_nemesis` says which).
    """
    missing = missing_nemesis(trace, board)
    if missing:
        raise ValueError(missing)
    machine_cls = _machine_for(board, trace)
    with separate_run(), failures_reported(machine_cls):  # a replay is a run of its own
        if trace.program is not None:
            return _run_parallel(machine_cls, trace)
        return _run(machine_cls(), trace)


def missing_nemesis(trace: Trace, board: BoardFactory | type[BoardMachine]) -> str:
    """Why ``board`` cannot replay ``trace``'s nemesis steps, or ``""`` when it can."""
    kinds = [step.nemesis for step in trace.steps if step.nemesis]
    if trace.program is not None:
        kinds += [step.op for step in trace.program.prefix if step.op in NEMESIS_HOOKS]
    defined = defined_nemesis(_machine_for(board, trace)) if kinds else ()
    hooks = sorted({NEMESIS_HOOKS[kind] for kind in kinds if kind not in defined})
    if not hooks:
        return ""
    return (
        f"the trace runs {' and '.join(hooks)} (SPEC 9): replay it on a machine or board "
        f"that defines {' and '.join(hooks)}"
    )


def _run_parallel(machine_cls: type[BoardMachine], trace: Trace) -> ReplayResult:
    # A parallel trace records a program, not an interleaving (threads do not repeat their
    # timing), so it reruns the program and judges each history as the parallel mode does.
    assert trace.program is not None
    runs = 2 * RUNS_PER_PROGRAM  # as many as the parallel mode tries before it reports
    with worker_pool():  # one pool of worker processes for every run (--processes)
        for run in range(1, runs + 1):
            try:
                run_program(machine_cls, trace.program, record=False)
            except ContractViolation as violation:
                return ReplayResult(False, run, violation, parallel=True)
    return ReplayResult(True, runs, parallel=True)


def _machine_for(board: BoardFactory | type[BoardMachine], trace: Trace) -> type[BoardMachine]:
    """The machine that replays ``trace`` on ``board``, with the settings the trace records:
    each one the table replays from the trace, and each one it leaves to the board (the
    SPEC 3.4 pin) where the board does not declare its own (a machine always does)."""
    machine = isinstance(board, type) and issubclass(board, BoardMachine)
    restored: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.trace is None or setting.replay is None:
            continue
        recorded = getattr(trace, setting.trace.field)
        if setting.replay == "trace":
            restored[setting.name] = recorded
        elif not machine:
            restored[setting.name] = getattr(board, setting.name, recorded)
    if isinstance(board, type) and issubclass(board, BoardMachine):
        return type(f"Replay{board.__name__}", (board,), restored)
    return BoardMachine.for_board(cast(BoardFactory, board), **restored)


def _run(machine: BoardMachine, trace: Trace) -> ReplayResult:
    steps_run = 0
    session: Session | None = None
    replay: Replay | None = None
    try:
        session = Session(machine, trace.tasks, trace.start)
        session.observe(None)
        # On the wall clock the replay starts later than the recording did.
        replay = Replay(session, session.start_time - trace.start)
        for step in trace.steps:
            steps_run += 1
            replay_step(replay, step)
    except ContractViolation as violation:
        differences = () if replay is None else tuple(replay.differences)
        return ReplayResult(False, steps_run, violation, differences)
    finally:
        end_example(session)
    assert replay is not None
    return ReplayResult(True, steps_run, None, tuple(replay.differences))


def replay_failure(
    trace: Trace, board: BoardFactory | type[BoardMachine], clause: str
) -> Failure | None:
    """What one replay of ``trace`` on ``board`` failed with, if it broke ``clause`` (or, for
    a fault's trace, met an infrastructure fault); ``None`` for a replay that passed, broke
    another clause, met a fault, or could not run (``board`` lacks the trace's nemesis)."""
    try:
        result = replay_trace(trace, board)
    except InfrastructureFault as fault:  # no verdict on the contract: not a violation
        return fault if clause == FAULT_CLAUSE else None
    except ValueError:  # the board lacks the trace's nemesis hooks: it cannot replay it
        return None
    violation = result.violation
    return violation if violation is not None and violation.clause == clause else None


def replays_failing(
    trace: Trace, board: BoardFactory | type[BoardMachine], tries: int
) -> tuple[int, Failure | None]:
    """How many of ``tries`` replays of ``trace`` (which has a verdict) on ``board`` fail as
    it did (:func:`replay_failure`), and the last such failure."""
    assert trace.verdict is not None
    failed, last = 0, None
    for _ in range(tries):
        failure = replay_failure(trace, board, trace.verdict.clause)
        if failure is not None:
            failed, last = failed + 1, failure
    return failed, last


# A failure that Hypothesis's replay did not repeat is replayed from its trace, and reports sit
# below this module: they get the replay from here.
replay_traces_with(replays_failing)
