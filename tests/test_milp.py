"""milp and min_budget: exact against the simulator, against exhaustive search, against the
baselines, and with the options of the issue (time limit, gap, warm start, progress)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import remat
from remat.schedule.budget import checkpoint_all_peak
from remat.schedule.rs import cheapest_r
from remat.schedule.simulate import simulate
from remat.solvers import highs_backend
from remat.solvers.base import SolveOptions, solver
from remat.solvers.milp import BASELINES, applicable, solve_with
from remat.solvers.milp_model import PLAIN, TIGHT, Formulation, MilpModel
from remat.solvers.min_budget import min_budget, peak_lower_bound

import exhaustive
from test_workspace import with_random_workspace

# the shared table's graphs (tests/cases.py) small enough for a proof in seconds here
GRAPHS = {
    "chain4-unit": lambda: remat.graphs.linear(4, unit=True),
    "chain8": lambda: remat.graphs.linear(8),
    "unet2-unit": lambda: remat.graphs.unet(2, unit=True),
    "unet3": lambda: remat.graphs.unet(3),
    "dag10-s1": lambda: remat.graphs.random_dag(10, seed=1),
}
BUDGETS = ("20%", "40%", "70%", "100%")  # as in the shared table: tight to unconstrained
TINY = {  # T <= 7
    "chain3-unit": lambda: remat.graphs.linear(3, unit=True),
    "chain3": lambda: remat.graphs.linear(3),
    "unet1": lambda: remat.graphs.unet(1),
    "dag3-s0-unit": lambda: remat.graphs.random_dag(3, seed=0, unit=True),
    "dag3-s4": lambda: remat.graphs.random_dag(3, seed=4),
}
_MIN = {}


def smallest(name: str, graph) -> float:
    if name not in _MIN:
        _MIN[name] = min_budget(graph).peak_memory
    return _MIN[name]


def level_budget(name: str, graph, level: float) -> float:
    low, high = smallest(name, graph), checkpoint_all_peak(graph)
    return low + level * (high - low)


def check_fits(graph, sol, budget) -> None:
    """The invariants every returned schedule meets."""
    sim = simulate(graph, sol.R, sol.S)
    assert sim.peak_memory <= budget
    assert sim.peak_memory == pytest.approx(sol.peak_memory)
    assert sim.compute_cost == pytest.approx(sol.compute_cost)
    assert sol.lower_bound <= sol.compute_cost + 1e-9
    assert sol.lower_bound >= graph.total_cost - 1e-9


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("percent", BUDGETS)
def test_milp_beats_every_baseline(name, percent):
    graph = GRAPHS[name]()
    budget = remat.parse_budget(percent, graph)
    sol = solver("milp")(graph, budget, SolveOptions(time_limit=4))
    if not sol.feasible:
        assert budget < sol.min_budget
        assert sol.details["min_budget_status"] != "optimal" or \
            sol.min_budget >= peak_lower_bound(graph)
        return
    check_fits(graph, sol, budget)
    assert sol.status in ("optimal", "timeout")
    if sol.status == "optimal":
        assert sol.compute_cost == pytest.approx(sol.lower_bound, rel=1e-6)
    for name_b in applicable(graph, BASELINES):
        other = solver(name_b)(graph, budget, SolveOptions())
        if other.feasible:
            assert sol.compute_cost <= other.compute_cost + 1e-9, name_b


@pytest.mark.parametrize("name", TINY)
def test_milp_equals_exhaustive_search(name):
    graph = TINY[name]()
    assert graph.size <= 7
    low = exhaustive.min_peak(graph)
    assert min_budget(graph).peak_memory == pytest.approx(low)
    peaks = sorted({low, checkpoint_all_peak(graph), (low + checkpoint_all_peak(graph)) / 2})
    for budget in peaks:
        sol = solver("milp")(graph, budget, SolveOptions())
        assert sol.status == "optimal"
        assert sol.compute_cost == pytest.approx(exhaustive.optimal_cost(graph, budget))
        check_fits(graph, sol, budget)
    below = solver("milp")(graph, low * (1 - 1e-6) - 1e-9, SolveOptions())
    assert below.proven_infeasible and below.min_budget == pytest.approx(low)


@pytest.mark.parametrize("graph", [remat.graphs.linear(2, unit=True), remat.graphs.linear(2)] + [
    exhaustive.random_graph(np.random.default_rng(seed), 5, 2, static=True) for seed in range(4)])
def test_dynamic_program_matches_full_enumeration(graph):
    """The row-by-row search of tests/exhaustive.py against every S matrix (T = 5), from the
    least peak to checkpoint-all's (the least peak: the least budget enumeration meets)."""
    low, high = exhaustive.min_peak(graph), checkpoint_all_peak(graph)
    budgets = [low - 0.5, *np.linspace(low, high, 6)]
    found = exhaustive.full_enumeration(graph, budgets)
    assert found[0] == np.inf and found[1] < np.inf
    assert [exhaustive.optimal_cost(graph, budget) for budget in budgets] == found


