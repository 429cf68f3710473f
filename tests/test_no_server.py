"""``taskboard.servers.NoServer``: virtual mode with no server, for a board that keeps time in
this process (``datetime.now()``); a boundary bug on that clock is caught exactly, shrunk and
replayed, where wall mode cannot see it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import taskboard.servers
from taskboard import SystemClock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import OffByOneExpiry
from taskboard.stateful import BoardMachine
from tests.test_virtual_clock import assert_caught_shrunk_and_replayed, run

START = datetime(2026, 1, 1, tzinfo=UTC)


def _on_process_clock(board: type[MemoryBoard]) -> type[BoardMachine]:
    """A virtual-mode machine of ``board`` reading this process's clock, on a NoServer."""

    def make(tasks: list[Task], clock: object) -> MemoryBoard:
        return board(tasks, SystemClock())

    return BoardMachine.for_board(
        make,
        clock_mode="virtual",
        server=taskboard.servers.NoServer(),
        clock_resolution=timedelta(microseconds=1),
    )


def test_no_server_keeps_the_time_it_is_set_to_and_never_goes_back() -> None:
    """now() is the last time set; a time before it, or a naive one, is a ValueError."""
    server = taskboard.servers.NoServer()
    server.set_time(START)
    server.flush()
    assert server.now() == START
    with pytest.raises(ValueError, match="never goes back"):
        server.set_time(START - timedelta(microseconds=1))
    with pytest.raises(ValueError, match="aware"):
        server.set_time(datetime(2026, 1, 2))
    assert server.now() == START


def test_a_board_on_the_process_clock_passes_in_virtual_mode() -> None:
    """MemoryBoard given the system clock passes on a NoServer: its datetime.now() is the
    machine's clock during each call."""
    run(_on_process_clock(MemoryBoard), 20)


# Seconds (300 examples allowed, shrinking, 11 replays): CI's slow run has it.
@pytest.mark.slow
def test_a_boundary_bug_on_the_process_clock_is_caught_and_replays() -> None:
    """A lease kept live at exactly until (<= on datetime.now()) is caught on a NoServer,
    shrinks to a few steps and fails again on each replay."""
    assert_caught_shrunk_and_replayed(_on_process_clock(OffByOneExpiry))
