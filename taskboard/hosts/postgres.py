"""A PostgreSQL reference host: one READ COMMITTED transaction per operation, with row locks.

This is a reference host that shows how to meet the contract (SPEC sections
1-3) on PostgreSQL, with `psycopg 3 <https://www.psycopg.org/psycopg3/>`_
(``pip install 'taskboard-contract[postgres]'``); it is not a storage product (no
migrations, no pooling policy beyond a few idle connections, no tuning).
"""

from __future__ import annotations

import re
import secrets
import select
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeVar, cast

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, Lease, State, Task
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)

try:
    import psycopg
    from psycopg.pq import TransactionStatus
    from psycopg.rows import TupleRow
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "taskboard.hosts.postgres needs psycopg 3: pip install 'taskboard-contract[postgres]'"
    ) from exc

__all__ = ["PostgresBoard"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_STATES = {s.value: s for s in State}
_BOARD_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: How many fresh tokens a claim draws before giving up (a repeat of a 128-bit random
#: token means a broken random source, not bad luck).
_MINT_ATTEMPTS = 8
#: The ``pg_advisory_xact_lock`` key that serialises schema creation across processes
#: ("taskboar" in ASCII): concurrent ``CREATE TABLE IF NOT EXISTS`` of one name can fail.
_SCHEMA_LOCK = 0x7461736B626F6172

Connection = psycopg.Connection[TupleRow]

# Shared by every board on the server: ``board_id`` is the first column of every key, so
# boards are isolated without a table each. Created in the first schema of search_path.
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS taskboard_tasks (
        board_id    text   NOT NULL,
        id          text   NOT NULL,
        title       text   NOT NULL,
        deps        text[] NOT NULL,  -- dependency ids, in the original order
        state       text   NOT NULL,
        owner       text   NOT NULL,
        lease_token text,             -- the current lease; all three NULL when there is none
        lease_fence bigint,
        lease_until bigint,           -- microseconds since the epoch (UTC); NULL = never expires
        seq         bigint NOT NULL,
        PRIMARY KEY (board_id, id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS taskboard_leases (  -- every lease ever issued, kept for good
        board_id  text   NOT NULL,
        task_id   text   NOT NULL,
        fence     bigint NOT NULL,
        token     text   NOT NULL,
        agent     text   NOT NULL,
        issued_at bigint,             -- microseconds since the epoch; NULL if given initially
        PRIMARY KEY (board_id, task_id, fence),
        UNIQUE (board_id, token),     -- a token is never minted twice by a board, for any task
        FOREIGN KEY (board_id, task_id) REFERENCES taskboard_tasks (board_id, id)
            ON DELETE CASCADE         -- only close() deletes tasks: the whole board at once
    )
    """,
)

_COLUMNS = "id, title, deps, state, owner, lease_token, lease_fence, lease_until, seq"

_TaskRow = tuple[str, str, list[str], str, str, str | None, int | None, int | None, int]

_Board = TypeVar("_Board", bound="PostgresBoard")


class PostgresBoard:
    """A board in a PostgreSQL database; a reference host, not a storage product.

    Every operation but :meth:`list_tasks` is one ``READ COMMITTED``
    transaction that first locks the task's row with ``SELECT ... FOR
    UPDATE``; the checks and the write happen under that lock, so
    read-check-write is atomic across threads, processes and machines, and a
    rejected operation raises before writing and rolls back, having changed
    nothing. Contenders for one task wait on its row lock (never on a Python
    lock), and no operation locks two task rows, so there are no deadlocks and
    no serialization failures to retry. Time comes only
    from ``clock``, read once the row is locked: an injected
    :class:`~taskboard.Clock`, whose instant goes to the server as a query
    parameter, or with ``clock="server"`` the server's ``clock_timestamp()``,
    read by a statement of its own once the lock is held. SQL ``now()``, the
    transaction's start, is never used: it is fixed before the lock wait, so
    after a wait it can lie before the commit this transaction waited for, and
    time would run backwards from one operation to the next.

    ``claim`` reads its dependencies in one statement after the lock, without
    locking them: a dependency seen ``DONE`` stays ``DONE`` (nothing leaves
    ``DONE``), and one seen unfinished makes the claim a ``BlockedError`` that
    changes nothing, which orders the claim before whatever finishes the
    dependency later. Locking dependency rows would add waits, and deadlocks on
    a cyclic graph, for no stronger guarantee.

    :meth:`list_tasks` is one ``SELECT``, so one snapshot, sorted by id
    (``COLLATE "C"``: code-point order, as Python sorts).

    Storage: ``taskboard_tasks`` holds each task with its current lease
    (``until`` as exact integer microseconds since the epoch, so
    :attr:`clock_resolution` is one microsecond, with either clock:
    ``timestamptz`` holds microseconds too, and ``until = now + ttl`` is
    computed in Python on exact integers); ``taskboard_leases`` keeps
    every lease ever issued (``fence``, ``token``, ``agent``, ``issued_at``),
    never pruned while the board lives, so the next fence is always greater
    than every fence issued for the task, across releases, completions,
    failures and takeovers, and ``UNIQUE (board_id, token)`` makes token reuse
    impossible, not just unlikely. Tokens are 128 random bits from
    :mod:`secrets`, drawn anew if the board already issued one.

    Sharing: both tables are shared by every board on the server, with
    ``board_id`` leading every key; each new board gets a random one, so boards
    are isolated. The constructor creates the tables if missing, under a
    transaction-level advisory lock, so several processes may construct boards
    at once. Passing an existing ``board_id`` attaches to that board: the
    constructor inserts only the tasks the board does not hold yet, in one
    transaction, so several processes may construct at once and all see the
    same board.

    Clients (SPEC 8): the board is reached by its address, ``conninfo`` and
    ``board_id``. :meth:`open_client` opens another client of the same board, as
    another process would: a new board with connections of its own, attached (it
    inserts no tasks), ``delete_on_close=False``, reading the same clock
    (``"server"`` included); closing it closes only its connections, never the
    board. Pickling a board carries only its class, address and clock (a
    :class:`~taskboard.ManualClock` travels as a copy at its current instant), so
    unpickling it, in a ``spawn``-ed process say, opens such a client too.

    Threads: the board is thread-safe, and calls from several threads run at
    once, each on a connection of its own: a call takes an idle connection or
    opens one, and gives it back after; up to ``connections`` (at least two)
    stay open between calls. Do not carry a board across ``fork``; open a new
    one in the child.

    Restarts and lost connections (SPEC 9): everything the board acknowledged
    was committed, so it survives a server restart (``pg_ctl restart -m
    immediate`` included) as PostgreSQL's own durability allows. The board
    reconnects by itself: the call that meets a connection the server ended (a
    restart, ``pg_terminate_backend``) raises ``psycopg.OperationalError``, an
    infrastructure fault whose transaction committed or not, as PostgreSQL
    decided; that connection is closed, never given back, and the idle ones are
    closed with it (they most likely died in the same event), so the next call
    opens a new connection and works. The board does not probe idle connections
    before a call: whether a call meets a dead one then depends only on what
    happened to the server, not on when its notice arrived, so a test run
    replays alike. The connections carry ``application_name =
    "taskboard:<board_id>"``, so an operator can find them in
    ``pg_stat_activity`` (and end them).

    Text: PostgreSQL ``text`` cannot hold the NUL character. A task id with
    one is ``NotFoundError`` (no task can have it), a token with one is
    ``LeaseLostError`` (no lease has it), an agent name with one is a
    ``ValueError`` (checked where the empty name is), and initial tasks with
    one are a ``ValueError`` from the constructor.

    Expired leases (SPEC 3.4, a host's choice): this board **rejects**
    ``release``, ``complete`` and ``fail`` with ``LeaseLostError`` once the
    lease has expired (``now >= until``), even if the token is still current
    and nobody has taken over, as :class:`~taskboard.hosts.sqlite.SQLiteBoard`
    does: a holder's authority ends exactly when its lease does. The choice is
    exposed as :attr:`expired_lease_policy` (``"reject"``) so a test machine
    can pin it.

    Args:
        tasks: the initial tasks, stored as given if missing from the board
            (an initial lease's fence and token count as issued).
        clock: the only source of time this board reads: a
            :class:`~taskboard.Clock` (a ``ManualClock`` in tests), or
            ``"server"`` for the server's ``clock_timestamp()`` read after the
            row lock (no Python clock is read then). A board with ``"server"``
            cannot be tested with a manual clock: test it with the machine's
            wall-clock mode (SPEC section 7), e.g. from a ``make_board(tasks,
            clock)`` that ignores the ``SystemClock`` it is given.
        conninfo: a libpq connection string or ``postgresql://`` URL; the board
            opens (and at :meth:`close` closes) its own connections with it.
        board_id: attach to this board instead of making a new one
            (1-128 characters from ``A-Za-z0-9_.-``).
        delete_on_close: delete the board's rows at :meth:`close`; by default
            only when this instance made the board (``board_id`` not given),
            so one process leaving does not pull the board from under others.
        connections: connections to open now and keep open between calls: as
            many as the threads that will race on the board, so that they race
            on the row locks rather than on connecting (at least one; up to
            ``max(connections, 2)`` idle ones are kept).

    Raises:
        ValueError: two initial tasks share an id, an initial task holds a NUL
            character, ``board_id`` is malformed, ``connections`` < 1, or ``clock``
            is a string other than ``"server"``.
        psycopg.Error: the server could not be reached or refused a statement.
    """

    #: SPEC 3.4: release/complete/fail of an expired lease are LeaseLostError.
    expired_lease_policy: ClassVar[Literal["accept", "reject"]] = "reject"
    #: ``until`` is stored as exact integer microseconds since the epoch.
    clock_resolution: ClassVar[timedelta] = _MICROSECOND

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock | Literal["server"],
        conninfo: str,
        *,
        board_id: str | None = None,
        delete_on_close: bool | None = None,
        connections: int = 1,
    ) -> None:
        initial = list(tasks)
        seen: set[str] = set()
        for task in initial:
            if task.id in seen:
                raise ValueError(f"PostgresBoard: duplicate initial task id {task.id!r}")
            seen.add(task.id)
            _check_text(task)
        if board_id is not None and not _BOARD_ID.fullmatch(board_id):
            raise ValueError(
                f"PostgresBoard: board_id {board_id!r} must be 1-128 characters "
                "from A-Z, a-z, 0-9, '_', '.', '-'"
            )
        if connections < 1:
            raise ValueError(f"PostgresBoard: connections must be at least 1, got {connections}")
        if isinstance(clock, str) and clock != "server":
            raise ValueError(f"PostgresBoard: clock must be a Clock or 'server', got {clock!r}")
        self._clock = clock
        self._conninfo = conninfo
        self.board_id = secrets.token_hex(16) if board_id is None else board_id
        #: Delete the board's rows at close: by default, only if this instance created them.
        self.delete_on_close = board_id is None if delete_on_close is None else delete_on_close
        self._max_idle = max(connections, 2)
        self._lock = threading.Lock()  # guards _idle and _closed, never held during a query
        self._idle: list[Connection] = []
        self._closed = False
        try:
            for _ in range(connections):
                self._idle.append(self._open())
            with self._transaction() as conn:
                _create_schema(conn)
                # In id order, so constructors attaching at once wait on each other's
                # inserts in one order and cannot deadlock.
                for task in sorted(initial, key=lambda t: str(t.id)):
                    _insert_if_missing(conn, self.board_id, task)
        except BaseException:
            self._closed = True
            for conn in self._idle:
                conn.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresBoard(board_id={self.board_id!r}, clock={self._clock!r})"

    def _now(self, conn: Connection) -> int:
        """This board's now, in microseconds since the epoch; call it once the row is locked.

        With ``clock="server"`` it is the server's ``clock_timestamp()``, read by a
        statement of its own after ``SELECT ... FOR UPDATE`` returned: the real time at
        that moment. Not ``now()`` (nor ``CURRENT_TIMESTAMP``): that is the transaction's
        start, fixed before the lock wait, so after waiting for another transaction's
        lock it can lie before the instant that transaction committed, and time would
        run backwards across the two (a lease that transaction saw expire could look
        live again, and an ``until`` computed from it would be dated before the write it
        follows). Not ``clock_timestamp()`` in the locking ``SELECT`` itself either: its
        target list is evaluated below the row-locking step, so possibly before the
        wait. ``extract(epoch ...)`` of a ``timestamptz`` is ``numeric`` (PostgreSQL
        14+), exact to the microsecond the type holds, so the ``bigint`` is exact.
        """
        if isinstance(self._clock, str):  # "server"
            row = conn.execute(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
            ).fetchone()
            assert row is not None
            return cast(int, row[0])
        return _micros(self._clock.now())

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
        """Another client of this board (SPEC 8), as another process would open it.

        A new board of the same class on the same ``conninfo`` and ``board_id``, with
        connections of its own, attached (it inserts no tasks), with
        ``delete_on_close=False`` and the same clock. Closing it closes only its own
        connections; the board stays.

        Raises:
            psycopg.Error: the server could not be reached.
        """
        return type(self)(
            (), self._clock, self._conninfo, board_id=self.board_id, delete_on_close=False
        )

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the board's address: unpickling opens a new client, as
        :meth:`open_client` does (``delete_on_close=False``)."""
        return (_attach, (type(self), self._conninfo, self.board_id, self._clock))

    def close(self) -> None:
        """Delete the board's rows (see ``delete_on_close``) and close its connections;
        idempotent. Any later operation raises ``RuntimeError``.

        Connections in use by calls still running are closed as those calls return. The
        delete runs on a live connection: an idle one the server ended is not used, and
        one that breaks during the delete is replaced once (deleting twice is deleting).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
        try:
            if self.delete_on_close:
                live = [conn for conn in idle if _alive(conn)]
                if not live:
                    idle.append(self._open())
                    live = idle[-1:]
                try:
                    self._delete_rows(live[0])
                except psycopg.OperationalError:
                    if not live[0].closed:
                        raise
                    idle.append(self._open())
                    self._delete_rows(idle[-1])
        finally:
            for conn in idle:
                conn.close()

    def _delete_rows(self, conn: Connection) -> None:
        with conn.transaction():
            # The leases go with their tasks (ON DELETE CASCADE).
            conn.execute("DELETE FROM taskboard_tasks WHERE board_id = %s", (self.board_id,))

    def list_tasks(self) -> list[Task]:
        """Return a consistent snapshot of every task, sorted by id (SPEC 3.7)."""
        with self._connection() as conn:
            # One statement sees one snapshot, whatever else commits meanwhile.
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM taskboard_tasks WHERE board_id = %s"
                ' ORDER BY id COLLATE "C"',
                (self.board_id,),
            ).fetchall()
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
            ValueError: ``agent`` is empty or holds a NUL character (checked last).
        """
        with self._transaction() as conn:
            task = _lock_task(conn, self.board_id, task_id)
            now = self._now(conn)
            if task.state == State.DONE:
                raise TerminalError(f"task {task_id!r} is done; done is forever")
            if task.deps:
                # Not locked: DONE is terminal, so what this one statement saw DONE stays so.
                found: dict[str, str] = dict(
                    conn.execute(
                        "SELECT id, state FROM taskboard_tasks"
                        " WHERE board_id = %s AND id = ANY(%s)",
                        (self.board_id, list(task.deps)),
                    ).fetchall()
                )
                for dep in task.deps:
                    state = found.get(dep)
                    if state != State.DONE:
                        shown = "unknown" if state is None else state
                        raise BlockedError(f"task {task_id!r} waits for {dep!r} ({shown})")
            if task.state == State.CLAIMED and _live(task.lease, now):
                raise TakenError(f"task {task_id!r} is held by a live lease of {task.owner!r}")
            if not agent:
                raise ValueError("claim needs a non-empty agent name")
            if "\x00" in agent:
                raise ValueError("PostgresBoard: an agent name cannot hold a NUL character")
            # Only claims write leases, and each holds the task's row lock: this max is stable.
            row = conn.execute(
                "SELECT COALESCE(MAX(fence), 0) FROM taskboard_leases"
                " WHERE board_id = %s AND task_id = %s",
                (self.board_id, task_id),
            ).fetchone()
            issued: int = 0 if row is None else row[0]
            current = task.lease.fence if task.lease is not None else 0
            fence = max(issued, current) + 1
            token = _mint(conn, self.board_id, task_id, fence, agent, now)
            return _update(
                conn,
                self.board_id,
                "state = %s, owner = %s, lease_token = %s, lease_fence = %s, lease_until = %s",
                (State.CLAIMED.value, agent, token, fence, _until(now, request.ttl)),
                task_id,
            )

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Recompute the lease's ``until`` from this board's clock (SPEC 3.5): the injected
        clock, or ``clock_timestamp()`` with ``clock="server"``.

        Token, fence and owner stay; ``seq`` grows.

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired.
        """
        with self._transaction() as conn:
            task = _lock_task(conn, self.board_id, task_id)
            now = self._now(conn)
            _check_holder(task, token, now)
            return _update(
                conn, self.board_id, "lease_until = %s", (_until(now, request.ttl),), task_id
            )

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
            task = _lock_task(conn, self.board_id, task_id)
            now = self._now(conn)
            _check_holder(task, token, now)  # SPEC 3.4 "reject": an expired lease is lost
            _update(
                conn,
                self.board_id,
                "state = %s, owner = '', lease_token = NULL, lease_fence = NULL,"
                " lease_until = NULL",
                (state.value,),
                task_id,
            )

    # -- connections -----------------------------------------------------------------------

    def _open(self) -> Connection:
        conn = psycopg.connect(
            self._conninfo,
            autocommit=True,  # the board opens its transactions itself, with conn.transaction()
            application_name=f"taskboard:{self.board_id}",
        )
        # Pinned, whatever the server's default: row locks, not retries, give atomicity.
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        return conn

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """An idle connection, or a new one, for this thread alone until the block ends."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            self._give_back(conn)

    def _give_back(self, conn: Connection) -> None:
        """Keep ``conn`` for the next call if it is idle and healthy; else close it. A broken
        one (the server ended it) takes the idle ones with it: a restart or a
        ``pg_terminate_backend`` of the board's backends most likely ended them too."""
        reusable = not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE
        dead: list[Connection] = []
        with self._lock:
            if reusable and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
            if conn.closed:
                dead, self._idle = self._idle, []
        conn.close()
        for stale in dead:
            stale.close()

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One transaction: commit on return, roll back on any exception."""
        with self._connection() as conn, conn.transaction():
            yield conn


# -- statements, each inside a transaction the caller holds ------------------------------


def _lock_task(conn: Connection, board_id: str, task_id: str) -> Task:
    """Board ``board_id``'s task's row, locked ``FOR UPDATE`` until the transaction ends."""
    row = None
    if "\x00" not in task_id:  # text cannot hold NUL, so no stored id has one
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM taskboard_tasks WHERE board_id = %s AND id = %s FOR UPDATE",
            (board_id, task_id),
        ).fetchone()
    if row is None:
        raise NotFoundError(f"no task has id {task_id!r}")
    return _task(cast(_TaskRow, row))


def _update(
    conn: Connection, board_id: str, assignments: str, values: tuple[Any, ...], task_id: str
) -> Task:
    """Apply ``assignments`` to the (locked) task, grow its seq, and return it as stored."""
    row = conn.execute(
        f"UPDATE taskboard_tasks SET {assignments}, seq = seq + 1"
        f" WHERE board_id = %s AND id = %s RETURNING {_COLUMNS}",
        (*values, board_id, task_id),
    ).fetchone()
    assert row is not None, "the row is locked by this transaction"
    return _task(cast(_TaskRow, row))


def _mint(conn: Connection, board_id: str, task_id: str, fence: int, agent: str, now: int) -> str:
    """Record a new lease in the history; the UNIQUE token refuses any reuse."""
    for _ in range(_MINT_ATTEMPTS):
        token = secrets.token_hex(16)
        # Only a repeated token is skipped: a repeated fence would be a bug, and raises.
        row = conn.execute(
            "INSERT INTO taskboard_leases (board_id, task_id, fence, token, agent, issued_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (board_id, token) DO NOTHING RETURNING token",
            (board_id, task_id, fence, token, agent, now),
        ).fetchone()
        if row is not None:
            return token
    raise RuntimeError(f"board {board_id!r}: could not mint an unused token")


def _insert_if_missing(conn: Connection, board_id: str, task: Task) -> None:
    lease = task.lease
    inserted = conn.execute(
        f"INSERT INTO taskboard_tasks (board_id, {_COLUMNS})"
        " VALUES (%s, %s, %s, %s::text[], %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (board_id, id) DO NOTHING RETURNING id",
        (
            board_id,
            task.id,
            task.title,
            list(task.deps),
            str(task.state),
            task.owner,
            None if lease is None else lease.token,
            None if lease is None else lease.fence,
            None if lease is None or lease.until is None else _micros(lease.until),
            task.seq,
        ),
    ).fetchone()
    if inserted is not None and lease is not None:
        conn.execute(
            "INSERT INTO taskboard_leases (board_id, task_id, fence, token, agent, issued_at)"
            " VALUES (%s, %s, %s, %s, %s, NULL) ON CONFLICT DO NOTHING",
            (board_id, task.id, lease.fence, lease.token, task.owner),
        )


def _attach(
    cls: type[_Board], conninfo: str, board_id: str, clock: Clock | Literal["server"]
) -> _Board:
    """Unpickle a board: a new client of board ``board_id`` on ``conninfo`` (SPEC 8)."""
    return cls((), clock, conninfo, board_id=board_id, delete_on_close=False)


def _alive(conn: Connection) -> bool:
    """Whether an idle connection may still be used: open, and nothing waiting to be read
    (:meth:`PostgresBoard.close` picks such a one for its delete).

    Between calls the server sends a connection nothing (the board runs no ``LISTEN``),
    unless it ends it: ``pg_terminate_backend`` and a shutdown send an error and close
    the socket, which makes it readable. The check is a ``select`` with no timeout: no
    round trip. It cannot see a death whose notice has not arrived yet.
    """
    if conn.closed:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _create_schema(conn: Connection) -> None:
    """Create the shared tables if missing; safe when several processes do it at once."""
    row = conn.execute(
        "SELECT to_regclass('taskboard_tasks') IS NOT NULL"
        " AND to_regclass('taskboard_leases') IS NOT NULL"
    ).fetchone()
    if row is not None and row[0]:
        return
    # Two concurrent CREATE TABLE IF NOT EXISTS of one name can both miss it and one then
    # fails; the lock, held to the end of the transaction, makes them take turns.
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
    for statement in _SCHEMA:
        conn.execute(statement)


def _check_text(task: Task) -> None:
    """Refuse an initial task PostgreSQL text cannot store (it has no NUL character)."""
    lease = task.lease
    texts = [task.id, task.title, str(task.state), task.owner, *task.deps]
    if lease is not None:
        texts.append(lease.token)
    for text in texts:
        if isinstance(text, str) and "\x00" in text:
            raise ValueError(
                f"PostgresBoard: initial task {task.id!r} holds a NUL character, "
                "which PostgreSQL text cannot store"
            )


def _task(row: _TaskRow) -> Task:
    id_, title, deps, state, owner, token, fence, until, seq = row
    lease = None
    if token is not None and fence is not None:
        lease = Lease(token=token, fence=fence, until=None if until is None else _datetime(until))
    # An unknown state string is kept as is: reporting it is check()'s job.
    known = _STATES.get(state, cast(State, state))
    return Task(
        id=id_,
        title=title,
        deps=tuple(deps),
        state=known,
        owner=owner,
        lease=lease,
        seq=seq,
    )


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
