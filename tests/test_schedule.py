"""Controlled scheduling of races (_schedule.py, _roundtrips.py): one participant at a time,
switching only at scheduling points, in the order a schedule says, without deadlocks."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from taskboard._roundtrips import round_trip_points
from taskboard._schedule import MOST_TURNS_IN_A_ROW, Priorities, RaceScheduler, Turn
from taskboard.races import yield_point

#: A participant: given its index, what it does (it may call yield_point, use a store).
Body = Callable[[int], None]


def race(
    bodies: Sequence[Body],
    schedule: Sequence[int],
    step_timeout: float = 0.5,
    pct: Priorities | None = None,
) -> RaceScheduler:
    """Run ``bodies`` as participants of one controlled race with ``schedule`` (or ``pct``);
    the scheduler after every participant is done."""
    scheduler = RaceScheduler(len(bodies), schedule, step_timeout=step_timeout, pct=pct)

    def participant(index: int) -> None:
        scheduler.enter(index)
        try:
            bodies[index](index)
        finally:
            scheduler.leave()

    threads = [
        threading.Thread(target=participant, args=(i,), daemon=True) for i in range(len(bodies))
    ]
    with round_trip_points():
        for thread in threads:
            thread.start()
        scheduler.run(time.monotonic() + 30)
        for thread in threads:
            thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return scheduler


def three_steps(log: list[tuple[int, int]]) -> Body:
    """A participant that logs three steps, each after a yield point."""

    def body(index: int) -> None:
        for step in range(3):
            yield_point(f"step {step}")
            log.append((index, step))

    return body


def test_yield_point_outside_a_controlled_race_returns_at_once() -> None:
    """yield_point, called by a board outside a controlled race, does nothing."""
    yield_point("anywhere")


def test_choices_decide_who_goes_on_at_each_point() -> None:
    """With no choices the participants take turns (round robin); a choice of 1 keeps the
    one that ran last going: choices of 1 let participant 1 go first and run to its end."""
    log: list[tuple[int, int]] = []
    race([three_steps(log), three_steps(log)], [])
    assert log == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    log.clear()
    race([three_steps(log), three_steps(log)], [1, 1, 1, 1])
    assert log == [(1, 0), (1, 1), (1, 2), (0, 0), (0, 1), (0, 2)]


def test_one_schedule_gives_one_interleaving_every_time() -> None:
    """A schedule replays exactly: the same choices give the same turns and the same log."""
    outcomes = []
    for _ in range(5):
        log: list[tuple[int, int]] = []
        scheduler = race([three_steps(log) for _ in range(3)], [2, 0, 1, 1, 2, 0, 1])
        outcomes.append((tuple(log), tuple(scheduler.turns)))
    assert len(set(outcomes)) == 1
    turns = outcomes[0][1]
    assert turns[0] == Turn(2, 0, "start")  # the first choice, 2, picks participant 2
    assert {turn.point for turn in turns} == {
        "start",
        *(f"yield_point(step {s})" for s in range(3)),
    }


def test_pct_at_depth_one_runs_the_participants_in_strict_priority_order() -> None:
    """PCT with no change point: the participant of rank 0 runs to its end, then rank 1's,
    then rank 2's, whatever their numbers."""
    log: list[tuple[int, int]] = []
    race([three_steps(log) for _ in range(3)], [], pct=Priorities((2, 0, 1), (), 10))
    assert [index for index, _ in log] == [1, 1, 1, 2, 2, 2, 0, 0, 0]


def test_a_pct_change_point_drops_the_running_participant_and_replays_exactly() -> None:
    """A change point before choice 2 (100 thousandths of 10 expected) drops participant 0
    after its first step; the same priorities pick the same way every time, and the picks
    recorded replay the interleaving with no PCT."""
    pct = Priorities((0, 1), (100,), 10)
    assert pct.turns() == (2,)
    runs = []
    for _ in range(3):
        log: list[tuple[int, int]] = []
        scheduler = race([three_steps(log), three_steps(log)], [], pct=pct)
        runs.append((tuple(log), tuple(scheduler.realized)))
    assert len(set(runs)) == 1
    log_seen, realized = runs[0]
    assert log_seen == ((0, 0), (1, 0), (1, 1), (1, 2), (0, 1), (0, 2))
    replayed: list[tuple[int, int]] = []
    race([three_steps(replayed), three_steps(replayed)], realized)
    assert tuple(replayed) == log_seen


def test_under_pct_a_participant_that_spins_drops_below_the_one_it_waits_for() -> None:
    """The highest participant polls for a flag only the lower one sets: after
    MOST_TURNS_IN_A_ROW polls it drops below, and the lower one sets the flag."""
    flag = threading.Event()

    def spinner(index: int) -> None:
        while not flag.is_set():
            yield_point("poll")

    def setter(index: int) -> None:
        yield_point("set")
        flag.set()

    scheduler = race([spinner, setter], [], pct=Priorities((0, 1), (), 10))
    polls = [turn for turn in scheduler.turns if turn.agent == 0]
    assert MOST_TURNS_IN_A_ROW <= len(polls) <= MOST_TURNS_IN_A_ROW + 2
    assert scheduler.ran_free == 0


def test_a_pct_variant_draws_other_priorities_of_the_same_shape() -> None:
    """A variant permutes the ranks and shifts the change points, keeping their number."""
    pct = Priorities((0, 1, 2, 3), (5, 900), 20)
    varied = [pct.varied(variant) for variant in (1, 2)]
    for other in varied:
        assert sorted(other.ranks) == [0, 1, 2, 3]
        assert len(other.change_points) == 2
    assert varied[0] != pct
    assert varied[0] != varied[1]


