"""The fast methods: chain-dp (optimal schedule of a chain by dynamic programming), cpsat
(milp's model on CP-SAT) and cp-intervals (retention intervals on CP-SAT)."""
import time
from dataclasses import replace

import numpy as np
import pytest

import remat
from remat.solvers.bounds import retention_bound
from remat.errors import InvalidScheduleError
from remat.schedule import checkpoint_all, checkpoint_all_peak, parse_budget, simulate
from remat.schedule.rs import cheapest_r
from remat.schedule.solution import Solution
from remat.solvers import SolveOptions, solver
from remat.solvers.chain_dp import chain_of, optimal_cost, usable
from remat.solvers.griewank import UnsupportedGraphError

import cases
from chain_reference import Ref as Reference

CHAINS = [name for name in cases.GRAPHS if name.startswith("chain")]
HEURISTICS = ("checkpoint-all", "chen-sqrtn", "chen-greedy", "ap-sqrtn", "ap-greedy", "griewank")


def random_chain(n, seed):
    """A chain of the linear() shape with random small integer costs and sizes."""
    rng = np.random.default_rng(seed)
    names = [f"f{i}" for i in range(n)] + ["loss"] + [f"b{k}" for k in reversed(range(n))]
    deps = [[i - 1] if i else [] for i in range(n)] + [[n - 1]]
    for k in reversed(range(n)):
        above = n if k == n - 1 else 2 * n - k - 1
        deps.append(sorted({above, k} | ({k - 1} if k else set())))
    cost = rng.integers(1, 6, 2 * n + 1).astype(float)
    mem = rng.integers(1, 9, 2 * n + 1).astype(float)
    return remat.RematGraph(names, cost, mem, deps, [False] * (n + 1) + [True] * n,
                            static_mem=float(rng.integers(0, 3)))


def exhaustive_frontier(graph):
    """Least cost at each peak over every useful S (R from cheapest_r): [(peak, cost)] with
    cost strictly falling. A value is worth keeping into stage t only if a user comes at or
    after t, so the other S entries stay 0."""
    bits = [(t, i) for i in range(graph.size) for t in range(i + 1, max(graph.users[i], default=i) + 1)]
    best = {}
    for mask in range(1 << len(bits)):
        S = np.zeros((graph.size, graph.size), dtype=bool)
        for b, (t, i) in enumerate(bits):
            S[t, i] = (mask >> b) & 1
        R = cheapest_r(graph, S)
        try:
            sim = simulate(graph, R, S)
        except InvalidScheduleError:
            continue
        best[sim.peak_memory] = min(best.get(sim.peak_memory, np.inf), sim.compute_cost)
    frontier, lowest = [], np.inf
    for peak in sorted(best):
        if best[peak] < lowest:
            lowest = best[peak]
            frontier.append((peak, lowest))
    return frontier


def dp_cost(graph, budget_bytes):
    return optimal_cost(chain_of(graph), budget_bytes - graph.static_mem)[0]


@pytest.mark.parametrize("graph", [remat.graphs.linear(3, unit=True), random_chain(3, 7)],
                         ids=["unit3", "rand3-s7"])
def test_chain_dp_equals_exhaustive_search_on_tiny_chains(graph):
    """Equal to the search over every useful S on these 3-layer chains, at every budget."""
    frontier = exhaustive_frontier(graph)
    assert len(frontier) >= 1
    for peak, cost in frontier:
        assert dp_cost(graph, peak) == pytest.approx(cost)
        below = [c for p, c in frontier if p < peak]
        assert dp_cost(graph, peak - 0.5) == pytest.approx(min(below) if below else np.inf)


def check(graph, sol, budget_bytes):
    sim = simulate(graph, sol.R, sol.S)
    assert sim.peak_memory <= budget_bytes
    assert sim.compute_cost == pytest.approx(sol.compute_cost)
    # its bound is the retention bound; "optimal" exactly where the cost meets it
    assert sol.lower_bound == pytest.approx(retention_bound(graph, budget_bytes).value)
    assert graph.total_cost - 1e-9 <= sol.lower_bound <= sol.compute_cost + 1e-9
    assert sol.details["optimal_in_class"]
    assert (sol.status == "optimal") == (sol.compute_cost == pytest.approx(sol.lower_bound))


@pytest.mark.parametrize("name,budget", [(g, b) for g in CHAINS for b in cases.BUDGETS])
def test_chain_dp_on_case_table_beats_every_heuristic(name, budget):
    graph = cases.graph(name)
    budget_bytes = parse_budget(budget, graph)
    sol = solver("chain-dp")(graph, budget_bytes, SolveOptions())
    others = [solver(m)(graph, budget_bytes, SolveOptions()) for m in HEURISTICS]
    if not sol.feasible:
        assert not any(o.feasible for o in others)
        assert budget_bytes < sol.min_budget
        check(graph, solver("chain-dp")(graph, sol.min_budget, SolveOptions()), sol.min_budget)
        return
    check(graph, sol, budget_bytes)
    for other in others:
        if other.feasible:
            assert sol.compute_cost <= other.compute_cost + 1e-9, other.method


@pytest.mark.skipif("milp" not in remat.METHODS, reason="the milp method is not merged yet")
@pytest.mark.parametrize("name,budget", [(g, b) for g in CHAINS for b in cases.BUDGETS])
def test_chain_dp_matches_milp(name, budget):
    """milp's proven bound <= the DP's cost; on this table the DP also equals every optimum
    milp proves (observed, not a theorem: see the counterexample below)."""
    graph = cases.graph(name)
    budget_bytes = parse_budget(budget, graph)
    sol = solver("chain-dp")(graph, budget_bytes, SolveOptions())
    ref = solver("milp")(graph, budget_bytes, SolveOptions(time_limit=5.0))
    assert sol.feasible == ref.feasible
    if ref.feasible:
        assert ref.lower_bound - 1e-6 <= sol.compute_cost
        if ref.status == "optimal":
            assert sol.compute_cost == pytest.approx(ref.compute_cost)


@pytest.mark.skipif("milp" not in remat.METHODS, reason="the milp method is not merged yet")
@pytest.mark.parametrize("n,seed,want", [(5, 100, 43.0), (6, 103, None)])
def test_chain_dp_equals_milp_where_persistent_schedules_fall_short(n, seed, want):
    """The former gap cases: at the tightest budget the optimum frees a checkpoint after its
    last read in a stage and rebuilds it later (the persistent recursion gave 52 on the
    first); chain-dp's drop states find it."""
    graph = random_chain(n, seed)
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    dp = solver("chain-dp")(graph, least, SolveOptions())
    ref = solver("milp")(graph, least, SolveOptions(time_limit=30.0))
    assert ref.status == "optimal" and dp.compute_cost == pytest.approx(ref.compute_cost)
    if want is not None:
        assert dp.compute_cost == pytest.approx(want)
    below = solver("milp")(graph, least - 0.5, SolveOptions(time_limit=30.0))
    assert below.proven_infeasible, below.details


def test_chain_dp_beats_the_persistent_recursion_on_linear16():
    """linear(16) at the persistent recursion's smallest budget: 77.698 persistent, 76.313 now
    (milp's best schedule in 30 s, bench/results/fast_chains_bb.csv)."""
    graph = remat.graphs.linear(16)
    sol = solver("chain-dp")(graph, 37748736.0, SolveOptions())
    assert sol.compute_cost == pytest.approx(76.313)
    assert textbook_chain_dp(chain_of(graph), 37748736.0 - graph.static_mem) == pytest.approx(77.698)


@pytest.mark.parametrize("n,seeds", [(2, range(6)), (3, range(3))])
def test_chain_dp_equals_exhaustive_search_on_random_chains(n, seeds):
    """Property: equal to tests/exhaustive.py (every S matrix) at every whole budget from
    below the smallest peak to the checkpoint-all peak, with and without workspace."""
    import exhaustive

    for seed in seeds:
        for workspace in (False, True):
            graph = random_chain(n, seed + 300)
            if workspace:
                rng = np.random.default_rng(seed)
                graph = graph.with_workspace(rng.integers(0, 6, graph.size) * (rng.random(graph.size) < .5))
            least = exhaustive.min_peak(graph)
            assert solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget == least
            for budget in range(int(least) - 1, int(checkpoint_all_peak(graph)) + 1):
                assert dp_cost(graph, budget) == exhaustive.optimal_cost(graph, budget), budget


@pytest.mark.parametrize("n,unit", [(1, True), (2, False), (12, False), (40, True), (40, False)])
def test_chain_dp_schedules_fit_every_budget(n, unit):
    graph = remat.graphs.linear(n, unit=unit)
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    previous = np.inf
    for fraction in np.linspace(0, 1, 7):
        budget = least + fraction * (remat.schedule.checkpoint_all_peak(graph) - least)
        sol = solver("chain-dp")(graph, budget, SolveOptions())
        check(graph, sol, budget)
        assert sol.compute_cost <= previous + 1e-9  # more memory never costs more
        previous = sol.compute_cost
    assert previous == pytest.approx(graph.total_cost)
    assert not solver("chain-dp")(graph, least * (1 - 1e-9), SolveOptions()).feasible


