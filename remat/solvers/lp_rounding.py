"""``lp-rounding``: Checkmate's two-phase LP rounding, deterministic.

Solve the LP relaxation of the MILP (``milp_model``), round its S at a sweep of thresholds,
recover each R with ``cheapest_r`` and drop unneeded keeping with ``tighten``, price every
candidate with the simulator, and keep the cheapest that fits. The LP optimum is a proven
lower bound (the MILP's optimum is the true optimum, and its relaxation can only be lower),
reported as ``lower_bound``. A schedule over budget is never returned.
"""
from __future__ import annotations

import time
from typing import Iterable

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.rs import tighten
from remat.schedule.simulate import simulate
from remat.schedule.solution import Solution
from remat.solvers import highs_backend
from remat.solvers.base import SolveOptions
from remat.solvers.bounds import bound_time, retention_bound
from remat.solvers.milp_model import TIGHT, MilpModel, build_fits


def relaxation(graph: RematGraph, budget: float, options: SolveOptions):
    """(fractional S as a [T, T] array, LP bound in cost units); S is None if the LP is
    infeasible (then no schedule fits: the bound is -inf only if HiGHS failed), or not built
    in the time limit (``milp_model.BUILD_SECONDS``; cp-intervals given 1 s on resnet50 module
    20%, where no baseline fits, took 4.9 s, 4.4 of them in this LP, which found nothing):
    (None, "timeout")."""
    if not build_fits(graph, options.time_limit):
        return None, "timeout"
    model = MilpModel(graph, budget, TIGHT)
    result = highs_backend.run(model.arrays(), options.time_limit, threads=options.threads,
                               seed=options.seed, relax=True, verbose=options.verbose)
    if result.x is None or result.status != "optimal":
        return None, result.status
    S = np.zeros((graph.size, graph.size))
    S[model.S >= 0] = result.x[model.S[model.S >= 0]]
    return S, max(result.objective * model.cost_unit, graph.total_cost)


def best_rounding(graph: RematGraph, budget: float, candidates: Iterable[np.ndarray]):
    """(cost, R, S) of the cheapest candidate S that fits, and the least peak seen."""
    best, least_peak, seen = None, float("inf"), set()
    for S in candidates:
        key = S.tobytes()
        if key in seen:
            continue
        seen.add(key)
        R, S = tighten(graph, S)
        sim = simulate(graph, R, S)
        least_peak = min(least_peak, sim.peak_memory)
        if sim.peak_memory <= budget and (best is None or sim.compute_cost < best[0]):
            best = (sim.compute_cost, R, S)
    return best, least_peak, len(seen)


def finish(graph, budget, method, relaxed, rounded, began, time_limit=None,
           **details) -> Solution:
    """The Solution of a rounding method: best fitting candidate, LP bound. When even the LP
    is infeasible, ``min_budget`` comes from the min-peak MILP (``time_limit``, default 10 s:
    then it is the best budget found, not always the least)."""
    S_frac, bound = relaxed
    best, least_peak, tried = rounded
    elapsed = time.perf_counter() - began
    if best is None:
        from remat.solvers.min_budget import min_budget

        limit = 10.0 if time_limit is None else time_limit
        if S_frac is not None:
            smallest = least_peak
        elif details.get("lp_status") == "infeasible":  # of the exact model: proven
            smallest = min_budget(graph, SolveOptions(time_limit=limit)).peak_memory
            details["proven"] = True
        else:  # the LP ran out of time: nothing is known about the budget
            smallest = None
        return Solution.infeasible(graph, method, budget, smallest, solve_time=elapsed,
                                   candidates=tried, **details)
    return Solution.from_schedule(graph, best[1], best[2], method, "feasible", budget,
                                  lower_bound=bound, solve_time=elapsed, candidates=tried,
                                  **details)


def thresholds(S_frac: np.ndarray) -> np.ndarray:
    """Every distinct fractional value (each gives a different rounding), plus a grid."""
    values = np.unique(np.round(S_frac[S_frac > 1e-6], 6))
    return np.unique(np.concatenate([values, np.linspace(0.05, 1.0, 20), [1.01]]))


def solve_by_rounding(graph: RematGraph, budget: float, options: SolveOptions, method: str,
                      candidates_of, **details) -> Solution:
    """Shared by the rounding methods: solve the LP, round its S with ``candidates_of(S_frac)``
    (an iterable of bool matrices), keep the cheapest schedule that fits."""
    began = time.perf_counter()
    relaxed = relaxation(graph, budget, options)
    if relaxed[0] is None:
        return finish(graph, budget, method, (None, graph.total_cost),
                      (None, float("inf"), 0), began, options.time_limit,
                      lp_status=relaxed[1])
    rounded = best_rounding(graph, budget, candidates_of(relaxed[0]))
    # the retention bound (remat.solvers.bounds) is often far above the LP's: report the best
    known = retention_bound(graph, budget, bound_time(options.time_limit), options.threads)
    relaxed = (relaxed[0], max(relaxed[1], known.value))
    return finish(graph, budget, method, relaxed, rounded, began, **details)


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    return solve_by_rounding(
        graph, budget, options, "lp-rounding",
        lambda S_frac: (S_frac >= thr - 1e-9 for thr in thresholds(S_frac)))
