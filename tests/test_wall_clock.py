"""Wall-clock mode (SPEC 7): windows in the model, timed linearizability, and the machine,
traces, replay and CLI on boards that keep their own time. No servers needed here."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import (
    Board,
    ClaimRequest,
    Clock,
    Lease,
    LeaseLostError,
    State,
    SystemClock,
    TakenError,
    Task,
)
from taskboard._cli import main
from taskboard._profiles import CI
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.memory import _live as _memory_live
from taskboard.hosts.memory import _until as _memory_until
from taskboard.hosts.mutants import NonAtomicClaim, RenewWithoutTokenCheck, TakeoverKeepsFence
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.model import (
    BoardModel,
    Call,
    ContractViolation,
    Op,
    Operation,
    Outcome,
    Step,
    Window,
    check_history,
)
from taskboard.stateful import (
    TRACE_DIR_ENV,
    BoardMachine,
    load_trace,
    parse_trace,
    render_regression_test,
    replay_trace,
    run_parallel_state_machine,
    trace_to_json,
)
from taskboard.stateful._config import wall_ttl_unit
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session import ExampleStats, Session, end_example, on_example_end
from taskboard.stateful._steps._base import RecordedUntils
from taskboard.stateful._trace import format_offset

MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Small: every wall-clock example sleeps through its leases.
WALL = settings(settings.get_profile(CI), max_examples=25)
#: Catching needs no shrinking, which would sleep through every replay.
CATCH = settings(settings.get_profile(CI), max_examples=200, phases=(Phase.generate,))


def window(start_ms: float, end_ms: float) -> Window:
    """The window from ``start_ms`` to ``end_ms`` milliseconds after T0."""
    return Window(T0 + start_ms * MS, T0 + end_ms * MS)


def claimed_model(until_ms: float = 10) -> tuple[BoardModel, Task]:
    """A model of one task t1 claimed by a1 (token L1, fence 1) until T0 + until_ms."""
    model = BoardModel.start([Task("t1")], resolution=US)
    lease = Lease("L1", 1, T0 + until_ms * MS)
    got = Task("t1", state=State.CLAIMED, owner="a1", lease=lease, seq=1)
    model = model.advance(
        Call(Op.CLAIM, "t1", agent="a1", ttl=until_ms * MS), T0, Outcome(task=got)
    )
    return model, got


def takeover(model: BoardModel, at_ms: float) -> Outcome:
    """a2's claim of t1 succeeding at T0 + at_ms with a 10 ms lease (token L2, fence 2)."""
    task = model.task("t1")
    assert task is not None
    lease = Lease("L2", 2, T0 + (at_ms + 10) * MS)
    return Outcome(task=dataclasses.replace(task, owner="a2", lease=lease, seq=task.seq + 1))


CLAIM_A2 = Call(Op.CLAIM, "t1", agent="a2", ttl=10 * MS)


# -- Window --------------------------------------------------------------------------------------


def test_window_needs_aware_bounds_in_order() -> None:
    """A Window rejects naive bounds (TypeError) and an earliest after its latest (ValueError)."""
    with pytest.raises(TypeError, match="aware"):
        Window(datetime(2026, 1, 1), T0)  # naive on purpose
    with pytest.raises(ValueError, match="after"):
        window(2, 1)
    assert Window.around(T0, T0 + MS, MS) == window(-1, 2)
    assert window(1, 4).width == 3 * MS


# -- the model on windows ------------------------------------------------------------------------


def test_window_before_until_allows_only_taken() -> None:
    """A claim whose whole window lies before until may only be TakenError."""
    model, _ = claimed_model(10)
    assert [a.error for a in model.expect(CLAIM_A2, window(5, 8))] == ["TakenError"]


def test_window_after_until_allows_only_takeover() -> None:
    """A claim whose whole window lies at or after until may only succeed (a takeover)."""
    model, _ = claimed_model(10)
    assert [a.error for a in model.expect(CLAIM_A2, window(10, 12))] == [None]


