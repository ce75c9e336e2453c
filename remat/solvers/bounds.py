"""A lower bound on the least compute cost within a budget, for graphs of thousands of nodes.

The retention bound. Look at one moment of every schedule: stage t computing node t (the
last computation of stage t, DESIGN.md). At that moment node t's output and all its inputs
are alive and its workspace is held, so memory is at least ``static + m_t + w_t +
sum m_deps(t)`` plus every other value that happens to be alive. Now take a value v that
some later node reads (v < t < last(v), its last reader) and that is not an input of t. If v
is *not* alive at that moment, its last reader, which runs in stage last(v) > t, needs a fresh
copy computed after the moment: v is computed at least twice. So every schedule within the
budget defines a set K of values "alive at every moment they span" such that

    for every t:  sum_{v in K spanning t} m_v  <=  budget - static - m_t - w_t - sum m_deps(t),

and pays at least ``total_cost + sum_{v not in K} c_v``. The least such price over all K is
therefore a lower bound on every schedule's cost: a 0/1 knapsack with one row per stage and
one column per value (O(T) variables, against Checkmate's O(T^2) + FREE), which HiGHS solves
or bounds in seconds where the full MILP's LP relaxation does not finish. Any proven dual
bound of this small MILP is still a valid bound, so a time limit never makes it wrong.

What it ignores, and so where it is weak: recomputing v needs v's inputs alive at that time,
which may force further recomputation (chains at tight budgets pay p(n, s) > n - s). The
rebuild rows (``_with_rebuilds``) add the one case that stays O(T): an input whose last read
comes before v is first dropped must be kept longer or recomputed as well. It is
tight when the optimum recomputes each dropped value once from values that are alive anyway
(cheap activations next to checkpoints), which is the common case at moderate budgets.
"""
from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass

import numpy as np

from remat.graph.core import RematGraph
from remat.solvers import highs_backend


@dataclass(frozen=True)
class Bound:
    """A proven lower bound on the compute cost of any schedule within ``budget``
    (``math.inf``: no schedule fits) and how it was found."""

    value: float
    status: str  # "optimal" (the knapsack solved) | "timeout" (its dual bound) | "infeasible"
    seconds: float
    columns: int
    limit: float | None = None  # the time limit it ran under


PROVEN_RTOL = 1e-7
"""A schedule within this relative distance of a proven bound counts as proven optimal (float
sums of per-node costs, and HiGHS's own tolerances, differ from exact arithmetic by less)."""

def meets(cost: float, bound: float, gap: float = 0.0) -> bool:
    """True when ``cost`` is within relative ``gap`` of the proven ``bound`` (gap 0: proven
    optimal), up to ``PROVEN_RTOL``."""
    return cost <= bound * (1 + gap) * (1 + PROVEN_RTOL)


_CACHE: "weakref.WeakKeyDictionary[RematGraph, dict[float, Bound]]" = weakref.WeakKeyDictionary()


def bound_time(time_limit: float | None) -> float:
    """Seconds a solver gives the retention bound: a tenth of its limit (the knapsack is
    small, O(T) variables, and usually solves in well under a second)."""
    return 10.0 if time_limit is None else max(0.5, 0.1 * time_limit)


def peak_lower_bound(graph: RematGraph) -> float:
    """No schedule peaks below this: computing node k needs its inputs alive, its output
    allocated and its workspace held, so ``static_mem + m_k + w_k + sum of its inputs' m`` is
    a candidate of every schedule."""
    return graph.static_mem + float(operands(graph).max())


def retention_bound(graph: RematGraph, budget: float, time_limit: float | None = 10.0,
                    threads: int | None = None) -> Bound:
    """The retention bound (module docstring) of ``graph`` within ``budget`` total bytes.
    Cached per graph and budget (graphs are frozen); a cached bound that ran out of time is
    recomputed only when asked with more time than it had."""
    known = _CACHE.setdefault(graph, {})
    hit = known.get(float(budget))
    if hit is not None and (hit.status != "timeout" or (time_limit or math.inf) <= hit.limit):
        return hit
    found = _retention(graph, float(budget), time_limit, threads)
    known[float(budget)] = found
    return found


