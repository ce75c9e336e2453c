"""The fast exact and near-exact methods: chain-dp (exact on chains)."""
import numpy as np
import pytest

import remat
from remat.errors import InvalidScheduleError
from remat.schedule import parse_budget, simulate
from remat.schedule.rs import cheapest_r
from remat.solvers import SolveOptions, solver
from remat.solvers.chain_dp import chain_of, optimal_cost
from remat.solvers.griewank import UnsupportedGraphError

import cases

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
def test_chain_dp_equals_exhaustive_search(graph):
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
    assert sol.status == "optimal" and sol.lower_bound == pytest.approx(sol.compute_cost)


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
    """milp's proven bound <= the DP optimum <= milp's schedule (equal when milp proves it)."""
    graph = cases.graph(name)
    budget_bytes = parse_budget(budget, graph)
    sol = solver("chain-dp")(graph, budget_bytes, SolveOptions())
    ref = solver("milp")(graph, budget_bytes, SolveOptions(time_limit=5.0))
    assert sol.feasible == ref.feasible
    if ref.feasible:
        assert ref.lower_bound - 1e-6 <= sol.compute_cost <= ref.compute_cost + 1e-6
        if ref.status == "optimal":
            assert sol.compute_cost == pytest.approx(ref.compute_cost)


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


def test_chain_dp_applies_only_to_chains():
    from remat.solvers.chain_dp import applies

    assert applies(remat.graphs.linear(5)) and applies(remat.graphs.linear(1, unit=True))
    assert not applies(remat.graphs.unet(2)) and not applies(remat.graphs.random_dag(6, seed=1))