def test_window_straddling_until_allows_both_sides() -> None:
    """A window that straddles until allows the outcome of either side, and says which is which."""
    model, _ = claimed_model(10)
    allowed = model.expect(CLAIM_A2, window(9, 11))
    assert [a.error for a in allowed] == ["TakenError", None]
    assert "before until" in allowed[0].reason
    assert "at or after until" in allowed[1].reason


def test_model_goes_on_from_the_side_the_board_chose() -> None:
    """After a straddled call the floor is the earliest instant that allows what the board did."""
    model, _ = claimed_model(10)
    refused = model.advance(CLAIM_A2, window(9, 11), Outcome(error="TakenError"))
    assert refused.floor == T0 + 9 * MS
    taken = model.advance(CLAIM_A2, window(9, 11), takeover(model, 10))
    assert taken.floor == T0 + 10 * MS
    task = taken.task("t1")
    assert task is not None
    assert task.owner == "a2"


def test_effect_instants_never_go_backwards() -> None:
    """Once a takeover placed a call at or after until, a later renew by the old token, even on
    a window that reaches back before until, is no longer allowed to succeed."""
    model, got = claimed_model(10)
    after = model.advance(CLAIM_A2, window(9, 11), takeover(model, 10))
    renew = Call(Op.RENEW, "t1", token="L1", ttl=10 * MS)
    assert [a.error for a in after.expect(renew, window(8, 12))] == ["LeaseLostError"]
    with pytest.raises(ContractViolation, match="SPEC 7"):
        after.advance(renew, window(5, 8), Outcome(error="LeaseLostError"))
    assert got.lease is not None


def test_until_must_lie_one_ttl_after_the_window() -> None:
    """A returned until is adopted as the board gave it when until - ttl lies in the window
    widened by the resolution, and is a violation outside it."""
    model = BoardModel.start([Task("t1")], resolution=MS)
    claim = Call(Op.CLAIM, "t1", agent="a1", ttl=20 * MS)

    def claimed(until_ms: float) -> Outcome:
        lease = Lease("L1", 1, T0 + until_ms * MS)
        return Outcome(task=Task("t1", state=State.CLAIMED, owner="a1", lease=lease, seq=1))

    kept = model.advance(claim, window(2, 4), claimed(23.5)).task("t1")
    assert kept is not None
    assert kept.lease is not None
    assert kept.lease.until == T0 + 23.5 * MS
    model.advance(claim, window(2, 4), claimed(21))  # one resolution early: accepted
    with pytest.raises(ContractViolation, match="too late"):
        model.advance(claim, window(2, 4), claimed(25.5))
    with pytest.raises(ContractViolation, match="too early"):
        model.advance(claim, window(2, 4), claimed(20.5))


def test_an_outcome_no_instant_allows_is_a_violation_naming_every_side() -> None:
    """A rejection no side of the window allows is reported with both sides' reasons."""
    model, _ = claimed_model(10)
    with pytest.raises(ContractViolation) as caught:
        model.advance(CLAIM_A2, window(9, 11), Outcome(error="BlockedError"))
    assert "TakenError" in caught.value.expected
    assert "success" in caught.value.expected


# -- timed linearizability -----------------------------------------------------------------------


def operation(op_id: int, call: Call, outcome: Outcome, start: float, end: float) -> Operation:
    """An operation invoked at ``start`` and returned at ``end`` (seconds, and ms after T0)."""
    return Operation(op_id, op_id, call, outcome, start, end, window(start, end))


def test_timed_history_needs_an_instant_inside_each_window() -> None:
    """A takeover whose whole window lies before the lease's until is not linearizable; the
    same takeover with a window reaching until is."""
    model, _ = claimed_model(10)
    early = operation(0, CLAIM_A2, takeover(model, 6), 5, 8)
    assert check_history(model, [early], T0).verdict == "not linearizable"
    late = operation(0, CLAIM_A2, takeover(model, 10), 9, 11)
    assert check_history(model, [late], T0).verdict == "linearizable"


