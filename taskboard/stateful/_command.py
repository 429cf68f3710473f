"""A BoardMachine for a board command (SPEC 10): what ``BoardMachine.for_command`` and
``taskboard fuzz --exec`` check.

The command is started once to hear its ``hello``; the machine then starts a process per
board (``init``), one per client (``connect``) when it declared ``connect``, and runs the
nemesis steps it declared. Its ``durable``, and its ``expired_lease_policy`` when it declares
one, are the machine's (``attributes`` given to the machine win over them).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from taskboard._clock import Clock
from taskboard._contract import Task
from taskboard._protocol.board import exec_board, split_command
from taskboard._protocol.spares import hello_of
from taskboard.stateful._hypothesis import key_database_by
from taskboard.stateful._tracefile import EXEC_PREFIX

__all__ = ["DEFAULT_TIMEOUT", "EXEC_PREFIX", "exec_machine"]

#: How long a command may take to answer ``hello`` and each request, by default (seconds).
DEFAULT_TIMEOUT = 10.0


def exec_machine(
    base: Any, command: str | Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, **attributes: Any
) -> Any:
    """A subclass of ``base``, a BoardMachine (this is :meth:`BoardMachine.for_command`, which
    this room sits below), whose boards are processes of ``command``, with the clients and
    the nemesis steps the command declared.

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
    # A trace names the command, quoted as a shell would, so ``taskboard replay FILE`` runs it.
    target = EXEC_PREFIX + shlex.join(argv)
    declared: dict[str, Any] = {"durable": hello.durable, "trace_target": target}
    if hello.expired_lease_policy is not None:
        declared["expired_lease_policy"] = hello.expired_lease_policy
    machine = base.for_board(
        make_board,
        close=lambda board: board.close(),
        **{**declared, **attributes},
        **hooks,
    )
    #: What the command declared in its hello (SPEC 10), which its traces record.
    machine.declared_ops = tuple(hello.ops)
    name = " ".join(argv)
    machine.__name__ = machine.__qualname__ = f"ExecMachine[{hello.name or name}]"
    key_database_by(machine, f"{EXEC_PREFIX}{name}".encode())
    return machine