def test_a_participant_blocked_outside_its_points_runs_free_and_nothing_deadlocks() -> None:
    """A participant that blocks between points (on a lock another one holds while it waits
    at a point) is let run free after the step timeout; the holder then goes on."""
    lock = threading.Lock()
    done: list[int] = []

    def holder(index: int) -> None:
        with lock:
            yield_point("holding the lock")
        done.append(index)

    def waiter(index: int) -> None:
        with lock:
            done.append(index)

    # Holder first (it takes the lock and stops), then the waiter (blocks on the lock).
    scheduler = race([holder, waiter], [0, 0], step_timeout=0.05)
    assert sorted(done) == [0, 1]
    assert [turn.agent for turn in scheduler.turns][:2] == [0, 1]


def sqlite_path(tmp_path: Path) -> str:
    path = str(tmp_path / "race.db")
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)")
        conn.execute("INSERT INTO t VALUES (1, 0)")
    return path


def test_a_busy_sqlite_statement_waits_at_its_point_and_tries_again(tmp_path: Path) -> None:
    """Two BEGIN IMMEDIATE increments: the second's BEGIN finds the database locked, waits at
    its point while the first commits, then runs; both increments land, no error."""
    path = sqlite_path(tmp_path)

    def increment(index: int) -> None:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        (value,) = conn.execute("SELECT v FROM t WHERE k = 1").fetchone()
        conn.execute("UPDATE t SET v = ? WHERE k = 1", (value + 1,))
        conn.execute("COMMIT")
        conn.close()

    scheduler = race([increment, increment], [])
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT v FROM t").fetchone() == (2,)
    assert any(turn.again and turn.point == "BEGIN IMMEDIATE" for turn in scheduler.turns)
    assert not any(turn.gave_up for turn in scheduler.turns)


def test_a_read_outside_the_transaction_loses_an_update_when_interleaved(tmp_path: Path) -> None:
    """Python sqlite3's default isolation: a SELECT then an UPDATE, run in turns, lose one of
    two increments, on every run of the schedule."""
    path = sqlite_path(tmp_path)

    def increment(index: int) -> None:
        conn = sqlite3.connect(path, timeout=30)
        (value,) = conn.execute("SELECT v FROM t WHERE k = 1").fetchone()
        conn.execute("UPDATE t SET v = ? WHERE k = 1", (value + 1,))
        conn.commit()
        conn.close()

    for run in range(1, 4):
        race([increment, increment], [])
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT v FROM t").fetchone() == (run,)


def test_a_deadlock_in_sqlite_ends_with_the_longest_waiter_giving_up(tmp_path: Path) -> None:
    """Both read in a transaction, then both write: each waits on the other. The one that has
    waited longest gets SQLite's busy error, as its busy timeout would give it; the other
    commits."""
    path = sqlite_path(tmp_path)
    errors: list[int] = []

    def read_then_write(index: int) -> None:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT v FROM t").fetchone()
            conn.execute("UPDATE t SET v = v + 1")
            conn.execute("COMMIT")
        except sqlite3.OperationalError:
            errors.append(index)
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    scheduler = race([read_then_write, read_then_write], [])
    assert len(errors) == 1
    assert next(turn for turn in scheduler.turns if turn.gave_up).agent == errors[0]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT v FROM t").fetchone() == (1,)


def test_points_are_installed_only_for_the_block() -> None:
    """round_trip_points puts sqlite3.connect back when the block ends, nested or not."""
    original = sqlite3.connect
    with round_trip_points():
        assert sqlite3.connect is not original
        with round_trip_points():
            pass
        assert sqlite3.connect is not original
    assert sqlite3.connect is original


def test_a_busy_statement_outside_control_waits_up_to_the_boards_timeout(tmp_path: Path) -> None:
    """A connection opened under the points but used outside a controlled race keeps the
    busy timeout the board asked for: it waits for the lock, as SQLite would have."""
    path = sqlite_path(tmp_path)
    with round_trip_points():
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        waiter = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(0.05, lambda: holder.execute("COMMIT")).start()
    waiter.execute("BEGIN IMMEDIATE")  # waits for the holder's commit
    waiter.execute("COMMIT")
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        waiter.execute("BEGIN IMMEDIATE")
    holder.execute("COMMIT")
    holder.close()
    waiter.close()


def test_redis_commands_and_pipelines_are_points(redis_server_url: str) -> None:
    """redis-py's commands, WATCH and a pipeline's execute each stop at a point."""
    import redis

    def body(index: int) -> None:
        with redis.Redis.from_url(redis_server_url) as client:
            client.set(f"taskboard-sched-{index}", index)
            with client.pipeline() as pipe:
                pipe.watch(f"taskboard-sched-{index}")
                pipe.multi()
                pipe.incr(f"taskboard-sched-{index}")
                pipe.execute()
            client.delete(f"taskboard-sched-{index}")

    scheduler = race([body, body], [])
    points = [turn.point for turn in scheduler.turns if turn.agent == 0]
    assert points[:2] == ["start", "SET taskboard-sched-0 0"]
    assert "WATCH taskboard-sched-0" in points
    assert any(point.startswith("pipeline: ") and "INCR" in point for point in points)


def test_psycopg_statements_and_commits_are_points(postgres_server_url: str) -> None:
    """psycopg 3's cursor and connection execute, and commit, each stop at a point."""
    import psycopg

    def body(index: int) -> None:
        with psycopg.connect(postgres_server_url) as conn:
            conn.execute("SELECT %s::int", (index,))
            conn.commit()

    scheduler = race([body, body], [])
    points = [turn.point for turn in scheduler.turns if turn.agent == 1]
    # The connection's own exit commits once more.
    assert points == ["start", "SELECT %s::int", "COMMIT", "COMMIT"]
