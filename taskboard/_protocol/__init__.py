"""The board protocol (SPEC 10): boards in any language, checked as child processes.

Rooms:

- :mod:`.codec`: the values on the wire (times, TTLs, tasks, error codes) and the
  never-trusting reading of a child's answer line.

The process side (starting a child, ``hello``, clients, the clock, ``--exec``) is not built
yet; see issue 22.
"""