def test_chain_dp_rejects_other_graphs():
    with pytest.raises(UnsupportedGraphError, match="chains only"):
        remat.solve(remat.graphs.unet(2), "100%", method="chain-dp")


# ----- cpsat: the milp model on CP-SAT ------------------------------------------------------
CPSAT_CASES = [("chain8-unit", "60%"), ("chain8", "100%"), ("unet2-unit", "100%"),
               ("dag12-s2-unit", "90%")]


@pytest.mark.parametrize("name,budget", CPSAT_CASES)
def test_cpsat_schedule_fits_and_bound_holds(name, budget):
    pytest.importorskip("ortools")
    graph = cases.graph(name)
    budget_bytes = parse_budget(budget, graph)
    sol = solver("cpsat")(graph, budget_bytes, SolveOptions(time_limit=20.0))
    ref = solver("milp")(graph, budget_bytes, SolveOptions(time_limit=20.0))
    assert sol.feasible and ref.feasible
    sim = simulate(graph, sol.R, sol.S)
    assert sim.peak_memory <= budget_bytes
    assert sim.compute_cost == pytest.approx(sol.compute_cost)
    assert sol.lower_bound <= sol.compute_cost + 1e-9
    assert sol.lower_bound <= ref.compute_cost + 1e-6 and ref.lower_bound <= sol.compute_cost + 1e-6
    if sol.status == "optimal" and ref.status == "optimal":
        assert sol.compute_cost == pytest.approx(ref.compute_cost)


def test_cpsat_refuses_fractional_sizes():
    from remat.solvers.cpsat import CpSatModelError, memory_unit

    graph = remat.RematGraph(["a", "b"], [1, 1], [1.5, 2], [[], [0]], [False, True])
    with pytest.raises(CpSatModelError, match="whole-byte"):
        memory_unit(graph)
    assert memory_unit(remat.graphs.linear(4)) >= 1


# ----- cp-intervals: retention intervals on CP-SAT ------------------------------------------
def _heights(graph, copies):
    """The memory the interval model holds at each computation of a schedule: static memory,
    every copy whose interval covers the point, and the node's workspace."""
    size, found = graph.size, {}
    for v, copies_v in enumerate(copies):
        for stage, end in copies_v:
            found[stage * size + v] = 0.0
    for point in found:
        alive = sum(graph.mem[v] for v, copies_v in enumerate(copies)
                    for stage, end in copies_v if stage * size + v <= point <= end)
        found[point] = graph.static_mem + alive + graph.workspace[point % size]
    return found


@pytest.mark.parametrize("name,budget", [("chain8-unit", "40%"), ("chain8", "60%"),
                                         ("dag12-s2-unit", "60%"), ("dag20-s3", "60%"),
                                         ("dag10-s1", "80%")])
def test_the_interval_model_holds_what_the_simulator_holds(name, budget):
    """At every computation of a schedule, the copies covering its point (``copies_of``: from
    each computation to its last read) hold exactly the simulator's candidate there."""
    from remat.schedule.rs import s_from_r
    from remat.solvers.cp_intervals import copies_of

    graph = cases.graph(name)
    sol = solver("retention")(graph, parse_budget(budget, graph), SolveOptions(time_limit=5))
    assert sol.feasible and sol.compute_cost > graph.total_cost  # it recomputes something
    R = sol.R
    events = simulate(graph, R, s_from_r(graph, R)).events
    heights = _heights(graph, copies_of(graph, R))
    at = np.flatnonzero(events.compute)
    assert len(heights) == len(at) == R.sum()
    for i in at:
        point = int(events.stage[i]) * graph.size + int(events.node[i])
        assert heights[point] == pytest.approx(events.memory[i], abs=1e-9)


@pytest.mark.parametrize("name,budget", [("chain4-unit", "80%"), ("chain8", "60%"),
                                         ("chain8-unit", "60%"), ("dag12-s2-unit", "60%")])
def test_cp_intervals_with_every_copy_is_exact(monkeypatch, name, budget):
    """With as many copies as stages (a node at most once per stage), the model holds every
    schedule worth running: its optimum is milp's."""
    pytest.importorskip("ortools")
    from remat.solvers import cp_intervals

    graph = cases.graph(name)
    monkeypatch.setattr(cp_intervals, "COPIES", graph.size)
    budget_bytes = parse_budget(budget, graph)
    ref = solver("milp")(graph, budget_bytes, SolveOptions(time_limit=30))
    sol = solver("cp-intervals")(graph, budget_bytes, SolveOptions(time_limit=60,
                                                                   warm_start=False))
    assert ref.status == "optimal" and ref.compute_cost > graph.total_cost
    assert sol.details["optimal_in_class"]  # CP-SAT's proof, or the bound met
    assert sol.peak_memory <= budget_bytes
    assert sol.compute_cost == pytest.approx(ref.compute_cost, rel=1e-6)


def test_cp_intervals_limits_the_copies():
    """With ``COPIES`` = 2 the model is a restriction: on random_dag(10) at 60% its optimum
    computes no node more than twice and costs more than milp's, which computes one three
    times; the method does not call it optimal."""
    pytest.importorskip("ortools")
    graph = remat.graphs.random_dag(10, seed=0)
    budget = parse_budget("60%", graph)
    ref = solver("milp")(graph, budget, SolveOptions(time_limit=30))
    sol = solver("cp-intervals")(graph, budget, SolveOptions(time_limit=30, warm_start=False))
    assert ref.status == "optimal" and ref.R.sum(axis=0).max() >= 3
    assert sol.details["backend_status"] == "OPTIMAL" and sol.R.sum(axis=0).max() <= 2
    assert sol.details["optimal_in_class"]  # what auto reads
    assert sol.compute_cost > ref.compute_cost * (1 + 1e-6)
    assert sol.status != "optimal" and sol.lower_bound <= ref.compute_cost + 1e-9


def test_cp_intervals_starts_from_the_schedule_it_is_given():
    """From a schedule (``initial``: chen-greedy's, 1.264 of the total cost) it finds one that
    fits at 1.0445, which meets the retention bound: the search stops there, long before its
    60 s limit; with too little time, no worse than the start."""
    pytest.importorskip("ortools")
    graph = remat.graphs.random_dag(40, seed=2)
    budget = parse_budget("70%", graph)
    start = solver("chen-greedy")(graph, budget, SolveOptions())
    assert start.feasible
    for limit in (0.01, 60.0):
        sol = solver("cp-intervals")(graph, budget, SolveOptions(time_limit=limit,
                                                                 initial=start))
        assert sol.feasible and sol.peak_memory <= budget
        assert simulate(graph, sol.R, sol.S).compute_cost == pytest.approx(sol.compute_cost)
        # too little time: the start schedule (or the first CP-SAT found from it)
        assert sol.compute_cost < (start.compute_cost * (1 + 1e-12) if limit < 1 else
                                   0.9 * start.compute_cost)
    assert sol.status == "optimal" and sol.details["optimal_in_class"]
    assert sol.solve_time < limit / 2  # stopped at the bound, not at the limit


def test_cp_intervals_stops_within_the_callers_gap():
    """With ``mip_rel_gap`` 0.25, chen-greedy's start (1.264 of the total cost) is already
    within the gap of the retention bound (1.0445): the search stops at once, "feasible"."""
    pytest.importorskip("ortools")
    graph = remat.graphs.random_dag(40, seed=2)
    budget = parse_budget("70%", graph)
    start = solver("chen-greedy")(graph, budget, SolveOptions())
    sol = solver("cp-intervals")(graph, budget, SolveOptions(time_limit=60.0, initial=start,
                                                             mip_rel_gap=0.25))
    assert sol.feasible and sol.compute_cost <= start.compute_cost * (1 + 1e-12)
    assert sol.status == "feasible" and not sol.details["optimal_in_class"]
    assert sol.solve_time < 30.0  # stopped, not timed out


def test_cp_intervals_searches_neighbourhoods_from_a_start_on_large_graphs(monkeypatch):
    """Past ``LNS_NODES`` nodes and from a start, CP-SAT runs only its large-neighbourhood
    search; without a start, or on smaller graphs, its default, whose full search can prove."""
    cp_model = pytest.importorskip("ortools.sat.python.cp_model")
    from remat.solvers import cp_intervals

    asked = []
    solve = cp_model.CpSolver.solve

    def spied(self, model, *args, **kwargs):
        asked.append(self.parameters.use_lns_only)
        return solve(self, model, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spied)
    large, small = remat.graphs.random_dag(40, seed=2), remat.graphs.random_dag(10, seed=0)
    assert small.size <= cp_intervals.LNS_NODES < large.size
    for graph, start in ((large, True), (large, False), (small, True)):
        solver("cp-intervals")(graph, parse_budget("70%", graph),
                               SolveOptions(time_limit=2.0, warm_start=start))
    assert asked == [True, False, False]


