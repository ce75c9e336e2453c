"""The pebbling lower bound on the peak (remat/solvers/peak_floor.py)."""
import math

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import remat
from remat.errors import InfeasibleBudgetError
from remat.solvers import SolveOptions, solver
from remat.solvers.bounds import peak_lower_bound
from remat.solvers.min_budget import min_budget
from remat.solvers.peak_floor import peak_floor

import exhaustive
from test_bounds import _random_graph as random_dag


def _random_graph(data) -> remat.RematGraph:
    """test_bounds' random DAG of up to 7 nodes, with random workspace and static memory."""
    graph = random_dag(data)
    workspace = data.draw(st.lists(st.integers(0, 4), min_size=graph.size, max_size=graph.size))
    return remat.RematGraph(graph.names, graph.cost, graph.mem, graph.deps, graph.is_backward,
                            static_mem=data.draw(st.integers(0, 5)), workspace=workspace)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_never_above_the_least_peak_of_any_schedule(data):
    graph = _random_graph(data)
    floor = peak_floor(graph, time_limit=None)
    assert floor.exact
    assert peak_lower_bound(graph) <= floor.value <= exhaustive.min_peak(graph) + 1e-9


def test_the_other_input_is_alive_while_the_last_is_built():
    """n reads a and b (1 byte each), built from sources of 10 bytes: computing a or b holds
    11 bytes (``peak_lower_bound``), but whichever of a, b comes last is built while the other
    is alive: 12 bytes, the exhaustive least peak."""
    graph = remat.RematGraph(["sa", "sb", "a", "b", "n"], [1.0] * 5, [10, 10, 1, 1, 1],
                             [(), (), (0,), (1,), (2, 3)], [False] * 4 + [True])
    assert peak_lower_bound(graph) == 11
    assert peak_floor(graph).value == 12 == exhaustive.min_peak(graph)


def _plain_floor(graph) -> float:
    """The pebbling bound without the stages (``_bottleneck`` alone, to the end)."""
    from remat.solvers.peak_floor import _bottleneck

    mem = [float(m) for m in graph.mem]
    own = [float(m) + float(w) for m, w in zip(graph.mem, graph.workspace)]
    inputs = [sum(1 << d for d in graph.deps[v]) for v in range(graph.size)]
    floor = [0.0] * graph.size
    for target in range(graph.size):
        floor[target], done = _bottleneck(target, mem, own, inputs, floor, 10**6, math.inf)
        assert done
    return graph.static_mem + max(floor)


def test_higher_than_the_operand_bound_on_a_random_dag():
    """random_dag(20), static memory included: 25 MiB by operands, 29 MiB by pebbling, 29.5 MiB
    with the stages in view (exact in well under a second); the least peak any method has
    found is 34 MiB."""
    graph = remat.graphs.random_dag(20)
    floor = peak_floor(graph, time_limit=10)
    assert floor.exact
    assert floor.value == 29.5 * 2**20 > _plain_floor(graph) == 29 * 2**20
    assert _plain_floor(graph) > peak_lower_bound(graph) == 25 * 2**20


@pytest.mark.parametrize("deps, mem, workspace, static, plain", [
    ([(), (0,), (1,), (0, 1), (0, 2), (4,)], [4, 4, 5, 1, 1, 2], [3, 0, 0, 0, 0, 0], 3, 15),
    ([(), (), (0,), (0, 1), (0, 2), (0, 2, 3)], [4, 2, 5, 1, 3, 2], [3, 3, 0, 3, 0, 0], 1, 13),
])
def test_the_stages_raise_the_floor_to_the_least_peak(deps, mem, workspace, static, plain):
    """Two random graphs of 6 nodes (found among 1500) where the order of a schedule's stages
    matters: pebbling in any order gives ``plain``; with node t computed last in stage t, after
    the stages before it, the floor is one byte higher: the exhaustive least peak."""
    graph = remat.RematGraph([f"n{v}" for v in range(6)], [1.0] * 6, mem, deps, [False] * 6,
                             static_mem=static, workspace=workspace)
    assert _plain_floor(graph) == plain
    assert peak_floor(graph, None).value == plain + 1 == exhaustive.min_peak(graph)


def test_the_stages_prove_the_least_peak_of_a_random_dag():
    """random_dag(11): pebbling alone gives 28 MiB, the stages 29 MiB, the peak the descent
    reaches: min_budget is proven (it was "feasible" over the 28 MiB floor)."""
    graph = remat.graphs.random_dag(11)
    assert _plain_floor(graph) == 28 * 2**20
    found = min_budget(graph, SolveOptions(time_limit=20), exact=False)
    assert found.status == "optimal" and found.peak_memory == found.lower_bound == 29 * 2**20


