"""Servers on the checker's clock: a real ``redis-server`` (here) or PostgreSQL
(:mod:`._postgres`), from the machine's own binaries, started under the virtual clock's
preload library (:mod:`._preload`).

A server starts once, on first use (its ``url``, ``start()``), and stops on every way out:
``stop()``, the end of a ``with`` block, its garbage collection, the interpreter's exit, and,
for a process that dies without running any of those (SIGKILL), the library's lifeline: the
server sends itself its stop signal when the pipe the checker holds closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar, runtime_checkable

from taskboard._virtual._preload import (
    CLOCK_FILE_VARIABLE,
    LIFELINE_SIGNAL_VARIABLE,
    LIFELINE_VARIABLE,
    ClockFile,
    preload_library,
)

__all__ = ["Redis", "ServerStartError", "VirtualServer"]

#: How long a server may take to answer its first PING, and to exit once told to.
STARTUP_TIMEOUT = 30.0


class ServerStartError(RuntimeError):
    """A server on the virtual clock could not be started: its binary is not on PATH, it
    exited, or it did not answer in time. (No Linux, or no C compiler to build the clock's
    library, is :class:`~taskboard.servers.VirtualClockUnavailable`, a RuntimeError too.)"""


@runtime_checkable
class VirtualServer(Protocol):
    """What a machine's ``server`` does in ``clock_mode = "virtual"``: the machine empties it
    before each example and moves its clock with its own."""

    def now(self) -> datetime:
        """The server's current time (aware UTC); starts the server if it is not running."""
        ...

    def set_time(self, when: datetime) -> None:
        """Move the server's clock to ``when``; ValueError if that is before :meth:`now`."""
        ...

    def flush(self) -> None:
        """Delete everything the server holds, so an example starts on an empty store."""
        ...


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _stop(
    process: subprocess.Popen[bytes],
    lifeline: int,
    directory: str,
    stop_signal: int,
    admins: Sequence[_Admin] = (),
) -> None:
    """Stop a server: close its admin connections and its lifeline, send ``stop_signal``,
    then SIGKILL if it lingers; remove its directory. Runs from ``stop()``, a finalizer or
    the interpreter's exit."""
    for admin in admins:
        with contextlib.suppress(Exception):
            admin.close()
    with contextlib.suppress(OSError):
        os.close(lifeline)
    if process.poll() is None:
        process.send_signal(stop_signal)
        try:
            process.wait(timeout=STARTUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(directory, ignore_errors=True)


class _Admin(Protocol):
    def close(self) -> None: ...


_A = TypeVar("_A", bound=_Admin)


class _Running(Generic[_A]):
    """A started server: its process, port, directory, clock file and an admin connection."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        directory: Path,
        clock: ClockFile,
        admin: _A,
        finalizer: Callable[[], object],
    ) -> None:
        self.process = process
        self.port = port
        self.directory = directory
        self.clock = clock
        self.admin = admin
        #: Stops the server (once): the finalizer that also runs at collection and exit.
        self.finalizer = finalizer


@dataclass(frozen=True)
class _Launch:
    """How one server is run: its command, the user it runs as (``None``: this process's),
    the signal that stops it, and the file its output goes to (``None``: nowhere)."""

    arguments: list[str]
    user: str | None = None
    stop_signal: int = signal.SIGTERM
    log: Path | None = None


class _Server(Generic[_A]):
    """What every server on the virtual clock shares: it starts on first use and stops on
    every way out (see the module), and its clock is a :class:`ClockFile` in a directory of
    its own. A subclass says how to run it (:meth:`_prepare`), when it answers
    (:meth:`_connect`), its :attr:`url` and how to :meth:`flush` it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: _Running[_A] | None = None

    def __repr__(self) -> str:
        running = self._running
        where = f"port {running.port}" if running is not None else "not started"
        return f"{type(self).__name__}({where})"

    # -- life --------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the server if it is not running, and wait until it answers."""
        self._server()
        return self

    def stop(self) -> None:
        """Stop the server and remove its directory; a later use starts a new one."""
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            with contextlib.suppress(Exception):
                running.admin.close()
            running.clock.close()
            running.finalizer()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True while a server this object started is running."""
        running = self._running
        return running is not None and running.process.poll() is None

    @property
    def pid(self) -> int:
        """The server's process id (starts it if it is not running)."""
        return self._server().process.pid

    # -- the clock -----------------------------------------------------------------------------

    def now(self) -> datetime:
        """The server's current time (aware UTC)."""
        return self._server().clock.now()

    def set_time(self, when: datetime) -> None:
        """Move the server's clock to ``when`` (aware); its next clock read returns it.

        Raises:
            ValueError: ``when`` is before the server's time (the clock never goes back), or
                naive.
        """
        self._server().clock.set(when)

    # -- inside --------------------------------------------------------------------------------

    def _server(self) -> _Running[_A]:
        with self._lock:
            if self._running is None:
                self._running = self._launch()
            return self._running

    def _prepare(self, directory: Path, port: int) -> _Launch:
        """Make ``directory`` ready for the server and say how to run it (ServerStartError
        when its binaries are missing)."""
        raise NotImplementedError

    def _connect(self, process: subprocess.Popen[bytes], port: int, directory: Path) -> _A:
        """An admin connection once the server answers (ServerStartError if it exits first
        or does not answer within STARTUP_TIMEOUT)."""
        raise NotImplementedError

    def _launch(self) -> _Running[_A]:
        library = preload_library()
        directory = Path(tempfile.mkdtemp(prefix=f"taskboard-{type(self).__name__.lower()}-"))
        try:
            clock = ClockFile(directory / "clock", datetime.now(UTC))
            port = _free_port()
            launch = self._prepare(directory, port)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        if launch.user is not None:
            # Another user may not reach this user's cache (root's is private): the server
            # loads a copy in its own directory.
            library = Path(shutil.copy(library, directory / library.name))
            library.chmod(0o755)
        keep, lifeline = os.pipe()  # the server holds `keep`; only this process `lifeline`
        os.set_inheritable(keep, True)
        env = {
            **os.environ,
            "LD_PRELOAD": " ".join(filter(None, [str(library), os.environ.get("LD_PRELOAD")])),
            CLOCK_FILE_VARIABLE: str(clock.path),
            LIFELINE_VARIABLE: str(keep),
            LIFELINE_SIGNAL_VARIABLE: str(int(launch.stop_signal)),
        }
        try:
            with open(launch.log or os.devnull, "ab") as output:
                process = subprocess.Popen(
                    launch.arguments,
                    env=env,
                    pass_fds=(keep,),
                    user=launch.user,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                )
        except OSError as exc:
            os.close(lifeline)
            shutil.rmtree(directory, ignore_errors=True)
            raise ServerStartError(f"could not run {launch.arguments[0]}: {exc}") from exc
        finally:
            os.close(keep)
        # The admin connection joins what the finalizer closes once it is open: a server
        # collected without stop() leaves no socket for the garbage collector to warn about.
        admins: list[_Admin] = []
        finalizer = weakref.finalize(
            self, _stop, process, lifeline, str(directory), launch.stop_signal, admins
        )
        try:
            admin = self._connect(process, port, directory)
        except BaseException:
            finalizer()
            raise
        admins.append(admin)
        return _Running(process, port, directory, clock, admin, finalizer)


class Redis(_Server[socket.socket]):
    """A ``redis-server`` of its own whose clock the checker moves, on a free loopback port,
    with no persistence (no RDB snapshots, no AOF).

    Name it as a machine's ``server`` with ``clock_mode = "virtual"``, and connect the board
    to :attr:`url`::

        class MyMachine(BoardMachine):
            clock_mode = "virtual"
            server = taskboard.servers.Redis()
            def make_board(self, tasks, clock):
                return MyBoard(self.server.url, tasks)

    Making one starts nothing: the server starts on first use and stops on every way out
    (see the module). Its clock starts at the real time and stands still until
    :meth:`set_time` moves it; it never goes back. Redis reads it once per command (a
    script's ``TIME`` included) and expires keys by it; its event loop's timers stay on the
    real monotonic clock. Linux only, and needs a C compiler once (the preload library is
    built on first use and cached).

    Raises (on first use):
        ServerStartError: ``redis-server`` is not on PATH, exited, or did not answer.
        VirtualClockUnavailable: not Linux, or no C compiler to build the preload library.
    """

    def __init__(self, executable: str = "redis-server") -> None:
        super().__init__()
        self.executable = executable

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (starts the server if it is not running)."""
        return f"redis://127.0.0.1:{self._server().port}/0"

    def flush(self) -> None:
        """``FLUSHALL``: delete every key of every database."""
        reply = self._command(b"FLUSHALL")
        if reply != b"+OK":
            raise ConnectionError(f"redis-server answered FLUSHALL with {reply!r}")

    def _command(self, command: bytes) -> bytes:
        """Send one inline command on the admin connection and read its one-line reply."""
        running = self._server()
        with self._lock:
            running.admin.sendall(command + b"\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = running.admin.recv(4096)
                if not chunk:
                    raise ConnectionError("redis-server closed the admin connection")
                reply += chunk
            return reply[:-2]

    def _prepare(self, directory: Path, port: int) -> _Launch:
        executable = shutil.which(self.executable)
        if executable is None:
            raise ServerStartError(
                f"{self.executable!r} is not on PATH: taskboard.servers.Redis starts the "
                "machine's own redis-server (install Redis, e.g. apt-get install redis-server)"
            )
        arguments = [
            executable,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(directory),
            "--pidfile", str(directory / "redis.pid"),
            "--logfile", str(directory / "redis.log"),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        return _Launch(arguments)

    def _connect(
        self, process: subprocess.Popen[bytes], port: int, directory: Path
    ) -> socket.socket:
        return _connect(process, port, str(directory))


def _connect(process: subprocess.Popen[bytes], port: int, directory: str) -> socket.socket:
    """A connection to the server once it answers ``PING``.

    Raises:
        ServerStartError: it exited first, or did not answer within STARTUP_TIMEOUT.
    """
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if process.poll() is not None:
            raise ServerStartError(
                f"redis-server on port {port} exited ({process.returncode}) on start: "
                + _log_tail(Path(directory) / "redis.log")
            )
        try:
            admin = socket.create_connection(("127.0.0.1", port), timeout=STARTUP_TIMEOUT)
        except OSError:
            admin = None
        if admin is not None:
            admin.sendall(b"PING\r\n")
            try:
                if admin.recv(64).startswith(b"+PONG"):
                    admin.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    return admin
            except OSError:
                pass
            admin.close()
        if time.monotonic() > deadline:
            raise ServerStartError(f"redis-server on port {port} did not answer PING in time")
        time.sleep(0.005)


def _log_tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-10:])
    except OSError:
        return "(no log)"
