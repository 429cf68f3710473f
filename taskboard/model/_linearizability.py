"""Is a concurrent history linearizable with respect to the reference model?

A history is what several threads saw while calling one board at the same time:
each :class:`Operation` has a call, an outcome and the monotonic times of its
invocation and response. It is *linearizable* when some sequential order of its
operations (a) respects real time, so an operation that returned before another
was invoked comes first, and (b) is accepted by :class:`BoardModel` step by step.
:func:`check_history` searches for such an order.

The search is Wing and Gong's, with Lowe's refinements and Porcupine's cache: a
depth-first search that only ever linearizes a *minimal* operation next (one
invoked no later than the earliest response among the operations still to
place), and never visits the same (set of linearized operations, model state)
twice. The stack is explicit, so 10,000 operations need no recursion limit.

On a manual clock, time does not move during the concurrent part, so every call
is judged at one ``now``. On the wall clock (SPEC 7), each operation carries the
:class:`~taskboard.model.Window` it took effect in, and the history is *timed
linearizable* when some order as above also gives every operation an instant
inside its window, with instants non-decreasing along the order. The model keeps
the earliest instant its last call may have taken effect at (its ``floor``) and
judges each call on its window from there; since a call's outcome depends on time
only through its task's lease, the earliest instant that allows it is always the
best choice, and the search needs no branching on instants either.

The model's own nondeterminism needs no branching here: :meth:`BoardModel.advance`
adopts the tokens and fences the board minted and accepts both answers of SPEC 3.4.

**Ambiguous operations.** An operation whose call raised an infrastructure error
(``outcome=None``) may or may not have taken effect; as Knossos does with
``:info``, it responds at infinity: it constrains nothing, it may be linearized
anywhere after its invocation, or never. Applied, a release, complete or fail
succeeded. A claim or renew returns a task nobody saw, so:

- with a final snapshot, an applied claim or renew returned the task exactly as
  that snapshot shows it. This is complete because the clock is fixed: a claim
  that took effect leaves a live lease whose token its caller never received,
  so nothing can end it and the final snapshot must show it; a renew that took
  effect and was later overwritten is indistinguishable from one skipped (the
  lease was live before and after; the model's seq is only a lower bound);
- without one, an applied claim holds the task with a placeholder lease whose
  token nobody has (so later claims see ``TakenError``), and a renew is only
  skipped (its effect is invisible, see above).

Ambiguous operations alone therefore never make a history fail on a manual
clock. On the wall clock a lease can expire during the concurrent part, so an
applied ambiguous claim may have been taken over before the final snapshot; it is
then only skipped, which can reject a history in which it held the task for a
while (only with infrastructure faults, in parallel mode on the wall clock).

**Partitions.** Tasks only interact through dependencies (a claim checks the
state of its dependencies), so the history splits into the connected components
of the undirected dependency graph, each checked against the model restricted to
its tasks (with the final snapshot restricted likewise): linearizability is a
local property (Herlihy and Wing). Two things span partitions: the final
snapshot's set of task ids, checked once up front, and token freshness ("never
issued before by this board, for any task"), checked once over the whole
history, since a partition's model sees only its own claims. A witness for the
whole history is merged from the partitions' witnesses (see :func:`_merge`).

**Budget.** A wall-clock budget covers the whole check; when it runs out the
verdict is ``"unknown"``, never ``"linearizable"``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal, TypeAlias

from taskboard._contract import Lease, State, Task
from taskboard._operations import BY_OP
from taskboard.model._calls import Call, Op, Outcome, Window
from taskboard.model._model import BoardModel, ContractViolation, applied_outcome

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["LinearizabilityResult", "LinearizabilityVerdict", "Operation", "check_history"]

#: What :func:`check_history` concludes.
LinearizabilityVerdict = Literal["linearizable", "not linearizable", "unknown"]


@dataclass(frozen=True)
class Operation:
    """One call in a concurrent history, with when it started and ended.

    ``outcome`` is ``None`` when the call ended in an infrastructure error, so
    it may or may not have taken effect (an *ambiguous* operation); its
    ``returned`` is then ignored and taken as ``math.inf``. Times are seconds
    on one monotonic clock. ``window`` is when the call took effect on the wall
    clock (SPEC 7); ``None`` judges it at :func:`check_history`'s ``now``.
    """

    id: int
    thread: int
    call: Call
    outcome: Outcome | None
    invoked: float
    returned: float = math.inf
    window: Window | None = None

    @property
    def ambiguous(self) -> bool:
        """True when nobody knows whether the call took effect."""
        return self.outcome is None

    def __str__(self) -> str:
        result = "ambiguous" if self.outcome is None else str(self.outcome)
        return f"#{self.id} (thread {self.thread}) {self.call} {result}"


@dataclass(frozen=True)
class LinearizabilityResult:
    """The verdict on a history, with the evidence for it.

    ``order`` is a witness (ids in linearization order, ambiguous operations
    included only where applied) when the history is linearizable, else the
    longest linearizable prefix the search found (with partitions: that of the
    partition that failed; empty when the verdict is unknown). When it is not
    linearizable, ``stuck`` holds the operations that could come next after
    that prefix and ``reasons`` says, for each, why the model rejects it there;
    a final snapshot no order can reach is a reason with no stuck operation, a
    token two claims in different partitions returned one with the later claim.
    ``explored`` counts the search states visited. True only when linearizable.
    """

    verdict: LinearizabilityVerdict
    order: tuple[int, ...] = ()
    stuck: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()
    explored: int = 0

    def __bool__(self) -> bool:
        return self.verdict == "linearizable"


def check_history(
    model: BoardModel,
    history: Sequence[Operation],
    now: datetime,
    *,
    final_snapshot: Sequence[Task] | None = None,
    budget: float = 5.0,
    partition: bool = True,
) -> LinearizabilityResult:
    """Decide whether ``history`` is linearizable, starting from ``model`` at a fixed ``now``.

    An operation with a ``window`` is judged on it instead of at ``now`` (timed
    linearizability, SPEC 7).

    ``model`` is the board before the concurrent part. With ``final_snapshot``
    (a ``list_tasks()`` read after every thread finished), an order only counts
    if its final model also reconciles with that snapshot. ``budget`` is in
    wall-clock seconds for the whole check. ``partition`` checks the connected
    components of the dependency graph separately.

    Raises:
        ValueError: the history is malformed (duplicate ids, a definite
            operation that returned before it was invoked, a time that is NaN).
    """
    deadline = time.monotonic() + budget
    ops = list(history)
    _validate(ops)
    final = None if final_snapshot is None else list(final_snapshot)
    if final is not None:
        problem = _snapshot_shape_problem(model, final)
        if problem is not None:
            return LinearizabilityResult("not linearizable", reasons=(problem,))
    known = _known_tokens(model, ops)
    if not partition:
        return _Search(model, ops, now, final, known, deadline).run()

    groups = _partitions(model, ops)
    duplicate = _cross_partition_duplicate(ops, groups, final, known)
    if duplicate is not None:
        return duplicate
    by_id = {task.id: task for task in final} if final is not None else {}
    explored = 0
    orders: list[tuple[int, ...]] = []
    unknown: LinearizabilityResult | None = None
    for task_ids, part_ops in sorted(groups, key=lambda g: (len(g[1]), sorted(g[0]))):
        records = tuple(r for r in model.records if r.task.id in task_ids)
        sub_model = dataclasses.replace(model, records=records)
        sub_final = None if final is None else [by_id[r.task.id] for r in records]
        result = _Search(sub_model, part_ops, now, sub_final, known, deadline).run()
        explored += result.explored
        if result.verdict == "not linearizable":
            return dataclasses.replace(result, explored=explored)
        if result.verdict == "unknown":
            unknown = unknown or result
        else:
            orders.append(result.order)
    if unknown is not None:
        return dataclasses.replace(unknown, order=(), explored=explored)
    return LinearizabilityResult("linearizable", _merge(ops, orders), explored=explored)


# -- the search ----------------------------------------------------------------------------------


class _Frame:
    """One state of the depth-first search, with the candidates still to try from it."""

    __slots__ = ("candidates", "inv_ptr", "mask", "model", "next", "order", "placed", "ret_ptr")

    def __init__(
        self,
        mask: int,
        model: BoardModel,
        order: _Node,
        placed: int,
        ret_ptr: int,
        inv_ptr: int,
        candidates: list[int],
    ) -> None:
        self.mask = mask
        self.model = model
        self.order = order
        self.placed = placed  # definite operations linearized so far
        self.ret_ptr = ret_ptr
        self.inv_ptr = inv_ptr
        self.candidates = candidates
        self.next = 0


# The order so far as a persistent linked list (index, rest): pushing shares the parent's list.
_Node: TypeAlias = tuple[int, "_Node"] | None


def _ids(ops: Sequence[Operation], node: _Node) -> tuple[int, ...]:
    ids: list[int] = []
    while node is not None:
        ids.append(ops[node[0]].id)
        node = node[1]
    return tuple(reversed(ids))


class _Search:
    """Wing-Gong/Lowe search over one history (or one partition of it)."""

    def __init__(
        self,
        model: BoardModel,
        ops: Sequence[Operation],
        now: datetime,
        final: list[Task] | None,
        known_tokens: frozenset[str],
        deadline: float,
    ) -> None:
        self.model = model
        self.ops = ops
        self.now = now
        self.final = final
        self.deadline = deadline
        self.invoked = [op.invoked for op in ops]
        self.returned = [math.inf if op.outcome is None else op.returned for op in ops]
        definite = [i for i, op in enumerate(ops) if op.outcome is not None]
        self.by_invocation = sorted(definite, key=lambda i: (self.invoked[i], ops[i].id))
        self.by_return = sorted(definite, key=lambda i: (self.returned[i], ops[i].id))
        # What an applied ambiguous operation returned; ``None``: it can only be skipped.
        self.applied: dict[int, Outcome | None] = {}
        for i, op in enumerate(ops):
            if op.outcome is None:
                self.applied[i] = _applied_outcome(op.call, final, known_tokens)
        self.ambiguous = sorted(
            (i for i in range(len(ops)) if i in self.applied and self._may_apply(i)),
            key=lambda i: (self.invoked[i], ops[i].id),
        )
        self.done = bytearray(len(ops))
        self.best: _Frame | None = None
        self.final_reason = ""

    def _may_apply(self, i: int) -> bool:
        # A claim without a final snapshot gets a placeholder; otherwise it needs an outcome.
        return self.applied[i] is not None or (
            self.final is None and self.ops[i].call.op is Op.CLAIM
        )

    def run(self) -> LinearizabilityResult:
        """Search until a witness is found, every state is exhausted, or time runs out."""
        if time.monotonic() > self.deadline:
            return LinearizabilityResult("unknown")
        root = self._frame(0, self.model, None, 0, 0, 0)
        if self._accepts(root):
            return LinearizabilityResult("linearizable", (), explored=1)
        visited = {(0, self.model.records, self.model.floor)}
        stack = [root]
        explored = 1
        ops, done, now = self.ops, self.done, self.now
        while stack:
            frame = stack[-1]
            if frame.next == len(frame.candidates):
                stack.pop()
                if frame.order is not None:
                    done[frame.order[0]] = 0
                continue
            i = frame.candidates[frame.next]
            frame.next += 1
            if time.monotonic() > self.deadline:
                return LinearizabilityResult(
                    "unknown", _ids(ops, self._best().order), explored=explored
                )
            op = ops[i]
            outcome = op.outcome
            if outcome is None:
                outcome = self._ambiguous_outcome(i, frame.model)
                if outcome is None:
                    continue
            try:
                model = frame.model.advance(op.call, op.window or now, outcome)
            except ContractViolation:
                continue
            mask = frame.mask | (1 << i)
            key = (mask, model.records, model.floor)
            if key in visited:
                continue
            visited.add(key)
            done[i] = 1
            placed = frame.placed + (op.outcome is not None)
            child = self._frame(mask, model, (i, frame.order), placed, frame.ret_ptr, frame.inv_ptr)
            explored += 1
            if self._accepts(child):
                return LinearizabilityResult(
                    "linearizable", _ids(ops, child.order), explored=explored
                )
            stack.append(child)
        return self._failure(explored)

    def _frame(
        self, mask: int, model: BoardModel, order: _Node, placed: int, ret_ptr: int, inv_ptr: int
    ) -> _Frame:
        done, by_return, by_invocation = self.done, self.by_return, self.by_invocation
        while ret_ptr < len(by_return) and done[by_return[ret_ptr]]:
            ret_ptr += 1
        bound = self.returned[by_return[ret_ptr]] if ret_ptr < len(by_return) else math.inf
        while inv_ptr < len(by_invocation) and done[by_invocation[inv_ptr]]:
            inv_ptr += 1
        candidates = []
        for k in range(inv_ptr, len(by_invocation)):
            j = by_invocation[k]
            if self.invoked[j] > bound:
                break
            if not done[j]:
                candidates.append(j)
        for j in self.ambiguous:
            if self.invoked[j] > bound:
                break
            if not done[j]:
                candidates.append(j)
        frame = _Frame(mask, model, order, placed, ret_ptr, inv_ptr, candidates)
        if self.best is None or placed > self.best.placed:
            self.best = frame
        return frame

    def _best(self) -> _Frame:
        assert self.best is not None
        return self.best

    def _accepts(self, frame: _Frame) -> bool:
        if frame.placed < len(self.by_return):
            return False
        if self.final is None:
            return True
        try:
            frame.model.reconcile(self.final)
        except ContractViolation as violation:
            self.final_reason = self.final_reason or f"the final snapshot: {violation}"
            return False
        return True

    def _ambiguous_outcome(self, i: int, model: BoardModel) -> Outcome | None:
        outcome = self.applied[i]
        if outcome is not None or self.final is not None:
            return outcome
        return _placeholder_claim(self.ops[i], model, self.now)

    def _failure(self, explored: int) -> LinearizabilityResult:
        best = self._best()
        order = _ids(self.ops, best.order)
        if best.placed == len(self.by_return):
            return LinearizabilityResult(
                "not linearizable", order, (), (self.final_reason,), explored
            )
        placed = set()
        node = best.order
        while node is not None:
            placed.add(node[0])
            node = node[1]
        remaining = [i for i in self.by_return if i not in placed]
        bound = self.returned[remaining[0]]
        stuck: list[int] = []
        reasons: list[str] = []
        for i in sorted(remaining, key=lambda i: (self.invoked[i], self.ops[i].id)):
            op = self.ops[i]
            if self.invoked[i] > bound:
                break
            assert op.outcome is not None
            try:
                best.model.advance(op.call, op.window or self.now, op.outcome)
            except ContractViolation as violation:
                stuck.append(op.id)
                reasons.append(str(violation))
        return LinearizabilityResult(
            "not linearizable", order, tuple(stuck), tuple(reasons), explored
        )


def _applied_outcome(
    call: Call, final: list[Task] | None, known_tokens: frozenset[str]
) -> Outcome | None:
    """What an ambiguous call returned if it took effect, when that can be known."""
    if final is None:
        return Outcome() if BY_OP[call.op].returns == "nothing" else None
    return applied_outcome(call, final, known_tokens)


def _placeholder_claim(op: Operation, model: BoardModel, now: datetime) -> Outcome | None:
    """An ambiguous claim taken effect, without a final snapshot: a lease nobody holds."""
    task = model.task(op.call.task_id)
    if task is None:
        return None
    fences = [issued.fence for issued in model.issued if issued.task_id == task.id]
    if task.lease is not None:
        fences.append(task.lease.fence)
    ttl = op.call.ttl
    if op.window is not None:
        now = op.window.earliest
    lease = Lease(
        f"<token of ambiguous operation {op.id}>",
        max(fences, default=0) + 1,
        now + ttl if ttl > timedelta(0) else None,
    )
    return Outcome(
        task=dataclasses.replace(
            task, state=State.CLAIMED, owner=op.call.agent, lease=lease, seq=task.seq + 1
        )
    )


# -- checks across the whole history -------------------------------------------------------------


def _validate(ops: Sequence[Operation]) -> None:
    seen: set[int] = set()
    for op in ops:
        if not isinstance(op, Operation):
            raise TypeError(f"a history holds Operation values, got {op!r}")
        if op.id in seen:
            raise ValueError(f"operation ids must be unique, {op.id!r} occurs twice")
        seen.add(op.id)
        if math.isnan(op.invoked) or math.isinf(op.invoked):
            raise ValueError(f"operation {op.id} has invocation time {op.invoked!r}")
        if op.window is not None and not isinstance(op.window, Window):
            raise TypeError(f"operation {op.id} has window {op.window!r}, not a Window")
        if op.outcome is not None and not op.invoked <= op.returned < math.inf:
            raise ValueError(
                f"operation {op.id} returned at {op.returned!r}, not after its invocation "
                f"at {op.invoked!r} (an ambiguous operation has outcome=None)"
            )


def _snapshot_shape_problem(model: BoardModel, final: list[Task]) -> str | None:
    """Why the final snapshot cannot match any model: not tasks, duplicates, wrong ids."""
    expected = {task.id for task in model.tasks}
    ids = [item.id if isinstance(item, Task) else None for item in final]
    if None not in ids and len(set(ids)) == len(ids) and set(ids) == expected:
        return None
    try:
        model.reconcile(final)
    except ContractViolation as violation:
        return f"the final snapshot: {violation}"
    return (
        "the final snapshot does not list each task of the board exactly once"  # pragma: no cover
    )


def _claimed_token(op: Operation) -> str | None:
    if op.call.op is not Op.CLAIM or op.outcome is None or not op.outcome.ok:
        return None
    task = op.outcome.task
    if task is None or task.lease is None or not isinstance(task.lease.token, str):
        return None
    return task.lease.token


def _known_tokens(model: BoardModel, ops: Iterable[Operation]) -> frozenset[str]:
    """Every token the board issued before, or returned to some claim of the history."""
    tokens = {issued.token for issued in model.issued}
    tokens.update(t for t in map(_claimed_token, ops) if t is not None)
    return frozenset(tokens)


def _partitions(
    model: BoardModel, ops: Sequence[Operation]
) -> list[tuple[frozenset[str], list[Operation]]]:
    """The connected components of the dependency graph, with the operations on their tasks.

    Operations on ids the board does not have form one more group, with no tasks.
    """
    # Imported here: networkx takes a tenth of a second to import, and `import taskboard`
    # (whose criteria make their calls through the model's Call) checks no history.
    import networkx as nx

    graph: nx.Graph[str] = nx.Graph()
    ids = {task.id for task in model.tasks}
    for task in model.tasks:
        graph.add_node(task.id)
        graph.add_edges_from((task.id, dep) for dep in task.deps if dep in ids)
    components = [frozenset(c) for c in nx.connected_components(graph)]
    where = {task_id: k for k, component in enumerate(components) for task_id in component}
    groups: list[list[Operation]] = [[] for _ in components]
    strays: list[Operation] = []
    for op in ops:
        k = where.get(op.call.task_id)
        (strays if k is None else groups[k]).append(op)
    result = list(zip(components, groups, strict=True))
    if strays:
        result.append((frozenset(), strays))
    return result


def _cross_partition_duplicate(
    ops: Sequence[Operation],
    groups: Sequence[tuple[frozenset[str], list[Operation]]],
    final: list[Task] | None,
    known: frozenset[str],
) -> LinearizabilityResult | None:
    """A token returned by claims (or shown by the final snapshot) in two partitions."""
    owner: dict[str, tuple[int, str]] = {}  # token -> (partition, who got it)
    part_of_task = {task_id: k for k, (ids, _) in enumerate(groups) for task_id in ids}
    for k, (_, part_ops) in enumerate(groups):
        for op in sorted(part_ops, key=lambda op: (op.invoked, op.id)):
            token = _claimed_token(op)
            if token is None:
                continue
            first = owner.setdefault(token, (k, f"operation #{op.id} ({op.call})"))
            if first[0] != k:
                return _duplicate(op.id, token, first[1], f"operation #{op.id} ({op.call})")
    for task in final or ():
        lease = task.lease
        if lease is None or not isinstance(lease.token, str) or lease.token in known:
            continue
        k = part_of_task.get(task.id, -1)
        first = owner.setdefault(lease.token, (k, f"the final snapshot's task {task.id!r}"))
        if first[0] != k:
            return _duplicate(None, lease.token, first[1], f"the final snapshot's task {task.id!r}")
    return None


def _duplicate(op_id: int | None, token: str, first: str, second: str) -> LinearizabilityResult:
    reason = (
        "SPEC 3.1: expected a token never issued before by this board, for any task; "
        f"the board gave token {token!r} to {first} and to {second}"
    )
    stuck = () if op_id is None else (op_id,)
    return LinearizabilityResult("not linearizable", (), stuck, (reason,))


def _merge(ops: Sequence[Operation], orders: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """One witness for the whole history from the partitions' witnesses.

    Repeatedly take the head invoked first. That respects real time: if some
    operation ``a`` still to come returned before the chosen head ``h`` was
    invoked, the head of ``a``'s own order was invoked no later than ``a``
    returned (its witness respects real time), so before ``h``: a contradiction.
    """
    invoked = {op.id: op.invoked for op in ops}
    heads = [(invoked[order[0]], order[0], k, 0) for k, order in enumerate(orders) if order]
    heapq.heapify(heads)
    merged: list[int] = []
    while heads:
        _, op_id, k, pos = heapq.heappop(heads)
        merged.append(op_id)
        if pos + 1 < len(orders[k]):
            nxt = orders[k][pos + 1]
            heapq.heappush(heads, (invoked[nxt], nxt, k, pos + 1))
    return tuple(merged)
