"""The servers the nemesis tests (SPEC 9) restart and cut off: a private redis-server these
tests own, and the PostgreSQL server behind ``TASKBOARD_POSTGRES_URL``, restarted by the
shell command in ``TASKBOARD_POSTGRES_RESTART``.

The fixtures that hand them out are in ``conftest.py`` (``durable_redis``,
``volatile_redis``, ``postgres_server``).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import redis
from hypothesis import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from taskboard import Clock, Task
from taskboard.hosts.redis import AsyncRedisBoard, RedisBoard

#: The Hypothesis settings of the nemesis contract classes' state-machine and parallel runs:
#: a quarter of the loaded profile's depth (the classes without restarts run it whole). A
#: restart costs 20-40 ms on Redis and about 350 ms on PostgreSQL, and the machine restarts
#: every few steps, so the whole depth would add minutes.
NEMESIS_MACHINE = settings(max_examples=max(1, settings().max_examples // 4))
NEMESIS_PARALLEL = settings(max_examples=max(1, min(50, settings().max_examples) // 4))

#: How long a server may take to answer after it was started, and a stop or a restart
#: command to finish.
STARTUP_TIMEOUT = 30.0
#: How long the backends of terminated connections may take to exit.
TERMINATE_TIMEOUT = 5.0


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A ``redis-server`` process these tests own: on a free loopback port, with a data
    directory of its own, in the foreground (no daemon, so the process is this object's).

    ``durable``: ``--appendonly yes --appendfsync always`` (every write is on disk before
    its reply, so a restart, even a ``SIGKILL``, loses nothing acknowledged). Not
    ``durable``: ``--save '' --appendonly no`` (a restart loses every key). Both run with
    no RDB snapshots (``--save ''``), so the AOF is the only thing a restart reads back.
    """

    def __init__(self, directory: Path, *, durable: bool) -> None:
        self.directory = directory
        self.durable = durable
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _arguments(self) -> list[str]:
        # The AOF is rewritten (compacted) from 128 kB: boards delete their keys at close,
        # and a new server replays the whole AOF, about 20 ms a megabyte.
        persistence = (
            [
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--auto-aof-rewrite-min-size",
                "128kb",
            ]
            if self.durable
            else ["--appendonly", "no"]
        )
        executable = shutil.which("redis-server") or "redis-server"
        return [
            executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--save",
            "",
            *persistence,
            "--logfile",
            str(self.directory / "redis.log"),
        ]

    def admin(self) -> redis.Redis:
        """A new client of the server, for commands the tests send it themselves; it never
        retries (``redis.Redis(host=...)`` retries by default, and would send ``SHUTDOWN``
        again, with backoff, to the server it just stopped)."""
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=STARTUP_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )

    def start(self) -> None:
        """Start the server (on the same port and directory as before, if it ran already)
        and wait until it answers ``PING``.

        Raises:
            RuntimeError: the server exited, or did not answer in time.
        """
        assert self.process is None or self.process.poll() is not None, "already running"
        self.process = subprocess.Popen(
            self._arguments(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server on port {self.port} exited ({self.process.returncode}): "
                    f"{self._log_tail()}"
                )
            try:
                with redis.Redis(
                    host="127.0.0.1",
                    port=self.port,
                    socket_connect_timeout=0.5,
                    retry=Retry(NoBackoff(), 0),
                ) as probe:
                    if probe.ping():
                        return
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING")
            time.sleep(0.002)

    def stop(self, *, crash: bool = False) -> None:
        """Stop the server: ``SHUTDOWN`` (``NOSAVE``; the AOF of a durable server is
        flushed and fsynced all the same), or with ``crash`` a ``SIGKILL``; and wait for the
        process to end. Idempotent."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        if crash:
            process.kill()
        else:
            # The server closes the connection as it goes down: that is the success.
            with self.admin() as admin, contextlib.suppress(redis.ConnectionError):
                admin.shutdown(nosave=True)
        try:
            process.wait(timeout=STARTUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self, *, crash: bool = False) -> None:
        """Stop the server (see :meth:`stop`) and start a new one with the same arguments,
        directory and port; return once it answers ``PING``."""
        self.stop(crash=crash)
        self.start()
        self.restarts += 1

    def drop_connections(self, name: str | None = None) -> int:
        """Kill, from the server's side, the normal client connections named ``name`` (a
        board made from a URL names its own ``taskboard:<board_id>``), or with no name every
        normal one but this call's own; return how many."""
        with self.admin() as admin:
            if name is None:
                return int(admin.execute_command("CLIENT KILL", "TYPE", "normal", "SKIPME", "yes"))
            killed = 0
            for client in admin.client_list(_type="normal"):
                if client.get("name") == name:
                    killed += int(admin.execute_command("CLIENT KILL", "ID", client["id"]))
            return killed

    def _log_tail(self) -> str:
        try:
            lines = (self.directory / "redis.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-10:])


class PostgresServer:
    """The PostgreSQL server at ``url``, restarted by the shell command ``restart_command``
    (``TASKBOARD_POSTGRES_RESTART``: a ``pg_ctl -m immediate -w restart``, which returns
    once the new server accepts connections)."""

    def __init__(self, url: str, restart_command: str | None) -> None:
        self.url = url
        self.restart_command = restart_command
        self.restarts = 0

    def restart(self) -> None:
        """Run the restart command, then wait until the server accepts a connection.

        The command's output goes to a file, not a pipe: the new postmaster may keep the
        command's descriptors open for its whole life, and a pipe would never end.

        Raises:
            RuntimeError: no restart command is configured, or it failed.
        """
        if not self.restart_command:
            raise RuntimeError("TASKBOARD_POSTGRES_RESTART is not set: cannot restart")
        with tempfile.TemporaryFile() as output:
            done = subprocess.run(
                self.restart_command,
                shell=True,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=STARTUP_TIMEOUT * 4,
                check=False,
            )
            if done.returncode != 0:
                output.seek(0)
                said = output.read().decode(errors="replace").strip()
                raise RuntimeError(
                    f"{self.restart_command!r} exited with {done.returncode}: {said}"
                )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.restarts += 1

    def drop_connections(self, board_id: str) -> int:
        """Terminate, from the server's side, every backend of board ``board_id``'s
        connections (``application_name = 'taskboard:<board_id>'``, which
        :class:`~taskboard.hosts.postgres.PostgresBoard` sets), and wait until they have
        exited; return how many."""
        name = f"taskboard:{board_id}"
        with psycopg.connect(self.url, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchall()
            # pg_terminate_backend(pid, timeout) polls every 100 ms or so: poll faster here.
            deadline = time.monotonic() + TERMINATE_TIMEOUT
            while True:
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                ).fetchone()
                if row is None or row[0] == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.001)
        return sum(1 for (ok,) in rows if ok)


