"""What ``taskboard fuzz`` and ``replay`` check: a target named ``module:Name``, as a machine."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import unittest
from dataclasses import dataclass
from typing import Any

from hypothesis import settings

from taskboard._clock import ManualClock, SystemClock
from taskboard._contract import Task
from taskboard._driver import close_driven, make_driven
from taskboard._operations import CORE_METHODS
from taskboard._protocol.board import ExecStartError
from taskboard._race import address_of
from taskboard.stateful._command import EXEC_PREFIX
from taskboard.stateful._hypothesis import applied_settings, key_database_by
from taskboard.stateful._machine import BoardMachine
from taskboard.strategies import TASK_IDS, grid_start

__all__ = [
    "DEFAULT_TARGET",
    "WHAT_TO_PASS",
    "Target",
    "UsageError",
    "exec_target",
    "machine_for_target",
    "machine_of",
    "probe_board",
    "resolve_target",
]

#: What ``taskboard fuzz`` checks when given no target: the bundled SQLite reference host.
DEFAULT_TARGET = "taskboard.hosts.sqlite:SQLiteBoard"

#: What a target may be, for usage errors.
WHAT_TO_PASS = (
    "pass module:Name of a board class or factory (tasks, clock) -> Board, a BoardMachine "
    "subclass, a BoardContract subclass, or a machine's TestCase"
)


class UsageError(Exception):
    """A mistake in what the user asked for (a bad target, budget or database): exit code 2."""


@dataclass(frozen=True)
class Target:
    """A target as a run checks it: its name, its machine, and the Hypothesis settings the
    machine was given (``@settings`` on a machine class, ``machine_settings`` on a contract)."""

    name: str
    machine: type[BoardMachine]
    settings: settings | None = None

    @classmethod
    def resolve(cls, name: str) -> Target:
        """The target ``name`` (``module:Name``) names.

        Raises:
            UsageError: see :func:`machine_for_target`.
        """
        from taskboard.boardtest import BoardContract  # it imports pytest

        if name.startswith(EXEC_PREFIX):
            return cls(name, exec_target(name))
        found = resolve_target(name)
        machine = _machine_for(found, name)
        chosen = applied_settings(machine)
        if isinstance(found, type) and issubclass(found, BoardContract):
            chosen = found.machine_settings
        return cls(name, machine, chosen)


def exec_target(target: str) -> type[BoardMachine]:
    """The machine of ``exec:COMMAND``: the board a child process of COMMAND serves (SPEC 10).

    Raises:
        UsageError: the command does not split, start, or answer ``hello`` as SPEC 10 says.
    """
    try:
        return BoardMachine.for_command(target.removeprefix(EXEC_PREFIX))
    except ExecStartError as exc:
        raise UsageError(str(exc)) from None


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

    A factory's own settings (``clock_resolution``, ``clock_mode``, ``expired_lease_policy``,
    ...: those :meth:`BoardMachine.for_board` takes), when it has them, are used; a board
    with a ``close()`` method is closed after each example.

    Raises:
        UsageError: the target cannot be found, is another test class, or is neither a
            machine nor callable.
    """
    return _machine_for(resolve_target(target), target)


def _machine_for(found: Any, target: str) -> type[BoardMachine]:
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
    key_database_by(machine, target.encode())
    return machine


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
