"""The virtual clock (issue 30): real servers, unmodified, on the checker's manual clock.

:mod:`._preload` builds the ``LD_PRELOAD`` library (``clock.c``) that puts a process's wall
clock on a memory-mapped file, and writes that file; :mod:`._servers` starts servers under
it (what every server shares, and Redis) and :mod:`._postgres` PostgreSQL
(:mod:`taskboard.servers` is the public face). Linux only.
"""
