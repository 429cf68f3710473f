"""Every reach into Hypothesis's internals, in one place, each guarded.

taskboard drives Hypothesis through its public API (``given``, ``settings``, ``seed``,
``reproduce_failure``, ``RuleBasedStateMachine``), except where that API cannot do what the
checker needs. Each such reach is here, and each has a fallback to the public path for a
Hypothesis release that moved what it reaches for: slower draws, or a plainer test case,
never a broken import. ``tests/test_hypothesis_reach.py`` pins every one of them, so that a
Hypothesis upgrade that takes the fallback shows up as a failing test, not as a quiet
slowdown.

The reaches:

* :func:`choice` and :func:`use_rule_draws`: fewer draws per step (a rule's sampled
  arguments as one choice, the swarm switches once per example), through a
  ``RuleStrategy`` of our own and Hypothesis's ``FeatureStrategy``.
* :func:`in_final_replay`: whether this run is Hypothesis's last replay of a shrunk failure
  (``BuildContext.is_final``), the one whose trace file is kept.
* :func:`state_machine_test_case`: the machine's ``TestCase``, without the explain phase
  (Hypothesis's ``_to_test_case``).
* :func:`carry_seed_and_reproduction`: ``@seed`` and ``@reproduce_failure`` on a machine
  class, carried to a test of our own (the parallel mode), as Hypothesis carries them to
  its own state-machine test.
* :func:`database_key` and :func:`key_database_by`: the example-database key of a machine
  class, as Hypothesis computes it (``function_digest``), and a digest of our own mixed in.
* :func:`applied_settings` and :func:`changed_settings`: the settings a machine class was
  decorated with (``@settings(...)``), and which of them it changed, which ``taskboard fuzz``
  honours.
* :func:`shrinking_for_at_most`: how long Hypothesis shrinks a failure before it reports the
  smallest found so far (its engine's ``MAX_SHRINKING_SECONDS``, five minutes), made shorter
  for a board whose examples take seconds.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import InvalidArgument
from hypothesis.reporting import current_reporter, with_reporter
from hypothesis.stateful import RuleBasedStateMachine, RuleStrategy
from hypothesis.strategies import SearchStrategy

try:  # Hypothesis's swarm testing; internal, so a release may move it
    from hypothesis.strategies._internal.featureflags import FeatureStrategy
except ImportError:  # pragma: no cover - only on a Hypothesis that moved it
    FeatureStrategy = None  # type: ignore[assignment,misc]

try:  # the engine's limit on shrinking; a module global, read when shrinking starts
    from hypothesis.internal.conjecture import engine as _engine

    _engine.MAX_SHRINKING_SECONDS  # noqa: B018  # present, or the fallback below
except (ImportError, AttributeError):  # pragma: no cover - only on a Hypothesis that moved it
    _engine = None  # type: ignore[assignment]

try:
    from hypothesis.internal.reflection import function_digest
except ImportError:  # pragma: no cover - only on a Hypothesis that moved it
    function_digest = None  # type: ignore[assignment]

__all__ = [
    "ALWAYS_ON",
    "JOINT_CHOICES",
    "applied_settings",
    "carry_seed_and_reproduction",
    "changed_settings",
    "choice",
    "database_key",
    "in_final_replay",
    "key_database_by",
    "rule_draws_available",
    "seed_of",
    "shrinking_for_at_most",
    "state_machine_test_case",
    "use_rule_draws",
]

#: How Hypothesis's warning begins when it stops shrinking at its engine's limit.
_SLOW_SHRINKING_WARNING = "WARNING: Hypothesis has spent more than five minutes"
#: Rules swarm testing never switches off: without claims an example reaches nothing, and
#: without jumps to expiry boundaries it seldom reaches the bugs that live there. (The rules of
#: the optional operations, renew and fail, stay switchable: a long run switches each on in
#: about half its examples throughout, which ``tests/test_rule_draws.py`` pins; kept on always,
#: they left fewer steps to claims and completes, and a dependency bug was caught less often.)
ALWAYS_ON = ("claim", "complete", "at_expiry")


#: The most combinations one joint choice of arguments spans: Hypothesis draws an index up to
#: 256 uniformly, and smaller indices more often beyond.
JOINT_CHOICES = 256


# -- fewer draws per step --------------------------------------------------------------------


class Choice(SearchStrategy[Any]):
    """One of ``values``, as ``st.sampled_from(values)`` draws it, shrinking towards the first.

    The :class:`Choice` arguments of a rule are drawn together, as one choice over their
    product (see :class:`RuleDraws`): the same values with the same probabilities, for one
    choice instead of several in every step."""

    def __init__(self, values: Sequence[Any]) -> None:
        super().__init__()
        self.values = tuple(values)
        self.sampled = st.sampled_from(self.values)

    def do_draw(self, data: Any) -> Any:
        return data.draw(self.sampled)

    def __repr__(self) -> str:
        return f"sampled_from({self.values!r})"


def _can_subclass_strategies() -> bool:
    # SearchStrategy's subclass interface (do_draw, a no-argument __init__) is internal.
    try:
        probe = Choice((1, 2))
        return repr(probe) == "sampled_from((1, 2))" and callable(probe.do_draw)
    except Exception:  # pragma: no cover - only on a Hypothesis that changed it
        return False


_CHOICES = _can_subclass_strategies()


def choice(values: Sequence[Any]) -> SearchStrategy[Any]:
    """``st.sampled_from(values)``, which the machine's rule draws take in joint choices; the
    public ``sampled_from`` itself where Hypothesis's strategy internals moved."""
    return Choice(values) if _CHOICES else st.sampled_from(tuple(values))


