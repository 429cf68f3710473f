"""``fuzz --server redis|postgres``: the server a virtual-mode run starts for its board.

Each process that runs examples (the one process, or each worker) has one server of each
kind, made on first ask and started on first use; :func:`serving` starts it for the run,
names its URL in :data:`SERVER_URL_VARIABLE` and stops it when the run ends, however it
ends (a killed process's server stops itself: see :mod:`taskboard.servers`).

The board reaches it three ways: the machine's ``server`` attribute is the server (a machine's
``make_board`` reads ``self.server.url``); a plain board factory, which sees no machine,
reads ``os.environ["TASKBOARD_SERVER_URL"]``; and an ``--exec`` board's processes inherit
that variable (SPEC 10, ``docs/protocol.md``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from taskboard._fuzz.targets import UsageError
from taskboard._protocol.spares import end_spares
from taskboard._virtual._postgres import Postgres
from taskboard._virtual._preload import VirtualClockUnavailable
from taskboard._virtual._servers import Redis, ServerStartError

__all__ = ["SERVERS", "SERVER_URL_VARIABLE", "process_server", "serving"]

#: What ``--server`` names, and the server each name starts.
SERVERS: dict[str, Callable[[], Redis | Postgres]] = {"redis": Redis, "postgres": Postgres}
#: The environment variable that holds the ``--server``'s URL while a run uses it.
SERVER_URL_VARIABLE = "TASKBOARD_SERVER_URL"

_made: dict[str, Redis | Postgres] = {}


def process_server(name: str) -> Redis | Postgres:
    """This process's server of kind ``name`` (one of :data:`SERVERS`), not started by this.

    Raises:
        UsageError: ``name`` is no kind of server.
    """
    if name not in SERVERS:
        raise UsageError(f"--server must be one of {', '.join(SERVERS)}, got {name!r}")
    if name not in _made:
        _made[name] = SERVERS[name]()
    return _made[name]


@contextmanager
def serving(name: str | None) -> Iterator[None]:
    """Start this process's server ``name`` for a run (nothing when ``None``), with its URL
    in :data:`SERVER_URL_VARIABLE`; stop it, and restore the variable, when the run ends.

    Raises:
        UsageError: the server cannot start here (its binaries, a C compiler or Linux are
            missing; the message says which).
    """
    if name is None:
        yield
        return
    server = process_server(name)
    previous = os.environ.get(SERVER_URL_VARIABLE)
    try:
        try:
            os.environ[SERVER_URL_VARIABLE] = server.url
        except (ServerStartError, VirtualClockUnavailable) as exc:
            raise UsageError(f"--server {name}: {exc}") from None
        # An --exec board's processes inherit the variable when they start: a spare started
        # before it was set (for the command's hello) would not have it.
        end_spares()
        yield
    finally:
        server.stop()
        if previous is None:
            os.environ.pop(SERVER_URL_VARIABLE, None)
        else:
            os.environ[SERVER_URL_VARIABLE] = previous
        end_spares()  # nor may a spare outlive the server it names
