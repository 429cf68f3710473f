"""Client-race mutants: broken SQLite boards whose atomicity holds only inside one client.

Each class here is :class:`~taskboard.hosts.sqlite.SQLiteBoard` with ONE realistic
planted bug of the kind SPEC section 8 is about: an operation that is atomic
only because one client object serialises it (a lock held in the object, a
single pooled connection, a cache that only this client writes through). Each
docstring names the bug, the SPEC clause it breaks and the real-world failure
it mirrors. With one client, every thread sharing one board object, each mutant
is correct: it passes the sequential ``BoardMachine`` and both criteria run on
one board. With a client per thread (``open_client()``, or unpickling the board
in another process), two clients race and the contract breaks. Do not use any
of them to store anything.

Every mutant takes the constructor ``(tasks, clock, path, *, timeout=30.0)`` on
a SQLite database *file* (a private ``":memory:"`` database has no second
client, so it is refused), and inherits from SQLiteBoard its schema, its
:meth:`~taskboard.hosts.sqlite.SQLiteBoard.open_client` (a new client of the
same file, of the same class) and its pickling (unpickling opens such a client).
Only the operations the bug lives in are overridden; they check on a read and
write afterwards in autocommit (each statement its own transaction), with
:data:`_IO_PAUSE` between the two, a simulated round trip that makes the race
window reliable. A claim's fence comes from one ``INSERT ... SELECT MAX(fence) + 1``
statement, atomic on its own (a sequence), so racing claims never collide on a
fence: they both *win*, which is the failure being shown.

:data:`CLIENT_MUTANTS` lists every mutant in gallery order.
"""

from __future__ import annotations

import os
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import cast

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, State, Task
from taskboard._errors import BlockedError, NotFoundError, TakenError, TerminalError
from taskboard.hosts.sqlite import SQLiteBoard, _check_holder, _live, _micros, _until

__all__ = [
    "CLIENT_MUTANTS",
    "ClientCachedLeases",
    "ClientLockedClaim",
    "PooledReadThenWrite",
]

#: Simulated I/O between a read and its write (a network round trip to the store).
_IO_PAUSE = 0.001


class _ClientMutant(SQLiteBoard):
    """SQLiteBoard on a file, with the checks and writes of claim/renew/finish as steps the
    mutants reuse; not itself a mutant (it overrides no operation)."""

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
    ) -> None:
        if os.fspath(path) in (":memory:", ""):
            raise ValueError(
                f"{type(self).__name__} needs a database file: its bug lies between "
                "clients of one storage, and a private in-memory database has only one"
            )
        super().__init__(tasks, clock, path, timeout=timeout)

    def _check_claim(
        self, task: Task, dep_state: dict[str, str | None], agent: str, now: int
    ) -> None:
        """SPEC 3.1's checks, in order, on ``task`` as read and its dependencies' states."""
        if task.state == State.DONE:
            raise TerminalError(f"task {task.id!r} is done; done is forever")
        for dep in task.deps:
            state = dep_state.get(dep)
            if state != State.DONE:
                shown = "unknown" if state is None else state
                raise BlockedError(f"task {task.id!r} waits for {dep!r} ({shown})")
        if task.state == State.CLAIMED and _live(task.lease, now):
            raise TakenError(f"task {task.id!r} is held by a live lease of {task.owner!r}")
        if not agent:
            raise ValueError("claim needs a non-empty agent name")

    @staticmethod
    def _dep_states(conn: sqlite3.Connection, task: Task) -> dict[str, str | None]:
        """The stored state of each of ``task``'s dependencies (``None``: no such task)."""
        states: dict[str, str | None] = {}
        for dep in task.deps:
            row = conn.execute("SELECT state FROM tasks WHERE id = ?", (dep,)).fetchone()
            states[dep] = None if row is None else cast(str, row[0])
        return states

    def _write_claim(
        self, conn: sqlite3.Connection, task_id: str, agent: str, now: int, ttl: timedelta
    ) -> Task:
        """Mint a lease (the fence from one atomic statement) and write the claim, by id."""
        token = secrets.token_hex(16)
        ((fence,),) = conn.execute(
            "INSERT INTO leases (task_id, fence, token, agent, issued_at)"
            " SELECT ?, COALESCE(MAX(fence), 0) + 1, ?, ?, ? FROM leases WHERE task_id = ?"
            " RETURNING fence",
            (task_id, token, agent, now, task_id),
        ).fetchall()
        conn.execute(
            "UPDATE tasks SET state = ?, owner = ?, lease_token = ?, lease_fence = ?,"
            " lease_until = ?, seq = seq + 1 WHERE id = ?",
            (State.CLAIMED.value, agent, token, fence, _until(now, ttl), task_id),
        )
        return self._get(conn, task_id)

    def _write_renew(
        self, conn: sqlite3.Connection, task_id: str, now: int, ttl: timedelta
    ) -> Task:
        conn.execute(
            "UPDATE tasks SET lease_until = ?, seq = seq + 1 WHERE id = ?",
            (_until(now, ttl), task_id),
        )
        return self._get(conn, task_id)

    def _write_finish(self, conn: sqlite3.Connection, task_id: str, state: State) -> Task:
        conn.execute(
            "UPDATE tasks SET state = ?, owner = '', lease_token = NULL, lease_fence = NULL,"
            " lease_until = NULL, seq = seq + 1 WHERE id = ?",
            (state.value, task_id),
        )
        return self._get(conn, task_id)