@functools.cache
def argument_draws(rule: Any) -> tuple[tuple[tuple[str, ...], SearchStrategy[Any]], ...]:
    """How :class:`RuleDraws` draws ``rule``'s arguments: (names, strategy) pairs in the order
    Hypothesis draws them. Consecutive :class:`Choice` arguments share one choice over their
    product (the first argument varying slowest, so index 0 is every argument's first value),
    of at most :data:`JOINT_CHOICES` combinations; any other argument is drawn on its own."""
    draws: list[tuple[tuple[str, ...], SearchStrategy[Any]]] = []
    group: list[tuple[str, Choice]] = []

    def close() -> None:
        if len(group) == 1:
            draws.append(((group[0][0],), group[0][1].sampled))
        elif group:
            product = itertools.product(*(choice.values for _, choice in group))
            draws.append((tuple(name for name, _ in group), st.sampled_from(tuple(product))))
        group.clear()

    for name, strategy in rule.arguments_strategies.items():
        if not isinstance(strategy, Choice):
            close()
            draws.append(((name,), strategy))
            continue
        combinations = math.prod(len(choice.values) for _, choice in group)
        if combinations * len(strategy.values) > JOINT_CHOICES:
            close()
        group.append((name, strategy))
    close()
    return tuple(draws)


class RuleDraws(RuleStrategy):
    """Hypothesis's draw of a rule and its arguments, made with fewer choices.

    * Swarm testing as Hypothesis's: each example switches each rule off with a probability
      drawn for the example, except the :data:`ALWAYS_ON` rules. Every rule's switch is
      decided at the example's first step, once, rather than recorded again whenever the
      rule is considered.
    * The rule as Hypothesis draws it: an index over all rules, drawn again (up to three
      times, then once over the rules that can run) while it names a rule that is switched
      off or invalid (an empty bundle, a false precondition); so a choice names the same rule
      in every state, and each rule that can run is equally likely.
    * A rule's :class:`Choice` arguments are drawn as one choice (see
      :func:`argument_draws`).
    * The initialize rules (``start``) are drawn here too, before any other, in a random
      order as Hypothesis draws them, but through strategies made once, not per example;
      unless an invariant waits for them (a subclass's), when Hypothesis draws them itself.

    Arguments are returned by name in Hypothesis's order, so its printed steps are unchanged.
    """

    def __init__(self, machine: RuleBasedStateMachine) -> None:
        super().__init__(machine)
        self._initializers: list[Any] = []
        # Hypothesis draws the initialize rules only while this list holds them, and holds
        # back the invariants not checked during initialization until it is empty: a
        # subclass's invariant that reads the board must not run before start().
        if all(invariant.check_during_init for invariant in machine.invariants):
            self._initializers = list(machine._initialize_rules_to_run)
            machine._initialize_rules_to_run.clear()
        self._names = tuple(r.function.__name__ for r in self.rules)
        self._switched_on: frozenset[str] = frozenset()
        self._runnable = _rule_sampler(tuple(self.rules)).filter(self._can_run)

    def _can_run(self, rule: Any) -> bool:
        return rule.function.__name__ in self._switched_on and bool(self.is_valid(rule))

    def _switches(self, data: Any) -> frozenset[str]:
        flags = data.draw(_SWARM)
        return frozenset(n for n in self._names if n in ALWAYS_ON or flags.is_enabled(n))

    def do_draw(self, data: Any) -> Any:
        if self._initializers:
            pending = self._initializers
            rule = (
                pending[data.draw(_index_below(len(pending)))] if len(pending) > 1 else pending[0]
            )
            pending.remove(rule)
            return rule, _draw_arguments(data, rule, rule.arguments)
        if not any(self.is_valid(rule) for rule in self.rules):
            return super().do_draw(data)  # Hypothesis's report that no rule can run
        if not self._switched_on:
            self._switched_on = self._switches(data)
        rule = data.draw(self._runnable)
        return rule, _draw_arguments(data, rule, rule.arguments_strategies)


