"""Mutants whose every call takes a few milliseconds, as a store over a network does: on the
wall clock their runs differ in timing from one replay to the next, though their bugs do not
depend on time (what shrinking by replay is for)."""

from __future__ import annotations

import time
from typing import Any

from taskboard.hosts.mutants import RenewWithoutTokenCheck

#: How long each call takes, in seconds.
CALL_SECONDS = 0.003


class _Slow:
    """Sleeps before every board call."""

    def list_tasks(self) -> Any:
        time.sleep(CALL_SECONDS)
        return super().list_tasks()  # type: ignore[misc]

    def claim(self, *args: Any) -> Any:
        time.sleep(CALL_SECONDS)
        return super().claim(*args)  # type: ignore[misc]

    def renew(self, *args: Any) -> Any:
        time.sleep(CALL_SECONDS)
        return super().renew(*args)  # type: ignore[misc]

    def release(self, *args: Any) -> Any:
        time.sleep(CALL_SECONDS)
        return super().release(*args)  # type: ignore[misc]

    def complete(self, *args: Any) -> Any:
        time.sleep(CALL_SECONDS)
        return super().complete(*args)  # type: ignore[misc]


class SlowRenewWithoutTokenCheck(_Slow, RenewWithoutTokenCheck):
    """RenewWithoutTokenCheck, a few milliseconds a call."""
