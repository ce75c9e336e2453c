"""``milp``: Checkmate's MILP (``milp_model``) solved with HiGHS, warm-started from the best
baseline schedule that fits.

Returns status "optimal" (proven), "feasible" (stopped at ``mip_rel_gap`` > 0), "timeout"
(time limit or Ctrl-C, best schedule so far) or "infeasible" (with the exact smallest budget).
``lower_bound`` is HiGHS's proven bound in cost units; ``Solution.gap`` follows from it. The
schedule always goes through the simulator (``Solution.from_schedule``).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.rs import cheapest_r
from remat.schedule.simulate import simulate
from remat.schedule.solution import Solution
from remat.solvers import highs_backend
from remat.solvers.base import (BASELINES, NO_SCHEDULE_YET, SolveOptions, applicable, solver,
                                time_left)
from remat.solvers.bounds import PROVEN_RTOL, Bound, bound_time, meets, retention_bound
from remat.solvers.milp_model import TIGHT, Formulation, MilpModel, build_fits
from remat.solvers.min_budget import min_budget
from remat.solvers.peak_floor import below_floor

__all__ = ["BASELINES", "applicable", "solve", "solve_with", "unbuilt", "warm_start"]

MIN_WARM_SECONDS = 0.1
"""The least time a step of the warm start (a baseline, the LP rounding) gets once its half of
the time limit is spent."""


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    return solve_with(graph, budget, options, TIGHT)


def solve_with(graph: RematGraph, budget: float, options: SolveOptions,
               formulation: Formulation, method: str = "milp", retention: bool = True) -> Solution:
    """``milp`` with an explicit formulation (the benchmark compares them); ``retention=False``
    is Checkmate's plain MILP: no retention bound to stop at or report."""
    began = time.perf_counter()
    floor = below_floor(graph, budget, options.time_limit)
    if floor is not None:  # no schedule fits: skip the (slow) proof by MILP
        return _infeasible(graph, budget, method, began, options, floor=floor)
    warm = warm_start(graph, budget, options) if options.warm_start else None
    known = retention_bound(graph, budget, bound_time(options.time_limit), options.threads) \
        if retention else Bound(graph.total_cost, "trivial", 0.0, 0)
    if warm is not None and meets(warm.compute_cost, known.value, options.mip_rel_gap):
        proof = warm.with_(method=method, lower_bound=max(known.value, warm.lower_bound),
                           solve_time=time.perf_counter() - began,
                           details={**warm.details, "proven_by": "retention bound"})
        return status_from_bound(proof, options.mip_rel_gap)
    if not build_fits(graph, time_left(options.time_limit, began)):
        return unbuilt(graph, budget, warm, method, began, options, known.value)
    model = MilpModel(graph, budget, formulation)
    start = model.vector(warm.R, warm.S) if warm is not None else None
    remaining = time_left(options.time_limit, began)
    target = known.value * (1 + options.mip_rel_gap) * (1 + PROVEN_RTOL)  # what meets() accepts
    stop_at = target / model.cost_unit if model.formulation.tie_break == 0 else None
    result = highs_backend.run(model.arrays(), remaining, options.mip_rel_gap, options.threads,
                               options.seed, start=start, progress=_progress(options, model),
                               verbose=options.verbose, stop_at=stop_at)
    return _solution(graph, budget, model, result, warm, method, began, options, known.value)


def _progress(options: SolveOptions, model: MilpModel):
    """Progress in cost units (the model's objective is scaled by ``cost_unit``): the
    incumbent is the MILP's objective (a schedule's cost, but with ``tie_break``, where it is
    an upper bound on it), the bound as the result reports it (``true_bound``), and the gap
    between the two."""
    if options.progress is None:
        return None
    unit = model.cost_unit

    def report(event: dict) -> None:
        incumbent = event["incumbent"] * unit
        bound = true_bound(model.graph, model, event["bound"])
        gap = (incumbent - bound) / incumbent if 0 < incumbent < math.inf else math.inf
        options.progress({**event, "incumbent": incumbent, "bound": bound, "gap": gap})

    return report


def best_baseline(graph: RematGraph, budget: float, names=BASELINES,
                  time_limit: float | None = None) -> Solution | None:
    """The cheapest schedule within ``budget`` of the methods ``names`` (the baselines by
    default) that handle this graph; None if none fits. ``time_limit`` bounds the whole call
    (only ``retention`` uses time: it gets what the classic ones leave)."""
    best, began = None, time.perf_counter()
    for name in applicable(graph, names):
        left = None if time_limit is None else \
            max(MIN_WARM_SECONDS, time_limit - (time.perf_counter() - began))
        result = solver(name)(graph, budget, SolveOptions(time_limit=left))
        if result.feasible and (best is None or result.compute_cost < best.compute_cost):
            best = result
    return best