def _random_schedule(graph, rng):
    S = np.tril(rng.random((graph.size, graph.size)) < 0.3, -1)
    return cheapest_r(graph, S), S


@pytest.mark.parametrize("workspace_seed", [None, 1])
@pytest.mark.parametrize("name", ["chain4-unit", "unet3", "dag10-s1"])
def test_model_memory_equals_simulator(name, workspace_seed):
    """On schedules meeting the two dominance rows, the model's U is the simulator's peak, the
    vector satisfies every row, and a budget just below the peak cuts it off; also with random
    per-node workspace (tests/test_workspace.py's graphs)."""
    graph = GRAPHS[name]()
    if workspace_seed is not None:
        graph = with_random_workspace(graph, workspace_seed)
    rng = np.random.default_rng(0)
    model = MilpModel(graph, None, TIGHT)
    for _ in range(20):
        R, S = remat.schedule.tighten(graph, _random_schedule(graph, rng)[1])
        x = model.vector(R, S)
        peak = simulate(graph, R, S).peak_memory
        assert model.peak_of(x) == pytest.approx(peak, rel=1e-12)
        assert model.violation(x) <= 1e-9
        fits = MilpModel(graph, peak, TIGHT)
        assert fits.violation(fits.vector(R, S)) <= 1e-9
        tight = MilpModel(graph, peak - 1, TIGHT)
        assert tight.violation(tight.vector(R, S)) > 1e-6


@pytest.mark.parametrize("formulation", [PLAIN, TIGHT, Formulation(r_binary=False, free_binary=True)],
                         ids=["plain", "tight", "r-continuous"])
def test_raw_milp_solution_peak_is_simulator_peak(formulation):
    """The MILP's own R, S (no post-processing) and its U agree with the simulator."""
    graph = remat.graphs.unet(2)
    budget = level_budget("unet2", graph, 0.3)
    model = MilpModel(graph, budget, formulation)
    result = highs_backend.run(model.arrays())
    R, S = model.schedule(result.x)
    if not formulation.r_binary:
        R = cheapest_r(graph, S)
    sim = simulate(graph, R, S)
    assert sim.peak_memory <= budget
    if formulation.r_binary:
        assert model.peak_of(result.x) == pytest.approx(sim.peak_memory, rel=1e-9)
        assert result.objective * model.cost_unit == pytest.approx(sim.compute_cost)


@pytest.mark.parametrize("name,level", [("chain4-unit", 0.3), ("unet2-unit", 0.5),
                                        ("dag6", 0.2), ("dag6", 0.6), ("chain8", 1.0)])
def test_formulations_agree(name, level):
    """Every speed-up of milp_model is exact: same optimum as the plain encoding."""
    graph = remat.graphs.random_dag(6, seed=5) if name == "dag6" else GRAPHS[name]()
    budget = level_budget(name, graph, level)
    costs = []
    for form in (PLAIN, TIGHT, Formulation(r_binary=False, free_binary=True, free_once=True, free_fixing=True)):
        sol = solve_with(graph, budget, SolveOptions(warm_start=False), form)
        assert sol.status == "optimal"
        check_fits(graph, sol, budget)
        costs.append(sol.compute_cost)
    assert costs == pytest.approx([costs[0]] * len(costs))


