"""The nemesis gallery: boards whose bugs show only when the storage fails (SPEC 9).

:class:`FileBoard` is :class:`~taskboard.hosts.memory.MemoryBoard` whose state lives in a
JSON file, written after every change: a durable store with a client object in front of
it. It brings the two nemesis hooks as methods, which :meth:`BoardMachine.for_board
<taskboard.stateful.BoardMachine.for_board>` picks up: :meth:`FileBoard.restart_storage`
closes the board and opens a new one on the same file (what a process restart does), and
:meth:`FileBoard.drop_connections` makes the next write fail once with
``ConnectionResetError``, as a connection the server killed does; the write is lost and
the client reconnects. Run them with ``tolerate_faults=(ConnectionResetError,)``.

Each mutant below plants ONE realistic bug that stays hidden while the storage never
fails, and is caught once the machine restarts it or drops its connection. Each
docstring names the bug, the SPEC clause it breaks and the real-world failure it
mirrors. :class:`PeriodicSnapshotBoard` is the correct board that is *not* durable
(``durable = False``): it loses the writes since its last snapshot, and its fences still
never repeat. Do not use any of them to store anything.

:data:`NEMESIS_MUTANTS` lists every mutant in gallery order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Self

from taskboard._clock import Clock
from taskboard._contract import Lease, State, Task
from taskboard.hosts.memory import MemoryBoard

__all__ = [
    "NEMESIS_MUTANTS",
    "FenceCounterInMemory",
    "FileBoard",
    "LeaseCacheNotRevalidated",
    "LeasesInMemory",
    "PeriodicSnapshotBoard",
    "SnapshotClaimsDurable",
]


class FileBoard(MemoryBoard):
    """A MemoryBoard kept in a JSON file (``board.json`` in ``directory``), written after
    every change; a correct, durable board for the nemesis gallery.

    Opened on a directory that already holds a board, it reads that board and ignores
    ``tasks``. With no ``directory`` it makes a temporary one, removed by :meth:`close`
    (a board from :meth:`restart_storage` takes that duty over).
    """

    #: SPEC 9: nothing acknowledged is lost across :meth:`restart_storage`.
    durable: ClassVar[bool] = True

    def __init__(
        self, tasks: Iterable[Task], clock: Clock, directory: str | os.PathLike[str] | None = None
    ) -> None:
        super().__init__(tasks, clock)
        self._owns_directory = directory is None
        self._directory = Path(directory or tempfile.mkdtemp(prefix="taskboard-file-"))
        self._dropped = False
        if self._file.exists():
            self._load()
        else:
            self._save()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._directory)!r}, clock={self._clock!r})"

    @property
    def _file(self) -> Path:
        return self._directory / "board.json"

    # -- the nemesis hooks -------------------------------------------------------------------

    def restart_storage(self) -> Self:
        """Close this board and open a new one on the same file, as a restarted process does."""
        restarted = type(self)([], self._clock, self._directory)
        restarted._owns_directory, self._owns_directory = self._owns_directory, False
        self.close()
        return restarted

    def drop_connections(self) -> None:
        """The server kills the connection: the next write fails with ``ConnectionResetError``."""
        self._dropped = True

    def close(self) -> None:
        """Remove the board's directory if it made it."""
        if self._owns_directory:
            shutil.rmtree(self._directory, ignore_errors=True)

    # -- storage -----------------------------------------------------------------------------

    def _put(self, task: Task) -> Task:
        previous = self._tasks.get(task.id)
        self._tasks[task.id] = task
        try:
            self._save()
        except ConnectionResetError:
            self._lost_write(task.id, previous)
            raise
        return task

    def _lost_write(self, task_id: str, previous: Task | None) -> None:
        """A write the dropped connection lost: the store never had it, so neither does the
        client (a fence it counted up stays counted: later fences only grow)."""
        if previous is None:
            del self._tasks[task_id]
        else:
            self._tasks[task_id] = previous

    def _save(self) -> None:
        if self._dropped:
            self._dropped = False
            raise ConnectionResetError("the server closed the connection; reconnected")
        self._write(self._file, self._state())

    def _state(self) -> dict[str, Any]:
        return {
            "tasks": [_task_json(task) for task in self._tasks.values()],
            "max_fence": self._max_fence,
            "issued_tokens": sorted(self._issued_tokens),
        }

    def _load(self) -> None:
        state = json.loads(self._file.read_text(encoding="utf-8"))
        self._tasks = {task.id: task for task in map(_task_from_json, state["tasks"])}
        self._max_fence = dict(state["max_fence"])
        self._issued_tokens = set(state["issued_tokens"])

    @staticmethod
    def _write(path: Path, state: dict[str, Any]) -> None:
        # Whole file or nothing: a rename replaces it atomically.
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(state), encoding="utf-8")
        scratch.replace(path)


