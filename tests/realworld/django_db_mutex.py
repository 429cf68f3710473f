"""django-db-mutex's ``db_mutex`` on SQLite, as released: ``tests.realworld.django_db_mutex:board``.

Whichever django-db-mutex is first on ``sys.path`` is the one tested, on Django 4.2 with
Django's own defaults for time: ``USE_TZ = True`` (the default since Django 5.0) and
``TIME_ZONE`` left unset, which is ``'America/Chicago'``. A lock is a ``DBMutex`` row
(``lock_id`` unique, ``creation_time`` stamped by Django with ``timezone.now()``). Before it
inserts its row, ``db_mutex(name).start()`` deletes every row older than the
``DB_MUTEX_TTL_SECONDS`` setting; a row it cannot insert (``IntegrityError``) is
``DBMutexError``. ``stop()`` deletes its own row by primary key, or raises
``DBMutexTimeoutError`` when that row is gone (it expired and a waiter deleted it).

The bug (ambitioninc/django-db-mutex #22, fixed by PR #34, commit f71a140, "Fixes #22 by
using django.utils.timezone.now()", first released in 0.2.3): up to 0.2.2 the deletion
compares ``creation_time`` with ``datetime.utcnow() - ttl``, a naive UTC time. Django reads
a naive time in ``TIME_ZONE``, so with any zone west of UTC the cut-off lies hours in the
future and the next waiter deletes a *live* lock and takes it: two holders. (East of UTC,
expired locks stay for hours.) 0.2.3 compares with ``timezone.now() - ttl``.

How the driver asks the library:

* **one database per task.** The TTL is a setting and the deletion is not per lock: a
  waiter deletes every row older than *its* TTL. So that each lease ends when its own ttl
  says (SPEC 2), every task's lock lives in a SQLite file of its own (a Django database
  alias, chosen by a database router), and the waiter runs with the TTL of the lease the
  record shows (``prior``; ``None``, no expiry, when it shows none), as filelock's adapter
  does with ``lifetime``. A user with one TTL per database gets the same behaviour.
* **claim**: ``db_mutex(task_id).start()``; ``DBMutexError`` is "held".
* **until**: the row's ``creation_time`` + ttl: the instant from which a waiter with that
  TTL deletes it (``creation_time__lte``). Python's clock, so the default 1 ms skew.
* **release**: ``stop()``; ``DBMutexTimeoutError`` is a refusal. A row that expired and
  that no waiter deleted is still this lock's, and ``stop()`` deletes it: SPEC 3.4 accept.

Django 1.9 and later refuse both releases in ``INSTALLED_APPS`` (the package imports its
model from ``__init__``, before the app registry is ready; 0.2.x was written for Django
1.7 and 1.8), so the app is registered by hand once Django is set up, the same way for
both. Renewal: not offered (``db_mutex`` has no extend). Django is pinned next to the
library (``Entry.pins``).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import itertools
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import django
from django.apps import AppConfig, apps
from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

from taskboard import Clock, Task
from tests.realworld.records import RecordBoard, Refused, board_for, in_process_virtual_machine

__all__ = ["DbMutexDriver", "board"]

#: The database alias the library's queries go to (set around each call into it).
_ALIAS: contextvars.ContextVar[str] = contextvars.ContextVar("db_mutex_alias", default="default")
_BOARDS = itertools.count(1)


class _Router:
    """Sends every query to the database of the task being claimed or released."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return _ALIAS.get()

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return _ALIAS.get()


def _unsynced(sender: Any, connection: Any, **kwargs: Any) -> None:
    """No fsync per commit on a task's database (a throwaway file): about 1 ms a claim
    instead of 10-30 ms, so that leases of a few ms are not over before the call returns."""
    if connection.alias.startswith("realworld-"):
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA synchronous = OFF")


def _setup() -> Any:
    """Django configured (once per process) and the ``db_mutex`` app registered; the
    library's module."""
    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=[],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            DATABASE_ROUTERS=[_Router()],
            USE_TZ=True,
        )
        django.setup()
        connection_created.connect(_unsynced)
    if "db_mutex" not in apps.app_configs:
        spec = importlib.util.find_spec("db_mutex")
        assert spec is not None
        assert spec.origin is not None

        class _Config(AppConfig):
            path = str(Path(spec.origin).parent)

        config = _Config("db_mutex", None)
        config.apps = apps
        config.models = apps.all_models["db_mutex"]
        apps.app_configs["db_mutex"] = config
        apps.clear_cache()
        config.models_module = importlib.import_module("db_mutex.models")
    return importlib.import_module("db_mutex.db_mutex")


_LIBRARY = _setup()
import db_mutex  # noqa: E402  (needs the registered app)
from db_mutex.models import DBMutex  # noqa: E402


@dataclass
class _Held:
    mutex: Any
    alias: str
    #: The lease's length in seconds, ``None`` for no expiry: the TTL the next waiter uses.
    ttl: float | None


