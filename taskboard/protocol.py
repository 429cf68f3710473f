"""Boards in any language, checked as child processes over the board protocol (SPEC 10).

In a pytest suite, a board command is checked as a Python board is::

    TestMyGoBoard = BoardMachine.for_command("./myboard").TestCase

    class TestMyGoBoardContract(BoardContract.for_command("./myboard")):
        pass

This module holds the rest: :func:`exec_board` (one board as a process), the errors, the
Python side of the protocol (:func:`serve`), and :func:`end_spares`. See ``docs/protocol.md``.
"""

from taskboard._protocol.board import exec_board
from taskboard._protocol.codec import ProtocolError
from taskboard._protocol.serve import serve
from taskboard._protocol.spares import ExecStartError, end_spares

__all__ = ["ExecStartError", "ProtocolError", "end_spares", "exec_board", "serve"]
