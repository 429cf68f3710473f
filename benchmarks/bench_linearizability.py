"""Print how long the linearizability checker takes on valid concurrent histories.

Each history comes from a small, correct in-memory board driven by 4 threads over
20 tasks (a few short dependency chains): every operation gets a random interval,
takes effect at a random point inside it, and its outcome is what the board did
at that point. The clock stands still, as in the parallel machine. Seeds are fixed.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import random
import time
from datetime import UTC, datetime, timedelta

from taskboard import Lease, State, Task
from taskboard.model import BoardModel, Call, Op, Outcome
from taskboard.model._linearizability import Operation, check_history

SIZES = (100, 1_000, 10_000)
THREADS = 4
TASKS = 20
NOW = datetime(2000, 1, 1, tzinfo=UTC)
TTL = timedelta(seconds=30)


def initial_tasks() -> list[Task]:
    """t0..t19; t(i) depends on t(i-1) when i % 5 is 1 or 2: chains of three, and singles."""
    return [Task(f"t{i}", deps=(f"t{i - 1}",) if i % 5 in (1, 2) else ()) for i in range(TASKS)]


class Board:
    """A correct board at a fixed now (SPEC 3): every lease it issues stays live."""

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = {task.id: task for task in tasks}
        self.fences = {task.id: 0 for task in tasks}
        self.minted = 0

    def apply(self, call: Call) -> Outcome:
        """Run ``call`` atomically and say what the caller sees."""
        task = self.tasks[call.task_id]
        until = NOW + call.ttl if call.ttl else None
        if call.op is Op.CLAIM:
            if task.state is State.DONE:
                return Outcome(error="TerminalError")
            if any(self.tasks[dep].state is not State.DONE for dep in task.deps):
                return Outcome(error="BlockedError")
            if task.state is State.CLAIMED:
                return Outcome(error="TakenError")
            self.minted += 1
            self.fences[task.id] += 1
            lease = Lease(f"tok-{self.minted}", self.fences[task.id], until)
            return Outcome(task=self._store(task, State.CLAIMED, call.agent, lease))
        if task.state is not State.CLAIMED or task.lease is None or task.lease.token != call.token:
            return Outcome(error="LeaseLostError")
        if call.op is Op.RENEW:
            lease = dataclasses.replace(task.lease, until=until)
            return Outcome(task=self._store(task, State.CLAIMED, task.owner, lease))
        after = {Op.RELEASE: State.OPEN, Op.COMPLETE: State.DONE, Op.FAIL: State.FAILED}[call.op]
        self._store(task, after, "", None)
        return Outcome()

    def _store(self, task: Task, state: State, owner: str, lease: Lease | None) -> Task:
        new = dataclasses.replace(task, state=state, owner=owner, lease=lease, seq=task.seq + 1)
        self.tasks[task.id] = new
        return new


def generate(n: int, seed: int) -> tuple[list[Task], list[Operation], list[Task]]:
    """The initial tasks, a valid history of ``n`` operations, and the final snapshot."""
    rng = random.Random(seed)
    # About 8 completes per history whatever its length, so most tasks stay in play.
    complete_chance = min(0.5, 8 / (0.3 * n))
    tasks = initial_tasks()
    board = Board(tasks)
    held: list[dict[str, str]] = [{} for _ in range(THREADS)]
    stale: list[list[tuple[str, str]]] = [[] for _ in range(THREADS)]
    calls: list[tuple[int, Call, float]] = []  # thread, call, invoked
    outcomes: dict[int, Outcome] = {}
    returned: dict[int, float] = {}
    events: list[tuple[float, int, str, int]] = [
        (rng.random(), thread, "invoke", -1) for thread in range(THREADS)
    ]
    heapq.heapify(events)
    while events:
        at, thread, kind, index = heapq.heappop(events)
        if kind == "invoke":
            if len(calls) == n:
                continue
            call = choose(rng, thread, held[thread], stale[thread], complete_chance)
            calls.append((thread, call, at))
            takes_effect = at + rng.uniform(0.0, 1.0)
            heapq.heappush(events, (takes_effect, thread, "apply", len(calls) - 1))
        elif kind == "apply":
            outcomes[index] = board.apply(calls[index][1])
            heapq.heappush(events, (at + rng.uniform(0.0, 1.0), thread, "return", index))
        else:
            returned[index] = at
            learn(calls[index][1], outcomes[index], held[thread], stale[thread])
            heapq.heappush(events, (at + rng.uniform(0.0, 0.3), thread, "invoke", -1))
    history = [
        Operation(i, thread, call, outcomes[i], invoked, returned[i])
        for i, (thread, call, invoked) in enumerate(calls)
    ]
    return tasks, history, list(board.tasks.values())


def choose(
    rng: random.Random,
    thread: int,
    held: dict[str, str],
    stale: list[tuple[str, str]],
    complete_chance: float,
) -> Call:
    """What a worker does next: mostly act on a task it holds, else claim one."""
    if stale and rng.random() < 0.05:
        task_id, token = rng.choice(stale)
        return Call(rng.choice((Op.RELEASE, Op.COMPLETE)), task_id, token=token)
    if held and rng.random() < 0.8:
        task_id = rng.choice(sorted(held))
        if rng.random() < complete_chance:
            op = Op.COMPLETE
        else:
            op = rng.choices((Op.RELEASE, Op.FAIL, Op.RENEW), (40, 30, 25))[0]
        return Call(op, task_id, token=held[task_id], ttl=TTL if op is Op.RENEW else timedelta(0))
    ttl = rng.choice((TTL, timedelta(0)))
    return Call(Op.CLAIM, f"t{rng.randrange(TASKS)}", agent=f"a{thread}", ttl=ttl)


def learn(call: Call, outcome: Outcome, held: dict[str, str], stale: list[tuple[str, str]]) -> None:
    """What the worker learns from the response."""
    if not outcome.ok:
        return
    if call.op is Op.CLAIM and outcome.task is not None and outcome.task.lease is not None:
        held[call.task_id] = outcome.task.lease.token
    elif call.op in (Op.RELEASE, Op.COMPLETE, Op.FAIL):
        held.pop(call.task_id, None)
        stale.append((call.task_id, call.token))


def flip_one(history: list[Operation]) -> list[Operation]:
    """The history with one release/complete past the middle that lost its lease made to win."""
    middle = len(history) // 2
    k = next(
        (
            i
            for i in range(middle, len(history))
            if history[i].outcome == Outcome(error="LeaseLostError")
        ),
        None,
    )
    if k is None:
        return history
    return [*history[:k], dataclasses.replace(history[k], outcome=Outcome()), *history[k + 1 :]]


def timed(
    model: BoardModel,
    history: list[Operation],
    final: list[Task],
    budget: float,
    partition: bool,
) -> str:
    """Check once; render seconds, states visited and the verdict."""
    start = time.perf_counter()
    result = check_history(
        model, history, NOW, final_snapshot=final, budget=budget, partition=partition
    )
    seconds = time.perf_counter() - start
    return f"{seconds:>8.3f} | {result.explored:>7} | {result.verdict:<16}"


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per check")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"linearizability checking time: {THREADS} threads, {TASKS} tasks, final snapshot given;"
        " 'wrong': the same history with one outcome flipped past the middle"
    )
    header = (
        f"{'ops':>6} | {'partition':>9} | {'valid s':>8} | {'states':>7} | {'verdict':<16} | "
        f"{'wrong s':>8} | {'states':>7} | verdict"
    )
    print(header)
    print("-" * len(header))
    for n in sizes:
        tasks, history, final = generate(n, seed=n)
        model = BoardModel.start(tasks)
        wrong = flip_one(history)
        for partition in (True, False):
            on = "on" if partition else "off"
            valid = timed(model, history, final, args.budget, partition)
            broken = timed(model, wrong, final, args.budget, partition)
            print(f"{n:>6} | {on:>9} | {valid} | {broken.rstrip()}")


if __name__ == "__main__":
    main()
