"""Replaying a trace against a board, step by step, through the same checks as the machine."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from taskboard._clock import as_utc
from taskboard._race import worker_pool
from taskboard.model import ContractViolation, Op, Step
from taskboard.stateful._config import defined_nemesis
from taskboard.stateful._machine import BoardFactory, BoardMachine
from taskboard.stateful._parallel import RUNS_PER_PROGRAM, run_program
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session import Session, end_example
from taskboard.stateful._trace import NEMESIS_HOOKS, resolve_token
from taskboard.stateful._tracefile import Trace

__all__ = ["ReplayResult", "replay_trace"]


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
    with failures_reported(machine_cls):
        if trace.program is not None:
            return _run_parallel(machine_cls, trace)
        return _run(machine_cls(), trace)


def missing_nemesis(trace: Trace, board: BoardFactory | type[BoardMachine]) -> str:
    """Why ``board`` cannot replay ``trace``'s nemesis steps, or ``""`` when it can."""
    kinds = [step.nemesis for step in trace.steps if step.nemesis]
    if trace.program is not None:
        kinds += [op.op for op in trace.program.prefix if op.op in NEMESIS_HOOKS]
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
    clock: dict[str, Any] = {
        "clock_resolution": trace.resolution,
        "clock_mode": trace.clock_mode,
        "clock_skew": trace.skew,
        "client_clock_skew": trace.client_skew,
        "keep_alive_interval": trace.keep_alive,
    }
    if isinstance(board, type) and issubclass(board, BoardMachine):
        return type(f"Replay{board.__name__}", (board,), clock)
    # The board's own SPEC 3.4 pin if it declares one, else the pin the trace was made with.
    policy = getattr(board, "expired_lease_policy", trace.policy)
    return BoardMachine.for_board(cast(BoardFactory, board), **clock, expired_lease_policy=policy)


class _RecordedUntils:
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

    def anchored(self, step: Step, session: Session) -> datetime | None:
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


def _run(machine: BoardMachine, trace: Trace) -> ReplayResult:
    differences: list[str] = []
    steps_run = 0
    session: Session | None = None
    try:
        session = Session(machine, trace.tasks, trace.start)
        session.observe(None)
        shift = session.start_time - trace.start  # on the wall clock, the replay starts later
        leases = _RecordedUntils()
        for step in trace.steps:
            steps_run += 1
            at = step.at + shift
            if step.nemesis:
                session.run_nemesis(step.nemesis)
                continue
            if step.call is None:
                target = at + (step.advance or timedelta(0))
                if session.wall:  # land as far from the replayed lease's until as recorded
                    target = leases.anchored(step, session) or target
                session.move_clock(max(target, session.clock.now()), step.note)
                continue
            leases.follow(step)
            if at > session.clock.now():
                session.clock_to(at)
            call = step.call
            if call.op is not Op.CLAIM and not session.supports(call.op):
                differences.append(f"step {step.index}: skipped, the board has no {call.op}()")
                continue
            if call.op is not Op.CLAIM:
                tokens = {label: token for token, label in session.labels.items()}
                call = dataclasses.replace(call, token=resolve_token(step.token_ref, tokens))
            outcome = session.perform(call, step.token_ref)
            recorded = step.outcome
            if recorded is not None and recorded.error != outcome.error:
                was = recorded.error or "success"
                now = outcome.error or "success"
                differences.append(f"step {step.index}: recorded {was}, now {now} (allowed)")
    except ContractViolation as violation:
        return ReplayResult(False, steps_run, violation, tuple(differences))
    finally:
        end_example(session)
    return ReplayResult(True, steps_run, None, tuple(differences))
