"""``auto``: pick the method by the graph's shape and size; report the bound it proved.

Runs the methods that suit the graph in order of cost and returns the cheapest schedule that
fits, with the best lower bound any of them proved.
"""
from __future__ import annotations

import time

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers.base import SolveOptions, solver

HEURISTICS = ("checkpoint-all", "chen-greedy", "ap-greedy", "chen-sqrtn", "ap-sqrtn")


def candidate_methods(graph: RematGraph) -> list[str]:
    """The methods ``auto`` tries on this graph, cheapest first."""
    methods = list(HEURISTICS)
    if graph.is_chain and len(graph.forward_nodes) >= 2:
        methods.append("griewank")
    return methods


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    start = time.perf_counter()
    results = [solver(name)(graph, budget, options) for name in candidate_methods(graph)]
    feasible = [r for r in results if r.feasible]
    elapsed = time.perf_counter() - start
    bound = max(r.lower_bound for r in results)
    min_budget = min((r.min_budget for r in results if r.min_budget is not None), default=None)
    if not feasible:
        return Solution.infeasible(graph, "auto", budget, min_budget, solve_time=elapsed,
                                   tried=[r.method for r in results])
    best = min(feasible, key=lambda r: (r.compute_cost, r.peak_memory))
    status = "optimal" if best.compute_cost <= bound * (1 + 1e-9) else "feasible"
    return Solution.from_schedule(graph, best.R, best.S, "auto", status, budget,
                                  lower_bound=bound, solve_time=elapsed, min_budget=min_budget,
                                  chosen=best.method, tried=[r.method for r in results])
