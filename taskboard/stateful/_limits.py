"""What leases a board can hold, declared or learned, and the nearest lease it holds to a
drawn one.

A store may hold fewer leases than SPEC 2 describes: a file lock that never expires, a store
with a longest TTL, one that cannot renew to "no expiry", one that keeps whole units only. A
board says so by declaring :class:`LeaseLimits` (the ``lease_limits`` setting), or by
answering a claim or a renew it cannot hold with ``NotImplementedError`` (the protocol's
``unsupported``), from which the run learns the limit (:meth:`LeaseLimits.learned_from`).
Either way the machine then asks only for leases the board holds
(:meth:`LeaseLimits.holdable`): no example is spent on calls refused before the library is
touched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta

from taskboard.model import Call, Op, format_duration
from taskboard.stateful._runstate import current_run

__all__ = ["LIMITED_OPS", "LIMIT_WORDS", "Holding", "LeaseLimits"]

#: The operations that ask for a lease, and so can ask for one the board cannot hold.
LIMITED_OPS = (Op.CLAIM, Op.RENEW)


def _round_up(ttl: timedelta, grain: timedelta) -> timedelta:
    return -(-ttl // grain) * grain


#: The words of ``--lease-limits``, each with the fields it sets.
LIMIT_WORDS: dict[str, dict[str, object]] = {
    "any": {},
    "no-expiry-only": {"expiring": False},
    "expiring-only": {"no_expiry": False},
    "no-renew-to-no-expiry": {"renew_to_no_expiry": False},
    "whole-units": {"whole_units": True},
    "shortest=MS": {},
    "longest=MS": {},
}


@dataclass(frozen=True)
class LeaseLimits:
    """What leases a board can hold; the default holds every lease SPEC 2 describes.

    Raises:
        ValueError: a board that holds neither leases that expire nor leases without
            expiry, or a ``longest`` or ``shortest`` that is not a positive duration.
    """

    #: It holds leases that expire (``False``: leases without expiry only, a lock that
    #: never expires).
    expiring: bool = True
    #: A claim may ask for no expiry (ttl 0).
    no_expiry: bool = True
    #: A renew may ask for no expiry (ttl 0).
    renew_to_no_expiry: bool = True
    #: The longest TTL it holds (``None``: any).
    longest: timedelta | None = None
    #: The shortest TTL it holds (``None``: any); a shorter one drawn is raised to it. Unlike
    #: the ``shortest_lease`` setting, the drawn TTL unit stays as it is.
    shortest: timedelta | None = None
    #: Whole units of the store's resolution only: a TTL below it (or between two of its
    #: units) is rounded up.
    whole_units: bool = False

    def __post_init__(self) -> None:
        if not self.expiring and not self.no_expiry:
            raise ValueError("a board must hold leases that expire, or leases without expiry")
        for name in ("longest", "shortest"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
                raise ValueError(f"LeaseLimits.{name} must be a positive timedelta or None")

    @classmethod
    def parse(cls, text: str) -> LeaseLimits:
        """Limits as ``taskboard fuzz --lease-limits`` takes them: comma-separated words of
        :data:`LIMIT_WORDS` (``no-expiry-only``, ``longest=5000``, TTLs in milliseconds), or
        ``any``.

        Raises:
            ValueError: a word it does not know, a bad number, or limits that hold nothing.
        """
        fields: dict[str, object] = {}
        for word in filter(None, (part.strip() for part in text.split(","))):
            name, _, number = word.partition("=")
            if name in ("shortest", "longest") and number:
                try:
                    milliseconds = float(number)
                except ValueError:
                    raise ValueError(f"{name}= takes milliseconds, got {number!r}") from None
                if not 0 < milliseconds < 1e12:
                    raise ValueError(f"{name}= takes a positive number of ms, got {number}")
                fields[name] = timedelta(milliseconds=milliseconds)
            elif LIMIT_WORDS.get(word):
                fields.update(LIMIT_WORDS[word])
            elif word != "any":
                known = ", ".join(LIMIT_WORDS)
                raise ValueError(f"unknown lease limit {word!r}: use {known} (comma-separated)")
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def limited(self) -> bool:
        """True unless every lease SPEC 2 describes is held."""
        return self != LeaseLimits()

    def describe(self) -> str:
        """The limits in words: ``leases without expiry only``, or ``any lease``."""
        words = []
        if not self.expiring:
            words.append("leases without expiry only")
        if not self.no_expiry:
            words.append("no claim without expiry")
        if not self.renew_to_no_expiry and self.no_expiry:
            words.append("no renew to no expiry")
        if self.shortest is not None and self.expiring:
            words.append(f"TTLs of {format_duration(self.shortest)} or more")
        if self.longest is not None and self.expiring:
            words.append(f"TTLs of {format_duration(self.longest)} or less")
        if self.whole_units and self.expiring:
            words.append("whole units of the resolution only")
        return ", ".join(words) or "any lease"

    def _holds_no_expiry(self, op: Op) -> bool:
        return self.no_expiry and (op is not Op.RENEW or self.renew_to_no_expiry)

    def holdable(
        self, op: Op, ttl: timedelta, resolution: timedelta, outliving: timedelta
    ) -> timedelta:
        """The TTL to ask for in place of ``ttl`` in a call of ``op``: ``ttl`` itself when the
        board holds it, else the nearest it holds. A lease without expiry the board cannot
        hold becomes the longest it holds, up to ``outliving`` (a lease that outlives any
        example); an expiring one on a board without them, no expiry."""
        if op not in LIMITED_OPS:
            return ttl
        if not ttl:
            if self._holds_no_expiry(op) or not self.expiring:
                return ttl
            ttl = outliving if self.longest is None else min(outliving, self.longest)
        elif not self.expiring:
            return timedelta(0) if self._holds_no_expiry(op) else ttl
        if self.whole_units:
            ttl = _round_up(ttl, resolution)
        if self.shortest is not None:
            ttl = max(ttl, self.shortest)
        if self.longest is not None:
            ttl = min(ttl, self.longest)
        return ttl

    def learned_from(
        self, op: Op, ttl: timedelta, resolution: timedelta, outliving: timedelta
    ) -> LeaseLimits:
        """These limits, with what the board's ``unsupported`` answer to ``op`` asking for
        ``ttl`` says: it cannot hold a lease without expiry (for a claim, or for a renew);
        or a TTL below its resolution; or an expiring lease as short, when it held a longer
        one, or, when it held none, as short as twice that (so a board with a long shortest
        TTL is found in a few answers); or, at ``outliving`` or more, any expiring lease."""
        if op not in LIMITED_OPS:
            return self
        if not ttl:
            if op is Op.RENEW and self.no_expiry:
                return dataclasses.replace(self, renew_to_no_expiry=False)
            if self.expiring:
                return dataclasses.replace(self, no_expiry=False)
            return self
        if ttl % resolution:
            return dataclasses.replace(self, whole_units=True)
        shortest = max(self.shortest or timedelta(0), 2 * ttl)
        too_long = ttl >= outliving or (self.longest is not None and shortest > self.longest)
        if too_long:  # what was learned of expiring leases no longer matters
            return self.without_expiring() if self.no_expiry else self
        return dataclasses.replace(self, shortest=shortest)

    def without_expiring(self) -> LeaseLimits:
        """These limits on a board that holds no expiring lease at all."""
        return LeaseLimits(
            expiring=False, no_expiry=True, renew_to_no_expiry=self.renew_to_no_expiry
        )


@dataclass
class Holding:
    """One example's view of what its board holds: the limits in force (declared, and
    learned earlier in the run by the same machine class), and how many of its calls were
    refused as unsupported, or had their TTL changed to one the board holds."""

    machine: type
    declared: LeaseLimits
    limits: LeaseLimits
    resolution: timedelta
    outliving: timedelta
    refused: int = 0
    adapted: int = 0

    @classmethod
    def start(
        cls,
        machine: type,
        declared: LeaseLimits | None,
        resolution: timedelta,
        outliving: timedelta,
    ) -> Holding:
        """The limits ``machine``'s boards were found to have in the run under way, or the
        ``declared`` ones (none: any lease)."""
        run = current_run()
        learned = None if run is None else run.lease_limits.get(machine)
        declared = declared or LeaseLimits()
        return cls(machine, declared, learned or declared, resolution, outliving)

    def words(self) -> tuple[str, str]:
        """The limits declared, and those in force, in words (empty: any lease)."""
        declared, limits = self.declared, self.limits
        return (
            declared.describe() if declared.limited else "",
            limits.describe() if limits.limited else "",
        )

    def holdable(self, call: Call) -> Call:
        """``call`` with a TTL the board holds (see :meth:`LeaseLimits.holdable`)."""
        ttl = self.limits.holdable(call.op, call.ttl, self.resolution, self.outliving)
        if ttl == call.ttl:
            return call
        self.adapted += 1
        return dataclasses.replace(call, ttl=ttl)

    def refused_by(self, call: Call, error: BaseException) -> bool:
        """True when ``error`` is the board's answer that it cannot hold the lease ``call``
        asks for (``NotImplementedError``, the protocol's ``unsupported``): the run learns
        the limit, and asks for no such lease again. Once the run has seen a failure it
        learns no more, so that the failure replays with the calls it was found with."""
        if call.op not in LIMITED_OPS or not isinstance(error, NotImplementedError):
            return False
        self.refused += 1
        run = current_run()
        if run is not None and not run.first_failures:
            self.limits = self.limits.learned_from(
                call.op, call.ttl, self.resolution, self.outliving
            )
            run.lease_limits[self.machine] = self.limits
        return True
