"""Scheduling points at the storage round trips the checker can see, for a controlled race.

While :func:`round_trip_points` is in force, these reach :func:`taskboard._schedule.round_trip`
before they go to the store:

* **sqlite3**: each statement (``execute``, ``executemany``, ``executescript`` of a
  connection or a cursor) and each ``commit`` and ``rollback`` of a connection opened by
  ``sqlite3.connect`` inside the block. Such a connection's busy timeout is taken over: it
  runs with none, and a statement that finds the database locked waits at its point for
  another participant to make progress, then tries again (outside a controlled race it
  sleeps and tries again until the timeout the board asked for, as SQLite would have).
  Connections opened before the block, or with a ``factory`` of the board's own, have no
  points.
* **redis-py**, sync and asyncio (``redis.asyncio``): each command a client sends, each
  command a pipeline sends at once (``WATCH`` and the reads after it), and each pipeline's
  ``execute``. An asyncio command's point awaits its turn on the event loop it runs on
  (:func:`taskboard._schedule.async_round_trip`), so the loop goes on running the others.
* **psycopg 3** (sync): each cursor's ``execute`` and ``executemany`` (a connection's
  ``execute`` goes through one), each ``commit`` and ``rollback``. While a statement runs,
  the scheduler may ask the server whether it waits on another's lock
  (``pg_blocking_pids`` of its backend, from a monitor connection of the block's own).

Every point is a no-op outside a controlled race's participants, so the patches are safe
for the rest of the process while they last. Modules a board never imported are not
imported here.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from taskboard._schedule import async_round_trip, note_lock_probe, round_trip, under_control

__all__ = ["round_trip_points"]

T = TypeVar("T")

#: How long a statement that found SQLite busy sleeps before it tries again, outside control.
_BUSY_SLEEP = 0.002
_BUSY_PRAGMA = re.compile(r"\s*PRAGMA\s+busy_timeout\s*=\s*(\d+)\s*;?\s*$", re.IGNORECASE)
#: The longest a point's label gets in reports.
_LABEL_LENGTH = 120


def _label(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _LABEL_LENGTH else flat[: _LABEL_LENGTH - 3] + "..."


# -- sqlite3 ---------------------------------------------------------------------------------


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:
        return "database is locked" in str(error)
    return bool(code & 0xFF == sqlite3.SQLITE_BUSY)


def _statement(connection: _Connection, point: str, run: Callable[[], T]) -> T:
    """Run one round trip to SQLite at its scheduling point, retried while the database is
    busy: at the point again in a controlled race, else until the board's busy timeout."""
    busy: sqlite3.OperationalError | None = None
    give_up_at: float | None = None
    while True:
        if under_control():
            if not round_trip(point, busy=busy is not None):
                assert busy is not None
                raise busy
        elif busy is not None:
            if give_up_at is None:
                give_up_at = time.monotonic() + connection.taskboard_busy_timeout
            if time.monotonic() >= give_up_at:
                raise busy
            time.sleep(_BUSY_SLEEP)
        try:
            return run()
        except sqlite3.OperationalError as error:
            if not _is_busy(error):
                raise
            busy = error


class _Cursor(sqlite3.Cursor):
    """A cursor whose statements are scheduling points."""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        connection = self.connection
        assert isinstance(connection, _Connection)
        sent = connection.taskboard_own_pragma(sql)
        return _statement(
            connection, _label(sql), lambda: sqlite3.Cursor.execute(self, sent, parameters)
        )

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _Cursor:
        connection = self.connection
        assert isinstance(connection, _Connection)
        return _statement(
            connection,
            _label(sql),
            lambda: sqlite3.Cursor.executemany(self, sql, seq_of_parameters),
        )

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        connection = self.connection
        assert isinstance(connection, _Connection)
        return _statement(
            connection, _label(sql_script), lambda: sqlite3.Cursor.executescript(self, sql_script)
        )


