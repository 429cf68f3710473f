"""Servers on the checker's clock: a real ``redis-server``, from the machine's own binary,
started under the virtual clock's preload library (:mod:`._preload`).

A server starts once, on first use (:attr:`Redis.url`, :meth:`Redis.start`), and stops on
every way out: :meth:`Redis.stop`, the end of a ``with`` block, its garbage collection, the
interpreter's exit, and, for a process that dies without running any of those (SIGKILL), the
library's lifeline: the server sends itself SIGTERM when the pipe the checker holds closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from taskboard._virtual._preload import (
    CLOCK_FILE_VARIABLE,
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


def _stop(process: subprocess.Popen[bytes], lifeline: int, directory: str) -> None:
    """Stop a server: close its lifeline, SIGTERM, then SIGKILL if it lingers; remove its
    directory. Runs from :meth:`Redis.stop`, a finalizer or the interpreter's exit."""
    with contextlib.suppress(OSError):
        os.close(lifeline)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STARTUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(directory, ignore_errors=True)


class _Running:
    """A started server: its process, directory, clock file and an admin connection."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        clock: ClockFile,
        admin: socket.socket,
        finalizer: Callable[[], object],
    ) -> None:
        self.process = process
        self.port = port
        self.clock = clock
        self.admin = admin
        #: Stops the server (once): the finalizer that also runs at collection and exit.
        self.finalizer = finalizer


class Redis:
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
        self.executable = executable
        self._lock = threading.Lock()
        self._running: _Running | None = None

    def __repr__(self) -> str:
        running = self._running
        where = f"port {running.port}" if running is not None else "not started"
        return f"Redis({where})"

    # -- life --------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the server if it is not running, and wait until it answers ``PING``."""
        self._server()
        return self

    def stop(self) -> None:
        """Stop the server and remove its directory; a later use starts a new one."""
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
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

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (starts the server if it is not running)."""
        return f"redis://127.0.0.1:{self._server().port}/0"

    # -- the clock and the data ------------------------------------------------------------

    def now(self) -> datetime:
        """The server's current time (aware UTC)."""
        return self._server().clock.now()

    def set_time(self, when: datetime) -> None:
        """Move the server's clock to ``when`` (aware); its next command reads it.

        Raises:
            ValueError: ``when`` is before the server's time (the clock never goes back), or
                naive.
        """
        self._server().clock.set(when)

    def flush(self) -> None:
        """``FLUSHALL``: delete every key of every database."""
        reply = self._command(b"FLUSHALL")
        if reply != b"+OK":
            raise ConnectionError(f"redis-server answered FLUSHALL with {reply!r}")

    # -- inside --------------------------------------------------------------------------------

    def _server(self) -> _Running:
        with self._lock:
            if self._running is None:
                self._running = self._launch()
            return self._running

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

    def _launch(self) -> _Running:
        executable = shutil.which(self.executable)
        if executable is None:
            raise ServerStartError(
                f"{self.executable!r} is not on PATH: taskboard.servers.Redis starts the "
                "machine's own redis-server (install Redis, e.g. apt-get install redis-server)"
            )
        library = preload_library()
        directory = tempfile.mkdtemp(prefix="taskboard-redis-")
        clock = ClockFile(Path(directory) / "clock", datetime.now(UTC))
        keep, lifeline = os.pipe()  # the server holds `keep`; only this process `lifeline`
        os.set_inheritable(keep, True)
        port = _free_port()
        env = {
            **os.environ,
            "LD_PRELOAD": " ".join(filter(None, [str(library), os.environ.get("LD_PRELOAD")])),
            CLOCK_FILE_VARIABLE: str(clock.path),
            LIFELINE_VARIABLE: str(keep),
        }
        arguments = [
            executable,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", directory,
            "--pidfile", str(Path(directory) / "redis.pid"),
            "--logfile", str(Path(directory) / "redis.log"),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        try:
            process = subprocess.Popen(
                arguments,
                env=env,
                pass_fds=(keep,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            os.close(lifeline)
            shutil.rmtree(directory, ignore_errors=True)
            raise ServerStartError(f"could not run {executable}: {exc}") from exc
        finally:
            os.close(keep)
        finalizer = weakref.finalize(self, _stop, process, lifeline, directory)
        try:
            admin = _connect(process, port, directory)
        except BaseException:
            finalizer()
            raise
        return _Running(process, port, clock, admin, finalizer)


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
