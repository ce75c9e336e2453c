"""Exhaustive search over schedules of tiny graphs (T <= 7), for checking milp and min_budget.

Why searching over S alone is exhaustive: for a fixed S, ``cheapest_r(S)`` is the least valid
R (it computes only what S forces: node t, values kept into t+1 that are not resident, and
their missing inputs), and every valid R for S contains it. Dropping computations never raises
the simulator's memory: at each remaining computation the alive set is a subset of the one
with the larger R (each value exists no earlier and its last read in the stage comes no later),
so each candidate peak is no higher; cost only drops. So min over S of (cost, peak) with
R = cheapest_r(S) ranges over every schedule that can be optimal.

Why a dynamic program over S rows is the same search: the simulator's stage t starts with
exactly the values S[t] alive (every value alive at the end of stage t-1 is one it keeps), and
what stage t computes, costs and peaks at depends only on S[t] and S[t+1] (cheapest_r's row t
reads only those). So a schedule's cost is a sum and its peak a max of per-stage terms over
consecutive pairs (S[t], S[t+1]), and a shortest path over rows enumerates every S. The stage
terms come from the simulator's own replay, and ``full_enumeration`` cross-checks on T <= 5.
The stage terms depend on the graph alone, so they are kept per graph (``_terms``): a test
that asks for the least peak and the optimum at several budgets replays each stage once.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from remat.schedule.rs import cheapest_r
from remat.schedule.simulate import replay, simulate


def _rows(t: int):
    """Every possible S[t] (values 0..t-1) as a bool vector of length t."""
    for bits in itertools.product((False, True), repeat=t):
        yield np.array(bits, dtype=bool)


def _stage(graph, t: int, current: np.ndarray, following: np.ndarray) -> tuple[float, float]:
    """(cost, peak) of stage t with S[t] = current and S[t+1] = following."""
    size = graph.size
    S = np.zeros((size, size), dtype=bool)
    S[t, :t] = current
    if t + 1 < size:
        S[t + 1, :t + 1] = following
    R = cheapest_r(graph, S)
    keep = S[t + 1] if t + 1 < size else np.zeros(size, dtype=bool)
    start = graph.static_mem + float(np.dot(current, graph.mem[:t]))
    events = replay(graph, R[t:t + 1], S[t:t + 1], keep[None], start, first=t)
    return float(graph.cost[R[t]].sum()), max(start, events.memory[events.compute].max())


_TABLES: dict = {}


def _terms(graph) -> dict:
    """The stage terms found so far for this graph, keyed by (t, S[t], S[t+1]); kept for the
    few graphs used last (by content: a graph equal in every array shares them)."""
    key = (graph.names, graph.deps, graph.cost.tobytes(), graph.mem.tobytes(),
           graph.workspace.tobytes(), graph.is_backward.tobytes(), float(graph.static_mem))
    if key not in _TABLES:
        if len(_TABLES) >= 8:
            del _TABLES[next(iter(_TABLES))]
        _TABLES[key] = {}
    return _TABLES[key]


def _search(graph, combine, score):
    """Shortest path over S rows; ``combine`` folds a stage (cost, peak) into a path label,
    ``score`` orders labels (None: not allowed)."""
    size = graph.size
    terms = _terms(graph)
    labels = {(): (0.0, graph.static_mem)}
    for t in range(size):
        rows = list(_rows(t + 1)) if t + 1 < size else [np.zeros(0, dtype=bool)]
        nexts = [(tuple(bool(b) for b in row), row) for row in rows]
        new: dict = {}
        for key, label in labels.items():
            current = np.array(key, dtype=bool)
            for fkey, following in nexts:
                term = terms.get((t, key, fkey))
                if term is None:
                    term = terms[t, key, fkey] = _stage(graph, t, current, following)
                cand = combine(label, term)
                if score(cand) is None:
                    continue
                if fkey not in new or score(cand) < score(new[fkey]):
                    new[fkey] = cand
        labels = new
    return labels.get(())


def optimal_cost(graph, budget: float) -> float:
    """Least compute cost of any schedule with peak <= budget (inf if none)."""
    found = _search(graph, lambda a, b: (a[0] + b[0], max(a[1], b[1])),
                    lambda lab: None if lab[1] > budget else lab[0])
    return math.inf if found is None else found[0]


def min_peak(graph) -> float:
    """Least peak memory of any schedule."""
    found = _search(graph, lambda a, b: (a[0] + b[0], max(a[1], b[1])), lambda lab: lab[1])
    return found[1]


def full_enumeration(graph, budget: float) -> float:
    """Least cost over every S matrix (R = cheapest_r) priced by ``simulate``; T <= 5 only."""
    size = graph.size
    cells = [(t, i) for t in range(size) for i in range(t)]
    best = math.inf
    for bits in itertools.product((False, True), repeat=len(cells)):
        S = np.zeros((size, size), dtype=bool)
        for (t, i), b in zip(cells, bits):
            S[t, i] = b
        R = cheapest_r(graph, S)
        sim = simulate(graph, R, S)
        if sim.peak_memory <= budget:
            best = min(best, sim.compute_cost)
    return best