class ClientLockedClaim(_ClientMutant):
    """Bug: claim's read and write are serialised by a ``threading.Lock`` in the client object,
    not by the database: no transaction, each statement in autocommit.

    Breaks SPEC 3.1 "it succeeds, atomically", SPEC 5 (exactly one winner) and
    SPEC 8 (atomicity must hold across clients, not inside one). Mirrors a
    service that wraps "SELECT the row, check it is open, UPDATE it" in a
    process-local mutex and ships: its threads never race, and every test that
    shares one client object passes; deployed as several processes (or pods),
    each with its own lock and connection, two agents both read OPEN and both
    win, so a job runs twice. One shared client: exactly one winner. A client
    per agent: ``concurrent_claim`` sees several. Other operations are
    SQLiteBoard's own transactions.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
    ) -> None:
        self._claim_lock = threading.Lock()  # BUG: atomic only inside this client object
        super().__init__(tasks, clock, path, timeout=timeout)

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._claim_lock:
            conn = self._connection()  # autocommit: no BEGIN, each statement stands alone
            now = _micros(self._clock.now())
            task = self._get(conn, task_id)
            self._check_claim(task, self._dep_states(conn, task), agent, now)
            time.sleep(_IO_PAUSE)  # the round trip between the SELECT and the UPDATE
            return self._write_claim(conn, task_id, agent, now, request.ttl)


class ClientCachedLeases(_ClientMutant):
    """Bug: each client caches every task it has seen (state, owner, lease) and trusts that
    cache to check claims and tokens, then writes by id without re-reading.

    Breaks SPEC 3.1 (a claim of a task another client holds must be ``TakenError``;
    one another client released must succeed), SPEC 3.2/3.3 (only the current
    token finishes a task) and SPEC 8. A task enters the cache the first time the
    client reads it and changes there only with this client's own writes, which
    go through it; every operation holds the client's lock. With one client every
    write goes through the one cache, so it is always right. With two, a client
    acts on what it saw last: it lets a claim through that another client already
    took (both win), turns a claim away from a task another client released, and
    accepts a token another client's claim has replaced, so a stale worker
    completes a task someone else now holds. Mirrors a lease library that keeps
    "which locks do I hold / what did I see" in process memory, right until the
    second process. :meth:`list_tasks` reads the database and leaves the cache be.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
    ) -> None:
        self._client_lock = threading.RLock()
        self._cache: dict[str, Task] = {}  # BUG: trusted, though other clients write too
        super().__init__(tasks, clock, path, timeout=timeout)

    def _cached(self, conn: sqlite3.Connection, task_id: str) -> Task:
        """The task as this client last saw it; read from the database on the first use."""
        task = self._cache.get(task_id)
        if task is None:
            task = self._cache[task_id] = self._get(conn, task_id)
        return task

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._client_lock:
            conn = self._connection()
            now = _micros(self._clock.now())
            task = self._cached(conn, task_id)
            deps: dict[str, str | None] = {}
            for dep in task.deps:
                try:
                    deps[dep] = self._cached(conn, dep).state
                except NotFoundError:
                    deps[dep] = None
            self._check_claim(task, deps, agent, now)
            time.sleep(_IO_PAUSE)  # the round trip to the store
            claimed = self._cache[task_id] = self._write_claim(
                conn, task_id, agent, now, request.ttl
            )
            return claimed

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._client_lock:
            conn = self._connection()
            now = _micros(self._clock.now())
            _check_holder(self._cached(conn, task_id), token, now)
            time.sleep(_IO_PAUSE)
            renewed = self._cache[task_id] = self._write_renew(conn, task_id, now, request.ttl)
            return renewed

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._client_lock:
            conn = self._connection()
            now = _micros(self._clock.now())
            _check_holder(self._cached(conn, task_id), token, now)
            time.sleep(_IO_PAUSE)
            self._cache[task_id] = self._write_finish(conn, task_id, state)


