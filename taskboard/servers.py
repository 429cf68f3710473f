"""Servers on the checker's clock, for ``clock_mode = "virtual"`` (Linux; ``NoServer`` anywhere).

``Redis()`` starts the machine's own ``redis-server``, and ``Postgres()`` a throwaway
PostgreSQL cluster, under a small preload library that puts the server's wall clock on a
file the checker writes: the machine moves the server's clock with
its manual clock, so an unmodified store is checked with exact boundaries and replays
deterministically. ``NoServer()`` starts nothing: a library that keeps time in the checker's
own process reads the machine's clock during its calls. See ``docs/wall-clock.md``.
"""

from taskboard._virtual._no_server import NoServer
from taskboard._virtual._postgres import Postgres
from taskboard._virtual._preload import VirtualClockUnavailable
from taskboard._virtual._servers import Redis, ServerStartError, VirtualServer

__all__ = [
    "NoServer",
    "Postgres",
    "Redis",
    "ServerStartError",
    "VirtualClockUnavailable",
    "VirtualServer",
]
