"""Race mutants: broken SQLite boards whose bug shows only when racing threads interleave at
their statements, with no pause planted to widen the window.

Each class is a :class:`~taskboard.hosts.sqlite.SQLiteBoard` on a database *file* (each
thread has a connection of its own) with ONE realistic bug, named in its docstring. Run
alone, each is correct: it passes the sequential machine. The parallel mode catches it now
and then when the operating system interleaves its threads; with
``race_scheduling = "controlled"`` it is caught, shrunk and replayed exactly
(docs/races.md). Do not use any of them to store anything.

:data:`RACE_MUTANTS` lists every mutant in gallery order.
"""

from __future__ import annotations

import sqlite3

from taskboard._contract import ClaimRequest, State, Task
from taskboard.hosts.client_mutants import _ClientMutant
from taskboard.hosts.sqlite import SQLiteBoard, _check_holder, _micros

__all__ = ["RACE_MUTANTS", "ReadOutsideTransactionClaim", "ReadOutsideTransactionFinish"]


class _DefaultIsolation(_ClientMutant):
    """A mutant whose buggy operations run on a connection of this thread left at Python
    sqlite3's default isolation; not itself a mutant (it overrides no operation)."""

    def _default_connection(self) -> sqlite3.Connection:
        """This thread's connection at the sqlite3 module's default isolation level."""
        conn: sqlite3.Connection | None = getattr(self._local, "default_isolation", None)
        if conn is None:
            conn = sqlite3.connect(self._path, timeout=self._timeout, check_same_thread=False)
            with self._registry_lock:
                self._connections.append(conn)
            self._local.default_isolation = conn
        return conn


class ReadOutsideTransactionClaim(_DefaultIsolation):
    """Bug: claim reads the task, checks it, and then writes, on a connection left at Python
    sqlite3's default isolation: the module opens a transaction only before the first
    ``INSERT`` or ``UPDATE``, so the ``SELECT`` ran outside it, and two claims that both read
    the task open both take it (SPEC 3.1: one live lease per task). The code reads as one
    transaction (a ``commit()`` at the end, a ``rollback()`` on error), which is why this
    ships: a Python service's "check, then write, then commit" on its default connection."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        conn = self._default_connection()
        try:
            now = _micros(self._clock.now())
            task = self._get(conn, task_id)  # no transaction yet: the SELECT stands alone
            self._check_claim(task, self._dep_states(conn, task), agent, now)
            claimed = self._write_claim(conn, task_id, agent, now, request.ttl)  # BEGINs here
            conn.commit()
            return claimed
        except BaseException:
            conn.rollback()
            raise


class ReadOutsideTransactionFinish(_DefaultIsolation):
    """Bug: release, complete and fail check the caller's token with a ``SELECT`` outside
    their transaction (Python sqlite3's default isolation, as in
    :class:`ReadOutsideTransactionClaim`), then write by task id. A release and a claim that
    land between the check and the write leave the new holder's lease released, completed or
    failed by the old holder's token (SPEC 3.3: only the current token acts). The window is
    one statement wide: threads at once rarely hit it."""

    def _finish(self, task_id: str, token: str, state: State) -> None:
        conn = self._default_connection()
        try:
            now = _micros(self._clock.now())
            _check_holder(self._get(conn, task_id), token, now)  # outside the transaction
            self._write_finish(conn, task_id, state)  # BEGINs here, writes by id
            conn.commit()
        except BaseException:
            conn.rollback()
            raise


#: Every race mutant, in gallery order.
RACE_MUTANTS: tuple[type[SQLiteBoard], ...] = (
    ReadOutsideTransactionClaim,
    ReadOutsideTransactionFinish,
)
