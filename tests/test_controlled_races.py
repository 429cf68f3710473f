"""The parallel mode with ``race_scheduling = "controlled"``: a race caught at the storage round
trips is shrunk, reported with its interleaving and replayed exactly; correct boards pass."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from taskboard import Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.race_mutants import RACE_MUTANTS, ReadOutsideTransactionClaim
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import (
    BoardMachine,
    ContractViolation,
    TraceFileError,
    load_trace,
    parse_trace,
    replay_trace,
    run_parallel_state_machine,
    trace_to_json,
    violations_in,
)
from taskboard.stateful._config import MachineConfig
from taskboard.stateful._generation import TASK_IDS
from taskboard.stateful._parallel import MOST_THREADS, programs, run_program
from taskboard.stateful._steps import ClaimStep, ParallelProgram
from tests.async_hosts import AsyncDictBoard

CONTROLLED = {"race_scheduling": "controlled"}
#: Generation only: a test that needs the first failure, not the shrunk one.
GENERATE = [Phase.generate]


def quick(examples: int) -> settings:
    """Derandomized settings for ``examples`` programs, no database."""
    return settings(
        max_examples=examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
    )  # fmt: skip


def on_files(board: type[SQLiteBoard], directory: Path, **attributes: Any) -> type[BoardMachine]:
    """A machine whose boards are ``board`` on a fresh file in ``directory`` each."""
    paths = (directory / f"board{n}.db" for n in itertools.count())

    def factory(tasks: list[Task], clock: Clock) -> SQLiteBoard:
        return board(tasks, clock, next(paths))

    return BoardMachine.for_board(factory, **attributes)


#: Two threads that claim the first task at once, in turns from the first round trip.
TWO_CLAIMS = ParallelProgram(
    dict.fromkeys(TASK_IDS, ()),
    (),
    ((ClaimStep(TASK_IDS[0], "a1"),), (ClaimStep(TASK_IDS[0], "a2"),)),
    schedule=(),
)


def test_a_controlled_race_fails_on_every_run_and_reports_its_interleaving(
    tmp_path: Path,
) -> None:
    """Two claims taking turns at their statements both win on the read-outside-transaction
    claim, on 10 runs of 10; the report lists each thread's statements in the order run."""
    machine = on_files(ReadOutsideTransactionClaim, tmp_path, **CONTROLLED)
    reports = []
    for _ in range(10):
        with pytest.raises(ContractViolation) as caught:
            run_program(machine, TWO_CLAIMS, record=False)
        reports.append(str(violations_in(caught.value)[0]))
    report = reports[0]
    assert "interleaving (controlled" in report
    lines = report.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("interleaving")))
    turns = [line.split(":", 1) for line in lines[start + 1 :] if line.startswith("    ")]
    # Both read before either writes: thread 0's SELECT, thread 1's, then the INSERTs.
    threads = [who.split(". ")[1].split(" #")[0] for who, _ in turns[2:5]]
    assert threads == ["thread 0", "thread 1", "thread 0"]
    statements = [what.split()[0] for _, what in turns[2:5]]
    assert statements == ["SELECT", "SELECT", "INSERT"]


def test_the_same_controlled_program_passes_on_the_reference_host(tmp_path: Path) -> None:
    """The program that catches the mutant runs clean on SQLiteBoard (BEGIN IMMEDIATE), whose
    second claim waits at its busy BEGIN and then is refused."""
    machine = on_files(SQLiteBoard, tmp_path, **CONTROLLED)
    assert run_program(machine, TWO_CLAIMS, record=False) is True


def test_a_board_with_no_point_races_on_threads_as_before() -> None:
    """MemoryBoard makes no round trip the scheduler sees: the controlled run says so, and
    the parallel mode then runs the program's threads at once, as without control."""
    machine = BoardMachine.for_board(MemoryBoard, **CONTROLLED)
    assert run_program(machine, TWO_CLAIMS, record=False) is False
    run_parallel_state_machine(machine, settings=quick(10))


def racy_async_claims(tasks: list[Task], clock: Clock) -> AsyncDictBoard:
    """An async board whose claim reads, awaits a yield point, then writes, unlocked."""
    return AsyncDictBoard(tasks, clock, atomic_claim=False, points=True)


def locked_async_claims(tasks: list[Task], clock: Clock) -> AsyncDictBoard:
    """The same board with its claim under an asyncio.Lock, held across the point."""
    return AsyncDictBoard(tasks, clock, points=True)


def test_an_async_boards_coroutines_take_turns_at_their_points() -> None:
    """Two claims on an async board, each a coroutine on the driver's loop, take turns at
    the await between read and write: both win, on every run; the report names the point."""
    machine = BoardMachine.for_board(racy_async_claims, **CONTROLLED)
    for _ in range(5):
        with pytest.raises(ContractViolation) as caught:
            run_program(machine, TWO_CLAIMS, record=False)
    assert ": yield_point(claim: write)" in str(violations_in(caught.value)[0])