@contextlib.contextmanager
def timed(into: list[float]) -> Iterator[None]:
    """Append how long the block took, in milliseconds, to ``into``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        into.append((time.perf_counter() - start) * 1000)


def remade(board: RedisBoard, url: str, tasks: Sequence[Task], clock: Clock) -> RedisBoard:
    """After a restart lost ``board``'s keys: close it (keeping whatever keys are left) and
    make it anew at ``url`` from its initial ``tasks``, on its ``board_id`` and fence scheme,
    as its application would on finding the board gone. The constructor inserts only the
    tasks the server lacks, so nothing that is left is reset."""
    board.delete_on_close = False
    board.close()
    return RedisBoard(
        tasks, clock, url, board_id=board.board_id, delete_on_close=True, fences=board.fences
    )


async def async_remade(
    board: AsyncRedisBoard, url: str, tasks: Sequence[Task], clock: Clock
) -> AsyncRedisBoard:
    """:func:`remade` for an AsyncRedisBoard (the new board inserts its tasks on first use)."""
    board.delete_on_close = False
    await board.aclose()
    return AsyncRedisBoard(
        tasks, clock, url, board_id=board.board_id, delete_on_close=True, fences=board.fences
    )


class ReplyLosingProxy:
    """A TCP proxy on loopback to a server at ``port`` that can lose one reply: after
    :meth:`lose_next_reply`, the next bytes the server sends on any connection are dropped
    and that connection is closed on both sides. So a command reaches the server, runs, and
    its caller sees only a closed connection: the case where a client that retries would
    run the command twice."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._lose = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_next_reply(self) -> None:
        self._lose.set()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies and self._lose.is_set():
                    self._lose.clear()
                    break  # the reply is lost with the connection
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
