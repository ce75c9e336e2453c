"""``Solution``: a solver's result, always checked by the one simulator."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from remat.errors import InvalidScheduleError
from remat.graph.core import RematGraph, _load_json, _number, _write_text
from remat.schedule.simulate import simulate

SOLUTION_FORMAT = "remat-solution/1"
STATUSES = ("optimal", "feasible", "timeout", "infeasible")


@dataclass(frozen=True, eq=False)
class Solution:
    """A schedule and what it costs.

    ``overhead`` is ``compute_cost / sum(cost)`` (1.0: nothing recomputed). ``lower_bound`` is a
    proven lower bound on the compute cost of any schedule within ``budget`` (at least the
    total cost of the graph). For status ``"infeasible"``, R and S are None and ``min_budget``
    says the smallest budget the method can meet; ``proven_infeasible`` says whether no
    schedule of any method can fit.
    """

    method: str
    status: str
    budget: float | None
    R: np.ndarray | None
    S: np.ndarray | None
    compute_cost: float
    peak_memory: float
    overhead: float
    lower_bound: float
    solve_time: float
    plan: list[tuple[str, int]] = field(default_factory=list, repr=False)
    min_budget: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_schedule(cls, graph: RematGraph, R, S, method: str, status: str,
                      budget: float | None, lower_bound: float | None = None,
                      solve_time: float = 0.0, min_budget: float | None = None,
                      **details) -> "Solution":
        """Check ``R, S`` with the simulator and wrap them; raises if the schedule is invalid."""
        _check_status(status)
        sim = simulate(graph, R, S)
        total = graph.total_cost
        return cls(method=method, status=status, budget=budget, R=np.asarray(R, dtype=bool),
                   S=np.asarray(S, dtype=bool), compute_cost=sim.compute_cost,
                   peak_memory=sim.peak_memory,
                   overhead=sim.compute_cost / total if total > 0 else 1.0,
                   lower_bound=_bound(graph, lower_bound, sim.compute_cost),
                   solve_time=float(solve_time), plan=sim.plan, min_budget=min_budget,
                   details=dict(details))

    def relabelled(self, graph: RematGraph, method: str, status: str, budget: float | None,
                   lower_bound: float | None = None, solve_time: float = 0.0,
                   min_budget: float | None = None, **details) -> "Solution":
        """This schedule, checked by the simulator when it was made, as another method's
        result (``auto``'s choice): no second simulation (0.2 s at T = 1025)."""
        if not self.feasible:
            raise ValueError("relabelled: needs a schedule")
        _check_status(status)
        return replace(self, method=method, status=status, budget=budget,
                       lower_bound=_bound(graph, lower_bound, self.compute_cost),
                       solve_time=float(solve_time), min_budget=min_budget,
                       details=dict(details))

    @classmethod
    def infeasible(cls, graph: RematGraph, method: str, budget: float | None,
                   min_budget: float | None, solve_time: float = 0.0, **details) -> "Solution":
        """No schedule of this method fits ``budget``."""
        return cls(method=method, status="infeasible", budget=budget, R=None, S=None,
                   compute_cost=float("nan"), peak_memory=float("nan"), overhead=float("nan"),
                   lower_bound=graph.total_cost, solve_time=float(solve_time), plan=[],
                   min_budget=min_budget, details=dict(details))

    @property
    def feasible(self) -> bool:
        return self.status != "infeasible"

    @property
    def proven_infeasible(self) -> bool:
        """No schedule at all fits the budget, proven (``details["proven"]``: the exact MILP or
        CP model, or the LP relaxation, is infeasible, or the budget is below the least possible
        peak). Otherwise "infeasible" says only that this method found no schedule."""
        return self.status == "infeasible" and bool(self.details.get("proven"))

    @property
    def gap(self) -> float | None:
        """Relative gap between the cost and the proven bound (0.0: proven optimal)."""
        if not self.feasible or self.compute_cost <= 0:
            return None
        return max(0.0, (self.compute_cost - self.lower_bound) / self.compute_cost)

    def with_(self, **changes) -> "Solution":
        return replace(self, **changes)

    # ----- JSON --------------------------------------------------------------------------
    def to_json(self, path: str | os.PathLike | None = None, indent: int | None = None) -> str:
        import json

        doc = {"format": SOLUTION_FORMAT, "method": self.method, "status": self.status,
               "budget": _maybe(self.budget), "compute_cost": _maybe(self.compute_cost),
               "peak_memory": _maybe(self.peak_memory), "overhead": _maybe(self.overhead),
               "lower_bound": _maybe(self.lower_bound), "solve_time": self.solve_time,
               "min_budget": _maybe(self.min_budget), "details": self.details,
               "T": None if self.R is None else int(self.R.shape[0]),
               "R": _rows(self.R), "S": _rows(self.S), "plan": [list(p) for p in self.plan]}
        text = json.dumps(doc, indent=indent, default=_plain)
        if path is not None:
            _write_text(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str | os.PathLike) -> "Solution":
        """Load a ``remat-solution/1`` document. Never executes code."""
        doc = _load_json(text_or_path, SOLUTION_FORMAT, InvalidScheduleError)
        try:
            size = doc["T"]
            R, S = _matrix(doc["R"], size), _matrix(doc["S"], size)
            return cls(method=str(doc["method"]), status=str(doc["status"]),
                       budget=_opt(doc.get("budget")), R=R, S=S,
                       compute_cost=_num(doc["compute_cost"]), peak_memory=_num(doc["peak_memory"]),
                       overhead=_num(doc["overhead"]), lower_bound=_num(doc["lower_bound"]),
                       solve_time=float(doc.get("solve_time", 0.0)),
                       plan=[(str(a), int(i)) for a, i in doc.get("plan", [])],
                       min_budget=_opt(doc.get("min_budget")), details=dict(doc.get("details") or {}))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InvalidScheduleError(f"solution JSON is malformed: {exc!r}") from exc

    def check(self, graph: RematGraph) -> None:
        """Re-simulate against ``graph``; raises InvalidScheduleError if anything disagrees."""
        if self.R is None:
            return
        sim = simulate(graph, self.R, self.S)
        if not np.isclose(sim.peak_memory, self.peak_memory) or \
                not np.isclose(sim.compute_cost, self.compute_cost):
            raise InvalidScheduleError(
                f"solution says peak {self.peak_memory:.6g} B and cost {self.compute_cost:.6g}, "
                f"the simulator finds {sim.peak_memory:.6g} B and {sim.compute_cost:.6g}: it was "
                "made for another graph")


def _check_status(status: str) -> None:
    """A result with a schedule is "optimal", "feasible" or "timeout"."""
    if status not in STATUSES[:3]:
        raise ValueError(f"status must be one of {STATUSES[:3]} for a schedule, got {status!r}")


def _bound(graph: RematGraph, lower_bound: float | None, cost: float) -> float:
    """The bound a schedule of ``cost`` reports: every node once when none is given, never
    below 0 nor above the cost."""
    bound = graph.total_cost if lower_bound is None else max(float(lower_bound), 0.0)
    return min(bound, cost)


def _rows(matrix) -> list[list[int]] | None:
    if matrix is None:
        return None
    return [np.flatnonzero(row).tolist() for row in matrix]


def _matrix(rows, size) -> np.ndarray | None:
    if rows is None:
        return None
    out = np.zeros((int(size), int(size)), dtype=bool)
    for t, row in enumerate(rows):
        out[t, row] = True
    return out


def _maybe(value):
    if value is None:
        return None
    value = float(value)
    return None if value != value else _number(value)


def _num(value) -> float:
    return float("nan") if value is None else float(value)


def _opt(value) -> float | None:
    return None if value is None else float(value)


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