def test_an_async_lock_held_across_a_point_neither_deadlocks_nor_false_alarms() -> None:
    """The claim that waits on the asyncio.Lock the other holds at its point runs free after
    the step timeout; the holder then goes on: no violation, no hang."""
    machine = BoardMachine.for_board(locked_async_claims, **CONTROLLED)
    assert run_program(machine, TWO_CLAIMS, record=False) is True


def test_a_program_schedule_travels_through_trace_files(tmp_path: Path) -> None:
    """A controlled program's schedule is written to and read back from a trace file, an
    uncontrolled one's stays absent, and a schedule that is not a list of counts is refused."""
    machine = on_files(ReadOutsideTransactionClaim, tmp_path, **CONTROLLED)
    program = dataclasses.replace(TWO_CLAIMS, schedule=(1, 0, 3))
    with pytest.raises(ContractViolation) as caught:
        run_program(machine, program, record=False)
    recording = caught.value.recording
    assert recording is not None
    assert recording.program is not None
    # What was picked at each choice among the two threads (3 is 1 of 2), then round robin.
    realized = recording.program.schedule
    assert realized is not None
    assert realized[:3] == (1, 0, 1)
    assert set(realized[3:]) <= {0}
    text = trace_to_json(recording)
    assert parse_trace(text).program == recording.program
    document = json.loads(text)
    document["program"]["schedule"] = [1, -2]
    with pytest.raises(TraceFileError, match="schedule"):
        parse_trace(json.dumps(document))
    del document["program"]["schedule"]
    program_read = parse_trace(json.dumps(document)).program
    assert program_read is not None
    assert program_read.schedule is None


def test_a_variant_records_the_schedule_that_repeats_it(tmp_path: Path) -> None:
    """A schedule that runs the threads one after the other passes; one of its variants
    interleaves them and fails, and the schedule its report records fails with no variant,
    on every run."""
    machine = on_files(ReadOutsideTransactionClaim, tmp_path, **CONTROLLED)
    serial = dataclasses.replace(TWO_CLAIMS, schedule=(0,) + (1,) * 20)
    assert run_program(machine, serial, record=False) is True
    for variant in range(1, 20):
        try:
            run_program(machine, serial, record=False, variant=variant)
        except ContractViolation as violation:
            recorded = violation.recording.program
            break
    else:
        pytest.fail("no variant of the serial schedule interleaved the claims")
    assert recorded.schedule != serial.schedule
    for _ in range(5):
        with pytest.raises(ContractViolation):
            run_program(machine, recorded, record=False)


def test_pct_catches_the_race_and_its_trace_replays_the_picks_exactly(tmp_path: Path) -> None:
    """Under PCT the read-outside-transaction claim is caught; the report and the trace say
    which priorities found it, and the trace's recorded picks fail on every replay."""
    pct = {**CONTROLLED, "race_exploration": "pct", "pct_depth": 2}
    machine = on_files(ReadOutsideTransactionClaim, tmp_path, **pct)
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(machine, settings=settings(quick(30), phases=GENERATE))
    violation = violations_in(caught.value)[0]
    assert "(found by pct depth 2: ranks [" in str(violation)
    recording = violation.recording
    assert recording is not None
    program = parse_trace(trace_to_json(recording)).program
    assert program is not None
    assert program.pct is None
    assert program.explored.startswith("pct depth 2")
    assert program.schedule is not None
    for _ in range(3):
        with pytest.raises(ContractViolation):
            run_program(machine, program, record=False)


@given(programs(controlled=True, exploration="pct", depth=3))
@settings(max_examples=20, derandomize=True, database=None)
def test_pct_programs_draw_ranks_and_one_change_point_fewer_than_the_depth(
    program: ParallelProgram,
) -> None:
    """A PCT program draws a permutation of ranks and depth - 1 change points, and its
    schedule of choices is empty: PCT picks instead."""
    assert program.pct is not None
    assert sorted(program.pct.ranks) == list(range(MOST_THREADS))
    assert len(program.pct.change_points) == 2
    assert program.schedule == ()


@pytest.mark.parametrize("depth", [0, 11, 2.5, True])
def test_a_pct_depth_out_of_range_is_refused(depth: object) -> None:
    """pct_depth takes a whole number from 1 to 10; anything else is a TypeError naming it."""
    machine = BoardMachine.for_board(MemoryBoard, race_exploration="pct", pct_depth=depth)
    with pytest.raises(TypeError, match="pct_depth must be a whole number from 1 to 10"):
        MachineConfig.of(machine)


def test_a_correct_sqlite_board_gives_no_false_alarm_under_control(tmp_path: Path) -> None:
    """SQLiteBoard under controlled scheduling: a few programs, no violation, no deadlock."""
    run_parallel_state_machine(on_files(SQLiteBoard, tmp_path, **CONTROLLED), settings=quick(6))


