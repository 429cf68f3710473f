"""SQLiteBoard shared by several processes through one database file."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from taskboard import SystemClock
from taskboard.hosts.sqlite import SQLiteBoard
from tests.process_race import TASKS, assert_race_finished, race


def test_processes_racing_on_one_file_have_one_winner_per_round(tmp_path: Path) -> None:
    """Four spawned processes, twenty rounds: exactly one winner per round, fences grow."""
    path = str(tmp_path / "board.db")
    race(partial(SQLiteBoard, TASKS, SystemClock(), path))
    with SQLiteBoard(TASKS, SystemClock(), path) as board:
        assert_race_finished(board)
