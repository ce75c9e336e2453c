"""Peak descent (remat/solvers/descent.py) and retention where no choice of gaps fits."""
from __future__ import annotations

import sys
import time

import remat
from remat.schedule import simulate
from remat.schedule.rs import checkpoint_all
from remat.solvers.base import SolveOptions, solver
from remat.solvers.bounds import peak_lower_bound
from remat.solvers.descent import descend
from remat.solvers.peak_floor import peak_floor
from remat.solvers.retention import Plan, _fit


def bilinear_head():
    """fcn_resnet50's bilinear upsampling head in miniature: four gathers g0..g3 of the small
    input x (10 B each) all run before s3 reads g0 and g1, so a stage that rebuilds the head
    holds five 10 B values; the backward chain v..n2 holds five 10 B values at n2 unless m6
    (read again by z) is rebuilt later, which rebuilds the head."""
    spec = [  # name, cost, bytes, inputs, backward
        ("x", 5, 1, [], False),
        ("g0", 1, 10, ["x"], False), ("g1", 1, 10, ["x"], False),
        ("g2", 1, 10, ["x"], False), ("g3", 1, 10, ["x"], False),
        ("s3", 2, 10, ["g0", "g1"], False), ("s4", 4, 10, ["g2", "g3", "s3"], False),
        ("loss", 1, 0, ["s4"], False),
        ("v", 2, 10, ["s4", "loss"], True), ("m5", 1, 10, ["v"], True),
        ("n", 2, 10, ["v", "m5"], True), ("m6", 1, 10, ["m5"], True),
        ("n1", 2, 10, ["m5", "m6"], True), ("m7", 1, 10, ["n"], True),
        ("n2", 2, 10, ["n", "m7"], True), ("z1", 1, 1, ["n1"], True),
        ("z2", 1, 1, ["m7"], True), ("z3", 1, 1, ["n2"], True),
        ("z", 2, 1, ["m6", "z1", "z2", "z3"], True), ("bx", 5, 1, ["z", "x"], True),
    ]
    names = [s[0] for s in spec]
    return remat.RematGraph(names, [s[1] for s in spec], [s[2] for s in spec],
                            [[names.index(d) for d in s[3]] for s in spec],
                            [s[4] for s in spec])


def test_descent_fits_where_no_choice_of_gaps_does():
    """At 42 B (milp's optimum there: 44) retention's knapsack finds no schedule that fits
    (the lowest it tries peaks at 53 B); the descent from that one fits, and its schedule is
    valid by the simulator."""
    graph, budget = bilinear_head(), 42.0
    plan = Plan(graph)
    found, _, _ = _fit(plan, budget, plan.own_costs(), None, None)
    assert found is None and plan.lowest[0] > budget
    point = descend(graph, plan.lowest[1], budget, time.perf_counter() + 30)
    assert point.fits(budget)
    sim = simulate(graph, point.R, point.S)
    assert sim.peak_memory == point.sim.peak_memory <= budget
    assert sim.compute_cost >= 44  # milp's proven optimum at 42 B
    cheap = descend(graph, plan.lowest[1], budget, time.perf_counter() + 30, cheap=True)
    assert cheap.fits(budget) and cheap.sim.compute_cost >= 44


def test_descent_stops_where_it_cannot_fit():
    """Below the least possible peak (``peak_lower_bound``: s4 with its three operands, 40 B)
    no schedule fits; the descent stops with its last schedule, over the budget."""
    graph = bilinear_head()
    plan = Plan(graph)
    _fit(plan, 45.0, plan.own_costs(), None, None)
    point = descend(graph, plan.lowest[1], 30.0, time.perf_counter() + 30)
    assert not point.fits(30.0) and point.sim.peak_memory >= peak_lower_bound(graph) == 40