@pytest.mark.slow
def test_controlled_scheduling_catches_shrinks_and_replays_the_race_exactly(
    tmp_path: Path,
) -> None:
    """The read-outside-transaction claim is caught, shrunk to two threads of one claim each,
    and its trace fails on the first run of each of 10 replays."""
    machine = on_files(ReadOutsideTransactionClaim, tmp_path, trace_dir=str(tmp_path), **CONTROLLED)
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(machine, settings=quick(200))
    assert "interleaving (controlled" in str(violations_in(caught.value)[0])
    page = next(tmp_path.glob("timeline-*.html")).read_text(encoding="utf-8")
    assert "<h2>Interleaving</h2>" in page
    assert ": SELECT id, title" in page
    trace = load_trace(next(tmp_path.glob("trace-*.json")))
    program = trace.program
    assert program is not None
    assert program.schedule is not None
    assert len(program.threads) == 2
    assert sum(map(len, program.threads)) == 2
    paths = (tmp_path / f"replay{n}.db" for n in itertools.count())
    for _ in range(10):
        result = replay_trace(
            trace, lambda tasks, clock: RACE_MUTANTS[0](tasks, clock, next(paths))
        )
        assert not result.passed
        assert result.steps_run == 1


@pytest.fixture
def redis_boards(redis_server_url: str) -> type[BoardMachine]:
    """A controlled machine whose boards are RedisBoards on the test server, each its own."""

    def factory(tasks: list[Task], clock: Clock) -> RedisBoard:
        return RedisBoard(tasks, clock, redis_server_url)  # a board id of its own, deleted

    return BoardMachine.for_board(factory, **CONTROLLED)


def test_redis_asyncio_commands_are_points_and_give_no_false_alarm(redis_server_url: str) -> None:
    """AsyncRedisBoard's redis.asyncio commands are scheduling points: its coroutines take
    turns at them, and a few controlled programs find no violation."""

    def factory(tasks: list[Task], clock: Clock) -> AsyncRedisBoard:
        return AsyncRedisBoard(tasks, clock, redis_server_url)

    machine = BoardMachine.for_board(factory, **CONTROLLED)
    assert run_program(machine, TWO_CLAIMS, record=False) is True
    run_parallel_state_machine(machine, settings=quick(5))


@pytest.mark.slow
def test_postgres_row_locks_neither_deadlock_nor_false_alarm(postgres_server_url: str) -> None:
    """PostgresBoard under control: a claim that waits on another's row lock runs free after
    the step timeout instead of deadlocking the checker; no violation in a few programs."""
    machine = BoardMachine.for_board(
        lambda tasks, clock: PostgresBoard(tasks, clock, postgres_server_url), **CONTROLLED
    )
    run_parallel_state_machine(machine, settings=quick(8))


@pytest.mark.slow
def test_correct_boards_give_no_false_alarm_under_control(
    tmp_path: Path, redis_boards: type[BoardMachine]
) -> None:
    """SQLiteBoard and RedisBoard, 100 controlled programs each: no violation, no deadlock."""
    run_parallel_state_machine(on_files(SQLiteBoard, tmp_path, **CONTROLLED), settings=quick(100))
    run_parallel_state_machine(redis_boards, settings=quick(100))


class OwnedFileClaim(ReadOutsideTransactionClaim):
    """The race mutant, removing its temporary directory when closed."""

    def close(self) -> None:
        super().close()
        shutil.rmtree(Path(self._path).parent, ignore_errors=True)


def read_outside_transaction_claim(tasks: list[Task], clock: Clock) -> SQLiteBoard:
    """The race mutant on a fresh temporary file: a target for ``taskboard fuzz``."""
    directory = tempfile.mkdtemp(prefix="taskboard-race-")
    return OwnedFileClaim(tasks, clock, Path(directory) / "board.db")


@pytest.mark.slow
def test_fuzz_and_replay_from_the_command_line_with_controlled_scheduling(tmp_path: Path) -> None:
    """``taskboard fuzz --race-scheduling controlled`` catches the race and reports its
    interleaving; ``taskboard replay`` of its trace finds it again (exit 1 both)."""
    target = "tests.test_controlled_races:read_outside_transaction_claim"
    found = subprocess.run(
        [sys.executable, "-m", "taskboard", "fuzz", target, "--parallel", "--race-scheduling",
         "controlled", "--max-examples", "50", "--seed", "1", "--trace-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert found.returncode == 1, found.stdout + found.stderr
    assert "interleaving (controlled" in found.stdout
    trace = next(tmp_path.glob("trace-*.json"))
    replayed = subprocess.run(
        [sys.executable, "-m", "taskboard", "replay", str(trace), "--board", target],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
