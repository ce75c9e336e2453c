"""``chen-sqrtn``: Chen et al. (2016), a checkpoint every sqrt(n) nodes of the linearised
forward pass. Ignores the budget; reports "infeasible" if the result does not fit."""
from __future__ import annotations

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers._checkpoints import best_of, sqrt_checkpoints
from remat.solvers.base import SolveOptions


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    return best_of(graph, budget, "chen-sqrtn", [sqrt_checkpoints(graph.forward_nodes)])
