"""The plan cache: solved schedules stored as JSON, so compiling a model again skips the solve.

A file is named by a hash of what determines the solution: the graph's structure and memory
(its costs too, unless they were profiled, which varies from run to run), the budget in
bytes, the method and its options. Files are written atomically. A corrupt, foreign or stale
file is ignored with a ``PlanCacheWarning`` and solved again, never a crash.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from pathlib import Path

from remat.errors import RematError
from remat.graph.core import RematGraph, _write_text
from remat.schedule.budget import parse_budget
from remat.schedule.solution import Solution
from remat.solvers.api import solve

PLAN_FORMAT = "remat-plan/1"
_UNHASHED_OPTIONS = ("progress", "verbose")


class PlanCacheWarning(UserWarning):
    """A plan cache file could not be used or written; remat solved again."""


def default_cache_dir() -> Path:
    """``$REMAT_CACHE_DIR``, else ``$XDG_CACHE_HOME/remat/plans`` (``~/.cache/remat/plans``)."""
    if os.environ.get("REMAT_CACHE_DIR"):
        return Path(os.environ["REMAT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "remat" / "plans"


def plan_key(graph: RematGraph, budget_bytes: float, method: str, cost_model: str,
             options: dict) -> str:
    """The hex digest naming a plan file."""
    doc = {"format": PLAN_FORMAT, "static_mem": graph.static_mem, "names": graph.names,
           "deps": graph.deps, "mem": graph.mem.tolist(), "backward": graph.is_backward.tolist(),
           "budget": float(budget_bytes), "method": method, "cost_model": cost_model,
           "options": {k: repr(v) for k, v in sorted(options.items())
                       if k not in _UNHASHED_OPTIONS}}
    if cost_model != "profile":
        doc["cost"] = graph.cost.tolist()
    if graph.has_workspace:  # absent otherwise, so keys of graphs without workspace stay
        doc["workspace"] = graph.workspace.tolist()
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def cached_solve(graph: RematGraph, budget, method: str = "auto", cache=True,
                 cost_model: str = "profile", **options) -> Solution:
    """``remat.solve`` through the plan cache.

    ``cache``: True (the default directory), False/None (no cache) or a directory path. The
    solution's ``details["plan_cache"]`` says "hit", "miss" or "off".
    """
    if not cache:
        return _tagged(solve(graph, budget, method, **options), "off")
    budget_bytes = parse_budget(budget, graph)
    directory = default_cache_dir() if cache is True else Path(cache)
    key = plan_key(graph, budget_bytes, method, cost_model, options)
    path = directory / f"{key}.json"
    if path.exists():
        found = _load(path, key, graph, budget_bytes)
        if found is not None:
            return _tagged(found, "hit")
    solution = solve(graph, budget, method, **options)
    if not solution.details.get("interrupted"):  # a solve Ctrl-C cut short is not the plan
        _store(path, key, solution)
    return _tagged(solution, "miss")


def _load(path: Path, key: str, graph: RematGraph, budget_bytes: float) -> Solution | None:
    """The cached solution re-checked against ``graph``, or None (with a warning)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a {PLAN_FORMAT!r} file")
        if doc.get("key") != key:
            raise ValueError("it was written for another graph, budget or method")
        stored = Solution.from_json(json.dumps(doc["solution"]))
        solution = _resimulated(stored, graph)
        if solution.peak_memory > budget_bytes * (1 + 1e-9):
            raise ValueError(f"its peak {solution.peak_memory:.0f} B exceeds the budget")
        return solution
    except (OSError, ValueError, KeyError, TypeError, RematError) as exc:
        warnings.warn(f"ignoring plan cache file {path}: {exc}; solving again", PlanCacheWarning,
                      stacklevel=3)
        return None


def _resimulated(stored: Solution, graph: RematGraph) -> Solution:
    """The stored schedule with its cost and peak recomputed on this graph (profiled costs
    change between runs; the simulator also rejects a schedule that does not fit the graph)."""
    if stored.R is None or stored.S is None:
        raise ValueError("it holds no schedule")
    solution = Solution.from_schedule(graph, stored.R, stored.S, stored.method, stored.status,
                                      stored.budget, lower_bound=stored.lower_bound,
                                      solve_time=stored.solve_time, min_budget=stored.min_budget)
    if not math.isclose(solution.compute_cost, stored.compute_cost, rel_tol=1e-9):
        # the costs changed (profiled again): the stored bound and optimality were proven for
        # the old costs, so claim only what still holds
        solution = Solution.from_schedule(
            graph, stored.R, stored.S, stored.method,
            "feasible" if stored.status == "optimal" else stored.status, stored.budget,
            solve_time=stored.solve_time, min_budget=stored.min_budget)
    return solution.with_(details=dict(stored.details))


def _store(path: Path, key: str, solution: Solution) -> None:
    doc = {"format": PLAN_FORMAT, "key": key, "solution": json.loads(solution.to_json())}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_text(path, json.dumps(doc))
    except OSError as exc:
        warnings.warn(f"cannot write plan cache file {path}: {exc}", PlanCacheWarning, stacklevel=3)


def _tagged(solution: Solution, state: str) -> Solution:
    return solution.with_(details={**solution.details, "plan_cache": state})