def test_descent_trades_a_value_for_its_inputs_down_to_the_least_peak():
    """random_dag(6, seed=11): from checkpoint-all's schedule the descent reaches the pebbling
    floor (exact there, so the least peak of every schedule); without the trade move (free a
    value, keep its inputs to its reader instead) it stops at 25690112 B (checked by removing
    the move)."""
    _reaches_the_floor(remat.graphs.random_dag(6, seed=11))


def test_descent_releases_a_value_its_stage_computes_down_to_the_least_peak():
    """random_dag(6, seed=4): as above; without the release move (no longer keep a value the
    stage computes, up to its next reader) the descent stops at 25690112 B against the floor's
    22020096 (checked by removing the move)."""
    _reaches_the_floor(remat.graphs.random_dag(6, seed=4))


def test_descent_scored_toward_the_floor_stops_at_enough():
    """fcn_resnet50 at op level (autograd's order), 30% of its range, from the lowest classic
    baseline (22.5 MB): scored against the pebbling floor and stopped once the peak meets the
    budget (``enough``, as ``min_budget`` does for auto), the descent fits (2.3 s); scored
    against that budget it stopped 8.6% above it (19247568 B, 1.4 s; measured, session 40)."""
    from test_bounds import _graph_file

    from remat.solvers.base import CLASSIC
    from remat.solvers.min_budget import smallest_baseline

    graph = _graph_file("fcn_resnet50-op")
    budget = remat.parse_budget("30%", graph)
    floor = peak_floor(graph, 2.0).value
    _, _, S = smallest_baseline(graph, 1.0, CLASSIC)
    point = descend(graph, S, floor, time.perf_counter() + 120, enough=budget)
    assert point.fits(budget) and floor < simulate(graph, point.R, point.S).peak_memory


def _reaches_the_floor(graph):
    floor = peak_floor(graph, None)
    R, S = checkpoint_all(graph)
    assert floor.exact and simulate(graph, R, S).peak_memory > floor.value
    point = descend(graph, S, floor.value, time.perf_counter() + 30)
    assert simulate(graph, point.R, point.S).peak_memory == floor.value


def test_retention_schedules_the_head_through_the_descent():
    """retention at 42 B: a schedule (was "infeasible"), within the budget, no cheaper than
    milp's optimum, with a bound no higher than it."""
    graph = bilinear_head()
    sol = solver("retention")(graph, 42.0, SolveOptions(time_limit=5))
    assert sol.feasible and sol.peak_memory <= 42.0
    assert sol.lower_bound <= 44 <= sol.compute_cost


def test_auto_min_budget_is_never_above_its_schedule():
    """auto reports the least budget a method met or says it can meet: never above the peak
    of the schedule it returns (it said 50 B, the least the baselines reach, for a 42 B one)."""
    graph = bilinear_head()
    sol = solver("auto")(graph, 42.0, SolveOptions(time_limit=10))
    assert sol.feasible and sol.min_budget is not None
    assert sol.min_budget <= sol.peak_memory <= 42.0


def test_min_budget_reaches_the_floor_through_the_descent():
    """U-Net at op level: the best baseline peaks at 5.334 MiB; the descent takes it to
    ``peak_lower_bound`` (5.128 MiB), so min_budget is proven at once, without the MILP."""
    from test_bounds import _graph_file

    from remat.solvers.min_budget import min_budget, smallest_baseline

    graph = _graph_file("unet-op")
    floor = peak_lower_bound(graph)
    assert smallest_baseline(graph)[0] > floor
    found = min_budget(graph, SolveOptions(time_limit=20))
    assert found.status == "optimal" and found.peak_memory == found.lower_bound == floor
    assert simulate(graph, found.R, found.S).peak_memory == floor