def test_min_budget_and_infeasible_error():
    graph = remat.graphs.unet(2, unit=True)
    found = min_budget(graph)
    assert found.status == "optimal" and found.lower_bound == found.peak_memory
    assert simulate(graph, found.R, found.S).peak_memory == found.peak_memory
    assert found.peak_memory >= peak_lower_bound(graph)
    with pytest.raises(remat.InfeasibleBudgetError) as err:
        remat.solve(graph, found.peak_memory - 1, method="milp")
    assert err.value.min_budget == found.peak_memory


def test_time_limit_returns_best_schedule_with_bound():
    graph = remat.graphs.linear(16, unit=True)
    budget = 6.0
    seen = []
    sol = remat.solve(graph, budget, method="milp", time_limit=1.0, progress=seen.append)
    check_fits(graph, sol, budget)
    assert sol.status in ("timeout", "optimal")
    assert sol.solve_time < 8  # measured 1.04 s; 15-18 s while the warm start ignored the limit
    assert sol.gap is not None and 0 <= sol.gap < 1
    assert all({"incumbent", "bound", "gap", "time"} <= set(e) for e in seen)


def test_warm_start_takes_half_the_limit_in_all(monkeypatch):
    """The LP rounding gets what the baselines left of the warm start's half, not a half of
    its own (that left the MILP a quarter of the limit)."""
    import time

    from remat.solvers import milp

    given = []

    def slow_baselines(graph, budget, time_limit=None):
        time.sleep(0.3)
        return None

    def rounding(graph, budget, options):
        given.append(options.time_limit)
        return remat.Solution.infeasible(graph, "lp-rounding", budget, None)

    monkeypatch.setattr(milp, "best_baseline", slow_baselines)
    monkeypatch.setattr(milp, "solver", lambda name: rounding)
    graph = remat.graphs.linear(4, unit=True)
    assert milp.warm_start(graph, 5.0, SolveOptions(time_limit=2.0)) is None
    assert len(given) == 1 and given[0] <= 1.0 - 0.3 + 1e-3
    milp.warm_start(graph, 5.0, SolveOptions(time_limit=0.4))
    assert given[-1] == milp.MIN_WARM_SECONDS


def test_the_lp_is_built_only_where_it_has_the_time(monkeypatch):
    """The LP's model takes ``milp_model.BUILD_SECONDS`` per squared node to build, whatever
    the limit: lp-rounding, and so milp's warm start, leave it out where that is more than
    its time ("timeout", no schedule)."""
    from remat.solvers import lp_rounding, milp

    built = []

    class Built(Exception):
        pass

    def model(graph, budget, formulation):
        built.append(graph.size)
        raise Built

    monkeypatch.setattr(milp, "best_baseline", lambda graph, budget, time_limit=None: None)
    monkeypatch.setattr(lp_rounding, "MilpModel", model)
    graph = remat.graphs.random_dag(100)  # T = 201: 1.8 s to build
    assert milp.warm_start(graph, 5.0, SolveOptions(time_limit=2.0)) is None and not built
    quick = lp_rounding.solve(graph, 5.0, SolveOptions(time_limit=0.1))
    assert quick.status == "infeasible" and quick.details["lp_status"] == "timeout"
    assert not quick.proven_infeasible and not built
    for options in (SolveOptions(time_limit=10.0), SolveOptions()):
        with pytest.raises(Built):
            milp.warm_start(graph, 5.0, options)
    assert built == [201, 201]


def test_milp_builds_no_model_it_has_no_time_for(monkeypatch):
    """Neither does milp: given 1 s on T = 201 (1.8 s to build), it returns its warm start
    as it is ("timeout", backend_status "not started"); min_budget's exact MILP (after a
    descent that lowers nothing), the best baseline's schedule. With a build that took no
    time both would build their model."""
    from remat.solvers import milp, milp_model, min_budget

    built = []

    class Built(Exception):
        pass

    def model(graph, budget, formulation, min_peak=False):
        built.append(min_peak)
        raise Built

    monkeypatch.setattr(milp, "MilpModel", model)
    monkeypatch.setattr(min_budget, "MilpModel", model)
    no_lower = SimpleNamespace(sim=SimpleNamespace(peak_memory=np.inf))
    monkeypatch.setattr(min_budget, "descend", lambda *args, **kwargs: no_lower)  # the MILP's turn
    graph = remat.graphs.random_dag(100)
    budget = remat.parse_budget("50%", graph)
    quick = milp.solve(graph, budget, SolveOptions(time_limit=1.0))
    assert not built and quick.details["backend_status"] == "not started"
    assert quick.status == "timeout" and quick.details["from_warm_start"]
    check_fits(graph, quick, budget)
    least = min_budget.min_budget(graph, SolveOptions(time_limit=1.0))
    assert not built and least.status == "timeout" and least.lower_bound < least.peak_memory
    monkeypatch.setattr(milp_model, "BUILD_SECONDS", 0.0)
    for run in (lambda: milp.solve(graph, budget, SolveOptions(time_limit=1.0)),
                lambda: min_budget.min_budget(graph, SolveOptions(time_limit=1.0))):
        with pytest.raises(Built):
            run()
    assert built == [False, True]


