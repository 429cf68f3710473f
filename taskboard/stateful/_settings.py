"""The settings of a machine, one record each, which every way of running reads.

A setting is a class attribute of :class:`~taskboard.stateful.BoardMachine` (``clock_mode``,
``call_timeout``, ...), documented in its docstring. Its record holds its default, its
validator and a doc line, and how it travels: from a board factory (``for_board``), from a
BoardContract to its machine and its criteria, from a ``taskboard fuzz`` option, and through
a trace file's header to a replay. The machine's attributes,
:class:`~taskboard.stateful._config.MachineConfig`, BoardContract, ``fuzz``, ``replay`` and
trace files are derived from :data:`SETTINGS`, so a setting added here reaches each of them
(``tests/test_settings.py`` walks the table to pin that).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from taskboard._clock import CLOCK_MODES
from taskboard.model._model import EXPIRED_LEASE_POLICIES
from taskboard.stateful._fields import Reader, micros
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._trace import NEMESIS_HOOKS

__all__ = [
    "MOST_PCT_DEPTH",
    "RACE_EXPLORATION",
    "RACE_SCHEDULING",
    "SETTING",
    "SETTINGS",
    "FuzzFlag",
    "Setting",
    "TraceField",
    "checked_setting",
    "checked_settings",
    "default",
    "milliseconds",
    "nemesis_names",
]

#: ``race_scheduling``'s values: the operating system's interleaving, or a drawn one.
RACE_SCHEDULING = ("os", "controlled")
#: ``race_exploration``'s values: how a controlled race's drawn data picks who goes on.
RACE_EXPLORATION = ("random", "pct")
#: The deepest ``pct_depth`` (each level past 1 is a change point drawn per program).
MOST_PCT_DEPTH = 10

#: Checks a setting's value: ``(where, value)``, ``where`` naming it as ``MyMachine.clock_skew``,
#: returns the value to use, or raises TypeError saying what the setting takes.
Validator = Callable[[str, Any], Any]


def _timedelta(*, positive: bool, optional: bool) -> Validator:
    """A duration: a positive (or non-negative) timedelta, or also ``None`` (``optional``)."""
    takes = f"a {'positive' if positive else 'non-negative'} timedelta" + (
        " or None" if optional else ""
    )

    def check(where: str, value: Any) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, timedelta) or value < timedelta(0) or (positive and not value):
            raise TypeError(f"{where} must be {takes}, got {value!r}")
        return value

    return check


def _one_of(choices: tuple[str, ...]) -> Validator:
    """One of ``choices``, named as ``'either', 'accept' or 'reject'``."""
    takes = ", ".join(repr(choice) for choice in choices[:-1]) + f" or {choices[-1]!r}"

    def check(where: str, value: Any) -> Any:
        if value not in choices:
            raise TypeError(f"{where} must be {takes}, got {value!r}")
        return value

    return check


def _true_or_false(where: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise TypeError(f"{where} must be True or False, got {value!r}")
    return value


def _pct_depth(where: str, value: Any) -> Any:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MOST_PCT_DEPTH:
        raise TypeError(f"{where} must be a whole number from 1 to {MOST_PCT_DEPTH}, got {value!r}")
    return value


def _faults(where: str, value: Any) -> Any:
    if not isinstance(value, bool) and not (
        isinstance(value, tuple)
        and value
        and all(isinstance(t, type) and issubclass(t, Exception) for t in value)
    ):
        raise TypeError(
            f"{where} must be True, False or a tuple of exception classes, got {value!r}"
        )
    return value


def _nemesis(where: str, value: Any) -> Any:
    if value is not None and (
        not isinstance(value, tuple) or not all(kind in NEMESIS_HOOKS for kind in value)
    ):
        raise TypeError(f"{where} must be None or a tuple of 'restart' and 'drop', got {value!r}")
    return value


def _lease_limits(where: str, value: Any) -> Any:
    if value is not None and not isinstance(value, LeaseLimits):
        raise TypeError(f"{where} must be None or a LeaseLimits, got {value!r}")
    return value


def _as_true_or_false(where: str, value: Any) -> Any:
    # Read for its truth and not checked, as before the table: a check now could break a
    # host's class that has run for releases.
    return bool(value)


def _as_given(where: str, value: Any) -> Any:
    return value


# -- trace files ------------------------------------------------------------------------------


def _duration_field(*, positive: bool) -> Callable[[Reader, str], Any]:
    """Reads a duration written by :func:`micros` (non-negative, or ``positive``)."""
    return lambda reader, key: reader.duration(key, positive=positive)


def _text_field(choices: tuple[str, ...] = (), named: str = "") -> Callable[[Reader, str], Any]:
    """Reads a string: one of ``choices`` (named as ``named`` in the error), when given."""

    def read(reader: Reader, key: str) -> Any:
        value = reader.get(key, str)
        if choices and value not in choices:
            raise reader.error(key, f"expected {named}, got {value!r}")
        return value

    return read


def _duration_json(value: Any) -> object:
    return None if value is None else micros(value)


def _as_json(value: Any) -> object:
    return value


@dataclass(frozen=True)
class TraceField:
    """How a setting is written in a trace file's header, and read back.

    A missing key, or ``null``, is a trace from before the field (or one without the value):
    it reads as the :class:`~taskboard.stateful.Trace` field's default when ``optional``,
    and is an error otherwise.
    """

    #: The JSON key: ``client_clock_skew_us``.
    key: str
    #: The :class:`~taskboard.stateful.Trace` field that holds the value: ``client_skew``.
    field: str
    #: The value as JSON.
    encode: Callable[[Any], object]
    #: Reads the value at ``key`` of the header; raises TraceFileError naming the problem.
    read: Callable[[Reader, str], Any]
    optional: bool = True


# -- taskboard fuzz ---------------------------------------------------------------------------


def milliseconds(value: float) -> timedelta:
    """An option's number of milliseconds as a duration."""
    return timedelta(milliseconds=value)