class PooledReadThenWrite(_ClientMutant):
    """Bug: every operation checks out the client's pool of ONE connection for its whole
    run and reads, checks and writes on it in autocommit, without a transaction.

    Breaks SPEC 3.1 "atomically", 3.2/3.3 (one token finishes a task once),
    SPEC 5 (both criteria) and SPEC 8. The single pooled connection serialises
    the client: while one thread holds it the others wait, so with one client
    read-then-write never interleaves and it is correct (the kind of
    "we only have one connection, so no races" reasoning behind an app whose
    pool size is 1). Scaled out to several clients, each with its own pool,
    two claims both read OPEN and both win, and two submissions of one token
    both pass the check and both succeed. Reads for :meth:`list_tasks` (and the
    constructor's set-up) run on the same connection inside ``BEGIN IMMEDIATE``.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
    ) -> None:
        # BUG: the pool of one is all that serialises read-then-write. The slot starts
        # empty (None); the connection is opened on first checkout and kept.
        self._pool: queue.Queue[sqlite3.Connection | None] = queue.Queue(maxsize=1)
        self._pool.put(None)
        super().__init__(tasks, clock, path, timeout=timeout)

    @contextmanager
    def _checkout(self) -> Iterator[sqlite3.Connection]:
        """The client's one connection, for this caller alone until the block ends."""
        conn = self._pool.get(timeout=self._timeout)
        try:
            if conn is None:
                conn = self._open()
            yield conn
        finally:
            self._pool.put(conn)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._checkout() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._checkout() as conn:
            now = _micros(self._clock.now())
            task = self._get(conn, task_id)
            self._check_claim(task, self._dep_states(conn, task), agent, now)
            time.sleep(_IO_PAUSE)  # the round trip between the SELECT and the UPDATE
            return self._write_claim(conn, task_id, agent, now, request.ttl)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._checkout() as conn:
            now = _micros(self._clock.now())
            _check_holder(self._get(conn, task_id), token, now)
            time.sleep(_IO_PAUSE)
            return self._write_renew(conn, task_id, now, request.ttl)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._checkout() as conn:
            now = _micros(self._clock.now())
            _check_holder(self._get(conn, task_id), token, now)
            time.sleep(_IO_PAUSE)
            self._write_finish(conn, task_id, state)


#: Every client-race mutant, in gallery order.
CLIENT_MUTANTS: tuple[type[SQLiteBoard], ...] = (
    ClientLockedClaim,
    ClientCachedLeases,
    PooledReadThenWrite,
)
