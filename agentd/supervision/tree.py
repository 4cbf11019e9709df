"""A task's logical tree of subagents: grants as reservations, structural caps, enforcement
(docs/design.md §7).

Pure bookkeeping and decisions, no I/O and no clock reads. The supervisor is the source of truth:
every `ev/usage` is recorded here at once; a spawn request becomes a `Grant` or a `Refusal` that
names the cap and the value; `record_usage` reports the node whose subtree went over its grant.

A node's *used* budget is its own usage plus everything its descendants used. Its *committed*
budget also counts what its live children still hold in reserve. A child's grant is at most the
parent's grant minus its committed budget, so parallel children can never together spend more
than their parent had.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

DEPTH_CAP = 4
LIVE_CHILDREN_CAP = 8
LIFETIME_CAP = 64
BUCKET_BURST = 8.0
BUCKET_REFILL_PER_S = 2.0
MIN_CHILD_TOKENS = 1000
MIN_CHILD_DEADLINE_S = 1.0

# server name → the tools granted on it (None: every tool the parent had on it).
Scope = Mapping[str, frozenset[str] | None]


@dataclass(frozen=True, slots=True)
class Budget:
    steps: int = 0
    tokens: int = 0
    # Micro-USD (agentd/supervision/pricing.py); a grant without a cost budget holds UNBOUNDED_MICROS.
    cost: int = 0

    def __add__(self, other: Budget) -> Budget:
        return Budget(self.steps + other.steps, self.tokens + other.tokens, self.cost + other.cost)

    def __sub__(self, other: Budget) -> Budget:
        return Budget(self.steps - other.steps, self.tokens - other.tokens, self.cost - other.cost)

    def exceeds(self, limit: Budget, *, cost: bool = True) -> bool:
        """Over `limit` in steps or tokens, or (when `cost`: the tree has a cost budget) in cost."""
        over_cost = cost and self.cost > limit.cost
        return self.steps > limit.steps or self.tokens > limit.tokens or over_cost


@dataclass
class Node:
    handle: str
    parent: str | None
    depth: int
    grant: Budget
    deadline: float
    scope: Scope
    own: Budget = Budget()
    children: list[str] = field(default_factory=list)
    live: bool = True
    # Invariant: once set, no spawn is granted to this node or any descendant.
    stopping: bool = False
    next_index: int = 1


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str


@dataclass(frozen=True, slots=True)
class Grant:
    handle: str
    depth: int
    budget: Budget
    deadline: float
    scope: Scope


@dataclass(frozen=True, slots=True)
class ChildRequest:
    """A spawn request as the tree sees it (values the parent asked for; None = default)."""

    max_steps: int | None = None
    max_tokens: int | None = None
    deadline_s: float | None = None
    tool_scope: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Defaults:
    child_steps: int = 20
    child_tokens: int = 50_000
    max_depth: int = DEPTH_CAP
    # The dearest token of the task's endpoints in micro-USD, set when the task has a cost budget
    # (0: it has none, and cost is counted but never checked): a child's token grant reserves the
    # most its tokens could cost from the parent's cost budget.
    micros_per_token: float = 0.0

    @property
    def cost_bounded(self) -> bool:
        return self.micros_per_token > 0


class Tree:
    """One task's nodes. Handles are minted here: `0`, `0.1`, `0.1.2`."""

    def __init__(
        self, grant: Budget, deadline: float, scope: Scope, *, now: float, defaults: Defaults = Defaults()
    ) -> None:
        self.nodes: dict[str, Node] = {"0": Node("0", None, 0, grant, deadline, scope)}
        self.defaults = defaults
        self.spawned = 0
        self._bucket = BUCKET_BURST
        self._bucket_at = now
        # Invariant: once set (task cancelling, daemon draining), no spawn is granted at all.
        self.closed: str | None = None

    # ---- budgets ---------------------------------------------------------------------------

    def used(self, handle: str) -> Budget:
        """Own usage plus every descendant's."""
        node = self.nodes[handle]
        total = node.own
        for child in node.children:
            total = total + self.used(child)
        return total

    def committed(self, handle: str) -> Budget:
        """Used, plus what live children still hold in reserve beyond what they used."""
        node = self.nodes[handle]
        total = node.own
        for handle_c in node.children:
            child = self.nodes[handle_c]
            used = self.used(handle_c)
            if child.live:
                used = Budget(
                    max(used.steps, child.grant.steps),
                    max(used.tokens, child.grant.tokens),
                    max(used.cost, child.grant.cost),
                )
            total = total + used
        return total

    def available(self, handle: str) -> Budget:
        return self.nodes[handle].grant - self.committed(handle)

    def record_usage(self, handle: str, delta: Budget) -> str | None:
        """Count usage at once; return the highest node whose subtree is now over its grant."""
        if handle not in self.nodes:
            return None
        node = self.nodes[handle]
        node.own = node.own + delta
        over: str | None = None
        for ancestor in self.ancestry(handle):
            if self.used(ancestor).exceeds(self.nodes[ancestor].grant, cost=self.defaults.cost_bounded):
                over = ancestor  # keep walking up: the highest one wins
        return over

    def uncount(self, handle: str, delta: Budget) -> None:
        """Take back usage counted with `record_usage` that is now counted again elsewhere."""
        node = self.nodes[handle]
        node.own = node.own - delta

    def ancestry(self, handle: str) -> Iterator[str]:
        """`handle`, its parent, …, the root."""
        current: str | None = handle
        while current is not None:
            yield current
            current = self.nodes[current].parent

    # ---- structure -------------------------------------------------------------------------

    def subtree(self, handle: str) -> list[str]:
        """Every node under and including `handle`, deepest first."""
        # A walk with a stack, not a recursive closure: that closure refers to itself, a cycle only
        # the garbage collector frees.
        out, stack = [], [handle]
        while stack:
            h = stack.pop()
            out.append(h)
            stack.extend(self.nodes[h].children)
        return sorted(out, key=lambda h: -self.nodes[h].depth)

    def live_children(self, handle: str) -> list[str]:
        return [c for c in self.nodes[handle].children if self.nodes[c].live]

    def end(self, handle: str) -> None:
        node = self.nodes.get(handle)
        if node is not None:
            node.live = False

    def mark_stopping(self, handle: str) -> None:
        for h in self.subtree(handle):
            self.nodes[h].stopping = True

    # ---- spawning --------------------------------------------------------------------------

    def _take_token(self, now: float) -> float | None:
        """Spend one spawn token; None if there was one, else the seconds until one refills."""
        self._bucket = min(BUCKET_BURST, self._bucket + (now - self._bucket_at) * BUCKET_REFILL_PER_S)
        self._bucket_at = now
        if self._bucket >= 1.0:
            self._bucket -= 1.0
            return None
        return (1.0 - self._bucket) / BUCKET_REFILL_PER_S

    def narrow_scope(self, parent: Node, wanted: tuple[str, ...] | None) -> Scope | Refusal:
        """The child's scope: a subset of the parent's, or a refusal naming what would widen it."""
        if wanted is None:
            return dict(parent.scope)
        scope: dict[str, set[str] | None] = {}
        for entry in wanted:
            server, _, tool = entry.partition("/")
            if server not in parent.scope:
                return Refusal(
                    f"tool scope would widen the parent's: server `{server}` is not granted to "
                    f"node {parent.handle}"
                )
            granted = parent.scope[server]
            if not tool:
                scope[server] = None if granted is None else set(granted)
                continue
            if granted is not None and tool not in granted:
                return Refusal(
                    f"tool scope would widen the parent's: `{server}/{tool}` is not granted to "
                    f"node {parent.handle}"
                )
            current = scope.get(server, set())
            if current is not None:
                current.add(tool)
                scope[server] = current
        return {s: (None if t is None else frozenset(t)) for s, t in scope.items()}

    def decide_spawn(
        self, parent_handle: str, request: ChildRequest, *, now: float, handle: str | None = None
    ) -> Grant | Refusal:
        """Check every cap, then mint the child's handle and grant (nothing is recorded on refusal).
        `handle`: the one a resumed child had (its transcript goes on under it)."""
        parent = self.nodes.get(parent_handle)
        if parent is None or not parent.live:
            return Refusal(f"node {parent_handle} is not live")
        if self.closed is not None:
            return Refusal(f"no new subagents: {self.closed}")
        if parent.stopping:
            return Refusal(f"no new subagents: node {parent_handle} is being cancelled")
        max_depth = min(self.defaults.max_depth, DEPTH_CAP)
        if parent.depth + 1 > max_depth:
            return Refusal(f"depth cap {max_depth} reached (node {parent_handle} is at depth {parent.depth})")
        live = len(self.live_children(parent_handle))
        if live >= LIVE_CHILDREN_CAP:
            return Refusal(
                f"live-children cap {LIVE_CHILDREN_CAP} reached (node {parent_handle} has {live} running)"
            )
        if self.spawned >= LIFETIME_CAP:
            return Refusal(f"lifetime cap {LIFETIME_CAP} subagents per task reached")
        scope = self.narrow_scope(parent, request.tool_scope)
        if isinstance(scope, Refusal):
            return scope
        free = self.available(parent_handle)
        steps = min(request.max_steps or self.defaults.child_steps, free.steps)
        tokens = min(request.max_tokens or self.defaults.child_tokens, free.tokens)
        if steps < 1 or tokens < MIN_CHILD_TOKENS:
            return Refusal(
                f"budget: node {parent_handle} has {max(free.steps, 0)} steps and "
                f"{max(free.tokens, 0)} tokens left to grant (its grant minus what it and its "
                "children used or hold)"
            )
        # Reserved like tokens: the most the child's tokens could cost, within what the parent has.
        cost = min(math.ceil(tokens * self.defaults.micros_per_token), free.cost)
        if self.defaults.cost_bounded and cost <= 0:
            return Refusal(
                f"cost budget: node {parent_handle} has no money left to grant (its cost grant minus "
                "what it and its children spent or hold)"
            )
        remaining_s = parent.deadline - now
        deadline_s = min(request.deadline_s or remaining_s, remaining_s)
        if deadline_s < MIN_CHILD_DEADLINE_S:
            return Refusal(f"deadline: node {parent_handle} has {max(remaining_s, 0):.1f}s left")
        wait_s = self._take_token(now)
        if wait_s is not None:
            return Refusal(
                f"spawn rate limit: burst {BUCKET_BURST:g}, refill {BUCKET_REFILL_PER_S:g}/s "
                f"(next in {wait_s:.1f}s)"
            )
        handle = handle or f"{parent_handle}.{parent.next_index}"
        return Grant(handle, parent.depth + 1, Budget(steps, tokens, cost), now + deadline_s, scope)

    def skip_indexes(self, parent_handle: str, used: int) -> None:
        """New children of `parent_handle` get indexes above `used` (an earlier run's handles,
        whose transcripts are journaled, are never given to another child)."""
        node = self.nodes[parent_handle]
        node.next_index = max(node.next_index, used + 1)

    def add(self, parent_handle: str, grant: Grant) -> Node:
        """Record a granted child (call right after `decide_spawn` returned the grant)."""
        parent = self.nodes[parent_handle]
        parent.next_index += 1
        parent.children.append(grant.handle)
        self.spawned += 1
        node = Node(grant.handle, parent_handle, grant.depth, grant.budget, grant.deadline, grant.scope)
        self.nodes[grant.handle] = node
        return node
