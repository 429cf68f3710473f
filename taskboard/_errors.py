"""Every error taskboard defines.

Two families live here. :class:`BoardError` and its five subclasses are the
contract's outcomes: a host *raises* them to reject an operation, and a
rejected operation changes nothing. :class:`CriterionError` is the checker's
own verdict that a criterion could not be judged; no board ever raises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Self

__all__ = [
    "BlockedError",
    "BoardError",
    "CriterionError",
    "LeaseLostError",
    "NotFoundError",
    "TakenError",
    "TerminalError",
]


class BoardError(Exception):
    """Root of the contract errors a board raises to reject an operation.

    Code that judges a board matches these classes, never message text, so a
    host must raise these very classes (or subclasses of them).
    """


class NotFoundError(BoardError, LookupError):
    """No task has this id. Checked first by every operation."""


class TerminalError(BoardError):
    """``claim`` of a task that is ``DONE``. Done is forever; ``FAILED`` is not terminal."""


class BlockedError(BoardError):
    """``claim`` of a task with a dependency that is not ``DONE`` yet."""


class TakenError(BoardError):
    """``claim`` of a task whose current lease is still live.

    Raised even when the caller's agent name is the current owner's: agents are
    not identities, tokens are. Contrast :class:`LeaseLostError`, which rejects
    an action taken *with* a token.
    """


class LeaseLostError(BoardError):
    """An action with a token that no longer holds the task.

    ``release``, ``complete``, ``fail`` and ``renew`` raise it when the task is
    not ``CLAIMED`` or the token is not its current lease's token; ``renew``
    also raises it when that lease has expired. A stale holder's late action is
    always rejected this way, and never touches the new holder's lease.
    """


CriterionVerdict = Literal["infrastructure fault", "inconclusive"]


class CriterionError(ExceptionGroup[Exception]):
    """A concurrency criterion could not be judged; it carries every collected exception.

    ``verdict`` says which of two things happened, and the message starts with it:

    * ``"infrastructure fault"``: something that is not a contract outcome got in
      the way (a ``ConnectionError``, a driver error, a participant that never
      returned within the timeout). Such a fault is never counted as a loser:
      counting it would turn a broken store green.
    * ``"inconclusive"``: participants failed with contract errors other than the
      expected loser's error (``BlockedError`` from ``concurrent_claim``, say), or
      the set-up claim failed, so they never reached the contention being judged.

    It is an :class:`ExceptionGroup`, so ``except*`` and pytest show every
    participant's exception with its traceback.
    """

    verdict: CriterionVerdict

    def __new__(
        cls, verdict: CriterionVerdict, message: str, exceptions: Sequence[Exception]
    ) -> Self:
        self = super().__new__(cls, f"{verdict}: {message}", list(exceptions))
        self.verdict = verdict
        return self

    def __init__(
        self, verdict: CriterionVerdict, message: str, exceptions: Sequence[Exception]
    ) -> None:
        super().__init__(f"{verdict}: {message}", list(exceptions))

    def derive(self, excs: Sequence[Exception]) -> CriterionError:  # type: ignore[override]
        """Keep the class and verdict when ``except*`` splits the group."""
        message = self.message.removeprefix(f"{self.verdict}: ")
        return CriterionError(self.verdict, message, excs)
