"""``cp-intervals``: each computation of a node as an interval of time, on OR-Tools CP-SAT.

Moccasin's idea (Bartan et al., ICML 2023): a value lives from one computation to its last
read, so a schedule is a few retention intervals per node, and memory is a cumulative
constraint over them, O(n) integer variables where Checkmate's MILP has O(n^2). Here time is
fine enough to be exact under DESIGN.md's memory rule: the point (t, k), numbered ``t * T +
k``, is stage t computing node k. A copy of node v computed in stage s starts at (s, v) and
ends at its last read (t, w) or later; at a computation the copies that cover its point hold
at least the values in memory then (its inputs, its output, what later nodes read), exactly
those where each copy ends at its last read, so the cumulative's height at (t, k) is at least
the simulator's candidate there, and equal to it at the schedule's own copies (plus the
node's workspace, an interval of length one). Each copy a node keeps has:

- ``present`` (the first copy always: stage v computes node v), the stage it is computed in,
  and its end;
- copies in order: the next starts after the previous ends (a value recomputed while a copy
  is resident only costs more);
- each computation of w finds each input u in a copy of u computed in the same stage or
  before and not ended before (t, w).

The objective is the cost of the extra copies. A node gets ``COPIES`` copies, or as many as the
start schedule computes it, so the model is a restriction (every solution is a valid schedule
within the budget, priced by the simulator at its true cost) and CP-SAT's bound is not a
lower bound: the method reports the retention bound (``remat.solvers.bounds``), and "optimal"
only where its schedule meets it; ``details["optimal_in_class"]`` (as chain-dp's) says
CP-SAT proved it the best within the copies, or it meets that bound. With as many copies as
stages it holds every schedule worth running, and its optimum is milp's
(tests/test_fast_solvers.py). It starts from ``options.initial`` or the best baseline
(``milp.warm_start``), given to CP-SAT as a hint, and searches until its time limit
(``DEFAULT_TIME_LIMIT`` where none is set) or a schedule that meets the bound (within
``mip_rel_gap``): on graphs past ``LNS_NODES`` nodes only by large-neighbourhood search
around the incumbent.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from remat.errors import RematError
from remat.graph.core import RematGraph
from remat.schedule.rs import s_from_r
from remat.schedule.simulate import compute_cost
from remat.schedule.solution import Solution
from remat.solvers.base import NO_SCHEDULE_YET, SolveOptions, schedule_event, time_left
from remat.solvers.bounds import bound_time, meets, retention_bound
from remat.solvers.cpsat import memory_unit, ortools_cp
from remat.solvers.interrupt import requested, run_cancellable
from remat.solvers.milp import status_from_bound, unbuilt, warm_start
from remat.solvers.min_budget import min_budget
from remat.solvers.peak_floor import known_floor

COPIES = 2
"""Copies each node may have (its first computation and recomputations), unless the start
schedule computes it more often; a node nothing reads has one."""
WEIGHT_SCALE = 1e7
"""The objective's integer weights: each node's cost as this share of the total cost, rounded
(the schedule's true cost comes from the simulator)."""
DEFAULT_TIME_LIMIT = 30.0
"""Seconds the search gets where the caller sets no limit (CP-SAT rarely proves the restricted
model optimal on graphs of hundreds of nodes)."""
MIN_SECONDS = 0.1
"""The least time the least-peak search gets where no schedule is found."""
BUILD_SECONDS = 2e-5
"""Seconds per read literal (``read_literals``) that building the model and starting CP-SAT
take; where the time left is less, no model is built and the start schedule is the result
(status "timeout"). Building ignores the limit: 14-26 us per literal on ten rows of 110-1001
nodes, 1.24 s for the 81104 of random_dag(500) at 10% from retention's schedule, and
CP-SAT's start 0.29 s more with 0.01 s to search: given 0.1 s there by auto (1 s),
cp-intervals took 2.3 s, and auto 4.4 s (bench/results/fast_notes.md, session 31). Without a
time limit the model is always built."""
LNS_NODES = 80
"""From a start schedule on graphs of more nodes than this, CP-SAT runs only its
large-neighbourhood search (``use_lns_only``: its workers re-solve parts of the model with the
rest fixed to the incumbent). Its default with two workers gives one to a full search, which
proves nothing at these sizes. In auto at 60 s (two runs of eight rows of 129-1001 nodes)
it ended lower on 13 of 16 row and run pairs, equal on 1, higher on 2: fcn_resnet50 op 40%
once (1.072016 of the total cost against the full search's 1.050449), fcn_resnet50 module 40%
by 0.04% (bench/results/fast_notes.md, session 29). On smaller graphs the full search can prove the
model optimal (random_dag(10), tests/test_fast_solvers.py)."""


class IntervalModel:
    """The CP-SAT model of the module docstring for ``graph`` within ``budget`` bytes."""

    def __init__(self, graph: RematGraph, budget: float, copies: list[int]):
        cp_model = ortools_cp()
        self.graph, self.model = graph, cp_model.CpModel()
        unit = memory_unit(graph)
        self.last_read = _last_reads(graph)
        self.copies = [self._copies(v, count)
                       for v, count in enumerate(copy_counts(graph, copies, self.last_read))]
        self._memory(unit, math.floor((float(budget) - graph.static_mem) / unit + 1e-9))
        self._reads()
        total = float(graph.total_cost) or 1.0
        self.model.minimize(sum(int(round(graph.cost[v] / total * WEIGHT_SCALE)) * present
                                for v, copies_v in enumerate(self.copies)
                                for present, _, _ in copies_v[1:]))

    def _copies(self, v: int, count: int) -> list[tuple]:
        """``count`` copies of node v: (present, stage, end); the first is computed in stage v."""
        size, model = self.graph.size, self.model
        found = []
        for k in range(count):
            present = model.new_constant(1) if k == 0 else model.new_bool_var(f"p{v}.{k}")
            stage = model.new_constant(v) if k == 0 else model.new_int_var(v + 1, size - 1, "")
            end = model.new_int_var((v + min(k, 1)) * size + v, self.last_read[v], "")
            if k > 0:  # after the previous copy ends
                before, _, before_end = found[-1]
                model.add_implication(present, before)
                model.add(end >= stage * size + v).only_enforce_if(present)
                model.add(stage * size + v > before_end).only_enforce_if(present)
            found.append((present, stage, end))
        return found

    def _memory(self, unit: int, room: int) -> None:
        """The cumulative within ``room`` units: each copy holds the node's bytes from its start
        to its end, and its workspace at its start."""
        size, model, graph = self.graph.size, self.model, self.graph
        intervals, demands = [], []
        for v, copies_v in enumerate(self.copies):
            mem, work = int(round(graph.mem[v] / unit)), int(round(graph.workspace[v] / unit))
            for k, (present, stage, end) in enumerate(copies_v):
                start = stage * size + v
                if mem > 0:
                    length = model.new_int_var(1, self.last_read[v] - v * size - v + 1, "")
                    model.add(length == end + 1 - start)
                    intervals.append(model.new_optional_interval_var(start, length, end + 1,
                                                                  present, f"i{v}.{k}"))
                    demands.append(mem)
                if work > 0:
                    interval = model.new_optional_fixed_size_interval_var(start, 1, present,
                                                                          f"w{v}.{k}")
                    intervals.append(interval)
                    demands.append(work)
        model.add_cumulative(intervals, demands, max(room, 0))

    def _reads(self) -> None:
        """Every computation of w reads each input u from some copy of u alive at (stage, w)."""
        size, model = self.graph.size, self.model
        for w, copies_w in enumerate(self.copies):
            for present, stage, _ in copies_w:
                for u in self.graph.deps[w]:
                    which = []
                    for u_present, u_stage, u_end in self.copies[u]:
                        read = model.new_bool_var("")
                        model.add_implication(read, u_present)
                        model.add(u_stage <= stage).only_enforce_if(read)
                        model.add(u_end >= stage * size + w).only_enforce_if(read)
                        which.append(read)
                    model.add_bool_or(which).only_enforce_if(present)

    def hint(self, starts: list[list[tuple[int, int]]]) -> None:
        """Start CP-SAT from a schedule's copies (``copies_of``)."""
        for v, copies_v in enumerate(self.copies):
            for k, (present, stage, end) in enumerate(copies_v):
                if k < len(starts[v]):
                    if k > 0:
                        self.model.add_hint(present, 1)
                        self.model.add_hint(stage, starts[v][k][0])
                    self.model.add_hint(end, starts[v][k][1])
                elif k > 0:
                    self.model.add_hint(present, 0)

    def recomputations(self, value) -> np.ndarray:
        """R of a solution (``value``: the solver's or a callback's ``value``)."""
        size = self.graph.size
        R = np.zeros((size, size), dtype=bool)
        for v, copies_v in enumerate(self.copies):
            for present, stage, _ in copies_v:
                if value(present):
                    R[value(stage), v] = True
        return R


def _last_reads(graph: RematGraph) -> list[int]:
    """The latest point each node's value can be read: its last reader in the last stage."""
    size = graph.size
    last = [v * size + v for v in range(size)]
    for w in range(size):
        for u in graph.deps[w]:
            last[u] = max(last[u], (size - 1) * size + w)
    return last


def copy_counts(graph: RematGraph, copies: list[int],
                last_read: list[int] | None = None) -> list[int]:
    """The copies ``IntervalModel`` gives each node when asked for ``copies``: no more than
    the stages from its own on, and one where nothing reads it."""
    size, last_read = graph.size, last_read or _last_reads(graph)
    return [min(copies[v], size - v) if last_read[v] > v * size + v else 1
            for v in range(size)]


def build_fits(graph: RematGraph, copies: list[int], seconds: float | None) -> bool:
    """Whether ``IntervalModel`` with ``copies`` can be built within ``seconds`` (None: no
    limit; ``BUILD_SECONDS``), never after Ctrl-C, as ``milp_model.build_fits`` for
    Checkmate's model."""
    return not requested() and (seconds is None or
                                BUILD_SECONDS * read_literals(graph, copies) <= seconds)


def read_literals(graph: RematGraph, copies: list[int]) -> int:
    """The literals ``IntervalModel._reads`` makes when asked for ``copies`` per node: one
    per computation of w, input u of w and copy of u; they take most of the model's build."""
    counts = copy_counts(graph, copies)
    return sum(counts[w] * sum(counts[u] for u in graph.deps[w]) for w in range(graph.size))


def copies_of(graph: RematGraph, R: np.ndarray) -> list[list[tuple[int, int]]]:
    """Each node's computations in ``R`` as (stage, end): the end is the copy's last read, the
    point (t, w) of the last computation w that reads it before the next copy."""
    size = graph.size
    stages = [np.flatnonzero(R[:, v]) for v in range(size)]
    ends = [[int(s) * size + v for s in stages[v]] for v in range(size)]
    for t, w in zip(*np.nonzero(R)):
        for u in graph.deps[w]:
            k = int(np.searchsorted(stages[u], t, side="right")) - 1  # the copy read
            ends[u][k] = max(ends[u][k], int(t) * size + int(w))
    return [list(zip(map(int, stages[v]), ends[v])) for v in range(size)]


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    cp_model = ortools_cp()
    began = time.perf_counter()
    limit = options.time_limit  # None: the model is built whatever it takes
    if limit is None:  # a search: without a limit it may never end
        options = replace(options, time_limit=DEFAULT_TIME_LIMIT)
    if budget < known_floor(graph):  # below the least peak known without a search
        return _least_peak(graph, budget, began, options)
    known = retention_bound(graph, budget, bound_time(options.time_limit), options.threads)
    warm = warm_start(graph, budget, options) if options.warm_start or options.initial else None
    starts = copies_of(graph, warm.R) if warm is not None else [[] for _ in range(graph.size)]
    copies = [max(COPIES, len(s)) for s in starts]
    if not build_fits(graph, copies, time_left(limit, began, 0.0)):
        return unbuilt(graph, budget, warm, "cp-intervals", began, options, known.value)
    built = IntervalModel(graph, budget, copies)
    if warm is not None:
        built.hint(starts)
    cp = cp_model.CpSolver()
    cp.parameters.max_time_in_seconds = max(0.01, options.time_limit -
                                            (time.perf_counter() - began))
    cp.parameters.num_workers = options.threads or 2
    cp.parameters.random_seed = options.seed
    cp.parameters.use_lns_only = warm is not None and graph.size > LNS_NODES
    cp.parameters.catch_sigint_signal = False  # Ctrl-C is ours (``run_cancellable``)
    watcher = _watcher(graph, built, options, known.value, began)
    code, _ = run_cancellable(lambda: cp.solve(built.model, watcher), cp.stop_search)
    return _solution(graph, budget, built, cp, code, warm, known.value, began, options)


def _watcher(graph: RematGraph, built: IntervalModel, options: SolveOptions, bound: float,
             began: float):
    """CP-SAT's solution callback: each schedule's true cost to ``options.progress`` (if set),
    and the search stops at one that meets ``bound`` (within ``options.mip_rel_gap``):
    neighbourhood search proves nothing, and would run to its limit."""
    progress = options.progress

    class Watcher(ortools_cp().CpSolverSolutionCallback):
        def on_solution_callback(self):
            cost = compute_cost(graph, built.recomputations(self.value))
            if progress is not None:
                progress(schedule_event(cost, bound, began))
            if meets(cost, bound, options.mip_rel_gap):
                self.stop_search()

    return Watcher()


def _solution(graph, budget, built, cp, code, warm, bound, began, options) -> Solution:
    cp_model = ortools_cp()
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        R = built.recomputations(cp.value)
        S = s_from_r(graph, R)
        if warm is not None and warm.compute_cost <= compute_cost(graph, R):
            R, S = warm.R, warm.S  # CP-SAT's first solutions may cost more than its hint
    elif warm is not None:
        R, S = warm.R, warm.S
    elif code == cp_model.INFEASIBLE:  # not a proof: the model limits the copies
        return _least_peak(graph, budget, began, options)
    else:
        return Solution.infeasible(graph, "cp-intervals", budget, None,
                                   solve_time=time.perf_counter() - began,
                                   reason=NO_SCHEDULE_YET)
    proved = code == cp_model.OPTIMAL
    sol = Solution.from_schedule(graph, R, S, "cp-intervals", "feasible" if proved else "timeout",
                                 budget, lower_bound=bound,
                                 solve_time=time.perf_counter() - began,
                                 backend_status=cp.status_name(code),
                                 optimal_in_class=proved or meets(compute_cost(graph, R), bound))
    if sol.peak_memory > budget:
        raise RematError(f"cp-intervals: internal error, schedule peaks at {sol.peak_memory} "
                         f"over budget {budget}; please report this graph")
    return status_from_bound(sol, options.mip_rel_gap)


def _least_peak(graph: RematGraph, budget: float, began: float,
                options: SolveOptions) -> Solution:
    """Where no schedule with ``COPIES`` copies fits: the least peak ``min_budget`` finds in the
    time left (its schedule, where that fits), proven infeasible below its bound."""
    left = max(MIN_SECONDS, options.time_limit - (time.perf_counter() - began))
    least = min_budget(graph, SolveOptions(time_limit=left, threads=options.threads),
                       exact=False)
    elapsed = time.perf_counter() - began
    if least.peak_memory <= budget:
        return Solution.from_schedule(graph, least.R, least.S, "cp-intervals", "feasible",
                                      budget, solve_time=elapsed)
    proof = {"proven": True} if least.lower_bound > budget else {}
    return Solution.infeasible(graph, "cp-intervals", budget, least.peak_memory,
                               solve_time=elapsed, **proof)
