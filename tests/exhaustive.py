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
terms come from the simulator's own replay (the stages of one t replayed together, each from
its own start, as the local searches' changed stages are), and ``full_enumeration``
cross-checks on T <= 5. The stage terms depend on the graph alone, so they are kept per graph
(``_terms``): a test that asks for the least peak and the optimum at several budgets replays
each stage once.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.rs import cheapest_r
from remat.schedule.simulate import _peaks_of, simulate


def random_graph(rng, size: int, most_deps: int = 3, static: bool = False) -> RematGraph:
    """A random DAG of ``size`` nodes for these searches: 1 to ``most_deps`` inputs per node
    after the first, whole-byte costs and sizes 0-9, workspace 0-3 (and static memory 0-3)."""
    deps = [sorted({int(d) for d in rng.integers(0, t, rng.integers(1, most_deps + 1))})
            if t else [] for t in range(size)]
    cost, mem = rng.integers(0, 10, size), rng.integers(0, 10, size)
    static_mem = int(rng.integers(0, 4)) if static else 0
    return RematGraph([f"n{i}" for i in range(size)], cost, mem, deps,
                      [i > size // 2 for i in range(size)], static_mem=static_mem,
                      workspace=rng.integers(0, 4, size))


def _rows(t: int):
    """Every possible S[t] (values 0..t-1) as a bool vector of length t."""
    for bits in itertools.product((False, True), repeat=t):
        yield np.array(bits, dtype=bool)


def _stage_terms(graph, t: int, pairs: list) -> list[tuple[float, float]]:
    """(cost, peak) of stage t for each (S[t], S[t+1]) in ``pairs`` (tuples of bools), the
    stages replayed together by the simulator, each from its own start (``_peaks_of``). On
    graphs of whole bytes (every test's) the peaks are those of each stage replayed alone, bit
    for bit (60 random graphs of 3-7 nodes, session 43: 8.5x faster); fractional bytes can
    move the last bits (the running sums start elsewhere)."""
    size = graph.size
    R, S, keep = (np.zeros((len(pairs), size), dtype=bool) for _ in range(3))
    for row, (current, following) in enumerate(pairs):
        schedule = np.zeros((size, size), dtype=bool)
        schedule[t, :t] = current
        if t + 1 < size:
            schedule[t + 1, :t + 1] = following
            keep[row] = schedule[t + 1]
        R[row], S[row] = cheapest_r(graph, schedule)[t], schedule[t]
    starts = graph.static_mem + S.astype(float) @ graph.mem
    peaks = np.maximum(starts, _peaks_of(graph, R, S, keep))
    costs = [graph.cost[row].sum() for row in R]  # summed as the simulator's callers do
    return [(float(c), float(p)) for c, p in zip(costs, peaks)]


_TABLES: dict = {}


def _terms(graph) -> dict:
    """The stage terms found so far for this graph, keyed by (t, S[t], S[t+1]); kept for the
    last 8 graphs first seen (first in, first out; by content: a graph equal in every array
    shares them). Whole bytes only: with fractional ones a term's last bits would depend on
    the rows replayed beside it (``_stage_terms``)."""
    sizes = np.concatenate([graph.mem, graph.workspace, [graph.static_mem]])
    if not np.array_equal(sizes, np.round(sizes)):
        raise ValueError("exhaustive search: whole-byte sizes only")
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
        nexts = [tuple(bool(b) for b in row) for row in _rows(t + 1)] if t + 1 < size else [()]
        missing = [(key, fkey) for key in labels for fkey in nexts if (t, key, fkey) not in terms]
        if missing:
            terms.update(zip([(t, *pair) for pair in missing], _stage_terms(graph, t, missing)))
        new: dict = {}
        for key, label in labels.items():
            for fkey in nexts:
                cand = combine(label, terms[t, key, fkey])
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


def full_enumeration(graph, budgets: list[float]) -> list[float]:
    """Least cost within each budget over every S matrix (R = cheapest_r) priced by
    ``simulate``; T <= 5 only."""
    size = graph.size
    cells = [(t, i) for t in range(size) for i in range(t)]
    best = [math.inf] * len(budgets)
    for bits in itertools.product((False, True), repeat=len(cells)):
        S = np.zeros((size, size), dtype=bool)
        for (t, i), b in zip(cells, bits):
            S[t, i] = b
        R = cheapest_r(graph, S)
        sim = simulate(graph, R, S)
        best = [min(cost, sim.compute_cost) if sim.peak_memory <= budget else cost
                for cost, budget in zip(best, budgets)]
    return best