def _seconds_or_none(value: float) -> timedelta | None:
    return timedelta(seconds=value) if value else None


def nemesis_names(text: str) -> tuple[str, ...]:
    """``--nemesis restart,drop`` as the names it lists, each once; ``none`` is none."""
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    return () if names == ("none",) else names


@dataclass(frozen=True)
class FuzzFlag:
    """How an option of ``taskboard fuzz`` sets a setting for a run.

    ``field`` names the :class:`~taskboard._fuzz.FuzzOptions` field; the flag is the same
    name with dashes (``clock_skew``: ``--clock-skew``). An option left at ``None`` (or
    ``False``, for a switch) keeps the machine's own value.
    """

    field: str
    #: The option's value as the class attribute.
    convert: Callable[[Any], Any]
    #: Why the flag applies to the wall clock only, when it does (its usage error says so).
    wall_only: str = ""

    @property
    def flag(self) -> str:
        """The command-line flag: ``--clock-skew``."""
        return "--" + self.field.replace("_", "-")

    @property
    def in_milliseconds(self) -> bool:
        """True when the option is a number of milliseconds."""
        return self.convert is milliseconds


# -- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One class attribute of a machine, and every way it travels."""

    #: The class attribute: ``clock_skew``.
    name: str
    default: Any
    check: Validator
    #: What it says, in one line (the BoardMachine docstring says it in full).
    doc: str
    #: The :class:`~taskboard.stateful._config.MachineConfig` field that holds it: ``skew``.
    config: str
    #: A board factory's own attribute of this name is used by ``BoardMachine.for_board``.
    for_board: bool = False
    #: A BoardContract's attribute of this name reaches the machine it builds.
    contract: bool = True
    #: BoardContract's own boards and clock honour it too (``open_board`` and ``clock``, which
    #: its concurrency criteria race on and its example tests step).
    criteria: bool = False
    #: Set (true) only with ``clock_mode = 'wall'``: the rest of the TypeError saying why.
    wall_only: str = ""
    #: Recorded in trace files' headers.
    trace: TraceField | None = None
    #: How a replay takes it from the trace: ``"trace"``, always; ``"board"``, unless the
    #: machine or factory replayed on declares its own; ``None``: not at all.
    replay: Literal["trace", "board"] | None = None
    #: The ``taskboard fuzz`` option that sets it, if one does.
    fuzz: FuzzFlag | None = None


