"""Fault injection for boards: ``inject_faults(board, rate=0.05, seed=1)``.

Wrap a correct board to see that the checker reports infrastructure faults as
faults (and, in tolerant mode, fuzzes through them), or a buggy one to see that
faults do not hide its bug. See ``docs/faults.md``.
"""

from taskboard._faults import (
    FAULT_KINDS,
    FaultKind,
    InjectedFault,
    InjectedFaultRecord,
    inject_faults,
)

__all__ = ["FAULT_KINDS", "FaultKind", "InjectedFault", "InjectedFaultRecord", "inject_faults"]