class DbMutexDriver:
    """A :class:`~tests.realworld.records.LockDriver` over django-db-mutex's ``db_mutex``."""

    def __init__(self, task_ids: Sequence[str]) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="realworld-db-mutex-"))
        board = next(_BOARDS)
        self._aliases = {task_id: f"realworld-{board}-{i}" for i, task_id in enumerate(task_ids)}
        for alias in self._aliases.values():
            configured = connections.configure_settings(
                {
                    "default": {"ENGINE": "django.db.backends.dummy"},
                    alias: {
                        "ENGINE": "django.db.backends.sqlite3",
                        "NAME": str(self.directory / f"{alias}.sqlite3"),
                    },
                }
            )
            connections.settings[alias] = configured[alias]
            with connections[alias].schema_editor() as editor:
                editor.create_model(DBMutex)

    def __repr__(self) -> str:
        return f"DbMutexDriver(django-db-mutex {db_mutex.__version__}, {str(self.directory)!r})"

    def acquire(self, name: str, ttl: timedelta, prior: Any | None) -> Any | None:
        alias = self._aliases[name]
        settings.DB_MUTEX_TTL_SECONDS = None if prior is None else prior.ttl
        mutex = _LIBRARY.db_mutex(name)
        try:
            self._call(alias, mutex.start)
        except db_mutex.DBMutexError:
            return None
        return _Held(mutex, alias, ttl.total_seconds() or None)

    def release(self, handle: Any) -> None:
        try:
            self._call(handle.alias, handle.mutex.stop)
        except db_mutex.DBMutexTimeoutError as exc:
            raise Refused(f"DBMutexTimeoutError: {exc}") from exc

    def until(self, handle: Any, ttl: timedelta) -> datetime | None:
        created: datetime = handle.mutex.lock.creation_time
        return created + ttl

    def close(self) -> None:
        for alias in self._aliases.values():
            connections[alias].close()
            with contextlib.suppress(AttributeError):  # no connection in this thread
                del connections[alias]
            connections.settings.pop(alias, None)
        shutil.rmtree(self.directory, ignore_errors=True)

    @staticmethod
    def _call(alias: str, function: Any) -> None:
        token = _ALIAS.set(alias)
        try:
            with warnings.catch_warnings():
                # 0.2.2 hands Django a naive datetime: the bug itself, not worth a warning.
                warnings.simplefilter("ignore", RuntimeWarning)
                function()
        finally:
            _ALIAS.reset(token)


def _warm_up() -> None:
    """One claim and release on a scratch database when the module loads, so that Django's
    first query in the process (tens of ms) does not eat into an example's first lease."""
    driver = DbMutexDriver(["warm-up"])
    try:
        driver.release(driver.acquire("warm-up", timedelta(0), None))
    finally:
        driver.close()


_warm_up()


def board(tasks: Sequence[Task], clock: Clock) -> RecordBoard:
    """A board over the installed django-db-mutex, one fresh SQLite file per task; the clock
    is ignored (Django stamps ``creation_time`` with ``timezone.now()``)."""
    return board_for(tasks, DbMutexDriver([task.id for task in tasks]))


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = timedelta(microseconds=1)  # type: ignore[attr-defined]
#: An expired row that no waiter deleted is still this lock's: its release deletes it.
board.expired_lease_policy = "accept"  # type: ignore[attr-defined]

#: The same board in virtual mode: the library's ``time.time()`` and ``datetime.now()`` read
#: the machine's clock during its calls; no server (its locks are in SQLite in this process):
#: ``taskboard fuzz tests.realworld.django_db_mutex:virtual --clock virtual``.
virtual = in_process_virtual_machine(board)


def _repro() -> None:
    """``python -m tests.realworld.django_db_mutex`` with a release first on ``PYTHONPATH``:
    two ``db_mutex('job')`` 10 ms apart under a 60 s TTL, as a user would call them."""
    driver = DbMutexDriver(["job"])
    alias = driver._aliases["job"]
    settings.DB_MUTEX_TTL_SECONDS = 60
    print(f"django-db-mutex {db_mutex.__version__}, TIME_ZONE {settings.TIME_ZONE}, TTL 60 s")
    try:
        first, second = _LIBRARY.db_mutex("job"), _LIBRARY.db_mutex("job")
        driver._call(alias, first.start)
        print(f"A holds 'job' from {first.lock.creation_time}")
        time.sleep(0.01)
        try:
            driver._call(alias, second.start)
            print(f"B holds 'job' from {second.lock.creation_time} too: two holders")
        except db_mutex.DBMutexError as exc:
            print(f"B is refused: DBMutexError: {exc}")
        try:
            driver._call(alias, first.stop)
            print("A releases 'job'")
        except db_mutex.DBMutexTimeoutError as exc:
            print(f"A's release: DBMutexTimeoutError: {exc}")
    finally:
        driver.close()


if __name__ == "__main__":
    _repro()