def test_cp_intervals_builds_no_model_it_has_no_time_for(monkeypatch):
    """Building the model ignores the time limit (``BUILD_SECONDS`` per read literal): where
    the time left does not cover it, no model is built and the start is the result; where
    it does, the model is built and searched; without a limit, always built."""
    pytest.importorskip("ortools")
    from remat.solvers import cp_intervals

    built = []

    class Counted(cp_intervals.IntervalModel):
        def __init__(self, *args):
            built.append(args)
            super().__init__(*args)

    monkeypatch.setattr(cp_intervals, "IntervalModel", Counted)
    graph = remat.graphs.random_dag(40, seed=2)
    budget = parse_budget("70%", graph)
    start = solver("chen-greedy")(graph, budget, SolveOptions())
    literals = cp_intervals.read_literals(graph, [2] * graph.size)
    monkeypatch.setattr(cp_intervals, "BUILD_SECONDS", 10.0 / literals)  # 10 s to build
    short = solver("cp-intervals")(graph, budget, SolveOptions(time_limit=5, initial=start))
    assert not built and short.details["backend_status"] == "not started"
    assert short.status == "timeout" and np.array_equal(short.R, start.R)
    assert short.solve_time < 5
    monkeypatch.setattr(cp_intervals, "BUILD_SECONDS", 0.0)
    searched = solver("cp-intervals")(graph, budget, SolveOptions(time_limit=5, initial=start))
    assert len(built) == 1 and searched.compute_cost < short.compute_cost
    monkeypatch.setattr(cp_intervals, "BUILD_SECONDS", 100.0 / literals)  # past its default
    solver("cp-intervals")(graph, budget, SolveOptions(time_limit=None, initial=start,
                                                       mip_rel_gap=1.0))
    assert len(built) == 2


def test_cp_intervals_below_the_least_peak_says_how_low_it_went():
    """Where no schedule is found, the least peak ``min_budget`` reaches, proven where it is
    below the pebbling bound."""
    pytest.importorskip("ortools")
    graph = cases.graph("dag10-s1")
    sol = solver("cp-intervals")(graph, parse_budget("20%", graph),
                                 SolveOptions(time_limit=10, warm_start=False))
    assert not sol.feasible and sol.proven_infeasible
    assert sol.min_budget > parse_budget("20%", graph)
    below = solver("cp-intervals")(graph, graph.static_mem / 2, SolveOptions(time_limit=5))
    assert not below.feasible and below.proven_infeasible  # below static memory


def test_cp_intervals_reports_progress_where_nothing_costs_anything():
    """Each schedule CP-SAT finds goes to ``progress`` at its true cost; on a graph whose
    nodes all cost 0 that is 0, and so is the gap (no division by zero)."""
    pytest.importorskip("ortools")
    dag = remat.graphs.random_dag(12, seed=0)
    free = remat.RematGraph(dag.names, np.zeros(dag.size), dag.mem, dag.deps, dag.is_backward,
                            static_mem=dag.static_mem)
    seen = []
    sol = solver("cp-intervals")(free, parse_budget("60%", free),
                                 SolveOptions(time_limit=5, progress=seen.append,
                                              warm_start=False))
    assert sol.feasible and sol.compute_cost == 0.0
    assert seen and all(event["incumbent"] == event["gap"] == 0.0 for event in seen)


def test_auto_runs_cp_intervals_after_retention_on_large_graphs(monkeypatch):
    """Past ``MILP_MAX_NODES``, on graphs that are not chains, cp-intervals comes last, with
    OR-Tools installed only; never on chains or small graphs: with half the time left where
    retention ran out of time (the method before it gets half too), else after the bound."""
    from remat.solvers import auto

    large = remat.graphs.random_dag(60)
    assert large.size > auto.MILP_MAX_NODES
    assert auto.candidate_methods(large)[-2:] == ["retention", "cp-intervals"]
    assert "lp-rounding" not in auto.candidate_methods(large)  # session 30: never chosen
    assert "cp-intervals" not in auto.candidate_methods(remat.graphs.random_dag(30))
    assert "cp-intervals" not in auto.candidate_methods(remat.graphs.linear(60))
    fractional = remat.RematGraph(large.names, large.cost, large.mem / 3, large.deps,
                                  large.is_backward, static_mem=large.static_mem)
    assert "cp-intervals" not in auto.candidate_methods(fractional)  # CP-SAT needs bytes
    monkeypatch.setattr(auto, "CP_INSTALLED", False)
    assert "cp-intervals" not in auto.candidate_methods(large)
    # a method before it and cp-intervals itself get half; the rest goes to the bound
    assert auto._share("ap-sqrtn", 20.0, ["cp-intervals"]) == 10.0
    assert auto._share("cp-intervals", 20.0, []) == 10.0
    assert auto._share("retention", 20.0, ["cp-intervals"]) == 10.0
    # where cp-intervals' half of what retention leaves is too short for its turn: all of it
    assert auto._share("retention", 1.9, ["cp-intervals"]) == 1.9
    assert auto._share("retention", 1.9, ["milp"]) == 0.95
    # only from a schedule over 1% above the bound, where retention ran out of time
    graph = remat.graphs.random_dag(10, seed=1)
    cut = Solution.from_schedule(graph, *checkpoint_all(graph), "retention", "timeout", None)
    cut = cut.with_(lower_bound=cut.compute_cost / 1.02)
    plain = SolveOptions()
    assert auto._search_left(cut, None, [cut], plain)
    assert not auto._search_left(cut, cut.compute_cost / 1.005, [cut], plain)  # within CP_GAP
    assert not auto._search_left(cut, None, [cut.with_(status="feasible")], plain)  # stalled
    assert not auto._search_left(None, None, [cut], plain)
    # after the bound: only with time left, and while the gap is over CP_GAP
    budget = checkpoint_all_peak(graph)
    assert auto._search_after_bound(graph, budget, SolveOptions(), None, [cut],
                                    time.perf_counter() - 1) == []
    found = auto._search_after_bound(graph, budget, SolveOptions(), None, [cut],
                                     time.perf_counter() + 5)
    assert [r.method for r in found] == ["cp-intervals"] and found[0].peak_memory <= budget
    assert auto._search_after_bound(graph, budget, SolveOptions(), cut.compute_cost / 1.005,
                                    [cut], time.perf_counter() + 5) == []
    # not again where CP-SAT proved its own schedule optimal within its copies
    for proved, runs in ((False, 1), (True, 0)):
        before = cut.with_(method="cp-intervals", details={"optimal_in_class": proved})
        assert len(auto._search_after_bound(graph, budget, SolveOptions(), None, [before],
                                            time.perf_counter() + 5)) == runs


