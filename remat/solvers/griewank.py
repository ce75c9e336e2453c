"""``griewank``: binomial checkpointing (Griewank 1992; Griewank & Walther 2000, "Algorithm
799: Revolve") for chains.

With s snapshot slots (the chain's input occupies one, as in Revolve), reversing l steps
costs at least ``p(l, s)`` forward steps beyond the tapes of the adjoint steps. The classical
recursion ``p(l, s) = min_j j + p(l - j, s - 1) + p(j, s)``, ``p(1, s) = 0``,
``p(l, 1) = l(l-1)/2`` is solved by dynamic programming; its optimal split drives the schedule.
In remat's graph every adjoint step except the last re-runs its layer (the tape), so the
schedule recomputes exactly ``p(n, s)`` forward nodes. We try every s and keep the cheapest
schedule whose simulated peak fits the budget.
"""
from __future__ import annotations

import time
from functools import lru_cache
from math import comb

import numpy as np

from remat.errors import UnsupportedGraphError
from remat.graph.core import RematGraph
from remat.schedule.rs import s_from_r, tighten
from remat.schedule.simulate import simulate
from remat.schedule.solution import Solution
from remat.solvers._checkpoints import deadline_of
from remat.solvers.base import SolveOptions


def forward_steps(length: int, slots: int) -> int:
    """Griewank & Walther's closed form for the least number of forward steps ``p(l, s)``.

    ``p(l, s) = r*l - beta(s+1, r-1)`` with ``beta(s, r) = C(s+r, s)`` and r the integer with
    ``beta(s, r-1) < l <= beta(s, r)`` (Algorithm 799, Proposition 1).
    """
    if length <= 1:
        return 0
    r = 0
    while comb(slots + r, slots) < length:
        r += 1
    return r * length - comb(slots + r, slots + 1)


@lru_cache(maxsize=None)
def _split_table(max_len: int, max_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """DP tables: cost[l, s] and the best first split[l, s] (steps advanced before the snapshot)."""
    cost = np.zeros((max_len + 1, max_slots + 1), dtype=np.int64)
    split = np.zeros((max_len + 1, max_slots + 1), dtype=np.int64)
    lengths = np.arange(max_len + 1)
    cost[:, 1] = lengths * (lengths - 1) // 2
    split[:, 1] = np.maximum(lengths - 1, 0)
    for s in range(2, max_slots + 1):
        for length in range(2, max_len + 1):
            j = np.arange(1, length)
            total = j + cost[length - j, s - 1] + cost[j, s]
            best = int(np.argmin(total))
            cost[length, s], split[length, s] = total[best], j[best]
    return cost, split


def adjoint_order(n: int, slots: int) -> list[tuple[list[int], int]]:
    """Revolve's actions grouped per adjoint step: ``[(forward steps advanced, step), ...]``.

    Steps are 1-based (step i maps state i-1 to state i). The advances listed with adjoint i are
    the forward steps re-run after adjoint i+1 and before adjoint i (the first group is the
    forward sweep itself).
    """
    _, split = _split_table(n, n)
    slots = min(slots, n)
    groups: list[tuple[list[int], int]] = []
    pending: list[int] = []

    def reverse(base: int, length: int, s: int) -> None:
        nonlocal pending
        if length == 1:
            groups.append((pending, base + 1))
            pending = []
            return
        if s == 1:
            for j in range(length, 0, -1):
                pending += list(range(base + 1, base + j))
                groups.append((pending, base + j))
                pending = []
            return
        j = int(split[length, s])
        pending += list(range(base + 1, base + j + 1))
        reverse(base + j, length - j, s - 1)
        reverse(base, j, s)

    reverse(0, n, slots)
    return groups


def chain_schedule(graph: RematGraph, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """R/S of the binomial schedule with ``slots`` snapshots on a chain graph."""
    n = len(graph.forward_nodes) - 1  # forward nodes are layers 0..n-1 and the loss
    loss = n
    R = np.zeros((graph.size, graph.size), dtype=bool)
    R[np.arange(loss + 1), np.arange(loss + 1)] = True
    backward_of = _backward_of_layers(graph, n)
    for k, (advances, step) in enumerate(adjoint_order(n, slots)):
        stage = backward_of[step - 1]
        if k == 0:
            R[stage, stage] = True  # the forward sweep already ran every layer
            continue
        R[stage, [a - 1 for a in advances]] = True
        R[stage, step - 1] = True  # the tape: re-run layer step-1 for its adjoint
        R[stage, stage] = True
    for t in range(loss + 1, graph.size):
        R[t, t] = True
    return tighten(graph, s_from_r(graph, R))


def _backward_of_layers(graph: RematGraph, n: int) -> list[int]:
    """Stage of the backward node of each layer: the backward node that reads layer k last."""
    out = []
    for k in range(n):
        readers = [u for u in graph.users[k] if graph.is_backward[u]]
        if not readers:
            raise UnsupportedGraphError(f"griewank: {graph.describe(k)} has no backward node; "
                                        "the graph is not a training step of a chain")
        out.append(min(readers))
    return out


def applies(graph: RematGraph) -> bool:
    """Chains only: each forward node reads just the one before it, and each layer has a
    backward node reading it (captured chains may have layers no backward node reads)."""
    if not graph.is_chain or len(graph.forward_nodes) < 2:
        return False
    layers = graph.forward_nodes[:-1]
    return all(any(graph.is_backward[u] for u in graph.users[k]) for k in layers)


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    if not applies(graph):
        raise UnsupportedGraphError(
            "griewank handles chains only (each forward node reads just the one before it, and "
            "every layer has a backward node); "
            "use chen-greedy, milp or auto for this graph")
    start = time.perf_counter()
    deadline = deadline_of(options.time_limit)
    n = len(graph.forward_nodes) - 1
    best, min_peak, tried = None, float("inf"), 0
    for slots in range(1, n + 1):
        R, S = chain_schedule(graph, slots)
        sim = simulate(graph, R, S)
        tried += 1
        min_peak = min(min_peak, sim.peak_memory)
        if sim.peak_memory <= budget and (best is None or sim.compute_cost < best[0]):
            best = (sim.compute_cost, R, S, slots)
        if deadline is not None and time.perf_counter() > deadline:
            break
        if slots >= n - 1:
            break
    elapsed = time.perf_counter() - start
    if best is None:
        return Solution.infeasible(graph, "griewank", budget, min_budget=min_peak,
                                   solve_time=elapsed)
    return Solution.from_schedule(graph, best[1], best[2], "griewank", "feasible", budget,
                                  solve_time=elapsed, min_budget=min_peak, slots=best[3])