def test_timed_history_instants_are_non_decreasing_along_the_order() -> None:
    """A call placed after a takeover may not take effect before it, even if its window allows:
    a release by the old token with a window before until cannot follow the takeover."""
    model, _ = claimed_model(10)
    taken = operation(0, CLAIM_A2, takeover(model, 10), 10, 11)
    release = Call(Op.RELEASE, "t1", token="L1")
    stale = operation(1, release, Outcome(), 11.5, 12)  # invoked after the takeover returned
    stale = dataclasses.replace(stale, window=window(6, 8))
    result = check_history(model, [taken, stale], T0)
    assert result.verdict == "not linearizable"


def test_untimed_history_ignores_windows_it_does_not_have() -> None:
    """Operations without a window are judged at the fixed now, as before."""
    model, _ = claimed_model(10)
    op = Operation(0, 0, CLAIM_A2, Outcome(error="TakenError"), 0.0, 1.0)
    assert check_history(model, [op], T0 + 5 * MS).verdict == "linearizable"
    assert math.isinf(Operation(1, 0, CLAIM_A2, None, 0.0).returned)


# -- the machine on the wall clock ---------------------------------------------------------------


def wall(board: Any, **attributes: Any) -> type[BoardMachine]:
    """A wall-clock machine over ``board``'s class, with no trace target."""
    return BoardMachine.for_board(board, clock_mode="wall", trace_target="", **attributes)


@pytest.mark.slow
@pytest.mark.parametrize("board", [MemoryBoard, SQLiteBoard], ids=lambda b: b.__name__)
def test_correct_hosts_pass_in_wall_mode(board: type[Board]) -> None:
    """The reference hosts, on the SystemClock the machine hands them, raise no false alarm."""
    machine = wall(board)
    with failures_reported(machine):
        run_state_machine_as_test(machine, settings=WALL)


@pytest.mark.parametrize("mutant", [TakeoverKeepsFence, RenewWithoutTokenCheck])
def test_mutants_are_caught_in_wall_mode(mutant: type[Board]) -> None:
    """Bugs that do not hinge on the exact instant of until are caught on the wall clock."""
    machine = wall(mutant)
    with pytest.raises(ContractViolation) as caught, failures_reported(machine):
        run_state_machine_as_test(machine, settings=CATCH)
    assert "window" in str(caught.value)
    assert "wall clock from" in str(caught.value)


def test_make_board_gets_a_system_clock_and_tasks_without_leases() -> None:
    """In wall mode make_board receives a SystemClock; the initial tasks hold no lease."""
    seen: list[tuple[Clock, list[Task]]] = []

    def factory(tasks: Sequence[Task], clock: Clock) -> Board:
        seen.append((clock, list(tasks)))
        return MemoryBoard(tasks, clock)

    machine = wall(factory)
    run_state_machine_as_test(machine, settings=settings(WALL, max_examples=2))
    assert seen
    assert all(isinstance(clock, SystemClock) for clock, _ in seen)
    assert all(t.lease is None for _, tasks in seen for t in tasks)


@pytest.mark.slow
def test_at_expiry_lands_on_both_sides_of_until_outside_the_window() -> None:
    """On the wall clock at_expiry sleeps to just before and just after a lease's until, and the
    call that follows has its whole window on that side."""
    landings: dict[str, int] = {"before": 0, "after": 0}

    def listen(example: ExampleStats) -> None:
        tokens = {label: token for token, label in example.labels.items()}
        # Each lease's until as the trace goes: a later renew may change it.
        untils: dict[str, datetime | None] = {}
        for clock_step, call_step in itertools.pairwise(example.trace):
            task = clock_step.outcome.task if clock_step.outcome is not None else None
            if task is not None and task.lease is not None:
                untils[task.lease.token] = task.lease.until
            landed = re.search(r"(before|after) (L\d+)'s until", clock_step.note)
            if landed is None or call_step.window is None:
                continue
            side, label = landed.groups()
            until = untils.get(tokens[label])
            assert until is not None
            if side == "before" and call_step.window.latest < until:
                landings["before"] += 1
            if side == "after" and call_step.window.earliest > until:
                landings["after"] += 1

    with on_example_end(listen):
        run_state_machine_as_test(wall(MemoryBoard), settings=settings(WALL, max_examples=40))
    assert landings["before"] > 0
    assert landings["after"] > 0