def _retention(graph: RematGraph, budget: float, time_limit: float | None,
               threads: int | None) -> Bound:
    start = time.perf_counter()
    room = stage_room(graph, budget)
    if (room < 0).any():
        return Bound(math.inf, "infeasible", time.perf_counter() - start, 0, time_limit)
    columns, spans = _choices(graph, graph.cost)
    total = float(graph.total_cost)
    if not columns:
        return Bound(total, "optimal", time.perf_counter() - start, 0, time_limit)
    result = highs_backend.run(_with_rebuilds(graph, columns, spans, room),
                               time_limit=time_limit, threads=threads)
    if result.status == "infeasible":  # cannot happen: keep nothing, rebuild every input
        raise AssertionError("retention bound: keeping nothing is infeasible")
    # objective = rebuilds - (cost of the kept values); its dual bound is a lower bound on it
    dropped_all = float(graph.cost[columns].sum())
    value = _safe(graph, total + dropped_all + result.bound)
    status = "optimal" if result.status == "optimal" else "timeout"
    return Bound(max(value, total), status, time.perf_counter() - start, len(columns),
                 time_limit)


def stage_room(graph: RematGraph, budget: float) -> np.ndarray:
    """Per stage t, the bytes the knapsack may fill while node t runs: the budget less static
    memory and node t's operands (negative: no schedule fits the budget)."""
    return float(budget) - graph.static_mem - operands(graph)


def retained(graph: RematGraph, room: np.ndarray, weights: np.ndarray,
             time_limit: float | None = 10.0, threads: int | None = None) -> set[int] | None:
    """The retention set K that keeps the most ``weights`` within ``room`` (per stage, see
    ``stage_room``): the knapsack of the module docstring with other prices, the
    ``retention`` method's starting point. None if some room is negative or HiGHS found no
    solution in time."""
    if (room < 0).any():
        return None
    columns, spans = _choices(graph, weights)
    keep = set(range(graph.size)) - set(columns)
    keep -= {v for v in range(graph.size) if weights[v] <= 0 and graph.mem[v] > 0}
    if not columns:
        return keep
    result = highs_backend.run(_knapsack(graph, columns, spans, room, weights),
                               time_limit=time_limit, threads=threads)
    if result.x is None:
        return None
    return keep | {v for v, x in zip(columns, result.x) if x > 0.5}


def _safe(graph: RematGraph, value: float) -> float:
    """``value`` less HiGHS's tolerances, so that they never lift a bound above a true cost;
    with whole-number costs every cost is whole, so the bound rounds up to one."""
    if np.all(graph.cost == np.round(graph.cost)):
        return float(math.ceil(value - 1e-6))
    return value * (1 - 1e-9)


def operands(graph: RematGraph) -> np.ndarray:
    """Per node, the bytes alive whenever it is computed: its output, its inputs and its
    transient workspace."""
    mem = graph.mem
    return np.array([mem[t] + graph.workspace[t] + sum(mem[d] for d in graph.deps[t])
                     for t in range(graph.size)], dtype=float)


def _choices(graph: RematGraph, weights: np.ndarray) -> tuple[list[int], list[list[int]]]:
    """The values worth a column (positive weight and size, spanning some stage where they
    are not an input), with the stages each one spans. Values that are free to recompute are
    dropped and weightless ones kept without a column: both choices are optimal."""
    columns, spans = [], []
    for v in range(graph.size):
        if weights[v] <= 0 or graph.mem[v] <= 0 or not graph.users[v]:
            continue
        last = max(graph.users[v])
        stages = [t for t in range(v + 1, last) if v not in graph.deps[t]]
        if stages:
            columns.append(v)
            spans.append(stages)
    return columns, spans


def _knapsack(graph: RematGraph, columns: list[int], spans: list[list[int]],
              room: np.ndarray, weights: np.ndarray) -> dict:
    """HiGHS arrays: maximise the weight of kept values (minimise its negative) under one
    memory row per stage."""
    model = _Model(room)
    for v, stages in zip(columns, spans):
        col = model.column(-float(weights[v]))
        for t in stages:
            model.memory(t, col, float(graph.mem[v]))
    return model.arrays()


