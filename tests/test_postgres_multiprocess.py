"""PostgresBoard shared by several processes through one PostgreSQL server."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from functools import partial

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from taskboard import SystemClock
from taskboard.hosts.postgres import PostgresBoard
from tests.process_race import TASKS, assert_race_finished, race


@pytest.fixture
def fresh_schema(postgres_server_url: str) -> Iterator[str]:
    """A conninfo whose search_path is a new, empty schema, dropped afterwards."""
    schema = f"taskboard_test_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            yield make_conninfo(postgres_server_url, options=f"-c search_path={schema}")
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def test_processes_racing_on_one_server_have_one_winner_per_round(fresh_schema: str) -> None:
    """Four spawned processes create the schema and board at once, then race twenty rounds:
    exactly one winner per round, fences grow, tokens never repeat."""
    board_id = f"mp-{secrets.token_hex(8)}"
    race(partial(PostgresBoard, TASKS, SystemClock(), fresh_schema, board_id=board_id))
    with PostgresBoard(
        TASKS, SystemClock(), fresh_schema, board_id=board_id, delete_on_close=True
    ) as board:
        assert_race_finished(board)
