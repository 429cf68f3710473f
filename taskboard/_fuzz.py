"""Fuzzing a board for a time budget, in one process or many, with live progress.

The command line (``taskboard fuzz``) is a thin layer over :func:`fuzz`; everything
here can be called from Python too.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import multiprocessing
import os
import queue
import random
import re
import signal
import sys
import threading
import time
import unittest
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from hypothesis import seed as hypothesis_seed
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from taskboard._clock import CLOCK_MODES, ManualClock, SystemClock
from taskboard._contract import Task
from taskboard._driver import CORE_METHODS, close_driven, make_driven
from taskboard._profiles import NIGHTLY
from taskboard.model import ContractViolation, violations_in
from taskboard.model._model import errors_in
from taskboard.stateful._generation import TASK_IDS, grid_start
from taskboard.stateful._machine import BoardMachine
from taskboard.stateful._parallel import RUNS_PER_PROGRAM, run_parallel_state_machine
from taskboard.stateful._processes import address_of
from taskboard.stateful._reports import InfrastructureFault, failures_reported
from taskboard.stateful._session import ExampleStats, on_example_end
from taskboard.stateful._trace import NEMESIS_HOOKS

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
    "nemesis",
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


#: What a target may be, for usage errors.
WHAT_TO_PASS = (
    "pass module:Name of a board class or factory (tasks, clock) -> Board, a BoardMachine "
    "subclass, a BoardContract subclass, or a machine's TestCase"
)


def machine_of(found: Any, target: str) -> type[BoardMachine] | None:
    """The machine that ``found`` stands for when it is a BoardMachine subclass, a
    :class:`~taskboard.boardtest.BoardContract` subclass (its machine, on its hooks and
    settings; its pytest fixtures do not run) or a machine's ``TestCase`` or
    ``ParallelTestCase``; ``None`` for anything else.

    Raises:
        UsageError: ``found`` is some other test class.
    """
    from taskboard.boardtest import BoardContract  # it imports pytest

    if not isinstance(found, type):
        return None
    if issubclass(found, BoardMachine):
        return found
    if issubclass(found, BoardContract):
        if found.make_board is BoardContract.make_board:
            raise UsageError(f"target {target!r} defines no make_board: {WHAT_TO_PASS}")
        return found()._machine_class("Machine", trace_target=target)
    machine: type[BoardMachine] | None = getattr(found, "_taskboard_machine", None)
    if machine is not None:
        return machine
    if issubclass(found, unittest.TestCase) or (
        not hasattr(found, "claim") and any(name.startswith("test") for name in vars(found))
    ):
        raise UsageError(f"target {target!r} is a test class, not a board: {WHAT_TO_PASS}")
    missing = _missing_operations(found)
    if missing:
        raise UsageError(
            f"target {target!r} is a class with no {', '.join(missing)}, not a board: "
            f"{WHAT_TO_PASS}"
        )
    return None


def _missing_operations(board: object) -> list[str]:
    """The Board protocol's own methods (SPEC 1) that ``board``, or a board class, lacks."""
    return [name for name in CORE_METHODS if not callable(getattr(board, name, None))]


def machine_for_target(target: str) -> type[BoardMachine]:
    """The BoardMachine to fuzz for ``target``: a BoardMachine subclass as it is, the machine
    of a BoardContract subclass or of a machine's TestCase, or a machine around a board
    factory ``(tasks, clock) -> Board``.

    A factory's ``clock_resolution`` and ``expired_lease_policy`` attributes, when it has
    them, are used; a board with a ``close()`` method is closed after each example.

    Raises:
        UsageError: the target cannot be found, is another test class, or is neither a
            machine nor callable.
    """
    found = resolve_target(target)
    machine_cls = machine_of(found, target)
    if machine_cls is not None:
        return machine_cls
    if not callable(found):
        raise UsageError(f"target {target!r} is {found!r}, not a board: {WHAT_TO_PASS}")
    try:
        inspect.signature(found).bind([], SystemClock())
    except TypeError:
        raise UsageError(
            f"target {target!r} cannot be called as a board factory (tasks, clock): {WHAT_TO_PASS}"
        ) from None
    except ValueError:  # no signature to read (some builtins): the probe board will tell
        pass
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
                "a redis:// database needs the redis client: "
                "pip install 'taskboard-contract[redis]'"
            ) from None
        client = redis.Redis.from_url(spec, socket_connect_timeout=3, socket_timeout=5)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise UsageError(f"cannot reach the redis database at {spec}: {exc}") from None
        return RedisExampleDatabase(client, key_prefix=b"taskboard-fuzz")
    check_writable_directory(spec, "--database")
    return DirectoryBasedExampleDatabase(spec)