def test_ttls_are_drawn_in_a_unit_that_outlasts_a_calls_uncertainty() -> None:
    """The wall-clock TTL unit is a multiple of the resolution, longer than twice the skew."""
    assert wall_ttl_unit(MS, MS) == 5 * MS
    assert wall_ttl_unit(US, MS) == 5 * MS
    assert wall_ttl_unit(3 * MS, 2 * MS) == 9 * MS
    assert wall_ttl_unit(10 * MS, timedelta(0)) == 10 * MS


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("clock_mode", "sundial", "clock_mode must be 'manual', 'virtual' or 'wall'"),
        ("clock_skew", timedelta(milliseconds=-1), "clock_skew must be a non-negative"),
        ("clock_skew", 0.001, "clock_skew must be a non-negative"),
    ],
)
def test_bad_clock_settings_are_a_type_error(attribute: str, value: object, message: str) -> None:
    """A clock_mode or clock_skew the machine cannot use is a TypeError naming it."""
    machine = BoardMachine.for_board(MemoryBoard, **{attribute: value})
    with pytest.raises(TypeError, match=message):
        machine.check_definition()


def test_for_board_takes_the_factorys_own_clock_mode() -> None:
    """A factory that declares clock_mode and clock_skew gets a machine that uses them."""

    class ServerTimeBoard(MemoryBoard):
        clock_mode: ClassVar[str] = "wall"
        clock_skew: ClassVar[timedelta] = 2 * MS

    machine = BoardMachine.for_board(ServerTimeBoard)
    assert (machine.clock_mode, machine.clock_skew) == ("wall", 2 * MS)


class FirstRunOnly(MemoryBoard):
    """Completes a stale token's task once per process: a bug that does not recur on replay."""

    fired: ClassVar[bool] = False

    def complete(self, task_id: str, token: str) -> None:
        task = next(t for t in self.list_tasks() if t.id == task_id)
        if not FirstRunOnly.fired and task.lease is not None and task.lease.token != token:
            FirstRunOnly.fired = True
            lease = task.lease
            super().release(task_id, lease.token)
            return
        super().complete(task_id, token)


def test_a_failure_that_does_not_recur_is_reported_not_flaky(tmp_path: Path) -> None:
    """A violation Hypothesis cannot replay is reported as the violation, says it did not recur,
    and still leaves its trace file: never a bare Flaky error, never a pass."""
    FirstRunOnly.fired = False
    machine = wall(FirstRunOnly, trace_dir=str(tmp_path))
    with pytest.raises(ContractViolation) as caught:
        machine.TestCase("runTest").runTest()
    report = str(caught.value)
    assert "did not recur" in report
    assert "nor did 3 replays of its trace on fresh boards" in report
    assert "wall clock" in report
    assert "--shortest-lease" not in report  # no claim was refused: not a short-lease store
    assert caught.value.trace_file is not None
    assert load_trace(caught.value.trace_file).clock_mode == "wall"


class RefusesOnce(MemoryBoard):
    """Refuses one free claim per process, as a store that cannot honour a short lease does
    now and then: a refusal the model did not allow, which does not recur."""

    refused: ClassVar[bool] = False

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        task = next(t for t in self.list_tasks() if t.id == task_id)
        if not RefusesOnce.refused and task.state is State.OPEN and not task.deps:
            RefusesOnce.refused = True
            raise TakenError("the lease is shorter than the store's drift allowance")
        return super().claim(task_id, agent, request)


