"""The reference model of the board semantics (SPEC section 3): pure, time passed in."""

from taskboard.model._calls import (
    CONTRACT_ERRORS,
    Call,
    Op,
    Outcome,
    describe_task,
    format_duration,
)
from taskboard.model._model import (
    Allowed,
    BoardModel,
    ContractViolation,
    ExpiredLeasePolicy,
    IssuedLease,
    is_live,
)

__all__ = [
    "CONTRACT_ERRORS",
    "Allowed",
    "BoardModel",
    "Call",
    "ContractViolation",
    "ExpiredLeasePolicy",
    "IssuedLease",
    "Op",
    "Outcome",
    "describe_task",
    "format_duration",
    "is_live",
]
