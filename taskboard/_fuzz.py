"""Fuzzing a board for a time budget, in one process or many, with live progress.

The command line (``taskboard fuzz``) is a thin layer over :func:`fuzz`; everything
here can be called from Python too.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import multiprocessing
import os
import queue
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TextIO

from hypothesis import seed as hypothesis_seed
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from taskboard._clock import CLOCK_MODES
from taskboard._contract import Task
from taskboard._profiles import NIGHTLY, register_profiles
from taskboard.model import ContractViolation, violations_in
from taskboard.model._model import errors_in
from taskboard.stateful._machine import (
    _LISTENERS,
    TASK_IDS,
    BoardMachine,
    InfrastructureFault,
    failures_reported,
    grid_start,
)
from taskboard.stateful._parallel import run_parallel_state_machine
from taskboard.stateful._processes import address_of

__all__ = [
    "DEFAULT_TARGET",
    "FuzzReport",
    "UsageError",
    "check_options",
    "fuzz",
    "machine_for_target",
    "open_database",
    "parse_budget",
    "resolve_target",
]

#: What ``taskboard fuzz`` checks when given no target: the bundled SQLite reference host.
DEFAULT_TARGET = "taskboard.hosts.sqlite:SQLiteBoard"
#: Examples per Hypothesis run; the budget is checked between runs.
_BATCH = 50
#: Parallel programs per batch (each runs three times on fresh boards, with threads).
_PARALLEL_BATCH = 10
#: How ``fuzz`` mixes sequential and parallel programs.
MODES = ("mixed", "sequential", "parallel")
#: Class attributes a fuzzing run sets on the machine for its duration, then restores.
_PATCHED = (
    "trace_dir",
    "_hypothesis_internal_use_seed",
    "call_timeout",
    "tolerate_faults",
    "clock_mode",
    "clock_skew",
    "parallel_processes",
)


class UsageError(Exception):
    """A mistake in what the user asked for (a bad target, budget or database): exit code 2."""


# -- targets --------------------------------------------------------------------------------


def resolve_target(target: str) -> Any:
    """Import ``module:attribute`` and return the attribute; the working directory is searched.

    Raises:
        UsageError: the target is not of that form, or cannot be imported or found.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"target {target!r} is not of the form module:Name")
    # Like ``python -m`` and pytest, find modules in the working directory too.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r} for target {target!r}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise UsageError(f"module {module_name!r} has no {attribute!r} (target {target!r})")
        found = getattr(found, part)
    return found


def machine_for_target(target: str) -> type[BoardMachine]:
    """The BoardMachine to fuzz for ``target``: a BoardMachine subclass as it is, or a
    machine around a board factory ``(tasks, clock) -> Board``.

    A factory's ``clock_resolution`` and ``expired_lease_policy`` attributes, when it has
    them, are used; a board with a ``close()`` method is closed after each example.

    Raises:
        UsageError: the target cannot be found, or is neither a machine nor callable.
    """
    found = resolve_target(target)
    if isinstance(found, type) and issubclass(found, BoardMachine):
        return found
    if not callable(found):
        raise UsageError(
            f"target {target!r} is {found!r}: give a BoardMachine subclass or a board "
            "factory (tasks, clock) -> Board"
        )
    machine = BoardMachine.for_board(found, trace_target=target)
    # Two targets may name the same factory differently; the database keys them apart.
    machine._hypothesis_internal_add_digest = target.encode()
    return machine


