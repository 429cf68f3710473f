"""The reference model of the board semantics (SPEC section 3): pure, time passed in."""

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
    "violations_in",
]

# Tracebacks, reprs and docs show the public path (taskboard.model.Name), not the private module.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__.startswith("taskboard.model._"):
        _obj.__module__ = __name__
del _name, _obj
