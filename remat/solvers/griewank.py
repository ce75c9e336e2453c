"""``griewank``: binomial checkpointing (Griewank 1992; Griewank & Walther 2000, "Algorithm
799: Revolve") for chains.

With s snapshot slots (the chain's input occupies one, as in Revolve), reversing l steps
costs at least ``p(l, s)`` forward steps beyond the tapes of the adjoint steps. The classical
recursion ``p(l, s) = min_j j + p(l - j, s - 1) + p(j, s)``, ``p(1, s) = 0``,
``p(l, 1) = l(l-1)/2`` has the closed form ``forward_steps``; each reversal's first split is
the least j that attains its minimum (``_split``), and the splits drive the schedule.
In remat's graph every adjoint step except the last re-runs its layer (the tape), so the
schedule recomputes exactly ``p(n, s)`` forward nodes. The slot counts: a bisection for the
largest s whose simulated peak fits the budget, the counts next to it, then the others from
the largest down, until the time limit (``_slot_order``; without one, every count, as
trying them all from 1 up did before). The cheapest schedule that fits wins; ``min_budget``
is the least peak of the counts tried. On linear(1024, unit) at 30% of its budget range,
trying the counts from 1 up reached 211 in 30 s (1.8956 of the total cost); the bisection's
answer, 1.8487, comes within 1.6 s.
"""
from __future__ import annotations

import time
from math import comb

import numpy as np

from remat.errors import UnsupportedGraphError
from remat.graph.core import RematGraph
from remat.schedule.rs import s_from_r, tighten
from remat.schedule.simulate import simulate
from remat.schedule.solution import Solution
from remat.solvers.base import SolveOptions, deadline_of, past


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


def _steps(lengths: np.ndarray, slots: int) -> np.ndarray:
    """``forward_steps`` of every length in ``lengths`` (an int array) with ``slots`` slots."""
    if slots == 1:
        return lengths * (lengths - 1) // 2
    top = int(lengths.max(initial=1))
    limits = [1]  # limits[r] = beta(slots, r) = C(slots + r, slots), up to the longest length
    while limits[-1] < top:
        limits.append(comb(slots + len(limits), slots))
    r = np.searchsorted(np.array(limits, dtype=np.int64), lengths)  # least r: l <= beta(s, r)
    shares = np.array([comb(slots + k, slots + 1) for k in range(len(limits))], dtype=np.int64)
    return np.where(lengths <= 1, 0, r * lengths - shares[r])


def _split(length: int, slots: int) -> int:
    """The steps to advance before the first snapshot: the least j that attains
    ``p(l, s) = min_j j + p(l - j, s - 1) + p(j, s)``, from the closed form (the recursion's
    values; O(l) per split, where its table took O(n^2 s) to build: 6.2 s at 1024 layers)."""
    if slots == 1 or length <= 2:
        return max(length - 1, 0)
    j = np.arange(1, length, dtype=np.int64)
    total = j + _steps(length - j, slots - 1) + _steps(j, slots)
    return int(j[np.argmin(total)])


def adjoint_order(n: int, slots: int) -> list[tuple[list[int], int]]:
    """Revolve's actions grouped per adjoint step: ``[(forward steps advanced, step), ...]``.

    Steps are 1-based (step i maps state i-1 to state i). The advances listed with adjoint i are
    the forward steps re-run after adjoint i+1 and before adjoint i (the first group is the
    forward sweep itself).
    """
    slots = min(slots, n)
    groups: list[tuple[list[int], int]] = []
    pending: list[int] = []
    todo = [(0, n, slots)]  # reversals left, next on top (a stack: the recursion goes n deep)
    while todo:
        base, length, s = todo.pop()
        if length == 1:
            groups.append((pending, base + 1))
            pending = []
        elif s == 1:
            for j in range(length, 0, -1):
                pending += list(range(base + 1, base + j))
                groups.append((pending, base + j))
                pending = []
        else:
            j = _split(length, s)
            pending += list(range(base + 1, base + j + 1))
            todo += [(base, j, s), (base + j, length - j, s - 1)]
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


WINDOW = 3
"""Slot counts tried on each side of the bisection's answer (peaks need not grow strictly with
the slots on heterogeneous chains)."""


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    if not applies(graph):
        raise UnsupportedGraphError(
            "griewank handles chains only (each forward node reads just the one before it, and "
            "every layer has a backward node); "
            "use chen-greedy, milp or auto for this graph")
    start = time.perf_counter()
    deadline = deadline_of(options.time_limit)
    n = len(graph.forward_nodes) - 1
    tried: dict[int, tuple[float, float]] = {}  # slots: (peak, cost); schedules are large

    def fits(slots: int) -> bool:
        if slots not in tried:
            sim = simulate(graph, *chain_schedule(graph, slots))
            tried[slots] = (sim.peak_memory, sim.compute_cost)
        return tried[slots][0] <= budget

    for slots in _slot_order(max(n - 1, 1), fits, deadline):
        fits(slots)
        if past(deadline):
            break
    min_peak = min(peak for peak, _ in tried.values())
    fitting = [(cost, slots) for slots, (peak, cost) in tried.items() if peak <= budget]
    if not fitting:
        return Solution.infeasible(graph, "griewank", budget, min_budget=min_peak,
                                   solve_time=time.perf_counter() - start)
    slots = min(fitting)[1]
    R, S = chain_schedule(graph, slots)
    return Solution.from_schedule(graph, R, S, "griewank", "feasible", budget,
                                  solve_time=time.perf_counter() - start, min_budget=min_peak,
                                  slots=slots)


def _slot_order(most: int, fits, deadline: float | None):
    """The slot counts to try, until ``deadline``: a bisection for the largest count that fits
    (peaks mostly grow with the slots, costs fall), ``WINDOW`` counts on each side of its
    answer, then every other count from the largest down (peaks are not monotone in the
    count: on linear(10) the least is at 2 slots). Without a deadline every count is tried.
    Small counts come last: they cost the most (O(n^2) recomputations with one slot: 7.8 s to
    build and simulate at 2048 layers, 0.8 s with 600 slots)."""
    low = yield from _bisect(most, fits, deadline)
    yield from range(max(low - WINDOW, 1), min(low + WINDOW, most) + 1)
    yield from range(most, 0, -1)  # counts already tried cost nothing again


def _bisect(most: int, fits, deadline: float | None):
    """Yields the counts of a bisection over 1..``most``; returns the largest found to fit
    (0 if none)."""
    low, high = 0, most + 1  # low fits (or is 0); nothing from high up is known to fit
    while high - low > 1 and not past(deadline):
        middle = (low + high) // 2
        yield middle
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
