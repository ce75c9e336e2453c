"""The order of a graph's nodes, which bounds what any schedule of it can reach.

A schedule (DESIGN.md) runs each stage's computations in index order, so the order fixes
which values are alive together: checkpoint-all's peak, and the least peak of any schedule.
``memory_order`` is a topological order that keeps memory low (a greedy list schedule);
``lower_order`` returns it where it lowers checkpoint-all's peak, which is where the capture
uses it (``remat.capture``).
"""
from __future__ import annotations

from remat.graph.core import RematGraph


def memory_order(graph: RematGraph) -> tuple[int, ...]:
    """A topological order of ``graph``'s nodes: each step runs, among the nodes whose inputs
    are all computed, the one that adds the least memory (its output, less the inputs it is the
    last reader of; ties: the lower index). On a graph whose forward nodes come first (as
    ``remat.capture`` makes them), forward nodes stay before backward ones and the loss (the
    last forward node) last among them; nodes marked ``random`` in ``node_meta`` (dropout: the
    runtime draws their masks in graph order, as eager does) keep their order among
    themselves."""
    size = graph.size
    waiting = [len(set(deps)) for deps in graph.deps]
    readers = [len(set(users)) for users in graph.users]
    randoms = [v for v in range(size) if graph.node_meta and graph.node_meta[v].get("random")]
    next_random = {a: b for a, b in zip(randoms, randoms[1:])}
    for v in randoms[1:]:
        waiting[v] += 1  # also waits for the random node before it
    ready = [v for v in range(size) if waiting[v] == 0]
    order: list[int] = []
    forward_left = len(graph.forward_nodes)
    while ready:
        forward = [v for v in ready if not graph.is_backward[v]
                   and (v != graph.loss_node or forward_left == 1)]
        forward_left -= bool(forward)
        node = min(forward or ready, key=lambda v: (_added(graph, v, readers), v))
        ready.remove(node)
        order.append(node)
        for dep in set(graph.deps[node]):
            readers[dep] -= 1
        released = list(set(graph.users[node]))
        if node in next_random:
            released.append(next_random[node])  # once more where it is also a user
        for user in released:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return tuple(order)


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
    freed = sum(graph.mem[dep] for dep in set(graph.deps[node]) if readers[dep] == 1)
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