def test_the_stages_prove_gpt2_at_op_level_infeasible_at_20_percent():
    """GPT-2 at op level (bench/graphs): at 20% (2962850 B), pebbling alone gives 2844680 B
    and the least peak any search found is 3250184 B. With the stages: node 80 (the backward of
    the second block's attention scores) is computed last in its stage while what the later
    stages need is alive; its floor is 2971656 B, above the budget: proven infeasible (auto
    asks ``below_floor`` first, with 5% of its limit for the search)."""
    from pathlib import Path

    path = Path(__file__).parent.parent / "bench" / "graphs" / "gpt2-op.json"
    graph = remat.RematGraph.from_json(path)
    from remat.solvers.peak_floor import below_floor

    budget = remat.parse_budget("20%", graph)
    assert budget < 2971656 <= below_floor(graph, budget, 120.0)  # 6 s; there in 0.7-1.0 s


def test_auto_and_milp_stop_at_once_below_the_pebbling_floor():
    """random_dag(20) at 42% (26.9 MiB): above the operand bound (25 MiB), below the pebbling
    one (29.5 MiB). auto and milp say so (before, auto ran its methods for the whole limit and
    proved nothing), and the error says it is proven. (milp spends its limit on the least
    budget it can meet: 5 s, where 20 s made this test 23 s long; auto takes about 2 s.)"""
    graph = remat.graphs.random_dag(20)
    peak_floor(graph, None)  # searched to the end first (0.15-0.3 s): the floor's time is not
    # what this checks, and a cut search would read 29 MiB
    for method in ("auto", "milp"):
        with pytest.raises(InfeasibleBudgetError, match=r"peaks below 29\.50 MiB \(proven\)"):
            remat.solve(graph, "42%", method=method, time_limit=5)
    sol = solver("auto")(graph, remat.parse_budget("42%", graph), SolveOptions(time_limit=20))
    assert sol.details["tried"] == ["min_budget", "retention"]
    assert sol.details["floor"] == 29.5 * 2**20
    assert sol.min_budget >= 29.5 * 2**20


def test_min_budget_is_proven_where_the_pebbling_floor_meets_it(monkeypatch):
    """Where the descent's least peak equals the pebbling floor (the two-input graph above),
    min_budget is optimal without its min-peak MILP."""
    from remat.solvers import min_budget as module

    def no_milp(*args, **kwargs):
        raise AssertionError("the min-peak MILP ran")

    monkeypatch.setattr(module, "MilpModel", no_milp)
    graph = remat.RematGraph(["sa", "sb", "a", "b", "n"], [1.0] * 5, [10, 10, 1, 1, 1],
                             [(), (), (0,), (1,), (2, 3)], [False] * 4 + [True])
    found = min_budget(graph, SolveOptions(time_limit=5))
    assert found.status == "optimal" and found.peak_memory == found.lower_bound == 12


def test_auto_below_the_floor_reports_the_lower_of_descent_and_retention(monkeypatch):
    """The least budget auto reports below the floor is the lower of the two it tries (fcn_resnet50
    at op level, 25%: 22.0 MB by the descent, 19.3 MB by retention): with the descent finding
    nothing, retention's, a budget retention then meets."""
    from types import SimpleNamespace

    from remat.solvers import auto

    graph = remat.graphs.random_dag(20)
    budget = remat.parse_budget("42%", graph)
    monkeypatch.setattr(auto, "min_budget",
                        lambda *args, **kwargs: SimpleNamespace(peak_memory=math.inf,
                                                                status="feasible"))
    sol = auto.solve(graph, budget, SolveOptions(time_limit=10))
    assert sol.details["tried"] == ["min_budget", "retention"] and math.isfinite(sol.min_budget)
    met = solver("retention")(graph, sol.min_budget, SolveOptions(time_limit=10))
    assert met.feasible and met.peak_memory <= sol.min_budget


def test_auto_below_the_floor_stops_where_the_descent_meets_it():
    """VGG-16 at module level, 10%: the descent reaches the operand bound, so that least
    budget is proven and retention's least-peak scan does not run."""
    from test_bounds import _graph_file

    graph = _graph_file("vgg16-module")
    sol = solver("auto")(graph, remat.parse_budget("10%", graph), SolveOptions(time_limit=10))
    assert sol.details["tried"] == ["min_budget"] and sol.min_budget == peak_lower_bound(graph)


def test_retention_below_a_known_floor_scans_from_it(monkeypatch):
    """Once the pebbling floor of random_dag(20) is known (29.5 MiB), retention at 42% (26.9
    MiB, above the operand bound) knows no schedule fits: it runs no peak descent toward the
    budget and scans for its least peak from the floor up (6.6 s -> 1.5 s for auto there)."""
    from remat.solvers import retention

    def no_descent(*args, **kwargs):
        raise AssertionError("retention descended toward a budget below the floor")

    graph = remat.graphs.random_dag(20)
    assert peak_floor(graph, time_limit=10).value == 29.5 * 2**20
    monkeypatch.setattr(retention, "_descended", no_descent)
    sol = solver("retention")(graph, remat.parse_budget("42%", graph), SolveOptions(time_limit=10))
    assert not sol.feasible and sol.min_budget >= 29.5 * 2**20


