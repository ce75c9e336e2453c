"""``lp-randomized``: randomized rounding of the LP relaxation (Checkmate's second rounding).

Each of ``options.rounding_samples`` samples keeps value i into stage t with probability
``S_frac[t, i]`` (seeded by ``options.seed``); R comes from ``cheapest_r`` via ``tighten``, the
simulator prices each sample, and the cheapest that fits wins. The LP optimum is reported as
``lower_bound``; a schedule over budget is never returned.
"""
from __future__ import annotations


import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers.base import SolveOptions
from remat.solvers.lp_rounding import solve_by_rounding


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    rng = np.random.default_rng(options.seed)
    samples = max(1, int(options.rounding_samples))
    return solve_by_rounding(
        graph, budget, options, "lp-randomized",
        lambda S_frac: (rng.random(S_frac.shape) < S_frac for _ in range(samples)),
        samples=samples)
