"""PostgreSQL race mutants: broken :class:`~taskboard.hosts.postgres.PostgresBoard` variants
whose bug shows only when racing threads interleave at their statements.

As the SQLite ones in :mod:`taskboard.hosts.race_mutants`, each has ONE realistic bug, named
in its docstring, and passes the sequential machine; the parallel mode with
``race_scheduling = "controlled"`` catches it, shrinks it and replays it exactly
(docs/races.md). They need psycopg 3 and a server. Do not use any of them to store anything.

:data:`POSTGRES_RACE_MUTANTS` lists every mutant in gallery order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal, cast

from taskboard._clock import Clock
from taskboard._contract import Task
from taskboard.hosts.postgres import Connection, PostgresBoard

__all__ = ["POSTGRES_RACE_MUTANTS", "NowBeforeRowLock"]


class NowBeforeRowLock(PostgresBoard):
    """Bug: every operation takes its time from SQL ``now()``, read as its transaction's first
    statement, and only then waits on ``SELECT ... FOR UPDATE``. ``now()`` is the
    transaction's start, so an operation that another one commits ahead of (during its lock
    wait, or between its two statements) acts at an instant before that commit. For a claim
    that stays within the contract (its lease is dated inside the call's window), but a renew
    that read ``now()`` before its wait extends a lease that an operation committed meanwhile
    found expired (SPEC 3.4, 3.5; SPEC 7: effect instants never go backwards). The reference
    host's ``_now`` docstring warns about exactly this; an ORM board that asks the database
    for ``func.now()`` is built this way.

    It keeps the server's time whatever ``clock`` it is given, as the server-clock mutants
    do, so only the wall-clock mode (SPEC 7) can test it: its ``clock_mode`` says so.
    """

    #: The machine must run it on the wall clock: it reads only the server's.
    clock_mode: ClassVar[Literal["wall"]] = "wall"

    def __init__(
        self, tasks: Iterable[Task], clock: Clock | Literal["server"], conninfo: str, **options: Any
    ) -> None:
        self._started = threading.local()
        super().__init__(tasks, "server", conninfo, **options)

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with super()._transaction() as conn:
            row = conn.execute("SELECT (extract(epoch FROM now()) * 1000000)::bigint").fetchone()
            assert row is not None
            self._started.micros = cast(int, row[0])  # BUG: the time, before the row lock
            yield conn

    def _now(self, conn: Connection) -> int:
        return cast(int, self._started.micros)


#: Every PostgreSQL race mutant, in gallery order.
POSTGRES_RACE_MUTANTS: tuple[type[PostgresBoard], ...] = (NowBeforeRowLock,)
