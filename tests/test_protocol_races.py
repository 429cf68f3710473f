"""Controlled races over the board protocol (SPEC 10): each client process's request is a
scheduling point, and so is each ``yield`` a child writes mid-request (docs/races.md)."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from taskboard import ClaimRequest, Task, _schedule
from taskboard._protocol.codec import ProtocolError, encode_task, read_yield
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import ContractViolation
from taskboard.protocol import serve
from taskboard.races import yield_point
from taskboard.stateful import BoardMachine, _parallel, violations_in
from taskboard.stateful._generation import TASK_IDS
from taskboard.stateful._parallel import run_program
from taskboard.stateful._steps import ClaimStep, ParallelProgram

SCRIPT = Path(__file__).with_name("protocol_boards.py")

#: Two client processes that claim the first task, in turns from their first request.
TWO_CLAIMS = ParallelProgram(
    dict.fromkeys(TASK_IDS, ()),
    (),
    ((ClaimStep(TASK_IDS[0], "a1"),), (ClaimStep(TASK_IDS[0], "a2"),)),
    schedule=(),
)


def controlled(name: str) -> type[BoardMachine]:
    """A controlled machine over processes of ``tests/protocol_boards.py name``."""
    return BoardMachine.for_command(
        [sys.executable, str(SCRIPT), name], race_scheduling="controlled"
    )


def test_a_yield_line_is_told_from_an_answer() -> None:
    """A yield line gives its label; an answer, even one holding the word, is no yield; a
    yield in another request, or with a label that is no string, is a fault."""
    assert read_yield(b'{"id": 3, "yield": "checked"}\n', 3, "claim") == "checked"
    assert read_yield(b'{"id": 3, "ok": true}\n', 3, "claim") is None
    assert read_yield(b'{"id": 3, "ok": true, "yield": "x"}\n', 3, "claim") is None
    assert read_yield(b'{"id": 3, "yield"\n', 3, "claim") is None  # read_answer's to judge
    with pytest.raises(ProtocolError, match="yields in id 2, not 3"):
        read_yield(b'{"id": 2, "yield": "checked"}\n', 3, "claim")
    with pytest.raises(ProtocolError, match="label is a string"):
        read_yield(b'{"id": 3, "yield": 7}\n', 3, "claim")


class YieldingBoard(MemoryBoard):
    """Stops at a point of its own in every claim, before it claims."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        yield_point("before the claim")
        return super().claim(task_id, agent, request)


def served(*requests: dict[str, Any], declared: bool = True) -> list[dict[str, Any]]:
    """What serve() writes for ``requests`` to a YieldingBoard, line by line; ``declared``:
    it says it marks its yield points."""
    written = io.BytesIO()
    lines = b"".join(json.dumps(request).encode() + b"\n" for request in requests)
    serve(YieldingBoard, stdin=io.BytesIO(lines), stdout=written, yield_points=declared)
    return [json.loads(line) for line in written.getvalue().splitlines()]


INIT = {"id": 2, "op": "init", "tasks": [encode_task(Task("t1"))], "clock": "manual", "now": 0}
CLAIM = {"id": 3, "op": "claim", "task": "t1", "agent": "a1", "ttl": 0}


def test_a_served_yield_point_waits_for_go_and_serves_what_came_meanwhile_after() -> None:
    """Offered yields, serve() writes the claim's yield line and goes on at go; a list
    written behind the claim is answered after the claim; unoffered or undeclared, no
    yield line."""
    hello = {"id": 1, "op": "hello", "protocol": 1, "yield_points": True}
    go = {"id": 3, "op": "go"}
    out = served(hello, INIT, CLAIM, {"id": 4, "op": "list"}, go, {"id": 5, "op": "close"})
    assert out[0]["yield_points"] is True
    assert out[2] == {"id": 3, "yield": "before the claim"}
    assert [(line["id"], line.get("ok")) for line in out[3:]] == [(3, True), (4, True), (5, True)]
    assert out[4]["tasks"][0]["state"] == "claimed"
    unoffered = served({"id": 1, "op": "hello", "protocol": 1}, INIT, CLAIM)
    assert [line["id"] for line in unoffered] == [1, 2, 3]
    assert "yield" not in unoffered[2]
    undeclared = served(hello, INIT, CLAIM, declared=False)
    assert undeclared[0]["yield_points"] is False
    assert [line.get("ok") for line in undeclared] == [True, True, True]


def test_a_served_boards_own_point_splits_its_call_under_control() -> None:
    """Two client processes of a claim atomic only inside one process, each stopping at its
    yield_point between check and write: both win on every run of the same schedule, and the
    report shows each process's request and point in turn."""
    machine = controlled("sqlite-split-claim")
    for _ in range(2):
        with pytest.raises(ContractViolation) as caught:
            run_program(machine, TWO_CLAIMS, record=False)
    report = str(violations_in(caught.value)[0])
    order = [
        "thread 0 (client 0) #0: claim request",
        "thread 1 (client 1) #1: claim request",
        "thread 0 (client 0) #0: claim: yield_point(claim checked, not yet written)",
        "thread 1 (client 1) #1: claim: yield_point(claim checked, not yet written)",
    ]
    positions = [report.find(turn) for turn in order]
    assert -1 not in positions, report
    assert positions == sorted(positions), report


def test_a_correct_served_board_passes_under_control() -> None:
    """The same program on the correct SQLite board's processes runs under control (its
    requests are points) and finds no violation."""
    assert run_program(controlled("sqlite"), TWO_CLAIMS, record=False) is True


def test_a_child_that_marks_no_points_races_free_under_control() -> None:
    """A served board that does not declare yield_points (its calls may race inside, where
    the checker cannot see): its requests are no points, and the program runs on threads as
    without control."""
    assert run_program(controlled("memory"), TWO_CLAIMS, record=False) is False


def test_threads_sharing_one_yielding_process_wait_on_it_without_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads calling one process (no connect): while one is stopped at the child's point
    mid-request, the other's request waits for the process, and the scheduler hears so and
    schedules on at once, with no step timeout and no thread let run free."""
    schedulers: list[_schedule.RaceScheduler] = []

    class Recorded(_schedule.RaceScheduler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            schedulers.append(self)

    monkeypatch.setattr(_parallel, "RaceScheduler", Recorded)
    assert run_program(controlled("memory-yielding"), TWO_CLAIMS, record=False) is True
    assert schedulers[0].blocked == 1
    assert schedulers[0].ran_free == 0


def test_a_child_that_yields_holding_a_lock_does_not_hang_the_checker() -> None:
    """A correct child that stops at its point while it holds the lock the other process's
    claim waits for: that claim never reaches a point, runs free after the step timeout, and
    the race ends without a deadlock or a false alarm."""
    started = time.monotonic()
    assert run_program(controlled("sqlite-yield-holding-lock"), TWO_CLAIMS, record=False)
    assert time.monotonic() - started < 8.0  # not the protocol's 10 s answer timeout
