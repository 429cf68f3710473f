"""The parallel mode: a sequential prefix, then several threads at once, checked for
linearizability against the same model the sequential machine uses.

Hypothesis draws a program: a short sequential prefix (run through the machine with every
per-step check) and two to four thread suffixes of a few operations each. The suffixes run
against the board from real threads behind one start barrier, with the manual clock
standing still, and every call's invocation and response are stamped on a monotonic
clock. The history must then have a sequential order, consistent with real time, that the
model allows, and that ends where the board's final snapshot says it ended. On the wall
clock (SPEC 7) time moves on during the threads: each call also gets its window, and the
order must give each call an instant inside it, never going backwards (timed
linearizability).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pickle
import time
import unittest
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import settings as type_settings
from hypothesis import strategies as st

from taskboard._contract import Board, Task
from taskboard._driver import CallTimeoutError
from taskboard._race import Lane, MakeCall, Preset, address_of, race_on_threads, worker_pool
from taskboard._schedule import CHANGE_POINT_SCALE, CLOCK, Priorities, RaceScheduler, Turn
from taskboard.model import (
    Call,
    ContractViolation,
    LinearizabilityResult,
    Operation,
    Window,
    check_history,
    format_duration,
)
from taskboard.stateful._client_clocks import holders_of
from taskboard.stateful._config import MachineConfig
from taskboard.stateful._generation import (
    AGENTS,
    TASK_IDS,
    dependency_graphs,
    grid_start,
)
from taskboard.stateful._hypothesis import (
    carry_seed_and_reproduction,
    database_key,
    in_final_replay,
    key_database_by,
    without_explain,
)
from taskboard.stateful._reports import Report, failures_reported, record_failure
from taskboard.stateful._session import (
    MachineHooks,
    Session,
    end_example,
)
from taskboard.stateful._session_options import session_run
from taskboard.stateful._steps import (
    ActStep,
    ClaimStep,
    ExpiryStep,
    ParallelProgram,
    ProgramDraw,
    ProgramStep,
    program_steps,
)
from taskboard.stateful._timeline import lane_name, micros_text, timeline_html
from taskboard.stateful._trace import render_call
from taskboard.stateful._tracefile import Verdict

__all__ = [
    "RUNS_PER_PROGRAM",
    "ParallelProgram",
    "parallel_test_case",
    "run_parallel_state_machine",
]

#: How often each drawn program runs, each time on a fresh board: interleavings vary.
RUNS_PER_PROGRAM = 3
#: Seconds a thread suffix may take before the run counts as hung.
THREAD_TIMEOUT = 30.0
#: The most threads a program races.
MOST_THREADS = 4
#: The most choices a controlled program's schedule draws; past them the threads take turns.
MOST_CHOICES = 64
#: How many choices among racing threads each call is expected to give (about one per
#: statement or command: four, on the SQLite race mutants), for where PCT's change points
#: fall.
EXPECTED_POINTS_PER_CALL = 4
#: How many leads an expiry race's expiry step draws from (the clock moves before turn
#: ``lead + 1`` on the wall clock, ``lead`` on the others): on the wall clock the turns before
#: the move must run within the lease, so few; on the manual and virtual clocks the move is
#: exact at any turn.
WALL_MOVE_TURNS = 4
MOVE_TURNS = 8


def _steps(*, in_prefix: bool, nemesis: tuple[str, ...] = ()) -> st.SearchStrategy[ProgramStep]:
    # Races need collisions: most calls go to the first task.
    tasks = st.sampled_from((TASK_IDS[0], TASK_IDS[0], TASK_IDS[0], *TASK_IDS[1:]))
    return program_steps(ProgramDraw(tasks, in_prefix, nemesis))


def programs(
    nemesis: tuple[str, ...] = (),
    *,
    controlled: bool = False,
    move_turns: int = WALL_MOVE_TURNS,
    exploration: str = "random",
    depth: int = 3,
) -> st.SearchStrategy[ParallelProgram]:
    """Programs: a prefix of up to 6 steps, then 2 to 4 threads of 1 to 4 operations each;
    one in four is an :func:`expiry race <expiry_races>`, whose clock moves before one of its
    first ``move_turns`` turns under control. ``nemesis`` names the nemesis steps (SPEC 9)
    the prefix may hold besides calls and clock moves. ``controlled``: each program also has
    a drawn schedule for its threads: with ``exploration`` ``"random"``,
    :data:`MOST_CHOICES` choices; with ``"pct"``, PCT's priorities and ``depth - 1`` change
    points (see :class:`~taskboard._schedule.Priorities`)."""
    drawn = _programs(nemesis, move_turns if controlled else WALL_MOVE_TURNS)
    if not controlled:
        return drawn
    if exploration == "pct":
        ranks = st.permutations(range(MOST_THREADS)).map(tuple)
        points = st.integers(0, CHANGE_POINT_SCALE - 1)
        changes = st.lists(points, min_size=depth - 1, max_size=depth - 1).map(tuple)
        return st.builds(_prioritized, drawn, ranks, changes)
    choices = st.lists(st.integers(0, MOST_THREADS - 1), max_size=MOST_CHOICES).map(tuple)
    return st.builds(_scheduled, drawn, choices)


def _scheduled(program: ParallelProgram, choices: tuple[int, ...]) -> ParallelProgram:
    return dataclasses.replace(program, schedule=choices)


def _prioritized(
    program: ParallelProgram, ranks: tuple[int, ...], changes: tuple[int, ...]
) -> ParallelProgram:
    calls = sum(len(steps) for steps in program.threads)
    expected = EXPECTED_POINTS_PER_CALL * calls
    return dataclasses.replace(program, schedule=(), pct=Priorities(ranks, changes, expected))


def _programs(nemesis: tuple[str, ...], move_turns: int) -> st.SearchStrategy[ParallelProgram]:
    general = st.builds(
        ParallelProgram,
        # Half the programs have no dependencies at all, so every task can be raced for.
        st.one_of(st.just(dict.fromkeys(TASK_IDS, ())), dependency_graphs()),
        st.lists(_steps(in_prefix=True, nemesis=nemesis), max_size=6).map(tuple),
        _thread_lists(),
    )
    return st.one_of(general, general, general, expiry_races(move_turns))


@st.composite
def expiry_races(draw: st.DrawFn, move_turns: int = WALL_MOVE_TURNS) -> ParallelProgram:
    """A short lease on one task, the clock moved to its expiry, then threads that take over,
    renew, complete or release it at once: a renew or complete that checks the lease and
    writes in two steps lets a takeover land in between, which only a race at the boundary
    shows. Under control the clock crosses the until between two turns (the expiry step's
    lead, below ``move_turns``, says which; see :func:`_expiry_crossing`)."""
    task = TASK_IDS[0]
    claim = ClaimStep(task, draw(st.sampled_from(AGENTS)), 1)
    expiry = ExpiryStep(task, draw(st.integers(0, move_turns - 1)))
    ticks = st.sampled_from((1, 5))
    claims = st.builds(ClaimStep, st.just(task), st.sampled_from(AGENTS), ticks)

    def acts(op: str) -> st.SearchStrategy[ActStep]:
        return st.builds(ActStep, st.just(op), st.just(task), st.just("latest"), ticks)

    racer = st.one_of(claims, *(acts(op) for op in ("renew", "complete")), claims, acts("release"))
    threads = draw(st.lists(st.lists(racer, min_size=1, max_size=2), min_size=2, max_size=4))
    deps: dict[str, tuple[str, ...]] = dict.fromkeys(TASK_IDS, ())
    return ParallelProgram(deps, (claim, expiry), tuple(map(tuple, threads)))


@st.composite
def _thread_lists(draw: st.DrawFn) -> tuple[tuple[ProgramStep, ...], ...]:
    # The other threads often repeat the first one's calls: the same call made twice at
    # once (two claims, two completes with one token) is the race most stores lose.
    suffix = st.lists(_steps(in_prefix=False), min_size=1, max_size=4).map(tuple)
    first = draw(suffix)
    others = draw(st.lists(st.one_of(st.just(first), suffix), min_size=1, max_size=3))
    return (first, *others)


#: What the parallel mode runs: a machine class, each instance of which gives a run its hooks.
MachineClass = type[MachineHooks]


def run_parallel_state_machine(
    machine_cls: MachineClass, *, settings: settings | None = None
) -> None:
    """Run ``machine_cls``'s board in parallel mode, as Hypothesis's
    ``run_state_machine_as_test`` runs the sequential one.

    Each drawn program runs :data:`RUNS_PER_PROGRAM` times on fresh boards. ``@seed`` and
    ``@reproduce_failure`` on the machine class apply, as they do to its ``TestCase``.

    Raises:
        ContractViolation: the prefix broke the contract, or a concurrent history has no
            sequential order the contract allows (the report shows each thread's calls,
            the longest order found and the calls that cannot come next).
    """

    def run_once(program: ParallelProgram, variant: int = 0) -> bool:
        try:
            return run_program(machine_cls, program, variant=variant)
        except ContractViolation:
            if not in_final_replay():
                raise
            # Hypothesis has shrunk the program; now move what need not be concurrent
            # into the prefix, and report the simplest program that still fails.
            simpler = _move_into_prefix(machine_cls, program)
            _rerun(machine_cls, simpler, attempts=_attempts(simpler), record=True)
            raise

    def run(program: ParallelProgram) -> None:
        if program.schedule is not None:
            if run_once(program):
                # Controlled: each run is exact; the others are other interleavings of it.
                for variant in range(1, RUNS_PER_PROGRAM):
                    run_once(program, variant)
                return
            # No point was seen: the board races as it does without control.
            program = dataclasses.replace(program, schedule=None)
        for _ in range(RUNS_PER_PROGRAM):
            run_once(program)

    # Keys the example database by machine, as Hypothesis does for state machines.
    key_database_by(run, database_key(machine_cls))
    config = MachineConfig.of(machine_cls)
    controlled = config.race_scheduling == "controlled" and not config.processes
    drawn = programs(
        config.nemesis,
        controlled=controlled,
        move_turns=WALL_MOVE_TURNS if config.wall else MOVE_TURNS,
        exploration=config.race_exploration,
        depth=config.pct_depth,
    )
    test = given(drawn)(run)
    test = carry_seed_and_reproduction(machine_cls, test)
    # An example is three whole runs with threads: no per-example deadline applies.
    test = without_explain(type_settings(settings or type_settings(), deadline=None))(test)
    # One pool of worker processes for every program of the run (--processes).
    with failures_reported(machine_cls), worker_pool():
        test()


def run_program(
    machine_cls: MachineClass, program: ParallelProgram, *, record: bool = True, variant: int = 0
) -> bool:
    """Run one program once on a fresh board and check its concurrent history. True when its
    threads ran under control (it has a schedule and they reached scheduling points).

    ``variant`` (controlled programs only): another interleaving of the same schedule (see
    :class:`~taskboard._schedule.RaceScheduler`); a violation's report and trace then hold
    the schedule that repeats it with no variant. With ``record``, a violation in
    Hypothesis's final replay is written to the trace directory, if one is configured.
    """
    session: Session | None = None
    try:
        hooks = machine_cls()
        tasks = [Task(id=t, title=f"task {t}", deps=program.deps[t]) for t in TASK_IDS]
        session = Session(hooks, tasks, grid_start(hooks.config.resolution), parallel=True)
        session.observe(None)
        crossing = None
        for position, step in enumerate(program.prefix):
            if position == len(program.prefix) - 1:
                crossing = _expiry_crossing(session, program, step)
            session.defer_landing = crossing is not None
            step.run(session)
        session.defer_landing = False
        history, snapshot, scheduler = _run_threads(session, program, variant, crossing)
        turns = tuple(scheduler.turns) if scheduler else ()
        if scheduler:
            explored = scheduler.pct.describe() if scheduler.pct else ""
            program = dataclasses.replace(
                program, schedule=tuple(scheduler.realized), pct=None, explored=explored
            )
        session.concurrent_calls.update(
            (op.call.op.value, "ambiguous" if op.outcome is None else op.outcome.error or "ok")
            for op in history
        )
        result = check_history(session.model, history, session.clock.now(), final_snapshot=snapshot)
        if result.verdict == "unknown":
            raise TimeoutError(
                f"the linearizability check of a {len(history)}-call history ran out of time: "
                "the run is inconclusive, not a pass"
            )
        if result.verdict == "not linearizable":
            clients = session.config.clients or session.config.processes
            report = record_failure(
                session.run,
                _report(session, program, history, result, turns),
                timeline_html(
                    history, result, clients=clients, interleaving=_turns(history, turns, clients)
                ),
                record=record,
            )
            error = report.error()
            session.failure = error
            raise error
        return bool(turns)
    finally:
        end_example(session, parallel=True)


def _attempts(program: ParallelProgram) -> int:
    """How many runs tell whether ``program`` fails: its variants, when it is controlled."""
    return RUNS_PER_PROGRAM if program.schedule is not None else 2 * RUNS_PER_PROGRAM


def _rerun(
    machine_cls: MachineClass, program: ParallelProgram, *, attempts: int, record: bool
) -> None:
    """Run ``program`` up to ``attempts`` times (a controlled one's variants in turn); its
    first violation propagates."""
    controlled = program.schedule is not None
    for attempt in range(attempts):
        run_program(machine_cls, program, record=record, variant=attempt if controlled else 0)


def _fails(machine_cls: MachineClass, program: ParallelProgram) -> bool:
    try:
        _rerun(machine_cls, program, attempts=_attempts(program), record=False)
    except ContractViolation:
        return True
    return False


def _move_into_prefix(
    machine_cls: MachineClass, program: ParallelProgram, budget: float = 10.0
) -> ParallelProgram:
    """Move threads' first operations into the prefix while the program still fails.

    Hypothesis shrinks a program by deleting and simplifying; an operation that only sets
    the scene (a claim whose token the racing threads then use) is clearer in the prefix.
    Races are probabilistic, so a candidate counts as failing if any of a few runs fails.
    """
    deadline = time.monotonic() + budget
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for index, ops in enumerate(program.threads):
            if len(ops) < 2 and len(program.threads) <= 2:
                continue  # two single-op threads are the least a race needs
            threads = list(program.threads)
            if len(ops) > 1:
                threads[index] = ops[1:]
            else:
                del threads[index]
            candidate = dataclasses.replace(
                program, prefix=(*program.prefix, ops[0]), threads=tuple(threads)
            )
            if _fails(machine_cls, candidate):
                program, changed = candidate, True
                break
    return program


#: A controlled race's turns.
Turns = tuple[Turn, ...]


#: Where a controlled race's clock moves: before which turn, to which instant, and why.
Crossing = tuple[int, datetime, str]


def _run_threads(
    session: Session,
    program: ParallelProgram,
    variant: int,
    crossing: Crossing | None = None,
) -> tuple[list[Operation], list[Any], RaceScheduler | None]:
    """The program's threads raced: the history, the snapshot after it, and the scheduler
    when the race was controlled (a schedule, and scheduling points were reached)."""
    threads = program.threads
    supported = [[step for step in steps if session.supports(step.op)] for steps in threads]
    if session.config.processes:
        return (*_run_processes(session, supported), None)
    makers = [
        [functools.partial(_thread_call, session, step) for step in steps] for steps in supported
    ]
    scheduler = None
    landing, session.deferred_landing = session.deferred_landing, None
    if program.schedule is not None:
        crossed = None
        if crossing is not None:
            crossed = (crossing[0], functools.partial(_move, session, *crossing[1:]))
        scheduler = RaceScheduler(
            len(makers), program.schedule, variant=variant, crossing=crossed, pct=program.pct
        )
    elif landing is not None:
        session.clock_to(landing)  # no control after all: land as the threads mode does
    history, snapshot = _race_threads(session, makers, scheduler)
    seen = scheduler is not None and scheduler.points_seen > 0
    return history, snapshot, scheduler if seen else None


def _move(session: Session, target: datetime, why: str) -> str:
    """Move the clock to ``target`` in the middle of a race; the interleaving's line of it."""
    session.clock_to(target)
    return f"{'sleeps until' if session.wall else 'jumps to'} {why}, {target.isoformat()}"


def _expiry_crossing(
    session: Session, program: ParallelProgram, step: ProgramStep
) -> Crossing | None:
    """For a controlled program whose prefix ends with ``step``, an :class:`ExpiryStep`: the
    turn before which its threads' clock crosses the lease's until, where to, and why.

    On the wall clock the threads cross it not at a lead of real time (lining up the threads
    takes longer than that) but at a turn: before turn ``lead + 1`` the race sleeps until
    just past the until. On the manual and virtual clocks a step of ``lead`` 0 has already
    landed at the until (the whole race runs past it, no move); one of ``lead`` 1 or more
    landed one tick before it, and before turn ``lead`` (from 0: the first thread's start
    runs before it) the clock jumps to exactly the until, so the turns before it run while
    the lease is live and those after once it has ended. None for any other program."""
    if program.schedule is None or not isinstance(step, ExpiryStep):
        return None
    task = session.model.task(step.task)
    lease = task.lease if task is not None else None
    if lease is None or lease.until is None:
        return None
    label = session.label(lease.token)
    if session.wall:
        past = session.config.past_until
        return step.lead + 1, lease.until + past, f"{format_duration(past)} past {label}'s until"
    if step.lead == 0 or lease.until <= session.clock.now():
        return None
    return step.lead, lease.until, f"exactly {label}'s until"


def _race_timeout(session: Session, makers: Sequence[Sequence[Any]]) -> tuple[float, str]:
    """How long a race may take before its calls count as hung, and that in words: the
    machine's ``call_timeout`` for each call of every thread (a controlled race runs them one
    at a time), else ``THREAD_TIMEOUT``."""
    per_call = session.config.call_timeout
    if per_call is None:
        return THREAD_TIMEOUT, f"within {THREAD_TIMEOUT:g} s"
    seconds = per_call.total_seconds()
    calls = max(sum(len(thread) for thread in makers), 1)
    return seconds * calls, f"within the per-call timeout of {seconds:g} s ({calls} calls)"


def _race_threads(
    session: Session, makers: Sequence[Sequence[MakeCall]], scheduler: RaceScheduler | None
) -> tuple[list[Operation], list[Any]]:
    """Each thread's calls, from its makers, on a thread of its own from one start line (on a
    client of its own, with clients), one at a time at its round trips with a ``scheduler``;
    the history and the snapshot after it."""
    # SPEC 8: with clients, every thread calls a client of its own, as another process would.
    clients = session.open_clients(len(makers)) if session.config.clients else []
    callers: list[Board] = [client for _, client in clients] or [session.board] * len(makers)
    timeout, within = _race_timeout(session, makers)
    lanes = race_on_threads(
        callers,
        makers,
        timeout=timeout,
        clock=session.clock,
        interceptors=session.interceptors,
        scheduler=scheduler,
    )
    if not all(lane.finished for lane in lanes):
        hung = CallTimeoutError(f"the racing threads' calls did not return {within}")
        session.fail_with_fault(hung, None, "the racing threads")
    try:
        crash = next((lane.crash for lane in lanes if lane.started and lane.crash), None)
        if crash is not None:
            raise crash
        snapshot = session.snapshot(None)
    finally:
        session.close_clients(clients)
    moved = scheduler is not None and scheduler.crossed
    return _history(session, lanes, timed=session.wall or moved), snapshot


def _thread_call(session: Session, step: ProgramStep, mine: Mapping[str, str]) -> Call:
    """The call a racing thread makes for ``step``, given its own claims' tokens."""
    call = step.call(session, mine)
    assert call is not None, f"{step} is no step of a racing thread"
    return call


def _run_processes(
    session: Session, threads: Sequence[Sequence[ProgramStep]]
) -> tuple[list[Operation], list[Any]]:
    """Each thread of the program in a worker process of its own, on a client it opens from
    the board's address (SPEC 8); the history as :func:`_run_threads` makes it."""
    # A worker cannot read the session: each call is resolved here, but for "mine".
    makers = [
        [Preset(_thread_call(session, step, {}), own_token=step.own_token) for step in steps]
        for steps in threads
        if steps
    ]
    address = address_of(session.made_board)  # TypeError: the board has no address
    holders = holders_of(session.model)
    timeout, within = _race_timeout(session, makers)
    try:
        with worker_pool() as pool:
            lanes = pool.race(
                functools.partial(pickle.loads, address),
                makers,
                timeout=timeout,
                interceptors=session.interceptors_with(holders),
            )
    except Exception as exc:
        session.fail_with_fault(exc, None, "a worker process")
    if not all(lane.finished for lane in lanes):
        hung = CallTimeoutError(f"the worker processes' calls did not return {within}")
        session.fail_with_fault(hung, None, "the worker processes")
    return _history(session, lanes, timed=session.wall), session.snapshot(None)


def _history(session: Session, lanes: Sequence[Lane], *, timed: bool = False) -> list[Operation]:
    """The race's calls as a history, thread by thread, numbered in the order they returned.

    ``timed`` (on the wall clock, or when the clock moved during a controlled race): each
    call has its window, the clock's readings around it (on the wall clock widened by the
    skew); an ambiguous call's reaches to the end of the race, as it may take effect until
    then. Around a move of the manual or virtual clock, a call made wholly before it has the
    window of one instant, the clock before, one made after it the instant after, and one
    that spans it both: it took effect at one or the other."""
    skew = session.skew if session.wall else timedelta(0)
    ended = session.clock.now()
    made = [(thread, record) for thread, lane in enumerate(lanes) for record in lane.made]
    by_return = sorted(range(len(made)), key=lambda i: made[i][1].returned)
    ids = {position: op_id for op_id, position in enumerate(by_return)}
    history = []
    for position, (thread, record) in enumerate(made):
        outcome = None if record.ambiguous else record.outcome
        window = None
        if timed and record.started is not None and record.ended is not None:
            until = ended if outcome is None else record.ended
            window = Window.around(record.started, until, skew)
        returned = math.inf if outcome is None else record.returned
        call, invoked = record.call, record.invoked
        history.append(Operation(ids[position], thread, call, outcome, invoked, returned, window))
    return history


#: The clause, expectation and observation a concurrent history's violation reports.
LINEARIZABILITY = ("SPEC 3 and 5", "a linearizable history", "did not give one")


def _report(
    session: Session,
    program: ParallelProgram,
    history: Sequence[Operation],
    result: LinearizabilityResult,
    turns: Turns = (),
) -> Report:
    """The report of a concurrent history with no sequential order the contract allows; its
    recording is the program, to run again on any board."""
    start = min((op.invoked for op in history), default=0.0)
    by_id = {op.id: op for op in history}
    lines = [
        "contract violation in a concurrent history: no sequential order of these calls is "
        "allowed by the contract",
        "",
        "  clause    SPEC 3 and 5: every operation is atomic (linearizable), "
        + _when(session, turns),
        "  longest order found: "
        + (" -> ".join(f"#{i}" for i in result.order) or "(none: no call can go first)"),
        "  cannot come next:",
    ]
    for op_id, reason in zip(result.stuck, result.reasons, strict=False):
        lines.append(f"    #{op_id} {_describe(by_id[op_id], session)}: {reason}")
    config = session.config
    clients = config.clients or config.processes
    each = ", each on a client of its own (SPEC 8)" if clients else ", all on one board"
    if config.processes:
        each = ", each in a process of its own, on its own client (SPEC 8)"
    lines += ["", f"per thread{each} (times in microseconds from the first invocation):"]
    moved = not session.wall and any(turn.agent == CLOCK for turn in turns)
    for thread in sorted({op.thread for op in history}):
        lines.append(f"  {lane_name(thread, clients)}:")
        for op in sorted((o for o in history if o.thread == thread), key=lambda o: o.invoked):
            mark = "!!" if op.id in result.stuck else "  "
            span = f"[{micros_text(op.invoked - start)}..{micros_text(op.returned - start)}]"
            side = _side(op, session) if moved else ""
            lines.append(f"   {mark} #{op.id} {span:<24} {_describe(op, session)}{side}")
    lines += _interleaving(history, turns, clients)
    if turns and program.explored:
        lines.append(f"  (found by {program.explored})")
    lines += ["", "sequential prefix:"]
    lines += [f"  {step}" for step in program.prefix] or ["  (none)"]
    verdict = Verdict(None, *LINEARIZABILITY, "\n".join(lines))
    # The program as a trace file, kept in case the race does not recur when replayed.
    recording = dataclasses.replace(session.to_trace(verdict), steps=(), program=program)
    return Report(verdict, None, tuple(session.trace), recording)


def _when(session: Session, turns: Turns) -> str:
    """When the report's clause says each call took effect."""
    if session.wall:
        return "each at an instant of its window on the wall clock (SPEC 7)"
    now = session.clock.now().isoformat()
    if any(turn.agent == CLOCK for turn in turns):
        return f"each at the clock's instant before or after its move to {now} (see below)"
    return f"at clock {now}"


def _side(op: Operation, session: Session) -> str:
    """Which side of a mid-race move of the manual or virtual clock a call was made on."""
    if op.window is None:
        return ""
    if op.window.width:
        return "  (across the clock's move)"
    after = op.window.earliest == session.clock.now()
    return "  (after the clock's move)" if after else "  (before the clock's move)"


def _turns(history: Sequence[Operation], turns: Turns, clients: bool) -> list[str]:
    """A controlled race's turns, one line each: which thread went on, in which of its calls
    (its id in the history), from which round trip; or where the clock moved."""
    calls: dict[tuple[int, int], int] = {}
    for op in history:  # in each thread's order of calls
        calls[(op.thread, sum(1 for key in calls if key[0] == op.thread))] = op.id
    lines = []
    for turn in turns:
        if turn.agent == CLOCK:
            lines.append(f"clock {turn.point}")
            continue
        call = calls.get((turn.agent, turn.call))
        where = f"#{call}" if call is not None else f"call {turn.call + 1}"
        again = " (again: the store was busy)" if turn.again else ""
        if turn.gave_up:
            again = " (the store was busy: gave up, as its busy timeout would)"
        lines.append(f"{lane_name(turn.agent, clients)} {where}: {turn.point}{again}")
    return lines


def _interleaving(history: Sequence[Operation], turns: Turns, clients: bool) -> list[str]:
    """The lines of a report that show a controlled race's interleaving, numbered."""
    if not turns:
        return []
    return [
        "",
        "interleaving (controlled: one thread at a time, each turn from the round trip named "
        "to the thread's next one; replayed exactly):",
        *(f"  {n:>3}. {line}" for n, line in enumerate(_turns(history, turns, clients), 1)),
    ]


def _describe(op: Operation, session: Session) -> str:
    what = render_call(op.call, session.label)
    if op.outcome is None:
        return f"{what} -> ? (infrastructure fault)"
    if op.outcome.error:
        return f"{what} -> {op.outcome.error}"
    lease = op.outcome.task.lease if op.outcome.task else None
    return f"{what} -> ok" + (f" fence={lease.fence!r}" if lease else "")


def parallel_test_case(machine_cls: MachineClass) -> type[unittest.TestCase]:
    """A unittest case running ``machine_cls`` in parallel mode (``MyMachine.ParallelTestCase``)."""

    class ParallelTestCase(unittest.TestCase):
        def runTest(self) -> None:  # noqa: N802  # unittest's name
            with session_run(machine_cls, type_settings()) as chosen:
                run_parallel_state_machine(machine_cls, settings=chosen)

    ParallelTestCase.__name__ = f"{machine_cls.__name__}.ParallelTestCase"
    ParallelTestCase.__qualname__ = f"{machine_cls.__qualname__}.ParallelTestCase"
    ParallelTestCase._taskboard_machine = machine_cls  # type: ignore[attr-defined]
    return ParallelTestCase
