"""Searches beside the caller's, in helper processes (``remat.solvers.beside``), and
retention's use of them (``retention._searched``)."""
import inspect
import os
import time
from pathlib import Path

import numpy as np
import pytest

import remat
from remat.schedule import simulate
from remat.solvers import SolveOptions, auto, retention
from remat.solvers.beside import GRACE, Beside

TESTS = str(Path(__file__).parent)


@pytest.fixture
def targets(monkeypatch):
    """The helpers can import tests/beside_targets.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        TESTS, os.environ.get("PYTHONPATH")])))


def test_each_helper_runs_the_job_with_its_own_number(targets):
    helpers = Beside("beside_targets:sleep", {"seconds": 0.0}, 2)
    assert helpers.results(time.perf_counter() + 30) == [1, 2]


def test_a_helper_writing_to_stdout_still_gives_its_result(targets):
    helpers = Beside("beside_targets:noisy", {}, 1)
    assert helpers.results(time.perf_counter() + 30) == [1]


def test_a_helper_past_its_time_is_stopped_and_gives_nothing(targets):
    helpers = Beside("beside_targets:sleep", {"seconds": 60.0}, 1)
    began = time.perf_counter()
    assert helpers.results(began + 0.5) == []
    assert time.perf_counter() - began < 5
    assert all(proc.returncode is not None for proc in helpers.procs)


def test_a_stop_request_ends_the_wait_at_once(targets):
    """Ctrl-C (``interrupt.requested``, here ``stopped``) while waiting for a helper."""
    helpers = Beside("beside_targets:sleep", {"seconds": 60.0}, 1)
    began = time.perf_counter()
    assert helpers.results(began + 60, stopped=lambda: True) == []
    assert time.perf_counter() - began < 5


def test_a_failing_helper_warns_with_its_error_and_gives_nothing(targets):
    helpers = Beside("beside_targets:no_such_function", {}, 1)
    with pytest.warns(UserWarning, match="no_such_function"):
        assert helpers.results(time.perf_counter() + 30) == []


def test_a_job_that_cannot_start_warns_and_leaves_the_caller_alone(targets):
    with pytest.warns(UserWarning, match="no search beside this one"):
        helpers = Beside("beside_targets:sleep", {"seconds": lambda: 0}, 2)
    assert helpers.procs == [] and helpers.results(time.perf_counter() + 30) == []


def _start(graph, budget):
    """A start of retention's search: the first schedule of its knapsacks that fits."""
    plan = retention.Plan(graph)
    found = retention._fit(plan, budget, plan.own_costs(), time.perf_counter() + 10, None)[0]
    assert found is not None
    return found


def test_a_search_beside_returns_a_schedule_that_fits_no_dearer_than_its_start():
    graph = remat.graphs.random_dag(40, seed=1)
    budget = remat.parse_budget("50%", graph)
    start = _start(graph, budget)
    job = dict(graph=graph, budget=budget, best=start, start=None, seed=0,
               bound=-np.inf, wall_deadline=time.time() + 2.0)
    helpers = Beside("remat.solvers.retention:search_beside", job, 1)
    [found] = helpers.results(time.perf_counter() + 30)
    sim = simulate(graph, found[1], found[2])
    assert sim.peak_memory <= budget
    assert found[0] == pytest.approx(sim.compute_cost) and found[0] <= start[0]


def test_a_search_beside_runs_to_its_deadline_on_its_own_random_streams(monkeypatch):
    """The deadline crosses processes on the wall clock (``time.perf_counter`` is not
    shared); helper k's streams are [seed, k] and [seed + 1, k], not those of seed + k."""
    seen = {}

    def in_turn(plan, budget, best, start, deadline, seeds, threads, bound, report):
        seen.update(left=deadline - time.perf_counter(), seeds=seeds, threads=threads)
        return best

    monkeypatch.setattr(retention, "_in_turn", in_turn)
    graph = remat.graphs.random_dag(40, seed=1)
    retention.search_beside(graph, 1.0, (1.0, None, None, set()), None, seed=4, bound=0.0,
                            wall_deadline=time.time() + 3.0, helper=2)
    assert seen["left"] == pytest.approx(3.0, abs=0.5)
    assert seen["seeds"] == ([4, 2], [5, 2]) and seen["threads"] == 1


class _Cheaper:
    """Stands for ``Beside``: each helper returns a schedule cheaper than any (cost 0)."""
    made = []

    def __init__(self, target, job, count):
        self.target, self.job, self.count = target, job, count
        self.until, self.stopped = None, False
        _Cheaper.made.append(self)

    def results(self, until, stopped=lambda: False):
        self.until = until
        return [(0.0, None, None, set())] * self.count

    def stop(self):
        self.stopped = True


@pytest.mark.parametrize("threads,cores,seconds,helpers", [
    (None, 4, 1.0, 1), (3, 4, 1.0, 2), (3, 2, 1.0, 1), (1, 4, 1.0, 0), (None, 1, 1.0, 0),
    (None, 4, 0.2, 0)])
def test_retention_takes_the_cheapest_of_its_search_and_those_beside_it(
        monkeypatch, threads, cores, seconds, helpers):
    """One helper per thread beyond the caller's (2 where ``threads`` says nothing), no more
    than the cores left, with ``BESIDE_LEAST_SECONDS`` or more left; they get until the
    deadline and ``GRACE``, and their cheapest schedule is reported and wins."""
    monkeypatch.setattr(retention, "Beside", _Cheaper)
    monkeypatch.setattr(retention, "cores", lambda: cores)
    monkeypatch.setattr(retention, "BESIDE_LEAST_SECONDS", 0.5)
    _Cheaper.made = []
    graph = remat.graphs.random_dag(40, seed=1)
    budget = remat.parse_budget("50%", graph)
    start, seen = _start(graph, budget), []
    options = SolveOptions(threads=threads, seed=3)
    deadline = time.perf_counter() + seconds
    found = retention._searched(retention.Plan(graph), budget, start, None, deadline, options,
                                -np.inf, seen.append)
    assert len(_Cheaper.made) == min(helpers, 1)
    if not helpers:
        assert found[0] > 0.0
        return
    [made] = _Cheaper.made
    module, name = made.target.split(":")
    assert module == "remat.solvers.retention"
    inspect.signature(getattr(retention, name)).bind(**made.job, helper=1)
    assert made.count == helpers and made.job["seed"] == 3 and made.job["best"] is start
    assert made.job["wall_deadline"] - time.time() == pytest.approx(
        deadline - time.perf_counter(), abs=0.5)
    assert made.until == pytest.approx(deadline + GRACE) and made.stopped
    assert found[0] == 0.0 and seen[-1][0] == 0.0


class _Running:
    """Stands for chain-dp's recursion in a thread (``chain_dp.Ahead``), still running."""

    def running(self):
        return True


def test_auto_gives_retention_one_thread_while_chain_dps_recursion_runs(monkeypatch):
    """No search beside retention's on the core chain-dp's thread holds."""
    seen = []
    run = auto._run

    def recorded(name, graph, budget, options):
        seen.append((name, options.threads))
        return run(name, graph, budget, options)

    monkeypatch.setattr(auto, "_run", recorded)
    graph = remat.graphs.random_dag(40, seed=1)
    budget = remat.parse_budget("50%", graph)
    for ahead, threads in ((_Running(), 1), (None, None)):
        seen.clear()
        now = time.perf_counter()
        auto._run_methods(graph, budget, SolveOptions(time_limit=2.0), now, now + 2.0, None,
                          [], ahead)
        assert ("retention", threads) in seen