class FenceCounterInMemory(FileBoard):
    """Bug: the fence counter lives in process memory while the tasks persist.

    SPEC 3.1 and 9: a fence is greater than every fence issued before for the task,
    across restarts. Real-world: a fencing counter in an application-level dict, or an
    in-memory sequence next to a persisted table. After a restart it counts from 1
    again, so the next holder gets a fence an old holder already had, and a downstream
    fence check lets the stale holder's writes through.
    """

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "max_fence": {}}

    def _load(self) -> None:
        super()._load()
        self._max_fence = dict.fromkeys(self._tasks, 0)


class LeasesInMemory(FileBoard):
    """Bug: leases are kept in memory while the tasks (state and owner) persist.

    SPEC 3.1 and 9: a durable board loses no acknowledged lease. Real-world: a lock
    table in the application process (or a cache used as the lock store) next to a
    durable task table. After a restart each claimed task shows its owner and no lease,
    so nobody can finish it and every holder has lost its lease without a word.
    """

    def _state(self) -> dict[str, Any]:
        state = super()._state()
        for task in state["tasks"]:
            task["lease"] = None
        return state


class LeaseCacheNotRevalidated(FileBoard):
    """Bug: after a reconnect the client keeps its cache, with the write the dropped
    connection lost.

    SPEC 3 and 9: a failed call changes nothing, and a durable board shows what it
    acknowledged. Real-world: a client that applies a write to its local cache before
    the store confirms it, and on a connection error reconnects without reading the
    store again. This client then serves a claim the store never saw; after a restart
    (or to any other client) it is gone.
    """

    def _lost_write(self, task_id: str, previous: Task | None) -> None:
        pass  # reconnects, and keeps the lost write in its cache


class PeriodicSnapshotBoard(FileBoard):
    """A correct board that is not durable (``durable = False``), as Redis with RDB snapshots
    is: it writes the board to the file every :attr:`snapshot_every` changes only, so a
    restart loses the changes since the last snapshot.

    SPEC 9 still holds: fences never repeat, because the highest fence of each task is
    written through on every claim (a small sequence file, like a durable counter next
    to a volatile cache), and tokens are random 128-bit values.
    """

    durable: ClassVar[bool] = False
    #: Changes between two snapshots of the whole board.
    snapshot_every: ClassVar[int] = 3

    def __init__(
        self, tasks: Iterable[Task], clock: Clock, directory: str | os.PathLike[str] | None = None
    ) -> None:
        self._changes = 0
        super().__init__(tasks, clock, directory)

    @property
    def _fences_file(self) -> Path:
        return self._directory / "fences.json"

    def _save(self) -> None:
        if self._dropped:
            super()._save()  # fails, as a write on the dropped connection does
        self._write(self._fences_file, self._max_fence)
        if self._changes % self.snapshot_every == 0:
            self._write(self._file, self._state())
        self._changes += 1

    def _load(self) -> None:
        super()._load()
        if self._fences_file.exists():
            self._max_fence = json.loads(self._fences_file.read_text(encoding="utf-8"))


class SnapshotClaimsDurable(PeriodicSnapshotBoard):
    """Bug: a store that loses recent writes on a restart declares itself durable.

    SPEC 9: a durable board loses nothing it acknowledged. Real-world: Redis with only
    RDB snapshots (or ``appendfsync everysec``) behind a lock service that promises its
    clients that an acknowledged claim survives a restart: after one, a task the
    holder was told it owns is open again, and a second agent claims it.
    """

    durable: ClassVar[bool] = True


#: Every nemesis mutant, in gallery order.
NEMESIS_MUTANTS: tuple[type[FileBoard], ...] = (
    FenceCounterInMemory,
    LeasesInMemory,
    LeaseCacheNotRevalidated,
    SnapshotClaimsDurable,
)


def _task_json(task: Task) -> dict[str, Any]:
    lease = task.lease
    return {
        "id": task.id,
        "title": task.title,
        "deps": list(task.deps),
        "state": str(task.state),
        "owner": task.owner,
        "lease": None
        if lease is None
        else {
            "token": lease.token,
            "fence": lease.fence,
            "until": None if lease.until is None else lease.until.isoformat(),
        },
        "seq": task.seq,
    }


def _task_from_json(row: dict[str, Any]) -> Task:
    lease = row["lease"]
    return Task(
        id=row["id"],
        title=row["title"],
        deps=tuple(row["deps"]),
        state=State(row["state"]),
        owner=row["owner"],
        lease=None
        if lease is None
        else Lease(
            lease["token"],
            lease["fence"],
            None if lease["until"] is None else datetime.fromisoformat(lease["until"]),
        ),
        seq=row["seq"],
    )