def unbuilt(graph: RematGraph, budget: float, warm: Solution | None, method: str,
            began: float, options: SolveOptions, bound: float) -> Solution:
    """The result of an exact method whose time left does not cover building its model
    (``milp_model.build_fits``, ``cp_intervals.BUILD_SECONDS``): its warm start as it is
    ("timeout", or what ``bound``, proven before, says of it), else no schedule."""
    elapsed = time.perf_counter() - began
    if warm is None:
        return Solution.infeasible(graph, method, budget, None, solve_time=elapsed,
                                   reason=NO_SCHEDULE_YET, backend_status="not started")
    sol = Solution.from_schedule(graph, warm.R, warm.S, method, "timeout", budget,
                                 lower_bound=max(bound, warm.lower_bound), solve_time=elapsed,
                                 backend_status="not started", from_warm_start=True)
    return status_from_bound(sol, options.mip_rel_gap)


def _solution(graph, budget, model, result, warm, method, began, options,
              retention: float) -> Solution:
    """Turn HiGHS's answer into a checked Solution; ``retention`` is a bound proven before."""
    bound = max(true_bound(graph, model, result.bound), retention)
    details = {"backend_status": result.status}
    if result.status == "infeasible":
        return _infeasible(graph, budget, method, began, options, **details)
    if warm is not None:  # a warm start's bound (the LP's, for lp-rounding) holds as well
        bound = max(bound, warm.lower_bound)
    candidate = _schedule(graph, model, result.x, budget)
    status = _status(result.status, options.mip_rel_gap)
    if warm is not None and (candidate is None or
                             simulate(graph, *candidate).compute_cost > warm.compute_cost):
        # HiGHS stopped before it took the start in, or found nothing that fits
        candidate, status = (warm.R, warm.S), "timeout" if status == "timeout" else "feasible"
        details["from_warm_start"] = True
    if candidate is None:
        return Solution.infeasible(graph, method, budget, None,
                                   solve_time=time.perf_counter() - began,
                                   reason=NO_SCHEDULE_YET, **details)
    R, S = candidate
    sol = Solution.from_schedule(graph, R, S, method, status, budget, lower_bound=bound,
                                 solve_time=time.perf_counter() - began, **details)
    return status_from_bound(sol, options.mip_rel_gap)


def status_from_bound(sol: Solution, mip_rel_gap: float) -> Solution:
    """The status the bound supports: "optimal" when it meets the cost, "feasible" within
    ``mip_rel_gap``; a claimed optimum the bound does not meet (perturbed costs) is "feasible"."""
    if meets(sol.compute_cost, sol.lower_bound):
        return sol.with_(status="optimal")
    if sol.status == "optimal" or meets(sol.compute_cost, sol.lower_bound, mip_rel_gap):
        return sol.with_(status="feasible")
    return sol


def warm_start(graph: RematGraph, budget: float, options: SolveOptions) -> Solution | None:
    """``options.initial`` if given and fits; else the best baseline that fits; if none does,
    the LP-rounding schedule (if it fits). All of it takes at most half the time limit: the
    MILP needs the rest (without it, ``retention``'s own 10 s bound and search made a 1 s milp
    call on linear(16, unit) take 15-18 s; the LP rounding gets what the baselines leave of
    that half, at least ``MIN_WARM_SECONDS``; it builds its LP only where that fits in its
    limit, ``milp_model.BUILD_SECONDS``)."""
    initial = options.initial
    if initial is not None and initial.feasible and initial.peak_memory <= budget:
        return initial
    began = time.perf_counter()
    half = None if options.time_limit is None else options.time_limit / 2
    warm = best_baseline(graph, budget, time_limit=half)
    if warm is None:
        left = None if half is None else \
            max(MIN_WARM_SECONDS, half - (time.perf_counter() - began))
        rounded = solver("lp-rounding")(graph, budget, replace(options, time_limit=left))
        warm = rounded if rounded.feasible else None
    return warm


def true_bound(graph: RematGraph, model: MilpModel, bound: float) -> float:
    """HiGHS's bound in cost units, undoing the tie-break perturbation (costs only grew by at
    most a factor 1 + tie_break); whole-number costs give a whole-number bound."""
    if not np.isfinite(bound):
        return graph.total_cost
    bound = bound * model.cost_unit / (1 + model.formulation.tie_break)
    if model.formulation.tie_break > 0 and np.all(graph.cost == np.round(graph.cost)):
        bound = float(np.ceil(bound - 1e-6))
    return max(bound, graph.total_cost)


def _infeasible(graph, budget, method, began, options, **details) -> Solution:
    """No schedule fits: report the smallest budget (``min_budget``, exact unless it runs out
    of the time limit)."""
    limit = time_left(options.time_limit, began)
    smallest = min_budget(graph, SolveOptions(time_limit=limit, threads=options.threads,
                                              seed=options.seed))
    details["min_budget_status"] = smallest.status
    return Solution.infeasible(graph, method, budget, smallest.peak_memory,
                               solve_time=time.perf_counter() - began, proven=True, **details)


def _schedule(graph, model, x, budget):
    """The schedule of solution vector x with the least R for its S, if it fits ``budget``."""
    if x is None:
        return None
    _, S = model.schedule(x)
    R = cheapest_r(graph, S)
    if simulate(graph, R, S).peak_memory > budget:
        return None
    return R, S


def _status(backend_status: str, mip_rel_gap: float) -> str:
    if backend_status == "stopped":  # reached the retention bound (times 1 + mip_rel_gap)
        return "feasible"
    if backend_status == "optimal":
        return "optimal" if mip_rel_gap <= 0 else "feasible"
    return "timeout"