def test_gap_option_and_no_warm_start():
    graph = remat.graphs.unet(3)
    budget = level_budget("unet3", graph, 0.3)
    exact = remat.solve(graph, budget, method="milp")
    loose = remat.solve(graph, budget, method="milp", mip_rel_gap=0.5, warm_start=False,
                        threads=1, seed=3)
    check_fits(graph, loose, budget)
    assert loose.status in ("optimal", "feasible")
    assert loose.compute_cost <= exact.compute_cost * 1.5 + 1e-9
    assert loose.lower_bound <= exact.compute_cost + 1e-9


def test_initial_is_priced_on_the_graph_solved():
    """``initial`` is simulated again on the graph ``remat.solve`` is given: a schedule of a
    chain with half the costs and a quarter of the memory passed its own cost and peak to
    milp, which returned it as proven optimal with them. Its status and bound are not kept.
    One of another size is refused, and what is not a Solution with a schedule."""
    small = remat.graphs.linear(8)
    graph = remat.RematGraph(small.names, small.cost * 2, small.mem * 4, small.deps,
                             small.is_backward, static_mem=small.static_mem)
    ours = remat.solve(small, "100%", method="checkpoint-all")
    for method in ("milp", "cp-intervals", "retention"):
        found = remat.solve(graph, "100%", method=method, time_limit=5, initial=ours)
        sim = simulate(graph, found.R, found.S)
        assert (found.compute_cost, found.peak_memory) == (sim.compute_cost, sim.peak_memory)
        check_fits(graph, found, remat.parse_budget("100%", graph))
    # nor its own bound (here its cost, above the optimum: nothing recomputed at 100%); with
    # no time to build its model, milp returned the schedule as proven optimal with it
    sqrtn = remat.solve(graph, "100%", method="chen-sqrtn")
    assert sqrtn.compute_cost > graph.total_cost
    proud = sqrtn.with_(lower_bound=sqrtn.compute_cost)
    found = remat.solve(graph, "100%", method="milp", time_limit=0.01, initial=proud)
    assert found.lower_bound == pytest.approx(graph.total_cost)
    assert found.status != "optimal" or found.compute_cost == pytest.approx(graph.total_cost)
    other = remat.solve(remat.graphs.linear(9), "100%", method="checkpoint-all")
    with pytest.raises(remat.InvalidScheduleError, match="initial is not a schedule"):
        remat.solve(graph, "100%", method="milp", initial=other)
    with pytest.raises(TypeError, match="initial must be a Solution"):
        remat.solve(graph, "100%", method="milp", initial=(ours.R, ours.S))
    none = solver("checkpoint-all")(graph, 1.0, SolveOptions())
    with pytest.raises(ValueError, match="initial has no schedule"):
        remat.solve(graph, "100%", method="milp", initial=none)


def test_ctrl_c_returns_best_schedule_as_timeout():
    """SIGINT during the HiGHS run (sent from the progress callback, so it lands while the
    solver thread runs) cancels it; milp returns its best schedule with status "timeout". Its
    warm start gets half the limit (retention took 10.0 s of 20 here) and HiGHS's first event
    came 12.3 s into the call; uninterrupted it runs to the limit (60 s gave a 60 s call)."""
    import os
    import signal

    graph = remat.graphs.linear(16, unit=True)
    sent = []

    def interrupt(event):
        if not sent:
            sent.append(event)
            os.kill(os.getpid(), signal.SIGINT)

    sol = remat.solve(graph, 6, method="milp", time_limit=20, progress=interrupt)
    assert sent
    assert sol.status == "timeout" and sol.details["backend_status"] == "interrupted"
    assert sol.solve_time < 19.5  # 12.6 s here; at least the limit, 20 s, uninterrupted
    check_fits(graph, sol, 6)