# -- options --------------------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_budget(text: str) -> float:
    """Seconds in a budget such as ``90s``, ``15m``, ``8h``, ``1h30m`` or a bare ``120``.

    Raises:
        UsageError: the text is not such a duration, or is not positive.
    """
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise UsageError(f"budget {text!r} is not a duration; use e.g. 90s, 15m, 8h or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or math.isinf(seconds):
        raise UsageError(f"budget {text!r} must be a positive duration")
    return seconds


def open_database(spec: str | None) -> ExampleDatabase | None:
    """The example database for ``--database``: a directory, or a ``redis://`` URL.

    ``None`` means Hypothesis's default (``.hypothesis/examples`` here), so a later plain
    ``pytest`` run of the same machine replays what fuzzing found.

    Raises:
        UsageError: redis support is not installed, or the server does not answer.
    """
    if spec is None:
        return settings().database
    if spec.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError:
            raise UsageError(
                "a redis:// database needs the redis client: pip install 'taskboard[redis]'"
            ) from None
        client = redis.Redis.from_url(spec, socket_connect_timeout=3, socket_timeout=5)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise UsageError(f"cannot reach the redis database at {spec}: {exc}") from None
        return RedisExampleDatabase(client, key_prefix=b"taskboard-fuzz")
    return DirectoryBasedExampleDatabase(spec)


# -- running --------------------------------------------------------------------------------


@dataclass
class FuzzReport:
    """What a fuzzing run did: counts, transition coverage, and the failure if any."""

    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    workers: int = 1
    transitions: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    failure: str | None = None
    #: True when the failure is an infrastructure fault, not a contract violation.
    fault: bool = False
    trace_file: str | None = None
    #: SPEC 7: the clock the run judged time on, ``"manual"`` or ``"wall"``.
    clock_mode: str = "manual"
    #: Runs of parallel programs (threads at once, each program on fresh boards).
    parallel_runs: int = 0
    #: ``"mixed"``, ``"sequential"`` (races were not checked) or ``"parallel"``.
    mode: str = "mixed"

    @property
    def steps_per_second(self) -> float:
        """Machine steps per second of wall time, all workers together."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


@contextlib.contextmanager
def _listening(report: FuzzReport, tick: Callable[[], None]) -> Iterator[None]:
    def listener(machine: BoardMachine) -> None:
        if machine.in_parallel_program:
            report.parallel_runs += 1
        else:
            report.examples += 1
        report.steps += len(machine.trace)
        report.transitions.update(machine.transitions)
        tick()

    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def _run_batches(
    machine: type[BoardMachine],
    *,
    deadline: float,
    max_examples: int | None,
    seed: int | None,
    database: ExampleDatabase | None,
    trace_dir: str,
    report: FuzzReport,
    tick: Callable[[], None],
    mode: str = "mixed",
    overrides: Mapping[str, Any] | None = None,
) -> None:
    register_profiles()
    base = settings(settings.get_profile(NIGHTLY), database=database)
    saved = {name: machine.__dict__[name] for name in _PATCHED if name in machine.__dict__}
    machine.trace_dir = trace_dir
    for name, value in (overrides or {}).items():
        setattr(machine, name, value)
    batch_index = 0
    try:
        with _listening(report, tick):
            while time.monotonic() < deadline:
                done = report.examples + report.parallel_runs
                left = None if max_examples is None else max_examples - done
                if left is not None and left <= 0:
                    break
                # Mixed: sequential and parallel batches take turns.
                parallel = mode == "parallel" or (mode == "mixed" and batch_index % 2 == 1)
                runner = run_parallel_state_machine if parallel else run_state_machine_as_test
                size = _PARALLEL_BATCH if parallel else _BATCH
                batch = size if left is None else max(1, min(size, left // (3 if parallel else 1)))
                if seed is not None:
                    hypothesis_seed(seed + batch_index)(machine)
                batch_index += 1
                try:
                    with failures_reported(machine):
                        runner(machine, settings=settings(base, max_examples=batch))
                except InfrastructureFault as fault:
                    report.failure, report.fault = str(fault), True
                    report.trace_file = fault.trace_file
                    return
                except (ContractViolation, Flaky) as caught:
                    violation = next(iter(violations_in(caught)), None)
                    faults = [] if violation else errors_in(caught, InfrastructureFault)
                    unrepeated = next(iter(faults), None)
                    if unrepeated is not None:  # a fault that did not recur when replayed
                        report.failure, report.fault = str(unrepeated), True
                        report.trace_file = unrepeated.trace_file
                        return
                    report.failure = str(violation or caught)
                    report.trace_file = None if violation is None else violation.trace_file
                    return
                except Exception as exc:  # the board or its hooks broke: a failure, reported
                    report.failure = f"the run stopped on an error: {type(exc).__name__}: {exc}"
                    return
    finally:
        for name in _PATCHED:
            if name in saved:
                setattr(machine, name, saved[name])
            elif name in machine.__dict__:
                delattr(machine, name)


def _worker(
    target: str,
    index: int,
    deadline_seconds: float,
    max_examples: int | None,
    seed: int | None,
    database: str | None,
    trace_dir: str,
    updates: Any,
    mode: str,
    overrides: Mapping[str, Any],
) -> None:
    """One fuzzing process: runs batches and sends its counts to the parent."""
    report = FuzzReport()
    last_sent = 0.0

    def tick() -> None:
        nonlocal last_sent
        now = time.monotonic()
        if now - last_sent > 0.5:
            updates.put(("progress", index, report.examples, report.steps))
            last_sent = now

    try:
        machine = machine_for_target(target)
        _run_batches(
            machine,
            deadline=time.monotonic() + deadline_seconds,
            max_examples=max_examples,
            seed=None if seed is None else seed + 1_000_003 * index,
            database=open_database(database),
            trace_dir=trace_dir,
            report=report,
            tick=tick,
            mode=mode,
            overrides=overrides,
        )
    except Exception as exc:  # a crash in a worker is reported, not swallowed
        updates.put(("crash", index, f"{type(exc).__name__}: {exc}", None))
        return
    updates.put(("done", index, report, None))


def _check_pickles_as_client(machine: type[BoardMachine]) -> None:
    """Make one board and check that it pickles, as ``--processes`` needs; other trouble
    making it is left for the run to report as what it is.

    Raises:
        UsageError: the board does not pickle as a client of its storage.
    """
    probe = machine()
    try:
        probe._begin([Task(task_id) for task_id in TASK_IDS], grid_start(probe.tick))
        address_of(probe.made_board)
    except TypeError as exc:
        raise UsageError(str(exc)) from None
    except Exception:  # the run will meet it again and report it properly
        pass
    finally:
        with contextlib.suppress(Exception):
            probe.teardown()


def check_options(
    target: str, workers: int, max_examples: int | None, database: str | None
) -> tuple[type[BoardMachine], ExampleDatabase | None]:
    """The machine and database a fuzzing run would use, or the mistake in its options.

    Raises:
        UsageError: a bad target or database, or a worker or example count below 1.
    """
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    if max_examples is not None and max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {max_examples}")
    machine = machine_for_target(target)
    try:
        machine.check_definition()
    except TypeError as exc:
        raise UsageError(f"target {target!r}: {exc}") from None
    return machine, open_database(database)


def fuzz(
    target: str = DEFAULT_TARGET,
    *,
    budget: float = 60.0,
    max_examples: int | None = None,
    seed: int | None = None,
    workers: int = 1,
    database: str | None = None,
    trace_dir: str = "taskboard-traces",
    progress: TextIO | None = sys.stderr,
    parallel: bool = False,
    mode: str = "mixed",
    call_timeout: float | None = None,
    tolerate_faults: bool = False,
    clock: str | None = None,
    clock_skew: float | None = None,
    processes: bool = False,
    on_start: Callable[[], None] | None = None,
) -> FuzzReport:
    """Fuzz ``target`` until the budget (seconds) or ``max_examples`` runs out, or a failure.

    Stops at the first contract violation; its shrunk trace is written to ``trace_dir``
    and it is saved in the example database (``database``: a directory or ``redis://``
    URL; ``None`` is Hypothesis's default), so the next run replays it first. ``mode``
    ``"mixed"`` (the default) alternates batches of sequential programs with batches of
    parallel ones (threads at once, checked for linearizability); ``"sequential"`` runs no
    threads, so races go unchecked; ``"parallel"`` (or ``parallel=True``) only threads.
    ``call_timeout`` (seconds; 0: no limit) and ``tolerate_faults`` override the
    machine's own settings (``None`` and ``False`` keep them); an infrastructure
    fault also stops the run, with ``report.fault`` set. ``clock`` (``"manual"`` or
    ``"wall"``, SPEC 7) and ``clock_skew`` (milliseconds) override the machine's
    ``clock_mode`` and ``clock_skew`` likewise. ``processes`` runs each thread of a
    parallel program in an OS process of its own, on a client it opens by unpickling the
    board (SPEC 8).
    ``on_start`` is called once the options have been checked, before anything runs.

    Raises:
        UsageError: a bad target, database or argument.
    """
    machine, opened = check_options(target, workers, max_examples, database)
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if parallel:
        mode = "parallel"
    overrides: dict[str, Any] = {}
    if processes:
        if mode == "sequential":
            raise UsageError("--processes runs parallel programs: use it without --mode sequential")
        overrides["parallel_processes"] = True
        _check_pickles_as_client(machine)
    if call_timeout is not None:
        if not call_timeout >= 0 or call_timeout == float("inf"):
            raise UsageError(f"--call-timeout must be a number of seconds >= 0, got {call_timeout}")
        overrides["call_timeout"] = timedelta(seconds=call_timeout) if call_timeout else None
    if tolerate_faults:
        overrides["tolerate_faults"] = True
    if clock is not None:
        if clock not in CLOCK_MODES:
            raise UsageError(f"--clock must be 'manual' or 'wall', got {clock!r}")
        overrides["clock_mode"] = clock
    if clock_skew is not None:
        if not 0 <= clock_skew < 3_600_000:
            raise UsageError(
                f"--clock-skew must be a number of milliseconds >= 0, got {clock_skew}"
            )
        overrides["clock_skew"] = timedelta(milliseconds=clock_skew)
    if on_start is not None:  # after the options are known good: a mistake stays one line
        on_start()
    started = time.monotonic()
    meter = _Progress(progress, started, budget)
    if workers == 1:
        report = FuzzReport()
        _run_batches(
            machine,
            deadline=started + budget,
            max_examples=max_examples,
            seed=seed,
            database=opened,
            trace_dir=trace_dir,
            report=report,
            tick=lambda: meter.show(report.examples, report.steps, 0),
            mode=mode,
            overrides=overrides,
        )
    else:
        report = _fuzz_in_processes(
            target,
            budget,
            max_examples,
            seed,
            workers,
            database,
            trace_dir,
            meter,
            mode,
            overrides,
        )
    report.seconds = time.monotonic() - started
    report.workers = workers
    report.mode = mode
    report.clock_mode = overrides.get("clock_mode", machine.clock_mode)
    meter.close(report.examples, report.steps, int(report.failure is not None))
    return report


def _fuzz_in_processes(
    target: str,
    budget: float,
    max_examples: int | None,
    seed: int | None,
    workers: int,
    database: str | None,
    trace_dir: str,
    meter: _Progress,
    mode: str,
    overrides: Mapping[str, Any],
) -> FuzzReport:
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    shares: list[int | None] = [None] * workers
    if max_examples is not None:
        shares = [max_examples // workers + (i < max_examples % workers) for i in range(workers)]
    processes = [
        context.Process(
            target=_worker,
            args=(
                target,
                i,
                budget,
                shares[i],
                seed,
                database,
                trace_dir,
                updates,
                mode,
                overrides,
            ),
            daemon=True,
        )
        for i in range(workers)
    ]
    for process in processes:
        process.start()
    counts = dict.fromkeys(range(workers), (0, 0))
    total = FuzzReport()
    finished = 0
    try:
        while finished < workers:
            try:
                kind, index, first, second = updates.get(timeout=1.0)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    break
                continue
            if kind == "progress":
                counts[index] = (first, second)
            elif kind == "crash":
                finished += 1
                total.failure = total.failure or f"worker {index} crashed: {first}"
            else:
                finished += 1
                done: FuzzReport = first
                counts[index] = (done.examples, done.steps)
                total.parallel_runs += done.parallel_runs
                total.transitions.update(done.transitions)
                if done.failure and total.failure is None:
                    total.failure, total.trace_file = done.failure, done.trace_file
                    total.fault = done.fault
                    break
            examples = sum(c[0] for c in counts.values())
            steps = sum(c[1] for c in counts.values())
            meter.show(examples, steps, int(total.failure is not None))
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=5)
    if finished < workers and total.failure is None:
        codes = ", ".join(str(p.exitcode) for p in processes)
        total.failure = (
            f"{workers - finished} of {workers} workers stopped without a report "
            f"(exit codes {codes})"
        )
    total.examples = sum(c[0] for c in counts.values())
    total.steps = sum(c[1] for c in counts.values())
    return total


class _Progress:
    """A status line on stderr: rewritten in place on a terminal, a line every 10 s otherwise."""

    def __init__(self, stream: TextIO | None, started: float, budget: float) -> None:
        self.stream, self.started, self.budget = stream, started, budget
        self.tty = bool(stream is not None and stream.isatty())
        self.last = 0.0

    def show(self, examples: int, steps: int, failures: int) -> None:
        now = time.monotonic()
        if self.stream is None or now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        self._write(examples, steps, failures, now, final=False)

    def close(self, examples: int, steps: int, failures: int) -> None:
        if self.stream is not None:
            self._write(examples, steps, failures, time.monotonic(), final=True)

    def _write(self, examples: int, steps: int, failures: int, now: float, *, final: bool) -> None:
        assert self.stream is not None
        elapsed = now - self.started
        rate = steps / elapsed if elapsed > 0 else 0.0
        left = max(0.0, self.budget - elapsed)
        line = (
            f"examples {examples} | steps/s {rate:,.0f} | failures {failures} | left {_clock(left)}"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))
