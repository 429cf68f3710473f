"""One board shared by several processes that race to claim one task, round by round.

Each process attaches to the board (a picklable ``open_board()`` that returns a board,
a context manager, attached rather than owning it), all at once, so set-up races too.
Then each opens its racing client as SPEC 8 says another process does: it pickles its
board and sends it to the next process, and unpickles the one it receives, which opens
a new client of the same storage. Each claims ``hot`` once per round from a barrier on
that client; the winner lets go (release, fail, or complete in the last round) before
the next round.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.synchronize import Barrier
from typing import Any

import taskboard
from taskboard import ClaimRequest, State, TakenError, Task

PROCESSES = 4
ROUNDS = 20
TASKS = [Task("hot"), Task("after", deps=("hot",))]
WAIT = 60.0  # seconds; only reached when something hangs

OpenBoard = Callable[[], AbstractContextManager[Any]]
#: What one round was for one process: ("won" | "lost", round, token, fence).
Outcome = tuple[str, int, str, int]


def _contender(
    open_board: OpenBoard, index: int, barrier: Barrier, inboxes: list[Any], results: Any
) -> None:
    """One process: attach to the board with the others, open a client from the board the
    previous process pickled, then claim "hot" on it once per round."""
    outcomes: list[Outcome] = []
    try:
        barrier.wait(WAIT)  # every process attaches at once: set-up races too
        with open_board() as attached:
            inboxes[(index + 1) % PROCESSES].put(pickle.dumps(attached))
            barrier.wait(WAIT)  # every board is pickled and sent
            sent = inboxes[index].get(timeout=WAIT)
            # SPEC 8: unpickling a board another process sent opens a new client of the
            # same storage; every process opens its own right after the barrier above.
            with pickle.loads(sent) as board:
                _claim_rounds(board, index, barrier, outcomes)
        results.put((index, "ok", outcomes))
    except BaseException as exc:
        barrier.abort()
        results.put((index, "error", repr(exc)))


def _claim_rounds(board: Any, index: int, barrier: Barrier, outcomes: list[Outcome]) -> None:
    """Claim "hot" once per round on ``board``; the winner lets go before the next round."""
    for round_ in range(ROUNDS):
        barrier.wait(WAIT)
        token = ""
        try:
            won = board.claim("hot", f"agent{index % 2}", ClaimRequest())
        except TakenError:
            outcomes.append(("lost", round_, "", 0))
        else:
            assert won.lease is not None
            token = won.lease.token
            outcomes.append(("won", round_, token, won.lease.fence))
        barrier.wait(WAIT)  # every claim of this round is in before the winner lets go
        if token and round_ == ROUNDS - 1:
            board.complete("hot", token)
        elif token and round_ % 2:
            board.fail("hot", token)
        elif token:
            board.release("hot", token)
        barrier.wait(WAIT)


def race(open_board: OpenBoard) -> None:
    """Run the race in spawned processes and check it: exactly one winner per round, every
    other claim ``TakenError``, fences strictly growing, tokens never repeating."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(PROCESSES)]  # process i receives a board in inboxes[i]
    procs = [
        ctx.Process(target=_contender, args=(open_board, i, barrier, inboxes, results))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    reports = []
    try:
        for _ in procs:
            reports.append(results.get(timeout=WAIT))
    except queue.Empty:
        pass
    for p in procs:
        p.join(WAIT)
        if p.is_alive():
            p.kill()
            p.join()
    for q in (results, *inboxes):
        q.close()
        q.join_thread()
    assert len(reports) == PROCESSES, reports
    assert [r for r in reports if r[1] != "ok"] == []
    assert all(p.exitcode == 0 for p in procs)

    wins = sorted(o for _, _, outcomes in reports for o in outcomes if o[0] == "won")
    losses = [o for _, _, outcomes in reports for o in outcomes if o[0] == "lost"]
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
