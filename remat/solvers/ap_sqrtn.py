"""``ap-sqrtn``: the sqrt(n) rule over the articulation points of the forward graph only, so
each checkpoint separates the network into independent segments (Checkmate's AP variant)."""
from __future__ import annotations

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers._checkpoints import best_of, sqrt_checkpoints
from remat.solvers.base import SolveOptions


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    return best_of(graph, budget, "ap-sqrtn",
                   [sqrt_checkpoints(graph.forward_articulation_points)])
