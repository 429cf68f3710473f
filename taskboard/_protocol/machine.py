"""A BoardMachine for a board command (SPEC 10): what ``taskboard fuzz --exec`` checks.

The command is started once to hear its ``hello``; the machine then starts a process per
board (``init``), one per client (``connect``) when it declared ``connect``, and runs the
nemesis steps it declared. Its ``durable`` is the machine's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskboard._clock import Clock
from taskboard._contract import Task
from taskboard._protocol.board import Hello, exec_board, split_command, start_child
from taskboard.stateful._hypothesis import key_database_by
from taskboard.stateful._machine import BoardMachine

__all__ = ["EXEC_PREFIX", "exec_machine", "hello_of"]

#: How a fuzz target names a board command: ``exec:./myboard --flag``.
EXEC_PREFIX = "exec:"
#: How long a command may take to answer ``hello`` and each request, by default (seconds).
DEFAULT_TIMEOUT = 10.0


def hello_of(argv: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> Hello:
    """What the command says of itself in ``hello``; the process is ended afterwards.

    Raises:
        ExecStartError: it does not start, or does not answer ``hello`` as SPEC 10 says.
    """
    child, hello = start_child(argv, timeout)
    child.close()
    return hello


def exec_machine(
    command: str | Sequence[str], *, timeout: float = DEFAULT_TIMEOUT
) -> type[BoardMachine]:
    """A BoardMachine whose boards are processes of ``command``, with the clients and the
    nemesis steps the command declared.

    Raises:
        ExecStartError: the command does not split, start, or answer ``hello``.
    """
    argv = split_command(command)
    hello = hello_of(argv, timeout)

    def make_board(tasks: Sequence[Task], clock: Clock) -> Any:
        return exec_board(argv, tasks, clock, timeout=timeout)

    hooks: dict[str, Any] = {}
    if "connect" in hello.ops:
        hooks["open_client"] = lambda board: board.open_client()
        hooks["close_client"] = lambda client: client.close()
    for op in ("restart_storage", "drop_connections"):
        if op in hello.ops:
            hooks[op] = lambda board, op=op: getattr(board, op)()
    machine = BoardMachine.for_board(
        make_board,
        close=lambda board: board.close(),
        durable=hello.durable,
        trace_target="",
        **hooks,
    )
    name = " ".join(argv)
    machine.__name__ = machine.__qualname__ = f"ExecMachine[{hello.name or name}]"
    key_database_by(machine, f"{EXEC_PREFIX}{name}".encode())
    return machine
