"""PostgreSQL on the checker's clock: a throwaway cluster (``initdb``), from the machine's own
binaries, whose ``postgres`` runs under the virtual clock's preload library."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from taskboard._virtual._servers import (
    STARTUP_TIMEOUT,
    ServerStartError,
    _Launch,
    _log_tail,
    _Server,
)

__all__ = ["Postgres"]

#: Settings for a server whose wall clock jumps. PostgreSQL arms its statement, lock and idle
#: timeouts from ``gettimeofday`` (utils/misc/timeout.c): a timer that fires checks the wall
#: clock, so one forward jump of the virtual clock would fire every armed timeout at once
#: (and a clock that stands still would never fire them). They are off. The checkpointer and
#: the autovacuum launcher schedule themselves by the wall clock too: a jump would start a
#: checkpoint or a vacuum in the middle of a call, so autovacuum is off and checkpoints wait
#: a day. ``deadlock_timeout`` is armed the same way and stays: while the clock stands a
#: lock wait is never checked for a deadlock (a board that deadlocks hangs until its call
#: timeout), and a jump only checks early, which is harmless. Nothing here is durable
#: (``fsync=off``), and only loopback listens.
_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "idle_session_timeout": "0",
    "checkpoint_timeout": "1d",
    "autovacuum": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}


#: The statements that empty every table of the ``public`` schema and restart each of its
#: sequences: what :meth:`Postgres.flush` runs.
_EMPTYING = """
SELECT array(SELECT format('DELETE FROM %I.%I', schemaname, tablename) FROM pg_tables
             WHERE schemaname = 'public')
    || array(SELECT format('SELECT setval(%L, 1, false)', format('%I.%I', schemaname, sequencename))
             FROM pg_sequences WHERE schemaname = 'public')
"""


def _bindir(bindir: str | None) -> Path:
    """The directory of ``initdb`` and ``postgres``: ``bindir``, else the one of ``postgres``
    on PATH, else Debian's newest ``/usr/lib/postgresql/*/bin``."""
    if bindir is not None:
        return Path(bindir)
    on_path = shutil.which("postgres")
    if on_path is not None:
        return Path(on_path).parent
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(Path(path).parent.name) if Path(path).parent.name.isdigit() else 0,
    )
    return Path(debian[-1]) if debian else Path("/usr/lib/postgresql/bin")


class Postgres(_Server[Any]):
    """A PostgreSQL server of its own whose clock the checker moves: a new cluster in a
    temporary directory, on a free loopback port, with no durability.

    Name it as a machine's ``server`` with ``clock_mode = "virtual"`` and connect the board
    to :attr:`url` (``postgresql://postgres@127.0.0.1:<port>/postgres``, trusted: no
    password)::

        class MyMachine(BoardMachine):
            clock_mode = "virtual"
            server = taskboard.servers.Postgres()
            def make_board(self, tasks, clock):
                return MyBoard(self.server.url, tasks)

    Making one starts nothing: the server starts on first use and stops on every way out
    (see :mod:`taskboard.servers`). ``now()``, ``clock_timestamp()``,
    ``statement_timestamp()`` and every other wall-clock read of the server are the virtual
    clock: they stand still until :meth:`set_time` moves them. Its timeouts are off (a jump
    would fire them all); its latches and waits stay on the real monotonic clock, except
    ``pg_sleep``, which counts by the wall clock and so never ends while the clock stands.
    As root, it runs as ``user`` (``postgres``: PostgreSQL refuses root). Linux only; needs
    psycopg 3 (``pip install 'taskboard-contract[postgres]'``) and a C compiler once.

    Raises (on first use):
        ServerStartError: ``initdb`` or ``postgres`` is missing, exited, or did not answer;
            as root, no ``user`` account; or no psycopg.
        VirtualClockUnavailable: not Linux, or no C compiler to build the preload library.
    """

    def __init__(self, bindir: str | None = None, *, user: str = "postgres") -> None:
        super().__init__()
        self.bindir = bindir
        self.user = user

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres`` (starts the server)."""
        return f"postgresql://postgres@127.0.0.1:{self._server().port}/postgres"

    def flush(self) -> None:
        """Empty every table of the ``public`` schema and restart each of its sequences: an
        example starts with no row of the previous one's. The tables themselves stay (as on
        a server a board finds in production), so a board's ``CREATE TABLE IF NOT EXISTS``
        costs nothing after the first example."""
        running = self._server()
        with self._lock:
            row = running.admin.execute(_EMPTYING).fetchone()
            statements = row[0] if row is not None else []
            if not statements:
                return
            # DELETE, not TRUNCATE or DROP: an example's few rows go in well under a
            # millisecond, where TRUNCATE makes new files for every table and DROP makes the
            # board create them again (about 10 ms an example). The replica role skips the
            # foreign keys' triggers, so the order of the tables does not matter.
            with running.admin.transaction():
                running.admin.execute(
                    "; ".join(["SET LOCAL session_replication_role = replica", *statements])
                )

    # -- inside --------------------------------------------------------------------------------

    def _prepare(self, directory: Path, port: int) -> _Launch:
        _psycopg()  # refused now, not after initdb
        binaries = _bindir(self.bindir)
        initdb, postgres = binaries / "initdb", binaries / "postgres"
        for binary in (initdb, postgres):
            if not os.access(binary, os.X_OK):
                raise ServerStartError(
                    f"{binary} is not there: taskboard.servers.Postgres runs the machine's own "
                    "PostgreSQL (install it, e.g. apt-get install postgresql, or pass bindir=)"
                )
        user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            try:
                account = pwd.getpwnam(self.user)
            except KeyError:
                raise ServerStartError(
                    f"PostgreSQL refuses to run as root, and there is no user {self.user!r} "
                    "to run it as: pass user= an account's name, or run as another user"
                ) from None
            user = self.user
            for path in (directory, directory / "clock"):
                os.chown(path, account.pw_uid, account.pw_gid)
        data = directory / "data"
        initialized = subprocess.run(
            [str(initdb), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
            user=user,
            capture_output=True,
            text=True,
            check=False,
        )
        if initialized.returncode != 0:
            raise ServerStartError(
                f"initdb exited ({initialized.returncode}): {initialized.stderr.strip()}"
            )
        arguments = [str(postgres), "-D", str(data), "-p", str(port), "-k", str(directory)]
        for name, value in _SETTINGS.items():
            arguments += ["-c", f"{name}={value}"]
        # SIGTERM is a "smart" shutdown, which waits for every client to leave; SIGINT
        # ends their sessions and stops.
        return _Launch(
            arguments, user=user, stop_signal=signal.SIGINT, log=directory / "postgres.log"
        )

    def _connect(self, process: subprocess.Popen[bytes], port: int, directory: Path) -> Any:
        psycopg = _psycopg()
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                raise ServerStartError(
                    f"postgres on port {port} exited ({process.returncode}) on start: "
                    + _log_tail(directory / "postgres.log")
                )
            try:
                return psycopg.connect(url, autocommit=True, connect_timeout=5)
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise ServerStartError(
                        f"postgres on port {port} did not accept a connection in time: {exc}"
                    ) from exc
            time.sleep(0.01)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ServerStartError(
            "taskboard.servers.Postgres needs psycopg 3: pip install 'taskboard-contract[postgres]'"
        ) from None
    return psycopg
