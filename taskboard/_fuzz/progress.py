"""The live status line of a fuzzing run."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """A status line on stderr: rewritten in place on a terminal, a line every 10 s otherwise.

    It counts sequential examples and parallel programs apart, so a parallel run's line moves
    too."""

    def __init__(self, stream: TextIO | None, started: float, budget: float) -> None:
        self.stream, self.started, self.budget = stream, started, budget
        self.tty = bool(stream is not None and stream.isatty())
        self.last = 0.0
        #: When the last line before a failure was shown: the rate counts finding only.
        self.found_at = started
        self.shrinking = ""

    def show(
        self, examples: int, programs: int, steps: int, failures: int, shrinking: str = ""
    ) -> None:
        """Show the counts, unless the line was shown a moment ago; ``shrinking`` (where
        shrinking a failure is) takes the place of the rate, which counts finding only."""
        now = time.monotonic()
        if self.stream is None or now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        if shrinking:
            self.shrinking = shrinking
        elif not failures:
            self.found_at = now
        self._write(examples, programs, steps, failures, now, final=False)

    def close(self, examples: int, programs: int, steps: int, failures: int) -> None:
        """Show the final counts."""
        if self.stream is not None:
            self._write(examples, programs, steps, failures, time.monotonic(), final=True)

    def _write(
        self, examples: int, programs: int, steps: int, failures: int, now: float, *, final: bool
    ) -> None:
        assert self.stream is not None
        elapsed = now - self.started
        finding = (self.found_at if failures else now) - self.started
        rate = steps / finding if finding > 0 else 0.0
        left = max(0.0, self.budget - elapsed)
        line = (
            f"examples {examples} | parallel programs {programs} | steps/s {rate:,.0f} | "
            f"failures {failures} | "
            + (
                self.shrinking
                if failures and self.shrinking and not final
                else f"left {timedelta(seconds=round(left))}"
            )
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
