"""One process's part of a fuzzing campaign: batches of examples until the budget, the example
count, a failure or a stop request ends it."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import seed as hypothesis_seed
from hypothesis import settings
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from taskboard._fuzz.fleet import Publisher
from taskboard._fuzz.options import FuzzOptions
from taskboard._fuzz.report import FuzzReport
from taskboard._fuzz.targets import Target
from taskboard._race import worker_pool
from taskboard.model import ContractViolation, violations_in
from taskboard.model._model import errors_in
from taskboard.stateful._hypothesis import shrinking_for_at_most
from taskboard.stateful._machine import BoardMachine
from taskboard.stateful._parallel import run_parallel_state_machine
from taskboard.stateful._reports import (
    AnswersVaried,
    Failure,
    InfrastructureFault,
    failures_reported,
    found_clause,
)
from taskboard.stateful._runstate import separate_run
from taskboard.stateful._session import ExampleStats, StopRequested, on_example_end, stop_when
from taskboard.stateful._shrink import shrink_failure

__all__ = ["BATCH", "FIRST_PARALLEL_BATCH", "PARALLEL_BATCH", "Run"]

#: Examples per Hypothesis run (the budget is checked at every step, not per batch).
BATCH = 50
#: Parallel programs per batch (each runs three times on fresh boards, with threads).
PARALLEL_BATCH = 10
#: Parallel programs a mixed run begins with, so that races are tried from its first example
#: on. It has a seed of its own: the batches after it draw what they drew without it.
FIRST_PARALLEL_BATCH = 1


@dataclass(frozen=True)
class Run:
    """One process's part of a campaign: what to run, where, until when."""

    target: Target
    options: FuzzOptions
    #: The machine with the options set (see :meth:`FuzzOptions.machine`).
    machine: type[BoardMachine]
    deadline: float
    max_examples: int | None
    seed: int
    database: ExampleDatabase | None

    @classmethod
    def plan(
        cls,
        target: Target,
        options: FuzzOptions,
        *,
        seed: int,
        max_examples: int | None,
        database: ExampleDatabase | None,
    ) -> Run:
        """The run of ``target`` with ``options``, from now until the budget is spent."""
        return cls(
            target,
            options,
            options.machine(target),
            time.monotonic() + options.budget,
            max_examples,
            seed,
            database,
        )

    def batches(self, report: FuzzReport, tick: Callable[[], None], stop: Any) -> None:
        """Run batches of examples into ``report`` until the deadline, ``max_examples``, a
        failure, or ``stop`` (an event) ends the run; ``tick()`` after every example.

        The deadline and ``stop`` are checked before every call and clock move, so a run
        stops on time even on a board whose examples take minutes."""
        base = self.options.settings(self.target, self.database)

        found = False
        found_at = 0.0
        began = time.monotonic()
        # The steps of the failing example as found, and of the shortest one that failed since.
        first_steps = shortest = 0
        publisher = None
        if self.options.campaign is not None and self.options.database is not None:
            publisher = Publisher(self.options.database, self.options.campaign, self.target.name)

        def done() -> bool:
            # Once a failure is found, only Ctrl-C stops the run: Hypothesis shrinks it first.
            if stop.is_set():
                return True
            spent = self.max_examples is not None and (
                report.examples + report.parallel_runs >= self.max_examples
            )
            return not found and (spent or time.monotonic() >= self.deadline)

        def counted(example: ExampleStats) -> None:
            nonlocal found, found_at, first_steps, shortest
            if found:  # Hypothesis shrinking the failure: not a new example of the search
                report.shrink_runs += 1
                shrinking = time.monotonic() - found_at
                report.shrink_cut = shrinking >= self.hypothesis_shrink_budget
            else:
                report.count(example)
                found_at = time.monotonic()
                if publisher is not None:
                    publisher.heard(example)
                if example.failed:
                    report.find_seconds = found_at - began
                    first_steps = shortest = example.steps
            found = found or example.failed
            if found:
                if example.failed:
                    shortest = min(shortest, example.steps)
                spent = time.monotonic() - found_at
                report.shrinking = (
                    f"shrinking: {first_steps} steps → {shortest}, "
                    f"{max(0.0, self.options.shrink_budget - spent):.0f} s left"
                )
            tick()

        def shrink_left() -> float:
            return self.options.shrink_budget - (time.monotonic() - found_at)

        try:
            with worker_pool():  # spawned once for the whole run, not once per batch
                caught = self._batches(report, base, done, counted, stop)
                if caught is not None and not stop.is_set():
                    self._shrink_by_replay(caught, report, shrink_left(), tick, stop.is_set)
                    report.interrupted = report.interrupted or stop.is_set()
        finally:
            if publisher is not None:  # a find is published before the worker exits
                publisher.finish(
                    report.failure,
                    fault=report.fault,
                    clause=report.clause,
                    trace_file=report.trace_file,
                )

    def _batches(
        self,
        report: FuzzReport,
        base: settings,
        done: Callable[[], bool],
        counted: Callable[[ExampleStats], None],
        stop: Any,
    ) -> Failure | None:
        """Run the batches; returns the failure of a sequential batch, to shrink by replay."""
        mode = self.options.mode
        with (
            separate_run(),  # its own run, even inside another: heard and stopped apart
            on_example_end(counted),
            stop_when(done),
            shrinking_for_at_most(self.hypothesis_shrink_budget),
        ):
            for batch_index in self._batch_order():
                if done():
                    break
                parallel = mode == "parallel" or (mode == "mixed" and batch_index % 2 != 0)
                size = PARALLEL_BATCH if parallel else BATCH
                if batch_index < 0:
                    size = FIRST_PARALLEL_BATCH
                hypothesis_seed(self.seed + batch_index)(self.machine)
                started = time.monotonic()
                try:
                    self._batch(parallel, settings(base, max_examples=size))
                except StopRequested:
                    break
                except KeyboardInterrupt:
                    report.interrupted = True
                    return None
                except AnswersVaried:  # a board's allowed choice, not a failure: go on
                    self.machine.answers_vary = True
                    report.answers_varied = True
                except InfrastructureFault as fault:
                    report.failure, report.fault = str(fault), True
                    report.trace_file = fault.trace_file
                    return None
                except (ContractViolation, Flaky) as caught:
                    violation = next(iter(violations_in(caught)), None)
                    faults = [] if violation else errors_in(caught, InfrastructureFault)
                    unrepeated = next(iter(faults), None)
                    if unrepeated is not None:  # a fault that did not recur when replayed
                        report.failure, report.fault = str(unrepeated), True
                        report.trace_file = unrepeated.trace_file
                        return None
                    report.failure = str(violation or caught)
                    report.clause = None if violation is None else found_clause(violation)
                    report.trace_file = None if violation is None else violation.trace_file
                    return None if parallel else violation
                except Exception as exc:  # the board or its hooks broke: a failure, reported
                    report.failure = f"the run stopped on an error: {type(exc).__name__}: {exc}"
                    return None
                finally:
                    if parallel:
                        report.parallel_seconds += time.monotonic() - started
        report.interrupted = report.interrupted or stop.is_set()
        return None

    def _batch_order(self) -> Iterator[int]:
        """The batches' numbers, which seed them: mixed runs take even ones sequential and
        odd ones parallel, after a short parallel batch numbered -1 (races from the first
        example on)."""
        if self.options.mode == "mixed":
            yield -1
        yield from itertools.count()

    @property
    def hypothesis_shrink_budget(self) -> float:
        """Seconds Hypothesis shrinks a failure for: half the shrink budget; the rest, and
        whatever Hypothesis leaves of its half, goes to shrinking the trace by replay."""
        return self.options.shrink_budget / 2

    def _shrink_by_replay(
        self,
        caught: Failure,
        report: FuzzReport,
        seconds: float,
        tick: Callable[[], None],
        stopped: Callable[[], bool],
    ) -> None:
        """Shrink ``caught``'s trace by replay (:mod:`taskboard.stateful._shrink`) for at
        most ``seconds``, or until ``stopped()`` (Ctrl-C), and put the failure it reports in
        ``report``; the status line shows how far it got."""

        def told(steps: int, first: int, left: float) -> None:
            report.shrinking = f"shrinking: {first} steps → {steps}, {left:.0f} s left"
            tick()

        shrunk_error, shrunk = shrink_failure(
            caught, self.machine, seconds=max(seconds, 0.0), on_progress=told, stopped=stopped
        )
        report.shrinking = ""
        if shrunk is None or shrunk.violation is None:
            return
        report.failure = str(shrunk_error)
        report.trace_file = shrunk_error.trace_file or report.trace_file
        report.shrink_cut = shrunk.cut  # it went on from where Hypothesis stopped
        before, after = len(caught.trace), len(shrunk.trace.steps)
        report.replay_shrink = (
            f"shrunk by replay from {before} steps to {after}"
            if after < before
            else "shrinking by replay found no shorter trace"
        ) + f" in {shrunk.replays} replays"
        if shrunk.tried > 1:
            report.replay_shrink += (
                f" (the trace failed in {shrunk.failed} of {shrunk.tried} replays)"
            )

    def _batch(self, parallel: bool, chosen: settings) -> None:
        with failures_reported(self.machine):
            if parallel:
                run_parallel_state_machine(self.machine, settings=chosen)
            else:
                run_state_machine_as_test(self.machine, settings=chosen)
