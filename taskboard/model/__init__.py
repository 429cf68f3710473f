"""The reference model of the board semantics (SPEC section 3): pure, time passed in."""

from taskboard._public import show_public_paths
from taskboard.model._calls import (
    CONTRACT_ERRORS,
    Allowed,
    Call,
    Op,
    Outcome,
    Step,
    When,
    Window,
    describe_task,
    format_duration,
    readable_duration,
)
from taskboard.model._linearizability import (
    LinearizabilityResult,
    LinearizabilityVerdict,
    Operation,
    check_history,
)
from taskboard.model._model import (
    BoardModel,
    ContractViolation,
    ExpiredLeasePolicy,
    IssuedLease,
    is_live,
    violations_in,
)

__all__ = [
    "CONTRACT_ERRORS",
    "Allowed",
    "BoardModel",
    "Call",
    "ContractViolation",
    "ExpiredLeasePolicy",
    "IssuedLease",
    "LinearizabilityResult",
    "LinearizabilityVerdict",
    "Op",
    "Operation",
    "Outcome",
    "Step",
    "When",
    "Window",
    "check_history",
    "describe_task",
    "format_duration",
    "is_live",
    "readable_duration",
    "violations_in",
]

show_public_paths(globals())
