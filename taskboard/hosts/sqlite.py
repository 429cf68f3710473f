"""A SQLite reference host: one ``BEGIN IMMEDIATE`` transaction per operation.

This is a reference host that shows how to meet the contract (SPEC sections
1-3) on a real transactional store, with the stdlib :mod:`sqlite3` module; it
is not a storage product (no migrations, no pooling policy, no tuning).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import ClassVar, Literal, Self, TypeVar, cast

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, Lease, State, Task
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)

__all__ = ["SQLiteBoard"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_STATES = {s.value: s for s in State}

# Each statement runs inside the constructor's single BEGIN IMMEDIATE transaction.
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS tasks (
        id          TEXT PRIMARY KEY,
        title       TEXT NOT NULL,
        deps        TEXT NOT NULL,    -- JSON array of ids, in the original order
        state       TEXT NOT NULL,
        owner       TEXT NOT NULL,
        lease_token TEXT,             -- the current lease; all three NULL when there is none
        lease_fence INTEGER,
        lease_until INTEGER,          -- microseconds since the epoch (UTC); NULL = never expires
        seq         INTEGER NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS leases (   -- every lease ever issued, never deleted
        task_id   TEXT NOT NULL REFERENCES tasks (id),
        fence     INTEGER NOT NULL,
        token     TEXT NOT NULL UNIQUE,   -- a token is never minted twice, for any task
        agent     TEXT NOT NULL,
        issued_at INTEGER,                -- microseconds since the epoch; NULL if given initially
        PRIMARY KEY (task_id, fence)
    )
    """,
)

_SELECT_TASK = (
    "SELECT id, title, deps, state, owner, lease_token, lease_fence, lease_until, seq FROM tasks"
)

_TaskRow = tuple[str, str, str, str, str, str | None, int | None, int | None, int]

_Board = TypeVar("_Board", bound="SQLiteBoard")