def test_min_budget_gives_its_baselines_a_share_of_its_limit(monkeypatch):
    """``smallest_baseline`` calls retention twice (its least-peak scan, then a schedule at
    it): under a limit each call gets at most ``BASELINE_SHARE`` of it (with 2 s each
    whatever the limit, auto with 2 s took 4.1 s below MobileNetV2's floor), without one
    ``BASELINE_SECONDS``."""
    from remat.solvers import min_budget as module

    limits = []

    def recording(name):
        def run(graph, budget, options):
            limits.append(options.time_limit)
            return solver(name)(graph, budget, options)
        return run

    monkeypatch.setattr(module, "solver", recording)
    graph = remat.graphs.random_dag(20, seed=0)
    module.min_budget(graph, SolveOptions(time_limit=1.0), exact=False)
    assert limits and max(limits) == module.BASELINE_SHARE * 1.0
    limits.clear()
    module.min_budget(graph, SolveOptions(time_limit=None), exact=False)
    assert limits and set(limits) == {module.BASELINE_SECONDS}


def test_retention_descends_from_a_looser_budget_where_no_choice_of_gaps_fits():
    """GPT-2 at module level, 30% (3.75 MB): no choice of gaps fits; the descent from the
    lowest-peak schedule tried stops at 3.83 MB (retention said "infeasible"), from
    checkpoint-all's it fits at 1.81 of the total cost; from the cheapest schedule at a
    looser budget (``retention.LOOSER``) at 1.34 (bound 1.32). Any valid schedule passes the
    first asserts; the cost assert fails on the checkpoint-all start."""
    from test_bounds import _graph_file

    graph = _graph_file("gpt2-module")
    budget = remat.parse_budget("30%", graph)
    sol = solver("retention")(graph, budget, SolveOptions(time_limit=8))
    assert sol.feasible and sol.peak_memory <= budget
    assert simulate(graph, sol.R, sol.S).peak_memory == sol.peak_memory
    assert sol.lower_bound <= sol.compute_cost < 1.5 * graph.total_cost


def test_auto_below_the_floor_reports_a_budget_it_can_meet_without_milp():
    """Below ``peak_lower_bound`` no schedule fits (proven at once): auto does not run milp
    (whose exact min-peak MILP took the whole limit of each such budget of a sweep), and the
    least budget it reports is one that retention (auto's method at this size) then meets
    (through its descents: no choice of gaps fits there). It is proven least: the descent
    stops at the pebbling floor (3676168 B), so retention's least-peak scan does not run."""
    from test_bounds import _graph_file

    graph = _graph_file("gpt2-module")
    budget = remat.parse_budget("20%", graph)
    assert budget < peak_lower_bound(graph)
    sol = solver("auto")(graph, budget, SolveOptions(time_limit=20))
    assert not sol.feasible and sol.details["tried"] == ["min_budget"]
    assert sol.proven_infeasible
    assert sol.min_budget == peak_floor(graph).value == sol.details["floor"] == 3676168
    met = solver("retention")(graph, sol.min_budget, SolveOptions(time_limit=10))
    assert met.feasible and met.peak_memory <= sol.min_budget


def test_auto_says_when_finding_no_schedule_proves_nothing():
    """random_dag(20, seed=1), 3% of the way from its pebbling floor to checkpoint-all's peak:
    above the floor, yet auto finds no schedule in 4 s (at 15% it does since the floor sees
    the stages: 31 MiB -> 35.5 MiB) and nothing proves that none exists. auto says so: not
    proven infeasible, a reason, and the error message says so too."""
    import pytest

    from remat.schedule.budget import checkpoint_all_peak
    from remat.solvers.api import _infeasible_message

    graph = remat.graphs.random_dag(20, seed=1)
    floor = peak_floor(graph, None)
    assert floor.exact
    budget = floor.value + 0.03 * (checkpoint_all_peak(graph) - floor.value)
    sol = solver("auto")(graph, budget, SolveOptions(time_limit=4))
    assert not sol.feasible and not sol.proven_infeasible
    assert sol.details["reason"] and "milp" in sol.details["tried"]
    assert "not proven" in _infeasible_message("auto", budget, budget, sol)
    with pytest.raises(remat.InfeasibleBudgetError, match="not proven"):
        remat.solve(graph, budget, time_limit=4)
    found = solver("retention")(graph, budget, SolveOptions(time_limit=3))
    assert not found.feasible and not found.proven_infeasible
    below = solver("retention")(graph, floor.value - 1, SolveOptions(time_limit=3))
    assert below.proven_infeasible


