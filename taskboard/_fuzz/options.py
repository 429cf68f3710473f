"""What a fuzzing run was asked to do, as one frozen value, checked before anything runs."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from taskboard._clock import CLOCK_MODES
from taskboard._fuzz.fleet import check_campaign, redis_client
from taskboard._fuzz.serving import process_server
from taskboard._fuzz.targets import Target, UsageError
from taskboard._profiles import NIGHTLY
from taskboard.model._model import EXPIRED_LEASE_POLICIES
from taskboard.stateful._command import EXEC_PREFIX
from taskboard.stateful._config import COARSE_STEP_COUNT, MachineConfig
from taskboard.stateful._hypothesis import changed_settings
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._machine import BoardMachine
from taskboard.stateful._settings import (
    MOST_PCT_DEPTH,
    RACE_EXPLORATION,
    SETTINGS,
    FuzzFlag,
    nemesis_names,
)
from taskboard.stateful._trace import NEMESIS_HOOKS

__all__ = [
    "IGNORED_SETTINGS",
    "MODES",
    "FuzzOptions",
    "check_writable_directory",
    "check_writable_file",
    "open_database",
    "parse_budget",
    "parse_nemesis",
    "write_atomically",
]

#: How ``fuzz`` mixes sequential and parallel programs.
MODES = ("mixed", "sequential", "parallel")
#: The settings of a machine that fuzzing does not take from it: the budget decides how many
#: examples run, ``--database`` where they are kept, and the seed what they are.
IGNORED_SETTINGS = ("max_examples", "database", "derandomize")
#: The options that set a machine's settings, by setting.
_FLAGS: dict[str, FuzzFlag] = {s.name: s.fuzz for s in SETTINGS if s.fuzz is not None}


@dataclass(frozen=True)
class FuzzOptions:
    """How to fuzz: every option of ``taskboard fuzz``, as :func:`~taskboard._fuzz.fuzz` takes
    them. :meth:`checked` says what is wrong with them before anything runs."""

    #: Seconds to fuzz for.
    budget: float = 60.0
    #: Seconds Hypothesis may shrink a failure before it reports the smallest so far.
    shrink_budget: float = 60.0
    #: Stop after this many examples (sequential examples and parallel program runs).
    max_examples: int | None = None
    #: Repeat a run; one is drawn when ``None`` (the report says which).
    seed: int | None = None
    #: Processes that fuzz side by side.
    workers: int = 1
    #: The example database: a directory or ``redis://`` URL; ``None``: Hypothesis's default.
    database: str | None = None
    trace_dir: str = "taskboard-traces"
    #: ``"mixed"``, ``"sequential"`` or ``"parallel"`` (see :data:`MODES`).
    mode: str = "mixed"
    #: Seconds a board call may take (0: no limit); ``None`` keeps the machine's.
    call_timeout: float | None = None
    #: Fuzz through infrastructure faults (``False`` keeps the machine's setting).
    tolerate_faults: bool = False
    #: SPEC 7: ``"manual"`` or ``"wall"``; ``None`` keeps the machine's ``clock_mode``.
    clock: str | None = None
    #: In wall mode, the board's clock skew in milliseconds; ``None`` keeps the machine's.
    clock_skew: float | None = None
    #: In wall mode, how far apart the clients' clocks are, in milliseconds; ``None`` keeps the
    #: machine's ``client_clock_skew``.
    client_clock_skew: float | None = None
    #: The shortest lease the store honours, in milliseconds; ``None`` keeps the machine's.
    shortest_lease: float | None = None
    #: SPEC 3.4: ``"either"``, ``"accept"`` or ``"reject"``; ``None`` keeps the machine's
    #: ``expired_lease_policy`` (for ``--exec``, what the command's ``hello`` declared).
    expired_lease_policy: str | None = None
    #: What leases the store can hold (``--lease-limits``, see ``LeaseLimits.parse``);
    #: ``None`` keeps the machine's.
    lease_limits: str | None = None
    #: SPEC 8: each thread of a parallel program in an OS process of its own.
    processes: bool = False
    #: ``"os"`` or ``"controlled"`` (docs/races.md); ``None`` keeps the machine's.
    race_scheduling: str | None = None
    #: ``"random"`` or ``"pct"`` (docs/races.md); ``None`` keeps the machine's
    #: ``race_exploration``.
    race_exploration: str | None = None
    #: PCT's depth, 1 to 10; ``None`` keeps the machine's ``pct_depth``.
    pct_depth: int | None = None
    #: SPEC 9: ``"restart,drop"``, ``"restart"``, ``"drop"`` or ``"none"``; ``None``: every
    #: hook the target defines.
    nemesis: str | None = None
    #: The campaign this run's workers publish to, in the ``redis://`` ``database``.
    campaign: str | None = None
    #: In virtual mode, the server each process starts for the board (``"redis"`` or
    #: ``"postgres"``; see :mod:`taskboard._fuzz.serving`): the machine's ``server``;
    #: ``None`` keeps the machine's.
    server: str | None = None

    def checked(self, target: Target) -> FuzzOptions:
        """These options, checked against ``target``'s machine.

        Raises:
            UsageError: an option out of range, one that does not apply (``--clock-skew``
                on the manual clock, ``--processes`` with ``--mode sequential``), or a
                nemesis step the target has no hook for.
        """
        if self.workers < 1:
            raise UsageError(f"--workers must be at least 1, got {self.workers}")
        if self.max_examples is not None and self.max_examples < 1:
            raise UsageError(f"--max-examples must be at least 1, got {self.max_examples}")
        if not self.budget > 0 or math.isinf(self.budget):
            raise UsageError(f"the budget must be a positive number of seconds, got {self.budget}")
        if not self.shrink_budget > 0 or math.isinf(self.shrink_budget):
            raise UsageError(
                f"--shrink-budget must be a positive number of seconds, got {self.shrink_budget}"
            )
        if self.mode not in MODES:
            raise UsageError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.processes and self.mode == "sequential":
            raise UsageError("--processes runs parallel programs: use it without --mode sequential")
        if self.call_timeout is not None and (
            not self.call_timeout >= 0 or math.isinf(self.call_timeout)
        ):
            raise UsageError(
                f"--call-timeout must be a number of seconds >= 0, got {self.call_timeout}"
            )
        if (
            self.expired_lease_policy is not None
            and self.expired_lease_policy not in EXPIRED_LEASE_POLICIES
        ):
            raise UsageError(
                "--expired-lease-policy must be 'either', 'accept' or 'reject', got "
                f"{self.expired_lease_policy!r}"
            )
        self._check_races(target)
        if self.clock is not None and self.clock not in CLOCK_MODES:
            raise UsageError(f"--clock must be 'manual', 'virtual' or 'wall', got {self.clock!r}")
        mode = self.clock or target.machine.clock_mode
        wall = mode == "wall"
        if self.server is not None:
            process_server(self.server)  # a name it does not know is refused here
            if mode != "virtual":
                raise UsageError(
                    f"--server starts a server on the checker's clock: it needs --clock "
                    f"virtual (the clock is {mode!r} here)"
                )
        if mode == "virtual":
            check_virtual(target, self.server)
        for flag in _FLAGS.values():
            value = getattr(self, flag.field)
            if value is None or not flag.in_milliseconds:
                continue
            if not 0 <= value < 3_600_000:
                raise UsageError(f"{flag.flag} must be a number of milliseconds >= 0, got {value}")
            if flag.wall_only and not wall:
                raise UsageError(
                    f"{flag.flag} applies to the wall clock only: {flag.wall_only} "
                    f"(add --clock wall, or leave {flag.flag} out)"
                )
        if self.client_clock_skew and target.name.startswith(EXEC_PREFIX):
            raise UsageError(
                "--client-clock-skew shifts time.time() in this process; a board served by "
                "--exec reads the clock of its own process"
            )
        if self.nemesis is not None:
            parse_nemesis(self.nemesis, target.machine, target.name)
        if self.lease_limits is not None:
            try:
                LeaseLimits.parse(self.lease_limits)
            except ValueError as exc:
                raise UsageError(f"--lease-limits: {exc}") from None
        if self.campaign is not None:
            check_campaign(self.campaign, self.database)
        check_writable_directory(self.trace_dir, "--trace-dir")
        return self

    def _check_races(self, target: Target) -> None:
        """Raises UsageError for a ``--race-exploration`` or ``--pct-depth`` out of range, or
        a depth without PCT (the option's nor the machine's)."""
        if self.race_exploration is not None and self.race_exploration not in RACE_EXPLORATION:
            raise UsageError(
                f"--race-exploration must be 'random' or 'pct', got {self.race_exploration!r}"
            )
        if self.pct_depth is None:
            return
        if not 1 <= self.pct_depth <= MOST_PCT_DEPTH:
            raise UsageError(
                f"--pct-depth must be a whole number from 1 to {MOST_PCT_DEPTH}, "
                f"got {self.pct_depth}"
            )
        exploration = self.race_exploration or target.machine.race_exploration
        if exploration != "pct":
            raise UsageError(
                f"--pct-depth applies to PCT only: the race exploration is {exploration!r} "
                "(add --race-exploration pct, or leave --pct-depth out)"
            )

    def machine_attributes(self, target: Target) -> dict[str, Any]:
        """The class attributes these options set on ``target``'s machine for the run: each
        setting's option (:data:`~taskboard.stateful._settings.SETTINGS`) that is not left
        at ``None`` or ``False``.

        Raises:
            UsageError: ``--nemesis`` names a step ``target`` has no hook for.
        """
        if self.nemesis is not None:
            parse_nemesis(self.nemesis, target.machine, target.name)
        attributes: dict[str, Any] = {}
        for name, flag in _FLAGS.items():
            value = getattr(self, flag.field)
            if value is not None and value is not False:
                attributes[name] = flag.convert(value)
        if self.server is not None:  # an object, not a setting: see taskboard._fuzz.serving
            attributes["server"] = process_server(self.server)
        return attributes

    def machine(self, target: Target) -> type[BoardMachine]:
        """``target``'s machine as the run checks it: a subclass with these options set, which
        Hypothesis files under the same key in its example database as the machine itself.

        Raises:
            UsageError: the options make a machine that is not valid.
        """
        base = target.machine
        attributes = {
            **self.machine_attributes(target),
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        }
        machine = type(base.__name__, (base,), attributes)
        try:
            MachineConfig.of(machine)
        except TypeError as exc:
            raise UsageError(f"target {target.name!r}: {exc}") from None
        return machine

    def settings(self, target: Target, database: ExampleDatabase | None) -> settings:
        """The Hypothesis settings of the run: the nightly profile (at most
        :data:`COARSE_STEP_COUNT` steps an example on a coarse wall-clock unit), then every
        setting the machine was given but :data:`IGNORED_SETTINGS`, then ``database``."""
        base = settings(settings.get_profile(NIGHTLY), database=database)
        chosen: dict[str, Any] = {}
        if MachineConfig.of(self.machine(target)).coarse:
            chosen["stateful_step_count"] = min(base.stateful_step_count, COARSE_STEP_COUNT)
        return settings(base, **{**chosen, **machine_settings(target)})

    def replace(self, **changes: Any) -> FuzzOptions:
        """These options with ``changes``."""
        return dataclasses.replace(self, **changes)


def machine_settings(target: Target) -> dict[str, Any]:
    """The settings ``target``'s machine was given that differ from Hypothesis's defaults,
    but :data:`IGNORED_SETTINGS`: what fuzzing takes from the machine."""
    if target.settings is None:
        return {}
    changed = changed_settings(target.settings)
    return {name: value for name, value in changed.items() if name not in IGNORED_SETTINGS}


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_budget(text: str) -> float:
    """Seconds in a budget such as ``90s``, ``15m``, ``8h``, ``1h30m`` or a bare ``120``.

    Raises:
        UsageError: the text is not such a duration, or is not positive.
    """
    cleaned = text.strip().lower()
    if re.fullmatch(r"-?\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        negative = cleaned.startswith("-")
        body = cleaned.removeprefix("-")
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", body)
        if not parts or "".join(n + u for n, u in parts) != body:
            raise UsageError(f"budget {text!r} is not a duration; use e.g. 90s, 15m, 8h or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts) * (-1 if negative else 1)
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
        client = redis_client(spec, "the redis database")
        from hypothesis.extra.redis import RedisExampleDatabase

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


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, then :func:`os.replace`:
    a reader (a CI job, a browser reloading) sees the old file or the new one, never half
    of one. Missing directories on the path are created.

    Raises:
        OSError: the file could not be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # os.open, not tempfile: the file gets the umask's permissions, as any output does.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def parse_nemesis(text: str, machine: type[BoardMachine], target: str) -> tuple[str, ...]:
    """``--nemesis``: the comma-separated nemesis steps to run, ``none`` for none.

    Raises:
        UsageError: an unknown step, or one whose hook the target does not define.
    """
    names = nemesis_names(text)
    unknown = [name for name in names if name not in NEMESIS_HOOKS]
    if unknown or not text.replace(",", "").strip():
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


def check_virtual(target: Target, server: str | None = None) -> None:
    """Refuse ``--clock virtual`` where no server follows the machine's clock: ``server``
    (``--server``) names one, or the machine does.

    Raises:
        UsageError: ``target`` is an ``--exec`` board and no ``--server`` is named (its
            processes keep their own time on ``set_time``; only a server started here
            follows the clock), or neither ``--server`` nor its machine names a ``server``.
    """
    if target.name.startswith(EXEC_PREFIX) and server is None:
        raise UsageError(
            "--clock virtual on an --exec board needs --server redis|postgres: the board's "
            "processes keep their own time on set_time, as in manual mode, and the server "
            "started for them (its URL in TASKBOARD_SERVER_URL) runs on the checker's clock; "
            "without a server, use --clock manual"
        )
    if server is None and getattr(target.machine, "server", None) is None:
        raise UsageError(
            f"--clock virtual needs a server whose clock it moves: --server redis|postgres, "
            f"or a machine that names one (server = taskboard.servers.Redis() on the class, or "
            f"taskboard.servers.NoServer() for a library on this process's clock); "
            f"{target.name} names none. See docs/wall-clock.md"
        )
