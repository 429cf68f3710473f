"""RedisBoard shared by several processes through one redis-server."""

from __future__ import annotations

import multiprocessing
import queue
from multiprocessing.synchronize import Barrier
from typing import Any

import taskboard
from taskboard import ClaimRequest, State, SystemClock, TakenError, Task
from taskboard.hosts.redis import RedisBoard

PROCESSES = 4
ROUNDS = 20
TASKS = [Task("hot"), Task("after", deps=("hot",))]
WAIT = 60.0  # seconds; only reached when something hangs


def _contender(url: str, board_id: str, index: int, barrier: Barrier, results: Any) -> None:
    """One process: attach to the board, then claim "hot" once per round from a barrier."""
    outcomes: list[tuple[str, int, str, int]] = []
    try:
        # Every process attaches at once: the insert of missing tasks races too.
        with RedisBoard(TASKS, SystemClock(), url, board_id=board_id) as board:
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
        results.put((index, "ok", outcomes))
    except BaseException as exc:
        barrier.abort()
        results.put((index, "error", repr(exc)))


def test_processes_racing_on_one_server_have_one_winner_per_round(redis_server_url: str) -> None:
    """Four spawned processes, twenty rounds: one winner per round, fences grow, tokens unique."""
    # The parent makes the board (and deletes it at the end); the children attach by id,
    # so one leaving does not delete the board from under the others.
    with RedisBoard([], SystemClock(), redis_server_url) as owner:
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(PROCESSES)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=_contender,
                args=(redis_server_url, owner.board_id, i, barrier, results),
            )
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
        results.close()
        results.join_thread()
        assert len(reports) == PROCESSES, reports
        errors = [r for r in reports if r[1] != "ok"]
        assert errors == []
        assert all(p.exitcode == 0 for p in procs)

        wins = sorted(o for _, _, outcomes in reports for o in outcomes if o[0] == "won")
        losses = [o for _, _, outcomes in reports for o in outcomes if o[0] == "lost"]
        assert [w[1] for w in wins] == list(range(ROUNDS)), "exactly one winner per round"
        assert len(losses) == ROUNDS * (PROCESSES - 1)
        fences = [w[3] for w in wins]
        assert fences == sorted(set(fences)), "fences strictly grow across rounds"
        assert len({w[2] for w in wins}) == ROUNDS, "tokens never repeat"

        snapshot = {t.id: t for t in owner.list_tasks()}
        assert snapshot["hot"].state is State.DONE
        assert snapshot["hot"].seq == 2 * ROUNDS
        assert snapshot["after"] == Task("after", deps=("hot",))
        assert taskboard.check(owner.list_tasks()) == []