def test_the_shortest_lease_hint_comes_only_with_a_refused_claim(tmp_path: Path) -> None:
    """A failure that does not recur and whose trace shows a claim refused that the model
    allowed points to --shortest-lease."""
    RefusesOnce.refused = False
    machine = wall(RefusesOnce, trace_dir=str(tmp_path))
    with pytest.raises(ContractViolation) as caught:
        machine.TestCase("runTest").runTest()
    report = str(caught.value)
    assert "did not recur" in report
    assert "A claim the model allowed was refused" in report
    assert "--shortest-lease" in report


def test_replay_of_a_wall_trace_that_does_not_recur_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """taskboard replay of a wall-clock trace whose failure does not happen again says DID
    NOT RECUR, never PASS; it points to --shortest-lease only for a refused claim."""
    FirstRunOnly.fired = False
    machine = wall(FirstRunOnly, trace_dir=str(tmp_path))
    with pytest.raises(ContractViolation) as caught:
        machine.TestCase("runTest").runTest()
    assert caught.value.trace_file is not None
    code = main(
        ["replay", caught.value.trace_file, "--board", "taskboard.hosts.memory:MemoryBoard"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "DID NOT RECUR" in out
    assert "--shortest-lease" not in out  # the trace refused no claim the model allowed
    assert "PASS" not in out


# -- traces, replay and the CLI ------------------------------------------------------------------


def caught_trace(tmp_path: Path) -> Path:
    """The trace file a wall-clock run on TakeoverKeepsFence leaves behind."""
    machine = wall(TakeoverKeepsFence, trace_dir=str(tmp_path))
    with pytest.raises(ContractViolation) as caught, failures_reported(machine):
        run_state_machine_as_test(machine, settings=settings(CATCH, phases=(Phase.generate,)))
    path = caught.value.trace_file
    if path is None:  # written only in Hypothesis's final replay, which a no-shrink run skips
        path = str(tmp_path / "trace.json")
        Path(path).write_text(trace_to_json(caught.value.recording), encoding="utf-8")
    return Path(path)


def test_a_wall_trace_records_the_mode_the_skew_and_each_window(tmp_path: Path) -> None:
    """A wall-clock trace file says clock_mode wall, the skew, and every call's window, and
    reads back as it was written."""
    path = caught_trace(tmp_path)
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["clock_mode"] == "wall"
    assert document["clock_skew_us"] == 1000
    calls = [s for s in document["steps"] if s["kind"] == "call"]
    assert calls
    assert all(len(s["window"]) == 2 for s in calls)
    trace = load_trace(path)
    assert trace_to_json(trace) == path.read_text(encoding="utf-8")


def test_a_wall_trace_replays_on_the_wall_clock(tmp_path: Path) -> None:
    """Replaying a wall-clock trace runs the board in wall mode and finds the bug again."""
    trace = load_trace(caught_trace(tmp_path))
    clocks: list[Clock] = []

    def factory(tasks: Sequence[Task], clock: Clock) -> Board:
        clocks.append(clock)
        return TakeoverKeepsFence(tasks, clock)

    result = replay_trace(trace, factory)
    assert isinstance(clocks[0], SystemClock)
    assert not result.passed
    assert result.violation is not None
    assert "wall clock from" in str(result.violation)


def test_a_bad_window_in_a_trace_names_the_field(tmp_path: Path) -> None:
    """A window that is not two ISO times in order is a TraceFileError naming its path."""
    document = json.loads(caught_trace(tmp_path).read_text(encoding="utf-8"))
    call = next(i for i, s in enumerate(document["steps"]) if s["kind"] == "call")
    document["steps"][call]["window"] = [document["steps"][call]["window"][1], "2000-01-01"]
    with pytest.raises(ValueError, match=rf"steps\[{call}\]\.window"):
        parse_trace(json.dumps(document))
    document["clock_mode"] = "sundial"
    with pytest.raises(ValueError, match="clock_mode"):
        parse_trace(json.dumps(document))


def test_parallel_mode_on_the_wall_clock() -> None:
    """The parallel mode judges each thread's call on its window: a correct board passes, a
    non-atomic claim is caught."""
    run_parallel_state_machine(wall(MemoryBoard), settings=settings(WALL, max_examples=10))
    with pytest.raises(ContractViolation, match="concurrent history"):
        run_parallel_state_machine(wall(NonAtomicClaim), settings=settings(WALL, max_examples=50))


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m taskboard ARGS`` in ``tmp_path``, with no trace dir or profile inherited."""
    env = {k: v for k, v in os.environ.items() if k not in (TRACE_DIR_ENV, "HYPOTHESIS_PROFILE")}
    return subprocess.run(
        [sys.executable, "-m", "taskboard", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_fuzz_runs_on_the_wall_clock(tmp_path: Path) -> None:
    """``taskboard fuzz --clock wall`` fuzzes in wall mode and says so in its header."""
    result = cli(
        tmp_path, "fuzz", "taskboard.hosts.memory:MemoryBoard", "--clock", "wall",
        "--clock-skew", "0.5", "--max-examples", "5", "--seed", "1", "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "wall clock" in result.stderr
    assert "boundary transitions at exactly until are left out" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--clock", "sundial"), "invalid choice"),
        (("--clock", "wall", "--clock-skew", "-1"), "--clock-skew must be a number"),
    ],
)
def test_fuzz_rejects_bad_clock_options(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """A bad --clock or --clock-skew is a one-line usage error, exit 2, before anything runs."""
    result = cli(tmp_path, "fuzz", "--max-examples", "1", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_claim_request_ttl_unit_reaches_the_board() -> None:
    """On the wall clock a claim's ttl is a whole number of TTL units (here 5 ms), or the one
    drawn below the resolution (half of 1 ms)."""
    seen: list[timedelta] = []

    class Recording(MemoryBoard):
        def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
            seen.append(request.ttl)
            return super().claim(task_id, agent, request)

    run_state_machine_as_test(wall(Recording), settings=settings(WALL, max_examples=5))
    assert seen
    assert all(ttl % (5 * MS) == timedelta(0) or ttl == MS / 2 for ttl in seen)


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(microseconds=8624), "8.624ms"),
        (timedelta(microseconds=-1500), "-1.500ms"),
        (timedelta(microseconds=999), "999us"),
        (timedelta(milliseconds=5), "5ms"),
        (timedelta(milliseconds=999, microseconds=1), "999.001ms"),
        (timedelta(seconds=2, microseconds=7), "2.000007 s"),
        (timedelta(microseconds=-28_799_992_470), "-8 h 0 min"),
    ],
)
def test_trace_offsets_read_in_decimal_milliseconds(delta: timedelta, text: str) -> None:
    """A trace shows a wall-clock offset under a second in exact decimal ms, and a longer one
    in seconds, minutes or hours."""
    assert format_offset(delta) == text


class RenewCheckThenWrite(MemoryBoard):
    """Renew checks the lease and writes in two steps: a takeover at the expiry boundary lands
    in between, and the renew then stamps the new holder's lease."""

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            task = self._get(task_id)
            if not _memory_live(self._current_lease(task, token), self._clock.now()):
                raise LeaseLostError(f"task {task_id!r}: the lease is lost")
        time.sleep(0.001)  # a second round trip to the store
        with self._lock:
            task = self._tasks[task_id]
            if task.lease is None:
                raise LeaseLostError(f"task {task_id!r} has no lease")
            lease = dataclasses.replace(
                task.lease, until=_memory_until(self._clock.now(), request.ttl)
            )
            return self._put(dataclasses.replace(task, lease=lease, seq=task.seq + 1))


@pytest.mark.slow
def test_parallel_wall_mode_races_at_the_expiry_boundary() -> None:
    """Expiry races start the threads just before a lease's until: a renew whose check and
    write are two steps is caught when a takeover lands in between."""
    with pytest.raises(ContractViolation, match="concurrent history"):
        run_parallel_state_machine(wall(RenewCheckThenWrite), settings=CATCH)


class GlitchOnce(MemoryBoard):
    """One racing thread's first claim in this process wrongly says TakenError."""

    glitched: ClassVar[bool] = False

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if threading.current_thread() is not threading.main_thread():
            with _GLITCH:
                if not GlitchOnce.glitched:
                    GlitchOnce.glitched = True
                    raise TakenError(f"task {task_id!r} is taken (a glitch)")
        return super().claim(task_id, agent, request)


_GLITCH = threading.Lock()


def test_an_unrepeated_parallel_failure_still_writes_its_trace(tmp_path: Path) -> None:
    """A concurrent history that fails once and never again is reported with the note and its
    program's trace file."""
    GlitchOnce.glitched = False
    machine = wall(GlitchOnce, trace_dir=str(tmp_path))
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(machine, settings=settings(WALL, max_examples=50))
    assert "did not recur" in str(caught.value)
    assert caught.value.trace_file is not None
    assert load_trace(caught.value.trace_file).program is not None


def test_replay_lands_as_far_from_the_replayed_until_as_recorded() -> None:
    """A wall-clock replay moves a landing near a lease's until to the same offset from that
    lease's until on the new board, not from the start."""
    session = Session(wall(MemoryBoard)(), [Task("t1")], T0)
    try:
        session.perform(Call(Op.CLAIM, "t1", agent="a1", ttl=50 * MS))
        replayed_until = session.untils[next(iter(session.labels))]
        assert replayed_until is not None
        leases = RecordedUntils()
        recorded_until = T0 + 20 * MS
        lease = Lease("original-token", 1, recorded_until)
        claimed = Task("t1", state=State.CLAIMED, owner="a1", lease=lease, seq=1)
        leases.follow(Step(1, T0, CLAIM_A2, Outcome(task=claimed)))
        landing = Step(2, T0 + 5 * MS, advance=17 * MS, note="to 2ms after L1's until")
        assert leases.anchored(landing, session) == replayed_until + 2 * MS
        assert leases.anchored(dataclasses.replace(landing, note=""), session) is None
    finally:
        end_example(session)


def test_a_wall_regression_test_warns_that_timing_may_not_repeat(tmp_path: Path) -> None:
    """A regression test rendered from a wall-clock trace says it may pass while the bug
    remains; one from a manual trace does not."""
    trace = load_trace(caught_trace(tmp_path))
    assert "may pass while the bug remains" in render_regression_test(trace, "m:Board")
    manual = dataclasses.replace(trace, clock_mode="manual")
    assert "may pass while the bug remains" not in render_regression_test(manual, "m:Board")


def test_a_replay_that_drew_differently_reports_the_violation_seen() -> None:
    """Hypothesis's FlakyStrategyDefinition (a wall-clock replay drew differently) carrying no
    failure becomes the violation the run reported, noted as not recurring."""
    from hypothesis.errors import FlakyStrategyDefinition

    machine_cls = BoardMachine.for_board(MemoryBoard, clock_mode="wall", trace_target="")

    def run_reporting_then_drawing_differently() -> None:
        with failures_reported(machine_cls):
            session = Session(machine_cls(), [Task("t1")], T0)
            with contextlib.suppress(ContractViolation):
                session.fail_with(ContractViolation("SPEC 3.1", "TakenError", "a lease"), None)
            end_example(session)
            raise FlakyStrategyDefinition("Inconsistent data generation!")

    with pytest.raises(ContractViolation, match="did not recur") as caught:
        run_reporting_then_drawing_differently()
    assert caught.value.clause == "SPEC 3.1"
    with pytest.raises(FlakyStrategyDefinition), failures_reported(machine_cls):
        raise FlakyStrategyDefinition("no failure was seen in this run")
