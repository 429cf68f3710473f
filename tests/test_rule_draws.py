"""How BoardMachine draws rules and arguments: swarm testing, joint choices, initialize rules."""

from __future__ import annotations

import itertools
import math
from typing import Any, ClassVar

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import RuleStrategy, invariant, run_state_machine_as_test

from taskboard.stateful import BoardMachine
from taskboard.stateful._hypothesis import (
    ALWAYS_ON,
    JOINT_CHOICES,
    Choice,
    RuleDraws,
    argument_draws,
    use_rule_draws,
)
from taskboard.strategies import GRAPH_PLANS, graph_of, is_acyclic
from tests.test_machine import QUICK, MemoryMachine

GENERATE_ONLY = settings(QUICK, phases=[Phase.generate])


def rules_of(machine: type[BoardMachine]) -> dict[str, Any]:
    """The machine's rules by name, as Hypothesis holds them."""
    return {rule.function.__name__: rule for rule in machine()._rules_strategy.rules}


def test_machine_draws_through_its_own_rule_strategy() -> None:
    """A BoardMachine draws its steps through RuleDraws, with start left to it."""
    machine = MemoryMachine()
    assert isinstance(machine._rules_strategy, RuleDraws)
    assert machine._initialize_rules_to_run == []


def test_each_argument_is_drawn_once_in_joint_choices_of_at_most_256() -> None:
    """Every rule's arguments are drawn once each, consecutive sampled ones jointly, in
    groups of at most JOINT_CHOICES combinations."""
    for name, rule in rules_of(MemoryMachine).items():
        draws = argument_draws(rule)
        names = [n for group, _ in draws for n in group]
        assert sorted(names) == sorted(rule.arguments_strategies), name
        for group, _ in draws:
            sizes = [
                len(rule.arguments_strategies[n].values)
                for n in group
                if isinstance(rule.arguments_strategies[n], Choice)
            ]
            assert len(group) == 1 or math.prod(sizes) <= JOINT_CHOICES, (name, group)


def test_claim_arguments_are_one_choice_over_their_whole_product_first_values_first() -> None:
    """claim's task, agent and ttl are one choice over every combination, shrinking to the
    first value of each, as three sampled_from draws would (in Hypothesis's order)."""
    rule = rules_of(MemoryMachine)["claim"]
    ((names, strategy),) = argument_draws(rule)
    assert names == tuple(rule.arguments_strategies)
    assert sorted(names) == ["agent", "task", "ttl_ticks"]
    choices = [rule.arguments_strategies[n].values for n in names]
    combinations = strategy.elements
    assert list(combinations) == list(itertools.product(*choices))
    assert combinations[0] == tuple(values[0] for values in choices)


def test_every_drawn_graph_is_acyclic_and_the_first_has_no_edges() -> None:
    """Each (shape, relabelling) plan gives an acyclic graph, the first none at all, and
    the known-graph shortcut still finds a cycle in a graph no plan gives."""
    assert all(is_acyclic(graph_of(plan), known=False) for plan in GRAPH_PLANS)
    assert graph_of(GRAPH_PLANS[0]) == {"t1": (), "t2": (), "t3": ()}
    assert not is_acyclic({"t1": ("t2",), "t2": ("t1",), "t3": ()})


class SwitchRecorder(MemoryMachine):
    """Records which rules each example had switched on."""

    switched: ClassVar[list[frozenset[str]]] = []

    def teardown(self) -> None:
        strategy = self._rules_strategy
        assert isinstance(strategy, RuleDraws)
        if strategy._switched_on:
            self.switched.append(strategy._switched_on)
        super().teardown()


def test_swarm_switches_rules_off_per_example_but_never_the_core_ones() -> None:
    """Each example switches some rules off, each rule outside ALWAYS_ON is off in some
    example and on in another, and claim, complete and at_expiry are never off."""
    SwitchRecorder.switched.clear()
    run_state_machine_as_test(SwitchRecorder, settings=GENERATE_ONLY)
    switched = SwitchRecorder.switched
    names = set(rules_of(SwitchRecorder))
    assert len(switched) > 50
    assert all(set(ALWAYS_ON) <= on for on in switched)
    for name in names - set(ALWAYS_ON):
        assert any(name in on for on in switched), f"{name} never on"
        assert any(name not in on for on in switched), f"{name} never off"


@pytest.mark.slow
def test_a_long_run_never_starves_a_declared_operation() -> None:
    """Over a long run (1,200 examples) every window of 300 examples has the rule of each
    operation a board declares (release, renew, fail) switched on in a quarter of its
    examples or more: swarm testing never starves one as the run goes on."""
    SwitchRecorder.switched.clear()
    long_run = settings(GENERATE_ONLY, max_examples=1200, stateful_step_count=10)
    run_state_machine_as_test(SwitchRecorder, settings=long_run)
    switched = SwitchRecorder.switched
    assert len(switched) >= 1200
    for start in range(0, 1200, 300):
        window = switched[start : start + 300]
        for name in ("release", "renew", "fail"):
            share = sum(name in on for on in window) / len(window)
            assert share >= 0.25, f"{name} on in {share:.0%} of examples {start}-{start + 300}"


class BoardInvariant(MemoryMachine):
    """A subclass's invariant that needs the board start() makes."""

    checked: ClassVar[int] = 0

    @invariant()
    def board_is_made(self) -> None:
        assert self.board is not None, "the invariant ran before start()"
        BoardInvariant.checked += 1


def test_a_subclass_invariant_waits_for_start_as_in_hypothesis() -> None:
    """An invariant not checked during initialization first runs after start(), as
    Hypothesis runs it: the machine leaves start to Hypothesis then."""
    BoardInvariant.checked = 0
    run_state_machine_as_test(BoardInvariant, settings=settings(GENERATE_ONLY, max_examples=10))
    assert BoardInvariant.checked > 0


def test_an_unknown_rule_strategy_is_left_alone() -> None:
    """If Hypothesis's rule strategy is not the one RuleDraws knows, it stays in use."""

    class Strange(RuleStrategy):
        pass

    machine = MemoryMachine()
    machine._rules_strategy = strange = Strange(machine)
    use_rule_draws(machine)
    assert machine._rules_strategy is strange
