"""Real servers on the checker's clock, for ``clock_mode = "virtual"`` (Linux only).

``Redis()`` starts the machine's own ``redis-server``, and ``Postgres()`` a throwaway
PostgreSQL cluster, under a small preload library that puts the server's wall clock on a
file the checker writes: the machine moves the server's clock with
its manual clock, so an unmodified store is checked with exact boundaries and replays
deterministically. See ``docs/wall-clock.md``.
"""

from taskboard._virtual._postgres import Postgres
from taskboard._virtual._preload import VirtualClockUnavailable
from taskboard._virtual._servers import Redis, ServerStartError, VirtualServer

__all__ = ["Postgres", "Redis", "ServerStartError", "VirtualClockUnavailable", "VirtualServer"]
