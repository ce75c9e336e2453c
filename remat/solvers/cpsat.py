"""``cpsat``: the same exact model as ``milp`` (``milp_model``, formulation TIGHT), solved by
OR-Tools CP-SAT instead of HiGHS.

Why it is the same problem: every column of the TIGHT model is integral at any feasible point
with integral R and S (FREE by the exact AND rows, U as a sum of whole sizes), so declaring R,
S and FREE Boolean and U an integer number of memory units changes no feasible schedule.
Memory rows are rescaled from the model's units to whole units of ``gcd(sizes)`` bytes, node
sizes and workspaces alike (graphs with fractional byte sizes are refused). Costs are scaled
to integers and rounded *down*, so CP-SAT's proven bound, divided back, is a lower bound on
the true cost of every schedule; the returned schedule is priced by the simulator at its true
cost, and the gap reported is true.
"""
from __future__ import annotations

import math
import time

import numpy as np

from remat.errors import RematError
from remat.graph.core import RematGraph
from remat.schedule.rs import cheapest_r
from remat.schedule.solution import Solution
from remat.solvers.base import NO_SCHEDULE_YET, SolveOptions
from remat.solvers.interrupt import run_cancellable
from remat.solvers.milp import unbuilt, warm_start
from remat.solvers.milp_model import TIGHT, MilpModel, build_fits
from remat.solvers.min_budget import min_budget

COST_SCALE = 1000.0
"""Costs are multiplied by this and rounded down to integers for CP-SAT's objective."""


class CpSatModelError(RematError, ValueError):
    """The graph cannot be encoded exactly for CP-SAT."""


def ortools_cp():
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("the CP-SAT methods (cpsat, cp-intervals) need OR-Tools: "
                          "pip install ortools") from exc
    return cp_model


def whole_bytes(graph: RematGraph) -> bool:
    """Whether every node size and workspace is a whole number of bytes (CP-SAT's units)."""
    sizes = _sizes(graph)
    return bool(np.all(sizes == np.round(sizes)))


def _sizes(graph: RematGraph) -> np.ndarray:
    return np.concatenate([graph.mem, graph.workspace])


def memory_unit(graph: RematGraph) -> int:
    """Bytes per CP-SAT memory unit: the gcd of the (whole-byte) sizes and workspaces."""
    if not whole_bytes(graph):
        raise CpSatModelError("the CP-SAT methods need whole-byte node sizes (mem, workspace); "
                              "round them or use milp")
    unit = 0
    for size in _sizes(graph).astype(np.int64):
        unit = math.gcd(unit, int(size))
    return max(unit, 1)


