"""A campaign on several worker processes: each runs its share, and tells the parent what it
did in typed messages."""

from __future__ import annotations

import multiprocessing
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from taskboard._fuzz.options import FuzzOptions, open_database
from taskboard._fuzz.progress import Progress
from taskboard._fuzz.report import FuzzReport
from taskboard._fuzz.run import Run
from taskboard._fuzz.serving import serving
from taskboard._fuzz.targets import Target, UsageError, probe_board
from taskboard.stateful._parallel import RUNS_PER_PROGRAM

__all__ = [
    "Crashed",
    "Finished",
    "Job",
    "Misused",
    "Progressed",
    "WorkerMessage",
    "fuzz_in_processes",
]

#: Seconds the parent waits for the workers' last counts after Ctrl-C.
_LAST_WORDS = 10.0
#: How far apart, in seconds, a worker sends its counts.
_PROGRESS_EVERY = 0.5
#: Each worker's seed is the run's, moved by this much per worker index.
_SEED_STRIDE = 1_000_003


@dataclass(frozen=True)
class Job:
    """What one worker process runs: its share of the campaign."""

    target: str
    options: FuzzOptions
    index: int
    seed: int
    max_examples: int | None


@dataclass(frozen=True)
class Progressed:
    """A worker's counts so far."""

    index: int
    examples: int
    parallel_runs: int
    steps: int
    #: True once the worker found a failure; where shrinking it is ("": not shrinking).
    found: bool = False
    shrinking: str = ""


@dataclass(frozen=True)
class Finished:
    """A worker's whole report, at its end (a failure it found included)."""

    index: int
    report: FuzzReport


@dataclass(frozen=True)
class Crashed:
    """A worker stopped on an error of taskboard's own, or of the target's import."""

    index: int
    error: str


@dataclass(frozen=True)
class Misused:
    """A worker met a usage mistake (every worker meets the same one)."""

    index: int
    error: str


WorkerMessage = Progressed | Finished | Crashed | Misused


def _work(job: Job, updates: Any, stop: Any) -> None:
    """One fuzzing process: runs its batches and sends its counts to the parent.

    It starts with SIGINT ignored (the parent's Ctrl-C is not its own): the parent sets
    ``stop`` instead, and the worker ends at its next step, as Ctrl-C would.
    """
    report = FuzzReport()
    last_sent = 0.0

    def tick() -> None:
        nonlocal last_sent
        now = time.monotonic()
        if now - last_sent > _PROGRESS_EVERY:
            found = report.find_seconds is not None
            counts = (report.examples, report.parallel_runs, report.steps)
            updates.put(Progressed(job.index, *counts, found, report.shrinking))
            last_sent = now

    try:
        target = Target.resolve(job.target)
        with serving(job.options.server):  # each worker's server of its own
            probe_board(job.options.machine(target), job.target, pickles=job.options.processes)
            run = Run.plan(
                target,
                job.options,
                seed=job.seed + _SEED_STRIDE * job.index,
                max_examples=job.max_examples,
                database=open_database(job.options.database),
            )
            run.batches(report, tick, stop)
    except UsageError as exc:
        updates.put(Misused(job.index, str(exc)))
        return
    except Exception as exc:  # a crash in a worker is reported, not swallowed
        updates.put(Crashed(job.index, f"{type(exc).__name__}: {exc}"))
        return
    updates.put(Finished(job.index, report))


def fuzz_in_processes(
    target: str, options: FuzzOptions, seed: int, meter: Progress, interrupted: threading.Event
) -> FuzzReport:
    """Run ``options.workers`` workers side by side on ``target`` and merge their reports; the
    first failure any of them finds stops them all.

    Raises:
        UsageError: the workers met a usage mistake.
    """
    workers = options.workers
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    stop = context.Event()
    shares: list[int | None] = [None] * workers
    if options.max_examples is not None:
        total_examples = options.max_examples
        shares = [
            total_examples // workers + (i < total_examples % workers) for i in range(workers)
        ]
    processes = [
        context.Process(
            target=_work,
            args=(Job(target, options, i, seed, shares[i]), updates, stop),
            daemon=True,
        )
        for i in range(workers)
    ]
    counts = {i: Progressed(i, 0, 0, 0) for i in range(workers)}
    total = FuzzReport()
    finished = 0
    interrupted_at: float | None = None
    try:
        # Workers inherit SIGINT ignored, so that a terminal's Ctrl-C, sent to the whole
        # process group, reaches only this process, which then stops them through ``stop``.
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for process in processes:
                process.start()
        finally:
            signal.signal(signal.SIGINT, handler)
        while finished < workers:
            if interrupted.is_set() and interrupted_at is None:
                # Ctrl-C: stop the workers, and wait a moment for their last counts.
                interrupted_at = time.monotonic()
                total.interrupted = True
                stop.set()
            try:
                message: WorkerMessage = updates.get(timeout=0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    break
                if interrupted_at is not None and time.monotonic() - interrupted_at > _LAST_WORDS:
                    break
                continue
            if isinstance(message, Progressed):
                counts[message.index] = message
            elif isinstance(message, Misused):
                raise UsageError(message.error)
            elif isinstance(message, Crashed):
                finished += 1
                total.failure = total.failure or f"worker {message.index} crashed: {message.error}"
            else:
                finished += 1
                done = message.report
                counts[message.index] = Progressed(
                    message.index, done.examples, done.parallel_runs, done.steps
                )
                total.add(done)
                if done.failure and total.failure is None:
                    total.failure, total.trace_file = done.failure, done.trace_file
                    total.fault = done.fault
                    total.clause = done.clause
                    total.find_seconds, total.replay_shrink = done.find_seconds, done.replay_shrink
                    break
            found = sum(c.found for c in counts.values())
            shrinking = next((c.shrinking for c in counts.values() if c.shrinking), "")
            meter.show(*_sums(counts), max(found, int(total.failure is not None)), shrinking)
    finally:
        stop.set()
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
    if finished < workers and total.failure is None and not total.interrupted:
        codes = ", ".join(str(p.exitcode) for p in processes)
        total.failure = (
            f"{workers - finished} of {workers} workers stopped without a report "
            f"(exit codes {codes})"
        )
    total.examples, total.parallel_runs, total.steps = (
        sum(c.examples for c in counts.values()),
        sum(c.parallel_runs for c in counts.values()),
        sum(c.steps for c in counts.values()),
    )
    return total


def _sums(counts: dict[int, Progressed]) -> tuple[int, int, int]:
    """Examples, parallel programs and steps of every worker together."""
    runs = sum(c.parallel_runs for c in counts.values())
    return (
        sum(c.examples for c in counts.values()),
        runs // RUNS_PER_PROGRAM,
        sum(c.steps for c in counts.values()),
    )
