"""What every solver shares: the options, the method registry and the budget sweep helper."""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, fields
from typing import Callable

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers.interrupt import catching, requested


def deadline_of(time_limit: float | None) -> float | None:
    """The ``time.perf_counter()`` value at which ``time_limit`` seconds from now run out."""
    return None if time_limit is None else time.perf_counter() + time_limit


def time_left(time_limit: float | None, began: float, least: float = 0.01) -> float | None:
    """Seconds left of ``time_limit`` counted from ``began`` (``time.perf_counter()``), at
    least ``least``; None without a limit; ``least`` once Ctrl-C asked the solve to stop
    (``interrupt.requested``: then no time is left, as for ``past``)."""
    if requested():
        return least
    return None if time_limit is None else max(least, time_limit - (time.perf_counter() - began))


def past(deadline: float | None) -> bool:
    """Whether ``deadline`` (from ``deadline_of``; None: no limit) has passed, or Ctrl-C asked
    the solve to stop (``interrupt.requested``)."""
    return requested() or (deadline is not None and time.perf_counter() > deadline)


def may_go_on(deadline: float | None, started: bool) -> bool:
    """Whether a step of a method may start: before ``deadline``, and past it only for the
    first step (``started`` False: nothing done yet, as a method's first schedule) unless
    Ctrl-C asked the solve to stop."""
    return not past(deadline) or not (started or requested())


def schedule_event(cost: float, bound: float, began: float) -> dict:
    """The ``SolveOptions.progress`` event of a schedule of ``cost`` found under ``bound``,
    ``began`` the method's start (``time.perf_counter()``); the gap is 0 where the cost is
    (every node may cost 0)."""
    return {"incumbent": cost, "bound": bound, "gap": (cost - bound) / cost if cost > 0 else 0.0,
            "time": time.perf_counter() - began}


NO_SCHEDULE_YET = "stopped before any schedule was found"
"""``details["reason"]`` of an "infeasible" Solution from a solver that hit its time limit (or
Ctrl-C) before it found any schedule: it proves nothing about the budget."""


@dataclass(frozen=True)
class SolveOptions:
    """Options of ``remat.solve``; each method reads the fields that apply to it."""

    time_limit: float | None = None
    """Wall-clock seconds a method may spend; it then returns its best schedule ("timeout")."""
    threads: int | None = None
    """Solver threads (MILP/LP/CP), and retention's searches: one in this process and one
    in a helper process per thread beyond it, at most the cores less one
    (``retention._helpers``; 2 in all where None); None lets the backends choose theirs."""
    seed: int = 0
    """Seed of every randomized step (randomized rounding, solver tie-breaking)."""
    mip_rel_gap: float = 0.0
    """Stop a MILP once (cost - bound) / cost is at most this; 0 proves optimality."""
    warm_start: bool = True
    """Start exact solvers from the best baseline schedule that fits."""
    initial: "Solution | None" = None
    """A schedule that fits, for exact solvers and retention to start from instead of running
    the baselines again (``auto`` passes its best so far). ``remat.solve`` simulates it again
    on the graph it solves, and refuses one of another size."""
    rounding_samples: int = 32
    """Randomized rounding: number of samples drawn."""
    progress: Callable[[dict], None] | None = None
    """Called with {"incumbent", "bound", "gap", "time"} as a long solve improves (``auto``
    adds "method", the method the news comes from; its time is from its own start)."""
    verbose: bool = False
    """Let the backend print its own log."""

    @classmethod
    def from_kwargs(cls, **kwargs) -> "SolveOptions":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown solve option(s) {', '.join(unknown)}; valid options: "
                            f"{', '.join(sorted(names))}")
        return cls(**kwargs)


SolverFn = Callable[[RematGraph, float, SolveOptions], Solution]

# name -> module; each module defines ``solve(graph, budget, options) -> Solution``.
# Imported lazily so that a missing optional backend only matters when its method is used.
_REGISTRY: dict[str, str] = {
    "checkpoint-all": "remat.solvers.checkpoint_all",
    "chen-sqrtn": "remat.solvers.chen_sqrtn",
    "chen-greedy": "remat.solvers.chen_greedy",
    "ap-sqrtn": "remat.solvers.ap_sqrtn",
    "ap-greedy": "remat.solvers.ap_greedy",
    "griewank": "remat.solvers.griewank",
    "lp-rounding": "remat.solvers.lp_rounding",
    "lp-randomized": "remat.solvers.lp_randomized",
    "milp": "remat.solvers.milp",
    "chain-dp": "remat.solvers.chain_dp",
    "retention": "remat.solvers.retention",
    "cpsat": "remat.solvers.cpsat",
    "cp-intervals": "remat.solvers.cp_intervals",
    "auto": "remat.solvers.auto",
}


CLASSIC = ("checkpoint-all", "chen-greedy", "ap-greedy", "chen-sqrtn", "ap-sqrtn", "griewank")
"""The classic baselines (milliseconds to a second)."""
BASELINES = CLASSIC + ("retention",)
"""The fast heuristics (the classic baselines, and ``retention``, the schedule of the retention
bound's knapsack); exact solvers warm-start from the best of them."""


def method_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def method_applies(name: str, graph: RematGraph) -> bool:
    """Whether method ``name`` handles this graph's shape (a module may define ``applies``)."""
    module = importlib.import_module(_REGISTRY[name]) if name in _REGISTRY else None
    check = getattr(module, "applies", None)
    return True if check is None else bool(check(graph))


def applicable(graph: RematGraph, names) -> list[str]:
    """``names`` less the methods that do not handle this graph's shape."""
    return [n for n in names if method_applies(n, graph)]


def expand_methods(spec: str, graph: RematGraph) -> list[str]:
    """``"all"``: every method but auto that handles ``graph``; else a comma-separated list of
    names, each checked (an unknown name raises ValueError listing the valid ones)."""
    if spec.strip() == "all":
        return [m for m in method_names() if m != "auto" and method_applies(m, graph)]
    names = [m.strip() for m in spec.split(",") if m.strip()]
    for name in names:
        solver(name)
    return names


def solver(name: str) -> SolverFn:
    """The solve function of ``name``; an unknown name raises ValueError listing valid ones."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(method_names())}")
    solve = importlib.import_module(_REGISTRY[name]).solve
    return _stoppable(solve)


def _stoppable(solve: SolverFn) -> SolverFn:
    """``solve`` within ``interrupt.catching``: Ctrl-C stops it early (every loop checking
    ``past`` ends, every HiGHS or CP-SAT run is cancelled) and it returns the best schedule
    found, marked by ``_stopped``."""
    def run(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
        with catching():
            return _stopped(solve(graph, budget, options))
    return run


def _stopped(result: Solution) -> Solution:
    """``result``, marked where Ctrl-C stopped its solve early (``interrupt.requested``):
    ``details["interrupted"]``; status "timeout" unless proven optimal or infeasible; "no
    schedule" unproven says it stopped first (``NO_SCHEDULE_YET``)."""
    if not requested():
        return result
    details = {**result.details, "interrupted": True}
    if result.status == "infeasible" and not result.proven_infeasible:
        details["reason"] = NO_SCHEDULE_YET
    status = result.status if result.status in ("optimal", "infeasible") else "timeout"
    return result.with_(status=status, details=details)