@pytest.mark.parametrize("limit,runs", [(1.6, False), (4.0, True)])
def test_auto_gives_cp_intervals_no_share_too_short_to_search(monkeypatch, limit, runs):
    """cp-intervals after retention ran out of time, 5% above the bound (a fake clock:
    retention uses all of its share, the baselines nothing): with 4 s retention gets half and
    cp-intervals a quarter (1 s), enough to search; with 1.6 s that quarter (0.4 s) would be
    under ``CP_LEAST_SECONDS``, so retention gets all of it, and neither cp-intervals nor
    the search after the bound (under ``LEFT_SECONDS`` left) runs."""
    from types import SimpleNamespace

    from remat.solvers import auto

    graph = remat.graphs.random_dag(60)
    budget = parse_budget("100%", graph)
    found = solver("checkpoint-all")(graph, budget, SolveOptions()).with_(lower_bound=0.0)
    clock, given = [0.0], []

    def fake(name):
        def run(graph, budget, options):
            if name == "cp-intervals":
                given.append(options.time_limit)
            if name in ("retention", "cp-intervals"):
                clock[0] += options.time_limit
                return found.with_(method=name, status="timeout")
            return found.with_(method=name)
        return run

    def bound(graph, budget, time_limit, threads, enough=None):
        return SimpleNamespace(value=found.compute_cost / 1.05 if enough is None else enough)

    monkeypatch.setattr(auto, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(auto, "solver", fake)
    monkeypatch.setattr(auto, "retention_bound", bound)
    monkeypatch.setattr(auto, "below_floor", lambda *args, **kwargs: None)
    monkeypatch.setattr(auto, "CP_INSTALLED", True)
    auto.solve(graph, budget, SolveOptions(time_limit=limit))
    assert given[:1] == ([pytest.approx(limit / 4)] if runs else [])


def test_auto_reports_its_progress_on_its_own_clock():
    """auto's progress: after each method, each bound it proves and each event of the method
    running, the cheapest schedule and best bound so far, the method, and the seconds since
    auto started (rising); it ends at what auto returns."""
    pytest.importorskip("ortools")
    graph = remat.graphs.random_dag(100)
    seen = []
    sol = solver("auto")(graph, parse_budget("20%", graph),
                         SolveOptions(time_limit=8, progress=seen.append))
    assert sol.feasible and seen
    assert all({"incumbent", "bound", "gap", "time", "method"} <= set(e) for e in seen)
    times, costs, bounds = ([e[key] for e in seen] for key in ("time", "incumbent", "bound"))
    assert times == sorted(times) and times[-1] <= sol.solve_time + 1e-6
    # each a schedule's cost and a proven bound: never below the end's cost, never above it
    assert all(c >= sol.compute_cost * (1 - 1e-9) for c in costs)
    assert all(b <= sol.compute_cost * (1 + 1e-9) for b in bounds)
    assert costs[-1] == pytest.approx(sol.compute_cost) and bounds[-1] == sol.lower_bound
    assert {"bound", "retention", *sol.details["tried"]} <= {e["method"] for e in seen}


def test_chain_dp_applies_only_to_chains():
    from remat.solvers.chain_dp import applies

    assert applies(remat.graphs.linear(5)) and applies(remat.graphs.linear(1, unit=True))
    assert not applies(remat.graphs.unet(2)) and not applies(remat.graphs.random_dag(6, seed=1))


def textbook_chain_dp(chain, free_mem):
    """The persistent-schedule recursion (chain_dp before its drop states) written the plain
    way: exact budgets as memo keys, every split tried, no shortcuts, no bounds."""
    from functools import lru_cache

    n, m, g = chain.n, chain.fwd_mem, chain.grad_mem

    @lru_cache(maxsize=None)
    def best(s, t, top, budget):
        base = m[s - 1] if s else 0.0
        if s == t:  # stage b_s alone: its operands and output, a_s computed here unless top
            fits = base + m[s] + g[s + 1] + g[s] <= budget
            return (0.0 if top else chain.fwd_cost[s]) + chain.bwd_cost[s] if fits else np.inf
        above = g[t + 1] if t < n - 1 else 0.0
        result, run_cost, run_peak = np.inf, 0.0, 0.0
        for j in range(s, t):
            run_peak = max(run_peak, base + above + (m[t] if top else 0.0)
                           + (m[j - 1] if j > s else 0.0) + m[j])
            run_cost += chain.fwd_cost[j]
            if run_peak > budget:
                break
            upper = run_cost + best(j + 1, t, top, budget - base)
            result = min(result, upper + min(best(s, j, 1, budget), best(s, j, 0, budget)))
        return result

    return best(0, n - 1, 0, float(free_mem)) + chain.loss_cost


def repeated_chain(n, seed):
    """A random chain made of two alternating layer kinds (segments with equal content share
    one DP solution: this exercises that sharing)."""
    rng = np.random.default_rng(seed)
    graph = random_chain(n, seed)
    kinds = rng.integers(1, 6, (2, 2)).astype(float)
    cost, mem = graph.cost.copy(), graph.mem.copy()
    for k in range(n):
        cost[k], mem[k] = kinds[k % 2]
    return remat.RematGraph(graph.names, cost, mem, graph.deps, graph.is_backward,
                            static_mem=graph.static_mem)


@pytest.mark.parametrize("graph", [random_chain(n, seed) for n, seed in
                                   [(1, 1), (2, 2), (4, 3), (5, 100), (6, 103), (7, 4), (8, 5)]]
                         + [repeated_chain(8, 6), repeated_chain(9, 7),
                            remat.graphs.linear(9), remat.graphs.linear(7, unit=True)],
                         ids=lambda g: f"n{len(g.forward_nodes) - 1}")
def test_chain_dp_equals_the_textbook_recursion_at_every_budget(graph):
    """The interval memo, branch and bound, shortcuts and the persistent pass of chain_dp
    change nothing: same least cost as its recursion written plainly (tests/chain_reference.py)
    at every whole budget from infeasible to store-all (and at half-way fractional budgets),
    never above the persistent recursion."""
    chain = chain_of(graph)
    peak = remat.schedule.checkpoint_all_peak(graph) - graph.static_mem
    budgets = np.linspace(0, peak, 60) if peak > 1000 else np.arange(0, peak + 1, 0.5)
    reference = Reference(chain)
    for free in budgets:
        want = reference.seg(0, chain.n, 0, float(usable(chain, free)))[0]
        got = optimal_cost(chain, free)[0]
        assert got == pytest.approx(want, rel=1e-12) or got == want == np.inf, free
        assert got <= textbook_chain_dp(chain, free) * (1 + 1e-12)


@pytest.mark.parametrize("unit", [True, False])
def test_chain_dp_certified_by_the_retention_bound(unit):
    """Measured: on linear(32) at 30% of the way from the DP's smallest budget to the full
    peak, the DP's cost meets the retention bound, so it is optimal over all schedules."""
    graph = remat.graphs.linear(32, unit=unit)
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    budget = least + 0.3 * (checkpoint_all_peak(graph) - least)
    sol = solver("chain-dp")(graph, budget, SolveOptions())
    assert sol.status == "optimal" and sol.compute_cost > graph.total_cost
    assert sol.compute_cost == pytest.approx(retention_bound(graph, budget).value)


@pytest.mark.parametrize("n, full_class", [(8, True), (16, True), (32, False)])
def test_chain_dp_equals_the_binomial_optimum_on_unit_chains(n, full_class):
    """On unit chains chain-dp's least cost is Griewank's: the classic optimum with s = B - 3
    snapshot slots (the gradient above, the two activations a backward node reads and the one
    being computed take the rest), ``total + forward_steps(n, s) - (n - 1)``, at every whole
    budget from the smallest (4) to the store-all peak. A closed form independent of the DP;
    the persistent recursion alone reaches it too (n = 32 here; 64 and 128 measured)."""
    from remat.solvers.chain_dp import persistent_cost
    from remat.solvers.griewank import forward_steps

    graph = remat.graphs.linear(n, unit=True)
    chain = chain_of(graph)
    least = optimal_cost if full_class else persistent_cost
    for budget in range(4, n + 3):
        want = graph.total_cost + forward_steps(n, budget - 3) - (n - 1)
        assert least(chain, float(budget))[0] == want, budget
    assert np.isinf(optimal_cost(chain, 3.0)[0])


def test_auto_runs_chain_dp_on_long_chains_before_retention():
    """auto gives chain-dp chains past 100 layers (its old cap), before retention's search;
    its bound proves the schedule, so nothing runs after it."""
    graph = remat.graphs.linear(110, unit=True)
    sol = remat.solve(graph, "30%", method="auto", time_limit=30)
    assert sol.status == "optimal" and sol.details["chosen"] == "chain-dp"
    assert sol.details["tried"][-1] == "chain-dp"
    assert sol.compute_cost == pytest.approx(solver("chain-dp")(
        graph, parse_budget("30%", graph), SolveOptions()).compute_cost)


def recursions(graph, free, compiled):
    """What each recursion of chain-dp gives at ``free`` bytes above static memory: the
    persistent one, the full class with no cutoff, and the full class searched below the
    persistent cost (``optimal_cost``): costs, peaks, solve counts and schedules."""
    from remat.solvers import chain_dp

    chain = chain_of(graph)
    budget = usable(chain, free)
    out = []
    cost, dp = chain_dp.persistent_cost(chain, free, compiled=compiled)
    out += [cost, dp.solves, dp.schedule_ops(budget) if cost < np.inf else None]
    if compiled:
        full = chain_dp._Compiled(chain, budget, None, extended=True)
        answer = (full.cost, full.peak)
    else:
        full = chain_dp._ChainDP(chain)
        answer = full.best(0, full.n - 1, 0, budget)
    out += [answer, full.solves, full.schedule_ops(budget) if answer[0] < np.inf else None]
    chain_dp.forget_states()
    cost, dp = chain_dp.optimal_cost(chain, free, compiled=compiled)
    out += [cost, dp.complete, dp.schedule_ops(budget) if cost < np.inf else None]
    return out


def test_the_compiled_recursions_are_the_python_ones(monkeypatch):
    """The C recursions (built by ``make setup``) give the Python recursions' costs, peaks,
    numbers of solves and schedules, bit for bit, persistent and full class, with and without
    a cutoff, and the same least peak of the class: on random integer chains with and
    without workspace, on unit and heterogeneous linear chains, at budgets from below the
    least peak to above the store-all peak."""
    from remat.solvers import chain_dp
    from test_workspace import with_random_workspace

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    graphs = [random_chain(n, seed) for n in (2, 5, 9, 14) for seed in range(3)]
    graphs += [with_random_workspace(g, 7) for g in graphs[::2]]
    graphs += [remat.graphs.linear(n, unit=unit) for n in (8, 16, 24) for unit in (True, False)]
    compared = cheaper = 0
    for graph in graphs:
        least = chain_dp.least_peak(graph) - graph.static_mem
        top = checkpoint_all_peak(graph) - graph.static_mem
        for share in np.linspace(-0.1, 1.1, 13):
            free = least + share * (top - least)
            found = recursions(graph, free, compiled=True)
            assert found == recursions(graph, free, compiled=False), (graph.size, share)
            compared += found[0] < np.inf
            cheaper += found[6] < found[0]
        chain = chain_of(graph)
        least = chain_dp.min_free_mem(chain)
        with monkeypatch.context() as patch:
            patch.setattr(chain_dp, "COMPILED", False)
            assert chain_dp.min_free_mem(chain) == least
    assert compared > 200 and cheaper > 0  # most budgets have a schedule; some a cheaper one


def test_a_kept_recursion_answers_every_budget_as_a_cold_one():
    """The persistent C recursion keeps its stores per chain, so a budget solved after others
    (in any order, and after a call that ran out of time) starts from their searches: it gets
    the cold run's cost, and a schedule of that cost within the budget (the simulator's)."""
    from remat.solvers import chain_dp

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    rng = np.random.default_rng(3)
    graphs = [random_chain(n, seed) for n in (5, 9, 14) for seed in range(2)]
    graphs += [remat.graphs.linear(n, unit=unit) for n in (16, 40) for unit in (True, False)]
    checked = 0
    for graph in graphs:
        chain = chain_of(graph)
        least = chain_dp.least_peak(graph) - graph.static_mem
        top = checkpoint_all_peak(graph) - graph.static_mem
        frees = [least + share * (top - least) for share in rng.permutation(
            np.linspace(-0.05, 1.05, 9))]
        cold = {}
        for free in frees:
            chain_dp.forget_states()
            cold[free] = optimal_cost(chain, free)[0]
        chain_dp.forget_states()
        for free in frees:
            cost, dp = optimal_cost(chain, free)
            assert cost == cold[free], (graph.size, free)
            if cost < np.inf:
                R, S = chain_dp.schedule(graph, dp, free)
                sim = simulate(graph, R, S)
                assert sim.peak_memory <= graph.static_mem + free
                assert sim.compute_cost == pytest.approx(cost, rel=1e-9)
                checked += 1
    assert checked > 50
    graph = remat.graphs.linear(256)  # C: 0.8-2.5 s cold
    chain, free = chain_of(graph), parse_budget("30%", graph) - graph.static_mem
    chain_dp.forget_states()
    cold = chain_dp.persistent_cost(chain, free)[0]
    chain_dp.forget_states()
    with pytest.raises(chain_dp._OutOfTime):
        chain_dp.persistent_cost(chain, free, time.perf_counter())
    resumed, dp = chain_dp.persistent_cost(chain, free)
    assert resumed == cold and dp.solves > 0


def test_a_recursion_run_ahead_gives_chain_dp_the_cold_answer():
    """``chain_dp.Ahead`` runs the persistent C recursion in a thread; chain-dp's own
    recursion on the chain (``_Compiled``) waits for it and returns what a cold one returns.
    Stopped early (at once, or by the caller's deadline), it leaves only finished searches:
    the next call still gets the cold answer. Nothing keeps running after ``stop``."""
    from remat.solvers import chain_dp

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    graph = remat.graphs.linear(192)  # 2.2 s cold here (linear(256): 4.6 s, and this test
    # 19.9 s): stopped at once (0.01 s after it starts), it stops mid-search
    chain, budget = chain_of(graph), parse_budget("10%", graph)
    free = budget - graph.static_mem
    chain_dp.forget_states()
    cost, dp = chain_dp.persistent_cost(chain, free)
    cold = (cost, dp.peak, dp.schedule_ops(usable(chain, free)))
    for stop_when in ("done", "at once", "deadline"):
        chain_dp.forget_states()
        ahead = chain_dp.Ahead(graph, budget, time.perf_counter() + 60)
        assert ahead.thread is not None and chain_dp._AHEAD[chain] is ahead
        if stop_when == "at once":
            ahead.stop()
        elif stop_when == "deadline":  # the caller's deadline has passed: it stops the thread
            chain_dp._wait_for(chain, time.perf_counter())
        assert ahead.thread is None or stop_when == "done"
        cost, dp = chain_dp.persistent_cost(chain, free)
        assert ahead.thread is None and not chain_dp._AHEAD
        assert (cost, dp.peak, dp.schedule_ops(usable(chain, free))) == cold
    chain_dp.forget_states()


def test_strided_recursions_are_subsets_of_the_persistent_one():
    """A strided recursion (checkpoints only at every k-th layer) finds schedules that fit and
    cost what it says (the simulator's), never below the persistent optimum, and the coarser
    stride never below the finer one (every fourth layer is also every second); with stride 1
    (its segments keyed by position, not content) it is the persistent recursion itself. A
    mask is refused for the full class."""
    from remat.solvers import chain_dp

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    graphs = [remat.graphs.linear(n, unit=unit) for n in (12, 40) for unit in (True, False)]
    graphs += [random_chain(n, seed) for n in (6, 11) for seed in range(2)]
    checked = 0
    for graph in graphs:
        chain = chain_of(graph)
        tables = chain_dp._ChainDP(chain, extended=False)
        least, top = chain_dp.least_peak(graph), checkpoint_all_peak(graph)
        for share in np.linspace(0, 1, 7):
            free = usable(chain, least + share * (top - least) - graph.static_mem)
            whole = chain_dp.persistent_cost(chain, free)[0]
            costs = {}
            for stride in (1, 2, 4):
                state = chain_dp._strided_state(tables, stride)
                found = chain_dp._strided(tables, state, free, time.perf_counter() + 60, stride)
                costs[stride] = np.inf if found is None else found[0]
                if found is not None:
                    sim = simulate(graph, *chain_dp._r_s(graph, found[1]))
                    assert sim.peak_memory <= graph.static_mem + free
                    assert sim.compute_cost == pytest.approx(found[0], rel=1e-9)
                    checked += 1
            assert costs[1] == whole, (graph.size, share)
            assert whole <= costs[2] <= costs[4], (graph.size, share)
    assert checked > 60
    packed = chain_dp._packed(tables)
    with pytest.raises(ValueError, match="persistent recursion only"):
        chain_dp._chain_dp_c.new_state(tables.n, *packed, True, bytes(tables.n))
    chain_dp._STRIDED.clear()


def test_chain_dp_out_of_time_offers_the_strided_schedules():
    """Where the persistent recursion does not finish, chain-dp's fallback offers the strided
    recursions' schedules (those ``Ahead`` recorded at the budget, else its own) beside the
    least-peak and graded ones, and returns the cheapest that fits: on heterogeneous
    linear(128) at 10% of its range the strided schedules beat the least-peak one."""
    from remat.solvers import chain_dp

    graph = remat.graphs.linear(128)
    chain = chain_of(graph)
    least, top = chain_dp.least_peak(graph), checkpoint_all_peak(graph)
    budget = least + 0.1 * (top - least)
    free = usable(chain, budget - graph.static_mem)
    chain_dp._STRIDED.clear()
    start = time.perf_counter()
    found = chain_dp._fallback(graph, chain, budget, start, start + 2)
    strided = [ops for at, _, ops in chain_dp._STRIDED[chain] if at == free]
    assert len(strided) == 2 and found.peak_memory <= budget
    costs = [simulate(graph, *chain_dp._r_s(graph, ops)).compute_cost for ops in strided]
    tables = chain_dp._ChainDP(chain, extended=False)
    lowest = chain_dp._fitting(graph, np.inf, tables.least_peak_ops, "least-peak")[0]
    assert found.compute_cost <= min(costs) * (1 + 1e-12) < lowest.compute_cost
    assert found.compute_cost >= chain_dp.persistent_cost(chain, free)[0] * (1 - 1e-12)
    ahead = chain_dp.Ahead(graph, budget, time.perf_counter() + 60)  # records them again
    ahead.wait(None)
    assert sum(at == free for at, _, _ in chain_dp._STRIDED[chain]) == 4
    chain_dp._STRIDED.clear()
    chain_dp.forget_states()


def test_chain_dp_runs_only_the_strided_recursions_on_long_heterogeneous_chains():
    """Past ``WHOLE_LAYERS`` layers of many kinds, chain-dp (and ``Ahead``) never starts the
    whole persistent recursion (no kept state): its strided recursions' schedule (strides
    scaled to the length) is what it returns, fitting the budget. Unit chains keep it all."""
    from remat.solvers import chain_dp

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    assert chain_dp.strides(512) == (4, 2) and chain_dp.strides(1024) == (8, 4)
    assert not chain_dp.strided_only(chain_of(remat.graphs.linear(600, unit=True)))
    graph = remat.graphs.linear(chain_dp.WHOLE_LAYERS[0] + 1)
    chain = chain_of(graph)
    assert chain_dp.strided_only(chain) and not chain_dp.strided_only(
        chain_of(remat.graphs.linear(chain_dp.WHOLE_LAYERS[0])))
    least, top = chain_dp.least_peak(graph), checkpoint_all_peak(graph)
    budget = least + 0.3 * (top - least)
    chain_dp.forget_states()
    chain_dp._STRIDED.clear()
    ahead = chain_dp.Ahead(graph, budget, time.perf_counter() + 6)
    sol = solver("chain-dp")(graph, budget, SolveOptions(time_limit=6))
    ahead.stop()
    assert sol.feasible and sol.peak_memory <= budget and sol.status == "timeout"
    assert sol.details["fallback"].startswith("strided-")
    assert chain not in chain_dp._STATES  # the whole recursion never ran
    chain_dp._STRIDED.clear()
    chain_dp.forget_states()


def test_chain_dp_tables_match_their_definitions():
    """The numpy tables (``_range_tables``, ``_segment_ids``, ``own``) against the definitions
    written as plain loops: need and store_peak value for value, own as the running largest
    need[k, k], and segment ids equal exactly where the content (base, layers in order,
    gradient above) is. Random chains of few kinds of layer, so that many segments repeat,
    with workspaces, and sizes of whole bytes or not."""
    from remat.solvers import chain_dp

    for n, seed in [(1, 0), (2, 1), (7, 2), (19, 3), (40, 4)]:
        rng = np.random.default_rng(seed)
        graph = random_chain(n, seed)
        kinds = rng.integers(0, 3, n)  # few kinds: copy layer kind k's costs and sizes
        cost, mem = graph.cost.copy(), graph.mem * (0.37 if seed % 2 else 1.0)
        workspace = rng.integers(0, 4, graph.size).astype(float)
        for k in range(n):
            for node in (k, 2 * n - k):
                copied = kinds[k] if node == k else 2 * n - kinds[k]
                cost[node], mem[node] = graph.cost[copied], mem[copied]
                workspace[node] = workspace[copied]
        graph = remat.RematGraph(graph.names, cost, mem, graph.deps, graph.is_backward,
                                 static_mem=graph.static_mem, workspace=workspace)
        dp = chain_dp._ChainDP(chain_of(graph), extended=False)
        m, g, size = dp.mem, dp.grad, dp.n
        out = [g[k] + dp.bws[k] for k in range(size)]
        content = {}
        for s in range(size):
            for t in range(s, size):
                operands = max([m[s] + g[s + 1] + out[s]] + [
                    m[k - 1] + m[k] + g[k + 1] + out[k] for k in range(s + 1, t + 1)])
                assert dp.arrays.need[s, t] == dp.base[s] + operands  # the same float sums
                resident = max(sum(m[s:k + 1]) + g[k + 1] + out[k] for k in range(s, t + 1))
                sweep = [sum(m[s:i]) + m[i] + dp.fws[i] for i in range(s, t + 1)]
                above = dp.base[s] + g[t + 1]
                for top in (0, 1):
                    swept = max(sweep[:t - s + 1 - top], default=-np.inf)
                    want = max(dp.base[s] + resident, above + m[t] * top + swept)
                    assert dp.arrays.store_peak[top, s, t] == pytest.approx(want, rel=1e-12)
                key = (dp.base[s], tuple((dp.fcost[k], m[k], g[k], dp.bcost[k], dp.fws[k],
                                          dp.bws[k]) for k in range(s, t + 1)), g[t + 1])
                content.setdefault(key, set()).add(int(dp.arrays.segment_id[s, t]))
                assert dp.arrays.own[s, t] == max(dp.arrays.need[k, k] for k in range(s, t + 1))
        ids = [next(iter(found)) for found in content.values()]
        assert all(len(found) == 1 for found in content.values())  # equal content, equal id
        assert len(set(ids)) == len(ids) == int(dp.arrays.segment_id.max()) + 1  # and only then
        assert (dp.arrays.segment_id[np.tril_indices(size, -1)] == -1).all()
        assert dp.need == dp.arrays.need.tolist()  # the Python recursion's lists


def test_auto_on_chains_past_the_least_peak_length(monkeypatch):
    """Past ``LEAST_PEAK_LAYERS`` (``auto.LONG_CHAIN``; lowered here to 64 so that linear(96)
    is past it), chain-dp runs only its strided recursions, even on a unit chain, and builds
    no least-peak schedule; auto runs it first, then retention, without the greedy baselines,
    searches no floor, and its result fits with a bound proved. Below one node's operands the
    budget is still proven infeasible."""
    from remat.solvers import auto, chain_dp, peak_floor

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    monkeypatch.setattr(chain_dp, "LEAST_PEAK_LAYERS", 64)
    monkeypatch.setattr(chain_dp, "WHOLE_LAYERS", (48, 4))
    monkeypatch.setattr(auto, "LONG_CHAIN", 64)
    try:
        for unit in (True, False):
            graph = remat.graphs.linear(96, unit=unit)
            assert chain_dp.strided_only(chain_of(graph))
            methods = auto.candidate_methods(graph)
            assert methods[:2] == ["chain-dp", "retention"]
            assert not set(auto.LONG_CHAIN_SKIPS) & set(methods) and "checkpoint-all" in methods
            budget = parse_budget("30%", graph)
            sol = solver("chain-dp")(graph, budget, SolveOptions(time_limit=10))
            assert sol.feasible and sol.peak_memory <= budget
            assert sol.details["fallback"].startswith("strided-")
            assert graph not in chain_dp._LEAST_PEAK
            found = solver("auto")(graph, budget, SolveOptions(time_limit=10))  # 8 s took 5.5-6.4 s
            assert found.feasible and found.peak_memory <= budget
            assert found.details["tried"][0] == "chain-dp"
            assert found.compute_cost <= sol.compute_cost * (1 + 1e-12)
            assert found.lower_bound > graph.total_cost  # the bound proved something
            assert graph not in peak_floor._CACHE and graph not in chain_dp._LEAST_PEAK
            low = solver("auto")(graph, peak_floor.peak_lower_bound(graph) - 1,
                                 SolveOptions(time_limit=5))
            assert low.proven_infeasible
    finally:
        chain_dp._STRIDED.clear()
        chain_dp.forget_states()


def test_the_long_chain_bound_allows_an_overrun_only_for_knapsacks_written_out(monkeypatch):
    """On chains past ``LONG_CHAIN`` auto's bound gets its share less ``LONG_BOUND_OVERRUN``
    (HiGHS's O(n^2) setup of a knapsack written out), but not where the gaps have one size
    (a unit chain: the knapsack as levels). With an overrun allowance larger than any limit,
    the unit chain still gets its bound and the heterogeneous one the trivial bound. (6 s:
    the unit chain's bound, 262, is reached with 1.5 s; 20 s made this test 34 s long.)"""
    from remat.solvers import auto, bounds

    monkeypatch.setattr(auto, "LONG_BOUND_OVERRUN", 1e6)
    for unit in (True, False):
        graph = remat.graphs.linear(96, unit=unit)
        budget = parse_budget("30%", graph)
        bounds.forget_bounds(graph)
        found = auto._long_bound(graph, budget, time.perf_counter() + 6, 6, None)
        assert (found.value > graph.total_cost) == unit
        bounds.forget_bounds(graph)
        assert found.value == graph.total_cost or found.value == pytest.approx(
            bounds.retention_bound(graph, budget, 6).value)


def test_after_waiting_for_the_thread_chain_dp_has_only_the_time_left(monkeypatch):
    """Where chain-dp's recursion waited for one running ahead until its deadline, its own
    search gets the time left (none), not the time it had before the wait: it ran a second
    full share (heterogeneous linear(512) at 10%: 26.4 s of 13.2). linear(128) takes about
    0.05 s: given the stale share it would finish."""
    from remat.solvers import chain_dp

    graph = remat.graphs.linear(128)
    chain, free = chain_of(graph), parse_budget("10%", graph) - graph.static_mem
    chain_dp.forget_states()
    monkeypatch.setattr(chain_dp, "_wait_for", lambda chain, deadline: time.sleep(
        max(deadline - time.perf_counter(), 0.0)))
    with pytest.raises(chain_dp._OutOfTime):
        chain_dp.persistent_cost(chain, free, time.perf_counter() + 0.2)
    monkeypatch.undo()
    assert chain_dp.persistent_cost(chain, free)[0] < np.inf
    chain_dp.forget_states()


def test_chain_dp_is_never_dearer_than_griewank():
    """auto leaves griewank out where chain-dp runs: Revolve's schedules are persistent, so the
    persistent recursion's optimum is at most griewank's cost wherever griewank fits, on unit,
    heterogeneous and random chains from their least peak to checkpoint-all's peak."""
    from remat.solvers import chain_dp

    graphs = [remat.graphs.linear(n, unit=unit) for n in (8, 24, 48) for unit in (True, False)]
    graphs += [random_chain(n, seed) for n in (5, 9, 14) for seed in range(2)]
    checked = 0
    for graph in graphs:
        least, top = chain_dp.least_peak(graph), checkpoint_all_peak(graph)
        for share in np.linspace(0, 1, 9):
            budget = least + share * (top - least)
            revolve = solver("griewank")(graph, budget, SolveOptions())
            if revolve.feasible:
                cost = chain_dp.persistent_cost(chain_of(graph), budget - graph.static_mem)[0]
                assert cost <= revolve.compute_cost * (1 + 1e-9), (graph.size, share)
                checked += 1
    assert checked > 60


def test_the_compiled_least_peak_tables_are_numpy_s():
    """The least-peak tables in C equal numpy's, entry for entry (peak, cost, first
    checkpoint, kept), on random integer chains with and without workspace and on linear
    chains."""
    from remat.solvers import chain_dp
    from test_workspace import with_random_workspace

    assert chain_dp.COMPILED, "the C extension was not built (make setup)"
    graphs = [random_chain(n, seed) for n in (1, 2, 5, 9, 14) for seed in range(3)]
    graphs += [with_random_workspace(g, 11) for g in graphs]
    graphs += [remat.graphs.linear(n, unit=unit) for n in (8, 40) for unit in (True, False)]
    for graph in graphs:
        dp = chain_dp._ChainDP(chain_of(graph), extended=False)
        compiled, numpy_made = dp.least_peak_tables(), dp.least_peak_tables(compiled=False)
        assert all(np.array_equal(a, b) for a, b in zip(compiled, numpy_made)), graph.size


def test_chain_dp_stops_at_its_time_limit():
    """The persistent recursion on a long heterogeneous chain (in C, 3-18 s at 384 layers; in
    Python, 12-38 s at 192) stops at the limit and returns the cheapest of its fallback
    schedules, "timeout": in the quarter second left, the stride-4 recursion's (under 0.1 s
    at 384 layers, 30%; on a machine too busy for it, the least-peak one); a search or bound
    cut short is "timeout" too."""
    from remat.solvers import chain_dp
    from remat.solvers.chain_dp import _OutOfTime, persistent_cost

    graph = remat.graphs.linear(384)
    budget = parse_budget("30%", graph)
    sol = solver("chain-dp")(graph, budget, SolveOptions(time_limit=1))
    lowest = chain_dp._fitting(graph, budget, chain_dp._ChainDP(
        chain_of(graph), extended=False).least_peak_ops, "least-peak")[0]
    assert sol.status == "timeout"
    assert sol.details["fallback"].split("-")[0] in ("strided", "least", "graded")
    assert sol.compute_cost <= lowest.compute_cost
    assert sol.peak_memory <= budget and sol.lower_bound == graph.total_cost
    assert sol.solve_time < 10  # 1.5 s measured
    graph = remat.graphs.linear(192)
    with pytest.raises(_OutOfTime):
        persistent_cost(chain_of(graph), parse_budget("30%", graph) - graph.static_mem,
                        time.perf_counter() + 0.5, compiled=False)
    graph = remat.graphs.linear(64, unit=True)
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    budget = least + 0.1 * (checkpoint_all_peak(graph) - least)
    cut = solver("chain-dp")(graph, budget, SolveOptions(time_limit=1))
    assert cut.status == "timeout" and cut.compute_cost > cut.lower_bound
    assert cut.peak_memory <= budget


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
def test_least_peak_schedule_reaches_the_persistent_least_peak(n):
    """The numpy least-peak tables' schedule (one of chain-dp's answers when its time runs
    out) simulates to the smallest budget at which the persistent recursion (``best``, a
    separate code path) has any schedule, on random chains with and without workspace, and
    costs at least that recursion's optimum there."""
    from test_workspace import with_random_workspace

    from remat.solvers.chain_dp import _ChainDP, _fitting, persistent_cost

    for seed in range(6):
        graph = random_chain(n, seed)
        for g in (graph, with_random_workspace(graph, seed)):
            chain = chain_of(g)
            fill = _ChainDP(chain, extended=False).least_peak_ops
            [sol] = _fitting(g, float("inf"), fill, "least-peak")
            free = sol.peak_memory - g.static_mem
            assert np.isinf(persistent_cost(chain, free - 1)[0]), (n, seed)
            assert sol.compute_cost >= persistent_cost(chain, free)[0] - 1e-9
            assert not _fitting(g, sol.peak_memory - 1, fill, "least-peak")


def test_fallback_takes_the_cheaper_graded_schedule_given_time():
    """Given time, the fallback runs the graded DP and returns it where it beats the
    least-peak schedule (heterogeneous linear(64) at its least peak: 1.72 of the total
    against 1.38 with 64 levels and 1.28 with 128, measured)."""
    import time

    from remat.solvers.chain_dp import _ChainDP, _fallback, _fitting

    graph = remat.graphs.linear(64)
    chain = chain_of(graph)
    [least] = _fitting(graph, float("inf"), _ChainDP(chain, extended=False).least_peak_ops, "")
    sol = _fallback(graph, chain, least.peak_memory, time.perf_counter(),
                    time.perf_counter() + 30)
    assert sol.details["fallback"].startswith("graded") and sol.status == "timeout"
    assert sol.compute_cost < least.compute_cost and sol.peak_memory <= least.peak_memory


@pytest.mark.parametrize("n", [3, 5, 8])
def test_graded_dp_fits_and_is_exact_on_a_whole_grid(n):
    """``_Graded`` (the persistent recursion on a budget grid, numpy): its schedules fit and
    cost what it says; on a grid of the sizes' common divisor it equals the persistent
    recursion (``best``) at every budget; on a coarse grid it costs at least that."""
    from test_workspace import with_random_workspace

    from remat.solvers.chain_dp import _ChainDP, _fitting, _Graded, persistent_cost

    for seed in range(4):
        graph = random_chain(n, seed)
        for g in (graph, with_random_workspace(graph, seed)):
            chain = chain_of(g)
            dp = _ChainDP(chain, extended=False)
            least = dp._persistent_min_peak()
            for free in np.linspace(least, checkpoint_all_peak(g) - g.static_mem, 7).round():
                want = persistent_cost(chain, free)[0]
                for levels in (1000, 3):
                    graded = _Graded(dp, free, levels)
                    if not graded.feasible:
                        assert levels == 3 or np.isinf(want)
                        continue
                    [sol] = _fitting(g, g.static_mem + free, graded.ops, "graded")
                    got = graded.cost[0][0, dp.n - 1, graded.levels]
                    assert sol.compute_cost == pytest.approx(got)
                    if levels == 1000:
                        assert got == pytest.approx(want), (n, seed, free)
                    assert got >= want - 1e-9


def test_chain_dp_fallback_keeps_to_its_deadline():
    """A grid still running at the deadline is dropped (``_Graded`` raises), so the fallback
    returns its least-peak schedule by then: its first grid was started from the least-peak
    step's time, which the cached tables made near zero, and heterogeneous linear(512) then
    ran a 16-level grid for 9 s past auto's limit (auto at its least peak: 38.9 s of 30)."""
    from remat.solvers.chain_dp import _ChainDP, _fallback, _Graded, _OutOfTime

    graph = remat.graphs.linear(64)
    chain = chain_of(graph)
    dp = _ChainDP(chain, extended=False)
    free = dp._persistent_min_peak()
    with pytest.raises(_OutOfTime):
        _Graded(dp, free, 16, deadline=time.perf_counter())
    assert _Graded(dp, free, 16, deadline=time.perf_counter() + 60).feasible
    began = time.perf_counter()
    sol = _fallback(graph, chain, graph.static_mem + free, began, began)
    assert sol.feasible and sol.details["fallback"] == "least-peak"
    assert sol.peak_memory <= graph.static_mem + free


def test_auto_puts_chain_dp_after_retention_on_large_heterogeneous_chains(monkeypatch):
    """Heterogeneous linear(384) (in C; 74305 distinct segments, a persistent recursion of 3-18
    s) or linear(192) (in Python; 18721, 12-38 s): retention goes first, right after
    checkpoint-all (before the slower baselines), and chain-dp, last, gets all that is left (a
    fake clock: each method uses all it is given); griewank does not run. On unit
    linear(192) chain-dp runs first (where it proves, the baselines never run). Past
    ``CHAIN_DP_MAX`` layers, up to ``LONG_CHAIN`` (in C), chain-dp runs first on unit chains,
    last (its strided recursions only) on heterogeneous ones; past that, in C, chain-dp's
    strided recursions first, then retention (after auto's bound), then the baselines; in
    Python no chain-dp (retention still goes early)."""
    from types import SimpleNamespace

    from remat.solvers import auto

    graph = remat.graphs.linear(384 if auto.COMPILED else 192)
    methods = auto.candidate_methods(graph)
    assert methods[:2] == ["checkpoint-all", "retention"] and methods[-1] == "chain-dp"
    assert "griewank" not in methods  # chain-dp's persistent class holds Revolve's schedules
    assert auto.candidate_methods(remat.graphs.linear(192, unit=True))[:2] == \
        ["chain-dp", "checkpoint-all"]
    longest = auto.CHAIN_DP_MAX[0]
    beyond = auto.candidate_methods(remat.graphs.linear(longest + 1))
    assert beyond[:2] == ["checkpoint-all", "retention"] and "griewank" not in beyond
    if auto.COMPILED:  # only its strided recursions, last; few kinds of layer: all of it, first
        assert beyond[-1] == "chain-dp"
        assert auto.candidate_methods(remat.graphs.linear(longest + 88, unit=True))[0] == \
            "chain-dp"
    else:
        assert "chain-dp" not in beyond
    longest = max(longest, auto.LONG_CHAIN)
    for unit in (True, False):
        past = auto.candidate_methods(remat.graphs.linear(longest + 1, unit=unit))
        assert past[:2] == (["chain-dp", "retention"] if auto.COMPILED else
                            ["checkpoint-all", "retention"]) and "griewank" not in past
    clock, given = [0.0], {}
    stand_in = solver("chen-sqrtn")(graph, parse_budget("60%", graph), SolveOptions())

    def fake(name):
        def run(graph, budget, options):
            given[name] = options.time_limit
            if name in ("retention", "chain-dp"):
                clock[0] += options.time_limit
            return stand_in
        return run

    monkeypatch.setattr(auto, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(auto, "solver", fake)
    monkeypatch.setattr(auto, "retention_bound",
                        lambda *args, **kwargs: SimpleNamespace(value=graph.total_cost))
    auto.solve(graph, parse_budget("60%", graph), SolveOptions(time_limit=20))
    assert given["retention"] == pytest.approx(10) and given["chain-dp"] == pytest.approx(10)
    assert clock[0] == pytest.approx(20)


def _auto_with_stand_ins(monkeypatch, chain_dp_details: dict, others_fit: bool):
    """auto on linear(64) at 30% (30 s) with stand-ins: chain-dp uses its whole share (a fake
    clock) and returns chen-sqrtn's schedule with ``chain_dp_details``, status "timeout"; the
    other methods return that schedule too (``others_fit``) or none; the retention bound
    meets any cost. Returns auto's solution, the methods called, the bound's time limit and
    cost to meet, and the schedule's cost."""
    from types import SimpleNamespace

    from remat.solvers import auto

    graph = remat.graphs.linear(64)
    budget = parse_budget("30%", graph)
    found = solver("chen-sqrtn")(graph, budget, SolveOptions())
    clock, called, asked = [0.0], [], {}

    def fake(name):
        def run(graph, budget, options):
            called.append(name)
            if name != "chain-dp":
                return found if others_fit else Solution.infeasible(graph, name, budget, None)
            clock[0] += options.time_limit
            return replace(found, method="chain-dp", status="timeout", details=chain_dp_details)
        return run

    def bound(graph, budget, time_limit, threads, enough=None):
        asked.update(time_limit=time_limit, enough=enough)
        return SimpleNamespace(value=enough)

    monkeypatch.setattr(auto, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(auto, "solver", fake)
    monkeypatch.setattr(auto, "retention_bound", bound)
    sol = auto.solve(graph, budget, SolveOptions(time_limit=30))
    return sol, called, asked, found.compute_cost


def test_auto_gives_the_rest_to_the_bound_after_chain_dp_searched_its_class(monkeypatch):
    """Where chain-dp searched its whole class and only the bound is missing (no milp after it:
    more than 39 layers), auto spends what is left of its limit on the retention bound with
    chain-dp's cost to meet, not on retention and lp-rounding (a fake clock)."""
    sol, called, asked, cost = _auto_with_stand_ins(monkeypatch, {"optimal_in_class": True},
                                                    others_fit=True)
    assert called[-1] == "chain-dp" and "retention" not in called
    assert asked == {"time_limit": pytest.approx(20), "enough": cost}
    assert sol.status == "optimal"


def test_auto_gives_the_rest_to_the_bound_after_chain_dp_ran_out_of_time(monkeypatch):
    """Where chain-dp, first, returned a schedule without finishing its class (its share ran
    out: a chain at its least peak), the classic baselines still run, retention does not, and
    the rest of the limit goes to the retention bound with the cheapest cost to meet (a fake
    clock)."""
    from remat.solvers import auto

    sol, called, asked, cost = _auto_with_stand_ins(monkeypatch, {"fallback": "least-peak"},
                                                    others_fit=False)
    candidates = auto.candidate_methods(remat.graphs.linear(64))
    assert called[0] == "chain-dp" and "retention" not in called
    assert set(called[1:]) == set(candidates) & set(auto.CLASSIC)  # nor lp-rounding
    assert asked == {"time_limit": pytest.approx(20), "enough": cost}
    assert sol.status == "optimal" and sol.details["chosen"] == "chain-dp"


def test_auto_stops_after_chain_dp_searched_its_class():
    """linear(40, unit) at 20%: chain-dp's class search ends in ~1 s, the bound does not meet
    it in 100 s; auto does not run retention or lp-rounding after it."""
    graph = remat.graphs.linear(40, unit=True)
    sol = remat.solve(graph, "20%", method="auto", time_limit=6)
    assert sol.details["tried"][-1] == "chain-dp" and "retention" not in sol.details["tried"]
    alone = solver("chain-dp")(graph, parse_budget("20%", graph), SolveOptions(time_limit=3))
    assert sol.compute_cost == pytest.approx(alone.compute_cost)
    assert sol.status == "timeout" and sol.lower_bound < sol.compute_cost


def test_cpsat_below_the_least_peak_is_proven_infeasible():
    """One byte below the least peak (min_budget, exact on linear(4)): CP-SAT proves the
    model infeasible, which proves that no schedule fits."""
    pytest.importorskip("ortools")
    from remat.solvers.min_budget import min_budget

    graph = remat.graphs.linear(4)
    least = min_budget(graph)
    assert least.status == "optimal"
    sol = solver("cpsat")(graph, least.peak_memory - 1, SolveOptions(time_limit=20.0))
    assert sol.proven_infeasible and sol.min_budget == least.peak_memory


def test_auto_proves_a_quick_chain_without_griewank():
    """linear(64, unit) at 60% of its range: chain-dp's schedule meets its bound, so auto
    stops before griewank (its simulation of every slot count: 0.1 s at 64 layers, 0.5 s at
    128, 1.4 s at 192)."""
    from remat.schedule.budget import checkpoint_all_peak
    from remat.solvers.bounds import peak_lower_bound

    graph = remat.graphs.linear(64, unit=True)
    least = peak_lower_bound(graph)
    budget = least + 0.6 * (checkpoint_all_peak(graph) - least)
    sol = solver("auto")(graph, budget, SolveOptions(time_limit=30))
    assert sol.status == "optimal" and sol.details["chosen"] == "chain-dp"
    assert "griewank" not in sol.details["tried"]


def test_auto_tries_retention_before_a_slow_chain_dp():
    """Heterogeneous linear(256) (33153 DP segments, chain-dp first): at 30% of its budget
    range retention, tried first for a second, proves its schedule, and chain-dp's persistent
    recursion (1.45 s of a 1.74 s call under cProfile before) never runs (measured: 0.27 s).
    On linear(192) (18721 segments) chain-dp still goes first, alone."""
    graph = remat.graphs.linear(256)
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    budget = least + 0.3 * (checkpoint_all_peak(graph) - least)
    sol = solver("auto")(graph, budget, SolveOptions(time_limit=30))
    assert sol.status == "optimal" and sol.details["tried"] == ["retention"]
    assert sol.peak_memory <= budget
    shorter = remat.graphs.linear(192)
    least = solver("chain-dp")(shorter, 0.0, SolveOptions()).min_budget
    budget = least + 0.3 * (checkpoint_all_peak(shorter) - least)
    sol = solver("auto")(shorter, budget, SolveOptions(time_limit=30))
    assert sol.status == "optimal" and sol.details["tried"] == ["chain-dp"]


@pytest.mark.parametrize("first_gap", [0.05, 1e-5])
def test_auto_gives_the_time_its_methods_leave_to_the_bound(monkeypatch, first_gap):
    """On a DAG where every method ends early (a fake clock: each takes one second of 30),
    the time left goes to the retention bound, told the cheapest cost, where that cost is
    more than ``LEFT_GAP`` above the first bound (5%); not where it is within it (1e-5)."""
    from types import SimpleNamespace

    from remat.solvers import auto

    graph = remat.graphs.random_dag(10, seed=1)
    budget = parse_budget("100%", graph)
    found = solver("checkpoint-all")(graph, budget, SolveOptions())
    first = found.compute_cost / (1 + first_gap)  # stand-ins: not the graph's true bounds
    clock, asked = [0.0], []

    def fake(name):
        def run(graph, budget, options):
            clock[0] += 1.0
            return found.with_(lower_bound=0.0)
        return run

    def bound(graph, budget, time_limit, threads, enough=None):
        asked.append((time_limit, enough))
        return SimpleNamespace(value=first if enough is None else enough)

    monkeypatch.setattr(auto, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(auto, "solver", fake)
    monkeypatch.setattr(auto, "retention_bound", bound)
    monkeypatch.setattr(auto, "below_floor", lambda *args, **kwargs: None)
    sol = auto.solve(graph, budget, SolveOptions(time_limit=30))
    ran = len(sol.details["tried"])
    assert asked[0][1] is None and ran < 30
    if first_gap > auto.LEFT_GAP:
        assert asked[1:] == [(pytest.approx(30 - ran), found.compute_cost)]
        assert sol.status == "optimal" and sol.lower_bound == found.compute_cost
    else:
        assert asked[1:] == [] and sol.lower_bound == pytest.approx(first)
