"""``fuzz``: a whole campaign, in this process or in worker processes, with Ctrl-C handling."""

from __future__ import annotations

import contextlib
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TextIO

from taskboard._fuzz.options import FuzzOptions, open_database
from taskboard._fuzz.progress import Progress
from taskboard._fuzz.report import (
    FuzzReport,
    RunHeader,
    races_of,
    settings_in_force,
    settings_of_run,
)
from taskboard._fuzz.run import Run
from taskboard._fuzz.serving import serving
from taskboard._fuzz.targets import DEFAULT_TARGET, Target, probe_board
from taskboard._fuzz.workers import fuzz_in_processes
from taskboard.stateful._config import MachineConfig

__all__ = ["fuzz"]


@contextlib.contextmanager
def _ctrl_c_requests_a_stop() -> Iterator[threading.Event]:
    """An event that the first Ctrl-C sets, so that the run stops at its next step (a
    ``KeyboardInterrupt`` raised at a random point can be swallowed, in a finalizer say).
    The second Ctrl-C interrupts at once, for a board call that hangs. Outside the main
    thread, where no signal handler can be set, the event is never set."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def first_ctrl_c(signum: int, frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, first_ctrl_c)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def fuzz(
    target: str = DEFAULT_TARGET,
    options: FuzzOptions | None = None,
    *,
    progress: TextIO | None = sys.stderr,
    on_start: Callable[[int, RunHeader], None] | None = None,
    **changes: Any,
) -> FuzzReport:
    """Fuzz ``target`` until the budget (seconds) or ``max_examples`` runs out, or a failure.

    ``options`` (a :class:`FuzzOptions`; the defaults when ``None``) with ``changes``
    (``budget=5``, ``mode="sequential"``: any field of it) say how. Stops at the first
    contract violation; its shrunk trace is written to ``trace_dir`` and it is saved in the
    example database (``database``: a directory or ``redis://`` URL; ``None`` is
    Hypothesis's default), so the next run replays it first. ``mode`` ``"mixed"`` (the
    default) alternates batches of sequential programs with batches of parallel ones
    (threads at once, checked for linearizability); ``"sequential"`` runs no threads, so
    races go unchecked; ``"parallel"`` only threads. An infrastructure fault also stops the
    run, with ``report.fault`` set. The machine's own Hypothesis settings
    (``@settings(stateful_step_count=...)``, a contract's ``machine_settings``) apply, but
    for the example count, the database and derandomizing; ``report.settings`` says which
    were in force. ``seed`` repeats a run (one is drawn when it is ``None``; ``report.seed``
    says which). ``on_start`` is called with the seed and the settings in force, each with
    where it came from (a :class:`~taskboard._fuzz.report.RunHeader`), once the options have
    been checked, before anything runs. Ctrl-C (``KeyboardInterrupt``) stops
    the run at its next step, every worker with it, and returns what it reached with
    ``report.interrupted`` set.

    Raises:
        UsageError: a bad target, database or option.
    """
    if changes.pop("parallel", False):
        changes["mode"] = "parallel"
    options = (options or FuzzOptions()).replace(**changes)
    resolved = Target.resolve(target)
    options = options.checked(resolved)
    planned = options.machine(resolved)
    database = open_database(options.database)  # one that cannot be reached: a usage error now
    # The process that runs the examples starts the --server for the run and stops it at its
    # end: this one, or each worker its own.
    with serving(options.server if options.workers == 1 else None):
        # Several workers probe in their own processes, as a board may exit.
        if options.workers == 1:
            probe_board(planned, target, pickles=options.processes)
        seed = random.randrange(2**32) if options.seed is None else options.seed
        header = RunHeader(
            settings_of_run(resolved, options),
            settings_in_force(resolved, options.settings(resolved, None)),
        )
        if on_start is not None:  # after the options are known good: a mistake stays one line
            on_start(seed, header)
        config = MachineConfig.of(planned)
        started = time.monotonic()
        meter = Progress(progress, started, options.budget)
        with _ctrl_c_requests_a_stop() as stop:
            if options.workers == 1:
                report = FuzzReport()

                def tick() -> None:
                    found = int(report.find_seconds is not None)
                    meter.show(
                        report.examples,
                        report.parallel_programs,
                        report.steps,
                        found,
                        report.shrinking,
                    )

                run = Run.plan(
                    resolved,
                    options,
                    seed=seed,
                    max_examples=options.max_examples,
                    database=database,
                )
                try:
                    run.batches(report, tick, stop)
                except KeyboardInterrupt:
                    report.interrupted = True
            else:
                report = fuzz_in_processes(resolved.name, options, seed, meter, stop)
    report.seconds = time.monotonic() - started
    report.workers = options.workers
    report.mode = options.mode
    report.seed = seed
    report.clock_mode = config.clock_mode
    report.settings = header.hypothesis
    report.in_force = header.rows
    report.races = races_of(config, options.mode)
    report.shortest_lease, report.clients = config.shortest_lease, config.clients
    meter.close(
        report.examples, report.parallel_programs, report.steps, int(report.failure is not None)
    )
    return report
