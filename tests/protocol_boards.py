"""Boards served over the board protocol (SPEC 10), for the protocol's tests.

    python tests/protocol_boards.py NAME [PATH]

NAME is ``memory``, ``sqlite`` (a file board whose clients ``connect`` to PATH's file), a
mutant of the gallery, or a misbehaving child: ``exit`` (dies at start), ``silent`` (never
answers), ``garbage`` (answers claims with a line that is not JSON).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from taskboard import Clock, Task
from taskboard._protocol.serve import serve
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import MUTANTS
from taskboard.hosts.sqlite import SQLiteBoard


class OwnedFileBoard(SQLiteBoard):
    """A SQLite file board that removes its file when closed: the process that ran ``init``
    removes its storage (SPEC 10)."""

    def close(self) -> None:
        super().close()
        os.unlink(self._path)


def sqlite_file(tasks: Sequence[Task], clock: Clock) -> SQLiteBoard:
    fd, path = tempfile.mkstemp(suffix=".sqlite", prefix="taskboard-protocol-")
    os.close(fd)
    return OwnedFileBoard(tasks, clock, path)


def main(name: str) -> None:
    if name == "exit":
        print("cannot open the store: permission denied", file=sys.stderr)
        sys.exit(3)
    if name == "silent":
        print("waiting for something that never comes", file=sys.stderr, flush=True)
        time.sleep(60)
        return
    if name == "sqlite":
        serve(
            sqlite_file,
            shape=SQLiteBoard,
            connect=lambda storage, clock: SQLiteBoard((), clock, storage),
            storage_of=lambda board: board._path,
        )
        return
    if name == "garbage":

        class Garbage(MemoryBoard):
            def claim(self, *args: Any) -> Any:
                sys.stdout.write("this is not json\n")
                sys.stdout.flush()
                time.sleep(60)

        serve(Garbage)
        return
    boards = {"memory": MemoryBoard, **{m.__name__: m for m in MUTANTS}}
    serve(boards[name])


if __name__ == "__main__":
    main(sys.argv[1])
