"""Searches beside the caller's, in helper processes (``remat.solvers.beside``), and
retention's use of them (``retention._searched``)."""
import os
import time
from pathlib import Path

import numpy as np
import pytest

import remat
from remat.schedule import simulate
from remat.solvers import SolveOptions, retention
from remat.solvers.beside import Beside

TESTS = str(Path(__file__).parent)


@pytest.fixture
def targets(monkeypatch):
    """The helpers can import tests/beside_targets.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        TESTS, os.environ.get("PYTHONPATH")])))


def test_each_helper_runs_the_job_with_its_own_seed(targets):
    helpers = Beside("beside_targets:sleep", {"seconds": 0.0, "seed": 5}, 2)
    assert helpers.results(time.perf_counter() + 30) == [6, 7]


def test_a_helper_past_its_time_is_stopped_and_gives_nothing(targets):
    helpers = Beside("beside_targets:sleep", {"seconds": 60.0, "seed": 0}, 1)
    began = time.perf_counter()
    assert helpers.results(began + 0.5) == []
    assert time.perf_counter() - began < 5
    assert all(proc.returncode is not None for proc in helpers.procs)


def test_a_stop_request_ends_the_wait_at_once(targets):
    """Ctrl-C (``interrupt.requested``, here ``stopped``) while waiting for a helper."""
    helpers = Beside("beside_targets:sleep", {"seconds": 60.0, "seed": 0}, 1)
    began = time.perf_counter()
    assert helpers.results(began + 60, stopped=lambda: True) == []
    assert time.perf_counter() - began < 5


def test_a_failing_helper_warns_with_its_error_and_gives_nothing(targets):
    helpers = Beside("beside_targets:no_such_function", {"seed": 0}, 1)
    with pytest.warns(UserWarning, match="no_such_function"):
        assert helpers.results(time.perf_counter() + 30) == []


def test_a_job_that_cannot_start_warns_and_leaves_the_caller_alone(targets):
    with pytest.warns(UserWarning, match="no search beside this one"):
        helpers = Beside("beside_targets:sleep", {"seconds": lambda: 0, "seed": 0}, 2)
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
    [found] = Beside("remat.solvers.retention:search_beside", job, 1).results(
        time.perf_counter() + 30)
    sim = simulate(graph, found[1], found[2])
    assert sim.peak_memory <= budget
    assert found[0] == pytest.approx(sim.compute_cost) and found[0] <= start[0]


class _Cheaper:
    """Stands for ``Beside``: each helper returns a schedule cheaper than any (cost 0)."""
    made = []

    def __init__(self, target, job, count):
        self.job, self.count = job, count
        _Cheaper.made.append(self)

    def results(self, until, stopped=lambda: False):
        return [(0.0, None, None, set())] * self.count

    def stop(self):
        pass


@pytest.mark.parametrize("threads,seconds,helpers", [(None, 6.0, 1), (3, 6.0, 2), (1, 6.0, 0),
                                                     (None, 1.0, 0)])
def test_retention_takes_the_cheapest_of_its_search_and_those_beside_it(
        monkeypatch, threads, seconds, helpers):
    """One helper per thread beyond the caller's (2 where ``threads`` says nothing), with
    ``BESIDE_LEAST_SECONDS`` or more left; their cheapest schedule is reported and wins."""
    monkeypatch.setattr(retention, "Beside", _Cheaper)
    _Cheaper.made = []
    graph = remat.graphs.random_dag(40, seed=1)
    budget = remat.parse_budget("50%", graph)
    start, seen = _start(graph, budget), []
    options = SolveOptions(threads=threads, seed=3)
    found = retention._searched(retention.Plan(graph), budget, start, None,
                                time.perf_counter() + seconds, options, -np.inf, seen.append)
    assert len(_Cheaper.made) == min(helpers, 1)
    if helpers:
        [made] = _Cheaper.made
        assert made.count == helpers and made.job["seed"] == 3 and made.job["best"] is start
        assert found[0] == 0.0 and seen[-1][0] == 0.0
    else:
        assert found[0] > 0.0