#: Every setting, in the order the BoardMachine docstring gives them and they are checked.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "clock_resolution",
        timedelta(milliseconds=1),
        _timedelta(positive=True, optional=False),
        "the smallest time step the store keeps; times are drawn on its grid",
        config="resolution",
        for_board=True,
        criteria=True,
        trace=TraceField(
            "resolution_us", "resolution", micros, _duration_field(positive=True), optional=False
        ),
        replay="trace",
    ),
    Setting(
        "clock_mode",
        "manual",
        _one_of(CLOCK_MODES),
        "where the board's time comes from: 'manual', a clock the machine moves; 'virtual', "
        "the same clock moving the machine's server's too; or 'wall'",
        config="clock_mode",
        for_board=True,
        criteria=True,
        trace=TraceField(
            "clock_mode",
            "clock_mode",
            _as_json,
            _text_field(CLOCK_MODES, "'manual', 'virtual' or 'wall'"),
        ),
        replay="trace",
        fuzz=FuzzFlag("clock", str),
    ),
    Setting(
        "clock_skew",
        timedelta(milliseconds=1),
        _timedelta(positive=False, optional=False),
        "in wall mode, how far the board's clock may be from the machine's",
        config="skew",
        for_board=True,
        criteria=True,
        trace=TraceField("clock_skew_us", "skew", micros, _duration_field(positive=False)),
        replay="trace",
        fuzz=FuzzFlag("clock_skew", milliseconds, wall_only="the manual clock has no skew"),
    ),
    Setting(
        "client_clock_skew",
        timedelta(0),
        _timedelta(positive=False, optional=False),
        "in wall mode, how far apart the clocks of the hosts the clients run on may be",
        config="client_skew",
        for_board=True,
        wall_only="shifts time.time() as clients read it, so it needs clock_mode = 'wall': "
        "on the manual clock the board reads only the machine's",
        trace=TraceField(
            "client_clock_skew_us", "client_skew", micros, _duration_field(positive=False)
        ),
        replay="trace",
        fuzz=FuzzFlag(
            "client_clock_skew", milliseconds, wall_only="the manual clock is the board's"
        ),
    ),
    Setting(
        "shortest_lease",
        None,
        _timedelta(positive=False, optional=True),
        "the shortest lease the store honours (None: any); TTLs are drawn no shorter",
        config="shortest_lease",
        for_board=True,
        fuzz=FuzzFlag("shortest_lease", milliseconds),
    ),
    Setting(
        "lease_limits",
        None,
        _lease_limits,
        "what leases the store can hold (None: any; a LeaseLimits): the machine asks for "
        "no other, and learns more from its NotImplementedError answers",
        config="limits",
        for_board=True,
        fuzz=FuzzFlag("lease_limits", LeaseLimits.parse),
    ),
    Setting(
        "keep_alive_interval",
        None,
        _timedelta(positive=True, optional=True),
        "in wall mode, how often at least the board renews each held lease by itself",
        config="keep_alive",
        for_board=True,
        wall_only="needs clock_mode = 'wall': a keep-alive runs on real time, which the "
        "manual clock does not",
        trace=TraceField(
            "keep_alive_interval_us", "keep_alive", _duration_json, _duration_field(positive=True)
        ),
        replay="trace",
    ),
    Setting(
        "expired_lease_policy",
        "either",
        _one_of(EXPIRED_LEASE_POLICIES),
        "SPEC 3.4: what the board does with an expired lease's token nobody took over",
        config="policy",
        for_board=True,
        trace=TraceField(
            "expired_lease_policy",
            "policy",
            _as_json,
            _text_field(EXPIRED_LEASE_POLICIES, "either/accept/reject"),
            optional=False,
        ),
        replay="board",
        fuzz=FuzzFlag("expired_lease_policy", str),
    ),
    Setting(
        "call_timeout",
        timedelta(seconds=10),
        _timedelta(positive=True, optional=True),
        "how long one board call may take before it is cut off as an infrastructure fault",
        config="call_timeout",
        criteria=True,
        fuzz=FuzzFlag("call_timeout", _seconds_or_none),
    ),
    Setting(
        "tolerate_faults",
        False,
        _faults,
        "fuzz through infrastructure faults (True, or a tuple of the exception classes)",
        config="tolerate_faults",
        fuzz=FuzzFlag("tolerate_faults", bool),
    ),
    Setting(
        "parallel_processes",
        False,
        _as_true_or_false,
        "SPEC 8: run each thread of a parallel program in an OS process of its own",
        config="processes",
        fuzz=FuzzFlag("processes", bool),
    ),
    Setting(
        "race_scheduling",
        "os",
        _one_of(RACE_SCHEDULING),
        "how the threads of a parallel program interleave: 'os', as the operating system "
        "runs them; 'controlled', one at a time at their storage round trips, as drawn",
        config="race_scheduling",
        for_board=True,
        fuzz=FuzzFlag("race_scheduling", str),
    ),
    Setting(
        "race_exploration",
        "random",
        _one_of(RACE_EXPLORATION),
        "how a controlled race's drawn data picks who goes on at each point: 'random', a "
        "drawn choice each; 'pct', drawn priorities with pct_depth - 1 change points",
        config="race_exploration",
        for_board=True,
        fuzz=FuzzFlag("race_exploration", str),
    ),
    Setting(
        "pct_depth",
        3,
        _pct_depth,
        "with race_exploration = 'pct': the depth of race it aims at (1: strict priorities; "
        "each more draws a change point)",
        config="pct_depth",
        for_board=True,
        fuzz=FuzzFlag("pct_depth", int),
    ),
    Setting(
        "answers_vary",
        False,
        _true_or_false,
        "the board may answer the same steps differently from run to run where SPEC leaves "
        "it a choice (3.4 decided per call, a background reaper): what Hypothesis draws then "
        "does not depend on answers, as on the wall clock",
        config="answers_vary",
        for_board=True,
    ),
    Setting(
        "durable",
        True,
        _true_or_false,
        "SPEC 9: the board keeps everything it acknowledged across a restart",
        config="durable",
        for_board=True,
    ),
    Setting(
        "nemesis",
        None,
        _nemesis,
        "which defined nemesis hooks run as rules (None: every one; (): none)",
        config="nemesis",
        fuzz=FuzzFlag("nemesis", nemesis_names),
    ),
    Setting(
        "trace_dir",
        None,
        _as_given,
        "where the shrunk failing trace is written (None: $TASKBOARD_TRACE_DIR, if set)",
        config="trace_dir",
        fuzz=FuzzFlag("trace_dir", str),
    ),
    Setting(
        "trace_target",
        None,
        _as_given,
        "module:Name that trace files name to replay against (None: the class; '': none)",
        config="trace_target",
        # A BoardContract names itself: its machine is made again from it on replay.
        contract=False,
        trace=TraceField("target", "target", _as_json, _text_field()),
    ),
)

#: The settings by name.
SETTING: Mapping[str, Setting] = {setting.name: setting for setting in SETTINGS}


def default(name: str) -> Any:
    """The default of the setting ``name``."""
    return SETTING[name].default


def checked_setting(owner: type, name: str) -> Any:
    """``owner``'s value of the setting ``name``, as its validator checked it.

    Raises:
        TypeError: the value is not one the setting takes (the message names
            ``Owner.name`` and what it takes).
    """
    return SETTING[name].check(f"{owner.__qualname__}.{name}", getattr(owner, name))


def checked_settings(owner: type) -> dict[str, Any]:
    """Every setting of the class ``owner``, by name, as its validator checked it.

    Raises:
        TypeError: a value a setting does not take, or one set that needs
            ``clock_mode = 'wall'`` on another clock.
    """
    values = {setting.name: checked_setting(owner, setting.name) for setting in SETTINGS}
    for setting in SETTINGS:
        if setting.wall_only and values[setting.name] and values["clock_mode"] != "wall":
            raise TypeError(f"{owner.__qualname__}.{setting.name} {setting.wall_only}")
    return values
