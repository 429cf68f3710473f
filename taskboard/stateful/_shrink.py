"""Shrinking by replay: a recorded failing trace made smaller by replaying parts of it.

Hypothesis shrinks the choices that drew a run; once a board's outcomes differ from one run
to the next (the wall clock, a store's own timing), its replays draw other steps and it gives
up with the failure hardly shrunk. The trace itself does not depend on draws: this module
replays candidate sub-traces on fresh boards (steps and blocks of steps dropped, delta
debugging's way; clock moves merged; lease labels renumbered) and keeps a candidate only if it
fails with the same SPEC clause. On the wall clock a replay may miss the failure by timing,
so a candidate is replayed up to :data:`WALL_TRIES` times and counts as failing once one of
them fails; the trace kept is then replayed :data:`WALL_TRIES` times more to say how often it
fails (``failed`` of ``tried``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from taskboard.model import Step
from taskboard.stateful._machine import BoardFactory, BoardMachine
from taskboard.stateful._replay import replay_failure, replays_failing
from taskboard.stateful._reports import Failure
from taskboard.stateful._trace import forge
from taskboard.stateful._tracefile import Trace

__all__ = ["WALL_TRIES", "Shrunk", "shrink_by_replay", "shrink_failure", "sub_trace"]

#: Replays of a wall-clock candidate before it counts as passing, and of the trace kept.
WALL_TRIES = 3

#: How a reference to a lease whose claim was dropped is written: a literal token (``=``)
#: that no claim returned, numbered as the lease was (``=never-issued-3`` for ``L3``).
DROPPED = "=never-issued-"

#: ``(steps now, steps at first, seconds left)``: told after every candidate kept.
ShrinkListener = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Shrunk:
    """What shrinking by replay found.

    ``trace`` is the smallest trace that failed with the clause (the one given, when no
    smaller one did), ``violation`` what its last failing replay reported (``None``: no
    replay of it failed), ``failed`` of ``tried`` how many of its final replays failed,
    ``replays`` how many replays shrinking made in all, and ``cut`` whether the time ran out
    before every candidate was tried."""

    trace: Trace
    violation: Failure | None
    failed: int
    tried: int
    replays: int
    cut: bool

    @property
    def recurs(self) -> bool:
        """True when a replay of the trace failed with the clause again."""
        return self.violation is not None


def sub_trace(trace: Trace, keep: Sequence[int]) -> Trace:
    """``trace`` with only the steps at positions ``keep`` (in order), made replayable alone.

    Later steps move earlier by the time each dropped step took (a clock move: its advance;
    on the wall clock, a call: its latency), so no replay waits out a step that is gone;
    steps are numbered again from 1; lease labels (``L3``) are renumbered for the claims that
    remain, and a reference to a lease whose claim was dropped becomes the token no claim
    returned that a replay would use for it."""
    steps = trace.steps
    kept = sorted(set(keep))
    durations = [
        (steps[i + 1].at - steps[i].at) if i + 1 < len(steps) else timedelta(0)
        for i in range(len(steps))
    ]
    old_labels = _mint_order(steps)
    new_labels = _mint_order([steps[i] for i in kept])
    tokens = {label: token for token, label in old_labels.items()}
    renumber = {
        label: new_labels.get(token, DROPPED + label.removeprefix("L"))
        for label, token in tokens.items()
    }
    shift = timedelta(0)
    out: list[Step] = []
    position = 0
    for i, step in enumerate(steps):
        if i != (kept[position] if position < len(kept) else -1):
            shift += durations[i]
            continue
        position += 1
        window = step.window
        if window is not None:
            window = dataclasses.replace(
                window, earliest=window.earliest - shift, latest=window.latest - shift
            )
        out.append(
            dataclasses.replace(
                step,
                index=len(out) + 1,
                at=step.at - shift,
                window=window,
                token_ref=_relabel(step.token_ref, renumber),
                note=_relabel_note(step.note, renumber),
            )
        )
    verdict = trace.verdict
    if verdict is not None:
        verdict = dataclasses.replace(verdict, step=None)
    return dataclasses.replace(trace, steps=tuple(out), verdict=verdict)


def merged_clock_moves(trace: Trace, first: int) -> Trace | None:
    """``trace`` with the clock moves at positions ``first`` and ``first + 1`` made one, or
    ``None`` when those are not two clock moves."""
    steps = list(trace.steps)
    if first + 1 >= len(steps):
        return None
    a, b = steps[first], steps[first + 1]
    if a.advance is None or b.advance is None or a.call or b.call or a.nemesis or b.nemesis:
        return None
    merged = dataclasses.replace(a, advance=(b.at + b.advance) - a.at, note=b.note)
    steps[first : first + 2] = [merged]
    renumbered = tuple(dataclasses.replace(s, index=i + 1) for i, s in enumerate(steps))
    return dataclasses.replace(trace, steps=renumbered)


def _mint_order(steps: Sequence[Step]) -> dict[str, str]:
    """Each token a recorded claim (or renew) returned first, labelled in order: ``L1``..."""
    labels: dict[str, str] = {}
    for step in steps:
        outcome = step.outcome
        lease = outcome.task.lease if outcome and outcome.ok and outcome.task else None
        if lease is not None and isinstance(lease.token, str) and lease.token not in labels:
            labels[lease.token] = f"L{len(labels) + 1}"
    return labels


def _relabel(ref: str, renumber: dict[str, str]) -> str:
    if not ref or ref.startswith("="):
        return ref
    label, colon, forgery = ref.partition(":")
    new = renumber.get(label, label)
    if new.startswith("=") and forgery:  # the lease's claim is gone: forge what replaces it
        return "=" + forge(new[1:], forgery)
    return new + colon + forgery


def _relabel_note(note: str, renumber: dict[str, str]) -> str:
    return re.sub(
        r"\bL\d+\b",
        lambda m: _noted_label(renumber.get(m.group(0), m.group(0))),
        note,
    )


def _noted_label(label: str) -> str:
    # A note naming a lease whose claim was dropped names no label: a replay anchors a clock
    # move to the until of the lease its note names, and there is none.
    return "dropped-lease-" + label.removeprefix(DROPPED) if label.startswith(DROPPED) else label


class _Judge:
    """Replays candidates against a board until a deadline, counting replays."""

    def __init__(
        self,
        board: BoardFactory | type[BoardMachine],
        clause: str,
        tries: int,
        deadline: float,
        stopped: Callable[[], bool],
    ) -> None:
        self.board, self.clause, self.tries, self.deadline = board, clause, tries, deadline
        self.stopped = stopped
        self.replays = 0

    def out_of_time(self) -> bool:
        """True once the deadline passed, or the run was asked to stop (Ctrl-C)."""
        return time.monotonic() >= self.deadline or self.stopped()

    def failure(self, trace: Trace, tries: int | None = None) -> Failure | None:
        """The violation of the clause from the first of up to ``tries`` replays that fails
        with it, or ``None``."""
        for _ in range(tries or self.tries):
            violation = self.replay_once(trace)
            if violation is not None:
                return violation
            if self.out_of_time():
                break
        return None

    def replay_once(self, trace: Trace) -> Failure | None:
        """One replay's failure with the clause, or ``None``."""
        self.replays += 1
        return replay_failure(trace, self.board, self.clause)