def test_sets_with_a_smaller_set_at_no_larger_key_are_skipped():
    """random_dag(22, seed 2) has plateaus: many sets at the same key. Skipping a set whose
    one-value-smaller subset was reached at no larger key, each value's search ends within
    20000 sets (four did not end within 200000 before; 50 s -> 0.7 s for the exact floor),
    with the exact value unchanged (25690112 B, static included)."""
    from remat.solvers.peak_floor import _bottleneck

    graph = remat.graphs.random_dag(22, seed=2)
    mem = [float(m) for m in graph.mem]
    own = [float(m) + float(w) for m, w in zip(graph.mem, graph.workspace)]
    inputs = [sum(1 << d for d in graph.deps[v]) for v in range(graph.size)]
    floor = [0.0] * graph.size
    for target in range(graph.size):
        floor[target], done = _bottleneck(target, mem, own, inputs, floor, 20000, math.inf)
        assert done
    assert graph.static_mem + max(floor) == 25690112 == peak_floor(graph, None).value


@pytest.mark.parametrize("unit", [True, False])
def test_a_chain_schedule_at_the_operand_bound_settles_the_floor_without_a_search(unit):
    """On linear(n) the least-peak persistent schedule peaks at one node's operands, which
    is then the least peak, exact: ``below_floor`` answers without searching (the search
    itself does not finish on linear(128) in 1.5 s)."""
    import time

    from remat.solvers.chain_dp import least_peak
    from remat.solvers.peak_floor import below_floor, reached

    graph = remat.graphs.linear(128, unit=unit)
    operands = peak_lower_bound(graph)
    assert least_peak(graph) == operands
    reached(graph, least_peak(graph))
    began = time.perf_counter()
    assert below_floor(graph, operands, time_limit=30) is None
    assert below_floor(graph, operands - 1, time_limit=30) == operands
    assert peak_floor(graph, 30.0) == peak_floor(graph, None)  # cached, exact
    assert peak_floor(graph).exact and peak_floor(graph).value == operands
    assert time.perf_counter() - began < 0.5


def test_auto_searches_no_floor_on_a_chain():
    """At a chain's least peak auto needs no floor: a persistent schedule fits (chain-dp's
    recursion, in C) or its least-peak schedule is recorded (``reached``). One byte below,
    the recorded least peak is the exact floor, proven without a search."""
    from remat.solvers.peak_floor import _CACHE

    graph = remat.graphs.linear(16)
    least = peak_lower_bound(graph)
    sol = solver("auto")(graph, least, SolveOptions(time_limit=10))
    assert sol.feasible and (graph not in _CACHE or _CACHE[graph].seconds == 0.0)
    below = solver("auto")(graph, least - 1, SolveOptions(time_limit=10))
    assert below.proven_infeasible and below.min_budget == least
    assert _CACHE[graph].exact and _CACHE[graph].seconds == 0.0


def test_min_budget_stops_the_descent_at_a_peak_low_enough():
    """``enough`` (auto's last resort, which wants a schedule within its budget): the descent
    stops once the peak is at most that, where each step below it only recomputes more. gpt2
    at op level, 30%, 5 s (measured: the least peak 3254280 B at 2.63 of the total cost;
    with ``enough`` 3873800 B at 1.27); ``enough`` below every schedule changes nothing."""
    from test_bounds import _graph_file

    graph = _graph_file("gpt2-op")
    budget = remat.parse_budget("30%", graph)
    options = SolveOptions(time_limit=5)
    lowest = min_budget(graph, options, exact=False)
    low = min_budget(graph, options, exact=False, enough=budget)
    assert lowest.peak_memory < low.peak_memory <= budget and low.status == "feasible"
    costs = [remat.simulate(graph, m.R, m.S) for m in (lowest, low)]
    assert [c.peak_memory for c in costs] == [lowest.peak_memory, low.peak_memory]
    assert costs[1].compute_cost < 0.6 * costs[0].compute_cost
    assert low.lower_bound <= low.peak_memory  # a bound on the least peak, still
    small = remat.graphs.unet(3)
    plain, below = (min_budget(small, SolveOptions(time_limit=5), exact=False, enough=e)
                    for e in (None, 1.0))
    assert (below.peak_memory, below.status) == (plain.peak_memory, plain.status)


def test_a_floor_just_above_the_budget_is_said_in_bytes():
    """gpt2 at op level, 20%: the budget (2962849.6 B) and the floor (2971656 B) both read 2.83
    MiB; the message says the bytes (rounded down: never more than proven, and a budget below
    a floor of whole bytes reads below it), so it does not read "peaks below" the budget."""
    from remat.solvers.api import _infeasible_message

    graph = remat.graphs.linear(4)
    sol = remat.Solution.infeasible(graph, "auto", 2962849.6, 3229614.0, proven=True,
                                    floor=2971656.0)
    message = _infeasible_message("auto", "20%", 2962849.6, sol)
    assert "budget '20%' (2962849 B)" in message  # 2962849.6: whole bytes, rounded down
    assert "peaks below 2971656 B (proven)" in message
    assert "smallest budget it can meet is 3.08 MiB" in message
    apart = remat.Solution.infeasible(graph, "auto", 2 * 2**20, None, proven=True,
                                      floor=3 * 2**20)
    assert "(2.00 MiB). No schedule of this graph peaks below 3.00 MiB (proven)" in \
        _infeasible_message("auto", "2MiB", 2 * 2**20, apart)
