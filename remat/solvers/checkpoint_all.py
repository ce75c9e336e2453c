"""``checkpoint-all``: the plain training step, nothing recomputed."""
from __future__ import annotations

import time

from remat.graph.core import RematGraph
from remat.schedule.rs import checkpoint_all
from remat.schedule.simulate import simulate
from remat.schedule.solution import Solution
from remat.solvers.base import SolveOptions


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    start = time.perf_counter()
    R, S = checkpoint_all(graph)
    peak = simulate(graph, R, S).peak_memory
    elapsed = time.perf_counter() - start
    if peak > budget:
        return Solution.infeasible(graph, "checkpoint-all", budget, min_budget=peak,
                                   solve_time=elapsed)
    # computing every node once is the least any schedule can cost: this one is optimal
    return Solution.from_schedule(graph, R, S, "checkpoint-all", "optimal", budget,
                                  lower_bound=graph.total_cost, solve_time=elapsed, min_budget=peak)