class SQLiteBoard:
    """A board in a SQLite database; a reference host, not a storage product.

    Every operation, reads included, is one transaction opened with
    ``BEGIN IMMEDIATE``: the write lock is taken before the first read, so
    read-check-write is atomic across threads and processes, and a rejected
    operation rolls back having changed nothing. Connections run with
    ``isolation_level=None`` (the board issues ``BEGIN``/``COMMIT`` itself)
    and a busy timeout, so contenders wait for the lock instead of failing.
    Time comes only from ``clock``, read inside the transaction.

    Storage: ``tasks`` holds each task with its current lease (``until`` as
    exact integer microseconds since the epoch); ``leases`` keeps every lease
    ever issued (``task_id, fence, token UNIQUE, agent, issued_at``) and is
    never pruned, so the next fence is always greater than every fence issued
    for the task, across releases, completions, failures and takeovers, and
    the ``UNIQUE`` constraint makes token reuse impossible, not just unlikely.

    Sharing: with a file ``path`` each thread gets its own connection, and
    several processes may open the same file: the constructor creates the
    schema if missing and inserts only the tasks that are missing, in one
    transaction, so every process attaches to the same board. With
    ``":memory:"`` (the default) or ``""`` there is one private database, so
    the board keeps a single connection and serialises threads with a lock.
    Do not carry a board across ``fork``; open a new one in the child.

    Restarts (SPEC 9): a board on a file is restarted by closing it (every
    connection) and constructing a new one on the same path with the same
    initial tasks. The constructor creates the tables only if missing and
    inserts only the tasks the file lacks, so nothing is reset: states, leases,
    ``seq`` and the fence history all stay, and the next fence is still greater.
    Every acknowledged operation was committed, and SQLite's default
    ``synchronous=FULL`` has it on disk before the commit returns.

    Clients (SPEC 8): the board is reached by its address, the database file's
    path. :meth:`open_client` opens another client of the same file, as another
    process would: a new board with connections of its own, attached (it adds
    no tasks), reading the same clock; closing it closes only its connections.
    Pickling a board carries only its class, path, busy timeout and clock (a
    :class:`~taskboard.ManualClock` travels as a copy at its current instant),
    so unpickling it, in a ``spawn``-ed process say, opens a new client of the
    same file. A private in-memory board has no address: its only client is
    itself (:meth:`open_client` returns it), and pickling it is a ``TypeError``.

    Expired leases (SPEC 3.4, a host's choice): this board **rejects**
    ``release``, ``complete`` and ``fail`` with ``LeaseLostError`` once the
    lease has expired (``now >= until``), even if the token is still current
    and nobody has taken over; this is stricter than the Go behaviour and means
    a holder's authority ends exactly when its lease does. The choice is
    exposed as :attr:`expired_lease_policy` (``"reject"``) so a test machine
    can pin it.

    Args:
        tasks: the initial tasks, stored as given if missing from the database
            (an initial lease's fence and token count as issued).
        clock: the only source of time this board reads.
        path: a database file, or ``":memory:"`` for a private in-memory one.
        timeout: how long, in seconds, to wait for another connection's lock.

    Raises:
        ValueError: two initial tasks share an id.
    """

    #: SPEC 3.4: release/complete/fail of an expired lease are LeaseLostError.
    expired_lease_policy: ClassVar[Literal["accept", "reject"]] = "reject"

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock,
        path: str | os.PathLike[str] = ":memory:",
        *,
        timeout: float = 30.0,
    ) -> None:
        initial = list(tasks)
        seen: set[str] = set()
        for task in initial:
            if task.id in seen:
                raise ValueError(f"SQLiteBoard: duplicate initial task id {task.id!r}")
            seen.add(task.id)
        self._clock = clock
        self._path = os.fspath(path)
        self._timeout = timeout
        self._private = self._path in (":memory:", "")
        self._lock = threading.Lock()  # serialises the single private connection
        self._registry_lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._local = threading.local()
        self._shared: sqlite3.Connection | None = None
        self._closed = False
        if self._private:
            self._shared = self._open()
        with self._transaction() as conn:
            for statement in _SCHEMA:
                conn.execute(statement)
            for task in initial:
                self._insert_if_missing(conn, task)

    def __repr__(self) -> str:
        return f"SQLiteBoard(path={self._path!r}, clock={self._clock!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open_client(self) -> Self:
        """Another client of this board's storage (SPEC 8), as another process would open it.

        A new board of the same class on the same database file, with connections of
        its own, attached (it inserts no tasks) and reading the same clock; it shares
        no Python object with this one but the clock. Closing it closes only its own
        connections. A private in-memory board (``":memory:"``) has no other way into
        its storage: its only client is itself, which this returns.
        """
        if self._private:
            return self
        return type(self)((), self._clock, self._path, timeout=self._timeout)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the board's address: unpickling opens a new client of the same file.

        Raises:
            TypeError: the board is a private in-memory one, which has no address.
        """
        if self._private:
            raise TypeError(
                f"cannot pickle {self!r}: a private in-memory board has no address another "
                "client could open; give it a database file path to share it"
            )
        return (_attach, (type(self), self._path, self._clock, self._timeout))

    def close(self) -> None:
        """Close every connection this board opened, in any thread; idempotent."""
        with self._registry_lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def list_tasks(self) -> list[Task]:
        """Return a consistent snapshot of every task (SPEC 3.7)."""
        with self._transaction() as conn:
            rows = conn.execute(f"{_SELECT_TASK} ORDER BY id").fetchall()
            return [_task(cast(_TaskRow, row)) for row in rows]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        """Claim ``task_id`` for ``agent`` with a freshly minted lease (SPEC 3.1).

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            TerminalError: the task is ``DONE``.
            BlockedError: a dependency is not ``DONE`` (or names no task).
            TakenError: the task is ``CLAIMED`` and its lease is live.
            ValueError: ``agent`` is empty (checked last).
        """
        with self._transaction() as conn:
            now = _micros(self._clock.now())
            task = self._get(conn, task_id)
            if task.state == State.DONE:
                raise TerminalError(f"task {task_id!r} is done; done is forever")
            for dep in task.deps:
                row = conn.execute("SELECT state FROM tasks WHERE id = ?", (dep,)).fetchone()
                if row is None or row[0] != State.DONE:
                    state = "unknown" if row is None else row[0]
                    raise BlockedError(f"task {task_id!r} waits for {dep!r} ({state})")
            if task.state == State.CLAIMED and _live(task.lease, now):
                raise TakenError(f"task {task_id!r} is held by a live lease of {task.owner!r}")
            if not agent:
                raise ValueError("claim needs a non-empty agent name")
            (issued,) = conn.execute(
                "SELECT COALESCE(MAX(fence), 0) FROM leases WHERE task_id = ?", (task_id,)
            ).fetchone()
            current = task.lease.fence if task.lease is not None else 0
            fence = max(issued, current) + 1
            token = _mint(conn, task_id, fence, agent, now)
            conn.execute(
                "UPDATE tasks SET state = ?, owner = ?, lease_token = ?, lease_fence = ?,"
                " lease_until = ?, seq = seq + 1 WHERE id = ?",
                (State.CLAIMED.value, agent, token, fence, _until(now, request.ttl), task_id),
            )
            return self._get(conn, task_id)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Recompute the lease's ``until`` from this board's clock (SPEC 3.5).

        Token, fence and owner stay; ``seq`` grows.

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired.
        """
        with self._transaction() as conn:
            now = _micros(self._clock.now())
            task = self._get(conn, task_id)
            _check_holder(task, token, now)
            conn.execute(
                "UPDATE tasks SET lease_until = ?, seq = seq + 1 WHERE id = ?",
                (_until(now, request.ttl), task_id),
            )
            return self._get(conn, task_id)

    def release(self, task_id: str, token: str) -> None:
        """Give the task back: ``OPEN``, no owner, no lease (SPEC 3.2).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired (SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        """Mark the task ``DONE``, which is terminal (SPEC 3.3).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired (SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        """Mark the task ``FAILED``; it can be claimed again (SPEC 3.6).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired (SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.FAILED)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._transaction() as conn:
            now = _micros(self._clock.now())
            task = self._get(conn, task_id)
            _check_holder(task, token, now)  # SPEC 3.4 "reject": an expired lease is lost
            conn.execute(
                "UPDATE tasks SET state = ?, owner = '', lease_token = NULL, lease_fence = NULL,"
                " lease_until = NULL, seq = seq + 1 WHERE id = ?",
                (state.value, task_id),
            )

    @staticmethod
    def _get(conn: sqlite3.Connection, task_id: str) -> Task:
        row = conn.execute(f"{_SELECT_TASK} WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no task has id {task_id!r}")
        return _task(cast(_TaskRow, row))

    @staticmethod
    def _insert_if_missing(conn: sqlite3.Connection, task: Task) -> None:
        lease = task.lease
        inserted = conn.execute(
            "INSERT OR IGNORE INTO tasks (id, title, deps, state, owner,"
            " lease_token, lease_fence, lease_until, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task.id,
                task.title,
                json.dumps(list(task.deps)),
                str(task.state),
                task.owner,
                None if lease is None else lease.token,
                None if lease is None else lease.fence,
                None if lease is None or lease.until is None else _micros(lease.until),
                task.seq,
            ),
        ).rowcount
        if inserted and lease is not None:
            conn.execute(
                "INSERT OR IGNORE INTO leases (task_id, fence, token, agent, issued_at)"
                " VALUES (?, ?, ?, ?, NULL)",
                (task.id, lease.fence, lease.token, task.owner),
            )

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        with self._registry_lock:
            if self._closed:
                conn.close()
                raise sqlite3.ProgrammingError("SQLiteBoard is closed")
            self._connections.append(conn)
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise sqlite3.ProgrammingError("SQLiteBoard is closed")
        if self._shared is not None:
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: commit on return, roll back on any exception."""
        guard: AbstractContextManager[object] = self._lock if self._private else nullcontext()
        with guard:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise


def _attach(cls: type[_Board], path: str, clock: Clock, timeout: float) -> _Board:
    """Unpickle a board: a new client of the database at ``path`` (SPEC 8)."""
    return cls((), clock, path, timeout=timeout)


def _task(row: _TaskRow) -> Task:
    id_, title, deps, state, owner, token, fence, until, seq = row
    lease = None
    if token is not None and fence is not None:
        lease = Lease(token=token, fence=fence, until=None if until is None else _datetime(until))
    # An unknown state string is kept as is: reporting it is check()'s job.
    known = _STATES.get(state, cast(State, state))
    deps_list: list[str] = json.loads(deps)
    return Task(
        id=id_,
        title=title,
        deps=tuple(deps_list),
        state=known,
        owner=owner,
        lease=lease,
        seq=seq,
    )


def _mint(conn: sqlite3.Connection, task_id: str, fence: int, agent: str, now: int) -> str:
    """Record a new lease in the history; the UNIQUE token column refuses any reuse."""
    for _ in range(8):
        token = secrets.token_hex(16)
        try:
            conn.execute(
                "INSERT INTO leases (task_id, fence, token, agent, issued_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (task_id, fence, token, agent, now),
            )
        except sqlite3.IntegrityError:
            continue  # a statement error does not end the transaction; draw again
        return token
    raise RuntimeError("SQLiteBoard: could not mint an unused token")


def _check_holder(task: Task, token: str, now: int) -> None:
    if task.state != State.CLAIMED or task.lease is None:
        raise LeaseLostError(f"task {task.id!r} is {task.state}, not claimed")
    if task.lease.token != token:
        raise LeaseLostError(f"token is not the current lease of {task.id!r}")
    if not _live(task.lease, now):
        raise LeaseLostError(f"the lease on {task.id!r} expired; claim it again")


def _live(lease: Lease | None, now: int) -> bool:
    """SPEC 2: live iff ``until is None or now < until``; at ``now == until`` it has expired."""
    return lease is not None and (lease.until is None or now < _micros(lease.until))


def _until(now: int, ttl: timedelta) -> int | None:
    """SPEC 2: ``ttl > 0`` gives ``now + ttl``; ``ttl == 0`` gives no expiry (NULL)."""
    return now + ttl // _MICROSECOND if ttl > timedelta(0) else None


def _micros(when: datetime) -> int:
    """Exact integer microseconds since the epoch of an aware datetime."""
    return (when - _EPOCH) // _MICROSECOND


def _datetime(micros: int) -> datetime:
    return _EPOCH + micros * _MICROSECOND
