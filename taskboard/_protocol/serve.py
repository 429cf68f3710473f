"""Serve a Python board over the board protocol (SPEC 10): the reference child.

``serve(make_board)`` answers requests on stdin until ``close`` or end of input. It is how a
Python board is checked through ``--exec`` (the protocol's own tests use it), and a worked
example of the child side for a board in any other language.
"""

from __future__ import annotations

import collections
import functools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import IO, Any

from taskboard._clock import Clock, SystemClock
from taskboard._contract import ClaimRequest, Task
from taskboard._errors import BlockedError, LeaseLostError, NotFoundError, TakenError, TerminalError
from taskboard._operations import BY_OP, OPTIONAL_OPERATIONS, Argument, operations_of
from taskboard._protocol.codec import (
    ARGUMENT_FIELDS,
    PROTOCOL_VERSION,
    decode_task,
    decode_time,
    encode_task,
)
from taskboard._schedule import forwarding_yield_points

__all__ = ["serve"]

MakeBoard = Callable[[Sequence[Task], Clock], Any]
Connect = Callable[[str, Clock], Any]

_CODES: tuple[tuple[type[Exception], str], ...] = (
    (NotFoundError, "not_found"),
    (TakenError, "taken"),
    (BlockedError, "blocked"),
    (TerminalError, "terminal"),
    (LeaseLostError, "lease_lost"),
    (ValueError, "invalid"),
)


class _HeardClock:
    """The clock of a served board: the system clock until the checker says what time it is
    (``init`` in manual mode, ``set_time``), then the time it last said. A client process
    after ``connect`` hears ``set_time`` before its first call in manual mode, and nothing
    in wall mode (see docs/protocol.md)."""

    def __init__(self) -> None:
        self._system = SystemClock()
        self._heard: datetime | None = None

    def now(self) -> datetime:
        return self._system.now() if self._heard is None else self._heard

    def hear(self, when: datetime) -> None:
        self._heard = when


class _Server:
    def __init__(
        self,
        make_board: MakeBoard,
        shape: type | None,
        connect: Connect | None,
        storage_of: Callable[[Any], str],
    ) -> None:
        self.make_board = make_board
        self.shape = shape
        self.connect = connect
        self.storage_of = storage_of
        self.board: Any = None
        self.clock = _HeardClock()
        self.yield_points = False

    def ops(self) -> list[str]:
        has = operations_of(self.shape)
        declared = [row.protocol_op for row in OPTIONAL_OPERATIONS if row.name in has]
        return declared + (["connect"] if self.connect is not None else [])

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "hello":
            hello: dict[str, Any] = {
                "protocol": PROTOCOL_VERSION,
                "name": "python",
                "ops": self.ops(),
                "durable": True,
                # Its yield_point calls reach the checker (see _Lines), and its calls are
                # atomic between them: a controlled race schedules its requests.
                "yield_points": self.yield_points,
            }
            # SPEC 3.4, as BoardMachine.for_board reads it from a board factory.
            policy = getattr(self.shape or self.make_board, "expired_lease_policy", None)
            if policy is not None:
                hello["expired_lease_policy"] = policy
            return hello
        if op == "init":
            if request["clock"] == "manual":
                self._hear(request["now"])
            self.board = self.make_board([decode_task(t) for t in request["tasks"]], self.clock)
            return {"storage": self.storage_of(self.board)}
        if op == "connect":
            if self.connect is None:
                raise NotImplementedError(op)
            if request.get("clock") == "manual":
                self._hear(request.get("now"))
            self.board = self.connect(request["storage"], self.clock)
            return {}
        if op == "set_time":
            self._hear(request["now"])
            return {}
        if op == "close":
            return {}
        if op == "list":
            return {"tasks": [encode_task(t) for t in self.board.list_tasks()]}
        row = _OPERATIONS.get(op)
        if row is None:
            raise NotImplementedError(op)
        arguments = [_argument(request, argument) for argument in row.arguments]
        result = getattr(self.board, row.method)(*arguments)
        return {"task": encode_task(result)} if row.returns == "task" else {}

    def _hear(self, now: object) -> None:
        when = decode_time(now)
        if when is not None:
            self.clock.hear(when)


