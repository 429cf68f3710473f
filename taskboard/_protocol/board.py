"""A board served by a child process, as the checker sees it: a Board like any other (SPEC 10).

:func:`exec_board` starts the command, says ``hello`` and ``init``, and returns a board whose
optional methods (``renew``, ``fail``) are exactly those the child declared, so the checker
treats it as it would a Python board of that shape. In manual mode a process is sent
``set_time`` before its next request whenever the clock moved since it last heard it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from taskboard._clock import Clock, ManualClock
from taskboard._contract import ClaimRequest, Task
from taskboard._driver import shaped, wrapper_classes
from taskboard._protocol.child import Child
from taskboard._protocol.codec import (
    PROTOCOL_VERSION,
    ProtocolError,
    decode_task,
    encode_task,
    encode_time,
    encode_ttl,
)

__all__ = ["ExecStartError", "Hello", "exec_board", "split_command", "start_child"]

#: The optional ops a child may declare in ``hello``.
OPTIONAL_OPS = frozenset({"renew", "fail", "connect", "restart_storage", "drop_connections"})


class ExecStartError(Exception):
    """The board command could not be started, or did not answer ``hello`` as SPEC 10 says: a
    usage error (``taskboard fuzz`` exits 2), shown with the child's stderr."""


def split_command(command: str | Sequence[str]) -> tuple[str, ...]:
    """``command`` as an argument vector, a string split as a shell would.

    Raises:
        ExecStartError: the string does not split (an open quote), or it is empty.
    """
    if isinstance(command, str):
        try:
            argv = tuple(shlex.split(command))
        except ValueError as exc:
            raise ExecStartError(f"cannot split the board command {command!r}: {exc}") from None
    else:
        argv = tuple(command)
    if not argv:
        raise ExecStartError("the board command is empty")
    return argv


class Hello:
    """What a child said of itself in ``hello``: its name, optional ops and durability."""

    def __init__(self, answer: dict[str, Any]) -> None:
        """Raises:
        ProtocolError: a field is missing or of the wrong type, or the version differs."""
        if answer.get("protocol") != PROTOCOL_VERSION:
            raise ProtocolError("hello", f"protocol {answer.get('protocol')!r}, not 1")
        ops, name, durable = answer.get("ops"), answer.get("name"), answer.get("durable")
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise ProtocolError("hello", f"'ops' is a list of strings, got {ops!r}")
        unknown = sorted(set(ops) - OPTIONAL_OPS)
        if unknown:
            raise ProtocolError("hello", f"unknown ops {unknown}; known: {sorted(OPTIONAL_OPS)}")
        if not isinstance(name, str) or not isinstance(durable, bool):
            raise ProtocolError("hello", "'name' is a string and 'durable' true or false")
        self.name = name
        self.ops = frozenset(ops)
        self.durable = durable


class _ExecBoard:
    """The Board methods over one child process (its optional ones added by shape)."""

    def __init__(
        self, child: Child, hello: Hello, clock: Clock, storage: str, time_sent: datetime | None
    ) -> None:
        self.child = child
        self.hello = hello
        self.clock = clock
        self.storage = storage
        self._manual = isinstance(clock, ManualClock)
        #: The time the process last heard (``init``'s ``now``; ``None`` after ``connect``).
        self._time_sent = time_sent

    def __repr__(self) -> str:
        return f"exec_board({' '.join(self.child.argv)!r}, name={self.hello.name!r})"

    def _call(self, op: str, **arguments: Any) -> dict[str, Any]:
        if self._manual:
            now = self.clock.now()
            if now != self._time_sent:
                self.child.request("set_time", now=encode_time(now))
                self._time_sent = now
        return self.child.request(op, **arguments)

    def _task(self, answer: dict[str, Any], op: str) -> Task:
        try:
            return decode_task(answer.get("task"))
        except (TypeError, ValueError) as exc:
            raise ProtocolError(op, f"its task: {exc}", repr(answer)) from None

    def list_tasks(self) -> list[Task]:
        answer = self._call("list")
        tasks = answer.get("tasks")
        if not isinstance(tasks, list):
            raise ProtocolError("list", "'tasks' is a list", repr(answer))
        try:
            return [decode_task(t) for t in tasks]
        except (TypeError, ValueError) as exc:
            raise ProtocolError("list", f"a task: {exc}", repr(answer)) from None

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        answer = self._call("claim", task=task_id, agent=agent, ttl=encode_ttl(request.ttl))
        return self._task(answer, "claim")

    def release(self, task_id: str, token: str) -> None:
        self._call("release", task=task_id, token=token)

    def complete(self, task_id: str, token: str) -> None:
        self._call("complete", task=task_id, token=token)

    # Underscored so that only the shaped subclasses (those of a child that declared them)
    # expose renew and fail.
    def _renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        answer = self._call("renew", task=task_id, token=token, ttl=encode_ttl(request.ttl))
        return self._task(answer, "renew")

    def _fail(self, task_id: str, token: str) -> None:
        self._call("fail", task=task_id, token=token)

    def open_client(self) -> Any:
        """Another process of the same command, ``connect``ed to this board's storage."""
        if "connect" not in self.hello.ops:
            return self
        return _start(self.child.argv, self.clock, self.child.timeout, connect=self.storage)

    def restart_storage(self) -> None:
        self._call("restart_storage")

    def drop_connections(self) -> None:
        self._call("drop_connections")

    def close(self) -> None:
        """Close the process (and, for the one that ran ``init``, its storage)."""
        self.child.close()


