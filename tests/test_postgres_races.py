"""Controlled races on PostgreSQL: a statement that waits on another's row lock is seen
waiting (``pg_blocking_pids``) and the others scheduled at once; the board that reads
``now()`` before its ``FOR UPDATE`` wait is caught and replayed, on the wall clock and, on a
throwaway server on the checker's clock, with the clock's move a turn of the race; the
reference host gives no false alarm."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings

import taskboard.servers
from taskboard._roundtrips import round_trip_points
from taskboard._schedule import RaceScheduler
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.postgres_race_mutants import NowBeforeRowLock
from taskboard.stateful import (
    BoardMachine,
    ContractViolation,
    load_trace,
    replay_trace,
    run_parallel_state_machine,
    violations_in,
)
from taskboard.stateful._generation import TASK_IDS
from taskboard.stateful._parallel import run_program
from taskboard.stateful._steps import ActStep, ClaimStep, ExpiryStep, ParallelProgram
from tests.test_virtual_postgres import _require_postgres

CONTROLLED_WALL = {"race_scheduling": "controlled", "clock_mode": "wall"}
#: Long enough that a lock wait the scheduler failed to see would show as a free run.
NEVER = 60.0


def quick(examples: int) -> settings:
    """Derandomized settings for ``examples`` programs, no database."""
    return settings(
        max_examples=examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
    )  # fmt: skip


def test_a_row_lock_wait_is_seen_and_the_holder_scheduled(postgres_server_url: str) -> None:
    """The second of two transactions taking one lock waits in the server: the scheduler
    sees it waiting, lets the holder finish, and the waiter's next statement comes after;
    nobody runs free on the step timeout."""
    key = int(time.time_ns() % 1_000_000_000)
    order: list[int] = []
    scheduler = RaceScheduler(2, (), step_timeout=NEVER)

    def participant(index: int) -> None:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            scheduler.enter(index)
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                    order.append(index)
                    conn.execute("SELECT 1")
            finally:
                scheduler.leave()

    threads = [threading.Thread(target=participant, args=(i,), daemon=True) for i in range(2)]
    with round_trip_points():
        for thread in threads:
            thread.start()
        scheduler.run(time.monotonic() + NEVER)
        for thread in threads:
            thread.join(NEVER)
    assert order == [0, 1]
    assert (scheduler.blocked, scheduler.ran_free) == (1, 0)
    agents = [turn.agent for turn in scheduler.turns]
    assert agents == [0, 1, 0, 1, 0, 1]  # starts, locks (1 waits), 0's SELECT 1, then 1's


#: A lease of one TTL unit, its expiry; one thread renews it, one releases it: the release
#: starts past the until, and takes the row first, while the renew started before it.
RENEW_ACROSS_EXPIRY = ParallelProgram(
    dict.fromkeys(TASK_IDS, ()),
    (ClaimStep(TASK_IDS[0], "a1", 1), ExpiryStep(TASK_IDS[0], 0)),
    ((ActStep("renew", TASK_IDS[0], "latest", 5),), (ActStep("release", TASK_IDS[0], "latest"),)),
    schedule=(0, 0, 1),
)


@pytest.mark.deep  # wall-clock turns: missed under a loaded CI machine
def test_now_before_the_row_lock_fails_on_every_run(postgres_server_url: str) -> None:
    """The renew that read now() before the release committed extends a lease the release
    found expired: 10 runs of 10 fail; the reference host passes the same program."""
    mutant = BoardMachine.for_board(
        lambda tasks, clock: NowBeforeRowLock(tasks, clock, postgres_server_url),
        trace_target="",
        **CONTROLLED_WALL,
    )
    for _ in range(10):
        with pytest.raises(ContractViolation) as caught:
            run_program(mutant, RENEW_ACROSS_EXPIRY, record=False)
        assert "renew(" in str(violations_in(caught.value)[0])
    reference = BoardMachine.for_board(
        lambda tasks, clock: PostgresBoard(tasks, "server", postgres_server_url),
        trace_target="",
        **CONTROLLED_WALL,
    )
    run_program(reference, RENEW_ACROSS_EXPIRY, record=False)


@pytest.mark.deep  # wall-clock turns: missed under a loaded CI machine
def test_now_before_the_row_lock_is_caught_and_replayed(
    postgres_server_url: str, tmp_path: Path
) -> None:
    """Under controlled scheduling the checker finds the now()-before-FOR-UPDATE board by
    itself, and its trace, replayed, fails again on its first run (not on every replay: the
    wall clock runs on between the turns before the crossing, docs/races.md)."""
    machine = BoardMachine.for_board(
        lambda tasks, clock: NowBeforeRowLock(tasks, clock, postgres_server_url),
        trace_dir=str(tmp_path),
        **CONTROLLED_WALL,
    )
    with pytest.raises(ContractViolation):
        run_parallel_state_machine(machine, settings=quick(300))
    trace = load_trace(next(tmp_path.glob("trace-*.json")))
    program = trace.program
    assert program is not None
    assert program.schedule is not None
    failed = 0
    for _ in range(10):
        result = replay_trace(
            trace, lambda tasks, clock: NowBeforeRowLock(tasks, clock, postgres_server_url)
        )
        failed += not result.passed and result.steps_run == 1
    assert failed >= 1


@pytest.mark.slow
def test_the_reference_host_on_its_server_clock_gives_no_false_alarm_under_control(
    postgres_server_url: str,
) -> None:
    """PostgresBoard with clock="server", controlled, on the wall clock: no violation and no
    deadlock in 60 programs (expiry races included)."""
    machine = BoardMachine.for_board(
        lambda tasks, clock: PostgresBoard(tasks, "server", postgres_server_url),
        **CONTROLLED_WALL,
    )
    run_parallel_state_machine(machine, settings=quick(60))


# -- on the virtual clock --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def virtual_postgres() -> Iterator[taskboard.servers.Postgres]:
    """A throwaway PostgreSQL on the checker's clock, for this module; a skip without its
    binaries or a C compiler."""
    _require_postgres()
    with taskboard.servers.Postgres() as started:
        yield started


def on_virtual(board: type[PostgresBoard], server: taskboard.servers.Postgres) -> Any:
    """A controlled virtual-mode machine of the server-clock ``board`` on ``server``."""
    return BoardMachine.for_board(
        lambda tasks, clock: board(tasks, "server", server.url),
        race_scheduling="controlled",
        clock_mode="virtual",
        server=server,
        clock_resolution=PostgresBoard.clock_resolution,
        trace_target="",
    )


#: The renew's transaction starts (its now()) one tick before the until; the clock then moves
#: to the until (before turn 1), and the release runs to its end before the renew takes the row.
RENEW_ACROSS_THE_MOVE = dataclasses.replace(
    RENEW_ACROSS_EXPIRY,
    prefix=(RENEW_ACROSS_EXPIRY.prefix[0], ExpiryStep(TASK_IDS[0], 1)),
    schedule=(0, 0, 1, 1, 1, 1, 1, 1),
)


def test_now_before_the_row_lock_fails_every_run_on_the_virtual_clock(
    virtual_postgres: taskboard.servers.Postgres,
) -> None:
    """With the clock's move a turn, the renew that read now() before the move extends the
    lease the release found expired after it: 10 runs of 10 fail, the report shows the move,
    and the trace replays 10 times of 10; the reference host passes the same program."""
    mutant = on_virtual(NowBeforeRowLock, virtual_postgres)
    for _ in range(10):
        with pytest.raises(ContractViolation) as caught:
            run_program(mutant, RENEW_ACROSS_THE_MOVE, record=False)
    violation = violations_in(caught.value)[0]
    assert "clock jumps to exactly L1's until" in str(violation)
    assert violation.recording is not None
    for _ in range(10):
        result = replay_trace(violation.recording, mutant)
        assert (result.passed, result.steps_run) == (False, 1)
    run_program(on_virtual(PostgresBoard, virtual_postgres), RENEW_ACROSS_THE_MOVE, record=False)
