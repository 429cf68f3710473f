"""Fuzzing a board for a time budget, in one process or many, with live progress.

The command line (``taskboard fuzz``) is a thin layer over :func:`fuzz`; everything here can be
called from Python too. The rooms: ``targets`` (what is checked), ``options`` (how, as one
frozen value), ``run`` (one process's batches), ``workers`` (several processes and their
messages), ``report`` and ``progress`` (what is shown), ``junit`` (the JUnit XML of
``--junit-xml``), ``campaign`` (:func:`fuzz` itself).
"""

from taskboard._fuzz.campaign import fuzz
from taskboard._fuzz.options import (
    MODES,
    FuzzOptions,
    check_writable_directory,
    check_writable_file,
    open_database,
    parse_budget,
    parse_nemesis,
)
from taskboard._fuzz.report import FuzzReport
from taskboard._fuzz.targets import (
    DEFAULT_TARGET,
    WHAT_TO_PASS,
    Target,
    UsageError,
    machine_for_target,
    machine_of,
    probe_board,
    resolve_target,
)

__all__ = [
    "DEFAULT_TARGET",
    "MODES",
    "WHAT_TO_PASS",
    "FuzzOptions",
    "FuzzReport",
    "Target",
    "UsageError",
    "check_writable_directory",
    "check_writable_file",
    "fuzz",
    "machine_for_target",
    "machine_of",
    "open_database",
    "parse_budget",
    "parse_nemesis",
    "probe_board",
    "resolve_target",
]
