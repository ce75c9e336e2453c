"""The plan cache (a second compile skips the solve; bad files are ignored with a warning) and
``step.explain()``."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # remat.runtime imports torch
pytestmark = pytest.mark.torch

import remat  # noqa: E402
from remat.runtime import cache as plan_cache  # noqa: E402
from remat.runtime.cache import PlanCacheWarning, cached_solve  # noqa: E402


@pytest.fixture
def counted_solve(monkeypatch):
    """Count the real solves made through the cache."""
    calls = []
    real = plan_cache.solve

    def solve(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_cache, "solve", solve)
    return calls


def only_file(directory):
    files = list(directory.iterdir())
    assert len(files) == 1, files
    return files[0]


def test_second_solve_is_a_hit_with_the_same_schedule(tmp_path, counted_solve):
    graph = remat.graphs.linear(10, unit=True)
    first = cached_solve(graph, "60%", "chen-greedy", cache=tmp_path)
    second = cached_solve(graph, "60%", "chen-greedy", cache=tmp_path)
    assert len(counted_solve) == 1
    assert (first.details["plan_cache"], second.details["plan_cache"]) == ("miss", "hit")
    assert np.array_equal(first.R, second.R) and np.array_equal(first.S, second.S)
    assert second.peak_memory == first.peak_memory and second.plan == first.plan
    assert only_file(tmp_path).suffix == ".json"  # no temporary file left behind


def test_key_depends_on_budget_method_graph_and_options(tmp_path, counted_solve):
    graph = remat.graphs.linear(10, unit=True)
    cached_solve(graph, "60%", "chen-greedy", cache=tmp_path)
    cached_solve(graph, "80%", "chen-greedy", cache=tmp_path)
    cached_solve(graph, "60%", "ap-greedy", cache=tmp_path)
    cached_solve(remat.graphs.linear(11, unit=True), "60%", "chen-greedy", cache=tmp_path)
    cached_solve(graph, "60%", "chen-greedy", cache=tmp_path, seed=3)
    assert len(counted_solve) == 5 and len(list(tmp_path.iterdir())) == 5


def test_profiled_costs_do_not_change_the_key_but_are_resimulated(tmp_path, counted_solve):
    graph = remat.graphs.linear(10, unit=True)
    noisy = remat.RematGraph(graph.names, graph.cost * 1.01, graph.mem, graph.deps,
                             graph.is_backward, static_mem=graph.static_mem)
    first = cached_solve(graph, "60%", "chen-greedy", cache=tmp_path, cost_model="profile")
    second = cached_solve(noisy, "60%", "chen-greedy", cache=tmp_path, cost_model="profile")
    assert len(counted_solve) == 1 and second.details["plan_cache"] == "hit"
    assert second.compute_cost == pytest.approx(first.compute_cost * 1.01)
    cached_solve(noisy, "60%", "chen-greedy", cache=tmp_path, cost_model="flops")
    assert len(counted_solve) == 2  # measured costs that do not vary are part of the key


@pytest.mark.parametrize("content", [
    "{not json", "[1, 2]", json.dumps({"format": "remat-graph/1"}),
    json.dumps({"format": "remat-plan/1", "key": "another", "solution": {}}),
])
def test_corrupt_or_foreign_files_are_ignored_with_a_warning(tmp_path, counted_solve, content):
    graph = remat.graphs.linear(8, unit=True)
    cached_solve(graph, "70%", "chen-greedy", cache=tmp_path)
    path = only_file(tmp_path)
    path.write_text(content)
    with pytest.warns(PlanCacheWarning, match="ignoring plan cache file"):
        again = cached_solve(graph, "70%", "chen-greedy", cache=tmp_path)
    assert again.details["plan_cache"] == "miss" and len(counted_solve) == 2
    json.loads(path.read_text())  # rewritten with a good plan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_solve(graph, "70%", "chen-greedy", cache=tmp_path).details["plan_cache"] == "hit"


def test_a_schedule_for_another_graph_is_rejected(tmp_path, counted_solve):
    graph = remat.graphs.linear(8, unit=True)
    cached_solve(graph, "70%", "chen-greedy", cache=tmp_path)
    path = only_file(tmp_path)
    doc = json.loads(path.read_text())
    other = cached_solve(remat.graphs.linear(6, unit=True), "80%", "chen-greedy", cache=False)
    doc["solution"] = json.loads(other.to_json())
    path.write_text(json.dumps(doc))
    with pytest.warns(PlanCacheWarning, match="ignoring"):
        again = cached_solve(graph, "70%", "chen-greedy", cache=tmp_path)
    assert again.R.shape == (graph.size, graph.size)


def test_cache_off_and_unwritable_directory(tmp_path, counted_solve):
    graph = remat.graphs.linear(8, unit=True)
    assert cached_solve(graph, "70%", "chen-greedy", cache=False).details["plan_cache"] == "off"
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(PlanCacheWarning, match="cannot write"):
        solution = cached_solve(graph, "70%", "chen-greedy", cache=blocker / "plans")
    assert solution.feasible


def test_default_directory_follows_the_environment(tmp_path, monkeypatch, counted_solve):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path / "plans"))
    assert plan_cache.default_cache_dir() == tmp_path / "plans"
    cached_solve(remat.graphs.linear(6, unit=True), "80%", "chen-greedy", cache=True)
    assert len(list((tmp_path / "plans").iterdir())) == 1


# ----- through remat.compile -----------------------------------------------------------------
def test_compile_twice_skips_the_solve_and_explains(tmp_path, counted_solve):
    from test_runtime import deep_mlp

    model, inputs, loss_fn = deep_mlp()
    first = remat.compile(model, inputs, loss_fn, budget="40%", method="griewank", cache=tmp_path)
    second = remat.compile(model, inputs, loss_fn, budget="40%", method="griewank", cache=tmp_path)
    assert len(counted_solve) == 1  # profiled costs differ between the two captures
    assert second.solution.details["plan_cache"] == "hit"
    assert np.array_equal(first.solution.R, second.solution.R)
    text = second.explain()
    assert "plan cache: hit" in text and "method 'griewank'" in text
    again = [i for i, n in enumerate(second.times_computed) if n > 1]
    assert again and f"{second.graph.names[again[0]]!r} x{second.times_computed[again[0]]}" in text
    assert f"Peak {remat.solvers.api.format_bytes(second.solution.peak_memory)}" in text
    assert "Random ops recomputed with their saved generator state: native_dropout" in text
    assert text.endswith(second.code.strip("\n")) and "def forward" in text
    assert "run_with_rng_state" in second.code


def test_key_depends_on_workspace(tmp_path, counted_solve):
    """Two graphs differing only in a node's workspace need their own plans; a graph without
    workspace keeps the key it had before workspaces existed (no "workspace" entry)."""
    graph = remat.graphs.linear(6, unit=True)
    busy = graph.with_workspace([0.0] * (graph.size - 1) + [2.0])
    budget = float(remat.schedule.checkpoint_all_peak(busy))
    assert plan_cache.plan_key(graph, budget, "milp", "unit", {}) != \
        plan_cache.plan_key(busy, budget, "milp", "unit", {})
    assert plan_cache.plan_key(graph, budget, "milp", "unit", {}) == \
        plan_cache.plan_key(graph.with_workspace([0.0] * graph.size), budget, "milp", "unit", {})
    cached_solve(graph, budget, "chen-greedy", cache=tmp_path)
    sol = cached_solve(busy, budget, "chen-greedy", cache=tmp_path)
    assert len(counted_solve) == 2 and sol.details["plan_cache"] == "miss"
    assert sol.peak_memory == remat.simulate(busy, sol.R, sol.S).peak_memory
