"""Campaigns: many ``taskboard fuzz`` workers, on any machines, publishing to one Redis.

Every key of campaign ``NAME`` starts with ``taskboard:campaign:NAME:`` and lives for
:data:`KEEP_SECONDS` after the last publish:

- ``totals`` (hash): examples, steps, programs (parallel program runs), finds, faults;
- ``coverage`` (hash): each SPEC transition (task state, operation, outcome) and its count;
- ``workers`` (hash): each worker's id and what it said of itself, as JSON;
- ``alive:WORKER`` (string): there while the worker publishes; it expires
  :data:`ALIVE_SECONDS` after the last publish, so a worker that died drops out;
- ``timeline`` (stream, at most :data:`TIMELINE_LENGTH` entries): the totals and the number
  of transitions covered, at each publish;
- ``finds`` (stream, at most :data:`FINDS_LENGTH` entries): each violation or fault, with its
  report and its trace file's text.

A worker publishes its counts at most every :data:`PUBLISH_EVERY` seconds, each time as one
``MULTI``/``EXEC`` transaction: a worker that dies leaves nothing half-written. A find is
published before the worker's run returns, so before it exits 1.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taskboard._fuzz.targets import UsageError
from taskboard.stateful._session import ExampleStats

__all__ = [
    "ALIVE_SECONDS",
    "FINDS_LENGTH",
    "KEEP_SECONDS",
    "PUBLISH_EVERY",
    "TIMELINE_LENGTH",
    "CampaignView",
    "Find",
    "Publisher",
    "check_campaign",
    "read_campaign",
    "redis_client",
    "when",
]

#: Seconds between two publishes of one worker's counts.
PUBLISH_EVERY = 1.0
#: A worker counts as alive this long after its last publish.
ALIVE_SECONDS = 15
#: A campaign's keys are kept this long after the last publish (30 days).
KEEP_SECONDS = 30 * 24 * 3600
#: The most entries the timeline and the finds streams keep (approximately, as Redis trims).
TIMELINE_LENGTH = 5000
FINDS_LENGTH = 200

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def when(at: float) -> str:
    """A Unix time as the campaign's views show it (UTC, to the second)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def check_campaign(name: str, database: str | None) -> None:
    """Raises:
    UsageError: the name is not 1 to 100 letters, digits, ``.``, ``_`` or ``-`` (starting
        with a letter or digit), or ``database`` is not a ``redis://`` URL."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"a campaign name is 1 to 100 letters, digits, '.', '_' or '-', got {name!r}"
        )
    if database is None or not database.startswith(_REDIS_SCHEMES):
        raise UsageError(
            "--campaign publishes to Redis: give the campaign's --database redis://HOST/N"
        )


def redis_client(url: str, what: str = "the campaign's redis") -> Any:
    """A Redis client of ``url`` that answers; ``what`` names it in an error.

    Raises:
        UsageError: the redis client is not installed, or the server does not answer.
    """
    try:
        import redis
    except ImportError:
        raise UsageError(
            f"{what} needs the redis client: pip install 'taskboard-contract[redis]'"
        ) from None
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise UsageError(f"cannot reach {what} at {url}: {exc}") from None
    return client


def _keys(name: str) -> str:
    return f"taskboard:campaign:{name}:"


def _transition(key: tuple[str, str, str]) -> str:
    return " | ".join(key)


class Publisher:
    """One worker's publisher: :meth:`heard` each example, :meth:`finish` at the end."""

    def __init__(self, url: str, name: str, target: str) -> None:
        """Raises:
        UsageError: as :func:`check_campaign`, or the server does not answer."""
        check_campaign(name, url)
        self._client = redis_client(url)
        self._prefix = _keys(name)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._about = {"target": target, "host": socket.gethostname(), "pid": os.getpid()}
        self._about["started"] = time.time()
        self._pending: Counter[str] = Counter()
        self._coverage: Counter[str] = Counter()
        self._sent = 0.0

    def heard(self, example: ExampleStats) -> None:
        """Count one example (not a shrinking run); publish if :data:`PUBLISH_EVERY` passed."""
        self._pending["programs" if example.parallel else "examples"] += 1
        self._pending["steps"] += example.steps
        self._coverage.update({_transition(k): n for k, n in example.transitions.items()})
        if time.monotonic() - self._sent >= PUBLISH_EVERY:
            self.publish()

    def publish(self, find: dict[str, str] | None = None) -> None:
        """Send what was counted since the last publish (and ``find``), in one transaction."""
        prefix, pipe = self._prefix, self._client.pipeline(transaction=True)
        for field, count in self._pending.items():
            pipe.hincrby(prefix + "totals", field, count)
        for transition, count in self._coverage.items():
            pipe.hincrby(prefix + "coverage", transition, count)
        if find is not None:
            pipe.hincrby(prefix + "totals", "faults" if find["kind"] == "fault" else "finds", 1)
            pipe.xadd(prefix + "finds", find, maxlen=FINDS_LENGTH, approximate=True)
        pipe.hset(prefix + "workers", self.worker, json.dumps(self._about))
        pipe.set(prefix + "alive:" + self.worker, 1, ex=ALIVE_SECONDS)
        pipe.hgetall(prefix + "totals")
        pipe.hlen(prefix + "coverage")
        for key in ("totals", "coverage", "workers", "timeline", "finds"):
            pipe.expire(prefix + key, KEEP_SECONDS)
        results = pipe.execute()
        totals, covered = results[-7], results[-6]  # the hgetall and hlen, before 5 expires
        self._pending.clear()
        self._coverage.clear()
        self._sent = time.monotonic()
        self._timeline(totals, covered)

    def _timeline(self, totals: Any, covered: Any) -> None:
        # After the transaction, which cannot read what it wrote: a worker that dies here
        # loses one point of the timeline, never a count.
        entry = {k.decode(): v.decode() for k, v in (totals or {}).items()}
        entry.update(at=f"{time.time():.3f}", covered=str(covered or 0), worker=self.worker)
        pipe = self._client.pipeline(transaction=True)
        pipe.xadd(self._prefix + "timeline", entry, maxlen=TIMELINE_LENGTH, approximate=True)
        pipe.expire(self._prefix + "timeline", KEEP_SECONDS)  # also on its first point
        pipe.execute()

    def finish(
        self, failure: str | None, *, fault: bool, clause: str | None, trace_file: str | None
    ) -> None:
        """Publish the last counts, and the run's ``failure`` (a find, with the text of its
        ``trace_file``) if it has one."""
        find = None
        if failure is not None:
            trace = ""
            if trace_file is not None and Path(trace_file).is_file():
                trace = Path(trace_file).read_text(encoding="utf-8")
            find = {
                "kind": "fault" if fault else "violation",
                "at": f"{time.time():.3f}",
                "worker": self.worker,
                "clause": clause or "",
                "report": failure,
                "trace": trace,
            }
        self.publish(find)
        self._client.delete(self._prefix + "alive:" + self.worker)  # done: no longer alive