class _Connection(sqlite3.Connection):
    """A connection whose statements, commits and rollbacks are scheduling points, and whose
    busy timeout the points keep (SQLite itself is told to wait for nobody)."""

    taskboard_busy_timeout = 5.0

    def taskboard_own_pragma(self, sql: str) -> str:
        """A ``PRAGMA busy_timeout = N`` sets the timeout the points keep; SQLite's stays 0."""
        match = _BUSY_PRAGMA.match(sql)
        if match is None:
            return sql
        self.taskboard_busy_timeout = int(match.group(1)) / 1000
        return "PRAGMA busy_timeout = 0"

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> Any:
        return self.cursor().executescript(sql_script)

    def commit(self) -> None:
        _statement(self, "COMMIT", lambda: sqlite3.Connection.commit(self))

    def rollback(self) -> None:
        _statement(self, "ROLLBACK", lambda: sqlite3.Connection.rollback(self))

    def __exit__(self, kind: object, value: object, traceback: object) -> Literal[False]:
        # As sqlite3's own: commit on success, roll back on an exception; here at points.
        if kind is None:
            self.commit()
        else:
            self.rollback()
        return False


def _scheduled_connect(original: Callable[..., sqlite3.Connection]) -> Callable[..., Any]:
    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if len(args) > 3 or kwargs.get("factory", sqlite3.Connection) is not sqlite3.Connection:
            return original(database, *args, **kwargs)  # a factory of the board's own
        timeout = kwargs.pop("timeout", args[0] if args else 5.0)
        connection = original(database, 0.0, *args[1:], factory=_Connection, **kwargs)
        assert isinstance(connection, _Connection)
        connection.taskboard_busy_timeout = float(timeout)
        return connection

    return connect


# -- redis-py and psycopg --------------------------------------------------------------------


def _redis_label(args: tuple[Any, ...]) -> str:
    words = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in args[:4]]
    return _label(" ".join(words) + (" ..." if len(args) > 4 else ""))


def _pointed(original: Callable[..., Any], label: Callable[..., str]) -> Callable[..., Any]:
    """``original`` (a method) with a scheduling point before it, labelled by ``label``."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if under_control():
            round_trip(label(self, *args, **kwargs))
        return original(self, *args, **kwargs)

    method.__wrapped__ = original  # type: ignore[attr-defined]
    return method


def _async_pointed(original: Callable[..., Any], label: Callable[..., str]) -> Callable[..., Any]:
    """``original`` (a coroutine method) with a scheduling point before it, awaited."""

    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        await async_round_trip(label(self, *args, **kwargs))
        return await original(self, *args, **kwargs)

    method.__wrapped__ = original  # type: ignore[attr-defined]
    return method


def _redis_patches() -> list[tuple[Any, str, Callable[..., Any]]]:
    """The points of redis-py's clients and pipelines, sync and asyncio, when imported."""
    patches: list[tuple[Any, str, Callable[..., Any]]] = []
    for module, wrap in (("redis.client", _pointed), ("redis.asyncio.client", _async_pointed)):
        client = sys.modules.get(module)
        if client is None:
            continue
        redis_cls, pipeline = getattr(client, "Redis", None), getattr(client, "Pipeline", None)
        if redis_cls is not None:
            name = (
                "_execute_command" if hasattr(redis_cls, "_execute_command") else "execute_command"
            )
            commands = _defining(redis_cls, name)
            patches.append((commands, name, wrap(getattr(commands, name), _command_label)))
        if pipeline is not None:
            for name, label in (
                ("immediate_execute_command", _command_label),
                ("execute", _pipeline_label),
            ):
                if hasattr(pipeline, name):
                    sends = _defining(pipeline, name)
                    patches.append((sends, name, wrap(getattr(sends, name), label)))
    return patches