def check_writable_directory(path: str, option: str) -> None:
    """Check that ``path`` is a directory this process may write in, or could create.

    Raises:
        UsageError: ``path`` is a file, or its nearest existing ancestor is not a
            directory this process may write in.
    """
    where = Path(path).absolute()
    if where.exists() and not where.is_dir():
        raise UsageError(f"{option} {path!r} is not a directory")
    existing = next(p for p in (where, *where.parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"{option} {path!r}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path!r}: cannot write in {str(existing)!r}")


def check_writable_file(path: str, option: str) -> None:
    """Check that ``path`` names a file this process may create (its missing directories
    with it) or overwrite.

    Raises:
        UsageError: ``path`` is a directory, an ancestor is a file, or the nearest
            existing ancestor is not writable.
    """
    where = Path(path).absolute()
    if where.is_dir():
        raise UsageError(f"{option} {path!r} is a directory, not a file")
    if where.exists():
        if not os.access(where, os.W_OK):
            raise UsageError(f"{option} {path!r}: cannot write there")
        return
    check_writable_directory(os.path.dirname(path) or ".", option)


def parse_nemesis(text: str, machine: type[BoardMachine], target: str) -> tuple[str, ...]:
    """``--nemesis``: the comma-separated nemesis steps to run, ``none`` for none.

    Raises:
        UsageError: an unknown step, or one whose hook the target does not define.
    """
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if names == ("none",):
        return ()
    unknown = [name for name in names if name not in NEMESIS_HOOKS]
    if unknown or not names:
        raise UsageError(
            f"--nemesis takes restart, drop, both (restart,drop) or none; got {text!r}"
        )
    defined = machine.defined_nemesis()
    for name in names:
        if name not in defined:
            raise UsageError(
                f"--nemesis {name}: {target} defines no {NEMESIS_HOOKS[name]}(self, board); "
                "see docs/nemesis.md"
            )
    return names


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
    #: Seconds spent running parallel programs (all workers together).
    parallel_seconds: float = 0.0
    #: In parallel programs, each thread call's (operation, outcome): their coverage.
    concurrent_calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The seed the run started from (drawn when none was given): ``--seed`` repeats it.
    seed: int | None = None
    #: True when Ctrl-C stopped the run; the counts are those reached by then.
    interrupted: bool = False

    @property
    def parallel_programs(self) -> int:
        """Parallel programs run (each runs :data:`RUNS_PER_PROGRAM` times)."""
        return self.parallel_runs // RUNS_PER_PROGRAM

    @property
    def programs_per_second(self) -> float:
        """Parallel programs per second spent on them (each worker's seconds added up)."""
        seconds = self.parallel_seconds
        return self.parallel_runs / RUNS_PER_PROGRAM / seconds if seconds > 0 else 0.0

    @property
    def steps_per_second(self) -> float:
        """Machine steps per second of wall time, all workers together."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


@contextlib.contextmanager
def _ctrl_c_requests_a_stop() -> Iterator[threading.Event]:
    """An event that the first Ctrl-C sets, so that the run stops after the example under
    way (a ``KeyboardInterrupt`` raised at a random point can be swallowed, in a finalizer
    say). The second Ctrl-C interrupts at once, for a board call that hangs. Outside the
    main thread, where no signal handler can be set, the event is never set."""
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


@contextlib.contextmanager
def _interruptible(report: FuzzReport) -> Iterator[None]:
    """Ctrl-C inside the block ends it quietly, with ``report.interrupted`` set."""
    try:
        yield
    except KeyboardInterrupt:
        report.interrupted = True


@contextlib.contextmanager
def _listening(report: FuzzReport, tick: Callable[[], None]) -> Iterator[None]:
    def listener(stats: ExampleStats) -> None:
        if stats.parallel:
            report.parallel_runs += 1
        else:
            report.examples += 1
        report.steps += stats.steps
        report.transitions.update(stats.transitions)
        report.concurrent_calls.update(stats.concurrent_calls)
        tick()

    with on_example_end(listener):
        yield


def _run_batches(
    machine: type[BoardMachine],
    *,
    deadline: float,
    max_examples: int | None,
    seed: int,
    database: ExampleDatabase | None,
    trace_dir: str,
    report: FuzzReport,
    tick: Callable[[], None],
    mode: str = "mixed",
    overrides: Mapping[str, Any] | None = None,
) -> None:
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
                hypothesis_seed(seed + batch_index)(machine)
                batch_index += 1
                started = time.monotonic()
                try:
                    with failures_reported(machine):
                        runner(machine, settings=settings(base, max_examples=batch))
                except KeyboardInterrupt:
                    report.interrupted = True
                    return
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
                    if parallel:
                        report.parallel_seconds += time.monotonic() - started
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
    seed: int,
    database: str | None,
    trace_dir: str,
    updates: Any,
    mode: str,
    overrides: Mapping[str, Any],
    stop: Any,
) -> None:
    """One fuzzing process: runs batches and sends its counts to the parent.

    It starts with SIGINT ignored (the parent's Ctrl-C is not its own): the parent sets
    ``stop`` instead, and the worker ends after the example under way, as Ctrl-C would.
    """
    report = FuzzReport()
    last_sent = 0.0

    def tick() -> None:
        nonlocal last_sent
        if stop.is_set():
            raise KeyboardInterrupt
        now = time.monotonic()
        if now - last_sent > 0.5:
            updates.put(("progress", index, report.examples, report.steps))
            last_sent = now

    try:
        machine = machine_for_target(target)
        probe_board(machine, target, pickles=bool(overrides.get("parallel_processes")))
        _run_batches(
            machine,
            deadline=time.monotonic() + deadline_seconds,
            max_examples=max_examples,
            seed=seed + 1_000_003 * index,
            database=open_database(database),
            trace_dir=trace_dir,
            report=report,
            tick=tick,
            mode=mode,
            overrides=overrides,
        )
    except UsageError as exc:
        updates.put(("usage", index, str(exc), None))
        return
    except Exception as exc:  # a crash in a worker is reported, not swallowed
        updates.put(("crash", index, f"{type(exc).__name__}: {exc}", None))
        return
    updates.put(("done", index, report, None))


def probe_board(machine: type[BoardMachine], target: str, *, pickles: bool) -> None:
    """Make one board and check that it is a board, and (``pickles``) that it pickles as a
    client of its storage, as ``--processes`` needs. Trouble making it is left for the run
    to report as what it is (an infrastructure fault).

    Raises:
        UsageError: ``make_board`` returned something that is no board, or it does not
            pickle.
    """
    probe = machine()
    clock = ManualClock(grid_start(probe.config.resolution))
    tasks = [Task(task_id) for task_id in TASK_IDS]
    try:
        made, _, driver = make_driven(probe.make_board, (tasks, clock), probe.config.call_timeout)
    except Exception:  # the run will meet it again and report it
        return
    try:
        missing = _missing_operations(made)
        if missing:
            raise UsageError(
                f"target {target!r} made a {type(made).__qualname__}, which is no board "
                f"(it has no {', '.join(missing)}): {WHAT_TO_PASS}"
            )
        if pickles:
            try:
                address_of(made)
            except TypeError as exc:
                raise UsageError(str(exc)) from None
    finally:
        with contextlib.suppress(Exception):
            close_driven(probe.close_board, made, driver)


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
    nemesis: str | None = None,
    on_start: Callable[[int], None] | None = None,
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
    board (SPEC 8). ``nemesis`` (``"restart,drop"``, ``"restart"``, ``"none"``; SPEC 9)
    chooses which of the target's nemesis hooks run as rules (``None``: every one it defines).
    ``seed`` repeats a run (one is drawn when it is ``None``; ``report.seed`` says which).
    ``on_start`` is called with the seed once the options have been checked, before
    anything runs. Ctrl-C (``KeyboardInterrupt``) stops the run, every worker with it, and
    returns what it reached with ``report.interrupted`` set.

    Raises:
        UsageError: a bad target, database or argument.
    """
    machine, opened = check_options(target, workers, max_examples, database)
    check_writable_directory(trace_dir, "--trace-dir")
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if parallel:
        mode = "parallel"
    overrides: dict[str, Any] = {}
    if processes:
        if mode == "sequential":
            raise UsageError("--processes runs parallel programs: use it without --mode sequential")
        overrides["parallel_processes"] = True
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
    if nemesis is not None:
        overrides["nemesis"] = parse_nemesis(nemesis, machine, target)
    if clock_skew is not None:
        if not 0 <= clock_skew < 3_600_000:
            raise UsageError(
                f"--clock-skew must be a number of milliseconds >= 0, got {clock_skew}"
            )
        overrides["clock_skew"] = timedelta(milliseconds=clock_skew)
    if workers == 1:  # several workers probe in their own processes, as a board may exit
        probe_board(machine, target, pickles=processes)
    if seed is None:  # every run has a seed, printed, so that any run can be repeated
        seed = random.randrange(2**32)
    if on_start is not None:  # after the options are known good: a mistake stays one line
        on_start(seed)
    started = time.monotonic()
    meter = _Progress(progress, started, budget)
    with _ctrl_c_requests_a_stop() as stop:
        if workers == 1:
            report = FuzzReport()

            def tick() -> None:
                if stop.is_set():  # raised here, between examples, where nothing swallows it
                    raise KeyboardInterrupt
                meter.show(report.examples, report.steps, 0)

            with _interruptible(report):
                _run_batches(
                    machine,
                    deadline=started + budget,
                    max_examples=max_examples,
                    seed=seed,
                    database=opened,
                    trace_dir=trace_dir,
                    report=report,
                    tick=tick,
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
                stop,
            )
    report.seconds = time.monotonic() - started
    report.workers = workers
    report.mode = mode
    report.seed = seed
    report.clock_mode = overrides.get("clock_mode", machine.clock_mode)
    meter.close(report.examples, report.steps, int(report.failure is not None))
    return report


def _fuzz_in_processes(
    target: str,
    budget: float,
    max_examples: int | None,
    seed: int,
    workers: int,
    database: str | None,
    trace_dir: str,
    meter: _Progress,
    mode: str,
    overrides: Mapping[str, Any],
    interrupted: threading.Event,
) -> FuzzReport:
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    stop = context.Event()
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
                stop,
            ),
            daemon=True,
        )
        for i in range(workers)
    ]
    counts = dict.fromkeys(range(workers), (0, 0))
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
                kind, index, first, second = updates.get(timeout=0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    break
                if interrupted_at is not None and time.monotonic() - interrupted_at > 10:
                    break
                continue
            if kind == "progress":
                counts[index] = (first, second)
            elif kind == "usage":  # every worker meets the same mistake: stop them all
                raise UsageError(first)
            elif kind == "crash":
                finished += 1
                total.failure = total.failure or f"worker {index} crashed: {first}"
            else:
                finished += 1
                done: FuzzReport = first
                counts[index] = (done.examples, done.steps)
                total.parallel_runs += done.parallel_runs
                total.parallel_seconds += done.parallel_seconds
                total.transitions.update(done.transitions)
                total.concurrent_calls.update(done.concurrent_calls)
                total.interrupted = total.interrupted or done.interrupted
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
    if finished < workers and total.failure is None and not total.interrupted:
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
