"""No server: virtual mode for a library that keeps time in the checker's own process."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

__all__ = ["NoServer"]

_EARLIEST = datetime.min.replace(tzinfo=UTC)


class NoServer:
    """The ``server`` of a virtual-mode machine whose board keeps time in this process only:
    a library that reads ``time.time()``, ``datetime.now()`` or ``datetime.utcnow()`` and keeps
    its locks in memory or in SQLite in this process. Its calls read the machine's clock (see
    ``docs/wall-clock.md``); nothing outside the process is moved::

        class MyMachine(BoardMachine):
            clock_mode = "virtual"
            server = taskboard.servers.NoServer()

    It starts nothing and runs anywhere time-machine does. A file's timestamps are the
    kernel's clock, not this one: a library that judges a lease by a file's ``st_mtime``
    (filelock's ``SoftFileLock``) stays in wall mode.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = _EARLIEST

    def __repr__(self) -> str:
        return "NoServer()"

    def now(self) -> datetime:
        """The last instant :meth:`set_time` moved to (the earliest datetime before any)."""
        with self._lock:
            return self._now

    def set_time(self, when: datetime) -> None:
        """Remember ``when`` (aware) as the time; the clock never goes back.

        Raises:
            ValueError: ``when`` is naive, or before :meth:`now`.
        """
        if when.tzinfo is None:
            raise ValueError(f"NoServer.set_time takes an aware datetime, got {when!r}")
        with self._lock:
            if when < self._now:
                raise ValueError(
                    f"the clock never goes back: {when.isoformat()} is before "
                    f"{self._now.isoformat()}"
                )
            self._now = when

    def flush(self) -> None:
        """Nothing to empty: each example's board is made anew in this process."""
