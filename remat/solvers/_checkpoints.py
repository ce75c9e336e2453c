"""Shared by the checkpoint-set heuristics: try candidate sets, keep the best that fits.

Heuristics only choose which forward values to keep (the checkpoints); ``from_checkpoints``
derives the rest of the schedule and the simulator prices it.
"""
from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.rs import from_checkpoints
from remat.schedule.simulate import simulate
from remat.schedule.solution import Solution
from remat.solvers.base import past


def best_of(graph: RematGraph, budget: float, method: str,
            candidates: Iterable[Sequence[int]], deadline: float | None = None) -> Solution:
    """The cheapest schedule among ``candidates`` whose peak fits ``budget``."""
    start = time.perf_counter()
    best = None  # (cost, peak, R, S)
    min_peak = math.inf
    seen: set[frozenset[int]] = set()
    timed_out = False
    for checkpoints in candidates:
        key = frozenset(int(c) for c in checkpoints)
        if key in seen:
            continue
        if past(deadline) and seen:
            timed_out = True
            break
        seen.add(key)
        R, S = from_checkpoints(graph, key)
        sim = simulate(graph, R, S)
        min_peak = min(min_peak, sim.peak_memory)
        if sim.peak_memory <= budget and (best is None or
                                          (sim.compute_cost, sim.peak_memory) < best[:2]):
            best = (sim.compute_cost, sim.peak_memory, R, S)
    elapsed = time.perf_counter() - start
    if best is None:
        return Solution.infeasible(graph, method, budget, min_budget=min_peak, solve_time=elapsed,
                                   candidates=len(seen))
    status = "timeout" if timed_out else "feasible"
    return Solution.from_schedule(graph, best[2], best[3], method, status, budget,
                                  solve_time=elapsed, min_budget=min_peak, candidates=len(seen))


def every_kth(nodes: Sequence[int], k: int) -> list[int]:
    """Every k-th node of ``nodes`` (1-based positions k, 2k, ...)."""
    return [nodes[j] for j in range(k - 1, len(nodes), k)]


def sqrt_checkpoints(nodes: Sequence[int]) -> list[int]:
    """Chen et al.'s sqrt(n) rule: a checkpoint every ceil(sqrt(n)) candidates."""
    if not nodes:
        return []
    return every_kth(nodes, max(1, math.ceil(math.sqrt(len(nodes)))))


def greedy_checkpoints(graph: RematGraph, candidates: Sequence[int], threshold: float) -> list[int]:
    """Chen et al.'s greedy rule: walk the forward nodes adding up their memory; once the
    running sum passes ``threshold``, checkpoint the next candidate and restart the sum."""
    allowed = set(candidates)
    chosen: list[int] = []
    running = 0.0
    for node in graph.forward_nodes:
        running += graph.mem[node]
        if running > threshold and node in allowed:
            chosen.append(node)
            running = 0.0
    return chosen


def greedy_thresholds(graph: RematGraph, count: int = 48) -> np.ndarray:
    """Thresholds spread geometrically from the smallest value to the whole forward pass."""
    sizes = graph.mem[list(graph.forward_nodes)]
    positive = sizes[sizes > 0]
    if positive.size == 0:
        return np.array([0.0])
    low, high = float(positive.min()), float(positive.sum())
    return np.unique(np.concatenate([[0.0], np.geomspace(low / 2, high, count)]))