@dataclass(frozen=True)
class Find:
    """A violation or fault a worker of the campaign published."""

    kind: str
    at: float
    worker: str
    clause: str
    report: str
    trace: str


@dataclass(frozen=True)
class CampaignView:
    """The merged state of a campaign, as :func:`read_campaign` read it."""

    name: str
    totals: dict[str, int]
    coverage: dict[str, int]
    #: Every worker that published, and what it said of itself.
    workers: dict[str, dict[str, Any]]
    alive: frozenset[str]
    #: The timeline, oldest first: (unix time, examples, steps, transitions covered, finds).
    timeline: tuple[tuple[float, int, int, int, int], ...]
    finds: tuple[Find, ...]

    def rate(self, window: float = 60.0) -> float:
        """Examples (and parallel programs) per second over the last ``window`` seconds of
        the timeline; 0 with fewer than two points in it."""
        if not self.timeline:
            return 0.0
        last = self.timeline[-1]
        points = [p for p in self.timeline if p[0] >= last[0] - window]
        first = points[0]
        if last[0] <= first[0]:
            return 0.0
        return (last[1] - first[1]) / (last[0] - first[0])


def read_campaign(url: str, name: str) -> CampaignView:
    """The campaign ``name`` as its workers published it to ``url``.

    Raises:
        UsageError: a bad name or URL, an unreachable server, or no campaign of that name.
    """
    check_campaign(name, url)
    client, prefix = redis_client(url), _keys(name)
    pipe = client.pipeline(transaction=True)
    for key in ("totals", "coverage", "workers"):
        pipe.hgetall(prefix + key)
    pipe.xrange(prefix + "timeline")
    pipe.xrange(prefix + "finds")
    totals, coverage, workers, timeline, finds = pipe.execute()
    if not workers:
        raise UsageError(f"no campaign {name!r} at {url}: no worker has published to it")
    alive = client.mget([prefix + "alive:" + w.decode() for w in workers])
    return CampaignView(
        name=name,
        totals={k.decode(): int(v) for k, v in totals.items()},
        coverage={k.decode(): int(v) for k, v in coverage.items()},
        workers={k.decode(): json.loads(v) for k, v in workers.items()},
        alive=frozenset(w.decode() for w, a in zip(workers, alive, strict=True) if a),
        timeline=tuple(_point(fields) for _, fields in timeline),
        finds=tuple(_find(fields) for _, fields in finds),
    )


def _point(fields: dict[bytes, bytes]) -> tuple[float, int, int, int, int]:
    def number(key: str) -> int:
        return int(fields.get(key.encode(), b"0"))

    examples = number("examples") + number("programs")
    at = float(fields.get(b"at", b"0"))
    return (at, examples, number("steps"), number("covered"), number("finds"))


def _find(fields: dict[bytes, bytes]) -> Find:
    text = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
    return Find(
        kind=text.get("kind", ""),
        at=float(text.get("at", "0")),
        worker=text.get("worker", ""),
        clause=text.get("clause", ""),
        report=text.get("report", ""),
        trace=text.get("trace", ""),
    )