def shrink_by_replay(
    trace: Trace,
    board: BoardFactory | type[BoardMachine],
    *,
    seconds: float,
    on_progress: ShrinkListener | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Shrunk:
    """The smallest sub-trace of ``trace`` (a sequential trace with a verdict) that still
    fails on ``board`` with the verdict's clause, found within about ``seconds`` (the replay
    under way when they end, or when ``stopped()`` turns true, runs to its end).

    Raises:
        ValueError: ``trace`` has no verdict, or is a parallel program's.
    """
    if trace.verdict is None or trace.program is not None:
        raise ValueError("shrinking by replay needs a sequential trace with a verdict")
    wall = trace.clock_mode == "wall"
    tries = WALL_TRIES if wall else 1
    judge = _Judge(board, trace.verdict.clause, tries, time.monotonic() + seconds, stopped)
    first = len(trace.steps)

    def told(now: Trace) -> None:
        if on_progress is not None:
            on_progress(len(now.steps), first, max(0.0, judge.deadline - time.monotonic()))

    told(trace)
    best_violation = judge.failure(trace)
    if best_violation is None:
        return Shrunk(trace, None, 0, judge.replays, judge.replays, False)
    best = trace

    def attempt(candidate: Trace) -> bool:
        nonlocal best, best_violation
        violation = judge.failure(candidate)
        if violation is None:
            return False
        best, best_violation = candidate, violation
        told(best)
        return True

    # The steps after the one that failed in the replay are never reached.
    ran = _steps_run(best_violation, len(best.steps))
    if ran < len(best.steps):
        attempt(sub_trace(best, range(ran)))
    cut = not _ddmin(attempt, judge, lambda: best)
    if not cut:
        cut = not _merge_clock_moves(attempt, judge, lambda: best)
    failed = tried = 1
    if wall and not stopped():  # how often the trace kept fails, for the report
        failed, last = replays_failing(best, board, WALL_TRIES)
        tried = WALL_TRIES
        judge.replays += WALL_TRIES
        best_violation = last or best_violation
    return Shrunk(best, best_violation, failed, tried, judge.replays, cut)


def _steps_run(violation: Failure, total: int) -> int:
    step = violation.step
    return total if step is None else min(total, step.index)


def _ddmin(attempt: Callable[[Trace], bool], judge: _Judge, best: Callable[[], Trace]) -> bool:
    """Drop blocks of steps (delta debugging's way: the trace in 2 parts, then 4, ... until
    each is one step, and back to fewer parts after a drop); True when done, False when the
    time ran out first."""
    parts = 2
    while len(best().steps) >= 1:
        steps = len(best().steps)
        if judge.out_of_time():
            return False
        block = max(1, -(-steps // parts))
        dropped = False
        for begin in range(steps - block, -block, -block):  # the end first: most often idle
            begin = max(0, begin)
            keep = [i for i in range(steps) if not begin <= i < begin + block]
            if len(keep) == steps:
                continue
            if judge.out_of_time():
                return False
            if attempt(sub_trace(best(), keep)):
                dropped = True
                parts = max(parts - 1, 2)
                break
        if not dropped:
            if block == 1:
                return True
            parts = min(steps, parts * 2)
    return True


def _merge_clock_moves(
    attempt: Callable[[Trace], bool], judge: _Judge, best: Callable[[], Trace]
) -> bool:
    """Make neighbouring clock moves one; True when done."""
    position = 0
    while position + 1 < len(best().steps):
        if judge.out_of_time():
            return False
        merged = merged_clock_moves(best(), position)
        if merged is None or not attempt(merged):
            position += 1
    return True


def shrink_failure(
    error: Failure,
    board: type[BoardMachine],
    *,
    seconds: float,
    on_progress: ShrinkListener | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> tuple[Failure, Shrunk | None]:
    """``error``, a sequential run's failure as Hypothesis reported it, with its trace shrunk
    by replay on ``board`` within about ``seconds``: the failure a replay of the smallest
    failing sub-trace reported, with a note of how it was shrunk and its trace file written
    to ``board``'s trace directory (the trace file Hypothesis's run wrote stays as it is).

    ``error`` is returned as it is, with ``None``, when it cannot be shrunk this way: it has
    no sequential trace (a parallel program's, a hang, a failure before the run began), or no
    replay of its trace failed as it did; then the returned :class:`Shrunk` says so."""
    from taskboard.stateful._config import MachineConfig
    from taskboard.stateful._reports import report_of

    report = report_of(error)
    trace = report.recording
    if trace is None or trace.verdict is None or trace.program is not None or report.hung:
        return error, None
    if report.is_fault or seconds <= 0:
        return error, None
    shrunk = shrink_by_replay(
        trace, board, seconds=seconds, on_progress=on_progress, stopped=stopped
    )
    if shrunk.violation is None:
        return error, shrunk
    before, after = len(trace.steps), len(shrunk.trace.steps)
    if after == before and not report.unrepeated:  # no shorter trace: the report stands
        return error, shrunk
    replayed = report_of(shrunk.violation)
    how = (
        f"shrunk by replay from {before} steps to {after} ({shrunk.replays} replays of "
        "sub-traces on fresh boards"
        + (", stopped at the shrink budget" if shrunk.cut else "")
        + ")"
    )
    if shrunk.tried > 1:
        how += (
            f"; on the wall clock this trace failed in {shrunk.failed} of {shrunk.tried} "
            "replays (a sub-trace counted as failing when one of "
            f"{WALL_TRIES} replays failed)"
        )
    shown = replayed.noted(f"note: {how}")
    directory = MachineConfig.of(board).trace_dir
    if directory:
        shown = shown.recorded(directory)
    result = dataclasses.replace(shown, unrepeated=report.unrepeated).error()
    result.__traceback__ = error.__traceback__
    return result, shrunk
