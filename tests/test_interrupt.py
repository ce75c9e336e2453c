"""Ctrl-C during a solve (remat/solvers/interrupt.py): the solve stops early with the best
schedule found, and loops over solves stop there, keeping what they have."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest

import remat
from remat.bench import sweep
from remat.runtime import cache
from remat.schedule import parse_budget, simulate
from remat.schedule.solution import Solution
from remat.solvers import SolveOptions, interrupt, solver
from remat.solvers.base import NO_SCHEDULE_YET


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _sigint_later(seconds: float, run):
    """``run()`` with a SIGINT sent from another process after ``seconds`` (a thread of this
    one would wait for the GIL, which chain-dp's C code holds); the SIGINT is ignored if it
    comes after ``run()`` ended. [run()'s result, its seconds]."""
    killer = subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -INT {os.getpid()}"])
    began = time.perf_counter()
    try:
        return run(), time.perf_counter() - began
    except KeyboardInterrupt:
        pytest.fail("the SIGINT raised KeyboardInterrupt instead of stopping the solve")
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        killer.wait()
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_auto_with_the_cheapest_schedule_so_far():
    """SIGINT once auto has proved its bound (sent from its progress, so it lands in the main
    thread): retention returns its first schedule, cp-intervals does not run, and auto
    returns the cheapest schedule so far, "timeout", marked interrupted, at once, not after
    its 60 s; the SIGINT handler is restored, and the next call runs as usual."""
    graph = remat.graphs.random_dag(100)
    budget = parse_budget("50%", graph)
    sent = []

    def progress(event):
        if event["method"] == "bound" and not sent:
            sent.append(event["time"])
            _sigint()

    handler = signal.getsignal(signal.SIGINT)
    sol = solver("auto")(graph, budget, SolveOptions(time_limit=60, progress=progress))
    assert sent and sol.feasible and sol.peak_memory <= budget
    assert sol.status == "timeout" and sol.details["interrupted"]
    assert "cp-intervals" not in sol.details["tried"]
    assert sol.solve_time - sent[0] < 5  # (0.0 s measured: retention stops at its first)
    assert simulate(graph, sol.R, sol.S).compute_cost == pytest.approx(sol.compute_cost)
    assert signal.getsignal(signal.SIGINT) is handler and not interrupt.requested()
    small = remat.graphs.linear(8)
    again = solver("auto")(small, parse_budget("80%", small), SolveOptions(time_limit=10))
    assert again.status == "optimal" and "interrupted" not in again.details


def test_ctrl_c_stops_a_cp_sat_search_with_its_best_schedule():
    """SIGINT at CP-SAT's first schedule in a 60 s cp-intervals search (sent from its
    progress, in CP-SAT's thread; the main thread polls the search): the search stops and
    returns its best schedule, "timeout", marked interrupted."""
    pytest.importorskip("ortools")
    graph = remat.graphs.random_dag(100)
    budget = parse_budget("20%", graph)
    start = solver("retention")(graph, budget, SolveOptions(time_limit=5))
    assert start.feasible
    sent = []

    def progress(event):
        if not sent:
            sent.append(event["time"])
            _sigint()

    sol = solver("cp-intervals")(graph, budget, SolveOptions(time_limit=60, initial=start,
                                                             progress=progress))
    assert sent and sol.feasible and sol.status == "timeout" and sol.details["interrupted"]
    assert sol.solve_time - sent[0] < 10
    assert sol.compute_cost <= start.compute_cost * (1 + 1e-12)


def _cut_short(monkeypatch, module, calls):
    """``module.solver`` as if Ctrl-C cut each solve short (``calls`` counts them)."""
    def fake(name):
        def run(graph, budget, options):
            calls.append(name)
            result = solver(name)(graph, budget, options)
            interrupt._request()  # what a Ctrl-C in the sweep's scope records
            return result
        return run
    monkeypatch.setattr(module, "solver", fake)


def test_a_sweep_stops_at_a_solve_ctrl_c_cut_short(monkeypatch):
    """run_sweep keeps the row of the solve cut short and runs no other."""
    calls = []
    _cut_short(monkeypatch, sweep, calls)
    graph = remat.graphs.linear(8)
    rows = sweep.run_sweep(graph, ["checkpoint-all", "chen-greedy"], [0.5, 0.8, 1.0],
                           log=None)
    assert len(calls) == len(rows) == 1 and rows[0].method == "checkpoint-all"


def test_a_plan_cut_short_is_not_cached(monkeypatch, tmp_path):
    """The plan cache stores no solution a Ctrl-C cut short (it would stand for every later
    run); one that ran to its end is stored."""
    graph = remat.graphs.linear(8)

    def cut(graph, budget, method, **options):
        result = remat.solve(graph, budget, method, **options)
        return result.with_(details={**result.details, "interrupted": True})

    monkeypatch.setattr(cache, "solve", cut)
    first = cache.cached_solve(graph, "100%", "checkpoint-all", cache=tmp_path)
    assert first.details["plan_cache"] == "miss" and not list(tmp_path.iterdir())
    monkeypatch.setattr(cache, "solve", remat.solve)
    second = cache.cached_solve(graph, "100%", "checkpoint-all", cache=tmp_path)
    assert second.details["plan_cache"] == "miss" and len(list(tmp_path.iterdir())) == 1
    assert np.array_equal(first.R, second.R)


def test_a_solve_stopped_before_any_schedule_says_so(monkeypatch):
    """A method stopped by Ctrl-C before it found a schedule: its "infeasible" says it
    proves nothing (``NO_SCHEDULE_YET``), and ``remat.solve`` raises KeyboardInterrupt, not
    InfeasibleBudgetError; a proof stays a proof."""
    from remat.solvers import api, base

    graph = remat.graphs.linear(8)
    nothing = Solution.infeasible(graph, "retention", 1.0, None)
    proof = Solution.infeasible(graph, "milp", 1.0, None, proven=True)
    with interrupt.catching():
        interrupt._request()
        stopped, proven = base._stopped(nothing), base._stopped(proof)
    assert stopped.details["interrupted"] and stopped.details["reason"] == NO_SCHEDULE_YET
    assert proven.proven_infeasible and "reason" not in proven.details
    assert not interrupt.requested()  # the scope's end clears it
    monkeypatch.setattr(api, "solver", lambda name: lambda graph, budget, options: stopped)
    with pytest.raises(KeyboardInterrupt):
        remat.solve(graph, 1.0, method="retention")


def test_ctrl_c_before_autos_first_method(monkeypatch):
    """Ctrl-C while auto looks for the floor, before any method ran (on linear(1024) the
    first 3.4 s): auto says it stopped before any schedule (it raised ValueError), and the
    next call runs as usual."""
    from remat.solvers import auto

    graph = remat.graphs.random_dag(10, seed=1)
    floor = auto._floor

    def stopped_there(*args):
        _sigint()
        return floor(*args)

    monkeypatch.setattr(auto, "_floor", stopped_there)
    sol = solver("auto")(graph, parse_budget("90%", graph), SolveOptions(time_limit=30))
    assert not sol.feasible and sol.details["tried"] == []
    assert sol.details["interrupted"] and sol.details["reason"] == NO_SCHEDULE_YET
    monkeypatch.setattr(auto, "_floor", floor)
    assert solver("auto")(graph, parse_budget("90%", graph), SolveOptions(time_limit=30)).feasible


def test_ctrl_c_stops_the_floor_search_and_retentions_first_fit():
    """After Ctrl-C, the pebbling floor's search (without a time limit) ends at once with the
    bound it has, not exact (it ran on for 5.7 s of auto's time below MobileNetV2's least
    peak at module level), and retention solves no knapsack for its first fit (linear(1024)
    at 10%: 4.3 s of knapsacks after the Ctrl-C, to find no schedule)."""
    from remat.solvers import peak_floor, retention

    graph = remat.graphs.random_dag(30, seed=2)
    with interrupt.catching():
        interrupt._request()
        floor = peak_floor._search(graph, None)
        plan = retention.Plan(graph)
        found = retention._fit(plan, parse_budget("30%", graph), plan.own_costs(), None, None)
    assert not floor.exact and floor.value <= peak_floor._search(graph, None).value
    assert found[0] is None and plan.work == 0


def test_ctrl_c_stops_chain_dp_in_its_c_code():
    """SIGINT 1 s into chain-dp's C recursion on linear(384) at 10% (60 s; the persistent
    recursion alone takes 3-18 s there): chain-dp returns at once, marked interrupted, with
    no schedule (it raised KeyboardInterrupt); and 0.5 s into the C least-peak tables of
    linear(1100) (3.2 s, with other tests running), they stop, and ``least_peak`` says so
    with None (they ran to their end: the handler raised only then)."""
    from remat.solvers import chain_dp

    if not chain_dp.COMPILED:
        pytest.skip("chain-dp's C extension is not built")
    graph = remat.graphs.linear(384)
    chain_dp.forget_states()  # and nothing kept from other tests: the tables, the strides
    for kept in (chain_dp._LEAST_TABLES, chain_dp._LEAST_PEAK, chain_dp._STRIDED):
        kept.clear()
    sol, seconds = _sigint_later(1.0, lambda: solver("chain-dp")(
        graph, parse_budget("10%", graph), SolveOptions(time_limit=60)))
    assert not sol.feasible and sol.details["interrupted"]
    assert sol.details["reason"] == NO_SCHEDULE_YET and seconds < 5
    longer = remat.graphs.linear(1100)
    with interrupt.catching():
        least, seconds = _sigint_later(0.5, lambda: chain_dp.least_peak(longer))
    assert least is None and seconds < 1.7


def test_stopping_turns_a_ctrl_c_into_its_error_within_a_scope():
    """``interrupt.stopping``: in a ``catching()`` scope a SIGINT raises its error (and is
    remembered), as does one requested before it starts; the scope's handler is back after
    it; outside any scope it changes nothing."""
    with interrupt.catching():
        handler = signal.getsignal(signal.SIGINT)
        with pytest.raises(TimeoutError):
            with interrupt.stopping(TimeoutError):
                _sigint()
                time.sleep(0.5)  # the handler runs at the next bytecode
        assert interrupt.requested() and signal.getsignal(signal.SIGINT) is handler
        with pytest.raises(TimeoutError):
            with interrupt.stopping(TimeoutError):
                pass
    outside = signal.getsignal(signal.SIGINT)
    with interrupt.stopping(TimeoutError):
        assert signal.getsignal(signal.SIGINT) is outside


def test_no_exact_model_is_built_after_ctrl_c():
    """After Ctrl-C neither Checkmate's model (milp, cpsat, min_budget, lp-rounding's LP) nor
    cp-intervals' is built (``build_fits``), even without a time limit: the build alone can
    take seconds (45 s at 1001 nodes) for a solve cancelled at once."""
    from remat.solvers import lp_rounding, milp_model

    graph = remat.graphs.random_dag(20, seed=1)
    assert milp_model.build_fits(graph, None)
    with interrupt.catching():
        interrupt._request()
        assert not milp_model.build_fits(graph, None)
        relaxed = lp_rounding.relaxation(graph, parse_budget("50%", graph), SolveOptions())
    assert relaxed == (None, "timeout")
    cp_intervals = pytest.importorskip("remat.solvers.cp_intervals")
    copies = [2] * graph.size
    assert cp_intervals.build_fits(graph, copies, None)
    with interrupt.catching():
        interrupt._request()
        assert not cp_intervals.build_fits(graph, copies, None)
