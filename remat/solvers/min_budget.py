"""The smallest feasible budget of a graph, exact: the MILP of ``milp_model`` with the peak as
its objective (``min_peak=True``), solved with HiGHS from the best baseline's schedule
lowered by the peak descent.

Used for ``InfeasibleBudgetError.min_budget`` and for the low end of budget sweeps. The value
returned is always the simulated peak of a schedule, so it is a budget that really fits; with
status "optimal" no schedule of the graph has a smaller peak.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.rs import cheapest_r, checkpoint_all
from remat.schedule.simulate import simulate
from remat.solvers import highs_backend
from remat.solvers.base import SolveOptions, solver, time_left
from remat.solvers.bounds import bound_time, peak_lower_bound
from remat.solvers.descent import descend
from remat.solvers.milp_model import TIGHT, MilpModel, build_fits
from remat.solvers.peak_floor import floor_seconds, peak_floor


@dataclass(frozen=True)
class MinBudget:
    """``peak_memory``: the smallest peak found (bytes, static included), with its schedule;
    ``lower_bound``: no schedule has a smaller peak; equal to it when ``status == "optimal"``."""

    peak_memory: float
    lower_bound: float
    status: str
    R: np.ndarray
    S: np.ndarray
    solve_time: float


BASELINE_SECONDS = 2.0
"""The most time each baseline call in ``smallest_baseline`` gets (only ``retention`` uses
time: its scan for the least peak, then a schedule at it); under a time limit, at most
``BASELINE_SHARE`` of it."""
BASELINE_SHARE = 0.25
"""Of ``min_budget``'s time limit, the most each baseline call in ``smallest_baseline`` may
take (retention's two calls, so at most half of it). With 2 s each whatever the limit, auto
(limit 2 s) took 4.1 s on MobileNetV2 at module level, 20% (below the floor: its least budget
is ``min_budget``'s)."""


DESCENT_SHARE = 0.5
"""Of ``min_budget``'s time limit, the most the peak descent (``descent.descend``, from the
best baseline's schedule down toward the pebbling floor) may take before the MILP. It stops
earlier where no move lowers the peak: fcn_resnet50 at module level from 18.36 MiB to 15.78
in 17 s (bound 15.73), gpt2 3.835 -> 3.506 in 1.3 s, resnet50 7.82 -> 6.44 in 11.5 s, U-Net
at op level 5.334 -> 5.128 in 0.1 s, its ``peak_lower_bound``: proven."""


def smallest_baseline(graph: RematGraph, seconds: float = BASELINE_SECONDS,
                      names: tuple[str, ...] | None = None
                      ) -> tuple[float, np.ndarray, np.ndarray]:
    """The least peak any baseline (of ``names``, by default all) reaches, with its schedule
    (checkpoint-all at worst); each baseline call within ``seconds``."""
    from remat.solvers.base import BASELINES, applicable

    R, S = checkpoint_all(graph)
    best = (simulate(graph, R, S).peak_memory, R, S)
    options = SolveOptions(time_limit=seconds)
    for name in applicable(graph, BASELINES if names is None else names):
        low = solver(name)(graph, 1e-300, options).min_budget
        if low is None or low >= best[0]:
            continue
        found = solver(name)(graph, low, options)
        if found.feasible:
            best = (found.peak_memory, found.R, found.S)
    return best


def min_budget(graph: RematGraph, options: SolveOptions | None = None,
               exact: bool = True, enough: float | None = None) -> MinBudget:
    """The exact smallest budget of ``graph`` (within ``options.time_limit``, if any).

    The best baseline's schedule, its peak lowered by the descent (``DESCENT_SHARE`` of the
    time, all of it without ``exact``) toward the pebbling bound (``peak_floor``, searched
    first for ``floor_seconds`` of the limit, cached per graph; the descent stops there): where
    it reaches that bound, it is optimal at once; otherwise, with ``exact``, the bound gets
    the bounds' share of the limit (``bound_time``), then the min-peak MILP runs, warm-started
    from the schedule; without ``exact``, the bound gets what the descent left, and the status
    is "feasible" with that bound as the lower bound.
    gpt2 at module level, 15 s, without ``exact``: 3676168 B unproven in 15 s before (the
    descent went on toward the operand bound), proven in 3.4 s now.
    ``enough``: a peak low enough for the caller (auto's last resort wants a schedule within
    its budget, and each step below it only recomputes more): the descent stops there, and a
    schedule that peaks at most that is returned at once (gpt2 at op level, 30%, auto with
    1 s: 1.448-1.523 of the total cost with the numpy derivations, 1.896-2.167 with the C ones,
    whose descent went further below the budget, 3 runs each; bench/results/fast_notes.md,
    session 36).
    """
    options = options or SolveOptions()
    began = time.perf_counter()
    floor = peak_lower_bound(graph)
    peak, R, S = smallest_baseline(graph, _baseline_time(options.time_limit))
    if peak > floor:  # the pebbling bound: proof, and where the descent may stop
        floor = peak_floor(graph, floor_seconds(options.time_limit)).value
    target = floor if enough is None else max(floor, enough)
    if peak > target:
        share = DESCENT_SHARE if exact else 1.0
        deadline = None if options.time_limit is None else \
            began + share * options.time_limit
        point = descend(graph, S, floor, deadline, enough=target)
        if point.sim.peak_memory < peak:
            peak, R, S = point.sim.peak_memory, point.R, point.S
    if enough is not None and floor < peak <= enough:  # low enough: nothing below it is sought
        return MinBudget(peak, floor, "feasible", R, S, time.perf_counter() - began)
    if peak > floor:  # more time for the bound: the bounds' share, or what the descent left
        floor = peak_floor(graph, _floor_time(options.time_limit, began, exact)).value
    if peak <= floor:
        return MinBudget(peak, peak, "optimal", R, S, time.perf_counter() - began)
    if not exact:
        return MinBudget(peak, floor, "feasible", R, S, time.perf_counter() - began)
    if not build_fits(graph, time_left(options.time_limit, began, 0.1)):  # the descent's schedule
        return MinBudget(peak, floor, "timeout", R, S, time.perf_counter() - began)
    model = MilpModel(graph, None, TIGHT, min_peak=True)
    left = time_left(options.time_limit, began, 0.1)
    result = highs_backend.run(model.arrays(), left, 0.0, options.threads,
                               options.seed, start=model.vector(R, S), verbose=options.verbose)
    if result.x is not None:
        _, S_found = model.schedule(result.x)
        R_found = cheapest_r(graph, S_found)
        found = simulate(graph, R_found, S_found).peak_memory
        if found < peak:  # else HiGHS only matched the start (or is numerically off)
            peak, R, S = found, R_found, S_found
    bound = max(floor, _bound_bytes(model, result.bound, peak))
    status = "optimal" if result.status == "optimal" or bound >= peak else "timeout"
    return MinBudget(peak, min(bound, peak), status, R, S, time.perf_counter() - began)


def _baseline_time(limit: float | None) -> float:
    """Seconds for each baseline call of ``smallest_baseline`` under ``limit``."""
    return BASELINE_SECONDS if limit is None else min(BASELINE_SECONDS, BASELINE_SHARE * limit)


def _floor_time(limit: float | None, began: float, exact: bool) -> float:
    """Seconds for ``peak_floor`` after the descent: the bounds' share of the limit
    (``bound_time``) before the MILP; without ``exact``, what the descent left."""
    if exact or limit is None:
        return bound_time(limit)
    return time_left(limit, began, 0.0)


def _bound_bytes(model: MilpModel, bound_units: float, peak: float) -> float:
    """HiGHS's bound on the peak in bytes; with whole-byte sizes every peak is a whole number
    of bytes, so the bound rounds up to one (less HiGHS's tolerance)."""
    if not np.isfinite(bound_units):
        return model.graph.static_mem
    room = bound_units * model.mem_unit
    if model.integral_bytes():
        room = math.ceil(room - 1e-6 * max(1.0, model.mem_unit))
    return min(peak, model.graph.static_mem + room)
