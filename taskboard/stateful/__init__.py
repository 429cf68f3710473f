"""The model checker: a Hypothesis state machine that drives a host's Board against the model."""

from taskboard._profiles import register_profiles
from taskboard.model import ContractViolation
from taskboard.stateful._machine import BoardMachine

__all__ = ["BoardMachine", "ContractViolation"]
register_profiles()