#: The board operations a request may ask for, by their protocol op (``list`` is answered
#: above them).
_OPERATIONS = {row.protocol_op: row for row in BY_OP.values()}


def _argument(request: dict[str, Any], argument: Argument) -> Any:
    """The value of ``argument`` in ``request``: a ``ClaimRequest`` of its ``ttl`` (0 when
    absent) for the request."""
    if argument == "request":
        return ClaimRequest(timedelta(microseconds=request.get("ttl", 0)))
    return request[ARGUMENT_FIELDS[argument]]


class _InputEnded(Exception):
    """The checker's input ended while the board waited at a point for its ``go``."""


class _Lines:
    """The request lines on stdin, and the board's stops at its points mid-request: a stop
    writes ``{"id": N, "yield": label}`` and reads on until ``go`` for that id; the requests
    read meanwhile (a ``list`` written behind the call) are served after it."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes]) -> None:
        self._reader = iter(reader)
        self._writer = writer
        self._pending: collections.deque[bytes] = collections.deque()
        #: The checker's ``hello`` offered to take yields; without it a point returns at once.
        self.offered = False

    def __iter__(self) -> Iterator[bytes]:
        while True:
            if self._pending:
                yield self._pending.popleft()
                continue
            line = next(self._reader, None)
            if line is None:
                return
            yield line

    def stop(self, request_id: int, label: str) -> None:
        """The board is at a point of its own: go on when the checker says so.

        Raises:
            _InputEnded: the input ended first (the checker is gone).
        """
        if not self.offered:
            return
        stop = {"id": request_id, "yield": label}
        self._writer.write(json.dumps(stop).encode() + b"\n")
        self._writer.flush()
        for line in self._reader:
            request = json.loads(line)
            if request.get("op") == "go" and request.get("id") == request_id:
                return
            self._pending.append(line)
        raise _InputEnded


def serve(
    make_board: MakeBoard,
    *,
    shape: type | None = None,
    connect: Connect | None = None,
    storage_of: Callable[[Any], str] = lambda board: "",
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    yield_points: bool = False,
) -> None:
    """Answer board-protocol requests for boards ``make_board(tasks, clock)`` makes.

    ``shape`` is the board class whose optional ``renew`` and ``fail`` the server declares
    (by default ``make_board`` itself, when it is a class). ``connect(storage, clock)`` opens
    another client of a storage ``storage_of(board)`` named; without it the server declares
    no ``connect``. A contract error becomes its
    code; any other exception is left to end the process, as a crash would.

    ``yield_points``: the board marks with :func:`taskboard.races.yield_point` every place in
    a call where another process's call may come in (a call is atomic between its points).
    In a controlled race each point then stops the process (a ``yield`` line) until the
    checker's ``go`` (docs/protocol.md), and the processes' calls run one at a time in an
    order the checker draws; outside one the ``go`` comes at once. Without it, the board's
    points return at once and its processes race as the operating system runs them.
    """
    writer = stdout if stdout is not None else sys.stdout.buffer
    if shape is None and isinstance(make_board, type):
        shape = make_board
    server = _Server(make_board, shape, connect, storage_of)
    server.yield_points = yield_points
    lines = _Lines(stdin if stdin is not None else sys.stdin.buffer, writer)
    for line in lines:
        request = json.loads(line)
        answer: dict[str, Any] = {"id": request["id"]}
        if request["op"] == "hello":
            lines.offered = yield_points and request.get("yield_points") is True
        try:
            with forwarding_yield_points(functools.partial(lines.stop, request["id"])):
                answer.update(ok=True, **server.handle(request))
        except _InputEnded:
            return
        except NotImplementedError as exc:
            answer.update(ok=False, error="unsupported", message=str(exc))
        except Exception as exc:
            code = next((c for kind, c in _CODES if isinstance(exc, kind)), None)
            if code is None:
                raise
            answer.update(ok=False, error=code, message=str(exc))
        writer.write(json.dumps(answer).encode() + b"\n")
        writer.flush()
        if request["op"] == "close":
            close = getattr(server.board, "close", None)
            if callable(close):
                close()
            return