def _method(name: str) -> Any:
    if name in ("renew", "fail"):
        return getattr(_ExecBoard, f"_{name}")
    return getattr(_ExecBoard, name)


_SHAPES = wrapper_classes("ExecBoard", _ExecBoard, _method)


class _Declared:
    """Stands for a board with exactly the optional methods a child declared."""

    def __init__(self, ops: frozenset[str]) -> None:
        for op in ("renew", "fail"):
            if op in ops:
                setattr(self, op, lambda *args: None)


def start_child(argv: Sequence[str], timeout: float) -> tuple[Child, Hello]:
    """Start ``argv`` and hear its ``hello``.

    Raises:
        ExecStartError: it does not start, or does not answer ``hello`` as SPEC 10 says (the
            process is ended, and the error shows its last lines of stderr).
    """
    try:
        child = Child(argv, timeout=timeout)
    except OSError as exc:
        raise ExecStartError(f"cannot start the board command {' '.join(argv)!r}: {exc}") from None
    try:
        return child, Hello(child.request("hello", protocol=PROTOCOL_VERSION))
    except Exception as exc:  # whatever it did, the command is unusable
        child.close(polite=False)
        reason = exc.reason if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"
        raise ExecStartError(
            f"the board command {' '.join(argv)!r} did not answer hello as SPEC 10 says "
            f"({reason})\nits last lines of stderr:\n{child.stderr_tail or '(none)'}"
        ) from None


def _start(
    argv: Sequence[str],
    clock: Clock,
    timeout: float,
    *,
    tasks: Sequence[Task] = (),
    connect: str | None = None,
) -> Any:
    child, hello = start_child(argv, timeout)
    try:
        if connect is not None:
            child.request("connect", storage=connect)
            storage, time_sent = connect, None
        else:
            time_sent = clock.now()
            answer = child.request(
                "init",
                tasks=[encode_task(t) for t in tasks],
                clock="manual" if isinstance(clock, ManualClock) else "wall",
                now=encode_time(time_sent),
            )
            named = answer.get("storage")
            if not isinstance(named, str):
                raise ProtocolError("init", f"'storage' is a string, got {named!r}")
            storage = named
        return shaped(_Declared(hello.ops), _SHAPES)(child, hello, clock, storage, time_sent)
    except BaseException:
        child.close(polite=False)
        raise


def exec_board(
    command: str | Sequence[str], tasks: Sequence[Task], clock: Clock, *, timeout: float = 10.0
) -> Any:
    """A fresh board holding ``tasks``, served by a new process of ``command`` (SPEC 10).

    ``clock`` is a :class:`~taskboard.ManualClock` (manual mode: the process hears
    ``set_time`` when it moves) or the wall clock (the process keeps its own time).

    Raises:
        ExecStartError: the command does not start, or does not answer ``hello``.
        ProtocolError: ``init`` got a malformed answer (an infrastructure fault).
    """
    return _start(split_command(command), clock, timeout, tasks=tasks)