def _draw_arguments(data: Any, rule: Any, order: dict[str, Any]) -> dict[str, Any]:
    """``rule``'s arguments (see :func:`argument_draws`), by name in ``order``."""
    drawn: dict[str, Any] = {}
    for names, strategy in argument_draws(rule):
        value = data.draw(strategy)
        if len(names) == 1:
            drawn[names[0]] = value
        else:
            drawn.update(zip(names, value, strict=True))
    return {name: drawn[name] for name in order}


#: Hypothesis's swarm testing: a probability drawn per example, each rule off with it.
_SWARM = FeatureStrategy() if FeatureStrategy is not None else None


@functools.cache
def _index_below(count: int) -> SearchStrategy[int]:
    return st.integers(0, count - 1)


@functools.cache
def _rule_sampler(rules: tuple[Any, ...]) -> SearchStrategy[Any]:
    # One per set of rules: a sampled_from's label costs a pass over them.
    return st.sampled_from(rules)


def rule_draws_available(machine: RuleBasedStateMachine) -> bool:
    """True when ``machine``'s draws are as :class:`RuleDraws` knows them: Hypothesis's own
    ``RuleStrategy``, its rules, and the lists of invariants and initialize rules."""
    stock = getattr(machine, "_rules_strategy", None)
    return (
        _SWARM is not None
        and type(stock) is RuleStrategy
        and all(hasattr(stock, name) for name in ("rules", "is_valid"))
        and isinstance(getattr(machine, "invariants", None), list)
        and isinstance(getattr(machine, "_initialize_rules_to_run", None), list)
    )


def use_rule_draws(machine: RuleBasedStateMachine) -> None:
    """Draw ``machine``'s steps through :class:`RuleDraws`; Hypothesis's own draws remain
    where its internals are not as this module knows them."""
    if rule_draws_available(machine):
        machine._rules_strategy = RuleDraws(machine)


# -- the run under way -----------------------------------------------------------------------


def in_final_replay() -> bool:
    """True in Hypothesis's last replay of the shrunk failing example: the failure to keep.

    False outside a Hypothesis test, and where the build context no longer says."""
    try:
        context = current_build_context()
    except InvalidArgument:
        return False
    return bool(getattr(context, "is_final", False))


# -- test cases, seeds and the example database ----------------------------------------------


def state_machine_test_case(
    machine_cls: type[RuleBasedStateMachine], around_run: Callable[[Any], Any]
) -> Any:
    """``machine_cls``'s ``TestCase`` as Hypothesis makes it (one per class), with its run
    inside the context manager ``around_run(case)`` returns (given the test case, whose
    ``settings`` it may change for the run), and without the explain phase.

    Hypothesis's explain phase replays a failure many times to annotate it; on a state
    machine that costs several times the search itself."""
    case: Any = machine_cls._to_test_case()
    if getattr(case, "_taskboard_settings", False):
        return case
    case_settings = getattr(case, "settings", None)
    if isinstance(case_settings, settings):
        case.settings = without_explain(case_settings)
    run_test = case.runTest

    @functools.wraps(run_test)  # keeps Hypothesis's marks on it
    def runTest(self: Any) -> None:  # noqa: N802  # unittest's name
        with around_run(self):
            run_test(self)

    case.runTest = runTest
    case._taskboard_settings = True
    return case


def without_explain(chosen: settings) -> settings:
    """``chosen`` without Hypothesis's explain phase, which every run of a machine leaves out.

    The phase replays a failure many times to annotate it: on a state machine that costs
    several times the search, and the lines it points at are taskboard's own (the model's
    checks), not the board's. Hypothesis's ``default`` profile, which applies under pytest
    when no profile is loaded, runs it."""
    return settings(chosen, phases=tuple(p for p in chosen.phases if p is not Phase.explain))


def without_speed_check(chosen: settings) -> settings:
    """``chosen`` without Hypothesis's health check on slow generation.

    A step of a machine is a round trip to the board's store, and some rules draw after one:
    on a loaded machine, or a board in a process of its own, that check fails a correct board
    (every taskboard profile leaves it out already)."""
    suppressed = (*chosen.suppress_health_check, HealthCheck.too_slow)
    return settings(chosen, suppress_health_check=suppressed)


def seed_of(machine_cls: type) -> int | None:
    """The seed ``@seed(n)`` set on ``machine_cls``, if any."""
    chosen = getattr(machine_cls, "_hypothesis_internal_use_seed", None)
    return chosen if isinstance(chosen, int) else None


