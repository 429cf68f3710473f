"""taskboard: the storage-neutral coordination contract, and the tools that prove a Board keeps it.

This module only re-exports; the code lives in private modules.
"""

from taskboard._check import check
from taskboard._clock import Clock, ManualClock, SystemClock
from taskboard._contract import (
    Board,
    ClaimRequest,
    Code,
    FailingBoard,
    Lease,
    Problem,
    RenewingBoard,
    State,
    Task,
)
from taskboard._criteria import concurrent_claim, duplicate_token_submit
from taskboard._errors import (
    BlockedError,
    BoardError,
    CriterionError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)
from taskboard._profiles import register_profiles
from taskboard._public import show_public_paths

__all__ = [
    "BlockedError",
    "Board",
    "BoardError",
    "ClaimRequest",
    "Clock",
    "Code",
    "CriterionError",
    "FailingBoard",
    "Lease",
    "LeaseLostError",
    "ManualClock",
    "NotFoundError",
    "Problem",
    "RenewingBoard",
    "State",
    "SystemClock",
    "TakenError",
    "Task",
    "TerminalError",
    "check",
    "concurrent_claim",
    "duplicate_token_submit",
]

# The taskboard-dev, -ci and -nightly Hypothesis profiles load by name once taskboard is
# imported (the pytest plugin registers them too, before any import).
register_profiles()

show_public_paths(globals())
