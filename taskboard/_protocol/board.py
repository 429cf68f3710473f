"""A board served by a child process, as the checker sees it: a Board like any other (SPEC 10).

:func:`exec_board` starts the command, says ``hello`` and ``init``, and returns a board whose
optional methods (``renew``, ``fail``) are exactly those the child declared, so the checker
treats it as it would a Python board of that shape. In manual mode, once the clock moved,
every open process of the board (the one that ran ``init`` and its clients) hears
``set_time`` before any of them gets its next request. In a controlled race, when the
command declared ``yield_points`` in ``hello``, every request is a scheduling point, and so
is every ``yield`` a child writes mid-request (:mod:`taskboard._schedule`).
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Sequence
from typing import Any

from taskboard._clock import Clock, ClockMode, ManualClock
from taskboard._contract import ClaimRequest, Task
from taskboard._driver import wrapper_classes
from taskboard._operations import BY_METHOD, BY_OP, OPTIONAL_OPERATIONS, BoardOperation
from taskboard._protocol.child import Child, holding
from taskboard._protocol.codec import (
    ARGUMENT_FIELDS,
    ProtocolError,
    decode_task,
    encode_task,
    encode_time,
    encode_ttl,
)
from taskboard._protocol.spares import ExecStartError, Hello, take_child
from taskboard._schedule import round_trip

__all__ = ["ExecStartError", "Hello", "exec_board", "split_command"]


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


#: The calls that may change the board (every one the model judges), which the checker
#: follows with a ``list``.
_WRITES = frozenset(row.protocol_op for row in BY_OP.values())


class _Processes:
    """The open processes of one board (the one that ran ``init`` and its clients), and the
    time they last heard: in manual mode, before any of them gets a request after the clock
    moved, every one of them hears ``set_time`` (SPEC 10)."""

    def __init__(self, clock: Clock, clock_mode: ClockMode) -> None:
        self.clock = clock
        # From the mode the run is in, not the clock's class: a wall clock may be a
        # ManualClock that sleeps to move (BoardContract's), and its processes must race.
        # In virtual mode the processes keep the checker's time as in manual mode (a Go
        # binary reads time without libc: only set_time reaches it); the server moves too.
        self.manual = clock_mode in ("manual", "virtual")
        self.time_sent = clock.now()
        self.open: list[Child] = []
        # Held while the time goes out, so that no process gets a request before it heard.
        self._lock = threading.Lock()

    def keep_time(self) -> None:
        if not self.manual:
            return
        with holding(self._lock):
            now = self.clock.now()
            if now != self.time_sent:
                self.time_sent = now
                for child in self.open:
                    if child.exit_code is None:  # one that broke was reported already
                        child.tell("set_time", now=encode_time(now))

    def join(self, child: Child, *, connected: bool) -> None:
        """``child`` has answered ``init`` or (``connected``) ``connect``: it hears the time the
        others heard, and every later ``set_time``."""
        self.keep_time()
        with holding(self._lock):
            for other in self.open:  # a list sent ahead would miss the newcomer's writes
                other.settle()
            if connected and self.manual:
                child.request("set_time", now=encode_time(self.time_sent))
            self.open.append(child)

    def alone(self, child: Child) -> bool:
        """Whether ``child`` is the board's only open process, on the manual clock: then no
        write reaches the storage but through its stdin, in order, and a ``list`` sent behind
        a call answers as a ``list`` sent after it would (the board's time stands still)."""
        return self.manual and self.open == [child]

    def leave(self, child: Child) -> None:
        with holding(self._lock):
            if child in self.open:
                self.open.remove(child)


class _ExecBoard:
    """The Board methods over one child process: ``list_tasks`` here, the others made from
    the table of operations (:func:`_request_method`), its optional ones those it declared."""

    def __init__(self, child: Child, hello: Hello, storage: str, processes: _Processes) -> None:
        self.child = child
        self.hello = hello
        self.clock = processes.clock
        self.storage = storage
        self._processes = processes

    def __repr__(self) -> str:
        return f"exec_board({' '.join(self.child.argv)!r}, name={self.hello.name!r})"

    @property
    def clock_mode(self) -> ClockMode:
        """SPEC 7: ``"manual"``, the board's processes hear the checker's time; ``"wall"``,
        they keep their own."""
        return "manual" if self._processes.manual else "wall"

    def _call(self, op: str, **arguments: Any) -> dict[str, Any]:
        if self.child.yield_points:
            # The child marks its points inside a call, so its calls are atomic between
            # them: in a controlled race the calling thread waits here for its turn, and
            # which process's call goes next is drawn. A child that marks none races free.
            round_trip(f"{op} request")
        self._processes.keep_time()
        # The checker reads the board after every call it makes: send the list with the call.
        then = "list" if op in _WRITES and self._processes.alone(self.child) else None
        return self.child.request(op, then=then, **arguments)

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

    def open_client(self) -> Any:
        """Another process of the same command, ``connect``ed to this board's storage."""
        if "connect" not in self.hello.ops:
            return self
        return _start(self.child.argv, self._processes, self.child.timeout, connect=self.storage)

    def restart_storage(self) -> None:
        self._call("restart_storage")

    def drop_connections(self) -> None:
        self._call("drop_connections")

    def close(self) -> None:
        """Close the process (and, for the one that ran ``init``, its storage)."""
        self._processes.leave(self.child)
        self.child.close()


def _request_method(row: BoardOperation) -> Any:
    """The Board method of ``row`` over the protocol: one request whose fields are its
    arguments (a ``ClaimRequest`` as its ``ttl``), answered by the task when it returns one."""
    op = row.protocol_op
    fields = tuple(ARGUMENT_FIELDS[argument] for argument in row.arguments)
    returns_task = row.returns == "task"

    def method(self: _ExecBoard, *args: Any) -> Task | None:
        if len(args) != len(fields):
            raise TypeError(f"{row.method}() takes {len(fields)} arguments, got {len(args)}")
        arguments = {
            name: encode_ttl(value.ttl) if isinstance(value, ClaimRequest) else value
            for name, value in zip(fields, args, strict=True)
        }
        answer = self._call(op, **arguments)
        return self._task(answer, op) if returns_task else None

    method.__name__ = method.__qualname__ = row.method
    return method


def _method(name: str) -> Any:
    # list_tasks reads its own kind of answer; every other operation is a request.
    return _ExecBoard.list_tasks if name == "list_tasks" else _request_method(BY_METHOD[name])


_SHAPES = wrapper_classes("ExecBoard", _ExecBoard, _method)


def _start(
    argv: Sequence[str],
    processes: _Processes,
    timeout: float,
    *,
    tasks: Sequence[Task] = (),
    connect: str | None = None,
) -> Any:
    child, hello = take_child(argv, timeout)
    try:
        # SPEC 10: init and connect both say the clock mode, so that no process guesses it.
        clock: dict[str, Any] = {
            "clock": "manual" if processes.manual else "wall",
            "now": encode_time(processes.time_sent),
        }
        if connect is not None:
            child.request("connect", storage=connect, **clock)
            storage = connect
        else:
            answer = child.request("init", tasks=[encode_task(t) for t in tasks], **clock)
            named = answer.get("storage")
            if not isinstance(named, str):
                raise ProtocolError("init", f"'storage' is a string, got {named!r}")
            storage = named
        processes.join(child, connected=connect is not None)
        declared = [row.name for row in OPTIONAL_OPERATIONS if row.protocol_op in hello.ops]
        return _SHAPES.having(declared)(child, hello, storage, processes)
    except BaseException:
        child.close(polite=False)
        raise


def exec_board(
    command: str | Sequence[str],
    tasks: Sequence[Task],
    clock: Clock,
    *,
    timeout: float = 10.0,
    clock_mode: ClockMode | None = None,
) -> Any:
    """A fresh board holding ``tasks``, served by a new process of ``command`` (SPEC 10).

    ``clock_mode`` is the run's SPEC 7 mode: ``"manual"``, every process hears ``set_time``
    from ``clock`` once it moved, before its next request; ``"wall"``, each keeps its own
    time, and nothing holds their calls back. ``None``: ``"manual"`` for a
    :class:`~taskboard.ManualClock`, else ``"wall"``.

    Raises:
        ExecStartError: the command does not start, or does not answer ``hello``.
        ProtocolError: ``init`` got a malformed answer (an infrastructure fault).
    """
    if clock_mode is None:
        clock_mode = "manual" if isinstance(clock, ManualClock) else "wall"
    return _start(split_command(command), _Processes(clock, clock_mode), timeout, tasks=tasks)