def _with_rebuilds(graph: RematGraph, columns: list[int], spans: list[list[int]],
                   room: np.ndarray) -> dict:
    """The retention knapsack plus the inputs a dropped value needs to be rebuilt.

    Let v be dropped (not kept, so absent at some stage s >= t_v, its first span stage, and
    recomputed after s) and d an input of v whose last read comes before t_v. When v is
    recomputed, d must be alive: either d is computed again after its last read (``p_d``,
    costing c_d, once for all such v: a different computation from any the knapsack counts,
    which all lie within d's own lifetime), or d was never freed since that last read, so it
    is alive at every stage from last(d) + 1 to t_v (``a_{d,r}``, m_d bytes in row r;
    alive at r+1 implies alive at r unless p_d). Every schedule satisfies these rows, so the
    bound stays valid; it catches e.g. attention's q, k, v splits, cheap to drop but only
    rebuildable from the large QKV product, which is gone by then.
    """
    model = _Model(room)
    keep = {v: model.column(-float(graph.cost[v])) for v in columns}
    for v, stages in zip(columns, spans):
        for t in stages:
            model.memory(t, keep[v], float(graph.mem[v]))
    pairs = [(v, d, spans_v[0]) for v, spans_v in zip(columns, spans) for d in graph.deps[v]
             if graph.cost[d] > 0 and graph.mem[d] > 0 and max(graph.users[d]) < spans_v[0]]
    horizon: dict[int, int] = {}
    for _, d, t in pairs:
        horizon[d] = max(horizon.get(d, 0), t)
    rebuilt, alive = {}, {}
    for d, until in horizon.items():
        rebuilt[d] = model.column(float(graph.cost[d]))
        for r in range(max(graph.users[d]) + 1, until + 1):
            alive[d, r] = model.column(0.0)
            model.memory(r, alive[d, r], float(graph.mem[d]))
            if (d, r - 1) in alive:  # a[d, r-1] >= a[d, r] - p_d
                model.row([alive[d, r - 1], alive[d, r], rebuilt[d]], [1.0, -1.0, 1.0], 0.0)
    for v, d, t in pairs:  # y_v + p_d + a[d, t_v] >= 1
        model.row([keep[v], rebuilt[d], alive[d, t]], [1.0, 1.0, 1.0], 1.0)
    return model.arrays()


class _Model:
    """A small 0/1 program for HiGHS: one memory row per stage (bounded by ``room``), extra
    rows, and a cost per column."""

    def __init__(self, room: np.ndarray):
        self.room = room
        self.cost: list[float] = []
        self.entries: list[tuple[int, int, float]] = []  # (stage, column, bytes)
        self.rows: list[tuple[list[int], list[float], float]] = []  # (columns, values, lower)

    def column(self, cost: float) -> int:
        self.cost.append(cost)
        return len(self.cost) - 1

    def memory(self, stage: int, column: int, size: float) -> None:
        self.entries.append((stage, column, size))

    def row(self, columns: list[int], values: list[float], lower: float) -> None:
        self.rows.append((columns, values, lower))

    def arrays(self) -> dict:
        from scipy.sparse import coo_matrix

        stages = sorted({stage for stage, _, _ in self.entries})
        index = {t: r for r, t in enumerate(stages)}
        rows = [index[t] for t, _, _ in self.entries]
        cols = [c for _, c, _ in self.entries]
        vals = [v for _, _, v in self.entries]
        for k, (columns, values, _) in enumerate(self.rows):
            rows += [len(stages) + k] * len(columns)
            cols += columns
            vals += values
        shape = (len(stages) + len(self.rows), len(self.cost))
        lower = [-np.inf] * len(stages) + [lo for _, _, lo in self.rows]
        upper = list(self.room[stages].astype(float)) + [np.inf] * len(self.rows)
        return dict(matrix=coo_matrix((vals, (rows, cols)), shape=shape).tocsc(),
                    row_lower=np.array(lower), row_upper=np.array(upper),
                    col_lower=np.zeros(len(self.cost)), col_upper=np.ones(len(self.cost)),
                    cost=np.array(self.cost), integrality=np.ones(len(self.cost), dtype=bool))