def test_auto_uses_milp_on_small_graphs_and_reports_its_bound(monkeypatch):
    """random_dag(14, seed=1, unit=True) at 60%: neither the heuristics nor retention with its
    search from one start (37) meet the bound, milp does (36, measured; since retention
    searches from its second start too it finds 36 itself, and auto chose milp's schedule on
    none of 36 random DAGs measured, 14-30 nodes at 60% and 80%; random_dag(8, seed=3) was
    such a case until retention's hold pass kept repeated rebuilds in one move). On
    linear(4, unit) at 4 units the heuristics need 15, the optimum is 12: retention finds it
    and the bound (its moment model) proves it, so milp does not run."""
    from remat.solvers import retention

    searched, cheaper = retention._searched, retention._cheaper
    monkeypatch.setattr(retention, "_searched",  # one start, as before session 28
                        lambda plan, budget, best, start, *rest:
                        searched(plan, budget, cheaper(best, start), None, *rest))
    graph = remat.graphs.random_dag(14, seed=1, unit=True)
    budget = remat.parse_budget("60%", graph)
    sol = remat.solve(graph, budget, time_limit=20, threads=1)  # no search beside either
    assert "milp" in sol.details["tried"] and sol.details["chosen"] == "milp"
    assert sol.status == "optimal" and sol.compute_cost == 36 and sol.lower_bound == 36
    check_fits(graph, sol, budget)
    chain = remat.graphs.linear(4, unit=True)
    sol = remat.solve(chain, 4, time_limit=20)
    assert sol.status == "optimal" and sol.compute_cost == 12 and sol.lower_bound == 12
    assert "milp" not in sol.details["tried"]
    check_fits(chain, sol, 4)


def test_auto_time_limit_bounds_the_whole_call(monkeypatch):
    """Each method gets what is left of auto's limit, half of it when an exact method
    follows: with the slow methods using all they are given (a fake clock), the call ends
    at the limit (it used to give each method the whole limit)."""
    from types import SimpleNamespace
    from remat.solvers import auto

    graph = remat.graphs.linear(4, unit=True)
    budget = remat.parse_budget("80%", graph)
    stand_in = solver("griewank")(graph, budget, SolveOptions())  # fits, cost 15 > bound
    clock, given = [0.0], {}

    def fake(name):
        def run(graph, budget, options):
            given[name] = options.time_limit
            if name in ("retention", "chain-dp", "milp"):
                clock[0] += options.time_limit
            return stand_in
        return run

    monkeypatch.setattr(auto, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(auto, "solver", fake)
    sol = auto.solve(graph, budget, SolveOptions(time_limit=20))
    # on a chain chain-dp comes before retention: half (at most CHAIN_DP_SECONDS), then
    # retention half of the rest, as milp follows
    assert given["chain-dp"] == pytest.approx(10) and given["retention"] == pytest.approx(5)
    assert given["milp"] == pytest.approx(5) and clock[0] == pytest.approx(20)
    assert sol.compute_cost == 15 and len(sol.details["tried"]) == len(given)


def test_milp_returns_the_vector_of_its_optimum_with_a_start():
    """HiGHS 1.16 with presolve and a start solution reported objective 12 here but returned
    the start's vector (cost 14, the retention schedule of then); the backend now runs
    integer programs without presolve, so milp returns the exhaustive optimum from a worse
    start (griewank's, 15)."""
    graph = remat.graphs.linear(4, unit=True)
    budget = remat.parse_budget("80%", graph)
    warm = solver("griewank")(graph, budget, SolveOptions())
    assert warm.compute_cost == 15
    sol = solver("milp")(graph, budget, SolveOptions(time_limit=20, initial=warm))
    assert sol.status == "optimal" and sol.compute_cost == 12
    assert exhaustive.optimal_cost(graph, budget) == 12
