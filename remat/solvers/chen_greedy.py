"""``chen-greedy``: Chen et al.'s greedy segmentation, swept over the memory threshold; keeps
the cheapest schedule that fits the budget."""
from __future__ import annotations

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers._checkpoints import best_of, greedy_checkpoints, greedy_thresholds
from remat.solvers.base import SolveOptions, deadline_of


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    nodes = graph.forward_nodes
    candidates = (greedy_checkpoints(graph, nodes, b) for b in greedy_thresholds(graph))
    return best_of(graph, budget, "chen-greedy", candidates, deadline_of(options.time_limit))