def carry_seed_and_reproduction(machine_cls: type, test: Callable[..., Any]) -> Any:
    """``test`` with the ``@seed(...)`` and ``@reproduce_failure(...)`` of ``machine_cls``
    applied, through the public decorators, as Hypothesis's own state-machine test takes
    them from the class."""
    chosen = seed_of(machine_cls)
    if chosen is not None:
        test = hypothesis.seed(chosen)(test)
    reproduction = getattr(machine_cls, "_hypothesis_internal_use_reproduce_failure", None)
    if isinstance(reproduction, tuple) and len(reproduction) == 2:
        version, blob = reproduction
        test = hypothesis.reproduce_failure(version, blob)(test)
    return test


def database_key(machine_cls: type) -> bytes:
    """The key under which Hypothesis files ``machine_cls``'s examples in the database."""
    if function_digest is not None:
        return bytes(function_digest(machine_cls))
    # pragma: no cover - a Hypothesis without function_digest: the name and our digest
    extra = getattr(machine_cls, "_hypothesis_internal_add_digest", b"")
    return hashlib.sha384(machine_cls.__qualname__.encode() + bytes(extra)).digest()


def key_database_by(target: Any, digest: bytes) -> None:
    """Mix ``digest`` into the database key of ``target`` (a machine class or a test), so
    that classes that share a source (every ``for_board`` machine) do not share examples."""
    target._hypothesis_internal_add_digest = digest


#: Hypothesis's settings by name, where its internals no longer list them.
_PUBLIC_SETTINGS = (
    "max_examples",
    "derandomize",
    "database",
    "verbosity",
    "phases",
    "stateful_step_count",
    "report_multiple_bugs",
    "suppress_health_check",
    "deadline",
    "print_blob",
    "backend",
)


def setting_names() -> tuple[str, ...]:
    """The names of every Hypothesis setting."""
    try:
        from hypothesis._settings import all_settings
    except ImportError:  # pragma: no cover - only on a Hypothesis that moved it
        return tuple(name for name in _PUBLIC_SETTINGS if hasattr(settings.default, name))
    return tuple(all_settings)


def changed_settings(chosen: settings) -> dict[str, Any]:
    """The settings ``chosen`` was made with: those that differ from its parent (the profile
    loaded when it was made, for ``@settings(...)``), or where Hypothesis no longer keeps the
    parent, from its ``default`` profile."""
    parent = getattr(chosen, "_fallback", None)
    if not isinstance(parent, settings):  # pragma: no cover - a Hypothesis that moved it
        parent = settings.get_profile("default")
    return {
        name: getattr(chosen, name)
        for name in setting_names()
        if getattr(chosen, name) != getattr(parent, name)
    }


def applied_settings(machine_cls: type[RuleBasedStateMachine]) -> settings | None:
    """The settings ``machine_cls`` (or a base) was decorated with, ``@settings(...)``, or
    ``None`` when it was not."""
    if not getattr(machine_cls, "_hypothesis_internal_settings_applied", False):
        return None
    chosen = getattr(machine_cls.TestCase, "settings", None)
    return chosen if isinstance(chosen, settings) else None


#: How Hypothesis heads the steps it shows before a replay that drew differently.
_STEPS_LEADING_UP = "Steps leading up to this error:"


def is_empty_program(message: str) -> bool:
    """True for Hypothesis's "Steps leading up to this error" that lists no step: only the
    machine made (``state = ...Machine()``) and torn down (``state.teardown()``)."""
    heading, _, rest = message.partition("\n")
    if heading.strip() != _STEPS_LEADING_UP:
        return False
    lines = [line.strip() for line in rest.splitlines() if line.strip()]
    return all(
        re.fullmatch(r"state = \S.*\(\)", line) or line == "state.teardown()" for line in lines
    )


@contextlib.contextmanager
def shrinking_for_at_most(seconds: float) -> Iterator[bool]:
    """Within the block, Hypothesis shrinks a failure for at most ``seconds`` and then reports
    the smallest failing example it found so far. Its warning when it stops (which speaks of
    five minutes and asks for a bug report) is left out: the caller says what happened. So is
    an empty program it shows as the steps leading up to a replay that drew differently (see
    :func:`is_empty_program`).

    Yields False, and bounds nothing, on a Hypothesis without the engine's limit.
    """
    if _engine is None:  # pragma: no cover - only on a Hypothesis that moved it
        yield False
        return
    outer = current_reporter()

    def without_the_warning(value: object) -> None:
        if isinstance(value, str) and (
            value.startswith(_SLOW_SHRINKING_WARNING) or is_empty_program(value)
        ):
            return
        outer(value)

    previous = _engine.MAX_SHRINKING_SECONDS
    _engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        with with_reporter(without_the_warning):
            yield True
    finally:
        _engine.MAX_SHRINKING_SECONDS = previous
