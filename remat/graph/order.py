"""The order of a graph's nodes, which bounds what any schedule of it can reach.

A schedule (DESIGN.md) runs each stage's computations in index order, so the order fixes
which values are alive together: checkpoint-all's peak, and the least peak of any schedule.
``memory_order`` is a topological order that keeps memory low (a greedy list schedule);
``lower_order`` returns it where it lowers checkpoint-all's peak, which is where the capture
uses it (``remat.capture``).
"""
from __future__ import annotations

import heapq

from remat.graph.core import RematGraph

ORDERS = ("memory", "trace")
"""How ``remat.capture`` orders a graph's nodes: ``"memory"`` (``lower_order``:
``memory_order`` where it lowers checkpoint-all's peak, else as traced) or ``"trace"``
(forward nodes, then backward ones, each as autograd traced them)."""


def memory_order(graph: RematGraph) -> tuple[int, ...]:
    """A topological order of ``graph``'s nodes: each step runs, among the nodes whose inputs
    are all computed, the one that adds the least memory (its output, less the inputs it is the
    last reader of; ties: the lower index). On a graph whose forward nodes come first (as
    ``remat.capture`` makes them), forward nodes stay before backward ones and the loss (the
    last forward node) last among them; nodes marked ``random`` in ``node_meta`` (dropout: the
    runtime draws their masks in graph order, as eager does) keep their order among
    themselves. The ready nodes sit in two heaps (forward, backward); a node's entry is
    renewed when one of its inputs gets down to it as the last reader: O(E log n)."""
    size = graph.size
    waiting = [len(deps) for deps in graph.deps]
    readers = [len(users) for users in graph.users]
    randoms = [v for v in range(size) if graph.node_meta and graph.node_meta[v].get("random")]
    next_random = dict(zip(randoms, randoms[1:]))
    for v in randoms[1:]:
        waiting[v] += 1  # also waits for the random node before it
    ready = _Ready(graph, readers)
    for v in range(size):
        if waiting[v] == 0:
            ready.push(v)
    order: list[int] = []
    forward_left = len(graph.forward_nodes)
    while len(order) < size:
        node = ready.pop(graph.loss_node if forward_left > 1 else None)
        forward_left -= not graph.is_backward[node]
        order.append(node)
        for dep in graph.deps[node]:
            readers[dep] -= 1
            if readers[dep] == 1:  # its last reader now frees it
                ready.renew(next(u for u in graph.users[dep] if not ready.done[u]))
        released = list(graph.users[node])
        if node in next_random:
            released.append(next_random[node])  # once more where it is also a user
        for user in released:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.push(user)
    return tuple(order)


class _Ready:
    """The ready nodes of ``memory_order``, by (memory added, index), forward and backward
    apart; stale heap entries are skipped when popped."""

    def __init__(self, graph: RematGraph, readers: list[int]):
        self.graph, self.readers = graph, readers
        self.heaps: tuple[list, list] = ([], [])
        self.key: dict[int, tuple[float, int]] = {}
        self.done = [False] * graph.size

    def push(self, node: int) -> None:
        self.key[node] = (_added(self.graph, node, self.readers), node)
        heapq.heappush(self.heaps[int(self.graph.is_backward[node])], self.key[node])

    def renew(self, node: int) -> None:
        """A ready node's key may have gone down: a new entry (the old one goes stale), but
        never two live entries with one key."""
        if node in self.key and (_added(self.graph, node, self.readers), node) != self.key[node]:
            self.push(node)

    def pop(self, held: int | None) -> int:
        """The least forward node other than ``held`` (the loss, while other forward nodes
        are left); where there is none, the least of all."""
        top, stash = self._top(0), None
        if top is not None and top[1] == held:
            stash = heapq.heappop(self.heaps[0])
            top = self._top(0)
        if top is None:
            if stash is not None:
                heapq.heappush(self.heaps[0], stash)
                stash = None
            top = min(t for t in (self._top(0), self._top(1)) if t is not None)
        heapq.heappop(self.heaps[int(self.graph.is_backward[top[1]])])  # top is its head
        if stash is not None:
            heapq.heappush(self.heaps[0], stash)
        del self.key[top[1]]
        self.done[top[1]] = True
        return top[1]

    def _top(self, side: int) -> tuple[float, int] | None:
        """The least live entry of a heap (stale ones dropped), or None."""
        heap = self.heaps[side]
        while heap and self.key.get(heap[0][1]) != heap[0]:
            heapq.heappop(heap)
        return heap[0] if heap else None


def lower_order(graph: RematGraph) -> tuple[int, ...] | None:
    """``memory_order(graph)`` where the graph in that order has a lower checkpoint-all peak;
    None where it has not. Where the plain peak is the same the order stays: there the least
    peak found moved both ways (one-off runs on ResNet-50 and GPT-2 at op level,
    bench/results/fast_notes.md, session 26)."""
    from remat.schedule.budget import checkpoint_all_peak  # remat.schedule builds on graphs

    order = memory_order(graph)
    if checkpoint_all_peak(reordered(graph, order)) >= checkpoint_all_peak(graph):
        return None
    return order


def _added(graph: RematGraph, node: int, readers: list[int]) -> float:
    """Bytes computing ``node`` adds once its inputs that it reads last are freed."""
    freed = sum(graph.mem[dep] for dep in graph.deps[node] if readers[dep] == 1)
    return float(graph.mem[node] - freed)


def reordered(graph: RematGraph, order) -> RematGraph:
    """``graph`` with its nodes in ``order`` (a topological order: a permutation of the node
    indices, every dependency earlier); the same nodes, dependencies renumbered."""
    order = [int(v) for v in order]
    if sorted(order) != list(range(graph.size)):
        raise ValueError(f"order must be a permutation of the {graph.size} node indices")
    position = {v: i for i, v in enumerate(order)}
    return RematGraph([graph.names[v] for v in order], graph.cost[order], graph.mem[order],
                      [sorted(position[d] for d in graph.deps[v]) for v in order],
                      graph.is_backward[order], static_mem=graph.static_mem,
                      node_meta=[graph.node_meta[v] for v in order] if graph.node_meta else None,
                      meta=graph.meta, workspace=graph.workspace[order])
