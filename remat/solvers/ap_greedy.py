"""``ap-greedy``: Chen's greedy segmentation with checkpoints only at articulation points of
the forward graph, swept over the memory threshold."""
from __future__ import annotations

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers._checkpoints import best_of, greedy_checkpoints, greedy_thresholds
from remat.solvers.base import SolveOptions, deadline_of


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    points = graph.forward_articulation_points
    candidates = (greedy_checkpoints(graph, points, b) for b in greedy_thresholds(graph))
    return best_of(graph, budget, "ap-greedy", candidates, deadline_of(options.time_limit))