class CpSatModel:
    """``MilpModel``'s rows and columns as a CP-SAT model (see the module docstring)."""

    def __init__(self, graph: RematGraph, budget: float):
        cp_model = ortools_cp()
        self.milp = MilpModel(graph, budget, TIGHT)
        self.unit = memory_unit(graph)
        self.model = cp_model.CpModel()
        arrays = self.milp.arrays()
        u_cols = set(int(c) for c in self.milp.U[self.milp.U >= 0])
        room = math.floor((float(budget) - graph.static_mem) / self.unit + 1e-9)
        self.vars = [self._variable(col, arrays, u_cols, room) for col in range(self.milp.num_cols)]
        self._rows(arrays, u_cols)
        self._objective(arrays)

    def _variable(self, col: int, arrays: dict, u_cols: set, room: int):
        lower, upper = arrays["col_lower"][col], arrays["col_upper"][col]
        if col in u_cols:
            return self.model.new_int_var(0, max(room, 0), f"u{col}")
        return self.model.new_int_var(int(round(lower)), int(round(upper)), f"x{col}")

    def _rows(self, arrays: dict, u_cols: set) -> None:
        """Each row as a linear constraint with integer coefficients; rows that hold a U
        column are in memory units and are rescaled to ``unit`` bytes."""
        matrix = arrays["matrix"].tocsr()
        scale = self.milp.mem_unit / self.unit
        for r in range(matrix.shape[0]):
            start, end = matrix.indptr[r], matrix.indptr[r + 1]
            cols, vals = matrix.indices[start:end], matrix.data[start:end]
            factor = scale if any(int(c) in u_cols for c in cols) else 1.0
            coeffs = [self._integer(v * (1.0 if int(c) in u_cols else factor))
                      for c, v in zip(cols, vals)]
            expr = sum(k * self.vars[int(c)] for c, k in zip(cols, coeffs))
            lo, hi = arrays["row_lower"][r], arrays["row_upper"][r]
            if np.isfinite(lo):
                self.model.add(expr >= math.ceil(lo * factor - 1e-9))
            if np.isfinite(hi):
                self.model.add(expr <= math.floor(hi * factor + 1e-9))

    @staticmethod
    def _integer(value: float) -> int:
        rounded = round(value)
        if abs(value - rounded) > 1e-6 * max(1.0, abs(value)):
            raise CpSatModelError(f"cpsat: coefficient {value} is not whole after scaling")
        return int(rounded)

    def _objective(self, arrays: dict) -> None:
        cost = arrays["cost"] * self.milp.cost_unit
        terms = [(int(math.floor(c * COST_SCALE + 1e-9)), self.vars[col])
                 for col, c in enumerate(cost) if c > 0]
        self.model.minimize(sum(k * v for k, v in terms))

    def hint(self, R: np.ndarray, S: np.ndarray) -> None:
        """Start the search from a known schedule."""
        x = self.milp.vector(R, S)
        for col, var in enumerate(self.vars):
            room = var.name.startswith("u")
            value = x[col] * (self.milp.mem_unit / self.unit) if room else x[col]
            self.model.add_hint(var, int(round(value)))


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    cp_model = ortools_cp()
    start = time.perf_counter()
    memory_unit(graph)  # raises CpSatModelError on fractional sizes, before any work
    # it converts Checkmate's MILP: built only where that fits in the limit
    built = CpSatModel(graph, budget) if build_fits(graph, options.time_limit) else None
    warm = warm_start(graph, budget, options) if options.warm_start else None
    if built is None:
        return unbuilt(graph, budget, warm, "cpsat", start, options, graph.total_cost)
    if warm is not None:
        built.hint(warm.R, warm.S)
    cp = cp_model.CpSolver()
    if options.time_limit is not None:
        left = options.time_limit - (time.perf_counter() - start)
        cp.parameters.max_time_in_seconds = max(0.01, left)
    cp.parameters.num_workers = options.threads or 2
    cp.parameters.random_seed = options.seed
    cp.parameters.relative_gap_limit = options.mip_rel_gap
    cp.parameters.catch_sigint_signal = False  # Ctrl-C is ours (``run_cancellable``)
    code, _ = run_cancellable(lambda: cp.solve(built.model), cp.stop_search)
    return _solution(graph, budget, built, cp, cp_model, code, warm, start, options)


def _solution(graph, budget, built, cp, cp_model, code, warm, start, options) -> Solution:
    elapsed = time.perf_counter() - start
    if code == cp_model.INFEASIBLE:
        least = min_budget(graph, SolveOptions(time_limit=options.time_limit))
        return Solution.infeasible(graph, "cpsat", budget, least.peak_memory,
                                   solve_time=time.perf_counter() - start, proven=True)
    bound = graph.total_cost
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound = max(bound, cp.best_objective_bound / COST_SCALE)
        x = np.array([cp.value(v) for v in built.vars], dtype=float)
        _, S = built.milp.schedule(x)
        R = cheapest_r(graph, S)
    elif warm is not None:
        R, S = warm.R, warm.S
    else:
        return Solution.infeasible(graph, "cpsat", budget, None, solve_time=elapsed,
                                   reason=NO_SCHEDULE_YET)
    sol = Solution.from_schedule(graph, R, S, "cpsat", "feasible", budget, lower_bound=bound,
                                 solve_time=elapsed, backend_status=cp.status_name(code))
    if sol.peak_memory > budget:
        raise RematError(f"cpsat: internal error, schedule peaks at {sol.peak_memory} over "
                         f"budget {budget}; please report this graph")
    proven = sol.compute_cost <= sol.lower_bound * (1 + 1e-9) + 1e-9
    status = "optimal" if proven else ("timeout" if code != cp_model.OPTIMAL else "feasible")
    return sol.with_(status=status)
