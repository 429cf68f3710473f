"""The board protocol (SPEC 10): boards in any language, checked as child processes.

Rooms, each below the next:

- :mod:`.codec`: the values on the wire (times, TTLs, tasks, error codes) and the
  never-trusting reading of a child's answer line;
- :mod:`.child`: one process of a board command, a request at a time, its stderr kept;
- :mod:`.spares`: processes started ahead of need, each having answered ``hello``;
- :mod:`.board`: a process as a Board (``exec_board``), its clients as more processes;
- :mod:`.serve`: the child side in Python, to serve a Python board over the protocol.

The BoardMachine of a command sits above, in :mod:`taskboard.stateful._command`.
See ``docs/protocol.md``.
"""