def _psycopg_statement(original: Callable[..., Any]) -> Callable[..., Any]:
    """A psycopg cursor method with a scheduling point before it, and a lock probe for the
    scheduler while it runs."""

    def method(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if not under_control():
            return original(self, query, *args, **kwargs)
        round_trip(_psycopg_label(self, query))
        note_lock_probe(_lock_probe(self.connection))
        return original(self, query, *args, **kwargs)

    method.__wrapped__ = original  # type: ignore[attr-defined]
    return method


class _LockMonitor:
    """Connections of the block's own, one per server address, that ask PostgreSQL whether
    a backend waits on another's lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[str, Any] = {}

    def blocked(self, address: str, pid: int) -> bool:
        """Whether backend ``pid`` of the server at ``address`` (a libpq connection string)
        waits on a lock; False when the server cannot be asked."""
        with self._lock:
            try:
                monitor = self._connections.get(address)
                if monitor is None or monitor.closed:
                    monitor = sys.modules["psycopg"].connect(address, autocommit=True)
                    self._connections[address] = monitor
                row = monitor.pgconn.exec_(
                    f"SELECT cardinality(pg_blocking_pids({int(pid)})) > 0".encode()
                )
                return bool(row.get_value(0, 0) == b"t")
            except Exception:  # a monitor that fails says nothing: the step timeout decides
                return False

    def close(self) -> None:
        with self._lock:
            for monitor in self._connections.values():
                monitor.close()
            self._connections.clear()


_MONITOR = _LockMonitor()


def _lock_probe(connection: Any) -> Callable[[], bool] | None:
    """How to ask whether ``connection``'s statement waits on a lock; None: it cannot be."""
    try:
        info = connection.info
        pid = info.backend_pid
        address = sys.modules["psycopg"].conninfo.make_conninfo(info.dsn, password=info.password)
    except Exception:  # a closed or broken connection: its statement fails at once anyway
        return None
    return lambda: _MONITOR.blocked(address, pid)


def _command_label(self: Any, *args: Any, **kwargs: Any) -> str:
    return _redis_label(args)


def _pipeline_label(self: Any, *args: Any, **kwargs: Any) -> str:
    commands = [_redis_label(tuple(args[0][:2])) for args in getattr(self, "command_stack", [])]
    return _label("pipeline: " + "; ".join(commands))


def _psycopg_label(self: Any, query: Any = "", *args: Any, **kwargs: Any) -> str:
    return _label(query if isinstance(query, str) else repr(query))


def _patches() -> list[tuple[Any, str, Callable[..., Any]]]:
    """Each (owner, attribute, replacement) to install for the imported stores."""
    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (sqlite3, "connect", _scheduled_connect(sqlite3.connect))
    ]
    patches += _redis_patches()
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        for owner, names in (
            (getattr(psycopg, "Cursor", None), ("execute", "executemany")),
            (getattr(psycopg, "Connection", None), ("commit", "rollback")),
        ):
            for name in names:
                if owner is None or not hasattr(owner, name):
                    continue
                original = getattr(owner, name)
                if name.startswith("execute"):
                    patches.append((owner, name, _psycopg_statement(original)))
                else:
                    patches.append((owner, name, _pointed(original, _fixed(name.upper()))))
    return patches


def _defining(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO that defines ``name``: redis-py 2.x's ``Redis`` inherits its
    commands from ``StrictRedis``, and its ``Pipeline`` from ``BasePipeline``, which the
    ``StrictRedis`` clients and pipelines that most code makes share."""
    return next((c for c in cls.__mro__ if name in c.__dict__), cls)


def _fixed(text: str) -> Callable[..., str]:
    return lambda *args, **kwargs: text


_INSTALLED: list[tuple[Any, str, Any]] = []
_USERS = 0
_LOCK = threading.Lock()


@contextlib.contextmanager
def round_trip_points() -> Iterator[None]:
    """Install the scheduling points for the block (nested blocks share one installation)."""
    global _USERS
    with _LOCK:
        if _USERS == 0:
            for owner, name, replacement in _patches():
                _INSTALLED.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
                setattr(owner, name, replacement)
        _USERS += 1
    try:
        yield
    finally:
        with _LOCK:
            _USERS -= 1
            if _USERS == 0:
                while _INSTALLED:
                    owner, name, original = _INSTALLED.pop()
                    setattr(owner, name, original)
                _MONITOR.close()
