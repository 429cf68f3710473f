"""One board shared by several processes that race to claim one task, round by round.

Each round is a race of the race engine's worker processes (``taskboard._race.WorkerPool``):
every worker opens a client of the board and claims ``hot`` at one start instant. In the first
round each worker opens its client with ``open_board()`` (a picklable function that returns a
board, attaching rather than owning it), all at once, so set-up races too; in later rounds each
opens it as SPEC 8 says another process does, by unpickling the board the parent attached. The
parent lets the winner's claim go (release, fail, or complete in the last round) before the
next round.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import taskboard
from taskboard import State, Task
from taskboard._race import Lane, Preset, WorkerPool
from taskboard.model import Call, Op

PROCESSES = 4
ROUNDS = 20
TASKS = [Task("hot"), Task("after", deps=("hot",))]
WAIT = 60.0  # seconds; only reached when something hangs

OpenBoard = Callable[[], AbstractContextManager[Any]]
#: What one round was for one process: ("won" | "lost", round, token, fence).
Outcome = tuple[str, int, str, int]


def _round(pool: WorkerPool, open_client: Callable[[], object], round_: int) -> list[Outcome]:
    """One claim of "hot" per worker process, from one start instant."""
    claims = [[Preset(Call(Op.CLAIM, "hot", agent=f"agent{i % 2}"))] for i in range(PROCESSES)]
    lanes = pool.race(open_client, claims, timeout=WAIT)
    return [_outcome(lane, round_) for lane in lanes]


def _outcome(lane: Lane, round_: int) -> Outcome:
    assert lane.finished, f"a claim in round {round_} did not return within {WAIT:g} s"
    (made,) = lane.made
    task = made.outcome.task
    if made.outcome.ok and task is not None and task.lease is not None:
        return ("won", round_, task.lease.token, task.lease.fence)
    assert made.outcome.error == "TakenError", f"round {round_}: {made.outcome}"
    return ("lost", round_, "", 0)


def _let_go(board: Any, outcomes: Sequence[Outcome], round_: int) -> None:
    """The round's one winner's claim ends: completed in the last round, else failed or
    released."""
    tokens = [token for won, _, token, _ in outcomes if won == "won"]
    assert len(tokens) == 1, f"exactly one winner per round: {len(tokens)} in round {round_}"
    if round_ == ROUNDS - 1:
        board.complete("hot", tokens[0])
    elif round_ % 2:
        board.fail("hot", tokens[0])
    else:
        board.release("hot", tokens[0])


def race(open_board: OpenBoard) -> None:
    """Run the race in spawned processes and check it: exactly one winner per round, every
    other claim ``TakenError``, fences strictly growing, tokens never repeating."""
    outcomes: list[Outcome] = []
    with WorkerPool(PROCESSES) as pool:
        first = _round(pool, open_board, 0)  # every worker attaches at once: set-up races too
        with open_board() as board:
            # SPEC 8: unpickling a board another process sent opens a new client of it.
            attach = functools.partial(pickle.loads, pickle.dumps(board))
            for round_ in range(ROUNDS):
                done = first if round_ == 0 else _round(pool, attach, round_)
                _let_go(board, done, round_)
                outcomes += done

    wins = sorted(o for o in outcomes if o[0] == "won")
    losses = [o for o in outcomes if o[0] == "lost"]
    assert [w[1] for w in wins] == list(range(ROUNDS)), "exactly one winner per round"
    assert len(losses) == ROUNDS * (PROCESSES - 1)
    fences = [w[3] for w in wins]
    assert fences == sorted(set(fences)), "fences strictly grow across rounds"
    assert len({w[2] for w in wins}) == ROUNDS, "tokens never repeat"


def assert_race_finished(board: Any) -> None:
    """The board after :func:`race`: ``hot`` done after two seq bumps a round, ``after``
    untouched, and a clean snapshot."""
    snapshot = {t.id: t for t in board.list_tasks()}
    assert snapshot["hot"].state is State.DONE
    assert snapshot["hot"].seq == 2 * ROUNDS
    assert snapshot["after"] == Task("after", deps=("hot",))
    assert taskboard.check(board.list_tasks()) == []
