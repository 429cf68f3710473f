"""RedisBoard shared by several processes through one redis-server."""

from __future__ import annotations

from functools import partial

from taskboard import SystemClock
from taskboard.hosts.redis import RedisBoard
from tests.process_race import TASKS, assert_race_finished, race


def test_processes_racing_on_one_server_have_one_winner_per_round(redis_server_url: str) -> None:
    """Four spawned processes, twenty rounds: one winner per round, fences grow, tokens unique."""
    # The parent makes the board (and deletes it at the end); the children attach by id,
    # so one leaving does not delete the board from under the others.
    with RedisBoard([], SystemClock(), redis_server_url) as owner:
        race(partial(RedisBoard, TASKS, SystemClock(), redis_server_url, board_id=owner.board_id))
        assert_race_finished(owner)