def test_auto_gives_the_time_left_to_the_least_peak_when_nothing_fits():
    """Where no method found a schedule and nothing proved that none fits, what is left of
    auto's time goes to ``min_budget`` without its MILP: its schedule where it fits, else its
    peak as the least budget (gpt2 at op level, 20%: 3628040 -> 3254280 B, measured), from
    ``LOWEST_LEFT_SECONDS`` left on (gpt2 at op level, 30%, with 1 s: its schedule comes
    from the 0.21 s left)."""
    import time as clock

    from remat.schedule.budget import checkpoint_all_peak
    from remat.solvers import auto

    graph = remat.graphs.random_dag(20, seed=1)
    floor = peak_floor(graph, None).value
    options = SolveOptions(time_limit=30)
    short = auto.LOWEST_LEFT_SECONDS / 2
    assert auto._lowest_left(graph, floor, options, clock.perf_counter() + short) == []
    assert len(auto._lowest_left(graph, floor, options, clock.perf_counter() + 0.5)) == 1
    [low] = auto._lowest_left(graph, floor, options, clock.perf_counter() + 3)
    assert not low.feasible and not low.proven_infeasible
    assert floor <= low.min_budget <= checkpoint_all_peak(graph)
    [fits] = auto._lowest_left(graph, low.min_budget, options, clock.perf_counter() + 3)
    assert fits.feasible and fits.peak_memory <= low.min_budget
    assert simulate(graph, fits.R, fits.S).peak_memory == fits.peak_memory


def test_descent_priced_by_changed_stages_is_the_descent_priced_whole(monkeypatch):
    """A move's point replays only the stages that differ from the point it moves from
    (``simulate.restaged_all``, moves in batches); with every stage of each move replayed
    alone instead, the descent takes the same steps to the same schedule, cost-aware or
    not."""
    from remat.solvers import descent

    graph = remat.graphs.random_dag(30, seed=1)
    plan = Plan(graph)
    S = plan.schedule(set())[1]  # every gap dropped: rebuilds peak over the budget below
    budget = 0.9 * simulate(graph, *plan.schedule(set())).peak_memory
    ends = []
    for whole in (False, True):
        if whole:
            whole_peaks = sys.modules["remat.schedule.simulate"].stage_peaks
            monkeypatch.setattr(descent, "restaged_all", lambda graph, schedules, was:
                                [whole_peaks(graph, R, S) for R, S in schedules])
        for cheap in (False, True):
            point = descend(graph, S, budget, time.perf_counter() + 30, cheap=cheap)
            ends.append((cheap, point.fits(budget), point.S.tobytes(), point.cost))
    assert ends[:2] == ends[2:] and ends[0][1]


def test_a_drop_frees_a_value_up_to_the_next_stage_that_reads_it():
    """``_dropped`` (the drop, trade and release moves' first half) on every resident cell
    of random schedules, against its definition stage by stage: v is freed from stage t on
    while it is resident, up to and including the first stage whose computations read it;
    the stage returned is the last one freed (t where v is not resident at t)."""
    import numpy as np

    from remat.schedule.rs import tighten
    from remat.solvers.descent import _dropped

    rng = np.random.default_rng(0)
    for seed in range(4):
        graph = remat.graphs.random_dag(14, seed=seed)
        size = graph.size
        R, S = tighten(graph, np.tril(rng.random((size, size)) < 0.3, -1))
        for t in range(size):
            for v in range(size):
                expected, reader = S.copy(), t
                for u in range(t, size):
                    if not S[u, v]:
                        break
                    expected[u, v], reader = False, u
                    if any(R[u, k] for k in graph.users[v]):
                        break
                found, found_reader = _dropped(graph, R, S, t, v)
                assert np.array_equal(found, expected) and found_reader == reader, (t, v)
